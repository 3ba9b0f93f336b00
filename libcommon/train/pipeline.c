/* pipeline.c: a pipeline stage's training step run from its schedule's events (train/pp_schedule.h) in
 * contexts the pipeline owns, forward-only evaluation, and the tied embeddings' gradient exchange (see
 * pipeline.h). */
#include "train/pipeline.h"

#include <stdlib.h>

#include "train/pp_schedule.h"

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

/* ---- the pipeline's state: the step's events and the micro-batches' contexts ---- */

struct mt_pipeline {
    mt_pp_event *ev;     /* this stage's training step (train/pp_schedule.h) */
    int nev;
    mt_gpt_ctx **ctxs;   /* activations of the micro-batches in flight: min(pp - stage, num_micro) made at the
                            start; with model chunks, made as the interleaved schedule first needs them */
    int n;
    double *scale;       /* [n]: the backward's loss scale of each context's micro-batch */
    int *busy, *chunk;   /* [n]: holds a micro-batch in flight (model chunks); its model chunk */
    int *slot;           /* [num_micro x vp]: the context of (micro-batch, chunk) in flight (model chunks) */
    int to_free;         /* the context of the last backward, free after the next exchange; -1 */
};

/* One more context for chunk c (dry: only its bookkeeping); its index, or -1 with e set. */
static int add_context(mt_trainer *t, mt_pipeline *p, int c, int dry, mt_err *e)
{
    mt_gpt_ctx *x = dry ? NULL : mt_gpt_ctx_new_chunk(t->model, c, t->a.micro_batch_size, e);
    if (!x && !dry) return -1;
    int n = p->n++;
    p->ctxs = mt_xrealloc(p->ctxs, (size_t)p->n * sizeof *p->ctxs);
    p->scale = mt_xrealloc(p->scale, (size_t)p->n * sizeof *p->scale);
    p->busy = mt_xrealloc(p->busy, (size_t)p->n * sizeof *p->busy);
    p->chunk = mt_xrealloc(p->chunk, (size_t)p->n * sizeof *p->chunk);
    p->ctxs[n] = x, p->busy[n] = 0, p->chunk[n] = c, p->scale[n] = 0;
    return n;
}

/* A context of chunk c holding nothing, made when there is none; -1 with e set. */
static int acquire(mt_trainer *t, mt_pipeline *p, int c, int dry, mt_err *e)
{
    int i = 0;
    while (i < p->n && (p->busy[i] || p->chunk[i] != c)) i++;
    if (i == p->n && add_context(t, p, c, dry, e) < 0) return -1;
    p->busy[i] = 1;
    return i;
}

static mt_pipeline *pipeline_new(mt_trainer *t, int dry, mt_err *e)
{
    mt_pipeline *p = mt_xcalloc(1, sizeof *p);
    p->to_free = -1;
    p->slot = mt_xmalloc((size_t)t->num_micro * (size_t)t->vp * sizeof *p->slot);
    for (int i = 0; i < t->num_micro * t->vp; i++) p->slot[i] = -1;
    if (mt_pp_schedule(t->pp_size, t->pp_rank, t->num_micro, t->vp, &p->ev, &p->nev, e)) {
        mt_pipeline_close(p);
        return NULL;
    }
    /* 1F1B keeps min(pp - stage, num_micro) micro-batches' activations, micro-batch m in context m mod n */
    int n = t->vp > 1 ? 0 : t->pp_size - t->pp_rank < t->num_micro ? t->pp_size - t->pp_rank : t->num_micro;
    for (int i = 0; i < n; i++)
        if (add_context(t, p, 0, dry, e) < 0) {
            mt_pipeline_close(p);
            return NULL;
        }
    return p;
}

mt_pipeline *mt_pipeline_open(mt_trainer *t, mt_err *e) { return pipeline_new(t, 0, e); }

void mt_pipeline_close(mt_pipeline *p)
{
    if (!p) return;
    for (int i = 0; i < p->n; i++) mt_gpt_ctx_free(p->ctxs[i]);
    free(p->ctxs), free(p->scale), free(p->busy), free(p->chunk), free(p->slot), free(p->ev);
    free(p);
}

int mt_pipeline_backward_passes(const mt_pipeline *p, int c)
{
    int n = 0;
    for (int j = 0; j < p->nev; j++) n += p->ev[j].kind == MT_PP_BACKWARD && p->ev[j].mc.chunk == c;
    return n;
}

/* ---- running the step's events ---- */

