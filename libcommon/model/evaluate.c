/* evaluate.c: forward-only validation and test loss over a split's samples. */
#include "model/evaluate.h"

#include <math.h>

int mt_evaluate(mt_gpt_ctx *m, mt_batch *b, const mt_gpt_data *d, int split, int64_t *consumed, int64_t iters,
                int num_micro, mt_eval_result *r, mt_err *e)
{
    r->loss = r->loss_sum = r->tokens = 0;
    r->samples = 0;
    const mt_gpt_split_data *sp = &d->split[split];
    if (!sp->present) return mt_err_set(e, "the %s split is empty (see --split)", mt_split_names[split]);
    int64_t total_micro = iters < 0 ? (sp->length - *consumed) / b->B : iters * num_micro;
    mt_gpt_set_dropout(m, 0, 0);
    for (int64_t i = 0; i < total_micro; i++) {
        if (mt_batch_read(b, d, split, *consumed, e)) return -1;
        mt_gpt_loss l;
        if (mt_gpt_forward(m, b->tokens, b->targets, b->loss_mask, b->B, b->T, NULL, &l, e)) return -1;
        r->loss_sum += l.sum;
        r->tokens += l.count;
        *consumed += b->B;
        r->samples += b->B;
    }
    r->loss = r->tokens > 0 ? r->loss_sum / r->tokens : NAN;
    return 0;
}
