/* fp8.c: the FP8 state of the model's linear products and the quantize-dequantize around them (fp8.h):
 * the scales and amax histories of every product's input, weight and output gradient, their delayed-
 * scaling updates after each pass, and the copies a pass keeps so that recomputation and the backward
 * quantize as the forward did. */
#include "model/fp8.h"

#include <stdlib.h>

#include "model/gpt_impl.h"
#include "util/err.h"

/* One model chunk's tensors (all of the stage's without the interleaved schedule): its layers' forward
 * tensors (8 a layer, 4 El more in an MoE layer) and gradients (4, and 2 El). */
typedef struct fp8_chunk {
    int sf, sb;              /* its forward tensors and gradients */
    float *scale_f, *hist_f; /* device [sf], [len][sf] */
    float *scale_b, *hist_b; /* device [sb], [len][sb] */
    float *wscale;           /* device [sf]: the scales at the iteration's first training pass (the weights'
                                entries are used) */
    int new_iter;            /* the chunk's next training forward is the iteration's first */
} fp8_chunk;

struct mt_fp8_state {
    mt_fp8_recipe r;
    int nl, vp, cl, El;      /* the stage's layers, its chunks, layers per chunk, the rank's experts of an MoE layer */
    int *of, *ob;            /* [nl + 1]: local layer li's first forward tensor and gradient in the stage's order */
    fp8_chunk *c;            /* [vp] */
    void *wq;                /* one product's quantized weight, activation dtype */
    mt_comm *dp;             /* not owned */
    size_t bytes;            /* device memory held (the chunks' arrays and wq) */
};

void mt_fp8_free(mtk *k, mt_fp8_state *s)
{
    if (!s) return;
    for (int c = 0; s->c && c < s->vp; c++) {
        float *f[] = {s->c[c].scale_f, s->c[c].hist_f, s->c[c].scale_b, s->c[c].hist_b, s->c[c].wscale};
        for (size_t i = 0; i < sizeof f / sizeof *f; i++)
            if (f[i]) mtk_free(k, f[i]);
    }
    free(s->c);
    free(s->of);
    if (s->wq) mtk_free(k, s->wq);
    free(s);
}

static float *ones(mtk *k, int n, mt_err *e)
{
    float *d = mtk_alloc(k, (size_t)n * sizeof(float), e);
    if (!d) return NULL;
    float *h = mt_xmalloc((size_t)n * sizeof(float));
    for (int i = 0; i < n; i++) h[i] = 1.0f;
    mtk_to_device(k, d, h, (size_t)n * sizeof(float));
    int rc = mtk_sync(k, e);
    free(h);
    if (rc) {
        mtk_free(k, d);
        return NULL;
    }
    return d;
}

/* The bytes of a chunk's arrays (chunk_alloc's) */
static size_t chunk_bytes(int sf, int sb, size_t L)
{
    size_t f = (size_t)(sf > 0 ? sf : 1), b = (size_t)(sb > 0 ? sb : 1);
    return (2 * f + b + L * (size_t)sf + 1 + L * (size_t)sb + 1) * sizeof(float);
}

static int chunk_alloc(mtk *k, fp8_chunk *c, int sf, int sb, size_t L, mt_err *e)
{
    size_t fl = sizeof(float);
    c->new_iter = 1;
    return !(c->scale_f = ones(k, sf > 0 ? sf : 1, e)) || !(c->scale_b = ones(k, sb > 0 ? sb : 1, e)) ||
                   !(c->wscale = ones(k, sf > 0 ? sf : 1, e)) || !(c->hist_f = mtk_alloc(k, (L * (size_t)sf + 1) * fl, e)) ||
                   !(c->hist_b = mtk_alloc(k, (L * (size_t)sb + 1) * fl, e))
               ? -1
               : 0;
}

void mt_fp8_layer_tensors(int moe, int El, int *f, int *b)
{
    *f = 8 + (moe ? 4 * El : 0), *b = 4 + (moe ? 2 * El : 0);
}

/* The tensors of the stage's layers: El (the experts of an MoE layer on this rank), of and ob [nl + 1] (each
 * local layer's first forward tensor and gradient); returns the elements of the largest weight quantized at
 * once: a dense product's, or an MoE layer's El experts' of a product (or its shared expert's). */