/* A training forward pass of t->batch in x without waiting: the losses (when x has the output layer)
 * stay on the device in the step's next loss slot, added to the loss sum at the step's end. */
static int train_forward(mt_trainer *t, mt_gpt_ctx *x, int has_loss, mt_gpt_loss *l, mt_err *e)
{
    float *dl = NULL;
    if (has_loss && !(dl = mt_trainer_loss_slot(t, t->batch.loss_mask, t->batch.B * t->batch.T, e))) return -1;
    return mt_gpt_forward_async(x, t->batch.tokens, t->batch.targets, t->batch.loss_mask, t->batch.B, t->batch.T, dl,
                                l, e);
}

static int first_virtual(const mt_trainer *t, int c) { return t->pp_rank == 0 && c == 0; }
static int last_virtual(const mt_trainer *t, int c) { return t->pp_rank == t->pp_size - 1 && c == t->vp - 1; }

/* The context of (micro-batch m, chunk c): 1F1B's m mod n; with model chunks the one that holds it, taken
 * now when `take` (its input arrives, or the first virtual stage starts it). -1 with e set. */
static int context_of(mt_trainer *t, mt_pipeline *p, mt_pp_mc mc, int take, int dry, mt_err *e)
{
    if (t->vp == 1) return mc.micro % p->n;
    int *s = &p->slot[mc.micro * t->vp + mc.chunk];
    if (take) *s = acquire(t, p, mc.chunk, dry, e);
    return *s;
}

/* The forward pass of (m, c): its batch read (traced once, by chunk 0), its dropout masks those of the
 * one-stage run, its mean loss weighted 1 / (all ranks' micro-batches), as Megatron averages them
 * (1 / num_micro in the loss, 1 / dp on the gradients). */
static int run_forward(mt_trainer *t, mt_pipeline *p, mt_pp_mc mc, mt_step_result *r, mt_err *e)
{
    int i = context_of(t, p, mc, t->vp > 1 && first_virtual(t, mc.chunk), 0, e);
    if (i < 0) return -1;
    mt_gpt_ctx *x = p->ctxs[i];
    int m = mc.micro;
    if (mc.chunk == 0 ? read_micro(t, MT_SPLIT_TRAIN, t->consumed_train, m, e)
                      : mt_batch_read(&t->batch, &t->data, MT_SPLIT_TRAIN, mt_trainer_micro_first(t, t->consumed_train, m), e))
        return -1;
    mt_gpt_set_dropout(x, 1, mt_trainer_dropout_key(t, t->iteration, m * t->dp_size + t->dp_rank));
    int total_micro = t->num_micro * t->dp_size;
    /* the MoE layers' auxiliary losses: Megatron's loss scale / num_microbatches, before the average over the
     * data-parallel ranks */
    mt_gpt_set_moe_loss_scale(x, (double)(1.0f / (float)total_micro) * t->scaler.scale);
    mt_gpt_loss l;
    if (train_forward(t, x, last_virtual(t, mc.chunk), &l, e)) return -1;
    double lb, z;
    mt_gpt_moe_losses(x, &lb, &z);
    r->moe_lb += lb;
    r->moe_z += z;
    if (t->moe_layer) {   /* each of this chunk's MoE layers, at its global index */
        const mt_layout *lay = mt_gpt_layout(t->model);
        int E = t->cfg.num_experts;
        for (int li = 0; li < lay->num_layers; li++) {
            double *row = t->moe_layer + (size_t)mt_layout_global_layer(lay, li) * (size_t)(2 + E), tok[MTK_MOE_MAX_EXPERTS];
            if (!mt_gpt_moe_layer_stats(x, li, &lb, &z, tok)) continue;
            if (t->experts_grouped && t->tp_rank != 0) lb = z = 0;   /* the rows' counts summed over the tensor
                                                                          ranks (an expert-tensor group's from
                                                                          its first), the losses once */
            if (t->experts_grouped && t->tp_rank % t->par->etp_size) memset(tok, 0, sizeof tok);
            row[0] += lb, row[1] += z;
            for (int j = 0; j < E; j++) row[2 + j] += tok[j];
        }
    }
    p->scale[i] = l.count > 0 ? (double)(1.0f / (float)total_micro) / l.count * t->scaler.scale : 0.0;
    r->loss_sum += l.sum;
    r->tokens += l.count;
    return 0;
}

/* One batched exchange: sends to the next stage before those to the previous, receives from the previous
 * before those from the next (with two stages of the interleaved ring they are the same rank, and messages
 * between two ranks match in order); then the context of the last backward is free again. */
