/* pipeline.c: the 1F1B schedule of one step, forward-only evaluation, and the tied embeddings'
 * gradient exchange of a pipeline stage (see pipeline.h). */
#include "train/pipeline.h"

#include <stdlib.h>

/* The p2p element type of the model's activations. */
static mt_cdtype act_type(const mt_trainer *t)
{
    mtk_dtype d = mtk_act_dtype(t->k);
    return d == MTK_BF16 ? MT_C_BF16 : d == MTK_F16 ? MT_C_F16 : MT_C_F32;
}

/* One batched exchange with the neighbouring stages (NULL: not part of it; the pieces that have no
 * neighbour on this stage are dropped): send_fwd to the next stage, recv_bwd from it, send_bwd to the
 * previous stage, recv_fwd from it; n elements each. */
static int exchange(mt_trainer *t, void *send_fwd, void *recv_bwd, void *send_bwd, void *recv_fwd, size_t n,
                    mt_err *e)
{
    if (t->pp_size == 1) return 0;
    int next = t->pp_rank + 1 < t->pp_size, prev = t->pp_rank > 0;
    mt_cdtype ty = act_type(t);
    mt_p2p ops[4];
    int k = 0;
    if (next && send_fwd) ops[k++] = (mt_p2p){1, send_fwd, n, ty, t->pp_rank + 1};
    if (next && recv_bwd) ops[k++] = (mt_p2p){0, recv_bwd, n, ty, t->pp_rank + 1};
    if (prev && send_bwd) ops[k++] = (mt_p2p){1, send_bwd, n, ty, t->pp_rank - 1};
    if (prev && recv_fwd) ops[k++] = (mt_p2p){0, recv_fwd, n, ty, t->pp_rank - 1};
    if (!k) return 0;
    if (mtk_sync(t->k, e)) return -1;   /* the buffers sent are complete */
    return mt_p2p_batch(t->dev_pp, ops, k, e) ? mt_err_prefix(e, "pipeline stage %d", t->pp_rank) : 0;
}

/* Reads micro-batch m of the batch starting at sample first into t->batch. */
static int read_micro(mt_trainer *t, int split, int64_t first, int m, mt_err *e)
{
    int64_t s = mt_trainer_micro_first(t, first, m);
    if (mt_batch_read(&t->batch, &t->data, split, s, e)) return -1;
    if (t->trace && split == MT_SPLIT_TRAIN)
        fprintf(t->trace, "%lld %lld %d\n", (long long)t->iteration + 1, (long long)s, t->batch.B);
    return 0;
}

static size_t stage_numel(const mt_trainer *t) { return mt_gpt_stage_numel(t->model, t->batch.B, t->batch.T); }

/* The forward pass of micro-batch m in its context (its input received already). */
static int forward(mt_trainer *t, int m, double ls, mt_step_result *r, mt_err *e)
{
    mt_gpt_ctx *x = t->ctxs[m % t->nctx];
    if (read_micro(t, MT_SPLIT_TRAIN, t->consumed_train, m, e)) return -1;
    mt_gpt_set_dropout(x, 1, mt_trainer_dropout_key(t, t->iteration, m * t->dp_size + t->dp_rank));
    mt_gpt_loss l;
    if (mt_gpt_forward(x, t->batch.tokens, t->batch.targets, t->batch.loss_mask, t->batch.B, t->batch.T, NULL, &l, e))
        return -1;
    /* each micro-batch's mean loss weighs 1 / (all ranks' micro-batches), as Megatron averages them
     * (1 / num_micro in the loss, 1 / dp on the gradients) */
    int total_micro = t->num_micro * t->dp_size;
    t->ctx_scale[m % t->nctx] = l.count > 0 ? (double)(1.0f / (float)total_micro) / l.count * ls : 0.0;
    r->loss_sum += l.sum;
    r->tokens += l.count;
    return 0;
}

static int backward(mt_trainer *t, int m, mt_err *e)
{
    return mt_gpt_backward(t->ctxs[m % t->nctx], t->ctx_scale[m % t->nctx], e);
}

