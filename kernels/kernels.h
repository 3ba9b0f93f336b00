/* kernels.h: the compute library shared by mt-train, mt-eval and mt-generate.
 *
 * One set of operations over *device buffers* owned by a backend. The model code (libcommon/model)
 * calls only these functions and never learns which backend runs them: "cpu" (kernels/cpu: C11,
 * OpenMP, CBLAS via OpenBLAS; device memory is host memory) or, later, "cuda" (kernels/cuda).
 *
 * Conventions (every backend follows them; tests in tests/unit/test_kernels.c check the cpu one):
 *   - Activations are row-major [N, C] with N = B*T tokens (b major, t minor). fp32 throughout for now;
 *     a dtype argument arrives with bf16 on CUDA.
 *   - Weights are [out, in] (PyTorch Linear / Megatron layout): y = x . W^T + b.
 *   - Backward ops ACCUMULATE (+=) into weight/bias gradients (gradient accumulation over micro-batches),
 *     and ASSIGN input gradients unless the comment says "accumulates".
 *   - The fused QKV activation of one token is laid out per head as [NH][3][HS] (Megatron checkpoint
 *     version >= 2.0: q, k, v of head 0, then of head 1, ...), so weight rows keep Megatron's order.
 *   - Pointers named d* are gradients; scratch memory an op needs is allocated inside the backend.
 *   - Calls are asynchronous with respect to the host on devices that have a queue; mtk_sync() and the
 *     copy functions order them. The cpu backend is synchronous.
 */
#ifndef MT_KERNELS_H
#define MT_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include "util/err.h"

typedef struct mtk mtk;   /* one backend instance bound to one device */

/* Opens backend "cpu" (threads: OpenMP threads, 0 = default) or "cuda" (device index in threads' place
 * is given by the caller through MT_CUDA_DEVICE later). Returns NULL and fills e on failure. */
mtk *mtk_open(const char *backend, int threads, mt_err *e);
void mtk_close(mtk *k);
const char *mtk_name(const mtk *k);

/* ---- memory ---- */
void *mtk_alloc(mtk *k, size_t bytes, mt_err *e);      /* zero-filled; NULL + e on failure */
void mtk_free(mtk *k, void *p);
void mtk_zero(mtk *k, void *p, size_t bytes);
void mtk_to_device(mtk *k, void *dst, const void *src, size_t bytes);
void mtk_to_host(mtk *k, void *dst, const void *src, size_t bytes);
void mtk_copy(mtk *k, void *dst, const void *src, size_t bytes);   /* device to device */
void mtk_sync(mtk *k);

/* ---- embedding: out[b,t,:] = wte[tok[b,t],:] + wpe[t,:] ---- */
void mtk_embed_fwd(mtk *k, float *out, const int32_t *tok, const float *wte, const float *wpe,
                   int B, int T, int C);
/* dwte[tok[b,t],:] += dout[b,t,:]; dwpe[t,:] += sum_b dout[b,t,:]. Deterministic (no atomics order
 * dependence): the cpu backend sums in a fixed order. */
void mtk_embed_bwd(mtk *k, float *dwte, float *dwpe, const float *dout, const int32_t *tok,
                   int B, int T, int C);

/* ---- LayerNorm over the last dimension, eps e.g. 1e-5; mean/rstd [N] are saved for backward ---- */
void mtk_layernorm_fwd(mtk *k, float *out, float *mean, float *rstd, const float *inp,
                       const float *w, const float *b, int N, int C, float eps);
/* dinp ACCUMULATES (it is the residual stream's gradient); dw, db accumulate. */
void mtk_layernorm_bwd(mtk *k, float *dinp, float *dw, float *db, const float *dout, const float *inp,
                       const float *w, const float *mean, const float *rstd, int N, int C);

/* ---- linear: out[N,OC] = inp[N,C] . w[OC,C]^T + bias[OC] (bias may be NULL) ---- */
void mtk_matmul_fwd(mtk *k, float *out, const float *inp, const float *w, const float *bias,
                    int N, int C, int OC);
/* dinp = dout . w (assigned; NULL to skip), dw += dout^T . inp, dbias += sum_n dout (NULL to skip). */
void mtk_matmul_bwd(mtk *k, float *dinp, float *dw, float *dbias, const float *dout, const float *inp,
                    const float *w, int N, int C, int OC);

