/* batch.h: micro-batches for the model from the GPT dataset, in Megatron's sample order.
 *
 * Sample ids follow MegatronPretrainingSampler (spec 3.12) with one data-parallel rank: iteration
 * taking global batch G from consumed samples c reads, for micro-batch m of size B, the split's samples
 * c + m*B .. c + m*B + B - 1. Each sample is seq_length + 1 tokens: inputs are the first T, targets the
 * last T. The loss mask is 1 except where the input is the end-of-document token under
 * --eod-mask-loss (as Megatron's get_ltor_masks_and_position_ids) and past the end of the data.
 */
#ifndef MT_DATA_BATCH_H
#define MT_DATA_BATCH_H

#include <stdbool.h>
#include <stdint.h>

#include "data/gpt_dataset.h"

typedef struct mt_batch {
    int B, T;
    int32_t *tokens, *targets;   /* [B, T] host */
    float *loss_mask;            /* [B, T] */
    int64_t *raw;                /* T + 1 scratch */
    double mask_sum;
    int64_t vocab_size, eod;     /* ids must be < vocab_size; eod < 0: none */
    bool eod_mask_loss;
} mt_batch;

void mt_batch_init(mt_batch *b, int B, int T, int64_t vocab_size, int64_t eod, bool eod_mask_loss);
void mt_batch_free(mt_batch *b);
/* Fills b with samples first .. first + b->B - 1 of split. -1 with e set for ids out of the split or
 * tokens outside the vocabulary (naming the dataset). */
int mt_batch_read(mt_batch *b, const mt_gpt_data *d, int split, int64_t first, mt_err *e);

#endif
