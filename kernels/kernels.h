/* kernels.h: the compute library shared by mt-train, mt-eval and mt-generate.
 *
 * One set of operations over *device buffers* owned by a backend. The model code (libcommon/model)
 * calls only these functions and never learns which backend runs them: "cpu" (kernels/cpu: C11,
 * OpenMP, oneDNN and OpenBLAS; device memory is host memory), "cuda" (kernels/cuda: own kernels and
 * cuBLASLt on the GPU; built when nvcc exists) or "sim" (the same .cu sources on the CPU under the SIMT
 * simulator of kernels/sim, for tests).
 * kernels/ includes nothing from libcommon: what both share is in mt_base.h.
 *
 * Dtypes (kernels/README.md has the rationale):
 *   - The *activation dtype* is chosen when the backend is opened (mtk_config.act_dtype: fp32, bf16 or
 *     fp16). Every argument typed mtk_act * is stored in it: activations and their gradients, and the
 *     parameters that feed a product or a lookup (matrices, word and position embeddings, the KV cache).
 *   - Arguments typed float * are always fp32: master weights, 1-D parameters (biases, norm weights),
 *     every parameter gradient (accumulated in fp32), optimizer moments, LayerNorm mean/rstd, attention
 *     log-sum-exp, losses and per-token scales, cross-entropy row statistics.
 *   - Arithmetic, softmax and every reduction are fp32 (sums of squares in double) whatever the storage.
 *
 * Conventions (every backend follows them; tests/unit/test_kernels.c is the conformance suite):
 *   - Activations are row-major [N, C] with N = B*T tokens (b major, t minor).
 *   - Weights are [out, in] (PyTorch Linear / Megatron layout): y = x . W^T + b.
 *   - Backward ops ACCUMULATE (+=) into weight/bias gradients (gradient accumulation over micro-batches),
 *     and ASSIGN input gradients unless the comment says "accumulates".
 *   - The fused QKV activation of one token is laid out per head as [NH][3][HS] (Megatron checkpoint
 *     version >= 2.0: q, k, v of head 0, then of head 1, ...), so weight rows keep Megatron's order.
 *     With grouped-query attention (NG query groups, NH/NG query heads each) it is Megatron's
 *     [NG][NH/NG + 2][HS]: each group's query heads, then its key head, then its value head; NG == NH
 *     is the layout above.
 *   - Pointers named d* are gradients.
 *
 * Memory: buffers come from mtk_alloc and belong to the caller. Scratch that an operation needs comes
 * from the backend's *workspace*, sized once by mtk_reserve for the largest shapes the caller will use;
 * no operation allocates. An operation given more than was reserved does nothing and sets the error.
 *
 * Errors are sticky, as on a GPU: an operation that fails (bad sizes, more than reserved, a device
 * fault) records the first error and makes the following operations no-ops until mtk_clear_error;
 * mtk_sync and mtk_status report it. Operations themselves return nothing and never abort.
 *
 * Queues and events: operations are enqueued on the current queue (mtk_set_queue), asynchronously with
 * respect to the host on backends that have queues; copies to the host and mtk_sync wait. Events order
 * one queue after another, so that communication (a second queue) can overlap compute. The cpu backend
 * runs every operation at once, in call order, and its events are always complete.
 */
#ifndef MT_KERNELS_H
#define MT_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include "mt_base.h"

typedef struct mtk mtk;   /* one backend instance bound to one device */
typedef void mtk_act;     /* storage of the activation dtype (see above) */

typedef struct mtk_config {
    const char *backend;  /* "cpu", "cuda" or "sim" */
    int threads;          /* cpu: OpenMP threads, 0 = OpenMP's default */
    int device;           /* cuda: device index (the local rank picks it) */
    mtk_dtype act_dtype;  /* storage of activations and working weights */
} mtk_config;

/* Opens a backend. Returns NULL and fills e on failure. */
mtk *mtk_open(const mtk_config *cfg, mt_err *e);
void mtk_close(mtk *k);
const char *mtk_name(const mtk *k);
/* A CUDA device's compute capability, major x 10 + minor (90: Hopper); 0 on cpu and sim. */
int mtk_compute_capability(const mtk *k);
mtk_dtype mtk_act_dtype(const mtk *k);
size_t mtk_act_size(const mtk *k);   /* bytes of one activation element */
int mtk_threads(const mtk *k);
/* How the backend multiplies matrices of its activation dtype, in words for a program's log (e.g. the cpu
 * backend's bf16 products through oneDNN's bf16 matmul, or through fp32 SGEMM of the bf16 values where
 * oneDNN has no bf16 kernel for the CPU). Either way: inputs as stored, fp32 accumulation. */
const char *mtk_products(const mtk *k);

/* ---- workspace ---- */
typedef struct mtk_limits {
    size_t max_act;       /* most elements of any one activation-dtype operand (a weight matrix counts) */
    size_t max_flat;      /* most elements of an fp32 array given to sumsq, count_nonfinite or adamw */
    int max_seq;          /* longest T of attention (with a KV cache: its length) */
    int max_head_size;    /* largest HS of attention */
} mtk_limits;
/* Grows the workspace to cover operations up to these limits (the maximum over every call so far).
 * Call it when a model or context is created, never inside a step. -1 + e when out of memory. */
int mtk_reserve(mtk *k, const mtk_limits *l, mt_err *e);
size_t mtk_workspace_bytes(const mtk *k);

