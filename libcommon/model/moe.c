/* moe.c: the mixture-of-experts layer (moe.h): its buffers, forward and backward passes over the kernels'
 * MoE operations, and its auxiliary losses. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "model/fp8.h"
#include "model/moe.h"
#include "model/tensor_parallel.h"

struct mt_moe_ctx {
    mt_gpt *m;
    int E, K, F, Fs, fc1, sfc1;   /* experts, top-k, expert and shared hidden sizes, their first products' widths */
    size_t nmax, rmax;            /* tokens, and rows of the experts' side, at most */
    int P, El;                    /* expert parallelism: ranks, and the experts of each */
    size_t rx;                    /* the rows this rank's experts compute, at most: rmax, or P rmax with expert
                                     parallelism (every rank may send all its rows to this one's experts) */
    int slots, nl, max_batch;
    /* kept per slot */
    float *logits, *probs, *glog; /* [S][N][E], [S][N][K], [S][N] */
    int32_t *idx, *row, *src, *counts;   /* [S][N][K], [S][N][K], [S][rmax], [S][E] (device) */
    void *h1, *y, *sh1, *sy;      /* [S][rx][fc1], [S][rmax][C], [S][N][sfc1], [S][N][C] */
    void *xr;                     /* [S][rx][C]: with expert parallelism, the rows received for this rank's experts */
    int32_t *rcount;              /* [P][El]: the rows each rank sends for each of this rank's experts (device) */
    int32_t *h_rcounts;           /* host [S][P][El] */
    float *stats;                 /* [S][2 E max_batch + 1] (device) */
    /* scratch of a pass */
    void *xp, *a, *dy, *da, *dh;  /* [rmax][C], [rx][F], [rmax][C], [rx][F], [rx][fc1] */
    void *yr, *dyr, *dxr;         /* [rx][C] each, with expert parallelism: the experts' outputs before they go back,
                                     their gradients received, the gradients of the rows received */
    void *sa, *dsa, *dsh, *dsy, *dtmp;   /* [N][Fs], [N][Fs], [N][sfc1], [N][C], [N][C] */
    void *xg;                     /* [N][C] with sequence parallelism: the input gathered again in the backward */
    float *dlogits, *dprobs, *aux, *dglog;   /* [N][E], [N][K], [max_batch][E], [N] */
    /* token dropping with an expert tensor size below tp (drop_gathered): the micro-batch's choices */
    int32_t *fidx, *frow, *fsrc, *fcounts;   /* [N][K] (then the group's choices kept), [N][K], [N K], [E] */
    float *fprobs;                /* [N][K] */
    /* host */
    int32_t *h_counts;            /* [S][E] */
    int *rows;                    /* [S]: the rows of the experts' side */
    float *h_stats;               /* [S][2 E max_batch + 1] */
    int *runs;                    /* [S]: the runs of h_stats (1, or B with seq_aux_loss) */
    double *lb, *z;               /* [nl]: each local layer's losses / coefficients, of the last forward */
    int32_t *tok;                 /* [nl][E]: each local layer's rows per expert (its capacity when padded) */
    int32_t *h_sel;               /* [2][N][K] with drop_gathered: the group's choices and their rows */
    size_t bytes;
};

/* Capacity of an expert for n tokens: Megatron's get_capacity(n K, E, factor) = ceil(n K / E x factor); -1
 * dropless. */
static int capacity(const mt_gpt_config *c, size_t n)
{
    if (!(c->moe_capacity_factor > 0)) return -1;
    return (int)ceil((double)(n * (size_t)c->moe_topk) / (double)c->num_experts * c->moe_capacity_factor);
}

/* The shards the capacity holds in apart: with sequence parallelism Megatron routes each tensor rank's
 * shard of the positions on its own, its capacity that of the shard's tokens (whatever the expert tensor
 * size); 1 otherwise. */
static int shards(const mt_gpt *m) { return m->sp && m->tp_size > 1 ? m->tp_size : 1; }

/* Token dropping with an expert tensor size below tp: a group routes its rows, whole sequences of the
 * micro-batch, while a capacity holds in a shard of the positions of every sequence (Megatron's tensor
 * rank's). The choices are gathered over the tensor ranks, the micro-batch's dropped as with the experts
 * split over tp, and the group keeps its kept ones (drop_over_group). */
static int drop_gathered(const mt_gpt *m) { return m->experts_grouped && m->c.moe_capacity_factor > 0; }

/* The ranks a micro-batch's rows are spread over for the routing: the context ranks, and with an expert tensor
 * size below tp the expert-tensor groups too (each routes its own rows); the router's statistics are summed
 * over them (every tensor rank's, of which the first of each group gives them). */
static int routing_ranks(const mt_gpt *m) { return m->cp_size * (m->experts_grouped ? m->tp_size / m->etp : 1); }
static mt_comm *routing_group(const mt_gpt *m) { return m->experts_grouped ? m->router_group : m->cp; }
/* With the experts split over a group of several tensor ranks (1 < etp < tp) the group's ranks route the same
 * rows: the first gives the statistics and the router's gradients, the others zero. */
static int group_echo(const mt_gpt *m) { return m->experts_grouped && m->tp_rank % m->etp != 0; }

/* The rows this rank routes: its expert-tensor group's (the sequence-parallel shards of its etp tensor ranks),
 * or all N with the experts split over the tensor ranks; group_local(full) is where they are in a full buffer. */
static size_t group_rows(const mt_gpt *m, size_t N)
{
    return m->experts_grouped ? (size_t)mt_tp_tokens(m, (int)N) * (size_t)m->etp : N;
}
static void *group_local(const mt_gpt *m, void *full, size_t N, size_t C)
{
    size_t first = m->experts_grouped ? (size_t)(m->tp_rank / m->etp) * group_rows(m, N) : 0;
    return (char *)full + first * C * m->asz;
}

/* seq_aux_loss with an expert tensor size below tp: an expert-tensor group's rows are whole sequences (its
 * micro-batch's share, sequences q0 .. q0 + rl - 1, of T tokens each here: the rank's chunks with context
 * parallelism), so its runs are statistics of its own sequences, placed among the micro-batch's B before the
 * sum over the routing group (from the group's first rank); a run's tokens are T on each context rank. */