/* ---- GeLU, tanh approximation 0.5x(1+tanh(sqrt(2/pi)(x+0.044715x^3))) (exact=1: erf form) ---- */
void mtk_gelu_fwd(mtk *k, float *out, const float *inp, size_t n, int exact);
void mtk_gelu_bwd(mtk *k, float *dinp, const float *inp, const float *dout, size_t n, int exact);

/* ---- elementwise ---- */
void mtk_add(mtk *k, float *out, const float *a, const float *b, size_t n);   /* out = a + b */
void mtk_acc(mtk *k, float *y, const float *x, size_t n);                      /* y += x */
void mtk_scale(mtk *k, float *x, float s, size_t n);                           /* x *= s */

/* ---- dropout with a counter-based mask: nothing is stored, backward recomputes the mask ----
 * Element i (0-based within the call) is kept iff mtk_dropout_keep(d, i); kept values are scaled by
 * 1/(1-p). The mask depends only on (seed, offset + i), never on threads or backend, so a resumed run
 * and the CUDA backend draw the same masks. p == 0 (or d == NULL) is the identity. */
typedef struct mtk_dropout {
    float p;           /* probability of dropping, 0 <= p < 1 */
    uint64_t seed;     /* one per micro-batch and site, chosen by the model */
    uint64_t offset;   /* first counter value of this call */
} mtk_dropout;
/* splitmix64 finaliser of seed ^ (offset + i) * golden; keep iff the top 24 bits / 2^24 >= p. */
static inline int mtk_dropout_keep(const mtk_dropout *d, uint64_t i) {
    uint64_t z = d->seed ^ ((d->offset + i + 1) * 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return (float)(z >> 40) * (1.0f / 16777216.0f) >= d->p;
}
void mtk_dropout_fwd(mtk *k, float *out, const float *inp, size_t n, const mtk_dropout *d);  /* out may alias inp */
void mtk_dropout_bwd(mtk *k, float *dinp, const float *dout, size_t n, const mtk_dropout *d); /* dinp may alias dout */

/* ---- causal self-attention over qkv [B,T,NH,3,HS] -> out [B,T,NH*HS] (head-major concat) ----
 * scores = q.k^T / sqrt(HS), future positions masked, softmax in fp32. lse [B,NH,T] (log-sum-exp of
 * each row) is saved for the backward pass, which recomputes probabilities instead of storing the
 * T x T matrix: memory is O(B*T*C), not O(B*NH*T^2).
 * drop (NULL or p == 0: none) is attention dropout on the probabilities; the probability of row i,
 * column j of head h in sequence b is counter ((b*NH + h)*T + i)*T + j. */
void mtk_attention_fwd(mtk *k, float *out, float *lse, const float *qkv, int B, int T, int NH, int HS,
                       const mtk_dropout *drop);
void mtk_attention_bwd(mtk *k, float *dqkv, const float *dout, const float *qkv, const float *out,
                       const float *lse, int B, int T, int NH, int HS, const mtk_dropout *drop);

/* ---- softmax cross-entropy over logits [N, V] (V = padded vocab; every column takes part) ----
 * losses[n] = logsumexp(logits[n,:]) - logits[n, target[n]] for every row.
 * If dlogits != NULL it is set to (softmax - onehot) * dscale[n] (dscale NULL means 1); dlogits may
 * alias logits (computed in place). */
void mtk_xent_fwd_bwd(mtk *k, float *losses, float *dlogits, const float *logits, const int32_t *target,
                      const float *dscale, int N, int V);

/* ---- reductions and optimizer ---- */
/* Sum of squares of x[0..n), accumulated in double, returned to the host. */
double mtk_sumsq(mtk *k, const float *x, size_t n);
/* Count of non-finite values in x (overflow checks). */
size_t mtk_count_nonfinite(mtk *k, const float *x, size_t n);
/* AdamW (decoupled weight decay), bias-corrected at step t >= 1:
 *   m = b1 m + (1-b1) g ; v = b2 v + (1-b2) g^2 ; g scaled by grad_scale first (clipping / unscaling)
 *   p -= lr * ( (m / (1-b1^t)) / (sqrt(v / (1-b2^t)) + eps) + wd * p ) */
void mtk_adamw(mtk *k, float *p, const float *g, float *m, float *v, size_t n, float lr, float b1,
               float b2, float eps, float wd, int t, float grad_scale);

#endif