/* ---- errors ---- */
/* 0, or -1 with the first error since the last mtk_clear_error copied to e (e may be NULL). */
int mtk_status(mtk *k, mt_err *e);
void mtk_clear_error(mtk *k);

/* ---- memory ---- */
void *mtk_alloc(mtk *k, size_t bytes, mt_err *e);      /* zero-filled; NULL + e on failure */
void mtk_free(mtk *k, void *p);
/* Host memory for large copies between host and device (a checkpoint's state copied aside): page-locked on
 * a CUDA device, so that mtk_to_host copies into it at the bus's speed without a staging buffer; plain
 * memory on the other backends. NULL + e on failure; mtk_host_free(k, NULL) does nothing. */
void *mtk_host_alloc(mtk *k, size_t bytes, mt_err *e);
void mtk_host_free(mtk *k, void *p);
void mtk_zero(mtk *k, void *p, size_t bytes);
void mtk_to_device(mtk *k, void *dst, const void *src, size_t bytes);   /* src is free again at return */
void mtk_to_host(mtk *k, void *dst, const void *src, size_t bytes);   /* waits for the current queue */
void mtk_copy(mtk *k, void *dst, const void *src, size_t bytes);      /* device to device */
/* dst[i] = (dst_dtype) src[i] for n elements, device to device, round to nearest even. */
void mtk_convert(mtk *k, void *dst, mtk_dtype dst_dtype, const void *src, mtk_dtype src_dtype, size_t n);
/* Waits for every queue; returns mtk_status. */
int mtk_sync(mtk *k, mt_err *e);

/* ---- counters (always on, a few integer additions) ----
 * syncs: the times the host waited for the device: mtk_sync, mtk_to_host, and the operations that return
 * a value computed on the device (mtk_sumsq, mtk_count_nonfinite). upload_waits: mtk_to_device calls that
 * waited for the device (cuda, sim: a copy too large for the pinned staging, or the staging a whole ring of
 * copies ahead of the device); cpu: 0.
 * launches: kernels enqueued on the device (cuda, sim: every kernel and every matrix product; cpu: 0, it
 * has none). ops: operations of this header run (every backend). The counts only grow; a caller reads
 * them before and after what it measures. */
typedef struct mtk_stats {
    uint64_t syncs, upload_waits, launches, ops;
} mtk_stats;
mtk_stats mtk_stats_get(const mtk *k);

/* ---- queues and events ---- */
enum { MTK_QUEUE_COMPUTE = 0, MTK_QUEUE_COMM = 1, MTK_QUEUES = 2 };
void mtk_set_queue(mtk *k, int queue);     /* following operations go to this queue */
int mtk_queue(const mtk *k);
void *mtk_native_queue(mtk *k, int queue); /* cuda: the cudaStream_t (for NCCL); cpu: NULL */
typedef struct mtk_event mtk_event;
mtk_event *mtk_event_new(mtk *k, mt_err *e);
void mtk_event_free(mtk *k, mtk_event *ev);
void mtk_event_record(mtk *k, mtk_event *ev);   /* marks the current queue's position */
void mtk_event_wait(mtk *k, mtk_event *ev);     /* the current queue waits until ev has completed */
int mtk_event_done(mtk *k, mtk_event *ev);      /* 1 when complete (non-blocking) */

/* ---- embedding ----
 * out[b,t,:] = (v0 <= tok < v0 + nv ? wte[tok - v0,:] : 0) + (wpe ? wpe[pos0 + t,:] : 0).
 * wte holds rows v0 .. v0+nv-1 of the vocabulary (a vocabulary-parallel shard; v0 = 0, nv = V on one
 * rank); tokens of other shards contribute zero (their owner adds them in the all-reduce). pos0 is the
 * position of the first token (generation with a KV cache continues at the cache length). */
void mtk_embed_fwd(mtk *k, mtk_act *out, const int32_t *tok, const mtk_act *wte, const mtk_act *wpe, int B, int T,
                   int C, int pos0, int v0, int nv);
/* dwte[tok - v0,:] += dout[b,t,:] for tokens of this shard; dwpe[pos0 + t,:] += sum_b dout[b,t,:] (dwpe
 * NULL: skipped). Deterministic: the sums run in a fixed order. */
void mtk_embed_bwd(mtk *k, float *dwte, float *dwpe, const mtk_act *dout, const int32_t *tok, int B, int T, int C,
                   int pos0, int v0, int nv);

typedef struct mtk_dropout mtk_dropout;   /* dropout's parameters: see the dropout section below */

/* ---- LayerNorm over the last dimension, eps e.g. 1e-5; mean/rstd [N] are saved for backward ---- */
void mtk_layernorm_fwd(mtk *k, mtk_act *out, float *mean, float *rstd, const mtk_act *inp, const float *w,
                       const float *b, int N, int C, float eps);
/* The residual add fused with the LayerNorm that follows it: res = a + b (stored in the activation dtype),
 * then out = LayerNorm(res as stored), exactly as mtk_add followed by mtk_layernorm_fwd. drop (NULL or
 * p == 0: none) is the dropout of b fused in before the add: res = a + dropout(b), element n*C + c of b
 * taking counter n*C + c of drop, and the dropped-and-scaled b rounded to the activation dtype, so the
 * bits are those of mtk_dropout_fwd into a buffer, then this op without drop. res must not alias a or b. */
