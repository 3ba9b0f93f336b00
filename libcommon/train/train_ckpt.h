/* train_ckpt.h: a run's checkpoint: the model's tensors, AdamW's moments and meta.json (args, iteration,
 * consumed samples, FLOPs, the scheduler, the optimizer, the RNG and the loss scaler), saved from and
 * restored into an mt_trainer in Megatron's layout (checkpoint.h has the files; ckpt_write.h the save).
 */
#ifndef MT_TRAIN_TRAIN_CKPT_H
#define MT_TRAIN_TRAIN_CKPT_H

#include <stdio.h>

#include "train/ckpt_write.h"
#include "train/trainer.h"
#include "util/err.h"

/* Loads --load's latest checkpoint: checks that its args describe this model, reads the weights and,
 * unless --finetune, the iteration, consumed samples, FLOPs, the scheduler (Megatron's _check_and_set
 * with --override-opt_param-scheduler / --use-checkpoint-opt_param-scheduler) and, unless
 * --no-load-optim, AdamW's step and moments; every number of meta.json checked for type and range.
 * Prints Megatron's "loading checkpoint ..." lines on log. 0 when loaded, 1 when --load has no
 * checkpoint (no tracker file; an error with --exit-on-missing-checkpoint), -1 with e set. */
int mt_trainer_load(mt_trainer *t, FILE *log, mt_err *e);

#endif