static int seq_whole(const mt_gpt *m) { return m->experts_grouped && m->c.moe_aux_type == MT_MOE_AUX_SEQ; }

int mt_moe_rows_only(const mt_gpt *m) { return m->experts_whole && m->c.moe_shared_ffn == 0; }

static int has_moe(const mt_gpt *m)
{
    for (int li = 0; li < m->nl; li++)
        if (mt_arch_is_moe(&m->layout.arch, mt_layout_global_layer(&m->layout, li))) return 1;
    return 0;
}

/* The device buffers: where each goes and its bytes. */
enum { NBUF = 36 };
static void buffers(mt_moe_ctx *mc, const mt_gpt *m, void **where[NBUF], size_t bytes[NBUF])
{
    size_t S = (size_t)mc->slots, N = mc->nmax, R = mc->rmax, E = (size_t)mc->E, K = (size_t)mc->K, X = mc->rx;
    size_t ep = mc->P > 1;
    size_t C = (size_t)m->c.hidden_size, a = m->asz, f = sizeof(float), i4 = sizeof(int32_t);
    size_t F = (size_t)mc->F, Fs = (size_t)mc->Fs, fc1 = (size_t)mc->fc1, sfc1 = (size_t)mc->sfc1;
    size_t gate = m->c.moe_shared_gate && Fs ? 1 : 0, st = 2 * E * (size_t)mc->max_batch + 1;
    int i = 0;
#define BUF(field, n) (where[i] = (void **)&mc->field, bytes[i++] = (n))
    BUF(logits, S * N * E * f);
    BUF(probs, S * N * K * f);
    BUF(glog, gate * S * N * f);
    BUF(idx, S * N * K * i4);
    BUF(row, S * N * K * i4);
    BUF(src, S * R * i4);
    BUF(counts, S * E * i4);
    BUF(h1, S * X * fc1 * a);
    BUF(y, S * R * C * a);
    BUF(sh1, S * N * sfc1 * a);
    BUF(sy, S * N * C * a);
    BUF(stats, S * st * f);
    BUF(xp, R * C * a);
    BUF(a, X * F * a);
    BUF(dy, R * C * a);
    BUF(da, X * F * a);
    BUF(dh, X * fc1 * a);
    BUF(xr, ep * S * X * C * a);
    BUF(rcount, ep * E * i4);
    BUF(yr, ep * X * C * a);
    BUF(dyr, ep * X * C * a);
    BUF(dxr, ep * X * C * a);
    BUF(sa, N * Fs * a);
    BUF(dsa, N * Fs * a);
    BUF(dsh, N * sfc1 * a);
    BUF(dsy, N * (Fs ? C : 0) * a);
    BUF(dtmp, N * (Fs ? C : 0) * a);
    BUF(dlogits, N * E * f);
    BUF(dprobs, N * K * f);
    BUF(dglog, gate * N * f);
    BUF(xg, (m->sp ? N * C : 0) * a);
    size_t dg = (size_t)drop_gathered(m);
    BUF(fidx, dg * N * K * i4);
    BUF(frow, dg * N * K * i4);
    BUF(fsrc, dg * N * K * i4);
    BUF(fcounts, dg * E * i4);
    BUF(fprobs, dg * N * K * f);
#undef BUF
    (void)i;
}

static void shape(mt_moe_ctx *mc, const mt_gpt *m, size_t ntok, int max_batch, int slots)
{
    const mt_gpt_config *c = &m->c;
    int glu = c->mlp == MT_MLP_SWIGLU ? 2 : 1;
    mc->m = (mt_gpt *)m;
    mc->E = c->num_experts, mc->K = c->moe_topk;
    mc->F = c->moe_ffn_hidden_size / m->etp, mc->Fs = c->moe_shared_ffn / m->tp_size;
    mc->fc1 = glu * mc->F, mc->sfc1 = glu * mc->Fs;
    mc->slots = slots, mc->max_batch = max_batch;
    mc->nmax = ntok;
    size_t nk = mc->nmax * (size_t)mc->K;
    size_t S = (size_t)shards(m);
    int cap = capacity(c, mc->nmax / S);   /* padded: cap rows per expert and shard */
    size_t padded = cap >= 0 ? (size_t)cap * (size_t)mc->E * S : 0;
    mc->rmax = c->moe_pad_to_capacity && padded > nk ? padded : nk;
    mc->P = m->ep_size > 1 ? m->ep_size : 1;
    mc->El = mc->E / mc->P;
    mc->rx = mc->rmax * (size_t)mc->P;
}

size_t mt_moe_ctx_bytes(const mt_gpt *m, size_t ntok, int max_batch, int slots)
{
    if (!has_moe(m)) return 0;
    mt_moe_ctx mc = {0};
    shape(&mc, m, ntok, max_batch, slots);
    void **where[NBUF];
    size_t bytes[NBUF], sum = 0;
    buffers(&mc, m, where, bytes);
    for (int i = 0; i < NBUF; i++) sum += bytes[i];
    return sum + (size_t)max_batch * (size_t)mc.E * sizeof(float);   /* aux */
}

mt_moe_ctx *mt_moe_ctx_new(mt_gpt *m, size_t ntok, int max_batch, int slots, int nl, int *failed, mt_err *e)
{
    if (*failed || !has_moe(m)) return NULL;
    mt_moe_ctx *mc = mt_xcalloc(1, sizeof *mc);
    shape(mc, m, ntok, max_batch, slots);
    mc->nl = nl;
    void **where[NBUF];
    size_t bytes[NBUF];
    buffers(mc, m, where, bytes);
    for (int i = 0; i < NBUF && !*failed; i++) {
        if (!(*where[i] = mtk_alloc(m->k, bytes[i] ? bytes[i] : 1, e))) *failed = 1;
        mc->bytes += bytes[i];
    }
    size_t ab = (size_t)max_batch * (size_t)mc->E * sizeof(float);
    if (!*failed && !(mc->aux = mtk_alloc(m->k, ab, e))) *failed = 1;
    mc->bytes += ab;
    if (*failed) {
        mt_err_prefix(e, "MoE activations (%zu bytes)", mc->bytes);
        mt_moe_ctx_free(mc);
        return NULL;
    }
    size_t st = 2 * (size_t)mc->E * (size_t)max_batch + 1;
    mc->h_counts = mt_xcalloc((size_t)slots * (size_t)mc->E, sizeof *mc->h_counts);
    mc->h_rcounts = mt_xcalloc((size_t)slots * (size_t)mc->E, sizeof *mc->h_rcounts);
    mc->rows = mt_xcalloc((size_t)slots, sizeof *mc->rows);
    mc->h_stats = mt_xcalloc((size_t)slots * st, sizeof *mc->h_stats);
    mc->runs = mt_xcalloc((size_t)slots, sizeof *mc->runs);
    mc->lb = mt_xcalloc((size_t)(nl > 0 ? nl : 1), sizeof *mc->lb);
    mc->z = mt_xcalloc((size_t)(nl > 0 ? nl : 1), sizeof *mc->z);
    mc->tok = mt_xcalloc((size_t)(nl > 0 ? nl : 1) * (size_t)mc->E, sizeof *mc->tok);
    if (drop_gathered(m)) mc->h_sel = mt_xcalloc(2 * mc->nmax * (size_t)mc->K, sizeof *mc->h_sel);
    return mc;
}