void mtk_add_layernorm_fwd(mtk *k, mtk_act *res, mtk_act *out, float *mean, float *rstd, const mtk_act *a,
                           const mtk_act *b, const float *w, const float *bias, int N, int C, float eps,
                           const mtk_dropout *drop);
/* dinp ACCUMULATES (it is the residual stream's gradient); dw, db accumulate. ddrop (NULL: none) gets
 * the dropout backward of the accumulated dinp as stored, with drop's mask (NULL or p == 0: a copy): the
 * bits of mtk_dropout_bwd(ddrop, dinp) after this op, which a backend may fuse into it (cuda does). */
void mtk_layernorm_bwd(mtk *k, mtk_act *dinp, float *dw, float *db, const mtk_act *dout, const mtk_act *inp,
                       const float *w, const float *mean, const float *rstd, int N, int C, mtk_act *ddrop,
                       const mtk_dropout *drop);

/* ---- RMSNorm over the last dimension (Megatron --normalization RMSNorm, --norm-epsilon) ----
 * out = inp * rstd * w with rstd = 1 / sqrt(mean(inp^2) + eps); no bias, no mean. rstd [N] is saved for
 * the backward. */
void mtk_rmsnorm_fwd(mtk *k, mtk_act *out, float *rstd, const mtk_act *inp, const float *w, int N, int C, float eps);
/* The residual add fused with the RMSNorm that follows it: res = a + b (stored in the activation dtype),
 * then out = RMSNorm(res as stored), exactly as mtk_add followed by mtk_rmsnorm_fwd. drop: the dropout of
 * b fused in before the add, as for mtk_add_layernorm_fwd. */
void mtk_add_rmsnorm_fwd(mtk *k, mtk_act *res, mtk_act *out, float *rstd, const mtk_act *a, const mtk_act *b,
                         const float *w, int N, int C, float eps, const mtk_dropout *drop);
/* dinp ACCUMULATES (it is the residual stream's gradient): dinp += (dout w - xhat mean(dout w xhat)) rstd
 * with xhat = inp rstd; dw accumulates sum_n dout xhat, as mtk_layernorm_bwd does; ddrop and drop as there. */
void mtk_rmsnorm_bwd(mtk *k, mtk_act *dinp, float *dw, const mtk_act *dout, const mtk_act *inp, const float *w,
                     const float *rstd, int N, int C, mtk_act *ddrop, const mtk_dropout *drop);

/* ---- linear: out[N,OC] = inp[N,C] . w[OC,C]^T + bias[OC] (bias may be NULL) ---- */
void mtk_matmul_fwd(mtk *k, mtk_act *out, const mtk_act *inp, const mtk_act *w, const float *bias, int N, int C,
                    int OC);
/* The MLP's first layer with its GeLU: pre = inp . w^T + bias (kept for the backward), out = gelu(pre), as
 * mtk_matmul_fwd then mtk_gelu_fwd. A backend may fuse them (cuda, tanh form: a cuBLASLt GeLU epilogue,
 * which takes the GeLU of the product before pre is rounded to the activation dtype): the same results
 * to the rounding of that dtype. */
void mtk_matmul_gelu_fwd(mtk *k, mtk_act *out, mtk_act *pre, const mtk_act *inp, const mtk_act *w, const float *bias,
                         int N, int C, int OC, int exact);
/* How a weight gradient meets its buffer: the first micro-batch of a step assigns it (so the buffer needs
 * no zeroing first, and the product no pass over the old contents), the later ones add to it. */
typedef enum { MTK_GRAD_ASSIGN, MTK_GRAD_ACCUMULATE } mtk_grad_mode;
/* dinp = dout . w (assigned; NULL to skip); dw = dout^T . inp and dbias = sum_n dout (NULL to skip),
 * assigned or added to as gm says. */
void mtk_matmul_bwd(mtk *k, mtk_act *dinp, float *dw, float *dbias, const mtk_act *dout, const mtk_act *inp,
                    const mtk_act *w, int N, int C, int OC, mtk_grad_mode gm);

/* ---- GeLU, tanh approximation 0.5x(1+tanh(sqrt(2/pi)(x+0.044715x^3))) (exact=1: erf form) ---- */
void mtk_gelu_fwd(mtk *k, mtk_act *out, const mtk_act *inp, size_t n, int exact);
void mtk_gelu_bwd(mtk *k, mtk_act *dinp, const mtk_act *inp, const mtk_act *dout, size_t n, int exact);

/* ---- SwiGLU (Megatron --swiglu): inp [N, 2F] is the first MLP product, x1 its first F features and x2
 * its last F; out [N, F] = silu(x1) * x2 with silu(a) = a / (1 + exp(-a)). ---- */
void mtk_swiglu_fwd(mtk *k, mtk_act *out, const mtk_act *inp, int N, int F);
/* dinp [N, 2F] (assigned): dx1 = dout * x2 * silu'(x1), dx2 = dout * silu(x1). */
void mtk_swiglu_bwd(mtk *k, mtk_act *dinp, const mtk_act *inp, const mtk_act *dout, int N, int F);