static void *ctx_in(mt_trainer *t, int m) { return mt_gpt_stage_input(t->ctxs[m % t->nctx]); }
static void *ctx_out(mt_trainer *t, int m) { return mt_gpt_stage_output(t->ctxs[m % t->nctx]); }
static void *ctx_grad(mt_trainer *t, int m) { return mt_gpt_stage_grad(t->ctxs[m % t->nctx]); }

static int run_1f1b(mt_trainer *t, mt_step_result *r, mt_err *e)
{
    int M = t->num_micro, P = t->pp_size, s = t->pp_rank;
    int warmup = P - s - 1 < M ? P - s - 1 : M, steady = M - warmup;
    double ls = t->scaler.scale;   /* 1.0 in fp32 and bf16: the products are then exact */
    int f = 0, b = 0;              /* the next micro-batch to forward, to backward */
    size_t n = mt_gpt_stage_numel(t->model, t->a.micro_batch_size, t->a.seq_length);
    for (int i = 0; i < warmup; i++, f++)
        if (exchange(t, NULL, NULL, NULL, ctx_in(t, f), n, e) || forward(t, f, ls, r, e) ||
            exchange(t, ctx_out(t, f), NULL, NULL, NULL, stage_numel(t), e))
            return -1;
    if (steady > 0 && exchange(t, NULL, NULL, NULL, ctx_in(t, f), n, e)) return -1;
    for (int i = 0; i < steady; i++, f++, b++) {
        if (forward(t, f, ls, r, e) || exchange(t, ctx_out(t, f), ctx_grad(t, b), NULL, NULL, stage_numel(t), e) ||
            backward(t, b, e))
            return -1;
        /* the context of micro-batch b is free again: f + 1 reuses it */
        if (exchange(t, NULL, NULL, ctx_grad(t, b), i + 1 < steady ? ctx_in(t, f + 1) : NULL, n, e)) return -1;
    }
    for (int i = 0; i < warmup; i++, b++)
        if (exchange(t, NULL, ctx_grad(t, b), NULL, NULL, n, e) || backward(t, b, e) ||
            exchange(t, NULL, NULL, ctx_grad(t, b), NULL, n, e))
            return -1;
    return 0;
}

int mt_pipeline_train(mt_trainer *t, mt_step_result *r, mt_err *e)
{
    int rc = run_1f1b(t, r, e);
    for (int i = 0; i < t->nctx; i++) mt_gpt_set_dropout(t->ctxs[i], 0, 0);
    return rc;
}

int mt_pipeline_eval(mt_trainer *t, int split, int64_t first, double *loss_sum, double *tokens, mt_err *e)
{
    mt_gpt_ctx *x = t->ctxs[0];
    mt_gpt_set_dropout(x, 0, 0);
    size_t n = mt_gpt_stage_numel(t->model, t->a.micro_batch_size, t->a.seq_length);
    for (int m = 0; m < t->num_micro; m++) {
        if (read_micro(t, split, first, m, e) || exchange(t, NULL, NULL, NULL, mt_gpt_stage_input(x), n, e))
            return -1;
        mt_gpt_loss l;
        if (mt_gpt_forward(x, t->batch.tokens, t->batch.targets, t->batch.loss_mask, t->batch.B, t->batch.T, NULL, &l, e) ||
            exchange(t, mt_gpt_stage_output(x), NULL, NULL, NULL, stage_numel(t), e))
            return -1;
        *loss_sum += l.sum;
        *tokens += l.count;
    }
    return 0;
}

int mt_pipeline_tied_grads(mt_trainer *t, mt_err *e)
{
    int ti = mt_gpt_tied_copy(t->model);
    if (ti < 0) return 0;
    const mt_gpt_tensor *x = mt_gpt_tensor_at(t->model, ti);
    if (mt_all_reduce(t->dev_emb, mt_gpt_grads(t->model) + x->offset, x->numel, MT_C_F32, e))
        return mt_err_prefix(e, "the word embeddings' gradients of the first and the last stage");
    return 0;
}