void mt_moe_ctx_free(mt_moe_ctx *mc)
{
    if (!mc) return;
    void **where[NBUF];
    size_t bytes[NBUF];
    buffers(mc, mc->m, where, bytes);
    for (int i = 0; i < NBUF; i++)
        if (*where[i]) mtk_free(mc->m->k, *where[i]);
    if (mc->aux) mtk_free(mc->m->k, mc->aux);
    free(mc->h_counts);
    free(mc->h_rcounts);
    free(mc->rows);
    free(mc->h_stats);
    free(mc->runs);
    free(mc->lb);
    free(mc->z);
    free(mc->tok);
    free(mc->h_sel);
    free(mc);
}

size_t mt_moe_bytes(const mt_moe_ctx *mc) { return mc ? mc->bytes : 0; }

void mt_moe_layer_stats(const mt_moe_ctx *mc, int li, double *lb, double *z, double *tokens)
{
    *lb = mc->lb[li], *z = mc->z[li];
    for (int j = 0; j < mc->E; j++) tokens[j] = mc->tok[(size_t)li * mc->E + j];
}

size_t mt_moe_rows_max(const mt_gpt *m, size_t ntok)
{
    mt_moe_ctx mc = {0};
    shape(&mc, m, ntok, 1, 1);
    return mc.rx;
}

void *mt_moe_gather_buffer(mt_moe_ctx *mc) { return mc->xg; }

void mt_moe_losses(const mt_moe_ctx *mc, double *lb, double *z)
{
    *lb = *z = 0;
    for (int li = 0; mc && li < mc->nl; li++) *lb += mc->lb[li], *z += mc->z[li];
}

#define AT(buf, i) ((void *)((char *)(buf) + (size_t)(i) * m->asz))

static mtk_moe_route route_of(const mt_gpt_config *c)
{
    return (mtk_moe_route){.E = c->num_experts, .K = c->moe_topk, .score = (mtk_moe_score)c->moe_score,
                           .pre_softmax = c->moe_pre_softmax, .scaling = (float)c->moe_topk_scaling};
}

static int aux_on(const mt_gpt_config *c) { return c->moe_aux_type != MT_MOE_AUX_NONE && c->moe_aux_coeff > 0; }

/* The activation of the first product h [n][fc1] into a [n][F]. */
static void act_fwd(mt_gpt *m, void *a, const void *h, size_t n, int F)
{
    if (m->c.mlp == MT_MLP_SWIGLU) mtk_swiglu_fwd(m->k, a, h, (int)n, F);
    else mtk_gelu_fwd(m->k, a, h, n * (size_t)F, m->c.exact_gelu);
}
static void act_bwd(mt_gpt *m, void *dh, const void *h, const void *da, size_t n, int F)
{
    if (m->c.mlp == MT_MLP_SWIGLU) mtk_swiglu_bwd(m->k, dh, h, da, (int)n, F);
    else mtk_gelu_bwd(m->k, dh, h, da, n * (size_t)F, m->c.exact_gelu);
}

/* ---- FP8 (model/fp8.h): each of the rank's experts quantizes its rows with its own scales ---- */

/* Rows of `width` grouped by sender (P blocks) and in each by the rank's El experts (counts [P][El]): each
 * expert's rows through its input (grad 0) or output gradient (grad 1) of product q, in place. */
static void fp8_rows(mt_moe_ctx *mc, mt_gpt_ctx *gx, int li, int q, int grad, void *buf, const int32_t *counts, int P,
                     size_t width)
{
    mt_gpt *m = mc->m;
    size_t r0 = 0;
    for (int p = 0; p < P; p++)
        for (int j = 0; j < mc->El; j++) {
            size_t n = (size_t)counts[p * mc->El + j] * width;
            void *at = AT(buf, r0 * width);
            if (grad) mt_fp8_expert_grad(gx, li, j, q, at, at, n);
            else mt_fp8_expert_input(gx, li, j, q, at, at, n);
            r0 += (size_t)counts[p * mc->El + j];
        }
}

/* The experts' weights of product q (El matrices of n elements), quantized with FP8 */
static const void *expert_w(mt_gpt_ctx *gx, int li, int q, const void *w, size_t n)
{
    return gx ? mt_fp8_expert_weights(gx, li, q, w, n) : w;
}

/* ---- expert parallelism: the rows exchanged with the other ranks' experts ---- */

static mt_cdtype act_cdtype(const mt_gpt *m)
{
    mtk_dtype d = mtk_act_dtype(m->k);
    return d == MTK_F32 ? MT_C_F32 : d == MTK_BF16 ? MT_C_BF16 : MT_C_F16;
}

/* An all-to-all over the expert group, counting the bytes of the blocks for the other ranks. */
static int a2a(mt_gpt *m, const void *send, const size_t *sc, void *recv, const size_t *rc, mt_cdtype t, size_t esize,
               mt_err *e)
{
    for (int p = 0; p < m->ep->size; p++)
        if (p != m->ep->rank) m->ep_bytes += sc[p] * esize;
    return mt_all_to_all_v(m->ep, send, sc, recv, rc, t, e);
}

