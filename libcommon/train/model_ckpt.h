/* model_ckpt.h: a GPT model's weights from a checkpoint (shared by mt-train's --load and mt-eval). */
#ifndef MT_TRAIN_MODEL_CKPT_H
#define MT_TRAIN_MODEL_CKPT_H

#include "kernels.h"
#include "model/gpt.h"
#include "train/checkpoint.h"

/* Reads every tensor of the model from the checkpoint's model file (names and shapes must match), fails
 * on tensors the model does not have, and copies the weights to the device. 0, or -1 with e naming the file. */
int mt_gpt_load_weights(mt_gpt *m, mtk *k, mt_ckpt_reader *r, mt_err *e);

#endif