static size_t layout(const mt_gpt *m, int *El, int *of, int *ob)
{
    const mt_gpt_config *c = &m->c;
    *El = c->num_experts > 0 ? c->num_experts / (m->ep_size > 1 ? m->ep_size : 1) : 0;
    of[0] = ob[0] = 0;
    for (int li = 0; li < m->nl; li++) {
        int f, b;
        mt_fp8_layer_tensors(mt_arch_is_moe(&m->layout.arch, mt_layout_global_layer(&m->layout, li)), *El, &f, &b);
        of[li + 1] = of[li] + f, ob[li + 1] = ob[li] + b;
    }
    size_t C = (size_t)c->hidden_size, Cl = C / (size_t)m->tp_size, e = (size_t)*El;
    int glu = c->mlp == MT_MLP_SWIGLU ? 2 : 1, F = c->num_experts > 0 ? c->moe_ffn_hidden_size / m->etp : 0;
    size_t Fs = (size_t)(c->moe_shared_ffn / m->tp_size), wn = C * (size_t)m->qkvw;
    size_t more[] = {Cl * C, C * (size_t)m->fcw, (size_t)m->ffn * C, e * (size_t)(glu * F) * C, e * (size_t)F * C,
                     (size_t)glu * Fs * C};
    for (size_t i = 0; i < sizeof more / sizeof *more; i++) wn = more[i] > wn ? more[i] : wn;
    return wn;
}

/* A chunk's layers [ch cl, (ch + 1) cl): its forward tensors and gradients */
static void chunk_size(const int *of, const int *ob, int ch, int cl, int *sf, int *sb)
{
    *sf = of[(ch + 1) * cl] - of[ch * cl], *sb = ob[(ch + 1) * cl] - ob[ch * cl];
}

size_t mt_fp8_plan_bytes(const mt_gpt *m, int history_len, size_t *ctx_bytes)
{
    int El, vp = m->vp > 1 ? m->vp : 1, cl = m->nl / vp, sfmax = 1;
    int *of = mt_xcalloc(2 * ((size_t)m->nl + 1), sizeof *of), *ob = of + m->nl + 1;
    size_t bytes = layout(m, &El, of, ob) * m->asz;
    for (int ch = 0; ch < vp; ch++) {
        int sf, sb;
        chunk_size(of, ob, ch, cl, &sf, &sb);
        bytes += chunk_bytes(sf, sb, (size_t)history_len);
        sfmax = sf > sfmax ? sf : sfmax;
    }
    free(of);
    *ctx_bytes = (size_t)sfmax * sizeof(float);
    return bytes;
}

size_t mt_fp8_bytes(const mt_gpt *m) { return m->fp8 ? m->fp8->bytes : 0; }

int mt_gpt_set_fp8(mt_gpt *m, const mt_fp8_recipe *r, mt_comm *dp, mt_err *e)
{
    if (!r || !r->on) return 0;
    const mt_gpt_config *c = &m->c;
    int C = c->hidden_size, Cl = C / m->tp_size;
    if (m->fp8) return mt_err_set(e, "FP8: set twice");
    if (m->ctx_bytes) return mt_err_set(e, "FP8: set after the model's contexts were made");
    if (m->ffn < Cl)
        return mt_err_set(e, "--fp8-format: an ffn (%d per tensor rank) narrower than the hidden size (%d per rank) is not supported",
                          m->ffn, Cl);
    if (r->history_len < 1) return mt_err_set(e, "--fp8-amax-history-len: %d, must be at least 1", r->history_len);
    if (r->margin < 0) return mt_err_set(e, "--fp8-margin: %d, must be at least 0", r->margin);
    mt_fp8_state *s = mt_xcalloc(1, sizeof *s);
    s->r = *r;
    s->nl = m->nl;
    s->vp = m->vp > 1 ? m->vp : 1;
    s->cl = m->nl / s->vp;
    s->of = mt_xcalloc(2 * ((size_t)m->nl + 1), sizeof *s->of);
    s->ob = s->of + m->nl + 1;
    size_t wn = layout(m, &s->El, s->of, s->ob);
    s->dp = dp && dp->size > 1 ? dp : NULL;
    s->c = mt_xcalloc((size_t)s->vp, sizeof *s->c);
    mtk *k = m->k;
    int failed = !(s->wq = mtk_alloc(k, wn * m->asz, e));
    s->bytes = wn * m->asz;
    for (int ch = 0; ch < s->vp && !failed; ch++) {
        fp8_chunk *cc = &s->c[ch];
        chunk_size(s->of, s->ob, ch, s->cl, &cc->sf, &cc->sb);
        failed = chunk_alloc(k, cc, cc->sf, cc->sb, (size_t)r->history_len, e);
        s->bytes += chunk_bytes(cc->sf, cc->sb, (size_t)r->history_len);
    }
    if (failed) {
        mt_fp8_free(k, s);
        return mt_err_prefix(e, "FP8 state");
    }
    m->fp8 = s;
    return 0;
}