/* Rows of C elements: this rank's rows for each rank's experts (send; from the counts by expert hc), and
 * each rank's rows for this rank's experts (recv; from rc [P][El]). */
static void ep_counts(const mt_moe_ctx *mc, const int32_t *hc, const int32_t *rc, size_t C, size_t *send,
                      size_t *recv)
{
    for (int p = 0; p < mc->P; p++) {
        send[p] = recv[p] = 0;
        for (int j = 0; j < mc->El; j++) {
            send[p] += (size_t)hc[p * mc->El + j] * C;
            recv[p] += (size_t)rc[p * mc->El + j] * C;
        }
    }
}

/* The experts' products of slot s with expert parallelism: this rank's rows for each rank's experts (mc->xp,
 * grouped by global expert) go to that rank, which computes them with its experts and sends the outputs
 * back into the slot's y in the same order. Each rank first learns how many rows each rank sends it for
 * each of its experts (an all-to-all of the counts), and computes the rows of each sender as one grouped
 * product over its El experts. */
static int experts_ep(mt_moe_ctx *mc, mt_gpt_ctx *gx, int s, int li, int l, mt_err *e)
{
    mt_gpt *m = mc->m;
    mtk *k = m->k;
    size_t C = (size_t)m->c.hidden_size, E = (size_t)mc->E, P = (size_t)mc->P, El = (size_t)mc->El;
    int32_t *counts = mc->counts + s * E, *hc = mc->h_counts + s * E, *rc = mc->h_rcounts + s * E;
    void *h1 = AT(mc->h1, (size_t)s * mc->rx * (size_t)mc->fc1), *y = AT(mc->y, (size_t)s * mc->rmax * C);
    void *xr = AT(mc->xr, (size_t)s * mc->rx * C);
    size_t *sc = mt_xmalloc(4 * P * sizeof *sc), *rr = sc + P, *cc = sc + 2 * P;
    for (size_t p = 0; p < P; p++) cc[p] = El * sizeof(int32_t);
    int rc_ = mtk_sync(k, e) || a2a(m, counts, cc, mc->rcount, cc, MT_C_BYTE, 1, e);
    if (!rc_) {
        mtk_to_host(k, rc, mc->rcount, E * sizeof(int32_t));
        rc_ = mtk_status(k, e);
    }
    ep_counts(mc, hc, rc, C, sc, rr);
    size_t Rr = 0;
    for (size_t p = 0; p < P; p++) Rr += rr[p] / C;
    if (!rc_ && Rr > mc->rx) rc_ = mt_err_set(e, "%zu rows for this rank's experts, more than the %zu planned", Rr, mc->rx);
    if (!rc_) rc_ = mtk_sync(k, e) || a2a(m, mc->xp, sc, xr, rr, act_cdtype(m), m->asz, e);
    if (!rc_) {
        const void *w1 = mt_gpt_w(m, mt_gpt_t(m, l, MT_T_EXPERT_FC1_W)), *w2 = mt_gpt_w(m, mt_gpt_t(m, l, MT_T_EXPERT_FC2_W));
        if (gx) fp8_rows(mc, gx, li, 0, 0, xr, rc, (int)P, C);   /* kept quantized, for the backward */
        w1 = expert_w(gx, li, 0, w1, (size_t)mc->fc1 * C);
        size_t r0 = 0;
        for (size_t p = 0; p < P; p++) {   /* each sender's rows: its blocks for this rank's experts in order */
            mtk_grouped_matmul_fwd(k, AT(h1, r0 * (size_t)mc->fc1), AT(xr, r0 * C), w1, rc + p * El, (int)El, (int)C, mc->fc1);
            r0 += rr[p] / C;
        }
        act_fwd(m, mc->a, h1, Rr, mc->F);
        if (gx) fp8_rows(mc, gx, li, 1, 0, mc->a, rc, (int)P, (size_t)mc->F);
        w2 = expert_w(gx, li, 1, w2, C * (size_t)mc->F);
        r0 = 0;
        for (size_t p = 0; p < P; p++) {
            mtk_grouped_matmul_fwd(k, AT(mc->yr, r0 * C), AT(mc->a, r0 * (size_t)mc->F), w2, rc + p * El, (int)El, mc->F,
                                   (int)C);
            r0 += rr[p] / C;
        }
        rc_ = mtk_sync(k, e) || a2a(m, mc->yr, rr, y, sc, act_cdtype(m), m->asz, e);
    }
    free(sc);
    return rc_ ? mt_err_prefix(e, "MoE layer %d, expert-parallel exchange", l) : 0;
}

/* Its backward: dy (this rank's rows' output gradients, mc->dy) to the experts' ranks, the experts' weight
 * gradients there, and the rows' input gradients back into mc->xp. */
