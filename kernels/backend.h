/* backend.h: the table of operations a kernel backend provides, and the mtk handle that carries it.
 * Private to kernels/: the public API (kernels.h) dispatches through k->ops after the checks that every
 * backend shares (sticky error, sizes against the reserved limits) in mtk.c. Every operation entry has
 * the signature of the public function of the same name; activation-dtype arguments are void *. */
#ifndef MT_KERNELS_BACKEND_H
#define MT_KERNELS_BACKEND_H

#include <stdarg.h>

#include "kernels.h"

typedef struct mtk_ops {
    const char *name;
    int (*open)(mtk *k, const mtk_config *cfg, mt_err *e);
    void (*close)(mtk *k);
    /* Workspace bytes this backend needs for operations up to l (mtk.c allocates and owns it). */
    size_t (*workspace_need)(const mtk *k, const mtk_limits *l);

    void *(*alloc)(mtk *k, size_t bytes, mt_err *e);
    void (*free)(mtk *k, void *p);
    void (*zero)(mtk *k, void *p, size_t bytes);
    void (*to_device)(mtk *k, void *dst, const void *src, size_t bytes);
    void (*to_host)(mtk *k, void *dst, const void *src, size_t bytes);
    void (*copy)(mtk *k, void *dst, const void *src, size_t bytes);
    void (*convert)(mtk *k, void *dst, mtk_dtype dt, const void *src, mtk_dtype st, size_t n);
    int (*sync)(mtk *k);   /* -1 when the device reported an error (it calls mtk_fail) */
    /* Host memory the device copies to and from directly (page-locked); NULL: mtk.c's malloc and free. */
    void *(*host_alloc)(mtk *k, size_t bytes, mt_err *e);
    void (*host_free)(mtk *k, void *p);

    /* Queues and events; NULL entries mean a backend without queues (everything is complete at once). */
    void *(*native_queue)(mtk *k, int queue);
    void *(*event_new)(mtk *k, mt_err *e);
    void (*event_free)(mtk *k, void *ev);
    void (*event_record)(mtk *k, void *ev, int queue);
    void (*event_wait)(mtk *k, void *ev, int queue);
    int (*event_done)(mtk *k, void *ev);

    void (*embed_fwd)(mtk *k, void *out, const int32_t *tok, const void *wte, const void *wpe, int B, int T, int C,
                      int pos0, int v0, int nv);
    void (*embed_bwd)(mtk *k, float *dwte, float *dwpe, const void *dout, const int32_t *tok, int B, int T, int C,
                      int pos0, int v0, int nv);
    void (*layernorm_fwd)(mtk *k, void *out, float *mean, float *rstd, const void *inp, const float *w,
                          const float *b, int N, int C, float eps);
    /* May be NULL: mtk.c runs dropout_fwd (drop given), add, then layernorm_fwd. drop: NULL or p > 0. */
    void (*add_layernorm_fwd)(mtk *k, void *res, void *out, float *mean, float *rstd, const void *a, const void *b,
                              const float *w, const float *bias, int N, int C, float eps, const mtk_dropout *drop);
    void (*layernorm_bwd)(mtk *k, void *dinp, float *dw, float *db, const void *dout, const void *inp,
                          const float *w, const float *mean, const float *rstd, int N, int C);
    /* May be NULL: mtk.c runs layernorm_bwd, then dropout_bwd of dinp into ddrop. drop: p > 0. */
    void (*layernorm_bwd_drop)(mtk *k, void *dinp, float *dw, float *db, const void *dout, const void *inp,
                               const float *w, const float *mean, const float *rstd, int N, int C, void *ddrop,
                               const mtk_dropout *drop);
    void (*rmsnorm_fwd)(mtk *k, void *out, float *rstd, const void *inp, const float *w, int N, int C, float eps);
    /* May be NULL: mtk.c runs dropout_fwd (drop given), add, then rmsnorm_fwd. drop: NULL or p > 0. */
    void (*add_rmsnorm_fwd)(mtk *k, void *res, void *out, float *rstd, const void *a, const void *b, const float *w,
                            int N, int C, float eps, const mtk_dropout *drop);
    void (*rmsnorm_bwd)(mtk *k, void *dinp, float *dw, const void *dout, const void *inp, const float *w,
                        const float *rstd, int N, int C);
    /* May be NULL: mtk.c runs rmsnorm_bwd, then dropout_bwd of dinp into ddrop. drop: p > 0. */
    void (*rmsnorm_bwd_drop)(mtk *k, void *dinp, float *dw, const void *dout, const void *inp, const float *w,
                             const float *rstd, int N, int C, void *ddrop, const mtk_dropout *drop);
    void (*matmul_fwd)(mtk *k, void *out, const void *inp, const void *w, const float *bias, int N, int C, int OC);
    /* May be NULL: mtk.c runs matmul_fwd, then gelu_fwd. */
    void (*matmul_gelu_fwd)(mtk *k, void *out, void *pre, const void *inp, const void *w, const float *bias, int N,
                            int C, int OC, int exact);
    void (*matmul_bwd)(mtk *k, void *dinp, float *dw, float *dbias, const void *dout, const void *inp,
                       const void *w, int N, int C, int OC, int acc);   /* acc: dw, dbias add (else assigned) */
    void (*gelu_fwd)(mtk *k, void *out, const void *inp, size_t n, int exact);
    void (*gelu_bwd)(mtk *k, void *dinp, const void *inp, const void *dout, size_t n, int exact);
    void (*swiglu_fwd)(mtk *k, void *out, const void *inp, int N, int F);
    void (*swiglu_bwd)(mtk *k, void *dinp, const void *inp, const void *dout, int N, int F);
    void (*add)(mtk *k, void *out, const void *a, const void *b, size_t n);
    void (*acc)(mtk *k, void *y, const void *x, size_t n);
    void (*scale)(mtk *k, void *x, float s, size_t n);
    void (*acc_f32)(mtk *k, float *y, const float *x, size_t n);
    void (*bias_add)(mtk *k, void *x, const float *bias, int N, int C);
    void (*dropout_fwd)(mtk *k, void *out, const void *inp, size_t n, const mtk_dropout *d);
    void (*dropout_bwd)(mtk *k, void *dinp, const void *dout, size_t n, const mtk_dropout *d);
    /* attention: the grouped-query forms (NG query groups; NG == NH: multi-head) */
    void (*attention_fwd)(mtk *k, void *out, float *lse, const void *qkv, int B, int T, int NH, int NG, int HS,
                          const mtk_dropout *drop);
    void (*attention_bwd)(mtk *k, void *dqkv, const void *dout, const void *qkv, const void *out, const float *lse,
                          int B, int T, int NH, int NG, int HS, const mtk_dropout *drop);
    void (*attention_kv)(mtk *k, void *out, const void *qkv, void *kcache, void *vcache, int B, int T, int pos0,
                         int Tmax, int NH, int NG, int HS);
    void (*attention_paged)(mtk *k, void *out, const void *qkv, void *kpool, void *vpool, int N, const int32_t *seq,
                            const int32_t *pos, const int32_t *table, int max_blocks, int BS, int NH, int NG, int HS);
    /* attention by blocks (context parallelism) */
    void (*attention_kv_pack)(mtk *k, void *kv, const void *qkv, int B, int T, int NH, int NG, int HS);
    void (*attention_block_fwd)(mtk *k, float *out, float *lse, const void *qkv, const void *kv, int B, int Tq, int Tk,
                                int Tg, const mtk_att_rows *qr, const mtk_att_rows *kr, int NH, int NG, int HS,
                                const mtk_dropout *drop);
    void (*attention_merge)(mtk *k, float *out, float *lse, const float *out_b, const float *lse_b, int B, int T, int NH,
                            int HS);
    void (*attention_block_bwd)(mtk *k, float *dq, float *dkv, const void *dout, const void *qkv, const void *kv,
                                const void *out, const float *lse, int B, int Tq, int Tk, int Tg, const mtk_att_rows *qr,
                                const mtk_att_rows *kr, int NH, int NG, int HS, const mtk_dropout *drop);
    void (*attention_dqkv_pack)(mtk *k, void *dqkv, const float *dq, const float *dkv, int B, int T, int NH, int NG,
                                int HS);
    /* mtk_rope_fwd (inverse 0) and mtk_rope_bwd (inverse 1) */
    void (*rope)(mtk *k, void *qkv, int B, int T, int NH, int NG, int HS, int rot_dim, float base, int pos0,
                 int inverse);
    void (*xent_fwd_bwd)(mtk *k, float *losses, void *dlogits, const void *logits, const int32_t *target,
                         const float *dscale, int N, int V);
    void (*xent_rowmax)(mtk *k, float *rowmax, const void *logits, int N, int V);
    void (*xent_sumexp)(mtk *k, float *sumexp, float *tlogit, const void *logits, const float *rowmax,
                        const int32_t *target, int N, int V, int v0);
    void (*xent_loss)(mtk *k, float *losses, const float *rowmax, const float *sumexp, const float *tlogit, int N);
    void (*xent_bwd)(mtk *k, void *dlogits, const void *logits, const float *rowmax, const float *sumexp,
                     const int32_t *target, const float *dscale, int N, int V, int v0);
    double (*sumsq)(mtk *k, const float *x, size_t n);
    void (*sumsq_spans)(mtk *k, double *out, const float *x, const mtk_span *span, int nspan);
    size_t (*count_nonfinite)(mtk *k, const float *x, size_t n);
    /* work NULL: none */
    void (*adamw)(mtk *k, float *p, void *work, const float *g, float *m, float *v, const mtk_adamw_seg *seg,
                  int nseg, float lr, float b1, float b2, float eps, float wd, int t, float grad_scale);
    /* mixture of experts (kernels.h). grouped_matmul_*: may be NULL: mtk.c runs matmul_fwd / matmul_bwd once
     * per non-empty group (the reference loop below). */
    void (*router_fwd)(mtk *k, float *logits, const void *inp, const void *w, int N, int C, int E);
    void (*router_bwd)(mtk *k, void *dinp, float *dw, const float *dlogits, const void *inp, const void *w, int N,
                       int C, int E, int acc);
    void (*moe_topk)(mtk *k, int32_t *idx, float *probs, const float *logits, int N, const mtk_moe_route *r);
    void (*moe_route_stats)(mtk *k, float *stats, const float *logits, const int32_t *idx, int N, int seq,
                            const mtk_moe_route *r);
    void (*moe_route_bwd)(mtk *k, float *dlogits, const float *dprobs, const float *aux, int seq, float zcoef,
                          const float *logits, const int32_t *idx, int N, const mtk_moe_route *r);
    void (*moe_dispatch)(mtk *k, int32_t *counts, int32_t *row, int32_t *src, const int32_t *idx, const float *probs,
                         int N, int K, int E, int capacity, int drop_position, int pad, int seq, int shards);
    void (*moe_permute)(mtk *k, void *out, const void *inp, const int32_t *src, int R, int C);
    void (*moe_permute_bwd)(mtk *k, void *dinp, const void *dout, const int32_t *row, int N, int K, int C);
    void (*moe_unpermute)(mtk *k, void *out, const void *y, const int32_t *row, const float *probs, int N, int K,
                          int C);
    void (*moe_unpermute_bwd)(mtk *k, void *dy, float *dprobs, const void *dout, const void *y, const int32_t *row,
                              const float *probs, int N, int K, int C, int R);
    void (*grouped_matmul_fwd)(mtk *k, void *out, const void *inp, const void *w, const int32_t *counts, int G, int C,
                               int OC);
    void (*grouped_matmul_bwd)(mtk *k, void *dinp, float *dw, const void *dout, const void *inp, const void *w,
                               const int32_t *counts, int G, int C, int OC, int acc);
    void (*sigmoid_gate_fwd)(mtk *k, void *out, const void *x, const float *logit, int N, int C);
    void (*sigmoid_gate_bwd)(mtk *k, void *dx, float *dlogit, const void *dout, const void *x, const float *logit,
                             int N, int C);
    void (*fp8_qdq)(mtk *k, void *y, const void *x, size_t n, mtk_fp8 fmt, const float *scale, float *amax);
    void (*fp8_scale_update)(mtk *k, float *history, float *scale, int S, int L, mtk_fp8 fmt, mtk_amax_algo algo,
                             int margin);
    void (*greedy)(mtk *k, int32_t *ids, double *lp, const void *logits, int N, int V, int ld);
} mtk_ops;

