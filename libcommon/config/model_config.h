/* model_config.h: the model config (model/gpt.h's mt_gpt_config) of mt-train's flags, the one
 * translation that mt-train, its dry run and every program that opens a checkpoint use.
 */
#ifndef MT_CONFIG_MODEL_CONFIG_H
#define MT_CONFIG_MODEL_CONFIG_H

#include <stdint.h>

#include "config/train_args.h"
#include "model/gpt.h"

/* The model config of the args with the tokenizer's vocab_size (padded by --make-vocab-size-divisible-by);
 * not checked (mt_gpt_config_check). */
mt_gpt_config mt_gpt_config_from_args(const mt_train_args *a, int64_t vocab_size);

#endif