/* ---- elementwise ---- */
void mtk_add(mtk *k, mtk_act *out, const mtk_act *a, const mtk_act *b, size_t n);   /* out = a + b */
void mtk_acc(mtk *k, mtk_act *y, const mtk_act *x, size_t n);                      /* y += x */
void mtk_scale(mtk *k, mtk_act *x, float s, size_t n);                             /* x *= s */
void mtk_acc_f32(mtk *k, float *y, const float *x, size_t n);   /* y += x in fp32, whatever the activation dtype */
/* x[n, c] += bias[c] for every row n of x [N, C]: the bias of a row-parallel layer, added after the
 * tensor-parallel reduction of the product (Megatron adds it once, to the sum). */
void mtk_bias_add(mtk *k, mtk_act *x, const float *bias, int N, int C);

/* ---- FP8, emulated: Transformer Engine's delayed scaling (Megatron --fp8-format, --fp8-margin,
 * --fp8-amax-history-len, --fp8-amax-compute-algo) ----
 * A tensor meant for an FP8 product is quantized to FP8 with a per-tensor fp32 scale and dequantized at
 * once (fake quantization); the product then runs on the dequantized values with fp32 accumulation, which
 * is an FP8 GEMM with fp32 accumulation up to the order of its sums. Formats (OCP FP8): E4M3 (TE's
 * "E4M3", the fn variant: bias 7, 3 mantissa bits, max 448, subnormals down to 2^-9, no infinities) and
 * E5M2 (bias 15, 2 mantissa bits, max 57344, subnormals down to 2^-16, IEEE-like). Megatron's
 * --fp8-format e4m3 uses E4M3 everywhere; hybrid uses E4M3 forward and E5M2 for gradients. */
typedef enum { MTK_FP8_E4M3 = 0, MTK_FP8_E5M2 = 1 } mtk_fp8;
typedef enum { MTK_AMAX_MOST_RECENT = 0, MTK_AMAX_MAX = 1 } mtk_amax_algo;
/* The largest finite value of the format. */
static inline float mtk_fp8_max(mtk_fp8 f) { return f == MTK_FP8_E5M2 ? 57344.0f : 448.0f; }
/* The exponent of its smallest normal value, and its mantissa bits. */
static inline int mtk_fp8_emin(mtk_fp8 f) { return f == MTK_FP8_E5M2 ? -14 : -6; }
static inline int mtk_fp8_mbits(mtk_fp8 f) { return f == MTK_FP8_E5M2 ? 2 : 3; }
/* y[i] = fp8(x[i] * s) * (1 / s) with s = *scale (one fp32 of device memory, the tensor's scale; 1 / s is
 * rounded to fp32 once, TE's scale_inv), stored in the activation dtype; y may alias x. fp8() rounds to
 * the nearest value of the format, ties to even, subnormals exact, and saturates: a magnitude above the
 * format's max (an infinity too) becomes +-max, as TE's casts (__NV_SATFINITE); NaN stays NaN.
 * amax (one fp32 of device memory; NULL: none) takes the max of |x[i]| over the n elements (x as stored,
 * before the scale), as TE's cast kernels: *amax = max(*amax, max |x[i]|), NaNs left out; *amax must hold
 * a value >= +0 (the slot of the history that mtk_fp8_scale_update zeroed). */
void mtk_fp8_qdq(mtk *k, mtk_act *y, const mtk_act *x, size_t n, mtk_fp8 fmt, const float *scale, float *amax);
/* The delayed-scaling update of S tensors at once (TE's amax_and_scale_update), all fp32 device memory:
 * history [L, S] (column j: tensor j's last L amaxes, row 0 this step's, written by mtk_fp8_qdq through
 * amax = history + j), scale [S]. For each tensor: amax = history[0] (most_recent) or the max over all L
 * rows (max); the column is rolled, row i taking row i + 1 and row L-1 taking the old row 0, and row 0 is
 * zeroed for the next step; then scale = (fp8_max * 2^-margin) / amax in fp32 when amax is finite and
 * > 0, else the scale stays. One format per call (hybrid: one call for the forward tensors, one for the
 * gradients). L >= 1, S >= 0, margin >= 0. */
void mtk_fp8_scale_update(mtk *k, float *history, float *scale, int S, int L, mtk_fp8 fmt, mtk_amax_algo algo,
                          int margin);

/* ---- greedy decoding on the device ----
 * For each of N rows of logits (V entries, row stride ld >= V, activation dtype): ids[n] = the first index
 * of the row's largest value (NaNs left out; 0 when the row starts with a NaN), lp[n] = its
 * log-probability, x[id] - (m + log(sum_j exp(x[j] - m))), m the row's max, the exponentials' sum in fp64.
 * ids and lp are device memory: a decode step copies back 12 bytes a sequence, not its logits. The cpu
 * backend sums in index order (gen/sample.c's host sums, bit for bit); the cuda one by a block reduction. */
void mtk_greedy(mtk *k, int32_t *ids, double *lp, const mtk_act *logits, int N, int V, int ld);

/* ---- dropout with a counter-based mask: nothing is stored, backward recomputes the mask ----
 * Element i (0-based within the call) is kept iff mtk_dropout_keep(d, i); kept values are scaled by
 * 1/(1-p). The mask depends only on (seed, offset + i), never on threads or backend, so a resumed run
 * and the CUDA backend draw the same masks. p == 0 (or d == NULL) is the identity. */