struct mtk {
    const mtk_ops *ops;
    int threads;          /* worker threads the backend uses (cpu: OpenMP threads) */
    int device;
    int cc;               /* CUDA: the device's compute capability, major x 10 + minor; 0 elsewhere */
    mtk_dtype act;        /* activation dtype */
    int queue;            /* current queue */
    mtk_limits lim;       /* what mtk_reserve has covered so far */
    unsigned char *ws;    /* workspace (device memory), ws_bytes long */
    size_t ws_bytes, ws_used;
    int failed;           /* sticky error set */
    mtk_stats stats;      /* mtk_stats_get: syncs and ops counted in mtk.c, launches and upload waits by the
                             backend */
    mt_err err;
    char products[160];   /* mtk_products: set by the backend's open (empty: mtk.c's generic words) */
    void *impl;           /* backend state */
};

/* Records the first error (later ones are dropped) and makes the following operations no-ops. */
void mtk_fail(mtk *k, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Takes bytes (64-byte aligned) from the workspace for the current operation; NULL + error when the
 * reservation does not cover it. mtk.c rewinds the workspace at the start of every operation. */
void *mtk_ws_take(mtk *k, size_t bytes);
/* The grouped products as one matmul_fwd / matmul_bwd per non-empty group (a zeroed weight gradient for an
 * empty one when assigned): the reference, for backends without grouped_matmul_* and for comparison. */
void mtk_grouped_matmul_loop_fwd(mtk *k, void *out, const void *inp, const void *w, const int32_t *counts, int G, int C,
                                 int OC);
void mtk_grouped_matmul_loop_bwd(mtk *k, void *dinp, float *dw, const void *dout, const void *inp, const void *w,
                                 const int32_t *counts, int G, int C, int OC, int acc);

/* Sets e's message (e may be NULL); returns -1. */
int mtk_err_set(mt_err *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

extern const mtk_ops mtk_cpu_ops;
extern const mtk_ops mtk_sim_ops;    /* kernels/cuda under the SIMT simulator (kernels/sim) */
extern const mtk_ops mtk_cuda_ops;   /* kernels/cuda built by nvcc */

#endif
