/* cpu.h: the cpu backend's fp32 kernels (the .c files of kernels/cpu). ops.c puts them in mtk_cpu_ops,
 * directly for fp32 activations and through fp32 staging in the workspace for bf16/fp16 storage.
 * Each kernel has the signature of the public kernels.h function with float for every operand. */
#ifndef MT_KERNELS_CPU_H
#define MT_KERNELS_CPU_H

#include "../backend.h"

void *cpu_alloc(mtk *k, size_t bytes, mt_err *e);
void cpu_free(mtk *k, void *p);
void cpu_zero(mtk *k, void *p, size_t bytes);
void cpu_copy(mtk *k, void *dst, const void *src, size_t bytes);
void cpu_convert(mtk *k, void *dst, mtk_dtype dt, const void *src, mtk_dtype st, size_t n);
/* Serial conversions of n elements (the calling thread only), round to nearest even. */
void cpu_to_f32(float *dst, const void *src, mtk_dtype st, size_t n);
void cpu_from_f32(void *dst, mtk_dtype dt, const float *src, size_t n);
int cpu_sync(mtk *k);

void cpu_embed_fwd(mtk *k, float *out, const int32_t *tok, const float *wte, const float *wpe, int B, int T, int C,
                   int pos0, int v0, int nv);
void cpu_embed_bwd(mtk *k, float *dwte, float *dwpe, const float *dout, const int32_t *tok, int B, int T, int C,
                   int pos0, int v0, int nv);
void cpu_layernorm_fwd(mtk *k, float *out, float *mean, float *rstd, const float *inp, const float *w,
                       const float *b, int N, int C, float eps);
void cpu_layernorm_bwd(mtk *k, float *dinp, float *dw, float *db, const float *dout, const float *inp,
                       const float *w, const float *mean, const float *rstd, int N, int C);
/* Its two halves: dinp row by row (fp32), and dw, db from dout and inp stored in dtype dt (fp32 or
 * reduced: converted as they are read, the same sums as from fp32 copies) by cpu_norm_wgrad. */
void cpu_layernorm_bwd_rows(float *dinp, const float *dout, const float *inp, const float *w, const float *mean,
                            const float *rstd, int N, int C);
/* The weight gradients of either norm's backward (norm_wgrad.c): LayerNorm's dw and db, or with mean and db
 * NULL RMSNorm's dw. */
void cpu_norm_wgrad(float *dw, float *db, const void *dout, const void *inp, mtk_dtype dt, const float *mean,
                    const float *rstd, int N, int C);
void cpu_rmsnorm_fwd(mtk *k, float *out, float *rstd, const float *inp, const float *w, int N, int C, float eps);
void cpu_rmsnorm_bwd(mtk *k, float *dinp, float *dw, const float *dout, const float *inp, const float *w,
                     const float *rstd, int N, int C);
/* Its two halves, as for LayerNorm: dinp row by row (fp32), dw from dout and inp stored in dtype dt. */
void cpu_rmsnorm_bwd_rows(float *dinp, const float *dout, const float *inp, const float *w, const float *rstd, int N,
                          int C);
void cpu_matmul_fwd(mtk *k, float *out, const float *inp, const float *w, const float *bias, int N, int C, int OC);
/* cpu_matmul_fwd for few rows (matmul_small.c): reads the weights once, no BLAS packing. It takes
 * N <= MT_CPU_SMALL_N rows, and up to MT_CPU_SMALL_N_BIG rows of a weight matrix of MT_CPU_SMALL_BIG_W
 * elements or more (an output layer over a vocabulary, which a BLAS would pack whole for a few rows). */
enum { MT_CPU_SMALL_N = 8, MT_CPU_SMALL_N_BIG = 64, MT_CPU_SMALL_BIG_W = 1 << 23 };
void cpu_matmul_small(float *out, const float *inp, const float *w, const float *bias, int N, int C, int OC);
/* dbias[o] += sum_n dout[n][o] for fp32 or bf16 dout, in row order (matmul.c). */
void cpu_bias_grad(float *dbias, const void *dout, mtk_dtype dt, int N, int OC, int acc);
void cpu_matmul_bwd(mtk *k, float *dinp, float *dw, float *dbias, const float *dout, const float *inp,
                    const float *w, int N, int C, int OC, int acc);
