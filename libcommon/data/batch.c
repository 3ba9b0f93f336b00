/* batch.c: reads micro-batches of GPT samples (inputs, targets, loss mask) for mt-train and mt-eval. */
#include "data/batch.h"

#include <stdlib.h>

#include "util/err.h"

void mt_batch_init(mt_batch *b, int B, int T, int64_t vocab_size, int64_t eod, bool eod_mask_loss)
{
    b->B = B;
    b->T = T;
    b->tokens = mt_xcalloc((size_t)B * T, sizeof *b->tokens);
    b->targets = mt_xcalloc((size_t)B * T, sizeof *b->targets);
    b->loss_mask = mt_xcalloc((size_t)B * T, sizeof *b->loss_mask);
    b->raw = mt_xcalloc((size_t)T + 1, sizeof *b->raw);
    b->mask_sum = 0;
    b->vocab_size = vocab_size;
    b->eod = eod;
    b->eod_mask_loss = eod_mask_loss;
}

void mt_batch_free(mt_batch *b)
{
    free(b->tokens);
    free(b->targets);
    free(b->loss_mask);
    free(b->raw);
    b->tokens = b->targets = NULL;
    b->loss_mask = NULL;
    b->raw = NULL;
}

int mt_batch_read(mt_batch *b, const mt_gpt_data *d, int split, int64_t first, mt_err *e)
{
    const mt_gpt_split_data *sp = &d->split[split];
    if (!sp->present) return mt_err_set(e, "the %s split is empty (see --split)", mt_split_names[split]);
    if (first < 0 || first + b->B > sp->length)
        return mt_err_set(e, "%s samples %lld..%lld requested, the split has %lld", mt_split_names[split],
                          (long long)first, (long long)(first + b->B - 1), (long long)sp->length);
    int T = b->T;
    b->mask_sum = 0;
    for (int s = 0; s < b->B; s++) {
        int64_t n = mt_gpt_data_sample(d, split, first + s, b->raw, e);
        if (n < 0) return -1;
        for (int t = 0; t <= T; t++) {
            int64_t id = b->raw[t];
            if (id >= b->vocab_size) {
                int c;
                int64_t j;
                mt_gpt_data_locate(d, split, first + s, &c, &j);
                return mt_err_set(e, "%s: token id %lld in %s sample %lld is outside the vocabulary (size %lld): "
                                     "wrong --vocab-file or --vocab-size?",
                                  d->src[c].prefix, (long long)id, mt_split_names[split], (long long)(first + s),
                                  (long long)b->vocab_size);
            }
        }
        for (int t = 0; t < T; t++) {
            int64_t in = b->raw[t], out = b->raw[t + 1];
            size_t i = (size_t)s * T + t;
            float m = 1.0f;
            if (in < 0 || out < 0) m = 0.0f;
            if (b->eod_mask_loss && in == b->eod) m = 0.0f;
            b->tokens[i] = in < 0 ? 0 : (int32_t)in;
            b->targets[i] = out < 0 ? 0 : (int32_t)out;
            b->loss_mask[i] = m;
            b->mask_sum += m;
        }
    }
    return 0;
}
