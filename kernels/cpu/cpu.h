/* cpu.h: the cpu backend's operations (the .c files of kernels/cpu), collected into mtk_cpu_ops by ops.c.
 * Each has the signature of the public kernels.h function of the same name with cpu_ for mtk_. */
#ifndef MT_KERNELS_CPU_H
#define MT_KERNELS_CPU_H

#include "../backend.h"

void *cpu_alloc(mtk *k, size_t bytes, mt_err *e);
void cpu_free(mtk *k, void *p);
void cpu_zero(mtk *k, void *p, size_t bytes);
void cpu_copy(mtk *k, void *dst, const void *src, size_t bytes);
void cpu_sync(mtk *k);

void cpu_embed_fwd(mtk *k, float *out, const int32_t *tok, const float *wte, const float *wpe, int B, int T, int C);
void cpu_embed_bwd(mtk *k, float *dwte, float *dwpe, const float *dout, const int32_t *tok, int B, int T, int C);
void cpu_layernorm_fwd(mtk *k, float *out, float *mean, float *rstd, const float *inp, const float *w,
                       const float *b, int N, int C, float eps);
void cpu_layernorm_bwd(mtk *k, float *dinp, float *dw, float *db, const float *dout, const float *inp,
                       const float *w, const float *mean, const float *rstd, int N, int C);
void cpu_matmul_fwd(mtk *k, float *out, const float *inp, const float *w, const float *bias, int N, int C, int OC);
void cpu_matmul_bwd(mtk *k, float *dinp, float *dw, float *dbias, const float *dout, const float *inp,
                    const float *w, int N, int C, int OC);
void cpu_gelu_fwd(mtk *k, float *out, const float *inp, size_t n, int exact);
void cpu_gelu_bwd(mtk *k, float *dinp, const float *inp, const float *dout, size_t n, int exact);
void cpu_add(mtk *k, float *out, const float *a, const float *b, size_t n);
void cpu_acc(mtk *k, float *y, const float *x, size_t n);
void cpu_scale(mtk *k, float *x, float s, size_t n);
void cpu_dropout_fwd(mtk *k, float *out, const float *inp, size_t n, const mtk_dropout *d);
void cpu_dropout_bwd(mtk *k, float *dinp, const float *dout, size_t n, const mtk_dropout *d);
void cpu_attention_fwd(mtk *k, float *out, float *lse, const float *qkv, int B, int T, int NH, int HS,
                       const mtk_dropout *drop);
void cpu_attention_bwd(mtk *k, float *dqkv, const float *dout, const float *qkv, const float *out, const float *lse,
                       int B, int T, int NH, int HS, const mtk_dropout *drop);
void cpu_xent_fwd_bwd(mtk *k, float *losses, float *dlogits, const float *logits, const int32_t *target,
                      const float *dscale, int N, int V);
double cpu_sumsq(mtk *k, const float *x, size_t n);
size_t cpu_count_nonfinite(mtk *k, const float *x, size_t n);
void cpu_adamw(mtk *k, float *p, const float *g, float *m, float *v, size_t n, float lr, float b1, float b2,
               float eps, float wd, int t, float grad_scale);

/* Scratch memory for one thread inside a parallel region: 64-byte aligned, not zeroed; aborts when out
 * of memory (kernels have no error path). */
float *cpu_scratch(size_t nfloats);

#endif
