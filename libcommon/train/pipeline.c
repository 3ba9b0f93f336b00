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

/* A training forward pass of t->batch in x without waiting: the losses (when x has the output layer)
 * stay on the device in the step's next loss slot, added to the loss sum at the step's end. */
static int train_forward(mt_trainer *t, mt_gpt_ctx *x, int has_loss, mt_gpt_loss *l, mt_err *e)
{
    float *dl = NULL;
    if (has_loss && !(dl = mt_trainer_loss_slot(t, t->batch.loss_mask, t->batch.B * t->batch.T, e))) return -1;
    return mt_gpt_forward_async(x, t->batch.tokens, t->batch.targets, t->batch.loss_mask, t->batch.B, t->batch.T, dl,
                                l, e);
}

static size_t stage_numel(const mt_trainer *t) { return mt_gpt_stage_numel(t->model, t->batch.B, t->batch.T); }

/* The forward pass of micro-batch m in its context (its input received already). */
static int forward(mt_trainer *t, int m, double ls, mt_step_result *r, mt_err *e)
{
    mt_gpt_ctx *x = t->ctxs[m % t->nctx];
    if (read_micro(t, MT_SPLIT_TRAIN, t->consumed_train, m, e)) return -1;
    mt_gpt_set_dropout(x, 1, mt_trainer_dropout_key(t, t->iteration, m * t->dp_size + t->dp_rank));
    mt_gpt_loss l;
    if (train_forward(t, x, t->pp_rank == t->pp_size - 1, &l, e)) return -1;
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

static int run_schedule(mt_trainer *t, mt_step_result *r, int dry, mt_err *e);
static int run_interleaved(mt_trainer *t, mt_step_result *r, mt_err *e) { return run_schedule(t, r, 0, e); }
static int eval_interleaved(mt_trainer *t, int split, int64_t first, double *loss_sum, double *tokens, mt_err *e);

int mt_pipeline_train(mt_trainer *t, mt_step_result *r, mt_err *e)
{
    int rc = t->vp > 1 ? run_interleaved(t, r, e) : run_1f1b(t, r, e);
    for (int i = 0; i < t->nctx; i++) mt_gpt_set_dropout(t->ctxs[i], 0, 0);
    return rc;
}

int mt_pipeline_eval(mt_trainer *t, int split, int64_t first, double *loss_sum, double *tokens, mt_err *e)
{
    if (t->vp > 1) return eval_interleaved(t, split, first, loss_sum, tokens, e);
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

/* ---- the interleaved schedule (model chunks, Megatron's virtual pipeline) ---- */

/* Virtual micro-batch k of the M x vp of a step: its model chunk (forward order: groups of pp
 * micro-batches go through chunk 0, 1, ...; backward: the chunks in reverse) and its micro-batch. */
static int chunk_of(const mt_trainer *t, int k, int forward)
{
    int P = t->pp_size, v = t->vp, c = ((k % (P * v) + P * v) % (P * v)) / P;   /* k may be negative: Python's modulo */
    return forward ? c : v - 1 - c;
}
static int micro_of(const mt_trainer *t, int k) { return (k / (t->pp_size * t->vp)) * t->pp_size + k % t->pp_size; }

/* FIFOs of context indices per chunk: inputs received and not yet forwarded; micro-batches forwarded and
 * not yet gone back through (with the number of output gradients received for them). */
typedef struct ivq {
    int *q, head, tail;
} ivq;
typedef struct isched {
    ivq *pending, *inflight;
    int *grads;              /* output gradients received per chunk, for inflight[c] from its head */
    int to_free;             /* the context of the last backward, free once its gradient is sent */
    double ls;
    mt_step_result *r;
    int dry;                 /* only the contexts' bookkeeping (mt_pipeline_contexts_replayed) */
} isched;

static void q_push(ivq *q, int x) { q->q[q->tail++] = x; }
static int q_pop(ivq *q) { return q->q[q->head++]; }

/* A context of chunk c holding nothing (made when there is none). -1 with e set. */
static int acquire(mt_trainer *t, int c, int dry, mt_err *e)
{
    for (int i = 0; i < t->nctx; i++)
        if (!t->ctx_busy[i] && t->ctx_chunk[i] == c) {
            t->ctx_busy[i] = 1;
            return i;
        }
    mt_gpt_ctx *x = dry ? NULL : mt_gpt_ctx_new_chunk(t->model, c, t->a.micro_batch_size, e);
    if (!x && !dry) return -1;
    int n = t->nctx++;
    t->ctxs = mt_xrealloc(t->ctxs, (size_t)t->nctx * sizeof *t->ctxs);
    t->ctx_scale = mt_xrealloc(t->ctx_scale, (size_t)t->nctx * sizeof *t->ctx_scale);
    t->ctx_busy = mt_xrealloc(t->ctx_busy, (size_t)t->nctx * sizeof *t->ctx_busy);
    t->ctx_chunk = mt_xrealloc(t->ctx_chunk, (size_t)t->nctx * sizeof *t->ctx_chunk);
    t->ctxs[n] = x, t->ctx_busy[n] = 1, t->ctx_chunk[n] = c, t->ctx_scale[n] = 0;
    return n;
}

static int first_virtual(const mt_trainer *t, int c) { return t->pp_rank == 0 && c == 0; }
static int last_virtual(const mt_trainer *t, int c) { return t->pp_rank == t->pp_size - 1 && c == t->vp - 1; }

/* The forward pass of virtual micro-batch k; its context index, or -1. */
static int iforward(mt_trainer *t, isched *s, int k, mt_err *e)
{
    int c = chunk_of(t, k, 1), m = micro_of(t, k);
    int i = first_virtual(t, c) ? acquire(t, c, s->dry, e) : q_pop(&s->pending[c]);
    if (i < 0) return -1;
    if (s->dry) {
        q_push(&s->inflight[c], i);
        return i;
    }
    mt_gpt_ctx *x = t->ctxs[i];
    /* the batch of micro-batch m (traced once, by its first chunk) */
    if (c == 0 ? read_micro(t, MT_SPLIT_TRAIN, t->consumed_train, m, e)
               : mt_batch_read(&t->batch, &t->data, MT_SPLIT_TRAIN, mt_trainer_micro_first(t, t->consumed_train, m), e))
        return -1;
    mt_gpt_set_dropout(x, 1, mt_trainer_dropout_key(t, t->iteration, m * t->dp_size + t->dp_rank));
    mt_gpt_loss l;
    if (train_forward(t, x, last_virtual(t, c), &l, e)) return -1;
    int total_micro = t->num_micro * t->dp_size;
    t->ctx_scale[i] = l.count > 0 ? (double)(1.0f / (float)total_micro) / l.count * s->ls : 0.0;
    s->r->loss_sum += l.sum;
    s->r->tokens += l.count;
    q_push(&s->inflight[c], i);
    return i;
}

/* The backward pass of virtual micro-batch k; its context index (freed by the next exchange), or -1. */
static int ibackward(mt_trainer *t, isched *s, int k, mt_err *e)
{
    int c = chunk_of(t, k, 0), i = q_pop(&s->inflight[c]);
    if (!last_virtual(t, c)) s->grads[c]--;   /* its output gradient was received */
    if (!s->dry && mt_gpt_backward(t->ctxs[i], t->ctx_scale[i], e)) return -1;
    s->to_free = i;
    return i;
}

/* One batched exchange around the ring of stages (the last stage's next is the first): this chunk's output
 * to the next stage unless it is the last virtual stage, the input gradient to the previous one unless it
 * is the first; an input for chunk recv_prev (-1: none) into a context of that chunk, an output gradient
 * for chunk recv_next (-1: none) into its oldest micro-batch in flight still without one. Sends to the next
 * stage come before those to the previous, receives from the previous before those from the next (with two
 * stages they are the same rank, and messages between two ranks match in order). */
static int iexchange(mt_trainer *t, isched *s, int out_i, int grad_i, int recv_prev, int recv_next, mt_err *e)
{
    int P = t->pp_size, next = (t->pp_rank + 1) % P, prev = (t->pp_rank + P - 1) % P;
    size_t n = s->dry ? 0 : mt_gpt_stage_numel(t->model, t->a.micro_batch_size, t->a.seq_length);
    mt_cdtype ty = s->dry ? MT_C_F32 : act_type(t);
    mt_p2p ops[4];
    int k = 0;
    if (s->dry) out_i = grad_i = -1;   /* nothing is sent */
    if (out_i >= 0 && !last_virtual(t, t->ctx_chunk[out_i]))
        ops[k++] = (mt_p2p){1, mt_gpt_stage_output(t->ctxs[out_i]), n, ty, next};
    if (grad_i >= 0 && !first_virtual(t, t->ctx_chunk[grad_i]))
        ops[k++] = (mt_p2p){1, mt_gpt_stage_grad(t->ctxs[grad_i]), n, ty, prev};
    if (recv_prev >= 0) {
        int i = acquire(t, recv_prev, s->dry, e);
        if (i < 0) return -1;
        q_push(&s->pending[recv_prev], i);
        if (!s->dry) ops[k++] = (mt_p2p){0, mt_gpt_stage_input(t->ctxs[i]), n, ty, prev};
    }
    if (recv_next >= 0) {
        ivq *q = &s->inflight[recv_next];
        int i = q->q[q->head + s->grads[recv_next]++];
        if (!s->dry) ops[k++] = (mt_p2p){0, mt_gpt_stage_grad(t->ctxs[i]), n, ty, next};
    }
    if (k && (mtk_sync(t->k, e) || mt_p2p_batch(t->dev_pp, ops, k, e)))
        return mt_err_prefix(e, "pipeline stage %d", t->pp_rank);
    if (s->to_free >= 0) t->ctx_busy[s->to_free] = 0;
    s->to_free = -1;
    return 0;
}

/* Megatron's forward_backward_pipelining_with_interleaving for this rank's M micro-batches x vp chunks
 * (dry: the contexts' bookkeeping only). */
static int run_schedule(mt_trainer *t, mt_step_result *r, int dry, mt_err *e)
{
    int P = t->pp_size, v = t->vp, M = t->num_micro, total = M * v, st = t->pp_rank;
    int first_stage = st == 0, last_stage = st == P - 1;
    isched s = {.to_free = -1, .ls = t->scaler.scale, .r = r, .dry = dry};
    s.pending = mt_xcalloc((size_t)v, sizeof *s.pending);
    s.inflight = mt_xcalloc((size_t)v, sizeof *s.inflight);
    s.grads = mt_xcalloc((size_t)v, sizeof *s.grads);
    for (int c = 0; c < v; c++) {
        s.pending[c].q = mt_xmalloc((size_t)(M + 1) * sizeof(int));
        s.inflight[c].q = mt_xmalloc((size_t)(M + 1) * sizeof(int));
    }
    int all_warmup = M == P;
    int warmup = all_warmup ? total : (P - st - 1) * 2 + (v - 1) * P;
    if (warmup > total) warmup = total;
    int remaining = total - warmup, rc = 0;
    /* the first input */
    if (!first_stage) rc = iexchange(t, &s, -1, -1, 0, -1, e);
    for (int k = 0; k < warmup && !rc; k++) {
        int i = iforward(t, &s, k, e);
        if (i < 0) {
            rc = -1;
            break;
        }
        int nc = chunk_of(t, k + 1, 1), recv_prev = !(first_stage && nc == 0) && k != total - 1;
        int recv_next = k == warmup - 1 && !all_warmup && !last_stage ? v - 1 : -1;
        rc = iexchange(t, &s, i, -1, recv_prev ? nc : -1, recv_next, e);
    }
    for (int k = 0; k < remaining && !rc; k++) {
        int fk = k + warmup, bk = k;
        int fi = iforward(t, &s, fk, e), bi = fi < 0 ? -1 : ibackward(t, &s, bk, e);
        if (fi < 0 || bi < 0) {
            rc = -1;
            break;
        }
        int recv_prev = 1, nfc, recv_next = 1, nbc;
        if (first_stage) {
            nfc = chunk_of(t, fk - (P - 1), 1);
            if (nfc == v - 1) recv_prev = 0;
            nfc++;
        } else nfc = chunk_of(t, fk + 1, 1);
        if (last_stage) {
            nbc = chunk_of(t, bk - (P - 1), 0);
            if (nbc == 0) recv_next = 0;
            nbc--;
        } else nbc = chunk_of(t, bk + 1, 0);
        if (k == remaining - 1) recv_prev = 0;
        rc = iexchange(t, &s, fi, bi, recv_prev ? nfc : -1, recv_next ? nbc : -1, e);
    }
    if (!rc && all_warmup && !last_stage) rc = iexchange(t, &s, -1, -1, -1, v - 1, e);
    for (int k = remaining; k < total && !rc; k++) {
        int bi = ibackward(t, &s, k, e);
        if (bi < 0) {
            rc = -1;
            break;
        }
        int nbc = chunk_of(t, k + 1, 0), recv_next = !(last_stage && nbc == v - 1) && k != total - 1;
        rc = iexchange(t, &s, -1, bi, -1, recv_next ? nbc : -1, e);
    }
    for (int c = 0; c < v; c++) free(s.pending[c].q), free(s.inflight[c].q);
    free(s.pending), free(s.inflight), free(s.grads);
    for (int i = 0; i < t->nctx; i++) t->ctx_busy[i] = 0;
    return rc;
}

/* Forward only with model chunks: each micro-batch through chunk 0, 1, ... of every stage in turn (the
 * last stage's output of chunk c is the first stage's input of chunk c + 1). */
static int eval_interleaved(mt_trainer *t, int split, int64_t first, double *loss_sum, double *tokens, mt_err *e)
{
    int P = t->pp_size, next = (t->pp_rank + 1) % P, prev = (t->pp_rank + P - 1) % P;
    size_t n = mt_gpt_stage_numel(t->model, t->a.micro_batch_size, t->a.seq_length);
    mt_cdtype ty = act_type(t);
    for (int m = 0; m < t->num_micro; m++) {
        if (read_micro(t, split, first, m, e)) return -1;
        for (int c = 0; c < t->vp; c++) {
            int i = acquire(t, c, 0, e);
            if (i < 0) return -1;
            mt_gpt_ctx *x = t->ctxs[i];
            mt_gpt_set_dropout(x, 0, 0);
            t->ctx_busy[i] = 0;   /* used within this step only */
            mt_p2p in = {0, mt_gpt_stage_input(x), n, ty, prev};
            if (!first_virtual(t, c) && mt_p2p_batch(t->dev_pp, &in, 1, e)) return mt_err_prefix(e, "evaluation");
            mt_gpt_loss l;
            if (mt_gpt_forward(x, t->batch.tokens, t->batch.targets, t->batch.loss_mask, t->batch.B, t->batch.T, NULL,
                               &l, e))
                return -1;
            mt_p2p out = {1, mt_gpt_stage_output(x), n, ty, next};
            if (!last_virtual(t, c) && (mtk_sync(t->k, e) || mt_p2p_batch(t->dev_pp, &out, 1, e)))
                return mt_err_prefix(e, "evaluation");
            *loss_sum += l.sum;
            *tokens += l.count;
        }
    }
    return 0;
}

int mt_pipeline_contexts_replayed(int pp, int stage, int num_micro, int vp, int *per_chunk)
{
    for (int c = 0; c < vp; c++) per_chunk[c] = 0;
    if (vp <= 1) return mt_pipeline_contexts(pp, stage, num_micro, vp, per_chunk);
    mt_trainer t = {0};
    t.pp_size = pp, t.pp_rank = stage, t.num_micro = num_micro, t.vp = vp;
    t.ctxs = mt_xcalloc(1, sizeof *t.ctxs), t.ctx_scale = mt_xcalloc(1, sizeof *t.ctx_scale);
    t.ctx_busy = mt_xcalloc(1, sizeof *t.ctx_busy), t.ctx_chunk = mt_xcalloc(1, sizeof *t.ctx_chunk);
    mt_step_result r;
    mt_err e;
    int rc = run_schedule(&t, &r, 1, &e);
    for (int i = 0; i < t.nctx; i++) per_chunk[t.ctx_chunk[i]]++;
    free(t.ctxs), free(t.ctx_scale), free(t.ctx_busy), free(t.ctx_chunk);
    return rc;
}