size_t mt_gpt_fp8_state_numel(const mt_gpt *m)
{
    const mt_fp8_state *s = m->fp8;
    if (!s) return 0;
    size_t L1 = (size_t)s->r.history_len + 1;
    return L1 * (size_t)(s->of[s->nl] + s->ob[s->nl]);
}

int mt_gpt_fp8_local_experts(const mt_gpt *m) { return m->fp8 ? m->fp8->El : 0; }

void mt_gpt_fp8_layers(const mt_gpt *m, int *first, int *n)
{
    *first = m->l0;
    *n = m->nl;
}

/* Between the stage-wide host order (scale_f [SF], hist_f [L][SF], scale_b [SB], hist_b [L][SB], SF and SB
 * the stage's forward tensors and gradients, layer by layer) and the chunks' device arrays: to_host 1 gets,
 * 0 sets. */
static void transfer(mt_gpt *m, float *host, int to_host)
{
    mt_fp8_state *s = m->fp8;
    size_t L = (size_t)s->r.history_len, SF = (size_t)s->of[s->nl], SB = (size_t)s->ob[s->nl];
    size_t off[4] = {0, SF, (L + 1) * SF, (L + 1) * SF + SB}, width[4] = {SF, SF, SB, SB};
    for (int ch = 0; ch < s->vp; ch++) {
        fp8_chunk *c = &s->c[ch];
        float *dev[4] = {c->scale_f, c->hist_f, c->scale_b, c->hist_b};
        for (int a = 0; a < 4; a++) {
            const int *o = a < 2 ? s->of : s->ob;
            size_t rows = a % 2 ? L : 1, cw = (size_t)(a < 2 ? c->sf : c->sb), c0 = (size_t)o[ch * s->cl];   /* a chunk's row */
            for (size_t r = 0; r < rows; r++) {
                float *h = host + off[a] + r * width[a] + c0, *d = dev[a] + r * cw;
                if (to_host) mtk_to_host(m->k, h, d, cw * sizeof(float));
                else mtk_to_device(m->k, d, h, cw * sizeof(float));
            }
        }
        c->new_iter = 1;
    }
    mt_err e;
    (void)mtk_sync(m->k, &e);
}

void mt_gpt_fp8_state_get(mt_gpt *m, float *host)
{
    if (m->fp8) transfer(m, host, 1);
}

void mt_gpt_fp8_state_set(mt_gpt *m, const float *host)
{
    if (m->fp8) transfer(m, (float *)host, 0);
}

size_t mt_fp8_ctx_scale_bytes(const mt_gpt *m)
{
    int sf = 1;
    for (int ch = 0; m->fp8 && ch < m->fp8->vp; ch++) sf = m->fp8->c[ch].sf > sf ? m->fp8->c[ch].sf : sf;
    return m->fp8 ? (size_t)sf * sizeof(float) : 0;
}

float *mt_fp8_ctx_scales(mt_gpt *m, mt_err *e)
{
    if (!m->fp8) return NULL;
    return mtk_alloc(m->k, mt_fp8_ctx_scale_bytes(m), e);
}

void mt_fp8_new_iteration(mt_gpt *m)
{
    for (int ch = 0; m->fp8 && ch < m->fp8->vp; ch++) m->fp8->c[ch].new_iter = 1;
}

static fp8_chunk *chunk_of(const mt_gpt_ctx *x) { return &x->m->fp8->c[x->chunk_id]; }

void mt_fp8_forward_begin(mt_gpt_ctx *x)
{
    mt_fp8_state *s = x->m->fp8;
    if (!s) return;
    fp8_chunk *c = chunk_of(x);
    size_t b = (size_t)c->sf * sizeof(float);
    if (x->training && c->new_iter) mtk_copy(x->m->k, c->wscale, c->scale_f, b);
    mtk_copy(x->m->k, x->fp8_scale, c->scale_f, b);
}

/* Row 0 of a history (n tensors) reduced with max over the amax reduction group. */
static int reduce_amax(mt_gpt *m, float *row, int n, mt_err *e)
{
    mt_comm *g[] = {m->tp, m->cp, m->fp8->dp};
    for (int i = 0; i < 3; i++)
        if (g[i] && n > 0 && mt_all_reduce_op(g[i], row, (size_t)n, MT_C_F32, MT_OP_MAX, e))
            return mt_err_prefix(e, "FP8 amax reduction");
    return 0;
}