struct mtk_dropout {
    float p;           /* probability of dropping, 0 <= p < 1 */
    uint64_t seed;     /* one per micro-batch and site, chosen by the model */
    uint64_t offset;   /* first counter value of this call */
};
/* mt_mix64(seed ^ (offset + i + 1) * golden); keep iff the top 24 bits / 2^24 >= p. */
static inline int mtk_dropout_keep(const mtk_dropout *d, uint64_t i)
{
    uint64_t z = mt_mix64(d->seed ^ ((d->offset + i + 1) * MT_GOLDEN64));
    return (float)(z >> 40) * (1.0f / 16777216.0f) >= d->p;
}
void mtk_dropout_fwd(mtk *k, mtk_act *out, const mtk_act *inp, size_t n, const mtk_dropout *d);  /* out may alias inp */
void mtk_dropout_bwd(mtk *k, mtk_act *dinp, const mtk_act *dout, size_t n, const mtk_dropout *d); /* may alias */

/* ---- causal self-attention over qkv [B,T,NH,3,HS] -> out [B,T,NH*HS] (head-major concat) ----
 * scores = q.k^T / sqrt(HS), future positions masked, softmax in fp32. lse [B,NH,T] (log-sum-exp of
 * each row) is saved for the backward pass, which recomputes probabilities instead of storing the
 * T x T matrix: memory is O(B*T*C), not O(B*NH*T^2).
 * drop (NULL or p == 0: none) is attention dropout on the probabilities; the probability of row i,
 * column j of head h in sequence b is counter ((b*NH + h)*T + i)*T + j. */
void mtk_attention_fwd(mtk *k, mtk_act *out, float *lse, const mtk_act *qkv, int B, int T, int NH, int HS,
                       const mtk_dropout *drop);
void mtk_attention_bwd(mtk *k, mtk_act *dqkv, const mtk_act *dout, const mtk_act *qkv, const mtk_act *out,
                       const float *lse, int B, int T, int NH, int HS, const mtk_dropout *drop);
/* Inference with a KV cache: kcache, vcache [B, NH, Tmax, HS] hold the keys and values of positions
 * 0 .. pos0-1 of each sequence. The T new tokens' keys and values (from qkv [B,T,NH,3,HS]) are appended
 * at positions pos0 .. pos0+T-1, and new token t attends to positions 0 .. pos0+t. No dropout, no lse.
 * pos0 + T must not exceed Tmax. */
void mtk_attention_kv(mtk *k, mtk_act *out, const mtk_act *qkv, mtk_act *kcache, mtk_act *vcache, int B, int T,
                      int pos0, int Tmax, int NH, int HS);

/* ---- grouped-query attention: the three operations above with NG query groups (NG divides NH) ----
 * qkv [B,T,NG,NH/NG+2,HS] (the layout at the top of this file), out [B,T,NH*HS], lse [B,NH,T]; query
 * head h attends with the key and value heads of its group h / (NH/NG). The backward assigns dqkv, the
 * gradients of a group's key and value summed over its query heads. The dropout counters are those of
 * mtk_attention_fwd (by query head). The KV cache is [B, NG, Tmax, HS]. NG == NH gives the bits of the
 * multi-head operations (which are these with NG = NH). */
void mtk_attention_gqa_fwd(mtk *k, mtk_act *out, float *lse, const mtk_act *qkv, int B, int T, int NH, int NG, int HS,
                           const mtk_dropout *drop);
void mtk_attention_gqa_bwd(mtk *k, mtk_act *dqkv, const mtk_act *dout, const mtk_act *qkv, const mtk_act *out,
                           const float *lse, int B, int T, int NH, int NG, int HS, const mtk_dropout *drop);
void mtk_attention_gqa_kv(mtk *k, mtk_act *out, const mtk_act *qkv, mtk_act *kcache, mtk_act *vcache, int B, int T,
                          int pos0, int Tmax, int NH, int NG, int HS);

/* ---- attention over a paged key/value cache (continuous batching: sequences at different positions in one
 * call) ----
 * The cache is a pool of blocks: block b of the key pool holds [NG][BS][HS] (BS positions; the value pool
 * likewise), and sequence s keeps its position p in block table[s * max_blocks + p / BS], at row p % BS. qkv
 * holds N token rows in the layout above ([N, NG, NH/NG + 2, HS]); row r is the token of sequence seq[r] at
 * position pos[r]. The rows' keys and values are stored at their places first; then each row's query heads
 * attend over positions 0 .. pos[r] of its sequence (causal), so one call may hold a chunk of one prompt and
 * single new tokens of other sequences. out [N, NH*HS]; a row's output does not depend on the other rows.
 * seq, pos and table are int32 device arrays; the caller keeps their entries inside the pool and every
 * position below max_blocks BS, which must not exceed the reserved sequence length. */
void mtk_attention_paged(mtk *k, mtk_act *out, const mtk_act *qkv, mtk_act *kpool, mtk_act *vpool, int N,
                         const int32_t *seq, const int32_t *pos, const int32_t *table, int max_blocks, int BS, int NH,
                         int NG, int HS);

/* ---- attention by blocks, for context parallelism (ring attention) ----
 * A rank holds Tq tokens of each of the B sequences of Tg, in runs: mtk_att_rows says where each of its
 * rows sits in the sequence (row r at start[r / run] + r % run, the runs in increasing order). Its queries
 * attend to the keys and values of every rank, a block at a time: a block's result is the attention over
 * that block's keys alone (out normalized over them, lse their log-sum-exp), and mtk_attention_merge folds
 * the blocks together by their lse into the attention over all the keys seen so far. Query i sees key j
 * when pos(j) <= pos(i) (causal by position in the whole sequence); a row that sees none of a block has
 * out 0 and lse -inf there. Dropout counters are mtk_attention_fwd's over the whole sequence:
 * ((b NH + h) Tg + pos(i)) Tg + pos(j), so that a split run draws the one-rank run's masks.
 * Layouts: qkv [B,Tq,NG,NH/NG+2,HS] as mtk_attention_gqa_fwd's; kv [B,Tk,NG,2,HS] (a group's key, then its
 * value); out, dq [B,Tq,NH*HS]; lse [B,NH,Tq]; dkv as kv. */
