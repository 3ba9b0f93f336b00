/* fp8.c: the FP8 state of the model's linear products and the quantize-dequantize around them (fp8.h):
 * the scales and amax histories of every product's input, weight and output gradient, their delayed-
 * scaling updates after each pass, and the copies a pass keeps so that recomputation and the backward
 * quantize as the forward did. */
#include "model/fp8.h"

#include <stdlib.h>

#include "model/gpt_impl.h"
#include "util/err.h"

struct mt_fp8_state {
    mt_fp8_recipe r;
    int nl, sf, sb;          /* local layers; forward tensors 8 nl, gradients 4 nl */
    float *scale_f, *hist_f; /* device [sf], [len][sf] */
    float *scale_b, *hist_b; /* device [sb], [len][sb] */
    float *wscale;           /* device [sf]: the scales at the iteration's first training pass (the weights'
                                entries are used) */
    void *wq;                /* one product's quantized weight, activation dtype */
    mt_comm *dp;             /* not owned */
    int new_iter;            /* the next training forward is the iteration's first */
};

void mt_fp8_free(mtk *k, mt_fp8_state *s)
{
    if (!s) return;
    float *f[] = {s->scale_f, s->hist_f, s->scale_b, s->hist_b, s->wscale};
    for (size_t i = 0; i < sizeof f / sizeof *f; i++)
        if (f[i]) mtk_free(k, f[i]);
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

int mt_gpt_set_fp8(mt_gpt *m, const mt_fp8_recipe *r, mt_comm *dp, mt_err *e)
{
    if (!r || !r->on) return 0;
    const mt_gpt_config *c = &m->c;
    int C = c->hidden_size, Cl = C / m->tp_size;
    if (m->fp8) return mt_err_set(e, "FP8: set twice");
    if (m->ctx_bytes) return mt_err_set(e, "FP8: set after the model's contexts were made");
    if (c->num_experts > 0) return mt_err_set(e, "--fp8-format: not implemented for MoE layers (--num-experts)");
    if (m->vp > 1) return mt_err_set(e, "--fp8-format: not implemented with model chunks (--num-layers-per-virtual-pipeline-stage)");
    if (m->ffn < Cl)
        return mt_err_set(e, "--fp8-format: an ffn (%d per tensor rank) narrower than the hidden size (%d per rank) is not supported",
                          m->ffn, Cl);
    if (r->history_len < 1) return mt_err_set(e, "--fp8-amax-history-len: %d, must be at least 1", r->history_len);
    if (r->margin < 0) return mt_err_set(e, "--fp8-margin: %d, must be at least 0", r->margin);
    mt_fp8_state *s = mt_xcalloc(1, sizeof *s);
    s->r = *r;
    s->nl = m->nl;
    s->sf = 8 * m->nl;
    s->sb = 4 * m->nl;
    s->dp = dp && dp->size > 1 ? dp : NULL;
    s->new_iter = 1;
    size_t L = (size_t)r->history_len, fl = sizeof(float);
    size_t wn = (size_t)C * (size_t)m->qkvw;
    size_t more[] = {(size_t)Cl * C, (size_t)C * (size_t)m->fcw, (size_t)m->ffn * C};
    for (size_t i = 0; i < 3; i++) wn = more[i] > wn ? more[i] : wn;
    mtk *k = m->k;
    if (!(s->scale_f = ones(k, s->sf > 0 ? s->sf : 1, e)) || !(s->scale_b = ones(k, s->sb > 0 ? s->sb : 1, e)) ||
        !(s->wscale = ones(k, s->sf > 0 ? s->sf : 1, e)) ||
        !(s->hist_f = mtk_alloc(k, (L * (size_t)s->sf + 1) * fl, e)) ||
        !(s->hist_b = mtk_alloc(k, (L * (size_t)s->sb + 1) * fl, e)) || !(s->wq = mtk_alloc(k, wn * m->asz, e))) {
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
    return L1 * (size_t)(s->sf + s->sb);
}

void mt_gpt_fp8_layers(const mt_gpt *m, int *first, int *n)
{
    *first = m->l0;
    *n = m->nl;
}

/* The state's four arrays in checkpoint order, and their lengths. */
static void parts(const mt_fp8_state *s, float **p, size_t *n)
{
    size_t L = (size_t)s->r.history_len;
    p[0] = s->scale_f, n[0] = (size_t)s->sf;
    p[1] = s->hist_f, n[1] = L * (size_t)s->sf;
    p[2] = s->scale_b, n[2] = (size_t)s->sb;
    p[3] = s->hist_b, n[3] = L * (size_t)s->sb;
}

void mt_gpt_fp8_state_get(mt_gpt *m, float *host)
{
    if (!m->fp8) return;
    float *p[4];
    size_t n[4];
    parts(m->fp8, p, n);
    for (int i = 0; i < 4; host += n[i], i++) mtk_to_host(m->k, host, p[i], n[i] * sizeof(float));
    mt_err e;
    (void)mtk_sync(m->k, &e);
}

void mt_gpt_fp8_state_set(mt_gpt *m, const float *host)
{
    if (!m->fp8) return;
    float *p[4];
    size_t n[4];
    parts(m->fp8, p, n);
    for (int i = 0; i < 4; host += n[i], i++) mtk_to_device(m->k, p[i], host, n[i] * sizeof(float));
    mt_err e;
    (void)mtk_sync(m->k, &e);
    m->fp8->new_iter = 1;
}

float *mt_fp8_ctx_scales(mt_gpt *m, mt_err *e)
{
    if (!m->fp8) return NULL;
    return mtk_alloc(m->k, (size_t)(m->fp8->sf > 0 ? m->fp8->sf : 1) * sizeof(float), e);
}

void mt_fp8_new_iteration(mt_gpt *m)
{
    if (m->fp8) m->fp8->new_iter = 1;
}

void mt_fp8_forward_begin(mt_gpt_ctx *x)
{
    mt_fp8_state *s = x->m->fp8;
    if (!s) return;
    size_t b = (size_t)s->sf * sizeof(float);
    if (x->training && s->new_iter) mtk_copy(x->m->k, s->wscale, s->scale_f, b);
    mtk_copy(x->m->k, x->fp8_scale, s->scale_f, b);
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
    if (reduce_amax(m, s->hist_f, s->sf, e)) return -1;
    mtk_fp8_scale_update(m->k, s->hist_f, s->scale_f, s->sf, s->r.history_len, s->r.fwd, s->r.algo, s->r.margin);
    s->new_iter = 0;
    return 0;
}

int mt_fp8_backward_end(mt_gpt_ctx *x, mt_err *e)
{
    mt_gpt *m = x->m;
    mt_fp8_state *s = m->fp8;
    if (!s) return 0;
    if (reduce_amax(m, s->hist_b, s->sb, e)) return -1;
    mtk_fp8_scale_update(m->k, s->hist_b, s->scale_b, s->sb, s->r.history_len, s->r.bwd, s->r.algo, s->r.margin);
    return 0;
}

/* Whether this pass records the forward tensors' amaxes: a training forward (not the backward, not its
 * recomputation). */
static int records(const mt_gpt_ctx *x) { return x->training && !x->fp8_replay; }

void mt_fp8_input(mt_gpt_ctx *x, int li, int p, void *out, const void *in, size_t n)
{
    mt_fp8_state *s = x->m->fp8;
    int j = 8 * li + 2 * p;
    mtk_fp8_qdq(x->m->k, out, in, n, s->r.fwd, x->fp8_scale + j, records(x) ? s->hist_f + j : NULL);
}

const void *mt_fp8_weight(mt_gpt_ctx *x, int li, int p, const void *w, size_t n)
{
    mt_fp8_state *s = x->m->fp8;
    int j = 8 * li + 2 * p + 1;
    float *amax = records(x) && s->new_iter ? s->hist_f + j : NULL;
    mtk_fp8_qdq(x->m->k, s->wq, w, n, s->r.fwd, s->wscale + j, amax);
    return s->wq;
}

void mt_fp8_grad(mt_gpt_ctx *x, int li, int p, void *out, const void *in, size_t n)
{
    mt_fp8_state *s = x->m->fp8;
    int j = 4 * li + p;
    mtk_fp8_qdq(x->m->k, out, in, n, s->r.bwd, s->scale_b + j, s->hist_b + j);
}
