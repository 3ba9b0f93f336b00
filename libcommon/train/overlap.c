/* overlap.c: the data-parallel buckets started as the passes make them ready (see overlap.h). */
#include "train/overlap.h"

#include <stdlib.h>
#include <string.h>

#include "comm/link.h"

static int is_norm(mt_tensor_kind k)
{
    return k == MT_T_NORM1_W || k == MT_T_NORM1_B || k == MT_T_NORM2_W || k == MT_T_NORM2_B ||
           k == MT_T_FINAL_NORM_W || k == MT_T_FINAL_NORM_B;
}

/* The bucket holding element x. */
static int bucket_of(const mt_overlap *o, size_t x) { return (int)((o->gs->n - 1 - x) / o->gs->bucket); }

/* Whether tensor t is in the part, and its first element in the part. */
static int in_part(const mt_overlap *o, const mt_layout_tensor *t)
{
    return t->numel > 0 && t->offset >= o->base && t->offset + t->numel <= o->base + o->gs->n;
}

static int start_grad_bucket(mt_overlap *o, int b, int after_layer, mt_err *e)
{
    size_t lo, hi;
    mt_grad_sync_bucket(o->gs, b, &lo, &hi);
    float *g = mt_gpt_grads(o->model) + o->base;
    mt_async_op op = {.kind = o->sharded ? MT_ASYNC_REDUCE_SCATTER : MT_ASYNC_ALL_REDUCE, .buf = g + lo, .n = hi - lo,
                      .t = MT_C_F32};
    if (o->sharded) {
        mt_grad_sync_bucket_counts(o->gs, lo, hi, o->counts);
        op.counts = o->counts;
    }
    if ((o->ticket[b] = mt_comm_async_start(o->eng, &op, e)) < 0) return -1;
    if (o->trace) {
        double ms = (mt_comm_link_now() - o->t0) * 1e3;
        if (after_layer >= 0)
            fprintf(o->trace, "%lld grad bucket %d after layer %d at %.1f ms\n", (long long)o->step, b, after_layer, ms);
        else fprintf(o->trace, "%lld grad bucket %d at the end at %.1f ms\n", (long long)o->step, b, ms);
    }
    return 0;
}

/* The elements of tensor i are final: counted off their buckets. */
static void tensor_final(mt_overlap *o, const mt_layout_tensor *t)
{
    size_t a = t->offset - o->base, end = a + t->numel;
    while (a < end) {
        int b = bucket_of(o, a);
        size_t lo, hi;
        mt_grad_sync_bucket(o->gs, b, &lo, &hi);
        size_t k = (hi < end ? hi : end) - a;
        o->left[b] -= k;
        a += k;
    }
}

static int params_wait_to(mt_overlap *o, size_t end, int layer, mt_err *e);

/* The layer hook (gpt.h). */
static int on_part(mt_overlap *o, int phase, int layer, mt_err *e);
static int on_layer(void *arg, int phase, int layer, mt_err *e)
{
    mt_overlap *o = arg;
    return on_part(o, phase, layer, e) || (o->next && on_part(o->next, phase, layer, e)) ? -1 : 0;
}

static int on_part(mt_overlap *o, int phase, int layer, mt_err *e)
{
    if (phase == MT_GPT_BEFORE_FORWARD) {
        if (!o->gathering) return 0;
        return params_wait_to(o, layer == o->nl - 1 ? o->gs->n : o->layer_end[layer], layer, e);
    }
    if (!o->grads || layer < 0 || layer >= o->nl || ++o->passes[layer] != o->need[layer]) return 0;
    /* the layer's last backward pass of the step: its tensors (and the top layer's, the head's) are final */
    if (o->gathering && mt_overlap_params_ready(o, e)) return -1;
    const mt_layout *l = mt_gpt_layout(o->model);
    for (int i = 0; i < l->n; i++)
        if (o->group[i] == layer) tensor_final(o, &l->t[i]);
    for (int b = 0; b < o->nb; b++)
        if (!o->left[b] && o->ticket[b] < 0 && start_grad_bucket(o, b, layer, e)) return -1;
    return 0;
}