enum { MTK_ATT_MAX_RUNS = 8 };
typedef struct mtk_att_rows {
    int run;                         /* rows per run (> 0) */
    int start[MTK_ATT_MAX_RUNS];     /* the position of each run's first row */
} mtk_att_rows;
/* kv [B,T,NG,2,HS] = the keys and values of qkv [B,T,NG,NH/NG+2,HS]. */
void mtk_attention_kv_pack(mtk *k, mtk_act *kv, const mtk_act *qkv, int B, int T, int NH, int NG, int HS);
/* out (fp32, assigned) and lse: the attention of qkv's queries (rows qr) over the block kv (rows kr). */
void mtk_attention_block_fwd(mtk *k, float *out, float *lse, const mtk_act *qkv, const mtk_act *kv, int B, int Tq,
                             int Tk, int Tg, const mtk_att_rows *qr, const mtk_att_rows *kr, int NH, int NG, int HS,
                             const mtk_dropout *drop);
/* out, lse [.., T] (the blocks so far) take in out_b, lse_b (one more block): lse = log(e^lse + e^lse_b),
 * out = (e^lse out + e^lse_b out_b) / e^lse, rows with both -inf left out 0, lse -inf. In place. */
void mtk_attention_merge(mtk *k, float *out, float *lse, const float *out_b, const float *lse_b, int B, int T, int NH,
                         int HS);
/* The backward of one block given the attention over all the keys (out [B,Tq,NH*HS] in the activation
 * dtype, lse over all the blocks, dout): dq += the block's part of the queries' gradient, dkv += the
 * gradient of the block's keys and values (each group's summed over its query heads); fp32 both. */
void mtk_attention_block_bwd(mtk *k, float *dq, float *dkv, const mtk_act *dout, const mtk_act *qkv, const mtk_act *kv,
                             const mtk_act *out, const float *lse, int B, int Tq, int Tk, int Tg, const mtk_att_rows *qr,
                             const mtk_att_rows *kr, int NH, int NG, int HS, const mtk_dropout *drop);
/* dqkv [B,T,NG,NH/NG+2,HS] (assigned) from dq [B,T,NH*HS] and dkv [B,T,NG,2,HS] (fp32). */
void mtk_attention_dqkv_pack(mtk *k, mtk_act *dqkv, const float *dq, const float *dkv, int B, int T, int NH, int NG,
                             int HS);

/* ---- rotary position embeddings (Megatron core, non-interleaved), in place on the queries and keys of
 * qkv [B,T,NG,NH/NG+2,HS] (values untouched) ----
 * The first rot_dim dimensions of each query and key head (rot_dim even, <= HS: Megatron's
 * --rotary-percent gives rot_dim = HS * percent) are rotated; the rest pass through. With half = rot_dim/2,
 * inv_freq[i] = 1 / base^(2i / rot_dim) (--rotary-base, 10000 by default) and angle a = pos * inv_freq[i],
 * all in fp32, pos = pos0 + t (pos0: the KV cache's length when generating):
 *   y[i] = x[i] cos a - x[i + half] sin a,   y[i + half] = x[i + half] cos a + x[i] sin a   (i < half),
 * that is x cos + rotate_half(x) sin with cos, sin of [angles, angles]. */
void mtk_rope_fwd(mtk *k, mtk_act *qkv, int B, int T, int NH, int NG, int HS, int rot_dim, float base, int pos0);
/* The backward: the inverse rotation (angle -a) of the gradient dqkv, in place. */
void mtk_rope_bwd(mtk *k, mtk_act *dqkv, int B, int T, int NH, int NG, int HS, int rot_dim, float base, int pos0);

/* ---- softmax cross-entropy over logits [N, V] (V = padded vocab; every column takes part) ----
 * losses[n] = logsumexp(logits[n,:]) - logits[n, target[n]] for every row.
 * If dlogits != NULL it is set to (softmax - onehot) * dscale[n] (dscale NULL means 1); dlogits may
 * alias logits (computed in place). */
void mtk_xent_fwd_bwd(mtk *k, float *losses, mtk_act *dlogits, const mtk_act *logits, const int32_t *target,
                      const float *dscale, int N, int V);
/* The same in pieces, for a vocabulary split over tensor-parallel ranks (logits [N, V] are columns
 * v0 .. v0+V-1 of the full vocabulary); between the pieces the caller all-reduces over the ranks:
 *   1. rowmax[n] = max_j logits[n,j]                          -> all-reduce MAX
 *   2. sumexp[n] = sum_j exp(logits[n,j] - rowmax[n]) and
 *      tlogit[n] = logits[n, target[n] - v0] if the target is in this shard, else 0
 *                                                              -> all-reduce SUM of both
 *   3. losses[n] = log(sumexp[n]) + rowmax[n] - tlogit[n]
 *   4. dlogits = (exp(logits - rowmax) / sumexp - onehot) * dscale (dlogits may alias logits).
 * With one shard (v0 = 0) they give mtk_xent_fwd_bwd's results to rounding. */