static int run_exchange(mt_trainer *t, mt_pipeline *p, const mt_pp_event *x, int dry, mt_err *e)
{
    int P = t->pp_size, next = (t->pp_rank + 1) % P, prev = (t->pp_rank + P - 1) % P;
    size_t n = dry ? 0 : mt_gpt_stage_numel(t->model, t->a.micro_batch_size, t->a.seq_length);
    mt_cdtype ty = dry ? MT_C_F32 : act_type(t);
    mt_p2p ops[4];
    int k = 0, i;
    if (x->send_next.micro >= 0 && (i = context_of(t, p, x->send_next, 0, dry, e)) >= 0)
        ops[k++] = (mt_p2p){1, dry ? NULL : mt_gpt_stage_output(p->ctxs[i]), n, ty, next};
    if (x->send_prev.micro >= 0 && (i = context_of(t, p, x->send_prev, 0, dry, e)) >= 0)
        ops[k++] = (mt_p2p){1, dry ? NULL : mt_gpt_stage_grad(p->ctxs[i]), n, ty, prev};
    if (x->recv_prev.micro >= 0) {
        if ((i = context_of(t, p, x->recv_prev, 1, dry, e)) < 0) return -1;
        ops[k++] = (mt_p2p){0, dry ? NULL : mt_gpt_stage_input(p->ctxs[i]), n, ty, prev};
    }
    if (x->recv_next.micro >= 0 && (i = context_of(t, p, x->recv_next, 0, dry, e)) >= 0)
        ops[k++] = (mt_p2p){0, dry ? NULL : mt_gpt_stage_grad(p->ctxs[i]), n, ty, next};
    if (!dry && k && (mtk_sync(t->k, e) || mt_p2p_batch(t->dev_pp, ops, k, e)))   /* the buffers sent are complete */
        return mt_err_prefix(e, "pipeline stage %d", t->pp_rank);
    if (p->to_free >= 0) p->busy[p->to_free] = 0;
    p->to_free = -1;
    return 0;
}

/* The step's events in order (dry: only the contexts' bookkeeping, for mt_pipeline_contexts_replayed). */
static int run_events(mt_trainer *t, mt_pipeline *p, mt_step_result *r, int dry, mt_err *e)
{
    int rc = 0;
    for (int j = 0; j < p->nev && !rc; j++) {
        const mt_pp_event *x = &p->ev[j];
        if (x->kind == MT_PP_EXCHANGE) rc = run_exchange(t, p, x, dry, e);
        else if (x->kind == MT_PP_FORWARD)
            rc = dry ? (t->vp > 1 && first_virtual(t, x->mc.chunk) && context_of(t, p, x->mc, 1, 1, e) < 0)
                     : run_forward(t, p, x->mc, r, e);
        else {
            int i = context_of(t, p, x->mc, 0, dry, e);
            if (!dry && mt_gpt_backward(p->ctxs[i], p->scale[i], e)) rc = -1;
            if (t->vp > 1) p->to_free = i;
        }
    }
    for (int i = 0; i < p->n; i++) p->busy[i] = 0;
    p->to_free = -1;
    return rc;
}

int mt_pipeline_train(mt_trainer *t, mt_step_result *r, mt_err *e)
{
    mt_pipeline *p = t->pipe;
    int rc = run_events(t, p, r, 0, e);
    for (int i = 0; i < p->n; i++) mt_gpt_set_dropout(p->ctxs[i], 0, 0);
    return rc;
}

static int eval_interleaved(mt_trainer *t, int split, int64_t first, double *loss_sum, double *tokens, mt_err *e);

int mt_pipeline_eval(mt_trainer *t, int split, int64_t first, double *loss_sum, double *tokens, mt_err *e)
{
    if (t->vp > 1) return eval_interleaved(t, split, first, loss_sum, tokens, e);
    mt_gpt_ctx *x = t->pipe->ctxs[0];
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
            mt_pipeline *p = t->pipe;
            int i = acquire(t, p, c, 0, e);
            if (i < 0) return -1;
            mt_gpt_ctx *x = p->ctxs[i];
            mt_gpt_set_dropout(x, 0, 0);
            p->busy[i] = 0;   /* used within this step only */
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
    mt_err e;
    mt_pipeline *p = pipeline_new(&t, 1, &e);
    if (!p) return -1;
    mt_step_result r;
    int rc = run_events(&t, p, &r, 1, &e);
    for (int i = 0; i < p->n; i++) per_chunk[p->chunk[i]]++;
    mt_pipeline_close(p);
    return rc;
}
