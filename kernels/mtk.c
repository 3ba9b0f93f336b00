/* mtk.c: opening a kernel backend by name and dispatching the public operations (kernels.h) to it. */
#include <stdlib.h>
#include <string.h>

#include "backend.h"

mtk *mtk_open(const char *backend, int threads, mt_err *e)
{
    const mtk_ops *ops = NULL;
    if (backend && !strcmp(backend, "cpu")) ops = &mtk_cpu_ops;
    else if (backend && !strcmp(backend, "cuda")) {
        mt_err_set(e, "this build has no CUDA backend");
        return NULL;
    } else {
        mt_err_set(e, "unknown kernel backend '%s' (have: cpu)", backend ? backend : "");
        return NULL;
    }
    mtk *k = calloc(1, sizeof *k);
    if (!k) {
        mt_err_set(e, "out of memory");
        return NULL;
    }
    k->ops = ops;
    if (ops->open(k, threads, e) < 0) {
        free(k);
        return NULL;
    }
    return k;
}

void mtk_close(mtk *k)
{
    if (!k) return;
    k->ops->close(k);
    free(k);
}

const char *mtk_name(const mtk *k) { return k->ops->name; }

void *mtk_alloc(mtk *k, size_t bytes, mt_err *e) { return k->ops->alloc(k, bytes, e); }
void mtk_free(mtk *k, void *p) { k->ops->free(k, p); }
void mtk_zero(mtk *k, void *p, size_t bytes) { k->ops->zero(k, p, bytes); }
void mtk_to_device(mtk *k, void *dst, const void *src, size_t bytes) { k->ops->to_device(k, dst, src, bytes); }
void mtk_to_host(mtk *k, void *dst, const void *src, size_t bytes) { k->ops->to_host(k, dst, src, bytes); }
void mtk_copy(mtk *k, void *dst, const void *src, size_t bytes) { k->ops->copy(k, dst, src, bytes); }
void mtk_sync(mtk *k) { k->ops->sync(k); }

void mtk_embed_fwd(mtk *k, float *out, const int32_t *tok, const float *wte, const float *wpe, int B, int T, int C)
{
    k->ops->embed_fwd(k, out, tok, wte, wpe, B, T, C);
}
void mtk_embed_bwd(mtk *k, float *dwte, float *dwpe, const float *dout, const int32_t *tok, int B, int T, int C)
{
    k->ops->embed_bwd(k, dwte, dwpe, dout, tok, B, T, C);
}
void mtk_layernorm_fwd(mtk *k, float *out, float *mean, float *rstd, const float *inp, const float *w,
                       const float *b, int N, int C, float eps)
{
    k->ops->layernorm_fwd(k, out, mean, rstd, inp, w, b, N, C, eps);
}
void mtk_layernorm_bwd(mtk *k, float *dinp, float *dw, float *db, const float *dout, const float *inp,
                       const float *w, const float *mean, const float *rstd, int N, int C)
{
    k->ops->layernorm_bwd(k, dinp, dw, db, dout, inp, w, mean, rstd, N, C);
}
void mtk_matmul_fwd(mtk *k, float *out, const float *inp, const float *w, const float *bias, int N, int C, int OC)
{
    k->ops->matmul_fwd(k, out, inp, w, bias, N, C, OC);
}
void mtk_matmul_bwd(mtk *k, float *dinp, float *dw, float *dbias, const float *dout, const float *inp,
                    const float *w, int N, int C, int OC)
{
    k->ops->matmul_bwd(k, dinp, dw, dbias, dout, inp, w, N, C, OC);
}
void mtk_gelu_fwd(mtk *k, float *out, const float *inp, size_t n, int exact) { k->ops->gelu_fwd(k, out, inp, n, exact); }
void mtk_gelu_bwd(mtk *k, float *dinp, const float *inp, const float *dout, size_t n, int exact)
{
    k->ops->gelu_bwd(k, dinp, inp, dout, n, exact);
}
void mtk_add(mtk *k, float *out, const float *a, const float *b, size_t n) { k->ops->add(k, out, a, b, n); }
void mtk_acc(mtk *k, float *y, const float *x, size_t n) { k->ops->acc(k, y, x, n); }
void mtk_scale(mtk *k, float *x, float s, size_t n) { k->ops->scale(k, x, s, n); }
void mtk_dropout_fwd(mtk *k, float *out, const float *inp, size_t n, const mtk_dropout *d)
{
    k->ops->dropout_fwd(k, out, inp, n, d);
}
void mtk_dropout_bwd(mtk *k, float *dinp, const float *dout, size_t n, const mtk_dropout *d)
{
    k->ops->dropout_bwd(k, dinp, dout, n, d);
}
void mtk_attention_fwd(mtk *k, float *out, float *lse, const float *qkv, int B, int T, int NH, int HS,
                       const mtk_dropout *drop)
{
    k->ops->attention_fwd(k, out, lse, qkv, B, T, NH, HS, drop);
}
void mtk_attention_bwd(mtk *k, float *dqkv, const float *dout, const float *qkv, const float *out, const float *lse,
                       int B, int T, int NH, int HS, const mtk_dropout *drop)
{
    k->ops->attention_bwd(k, dqkv, dout, qkv, out, lse, B, T, NH, HS, drop);
}
void mtk_xent_fwd_bwd(mtk *k, float *losses, float *dlogits, const float *logits, const int32_t *target,
                      const float *dscale, int N, int V)
{
    k->ops->xent_fwd_bwd(k, losses, dlogits, logits, target, dscale, N, V);
}
double mtk_sumsq(mtk *k, const float *x, size_t n) { return k->ops->sumsq(k, x, n); }
size_t mtk_count_nonfinite(mtk *k, const float *x, size_t n) { return k->ops->count_nonfinite(k, x, n); }
void mtk_adamw(mtk *k, float *p, const float *g, float *m, float *v, size_t n, float lr, float b1, float b2,
               float eps, float wd, int t, float grad_scale)
{
    k->ops->adamw(k, p, g, m, v, n, lr, b1, b2, eps, wd, t, grad_scale);
}
