/* backend.h: the table of operations a kernel backend provides, and the mtk handle that carries it.
 * Private to kernels/: the public API (kernels.h) dispatches through k->ops. Every entry has the
 * signature of the public function of the same name. */
#ifndef MT_KERNELS_BACKEND_H
#define MT_KERNELS_BACKEND_H

#include "kernels.h"

typedef struct mtk_ops {
    const char *name;
    int (*open)(mtk *k, int threads, mt_err *e);
    void (*close)(mtk *k);

    void *(*alloc)(mtk *k, size_t bytes, mt_err *e);
    void (*free)(mtk *k, void *p);
    void (*zero)(mtk *k, void *p, size_t bytes);
    void (*to_device)(mtk *k, void *dst, const void *src, size_t bytes);
    void (*to_host)(mtk *k, void *dst, const void *src, size_t bytes);
    void (*copy)(mtk *k, void *dst, const void *src, size_t bytes);
    void (*sync)(mtk *k);

    void (*embed_fwd)(mtk *k, float *out, const int32_t *tok, const float *wte, const float *wpe, int B, int T,
                      int C);
    void (*embed_bwd)(mtk *k, float *dwte, float *dwpe, const float *dout, const int32_t *tok, int B, int T,
                      int C);
    void (*layernorm_fwd)(mtk *k, float *out, float *mean, float *rstd, const float *inp, const float *w,
                          const float *b, int N, int C, float eps);
    void (*layernorm_bwd)(mtk *k, float *dinp, float *dw, float *db, const float *dout, const float *inp,
                          const float *w, const float *mean, const float *rstd, int N, int C);
    void (*matmul_fwd)(mtk *k, float *out, const float *inp, const float *w, const float *bias, int N, int C,
                       int OC);
    void (*matmul_bwd)(mtk *k, float *dinp, float *dw, float *dbias, const float *dout, const float *inp,
                       const float *w, int N, int C, int OC);
    void (*gelu_fwd)(mtk *k, float *out, const float *inp, size_t n, int exact);
    void (*gelu_bwd)(mtk *k, float *dinp, const float *inp, const float *dout, size_t n, int exact);
    void (*add)(mtk *k, float *out, const float *a, const float *b, size_t n);
    void (*acc)(mtk *k, float *y, const float *x, size_t n);
    void (*scale)(mtk *k, float *x, float s, size_t n);
    void (*dropout_fwd)(mtk *k, float *out, const float *inp, size_t n, const mtk_dropout *d);
    void (*dropout_bwd)(mtk *k, float *dinp, const float *dout, size_t n, const mtk_dropout *d);
    void (*attention_fwd)(mtk *k, float *out, float *lse, const float *qkv, int B, int T, int NH, int HS,
                          const mtk_dropout *drop);
    void (*attention_bwd)(mtk *k, float *dqkv, const float *dout, const float *qkv, const float *out,
                          const float *lse, int B, int T, int NH, int HS, const mtk_dropout *drop);
    void (*xent_fwd_bwd)(mtk *k, float *losses, float *dlogits, const float *logits, const int32_t *target,
                         const float *dscale, int N, int V);
    double (*sumsq)(mtk *k, const float *x, size_t n);
    size_t (*count_nonfinite)(mtk *k, const float *x, size_t n);
    void (*adamw)(mtk *k, float *p, const float *g, float *m, float *v, size_t n, float lr, float b1, float b2,
                  float eps, float wd, int t, float grad_scale);
} mtk_ops;

struct mtk {
    const mtk_ops *ops;
    int threads;   /* worker threads the backend uses (cpu: OpenMP threads) */
    void *impl;    /* backend state */
};

extern const mtk_ops mtk_cpu_ops;

#endif
