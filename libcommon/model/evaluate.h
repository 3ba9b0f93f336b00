/* evaluate.h: forward-only loss over a split, as Megatron's evaluate() (spec 4.10).
 *
 * iters global batches (each num_micro micro-batches of the batch's size) starting at the split's
 * sample *consumed, which advances by the global batch per iteration; iters < 0 evaluates every whole
 * micro-batch of the split from *consumed on. The loss is token-weighted: sum of masked token losses
 * over the sum of the mask (Megatron-Core's reduction).
 */
#ifndef MT_MODEL_EVALUATE_H
#define MT_MODEL_EVALUATE_H

#include <stdint.h>

#include "data/gpt_dataset.h"
#include "model/gpt.h"
#include "data/batch.h"

typedef struct mt_eval_result {
    double loss;       /* sum / tokens */
    double loss_sum;   /* sum of masked token losses */
    double tokens;     /* sum of the loss mask */
    int64_t samples;
} mt_eval_result;

int mt_evaluate(mt_gpt_ctx *m, mt_batch *b, const mt_gpt_data *d, int split, int64_t *consumed, int64_t iters,
                int num_micro, mt_eval_result *r, mt_err *e);

#endif