int mt_overlap_init(mt_overlap *o, mt_gpt *model, mt_grad_sync *gs, size_t base, int grads, int params, int sharded,
                    const int *chunk_passes, int vp, int sp, int world_rank, mt_err *e)
{
    memset(o, 0, sizeof *o);
    o->grads = grads, o->params = params, o->sharded = sharded;
    o->gs = gs, o->model = model, o->base = base;
    o->nb = mt_grad_sync_buckets(gs);
    const mt_layout *l = mt_gpt_layout(model);
    o->nl = l->num_layers;
    int tied = mt_gpt_tied_copy(model);
    o->group = mt_xmalloc(((size_t)l->n + 1) * sizeof *o->group);
    for (int i = 0; i < l->n; i++) {
        const mt_layout_tensor *t = &l->t[i];
        int g = -1;
        for (int li = 0; li < o->nl; li++)
            if (i >= l->layer_start[li] && i < l->layer_start[li + 1]) g = li;
        if (o->nl > 0 && i >= l->layer_start[o->nl]) g = o->nl - 1;   /* the final norm, the output layer */
        if ((sp && (is_norm(t->kind) || (t->kind == MT_T_ROUTER_W && mt_gpt_experts_grouped(model)))) || i == tied)
            g = -1;   /* summed elsewhere first */
        o->group[i] = in_part(o, t) ? g : -2;
    }
    o->passes = mt_xcalloc((size_t)o->nl + 1, sizeof *o->passes);
    o->need = mt_xcalloc((size_t)o->nl + 1, sizeof *o->need);
    for (int li = 0; li < o->nl; li++) o->need[li] = chunk_passes[li / (o->nl / vp)];   /* chunks of nl / vp layers */
    /* the part's elements up to each layer's end (its tensors in the part are contiguous in layer order) */
    o->layer_end = mt_xcalloc((size_t)o->nl + 1, sizeof *o->layer_end);
    size_t end = 0;
    for (int i = 0; i < (o->nl > 0 ? l->layer_start[0] : l->n); i++)
        if (in_part(o, &l->t[i]) && l->t[i].offset + l->t[i].numel - base > end) end = l->t[i].offset + l->t[i].numel - base;
    o->first_layer = o->nl > 0 ? end : gs->n;
    for (int li = 0; li < o->nl; li++) {
        for (int i = l->layer_start[li]; i < l->layer_start[li + 1]; i++)
            if (in_part(o, &l->t[i]) && l->t[i].offset + l->t[i].numel - base > end) end = l->t[i].offset + l->t[i].numel - base;
        o->layer_end[li] = end;
    }
    o->left = mt_xcalloc((size_t)o->nb + 1, sizeof *o->left);
    o->ticket = mt_xcalloc((size_t)o->nb + 1, sizeof *o->ticket);
    o->gticket = mt_xcalloc((size_t)o->nb + 1, sizeof *o->gticket);
    for (int b = 0; b < o->nb; b++) o->gticket[b] = -1;
    o->counts = mt_xcalloc((size_t)gs->dp->size, sizeof *o->counts);
    const char *tr = getenv("MT_TRACE_BUCKETS");
    if (tr && *tr) {
        char path[4096];
        snprintf(path, sizeof path, "%s.%d%s", tr, world_rank, base ? ".experts" : "");
        if (!(o->trace = fopen(path, "w"))) return mt_err_sys(e, "MT_TRACE_BUCKETS: %s", path);
        setvbuf(o->trace, NULL, _IOLBF, 0);
    }
    if (!(o->eng = mt_comm_async_new(gs->dp, e))) return mt_err_prefix(e, "--overlap-grad-reduce / --overlap-param-gather");
    mt_gpt_set_layer_hook(model, on_layer, o);
    return 0;
}

void mt_overlap_chain(mt_overlap *o, mt_overlap *next)
{
    mt_gpt_set_layer_hook(o->model, on_layer, o);
    o->next = next;
}

void mt_overlap_free(mt_overlap *o)
{
    if (o->model && !o->base) mt_gpt_set_layer_hook(o->model, NULL, NULL);
    mt_comm_async_free(o->eng);
    free(o->group), free(o->passes), free(o->need), free(o->layer_end), free(o->left), free(o->ticket), free(o->gticket),
        free(o->counts);
    if (o->trace) fclose(o->trace);
    memset(o, 0, sizeof *o);
}