/* C[M,N] = op(A) op(B) + beta C (row-major; ta, tb: transposed), fp32, split over the threads as the
 * linear layer's products are (beta 0 or 1). */
void cpu_sgemm(mtk *k, int ta, int tb, int M, int N, int K, const float *A, int lda, const float *B, int ldb, float beta,
               float *C, int ldc);
void cpu_gelu_fwd(mtk *k, float *out, const float *inp, size_t n, int exact);
void cpu_gelu_bwd(mtk *k, float *dinp, const float *inp, const float *dout, size_t n, int exact);
void cpu_swiglu_fwd(mtk *k, float *out, const float *inp, int N, int F);
void cpu_swiglu_bwd(mtk *k, float *dinp, const float *inp, const float *dout, int N, int F);
/* Rotary embeddings of token rows n0 .. n0+n-1 (qkv points at row n0; the position of row r is
 * pos0 + r % T); inverse: rotate back (the backward). */
void cpu_rope(float *qkv, size_t n0, size_t n, int T, int NH, int NG, int HS, int rot_dim, float base, int pos0,
              int inverse);
void cpu_add(mtk *k, float *out, const float *a, const float *b, size_t n);
void cpu_acc(mtk *k, float *y, const float *x, size_t n);
void cpu_scale(mtk *k, float *x, float s, size_t n);
/* greedy.c: the activation-dtype logits read directly */
void cpu_greedy(mtk *k, int32_t *ids, double *lp, const void *logits, int N, int V, int ld);
/* fp8.c: the activation-dtype operands read and written directly */
void cpu_fp8_qdq(mtk *k, void *y, const void *x, size_t n, mtk_fp8 fmt, const float *scale, float *amax);
void cpu_fp8_scale_update(mtk *k, float *history, float *scale, int S, int L, mtk_fp8 fmt, mtk_amax_algo algo,
                          int margin);
void cpu_bias_add(mtk *k, float *x, const float *bias, int N, int C);
void cpu_dropout_fwd(mtk *k, float *out, const float *inp, size_t n, const mtk_dropout *d);
void cpu_dropout_bwd(mtk *k, float *dinp, const float *dout, size_t n, const mtk_dropout *d);
void cpu_attention_fwd(mtk *k, float *out, float *lse, const float *qkv, int B, int T, int NH, int NG, int HS,
                       const mtk_dropout *drop);
void cpu_attention_bwd(mtk *k, float *dqkv, const float *dout, const float *qkv, const float *out, const float *lse,
                       int B, int T, int NH, int NG, int HS, const mtk_dropout *drop);
void cpu_attention_kv(mtk *k, float *out, const float *qkv, float *kcache, float *vcache, int B, int T, int pos0,
                      int Tmax, int NH, int NG, int HS);
/* attention_block.c */
void cpu_attention_kv_pack(mtk *k, void *kv, const void *qkv, int B, int T, int NH, int NG, int HS);
void cpu_attention_paged(mtk *k, void *out, const void *qkv, void *kpool, void *vpool, int N, const int32_t *seq,
                         const int32_t *pos, const int32_t *table, int max_blocks, int BS, int NH, int NG, int HS);
void cpu_attention_block_fwd(mtk *k, float *out, float *lse, const float *qkv, const float *kv, int B, int Tq, int Tk,
                             int Tg, const mtk_att_rows *qr, const mtk_att_rows *kr, int NH, int NG, int HS,
                             const mtk_dropout *drop);
void cpu_attention_merge(mtk *k, float *out, float *lse, const float *out_b, const float *lse_b, int B, int T, int NH,
                         int HS);
void cpu_attention_block_bwd(mtk *k, float *dq, float *dkv, const float *dout, const float *qkv, const float *kv,
                             const float *out, const float *lse, int B, int Tq, int Tk, int Tg, const mtk_att_rows *qr,
                             const mtk_att_rows *kr, int NH, int NG, int HS, const mtk_dropout *drop);