static int experts_ep_bwd(mt_moe_ctx *mc, mt_gpt_ctx *gx, int s, int li, int l, mtk_grad_mode gm, mt_err *e)
{
    mt_gpt *m = mc->m;
    mtk *k = m->k;
    size_t C = (size_t)m->c.hidden_size, E = (size_t)mc->E, P = (size_t)mc->P, El = (size_t)mc->El;
    int32_t *hc = mc->h_counts + s * E, *rc = mc->h_rcounts + s * E;
    void *h1 = AT(mc->h1, (size_t)s * mc->rx * (size_t)mc->fc1), *xr = AT(mc->xr, (size_t)s * mc->rx * C);
    int t1 = mt_gpt_t(m, l, MT_T_EXPERT_FC1_W), t2 = mt_gpt_t(m, l, MT_T_EXPERT_FC2_W);
    size_t *sc = mt_xmalloc(2 * P * sizeof *sc), *rr = sc + P;
    ep_counts(mc, hc, rc, C, sc, rr);
    size_t Rr = 0;
    for (size_t p = 0; p < P; p++) Rr += rr[p] / C;
    int rc_ = mtk_sync(k, e) || a2a(m, mc->dy, sc, mc->dyr, rr, act_cdtype(m), m->asz, e);
    if (!rc_) {
        act_fwd(m, mc->a, h1, Rr, mc->F);
        if (gx) {   /* the second product's input as the forward quantized it, the output gradients quantized */
            fp8_rows(mc, gx, li, 1, 0, mc->a, rc, (int)P, (size_t)mc->F);
            fp8_rows(mc, gx, li, 1, 1, mc->dyr, rc, (int)P, C);
        }
        const void *w2 = expert_w(gx, li, 1, mt_gpt_w(m, t2), C * (size_t)mc->F);
        size_t r0 = 0;
        for (size_t p = 0; p < P; p++) {   /* the first sender's rows assign (as gm says), the others add */
            mtk_grad_mode g = p == 0 ? gm : MTK_GRAD_ACCUMULATE;
            mtk_grouped_matmul_bwd(k, AT(mc->da, r0 * (size_t)mc->F), mt_gpt_g(m, t2), AT(mc->dyr, r0 * C),
                                   AT(mc->a, r0 * (size_t)mc->F), w2, rc + p * El, (int)El, mc->F, (int)C, g);
            r0 += rr[p] / C;
        }
        act_bwd(m, mc->dh, h1, mc->da, Rr, mc->F);
        if (gx) fp8_rows(mc, gx, li, 0, 1, mc->dh, rc, (int)P, (size_t)mc->fc1);
        const void *w1 = expert_w(gx, li, 0, mt_gpt_w(m, t1), (size_t)mc->fc1 * C);
        r0 = 0;
        for (size_t p = 0; p < P; p++) {
            mtk_grad_mode g1 = p == 0 ? gm : MTK_GRAD_ACCUMULATE;
            mtk_grouped_matmul_bwd(k, AT(mc->dxr, r0 * C), mt_gpt_g(m, t1), AT(mc->dh, r0 * (size_t)mc->fc1),
                                   AT(xr, r0 * C), w1, rc + p * El, (int)El, (int)C, mc->fc1, g1);
            r0 += rr[p] / C;
        }
        rc_ = mtk_sync(k, e) || a2a(m, mc->dxr, rr, mc->xp, sc, act_cdtype(m), m->asz, e);
    }
    free(sc);
    return rc_ ? mt_err_prefix(e, "MoE layer %d, expert-parallel exchange", l) : 0;
}

/* drop_gathered: mc->fidx [Nr][K] = this group's choices idx [Nr][K] (of its Nr rows, probs their weights)
 * with -1 for those the capacity drops, as the micro-batch's choices, gathered over the tensor ranks (each
 * rank's from its sequence shard), are dropped with the experts split over tp (a capacity in each shard of
 * the positions). */
static int drop_over_group(mt_moe_ctx *mc, const int32_t *idx, const float *probs, size_t N, int T, int l, mt_err *e)
{
    mt_gpt *m = mc->m;
    mtk *k = m->k;
    size_t K = (size_t)mc->K, Nt = (size_t)mt_tp_tokens(m, (int)N), Nr = group_rows(m, N), NK = Nr * K;
    size_t own = (size_t)(m->tp_rank % m->etp) * Nt * K, first = mt_tp_first(m, (int)N) * K;
    size_t P = (size_t)m->tp_size, *cb = mt_xmalloc(2 * P * sizeof *cb), *cf = cb + P;
    for (size_t p = 0; p < P; p++) cb[p] = Nt * K * sizeof(int32_t), cf[p] = Nt * K;
    mtk_copy(k, mc->fidx + first, idx + own, Nt * K * sizeof(int32_t));
    mtk_copy(k, mc->fprobs + first, probs + own, Nt * K * sizeof(float));
    int rc = mt_all_gather(m->tp, mc->fidx, cb, MT_C_BYTE, e) || mt_all_gather(m->tp, mc->fprobs, cf, MT_C_F32, e);
    free(cb);
    if (rc) return mt_err_prefix(e, "MoE layer %d: the choices for token dropping", l);
    int S = shards(m);
    mtk_moe_dispatch(k, mc->fcounts, mc->frow, mc->fsrc, mc->fidx, mc->fprobs, (int)N, (int)K, mc->E,
                     capacity(&m->c, N / (size_t)S), m->c.moe_drop_position, 0, T, S);
    int32_t *hi = mc->h_sel, *hr = hi + NK;
    mtk_to_host(k, hi, idx, NK * sizeof(int32_t));
    mtk_to_host(k, hr, mc->frow + (size_t)(m->tp_rank / m->etp) * NK, NK * sizeof(int32_t));
    if (mtk_status(k, e)) return mt_err_prefix(e, "MoE layer %d: token dropping", l);
    for (size_t i = 0; i < NK; i++)
        if (hr[i] < 0) hi[i] = -1;
    mtk_to_device(k, mc->fidx, hi, NK * sizeof(int32_t));
    return mtk_status(k, e) ? mt_err_prefix(e, "MoE layer %d: token dropping", l) : 0;
}

