/* fp8.c: the FP8 state of the model's linear products and the quantize-dequantize around them (fp8.h):
 * the scales and amax histories of every product's input, weight and output gradient, their delayed-
 * scaling updates after each pass, and the copies a pass keeps so that recomputation and the backward
 * quantize as the forward did. */
#include "model/fp8.h"

#include <stdlib.h>

#include "model/gpt_impl.h"
#include "util/err.h"

/* One model chunk's tensors (all of the stage's without the interleaved schedule): its layers' forward
 * tensors 8 per layer, gradients 4 per layer. */
typedef struct fp8_chunk {
    float *scale_f, *hist_f; /* device [sf], [len][sf] */
    float *scale_b, *hist_b; /* device [sb], [len][sb] */
    float *wscale;           /* device [sf]: the scales at the iteration's first training pass (the weights'
                                entries are used) */
    int new_iter;            /* the chunk's next training forward is the iteration's first */
} fp8_chunk;

struct mt_fp8_state {
    mt_fp8_recipe r;
    int nl, vp, cl, sf, sb;  /* the stage's layers, its chunks, layers per chunk, a chunk's 8 cl and 4 cl */
    fp8_chunk *c;            /* [vp] */
    void *wq;                /* one product's quantized weight, activation dtype */
    mt_comm *dp;             /* not owned */
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

int mt_gpt_set_fp8(mt_gpt *m, const mt_fp8_recipe *r, mt_comm *dp, mt_err *e)
{
    if (!r || !r->on) return 0;
    const mt_gpt_config *c = &m->c;
    int C = c->hidden_size, Cl = C / m->tp_size;
    if (m->fp8) return mt_err_set(e, "FP8: set twice");
    if (m->ctx_bytes) return mt_err_set(e, "FP8: set after the model's contexts were made");
    if (c->num_experts > 0) return mt_err_set(e, "--fp8-format: not implemented for MoE layers (--num-experts)");
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
    s->sf = 8 * s->cl;
    s->sb = 4 * s->cl;
    s->dp = dp && dp->size > 1 ? dp : NULL;
    s->c = mt_xcalloc((size_t)s->vp, sizeof *s->c);
    size_t wn = (size_t)C * (size_t)m->qkvw;
    size_t more[] = {(size_t)Cl * C, (size_t)C * (size_t)m->fcw, (size_t)m->ffn * C};
    for (size_t i = 0; i < 3; i++) wn = more[i] > wn ? more[i] : wn;
    mtk *k = m->k;
    int failed = !(s->wq = mtk_alloc(k, wn * m->asz, e));
    for (int ch = 0; ch < s->vp && !failed; ch++) failed = chunk_alloc(k, &s->c[ch], s->sf, s->sb, (size_t)r->history_len, e);
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
    return L1 * 12 * (size_t)s->nl;
}

void mt_gpt_fp8_layers(const mt_gpt *m, int *first, int *n)
{
    *first = m->l0;
    *n = m->nl;
}

/* Between the stage-wide host order (scale_f [8 nl], hist_f [L][8 nl], scale_b [4 nl], hist_b [L][4 nl])
 * and the chunks' device arrays: to_host 1 gets, 0 sets. */
static void transfer(mt_gpt *m, float *host, int to_host)
{
    mt_fp8_state *s = m->fp8;
    size_t L = (size_t)s->r.history_len, nl = (size_t)s->nl;
    size_t off[4] = {0, 8 * nl, (L + 1) * 8 * nl, (L + 1) * 8 * nl + 4 * nl};
    for (int ch = 0; ch < s->vp; ch++) {
        fp8_chunk *c = &s->c[ch];
        float *dev[4] = {c->scale_f, c->hist_f, c->scale_b, c->hist_b};
        for (int a = 0; a < 4; a++) {
            size_t w = a < 2 ? 8 : 4, rows = a % 2 ? L : 1, cw = w * (size_t)s->cl;   /* a chunk's row */
            for (size_t r = 0; r < rows; r++) {
                float *h = host + off[a] + r * w * nl + (size_t)ch * cw, *d = dev[a] + r * cw;
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

float *mt_fp8_ctx_scales(mt_gpt *m, mt_err *e)
{
    if (!m->fp8) return NULL;
    return mtk_alloc(m->k, (size_t)(m->fp8->sf > 0 ? m->fp8->sf : 1) * sizeof(float), e);
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
    size_t b = (size_t)s->sf * sizeof(float);
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
    if (reduce_amax(m, c->hist_f, s->sf, e)) return -1;
    mtk_fp8_scale_update(m->k, c->hist_f, c->scale_f, s->sf, s->r.history_len, s->r.fwd, s->r.algo, s->r.margin);
    c->new_iter = 0;
    return 0;
}

int mt_fp8_backward_end(mt_gpt_ctx *x, mt_err *e)
{
    mt_gpt *m = x->m;
    mt_fp8_state *s = m->fp8;
    if (!s) return 0;
    fp8_chunk *c = chunk_of(x);
    if (reduce_amax(m, c->hist_b, s->sb, e)) return -1;
    mtk_fp8_scale_update(m->k, c->hist_b, c->scale_b, s->sb, s->r.history_len, s->r.bwd, s->r.algo, s->r.margin);
    return 0;
}

/* Whether this pass records the forward tensors' amaxes: a training forward (not the backward, not its
 * recomputation). */
static int records(const mt_gpt_ctx *x) { return x->training && !x->fp8_replay; }

void mt_fp8_input(mt_gpt_ctx *x, int li, int p, void *out, const void *in, size_t n)
{
    mt_fp8_state *s = x->m->fp8;
    int j = 8 * (li - x->lc0) + 2 * p;
    mtk_fp8_qdq(x->m->k, out, in, n, s->r.fwd, x->fp8_scale + j, records(x) ? chunk_of(x)->hist_f + j : NULL);
}

const void *mt_fp8_weight(mt_gpt_ctx *x, int li, int p, const void *w, size_t n)
{
    mt_fp8_state *s = x->m->fp8;
    fp8_chunk *c = chunk_of(x);
    int j = 8 * (li - x->lc0) + 2 * p + 1;
    float *amax = records(x) && c->new_iter ? c->hist_f + j : NULL;
    mtk_fp8_qdq(x->m->k, s->wq, w, n, s->r.fwd, c->wscale + j, amax);
    return s->wq;
}

void mt_fp8_grad(mt_gpt_ctx *x, int li, int p, void *out, const void *in, size_t n)
{
    mt_fp8_state *s = x->m->fp8;
    fp8_chunk *c = chunk_of(x);
    int j = 4 * (li - x->lc0) + p;
    mtk_fp8_qdq(x->m->k, out, in, n, s->r.bwd, c->scale_b + j, c->hist_b + j);
}