int mt_fp8_forward_end(mt_gpt_ctx *x, mt_err *e)
{
    mt_gpt *m = x->m;
    mt_fp8_state *s = m->fp8;
    if (!s || !x->training) return 0;
    fp8_chunk *c = chunk_of(x);
    if (reduce_amax(m, c->hist_f, c->sf, e)) return -1;
    mtk_fp8_scale_update(m->k, c->hist_f, c->scale_f, c->sf, s->r.history_len, s->r.fwd, s->r.algo, s->r.margin);
    c->new_iter = 0;
    return 0;
}

int mt_fp8_backward_end(mt_gpt_ctx *x, mt_err *e)
{
    mt_gpt *m = x->m;
    mt_fp8_state *s = m->fp8;
    if (!s) return 0;
    fp8_chunk *c = chunk_of(x);
    if (reduce_amax(m, c->hist_b, c->sb, e)) return -1;
    mtk_fp8_scale_update(m->k, c->hist_b, c->scale_b, c->sb, s->r.history_len, s->r.bwd, s->r.algo, s->r.margin);
    return 0;
}

/* Whether this pass records the forward tensors' amaxes: a training forward (not the backward, not its
 * recomputation). */
static int records(const mt_gpt_ctx *x) { return x->training && !x->fp8_replay; }

/* The chunk's forward tensor / gradient `slot` of local layer li (fwd: 2 p + 0 input, + 1 weight of product p;
 * 8 + 4 e + 2 p + 0 / 1 of expert e's product p; grad: p, 4 + 2 e + p). */
static int fwd_j(const mt_gpt_ctx *x, int li, int slot) { return x->m->fp8->of[li] - x->m->fp8->of[x->lc0] + slot; }
static int bwd_j(const mt_gpt_ctx *x, int li, int slot) { return x->m->fp8->ob[li] - x->m->fp8->ob[x->lc0] + slot; }

static void input_q(mt_gpt_ctx *x, int j, void *out, const void *in, size_t n)
{
    mt_fp8_state *s = x->m->fp8;
    mtk_fp8_qdq(x->m->k, out, in, n, s->r.fwd, x->fp8_scale + j, records(x) ? chunk_of(x)->hist_f + j : NULL);
}
static void weight_q(mt_gpt_ctx *x, int j, void *out, const void *w, size_t n)
{
    mt_fp8_state *s = x->m->fp8;
    fp8_chunk *c = chunk_of(x);
    mtk_fp8_qdq(x->m->k, out, w, n, s->r.fwd, c->wscale + j, records(x) && c->new_iter ? c->hist_f + j : NULL);
}
static void grad_q(mt_gpt_ctx *x, int j, void *out, const void *in, size_t n)
{
    mt_fp8_state *s = x->m->fp8;
    fp8_chunk *c = chunk_of(x);
    mtk_fp8_qdq(x->m->k, out, in, n, s->r.bwd, c->scale_b + j, c->hist_b + j);
}

void mt_fp8_input(mt_gpt_ctx *x, int li, int p, void *out, const void *in, size_t n)
{
    input_q(x, fwd_j(x, li, 2 * p), out, in, n);
}

const void *mt_fp8_weight(mt_gpt_ctx *x, int li, int p, const void *w, size_t n)
{
    weight_q(x, fwd_j(x, li, 2 * p + 1), x->m->fp8->wq, w, n);
    return x->m->fp8->wq;
}

void mt_fp8_grad(mt_gpt_ctx *x, int li, int p, void *out, const void *in, size_t n)
{
    grad_q(x, bwd_j(x, li, p), out, in, n);
}

void mt_fp8_expert_input(mt_gpt_ctx *x, int li, int e, int p, void *out, const void *in, size_t n)
{
    if (n) input_q(x, fwd_j(x, li, 8 + 4 * e + 2 * p), out, in, n);
}

const void *mt_fp8_expert_weights(mt_gpt_ctx *x, int li, int p, const void *w, size_t n)
{
    mt_fp8_state *s = x->m->fp8;
    size_t b = n * x->m->asz;
    for (int e = 0; e < s->El; e++)
        weight_q(x, fwd_j(x, li, 8 + 4 * e + 2 * p + 1), (char *)s->wq + (size_t)e * b, (const char *)w + (size_t)e * b, n);
    return s->wq;
}

void mt_fp8_expert_grad(mt_gpt_ctx *x, int li, int e, int p, void *out, const void *in, size_t n)
{
    if (n) grad_q(x, bwd_j(x, li, 4 + 2 * e + p), out, in, n);
}