int mt_moe_forward(mt_moe_ctx *mc, mt_gpt_ctx *gx, int s, int li, int l, const void *x, void *out, int B, int T,
                   int training, mt_err *e)
{
    mt_gpt *m = mc->m;
    const mt_gpt_config *c = &m->c;
    mtk *k = m->k;
    size_t N = (size_t)B * (size_t)T, C = (size_t)c->hidden_size, E = (size_t)mc->E, K = (size_t)mc->K;
    size_t st = 2 * E * (size_t)mc->max_batch + 1;
    mtk_moe_route r = route_of(c);
    float *logits = mc->logits + (size_t)s * mc->nmax * E, *probs = mc->probs + (size_t)s * mc->nmax * K;
    int32_t *idx = mc->idx + (size_t)s * mc->nmax * K, *row = mc->row + (size_t)s * mc->nmax * K;
    int32_t *src = mc->src + (size_t)s * mc->rmax, *counts = mc->counts + (size_t)s * E, *hc = mc->h_counts + (size_t)s * E;
    void *h1 = AT(mc->h1, (size_t)s * mc->rx * (size_t)mc->fc1), *y = AT(mc->y, (size_t)s * mc->rmax * C);
    int t0 = mt_gpt_t(m, l, MT_T_ROUTER_W);
    /* the rows routed here: every row, or with an expert tensor size below tp its group's rows of x (Nr of them) */
    size_t Nr = group_rows(m, N);
    const void *xr = group_local(m, (void *)x, N, C);
    mt_comm *rg = routing_group(m);

    /* routing */
    mtk_router_fwd(k, logits, xr, mt_gpt_w(m, t0), (int)Nr, (int)C, (int)E);
    mtk_moe_topk(k, idx, probs, logits, (int)Nr, &r);
    mc->lb[li] = mc->z[li] = 0;
    if (training && (aux_on(c) || c->moe_z_coeff > 0)) {
        int seq = c->moe_aux_type == MT_MOE_AUX_SEQ ? T : (int)Nr, runs = (int)Nr / seq;
        float *stats = mc->stats + (size_t)s * st, *hs = mc->h_stats + (size_t)s * st;
        if (seq_whole(m)) {   /* this rank's sequences' runs among the micro-batch's B, the rest zero */
            if (Nr % (size_t)T)
                return mt_err_set(e, "MoE layer %d: seq_aux_loss: an expert-tensor group's %zu rows are not "
                                     "whole sequences of %d", l, Nr, T);
            float *tmp = mc->dlogits;   /* the backward's scratch, free in a forward pass */
            size_t rl = (size_t)runs, q0 = (size_t)(m->tp_rank / m->etp) * rl;
            if (2 * E * rl + 1 > mc->nmax * E)
                return mt_err_set(e, "MoE layer %d: seq_aux_loss with an expert tensor size below tp needs sequences of at least 3 tokens", l);
            runs = B;
            mtk_moe_route_stats(k, tmp, logits, idx, (int)Nr, seq, &r);
            mtk_zero(k, stats, (2 * E * (size_t)runs + 1) * sizeof(float));
            mtk_copy(k, stats + 2 * E * q0, tmp, 2 * E * rl * sizeof(float));
            mtk_copy(k, stats + 2 * E * (size_t)runs, tmp + 2 * E * rl, sizeof(float));
        } else mtk_moe_route_stats(k, stats, logits, idx, (int)Nr, seq, &r);
        if (group_echo(m)) mtk_zero(k, stats, (2 * E * (size_t)runs + 1) * sizeof(float));   /* the group's first's */
        /* with context parallelism a rank's runs are its chunks of the sequences (or of the micro-batch), with
         * an expert tensor size below tp its group's rows of them: the statistics of the whole ones are the sums
         * over the group */
        if (rg && mt_all_reduce(rg, stats, 2 * E * (size_t)runs + 1, MT_C_F32, e))
            return mt_err_prefix(e, "MoE layer %d router statistics", l);
        mtk_to_host(k, hs, stats, (2 * E * (size_t)runs + 1) * sizeof(float));
        if (mtk_status(k, e)) return mt_err_prefix(e, "MoE layer %d router", l);
        mc->runs[s] = runs;
        /* the tokens of a whole run */
        const double n = (double)seq * (seq_whole(m) ? m->cp_size : routing_ranks(m));
        if (aux_on(c)) {   /* E / (K n^2) sum_e P_e f_e per run, averaged over the runs: aux / coeff */
            double sum = 0;
            for (int q = 0; q < runs; q++) {
                const float *cnt = hs + 2 * E * (size_t)q, *p = cnt + E;
                double v = 0;
                for (size_t j = 0; j < E; j++) v += (double)p[j] * cnt[j];
                sum += v * (double)E / ((double)K * n * n);
            }
            mc->lb[li] = sum / runs;
        }
        if (c->moe_z_coeff > 0) mc->z[li] = hs[2 * E * (size_t)runs] / ((double)Nr * routing_ranks(m));
    }

    /* the choices by expert, and their counts on the host for the grouped products (with an expert tensor size below
     * tp the rows routed here are read as whole sequences where they are, else as one run: the order of the tokens
     * matters only to token dropping, which is then the micro-batch's, drop_over_group's) */
    int S = shards(m), seq = Nr % (size_t)T ? (int)Nr : T;
    if (drop_gathered(m)) {
        if (drop_over_group(mc, idx, probs, N, T, l, e)) return -1;
        /* each expert keeps at most its capacity in each of the S shards: no more drops (padded to all of them) */
        mtk_moe_dispatch(k, counts, row, src, mc->fidx, probs, (int)Nr, (int)K, (int)E, capacity(c, N / (size_t)S) * S,
                         c->moe_drop_position, c->moe_pad_to_capacity, seq, 1);
    } else
        mtk_moe_dispatch(k, counts, row, src, idx, probs, (int)Nr, (int)K, (int)E, capacity(c, Nr / (size_t)S),
                         c->moe_drop_position, c->moe_pad_to_capacity, seq, S);
    mtk_to_host(k, hc, counts, E * sizeof(int32_t));
    if (mtk_status(k, e)) return mt_err_prefix(e, "MoE layer %d dispatch", l);
    size_t R = 0;
    for (size_t j = 0; j < E; j++) R += (size_t)hc[j];
    if (R > mc->rmax) return mt_err_set(e, "MoE layer %d: %zu rows for the experts, more than the %zu planned", l, R, mc->rmax);
    mc->rows[s] = (int)R;
    memcpy(mc->tok + (size_t)li * E, hc, E * sizeof *hc);

    /* everything that reads x first: out may be x's buffer */
    mtk_moe_permute(k, mc->xp, xr, src, (int)R, (int)C);
    void *sh1 = mc->Fs ? AT(mc->sh1, (size_t)s * mc->nmax * (size_t)mc->sfc1) : NULL;
    void *sy = mc->Fs ? AT(mc->sy, (size_t)s * mc->nmax * C) : NULL;
    int g = mc->Fs ? mt_gpt_t(m, l, MT_T_SHARED_GATE_W) : -1;
    float *glog = g >= 0 ? mc->glog + (size_t)s * mc->nmax : NULL;
    if (mc->Fs) {   /* with FP8 the shared expert's input quantized aside (into the backward's scratch dtmp): the
                     * router and the experts read x */
        const void *xs = x, *ws = mt_gpt_w(m, mt_gpt_t(m, l, MT_T_SHARED_FC1_W));
        if (gx) {
            mt_fp8_input(gx, li, MT_FP8_FC1, mc->dtmp, x, N * C), xs = mc->dtmp;
            ws = mt_fp8_weight(gx, li, MT_FP8_FC1, ws, (size_t)mc->sfc1 * C);
        }
        mtk_matmul_fwd(k, sh1, xs, ws, NULL, (int)N, (int)C, mc->sfc1);
        if (g >= 0) mtk_router_fwd(k, glog, x, mt_gpt_w(m, g), (int)N, (int)C, 1);
    }
    /* the experts (with tensor parallelism this rank's columns: out and sy are partial sums, completed by the
     * caller's sum over the ranks, the weighted sums being linear in them; with an expert tensor size below tp,
     * the group's rows of out are its rows' output (summed over the group), the other rows zero, before the
     * shared expert's partial sum) */
    if (mc->P > 1) {
        if (experts_ep(mc, gx, s, li, l, e)) return -1;
    } else {
        if (gx) fp8_rows(mc, gx, li, 0, 0, mc->xp, hc, 1, C);
        mtk_grouped_matmul_fwd(k, h1, mc->xp, expert_w(gx, li, 0, mt_gpt_w(m, mt_gpt_t(m, l, MT_T_EXPERT_FC1_W)),
                                                       (size_t)mc->fc1 * C),
                               hc, (int)E, (int)C, mc->fc1);
        act_fwd(m, mc->a, h1, R, mc->F);
        if (gx) fp8_rows(mc, gx, li, 1, 0, mc->a, hc, 1, (size_t)mc->F);
        mtk_grouped_matmul_fwd(k, y, mc->a, expert_w(gx, li, 1, mt_gpt_w(m, mt_gpt_t(m, l, MT_T_EXPERT_FC2_W)),
                                                     C * (size_t)mc->F),
                               hc, (int)E, mc->F, (int)C);
    }
    void *outr = group_local(m, out, N, C);
    if (m->experts_grouped && !mt_moe_rows_only(m))   /* the other groups' rows: the shared expert's partial sum */
        mtk_zero(k, out, N * C * m->asz);
    mtk_moe_unpermute(k, outr, y, row, probs, (int)Nr, (int)K, (int)C);
    /* the shared expert, with its gate */
    if (mc->Fs) {
        act_fwd(m, mc->sa, sh1, N, mc->Fs);
        const void *ws = mt_gpt_w(m, mt_gpt_t(m, l, MT_T_SHARED_FC2_W));
        if (gx) {
            mt_fp8_input(gx, li, MT_FP8_FC2, mc->sa, mc->sa, N * (size_t)mc->Fs);
            ws = mt_fp8_weight(gx, li, MT_FP8_FC2, ws, C * (size_t)mc->Fs);
        }
        mtk_matmul_fwd(k, sy, mc->sa, ws, NULL, (int)N, mc->Fs, (int)C);
        if (g >= 0) mtk_sigmoid_gate_fwd(k, out, sy, glog, (int)N, (int)C);
        else mtk_acc(k, out, sy, N * C);
    }
    return 0;
}