int mt_overlap_step_begin(mt_overlap *o, mt_err *e)
{
    o->step++;
    o->t0 = mt_comm_link_now();
    for (int li = 0; li < o->nl; li++) o->passes[li] = 0;
    for (int b = 0; b < o->nb; b++) {
        size_t lo, hi;
        mt_grad_sync_bucket(o->gs, b, &lo, &hi);
        o->left[b] = hi - lo;
        o->ticket[b] = -1;
    }
    /* the embeddings (before the first layer) are read before any layer's hook */
    if (o->gathering && (o->nl == 0 ? mt_overlap_params_ready(o, e) : params_wait_to(o, o->first_layer, -1, e)))
        return -1;
    return 0;
}

int mt_overlap_grads_finish(mt_overlap *o, mt_err *e)
{
    for (int b = 0; b < o->nb; b++)
        if (o->ticket[b] < 0 && start_grad_bucket(o, b, -1, e)) return -1;
    int rc = mt_comm_async_drain(o->eng, e);
    if (o->trace) fprintf(o->trace, "%lld grad buckets done at %.1f ms\n", (long long)o->step, (mt_comm_link_now() - o->t0) * 1e3);
    return rc;
}

int mt_overlap_params_start(mt_overlap *o, mt_err *e)
{
    mt_gpt *m = o->model;
    int N = o->gs->dp->size, dropped = mt_gpt_master_dropped(m);
    mt_cdtype t = MT_C_F32;
    if (dropped) t = mtk_act_dtype(mt_gpt_backend(m)) == MTK_BF16 ? MT_C_BF16 : MT_C_F16;
    size_t es = mt_cdtype_size(t);
    char *buf = (char *)(dropped ? (void *)mt_gpt_work(m) : (void *)mt_gpt_params(m)) + o->base * es;
    if (dropped && !o->base) {   /* the 1-D tensors' fp32 values, which every layer reads: first (the experts
                                    have none) */
        mt_gpt_kept_counts(m, o->gs->shard_lo, N, o->counts);
        mt_async_op op = {.kind = MT_ASYNC_ALL_GATHER, .buf = mt_gpt_kept(m, NULL), .counts = o->counts, .t = MT_C_F32};
        if (mt_comm_async_start(o->eng, &op, e) < 0) return -1;
    }
    for (int b = o->nb - 1; b >= 0; b--) {   /* from the start of the buffer */
        size_t lo, hi;
        mt_grad_sync_bucket(o->gs, b, &lo, &hi);
        mt_grad_sync_bucket_counts(o->gs, lo, hi, o->counts);
        mt_async_op op = {.kind = MT_ASYNC_ALL_GATHER, .buf = buf + lo * es, .n = hi - lo, .counts = o->counts, .t = t};
        if ((o->gticket[b] = mt_comm_async_start(o->eng, &op, e)) < 0) return -1;
    }
    o->gathering = 1;
    return 0;
}

/* Waits for the parameter buckets holding [0, end) (the kept values with them). */
static int params_wait_to(mt_overlap *o, size_t end, int layer, mt_err *e)
{
    if (end == 0) return 0;
    int b = bucket_of(o, end - 1);
    if (o->gticket[b] < 0) return 0;
    if (mt_comm_async_wait(o->eng, o->gticket[b], e)) return -1;
    if (o->trace)
        fprintf(o->trace, "%lld param bucket %d before layer %d at %.1f ms\n", (long long)o->step, b, layer,
                (mt_comm_link_now() - o->t0) * 1e3);
    for (int c = o->nb - 1; c >= b; c--) o->gticket[c] = -1;
    if (b == 0) {   /* all of them */
        o->gathering = 0;
        return mt_comm_async_drain(o->eng, e);
    }
    return 0;
}

int mt_overlap_params_ready(mt_overlap *o, mt_err *e)
{
    if (!o->gathering) return 0;
    for (int b = 0; b < o->nb; b++) o->gticket[b] = -1;
    o->gathering = 0;
    return mt_comm_async_drain(o->eng, e);
}

uint64_t mt_overlap_bytes(const mt_overlap *o) { return o->eng ? mt_comm_async_bytes(o->eng) : 0; }