void cpu_attention_dqkv_pack(mtk *k, float *dqkv, const float *dq, const float *dkv, int B, int T, int NH, int NG,
                             int HS);
void cpu_xent_fwd_bwd(mtk *k, float *losses, float *dlogits, const float *logits, const int32_t *target,
                      const float *dscale, int N, int V);
void cpu_xent_rowmax(mtk *k, float *rowmax, const float *logits, int N, int V);
void cpu_xent_sumexp(mtk *k, float *sumexp, float *tlogit, const float *logits, const float *rowmax,
                     const int32_t *target, int N, int V, int v0);
void cpu_xent_loss(mtk *k, float *losses, const float *rowmax, const float *sumexp, const float *tlogit, int N);
void cpu_xent_bwd(mtk *k, float *dlogits, const float *logits, const float *rowmax, const float *sumexp,
                  const int32_t *target, const float *dscale, int N, int V, int v0);
double cpu_sumsq(mtk *k, const float *x, size_t n);
void cpu_sumsq_spans(mtk *k, double *out, const float *x, const mtk_span *span, int nspan);
size_t cpu_count_nonfinite(mtk *k, const float *x, size_t n);
void cpu_adamw(mtk *k, float *p, void *work, const float *g, float *m, float *v, const mtk_adamw_seg *seg, int nseg,
               float lr, float b1, float b2, float eps, float wd, int t, float grad_scale);

/* The mixture of experts' operations (moe.c), on operands of the activation dtype k->act as they are. */
void cpu_router_fwd(mtk *k, float *logits, const void *inp, const void *w, int N, int C, int E);
void cpu_router_bwd(mtk *k, void *dinp, float *dw, const float *dlogits, const void *inp, const void *w, int N, int C,
                    int E, int acc);
void cpu_moe_topk(mtk *k, int32_t *idx, float *probs, const float *logits, int N, const mtk_moe_route *r);
void cpu_moe_route_stats(mtk *k, float *stats, const float *logits, const int32_t *idx, int N, int seq,
                         const mtk_moe_route *r);
void cpu_moe_route_bwd(mtk *k, float *dlogits, const float *dprobs, const float *aux, int seq, float zcoef,
                       const float *logits, const int32_t *idx, int N, const mtk_moe_route *r);
void cpu_moe_dispatch(mtk *k, int32_t *counts, int32_t *row, int32_t *src, const int32_t *idx, const float *probs,
                      int N, int K, int E, int capacity, int drop_position, int pad, int seq, int shards);
void cpu_moe_permute(mtk *k, void *out, const void *inp, const int32_t *src, int R, int C);
void cpu_moe_permute_bwd(mtk *k, void *dinp, const void *dout, const int32_t *row, int N, int K, int C);
void cpu_moe_unpermute(mtk *k, void *out, const void *y, const int32_t *row, const float *probs, int N, int K, int C);
void cpu_moe_unpermute_bwd(mtk *k, void *dy, float *dprobs, const void *dout, const void *y, const int32_t *row,
                           const float *probs, int N, int K, int C, int R);
/* The experts' grouped products (grouped.c) with operands of dtype dt: fp32, or bf16 when oneDNN has bf16
 * products (bf16_dnnl). counts host memory, as kernels.h's. */
void cpu_grouped_fwd(mtk *k, mtk_dtype dt, void *out, const void *inp, const void *w, const int32_t *counts, int G,
                     int C, int OC);
void cpu_grouped_bwd(mtk *k, mtk_dtype dt, void *dinp, float *dw, const void *dout, const void *inp, const void *w,
                     const int32_t *counts, int G, int C, int OC, int acc);
void cpu_sigmoid_gate_fwd(mtk *k, void *out, const void *x, const float *logit, int N, int C);
void cpu_sigmoid_gate_bwd(mtk *k, void *dx, float *dlogit, const void *dout, const void *x, const float *logit, int N,
                          int C);