void mtk_xent_rowmax(mtk *k, float *rowmax, const mtk_act *logits, int N, int V);
void mtk_xent_sumexp(mtk *k, float *sumexp, float *tlogit, const mtk_act *logits, const float *rowmax,
                     const int32_t *target, int N, int V, int v0);
void mtk_xent_loss(mtk *k, float *losses, const float *rowmax, const float *sumexp, const float *tlogit, int N);
void mtk_xent_bwd(mtk *k, mtk_act *dlogits, const mtk_act *logits, const float *rowmax, const float *sumexp,
                  const int32_t *target, const float *dscale, int N, int V, int v0);

/* ---- mixture of experts (Megatron-Core's MoE layer): the router, the tokens grouped by expert and back,
 * the experts' products over groups of unequal sizes ---- */

/* The router's logits [N, E] fp32 = inp [N, C] . w [E, C]^T with fp32 products of the activation-dtype
 * operands (Megatron's --moe-router-dtype fp32); the shared experts' gate is the same with E = 1. */
void mtk_router_fwd(mtk *k, float *logits, const mtk_act *inp, const mtk_act *w, int N, int C, int E);
/* dinp += dlogits . w (ACCUMULATES into the activation-dtype dinp; NULL to skip); dw [E, C] fp32 =
 * dlogits^T . inp, assigned or added to as gm says. */
void mtk_router_bwd(mtk *k, mtk_act *dinp, float *dw, const float *dlogits, const mtk_act *inp, const mtk_act *w,
                    int N, int C, int E, mtk_grad_mode gm);

typedef enum { MTK_MOE_SOFTMAX, MTK_MOE_SIGMOID } mtk_moe_score;
typedef struct mtk_moe_route {
    int E, K;              /* experts, and experts per token (1 <= K <= E <= MTK_MOE_MAX_EXPERTS) */
    mtk_moe_score score;   /* --moe-router-score-function */
    int pre_softmax;       /* --moe-router-pre-softmax (softmax only) */
    float scaling;         /* --moe-router-topk-scaling-factor; 0: none */
} mtk_moe_route;
enum { MTK_MOE_MAX_EXPERTS = 1024, MTK_MOE_MAX_SHARDS = 64 };
/* Each row's top K: idx [N, K] the experts of the K largest logits, largest first (ties: the lower
 * expert), probs [N, K] their weights: softmax: the softmax over those K logits, or with pre_softmax
 * the softmax over all E taken at them; sigmoid: the sigmoids of the K logits, divided by their sum when
 * K > 1. Times scaling when it is not 0. */
void mtk_moe_topk(mtk *k, int32_t *idx, float *probs, const float *logits, int N, const mtk_moe_route *r);
/* The sums behind the load-balancing and z losses, for every run of seq rows (N / seq runs; seq divides
 * N): stats[s][0][e] the rows of run s that chose expert e (idx), stats[s][1][e] the sum over its rows of
 * expert e's aux-loss score (the softmax over all E; with sigmoid, the sigmoids divided by their sum);
 * then stats[2 E N / seq] = the sum over all rows of logsumexp(row)^2. */
void mtk_moe_route_stats(mtk *k, float *stats, const float *logits, const int32_t *idx, int N, int seq,
                         const mtk_moe_route *r);
/* dlogits [N, E] (assigned), the sum of three gradients: of the weights (dprobs [N, K]; NULL: none), of
 * the load-balancing losses through the aux-loss scores (d score[n][e] = aux[(n / seq) E + e]; NULL:
 * none), and of zcoef x the sum over rows of logsumexp(row)^2 (zcoef 0: none). */
void mtk_moe_route_bwd(mtk *k, float *dlogits, const float *dprobs, const float *aux, int seq, float zcoef,
                       const float *logits, const int32_t *idx, int N, const mtk_moe_route *r);
/* Groups the N x K choices of idx by expert, experts in order and the tokens of each in token order
 * (below): counts[E]
 * the rows of each expert, row [N, K] the row of each choice in that order (-1: dropped), src [R] the
 * token of each row (-1: a padding row). capacity < 0: dropless (R = N K, nothing dropped). Else an expert
 * keeps at most capacity choices: those of the largest probs (ties: the earlier token), or with
 * drop_position the earliest tokens; with pad every expert has exactly capacity rows, the missing ones
 * padding (R = E capacity); without it R = the sum of counts. The tokens are N / seq sequences of seq
 * (b major), and the token order is Megatron's [s, b]: by position in the sequence, then by sequence.
 * shards (1 to MTK_MOE_MAX_SHARDS, dividing seq; 1: none) cuts the positions into that many runs of seq / shards, Megatron's
 * sequence-parallel shards: the capacity then holds in each shard apart (an expert keeps at most capacity
 * choices of each, padded to capacity rows each: R = E shards capacity), an expert's rows being those of
 * shard 0, then shard 1, ... (each shard's kept rows, then its padding). */
void mtk_moe_dispatch(mtk *k, int32_t *counts, int32_t *row, int32_t *src, const int32_t *idx, const float *probs,
                      int N, int K, int E, int capacity, int drop_position, int pad, int seq, int shards);