int mt_moe_backward(mt_moe_ctx *mc, mt_gpt_ctx *gx, int s, int li, int l, const void *x, const void *dout, void *dx,
                    int B, int T, double scale, mtk_grad_mode gm, int training, mt_err *e)
{
    mt_gpt *m = mc->m;
    const mt_gpt_config *c = &m->c;
    mtk *k = m->k;
    size_t N = (size_t)B * (size_t)T, C = (size_t)c->hidden_size, E = (size_t)mc->E, K = (size_t)mc->K;
    size_t st = 2 * E * (size_t)mc->max_batch + 1, R = (size_t)mc->rows[s];
    mtk_moe_route r = route_of(c);
    float *logits = mc->logits + (size_t)s * mc->nmax * E, *probs = mc->probs + (size_t)s * mc->nmax * K;
    int32_t *idx = mc->idx + (size_t)s * mc->nmax * K, *row = mc->row + (size_t)s * mc->nmax * K;
    int32_t *src = mc->src + (size_t)s * mc->rmax, *hc = mc->h_counts + (size_t)s * E;
    void *h1 = AT(mc->h1, (size_t)s * mc->rx * (size_t)mc->fc1), *y = AT(mc->y, (size_t)s * mc->rmax * C);
    int tr = mt_gpt_t(m, l, MT_T_ROUTER_W), t1 = mt_gpt_t(m, l, MT_T_EXPERT_FC1_W), t2 = mt_gpt_t(m, l, MT_T_EXPERT_FC2_W);
    /* with an expert tensor size below tp the routed part is the group's rows (Nr) of x, dout and dx; dx's other
     * rows get only the shared expert's partial sum */
    size_t Nr = group_rows(m, N);
    const void *xr = group_local(m, (void *)x, N, C), *doutr = group_local(m, (void *)dout, N, C);
    void *dxr = group_local(m, dx, N, C);
    if (m->experts_grouped && !mt_moe_rows_only(m)) mtk_zero(k, dx, N * C * m->asz);

    /* the experts, back to the tokens' rows (dx assigned), and the weights' gradients */
    mtk_moe_unpermute_bwd(k, mc->dy, mc->dprobs, doutr, y, row, probs, (int)Nr, (int)K, (int)C, (int)R);
    /* y is this rank's partial sum with the experts split over the tensor ranks (or over the expert-tensor group):
     * so is dout . y */
    mt_comm *split = !m->experts_grouped ? m->tp : m->etp_comm;
    if (split && mt_all_reduce(split, mc->dprobs, Nr * K, MT_C_F32, e)) return mt_err_prefix(e, "MoE layer %d", l);
    if (mc->P > 1) {   /* the rows' input gradients come back into xp */
        if (experts_ep_bwd(mc, gx, s, li, l, gm, e)) return -1;
        mtk_moe_permute_bwd(k, dxr, mc->xp, row, (int)Nr, (int)K, (int)C);
    } else {
        mtk_moe_permute(k, mc->xp, xr, src, (int)R, (int)C);   /* recomputed, as the activation */
        act_fwd(m, mc->a, h1, R, mc->F);
        if (gx) {   /* the inputs as the forward quantized them, the output gradients quantized */
            fp8_rows(mc, gx, li, 0, 0, mc->xp, hc, 1, C);
            fp8_rows(mc, gx, li, 1, 0, mc->a, hc, 1, (size_t)mc->F);
            fp8_rows(mc, gx, li, 1, 1, mc->dy, hc, 1, C);
        }
        mtk_grouped_matmul_bwd(k, mc->da, mt_gpt_g(m, t2), mc->dy, mc->a,
                               expert_w(gx, li, 1, mt_gpt_w(m, t2), C * (size_t)mc->F), hc, (int)E, mc->F, (int)C, gm);
        act_bwd(m, mc->dh, h1, mc->da, R, mc->F);
        if (gx) fp8_rows(mc, gx, li, 0, 1, mc->dh, hc, 1, (size_t)mc->fc1);
        mtk_grouped_matmul_bwd(k, mc->dy, mt_gpt_g(m, t1), mc->dh, mc->xp,
                               expert_w(gx, li, 0, mt_gpt_w(m, t1), (size_t)mc->fc1 * C), hc, (int)E, (int)C,
                               mc->fc1, gm);
        mtk_moe_permute_bwd(k, dxr, mc->dy, row, (int)Nr, (int)K, (int)C);
    }

    /* the router: the weights' gradient, and in training the auxiliary losses' */
    const float *aux = NULL;
    float zcoef = 0;
    int seq = (int)Nr;
    if (training && (aux_on(c) || c->moe_z_coeff > 0)) {
        int runs = mc->runs[s], rl = runs, q0 = 0;   /* all runs, and this rank's: rl from q0 */
        if (seq_whole(m)) rl = (int)(Nr / (size_t)T), q0 = m->tp_rank / m->etp * rl;
        seq = (int)Nr / rl;
        const float *hs = mc->h_stats + (size_t)s * st;
        /* the tokens of a whole run (over the routing ranks) */
        const double n = (double)seq * (seq_whole(m) ? m->cp_size : routing_ranks(m));
        if (aux_on(c)) {   /* d(coeff aux)/d score[n][e] = scale coeff E / (K n^2 runs) count[run][e] */
            float *h = mt_xmalloc((size_t)rl * E * sizeof *h);
            double f = scale * c->moe_aux_coeff * (double)E / ((double)K * n * n * (double)runs);
            for (int q = 0; q < rl; q++)
                for (size_t j = 0; j < E; j++) h[(size_t)q * E + j] = (float)(f * hs[2 * E * (size_t)(q0 + q) + j]);
            mtk_to_device(k, mc->aux, h, (size_t)rl * E * sizeof *h);
            free(h);
            aux = mc->aux;
        }
        if (c->moe_z_coeff > 0) zcoef = (float)(scale * c->moe_z_coeff / ((double)Nr * routing_ranks(m)));
    }
    mtk_moe_route_bwd(k, mc->dlogits, mc->dprobs, aux, seq, zcoef, logits, idx, (int)Nr, &r);
    /* every tensor rank computes the router's whole gradients: its input gradient counts once in the sum over
     * the ranks that follows (with an expert tensor size below tp, each group's rows' from its first rank, the
     * others' zero: the weight's gradient is summed over the tensor ranks by mt_gpt_reduce_grads) */
    void *dx0 = m->tp_rank == 0 ? dx : NULL;
    if (group_echo(m)) mtk_zero(k, mc->dlogits, Nr * E * sizeof(float));
    mtk_router_bwd(k, m->experts_grouped ? (group_echo(m) ? NULL : dxr) : dx0, mt_gpt_g(m, tr), mc->dlogits, xr,
                   mt_gpt_w(m, tr), (int)Nr, (int)C, (int)E, gm);

    /* the shared expert */
    if (mc->Fs) {
        void *sh1 = AT(mc->sh1, (size_t)s * mc->nmax * (size_t)mc->sfc1), *sy = AT(mc->sy, (size_t)s * mc->nmax * C);
        int s1 = mt_gpt_t(m, l, MT_T_SHARED_FC1_W), s2 = mt_gpt_t(m, l, MT_T_SHARED_FC2_W), g = mt_gpt_t(m, l, MT_T_SHARED_GATE_W);
        const void *dsy = dout;
        float *glog = g >= 0 ? mc->glog + (size_t)s * mc->nmax : NULL;
        if (g >= 0) {
            mtk_sigmoid_gate_bwd(k, mc->dsy, mc->dglog, dout, sy, glog, (int)N, (int)C);
            if (m->tp && mt_all_reduce(m->tp, mc->dglog, N, MT_C_F32, e)) return mt_err_prefix(e, "MoE layer %d", l);
            dsy = mc->dsy;
        }
        act_fwd(m, mc->sa, sh1, N, mc->Fs);
        const void *w2 = mt_gpt_w(m, s2), *xs = x;
        if (gx) {   /* as the forward quantized (its input aside again), the output gradients quantized */
            mt_fp8_input(gx, li, MT_FP8_FC2, mc->sa, mc->sa, N * (size_t)mc->Fs);
            mt_fp8_grad(gx, li, MT_FP8_FC2, mc->dsy, dsy, N * C), dsy = mc->dsy;
            w2 = mt_fp8_weight(gx, li, MT_FP8_FC2, w2, C * (size_t)mc->Fs);
        }
        mtk_matmul_bwd(k, mc->dsa, mt_gpt_g(m, s2), NULL, dsy, mc->sa, w2, (int)N, mc->Fs, (int)C, gm);
        act_bwd(m, mc->dsh, sh1, mc->dsa, N, mc->Fs);
        const void *w1 = mt_gpt_w(m, s1);
        if (gx) {
            mt_fp8_grad(gx, li, MT_FP8_FC1, mc->dsh, mc->dsh, N * (size_t)mc->sfc1);
            mt_fp8_input(gx, li, MT_FP8_FC1, mc->dsy, x, N * C), xs = mc->dsy;   /* dsy: done with */
            w1 = mt_fp8_weight(gx, li, MT_FP8_FC1, w1, (size_t)mc->sfc1 * C);
        }
        mtk_matmul_bwd(k, mc->dtmp, mt_gpt_g(m, s1), NULL, mc->dsh, xs, w1, (int)N, (int)C, mc->sfc1, gm);
        mtk_acc(k, dx, mc->dtmp, N * C);
        if (g >= 0) mtk_router_bwd(k, dx0, mt_gpt_g(m, g), mc->dglog, x, mt_gpt_w(m, g), (int)N, (int)C, 1, gm);
    }
    if (mtk_status(k, e)) return mt_err_prefix(e, "MoE layer %d backward", l);
    return 0;
}