/* oneDNN matrix products (dnnl.c): C[M,N] = A[M,K] . B[K,N] (+ bias[N], fp32) (+ C when accumulate),
 * A and B of dtype ab addressed by element strides (row, column), C of dtype cdt row-major with ldc.
 * Every size must be positive. 0, or -1 with the backend's error set. */
typedef struct cpu_dnnl cpu_dnnl;
int cpu_dnnl_open(cpu_dnnl **d, mt_err *e);
void cpu_dnnl_close(cpu_dnnl *d);
/* Whether oneDNN has bf16 matmuls (bf16 operands, fp32 accumulation) on this CPU, as it limits itself
 * (ONEDNN_MAX_CPU_ISA=AVX2 makes an AVX-512 CPU answer as an AVX2 one); the ISA oneDNN runs at, by name. */
int cpu_dnnl_has_bf16(cpu_dnnl *d);
const char *cpu_dnnl_isa(void);
int cpu_dnnl_matmul(mtk *k, cpu_dnnl *d, mtk_dtype ab, int M, int N, int K, const void *A, long sam, long sak,
                    const void *B, long sbk, long sbn, const float *bias, int accumulate, void *C, mtk_dtype cdt,
                    long ldc);
/* Tiles: the same products for many threads at once, of fixed sizes (CPU_TILE_FIXED) or with M (ROWS) or
 * K (INNER) given at each run (oneDNN's runtime dimensions: one primitive for every size, a little slower
 * than a fixed one). Get every tile and ready the threads outside a parallel region; then, inside one,
 * each thread runs tiles as thread number `thread` (below the count readied). A tile stays valid until
 * the next get that misses the cache (which holds 64), so a caller gets a handful and runs them. */
typedef struct cpu_dnnl_tile cpu_dnnl_tile;
typedef enum { CPU_TILE_FIXED, CPU_TILE_ROWS, CPU_TILE_INNER } cpu_tile_mode;
const cpu_dnnl_tile *cpu_dnnl_tile_get(mtk *k, cpu_dnnl *d, mtk_dtype ab, cpu_tile_mode mode, int M, int N, int K,
                                       long sam, long sak, long sbk, long sbn, int accumulate, mtk_dtype cdt, long ldc);
int cpu_dnnl_tile_threads(mtk *k, cpu_dnnl *d, int nthreads);
/* size: the tile's M or K given at the run (ignored for a fixed one). 0, or -1 (no error set: the caller,
 * maybe on another thread, says which product failed) */
int cpu_dnnl_tile_run(cpu_dnnl *d, const cpu_dnnl_tile *t, int thread, int size, const void *A, const void *B,
                      void *C);

/* The cpu backend's state (k->impl). */
typedef struct cpu_state {
    cpu_dnnl *dnnl;
    int sgemm_dnnl;   /* fp32 linear layers through oneDNN (default), or OpenBLAS with MT_CPU_SGEMM=openblas */
    int bf16_dnnl;    /* bf16 linear layers through oneDNN's bf16 matmul; 0: the bf16 values staged to fp32 and
                         multiplied by the fp32 products (no bf16 kernel on this CPU, or MT_CPU_BF16=fp32) */
    int grouped_loop; /* MT_CPU_GROUPED=loop: the experts' grouped products one product per group (mtk.c's
                         reference loop) instead of grouped.c's tiles */
    size_t capacity;  /* MT_CPU_MEMORY: the bytes the device buffers may hold at once, as a GPU's memory (0: no
                         limit) */
    _Atomic size_t used;   /* the bytes of the live buffers (headers included) */
} cpu_state;

/* The linear layer with bf16 operands through oneDNN (matmul_bf16.c); N, C, OC positive. */
void cpu_matmul_fwd_bf16(mtk *k, void *out, const void *inp, const void *w, const float *bias, int N, int C, int OC);
void cpu_matmul_bwd_bf16(mtk *k, void *dinp, float *dw, float *dbias, const void *dout, const void *inp,
                         const void *w, int N, int C, int OC, int acc);

/* Workspace the kernels take: attention per thread (floats), sumsq partials (bytes). */
size_t cpu_attention_ws_floats(int T, int HS);
size_t cpu_sumsq_ws_bytes(size_t n);

#endif