/* out [R, C]: row i is inp's row src[i], zeros where src[i] < 0. */
void mtk_moe_permute(mtk *k, mtk_act *out, const mtk_act *inp, const int32_t *src, int R, int C);
/* dinp [N, C] (assigned): row n is the sum of dout's rows row[n][0 .. K) (those >= 0), in k order. */
void mtk_moe_permute_bwd(mtk *k, mtk_act *dinp, const mtk_act *dout, const int32_t *row, int N, int K, int C);
/* out [N, C] (assigned): row n is the sum over k of probs[n][k] y[row[n][k]] (rows >= 0), fp32 sums in k
 * order. */
void mtk_moe_unpermute(mtk *k, mtk_act *out, const mtk_act *y, const int32_t *row, const float *probs, int N, int K,
                       int C);
/* Its backward: dy [R, C] (assigned; rows no choice points at are zero) row row[n][k] = probs[n][k] dout[n];
 * dprobs [N, K] (assigned) = dout[n] . y[row[n][k]], 0 for a dropped choice. */
void mtk_moe_unpermute_bwd(mtk *k, mtk_act *dy, float *dprobs, const mtk_act *dout, const mtk_act *y,
                           const int32_t *row, const float *probs, int N, int K, int C, int R);
/* The experts' products over rows grouped by expert: group g is counts[g] consecutive rows of inp [R, C]
 * (R the sum of counts; counts in HOST memory, G of them, each >= 0) times w_g [OC, C]^T into the same
 * rows of out [R, OC]; w holds the G matrices one after another ([G, OC, C]). */
void mtk_grouped_matmul_fwd(mtk *k, mtk_act *out, const mtk_act *inp, const mtk_act *w, const int32_t *counts, int G,
                            int C, int OC);
/* dinp = dout_g . w_g (assigned; NULL to skip); dw_g [OC, C] fp32 = dout_g^T . inp_g, assigned (zero for an
 * empty group) or added to as gm says. */
void mtk_grouped_matmul_bwd(mtk *k, mtk_act *dinp, float *dw, const mtk_act *dout, const mtk_act *inp,
                            const mtk_act *w, const int32_t *counts, int G, int C, int OC, mtk_grad_mode gm);
/* The shared experts' gate (Qwen2-MoE's): out[n] += x[n] sigmoid(logit[n]) (ACCUMULATES), rows of C. */
void mtk_sigmoid_gate_fwd(mtk *k, mtk_act *out, const mtk_act *x, const float *logit, int N, int C);
/* dx = dout sigmoid(logit) (assigned); dlogit[n] (assigned) = (dout[n] . x[n]) s (1 - s). */
void mtk_sigmoid_gate_bwd(mtk *k, mtk_act *dx, float *dlogit, const mtk_act *dout, const mtk_act *x,
                          const float *logit, int N, int C);

/* ---- reductions and optimizer (fp32 arrays) ---- */
/* Sum of squares of x[0..n), accumulated in double in a fixed order, returned to the host (waits). */
double mtk_sumsq(mtk *k, const float *x, size_t n);
/* A span of an fp32 array: elements [off, off + n). */
typedef struct mtk_span {
    size_t off, n;
} mtk_span;
/* *out (one double of device memory) = the sum of squares of x over nspan spans: each span's mtk_sumsq,
 * added in double in span order from 0 (the bits of those calls summed on the host), without waiting: the
 * gradient norm of a model whose counted tensors are not adjacent (tensor parallelism, tied copies) in
 * one operation (on a GPU two launches per 64 spans, not two per span), and no host sync until the caller
 * copies *out back. */
void mtk_sumsq_spans(mtk *k, double *out, const float *x, const mtk_span *span, int nspan);
/* Count of non-finite values in x (overflow checks; waits). */
size_t mtk_count_nonfinite(mtk *k, const float *x, size_t n);
/* AdamW (decoupled weight decay), bias-corrected at step t >= 1:
 *   m = b1 m + (1-b1) g ; v = b2 v + (1-b2) g^2 ; g scaled by grad_scale first (clipping / unscaling)
 *   p -= lr * ( (m / (1-b1^t)) / (sqrt(v / (1-b2^t)) + eps) + wd * p ) */
void mtk_adamw(mtk *k, float *p, const float *g, float *m, float *v, size_t n, float lr, float b1, float b2,
               float eps, float wd, int t, float grad_scale);
/* The same update, also writing work[0..n) = the updated p in the activation dtype (the model's working
 * copy) in the same pass over memory. */
void mtk_adamw_to(mtk *k, float *p, mtk_act *work, const float *g, float *m, float *v, size_t n, float lr, float b1,
                  float b2, float eps, float wd, int t, float grad_scale);
/* One piece of a multi-tensor update: elements [off, off + n) of every array, with the weight decay
 * (decay != 0) or without it (biases and norms). */
typedef struct mtk_adamw_seg {
    size_t off, n;
    int decay;
} mtk_adamw_seg;
/* mtk_adamw_to over nseg pieces of the same arrays at once: the results of one mtk_adamw_to per piece
 * (weight decay wd on the decayed pieces, 0 on the others), in one pass over the whole model (on a GPU
 * one launch per 64 pieces instead of one per tensor). work may be NULL. */
void mtk_adamw_multi(mtk *k, float *p, mtk_act *work, const float *g, float *m, float *v, const mtk_adamw_seg *seg,
                     int nseg, float lr, float b1, float b2, float eps, float wd, int t, float grad_scale);

#endif
