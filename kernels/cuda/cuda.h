// cuda.h: what the .cu files of the CUDA backend share: the backend state, storage-type helpers
// (fp32/bf16/fp16 loads and round-to-nearest-even stores, 16-byte packs), warp and block reductions,
// launch sizes, the dtype dispatch of host wrappers, and the operations each file provides.
//
// The same sources build two backends: "cuda" (nvcc, sm_80/sm_90, cuBLASLt) and "sim" (g++ with
// kernels/sim/simt_sim.h force-included; the GEMM wrapper calls the CPU's BLAS). Everything lives in a
// namespace of its own per build so both can be linked into one program; only the ops table is C.
#pragma once
#include "../sim/simt_sim.h"   // under nvcc: LAUNCH and DYN_SHARED only
#include <cuda_runtime_api.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stddef.h>
#include <stdint.h>
#include <type_traits>

extern "C" {
#include "../backend.h"
}

#ifdef SIMT_SIM
#define MTK_CU_NS mtk_simk
#define MTK_CU_OPS mtk_sim_ops
#else
#define MTK_CU_NS mtk_cudak
#define MTK_CU_OPS mtk_cuda_ops
#endif
extern "C" const mtk_ops MTK_CU_OPS;

namespace MTK_CU_NS {

typedef __nv_bfloat16 bf16;
typedef __half f16;

// ---- backend state (k->impl) ----
struct Cu {
    cudaStream_t q[MTK_QUEUES];
    void *lt;                 // cublasLtHandle_t (cuda build)
    void *lt_ws;              // cuBLASLt workspace
    size_t lt_ws_bytes;
    void *plans;              // gemm.cu: cuBLASLt descriptors and algorithms by shape (cuda build)
    void *bias16[MTK_QUEUES]; // gemm.cu: the fp32 bias rounded to the activation dtype, per queue
    size_t bias16_cap[MTK_QUEUES];
    unsigned next_plan;
    void *up;                 // memory.cu: the pinned staging of copies to the device (NULL: not made yet)
    bool up_none;             // ... which could not be made: copies to the device wait
    void *blas;               // gemm.cu: cublasHandle_t of the grouped products (cuda build; NULL: none)
    unsigned grouped_refused; // gemm.cu: bit 1 << output dtype: cuBLAS refused a grouped product
    void *hs[2];              // memory.cu: host_scratch's buffers
    size_t hs_cap[2];
};
static inline Cu *cu(mtk *k) { return (Cu *)k->impl; }
static inline cudaStream_t stream(mtk *k) { return cu(k)->q[k->queue]; }
// The stream of a kernel launch: every LAUNCH names launch_stream(k), which counts it (mtk_stats).
static inline cudaStream_t launch_stream(mtk *k)
{
    k->stats.launches++;
    return stream(k);
}
// Records a launch or runtime error as the backend's sticky error; returns 1 when there was one.
int check(mtk *k, const char *what);

// ---- storage types ----
__device__ __forceinline__ float ldf(float x) { return x; }
__device__ __forceinline__ float ldf(bf16 x) { return __bfloat162float(x); }
__device__ __forceinline__ float ldf(f16 x) { return __half2float(x); }
template <class T> __device__ __forceinline__ T stf(float x);
template <> __device__ __forceinline__ float stf<float>(float x) { return x; }
template <> __device__ __forceinline__ bf16 stf<bf16>(float x) { return __float2bfloat16_rn(x); }
template <> __device__ __forceinline__ f16 stf<f16>(float x) { return __float2half_rn(x); }

// 16 bytes of T: one vector load or store.
template <class T> struct alignas(16) Pack {
    static constexpr int N = 16 / sizeof(T);
    T v[N];
};
static inline bool aligned16(const void *p) { return ((uintptr_t)p & 15) == 0; }

// ---- reductions (blockDim.x a multiple of 32; buf: 32 floats of shared memory) ----
__device__ __forceinline__ float warp_sum(float v)
{
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ float warp_max(float v)
{
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}
// Every thread gets the block's sum (max); the order of the sum is fixed by the block shape.
__device__ __forceinline__ float block_sum(float v, float *buf)
{
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = warp_sum(v);
    if (lane == 0) buf[w] = v;
    __syncthreads();
    v = lane < nw ? buf[lane] : 0.0f;
    v = warp_sum(v);
    __syncthreads();   // buf is reused by the next call
    return v;
}
__device__ __forceinline__ float block_max(float v, float *buf)
{
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = warp_max(v);
    if (lane == 0) buf[w] = v;
    __syncthreads();
    v = lane < nw ? buf[lane] : -INFINITY;
    v = warp_max(v);
    __syncthreads();
    return v;
}

// ---- counter-based dropout mask (kernels.h, mtk_dropout_keep) ----
__device__ __forceinline__ bool drop_keep(uint64_t seed, uint64_t ctr, float p)
{
    uint64_t z = seed ^ ((ctr + 1) * 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return (float)(z >> 40) * (1.0f / 16777216.0f) >= p;
}

// The dropout of a residual branch fused into the add that takes it (add_layernorm_fwd, add_rmsnorm_fwd):
// p == 0 is none. b(y, i) is y dropped and scaled as the separate dropout stores it (rounded to T), as a
// float: the product by s is never contracted into the add that follows.
struct DropIn {
    uint64_t seed, offset;
    float p, s;
    template <class T> __device__ __forceinline__ float b(T y, size_t i) const
    {
        if (p == 0.0f) return ldf(y);
        return drop_keep(seed, offset + i, p) ? ldf(stf<T>(__fmul_rn(ldf(y), s))) : 0.0f;
    }
    // The dropout backward's output for gradient g (as stored) of element i, as the separate op stores it.
    template <class T> __device__ __forceinline__ T g(T v, size_t i) const
    {
        return drop_keep(seed, offset + i, p) ? stf<T>(ldf(v) * s) : stf<T>(0.0f);
    }
};
static inline DropIn drop_in(const mtk_dropout *d)
{
    return d && d->p > 0.0f ? DropIn{d->seed, d->offset, d->p, 1.0f / (1.0f - d->p)} : DropIn{0, 0, 0.0f, 1.0f};
}

// ---- deterministic column sums (elementwise.cu): rows in R fixed chunks, partials in the workspace ----
enum { COLSUM_WS_FLOATS = 1 << 20 };   // partials of one column sum (the workspace holds two)
int colsum_chunks(int N, int C);        // R: chunks of rows, R * C <= COLSUM_WS_FLOATS
// dst[c] += sum_r part[r * C + c] in chunk order
void colsum_finish(mtk *k, float *dst, const float *part, int R, int C);
// The weight gradients of a norm's backward (norm_wgrad.cu), inputs in the activation dtype: LayerNorm's dw
// and db, or with mean and db null RMSNorm's dw. Takes the workspace of one column sum each.
void norm_wgrad(mtk *k, float *dw, float *db, const void *dout, const void *inp, const float *mean, const float *rstd,
                int N, int C);

// ---- launch sizes ----
enum { THREADS = 256 };
static inline unsigned blocks_for(size_t work, unsigned per = THREADS, unsigned cap = 4096)
{
    size_t b = (work + per - 1) / per;
    return (unsigned)(b < 1 ? 1 : b > cap ? cap : b);
}

// Runs F::template run<T>(args...) for the backend's activation dtype.
#define MTK_CU_DISPATCH(k, F, ...)                                                                          \
    do {                                                                                                     \
        switch ((k)->act) {                                                                                  \
        case MTK_BF16: F<bf16>(__VA_ARGS__); break;                                                          \
        case MTK_F16: F<f16>(__VA_ARGS__); break;                                                            \
        default: F<float>(__VA_ARGS__); break;                                                               \
        }                                                                                                    \
    } while (0)

// ---- the operations, one group per file ----
// memory.cu
void *alloc(mtk *k, size_t bytes, mt_err *e);
void dfree(mtk *k, void *p);
void *host_alloc(mtk *k, size_t bytes, mt_err *e);
void host_free(mtk *k, void *p);
void zero(mtk *k, void *p, size_t bytes);
void to_device(mtk *k, void *dst, const void *src, size_t bytes);
void uploads_close(mtk *k);   // frees the staging of to_device (after a device sync)
void to_host(mtk *k, void *dst, const void *src, size_t bytes);
void copy(mtk *k, void *dst, const void *src, size_t bytes);
void convert(mtk *k, void *dst, mtk_dtype dt, const void *src, mtk_dtype st, size_t n);
// Host memory of at least bytes for the arguments of a call (slot 0 or 1; grown when needed, kept until
// close): NULL with the error set when out of memory.
void *host_scratch(mtk *k, int slot, size_t bytes);
void host_scratch_close(mtk *k);
// gemm.cu: row-major C[M,N] = op(A) op(B) (+ beta C) (+ bias[N] per row); A, B in the activation dtype,
// C in cd (the activation dtype or fp32). ta: A is stored [K,M]; tb: B is stored [N,K].
// gelu_out (NULL: none): also gelu_out = gelu_tanh(C), taken before C is rounded where the epilogue does it.
void gemm(mtk *k, bool ta, bool tb, int M, int N, int K, const void *A, int lda, const void *B, int ldb, void *C,
          int ldc, mtk_dtype cd, float beta, const float *bias, void *gelu_out = NULL);
// n products of one kind with sizes of their own (the experts' groups): C_i[M_i, N_i] = op(A_i) op(B_i)
// (+ beta C_i), each as gemm() computes it with the shared ta, tb, lda, ldb, ldc, cd and beta; in one
// grouped cuBLAS call where cuBLAS has it (C of the activation dtype, 16-byte aligned operands).
struct GemmGroup {
    const void *A, *B;
    void *C;
    int M, N, K;
};
void gemm_grouped(mtk *k, bool ta, bool tb, const GemmGroup *g, int n, int lda, int ldb, int ldc, mtk_dtype cd,
                  float beta);
int gemm_open(mtk *k, mt_err *e);
void gemm_close(mtk *k);
void matmul_fwd(mtk *k, void *out, const void *inp, const void *w, const float *bias, int N, int C, int OC);
void matmul_gelu_fwd(mtk *k, void *out, void *pre, const void *inp, const void *w, const float *bias, int N, int C,
                     int OC, int exact);
void matmul_bwd(mtk *k, void *dinp, float *dw, float *dbias, const void *dout, const void *inp, const void *w, int N,
                int C, int OC, int acc);
// elementwise.cu
void gelu_fwd(mtk *k, void *out, const void *inp, size_t n, int exact);
void gelu_bwd(mtk *k, void *dinp, const void *inp, const void *dout, size_t n, int exact);
void add(mtk *k, void *out, const void *a, const void *b, size_t n);
void acc(mtk *k, void *y, const void *x, size_t n);
void scale(mtk *k, void *x, float s, size_t n);
void acc_f32(mtk *k, float *y, const float *x, size_t n);
void fp8_qdq(mtk *k, void *y, const void *x, size_t n, mtk_fp8 fmt, const float *scale, float *amax);
void greedy(mtk *k, int32_t *ids, double *lp, const void *logits, int N, int V, int ld);
void fp8_scale_update(mtk *k, float *history, float *scale, int S, int L, mtk_fp8 fmt, mtk_amax_algo algo, int margin);
void dropout_fwd(mtk *k, void *out, const void *inp, size_t n, const mtk_dropout *d);
void dropout_bwd(mtk *k, void *dinp, const void *dout, size_t n, const mtk_dropout *d);
void bias_rows(mtk *k, void *out, mtk_dtype dt, const float *bias, int N, int OC);
void bias_add(mtk *k, void *x, const float *bias, int N, int C);
void colsum_acc(mtk *k, float *dst, const void *x, int N, int C);
// layernorm.cu
void layernorm_fwd(mtk *k, void *out, float *mean, float *rstd, const void *inp, const float *w, const float *b, int N,
                   int C, float eps);
void add_layernorm_fwd(mtk *k, void *res, void *out, float *mean, float *rstd, const void *a, const void *b,
                       const float *w, const float *bias, int N, int C, float eps, const mtk_dropout *drop);
void layernorm_bwd(mtk *k, void *dinp, float *dw, float *db, const void *dout, const void *inp, const float *w,
                   const float *mean, const float *rstd, int N, int C);
void layernorm_bwd_drop(mtk *k, void *dinp, float *dw, float *db, const void *dout, const void *inp, const float *w,
                        const float *mean, const float *rstd, int N, int C, void *ddrop, const mtk_dropout *drop);
// embed.cu
void embed_fwd(mtk *k, void *out, const int32_t *tok, const void *wte, const void *wpe, int B, int T, int C, int pos0,
               int v0, int nv);
void embed_bwd(mtk *k, float *dwte, float *dwpe, const void *dout, const int32_t *tok, int B, int T, int C, int pos0,
               int v0, int nv);
// rmsnorm.cu
void rmsnorm_fwd(mtk *k, void *out, float *rstd, const void *inp, const float *w, int N, int C, float eps);
void add_rmsnorm_fwd(mtk *k, void *res, void *out, float *rstd, const void *a, const void *b, const float *w, int N,
                     int C, float eps, const mtk_dropout *drop);
void rmsnorm_bwd(mtk *k, void *dinp, float *dw, const void *dout, const void *inp, const float *w, const float *rstd,
                 int N, int C);
void rmsnorm_bwd_drop(mtk *k, void *dinp, float *dw, const void *dout, const void *inp, const float *w,
                      const float *rstd, int N, int C, void *ddrop, const mtk_dropout *drop);
// swiglu.cu
void swiglu_fwd(mtk *k, void *out, const void *inp, int N, int F);
void swiglu_bwd(mtk *k, void *dinp, const void *inp, const void *dout, int N, int F);
// rope.cu
void rope(mtk *k, void *qkv, int B, int T, int NH, int NG, int HS, int rot_dim, float base, int pos0, int inverse);
// attention.cu (NG query groups; NG == NH: multi-head)
void attention_fwd(mtk *k, void *out, float *lse, const void *qkv, int B, int T, int NH, int NG, int HS,
                   const mtk_dropout *drop);
void attention_bwd(mtk *k, void *dqkv, const void *dout, const void *qkv, const void *out, const float *lse, int B,
                   int T, int NH, int NG, int HS, const mtk_dropout *drop);
void attention_kv(mtk *k, void *out, const void *qkv, void *kcache, void *vcache, int B, int T, int pos0, int Tmax,
                  int NH, int NG, int HS);
// attention_paged.cu (a paged key/value cache)
void attention_paged(mtk *k, void *out, const void *qkv, void *kpool, void *vpool, int N, const int32_t *seq,
                     const int32_t *pos, const int32_t *table, int max_blocks, int BS, int NH, int NG, int HS);
// attention_block.cu (attention by blocks, for context parallelism)
void attention_kv_pack(mtk *k, void *kv, const void *qkv, int B, int T, int NH, int NG, int HS);
void attention_block_fwd(mtk *k, float *out, float *lse, const void *qkv, const void *kv, int B, int Tq, int Tk, int Tg,
                         const mtk_att_rows *qr, const mtk_att_rows *kr, int NH, int NG, int HS,
                         const mtk_dropout *drop);
void attention_merge(mtk *k, float *out, float *lse, const float *out_b, const float *lse_b, int B, int T, int NH,
                     int HS);
void attention_block_bwd(mtk *k, float *dq, float *dkv, const void *dout, const void *qkv, const void *kv,
                         const void *out, const float *lse, int B, int Tq, int Tk, int Tg, const mtk_att_rows *qr,
                         const mtk_att_rows *kr, int NH, int NG, int HS, const mtk_dropout *drop);
void attention_dqkv_pack(mtk *k, void *dqkv, const float *dq, const float *dkv, int B, int T, int NH, int NG, int HS);
// xent.cu
void xent_fwd_bwd(mtk *k, float *losses, void *dlogits, const void *logits, const int32_t *target,
                  const float *dscale, int N, int V);
void xent_rowmax(mtk *k, float *rowmax, const void *logits, int N, int V);
void xent_sumexp(mtk *k, float *sumexp, float *tlogit, const void *logits, const float *rowmax, const int32_t *target,
                 int N, int V, int v0);
void xent_loss(mtk *k, float *losses, const float *rowmax, const float *sumexp, const float *tlogit, int N);
void xent_bwd(mtk *k, void *dlogits, const void *logits, const float *rowmax, const float *sumexp,
              const int32_t *target, const float *dscale, int N, int V, int v0);
// reduce.cu
size_t reduce_ws_bytes(size_t n);
double sumsq(mtk *k, const float *x, size_t n);
void sumsq_spans(mtk *k, double *out, const float *x, const mtk_span *span, int nspan);
size_t count_nonfinite(mtk *k, const float *x, size_t n);
void adamw(mtk *k, float *p, void *work, const float *g, float *m, float *v, const mtk_adamw_seg *seg, int nseg,
           float lr, float b1, float b2, float eps, float wd, int t, float grad_scale);
// moe_router.cu
void router_fwd(mtk *k, float *logits, const void *inp, const void *w, int N, int C, int E);
void router_bwd(mtk *k, void *dinp, float *dw, const float *dlogits, const void *inp, const void *w, int N, int C,
                int E, int acc);
void sigmoid_gate_fwd(mtk *k, void *out, const void *x, const float *logit, int N, int C);
void sigmoid_gate_bwd(mtk *k, void *dx, float *dlogit, const void *dout, const void *x, const float *logit, int N,
                      int C);
// moe.cu
void moe_topk(mtk *k, int32_t *idx, float *probs, const float *logits, int N, const mtk_moe_route *r);
void moe_route_stats(mtk *k, float *stats, const float *logits, const int32_t *idx, int N, int seq,
                     const mtk_moe_route *r);
void moe_route_bwd(mtk *k, float *dlogits, const float *dprobs, const float *aux, int seq, float zcoef,
                   const float *logits, const int32_t *idx, int N, const mtk_moe_route *r);
// moe_dispatch.cu
void moe_dispatch(mtk *k, int32_t *counts, int32_t *row, int32_t *src, const int32_t *idx, const float *probs, int N,
                  int K, int E, int capacity, int drop_position, int pad, int seq, int shards);
void moe_permute(mtk *k, void *out, const void *inp, const int32_t *src, int R, int C);
void moe_permute_bwd(mtk *k, void *dinp, const void *dout, const int32_t *row, int N, int K, int C);
void moe_unpermute(mtk *k, void *out, const void *y, const int32_t *row, const float *probs, int N, int K, int C);
void moe_unpermute_bwd(mtk *k, void *dy, float *dprobs, const void *dout, const void *y, const int32_t *row,
                       const float *probs, int N, int K, int C, int R);
// moe_grouped.cu
void grouped_matmul_fwd(mtk *k, void *out, const void *inp, const void *w, const int32_t *counts, int G, int C, int OC);
void grouped_matmul_bwd(mtk *k, void *dinp, float *dw, const void *dout, const void *inp, const void *w,
                        const int32_t *counts, int G, int C, int OC, int acc);

}  // namespace MTK_CU_NS
