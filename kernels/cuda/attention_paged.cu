// attention_paged.cu: attention over a paged key/value cache (kernels.h, mtk_attention_paged), for a server's
// continuous batching. A first kernel stores the new rows' keys and values into their sequences' blocks (a
// thread per element); then a block of PT threads per (row, query head) walks its sequence's positions PT at
// a time: each thread scores one key, the block takes the chunk's max and sum (an online softmax across
// chunks), and each thread accumulates the probability-weighted values of the dimensions it owns
// (d = t, t + PT, ...). A row's result depends only on its own sequence, never on the rest of the call.
#include "cuda.h"

namespace MTK_CU_NS {

constexpr int PT = 128;       // threads of a (row, head) block: keys scored per chunk
constexpr int PAGED_DIMS = 4; // dimensions a thread owns at most: HS <= PAGED_DIMS PT

__device__ __forceinline__ size_t paged_at(const int32_t *table, int max_blocks, int BS, int NG, int HS, int s, int p,
                                           int g)
{
    return (((size_t)table[(size_t)s * max_blocks + p / BS] * NG + g) * BS + p % BS) * HS;
}

template <class T>
__global__ void paged_store_kernel(T *kp, T *vp, const T *qkv, const int32_t *seq, const int32_t *pos,
                                   const int32_t *table, int max_blocks, int BS, int NG, int rep, int HS, size_t n)
{
    for (size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x; idx < n; idx += (size_t)gridDim.x * blockDim.x) {
        const int d = (int)(idx % HS);
        const size_t row = idx / HS;   // (r, g)
        const int g = (int)(row % NG), r = (int)(row / NG);
        const T *src = qkv + ((size_t)r * NG + g) * (rep + 2) * HS + (size_t)rep * HS;
        const size_t dst = paged_at(table, max_blocks, BS, NG, HS, seq[r], pos[r], g) + d;
        kp[dst] = src[d];
        vp[dst] = src[HS + d];
    }
}

template <class T>
__global__ void paged_attn_kernel(T *out, const T *qkv, const T *kp, const T *vp, const int32_t *seq, const int32_t *pos,
                                  const int32_t *table, int max_blocks, int BS, int NH, int NG, int HS, float scale)
{
    DYN_SHARED(float, sh);
    __shared__ float buf[32];
    float *q = sh, *pr = sh + HS;   // the query, a chunk's probabilities
    const int r = blockIdx.x / NH, h = blockIdx.x % NH, rep = NH / NG, g = h / rep, t = threadIdx.x;
    const int s = seq[r], n = pos[r] + 1;
    const T *qr = qkv + ((size_t)r * NG + g) * (rep + 2) * HS + (size_t)(h % rep) * HS;
    for (int d = t; d < HS; d += PT) q[d] = ldf(qr[d]);
    __syncthreads();
    float m = -INFINITY, l = 0.0f, acc[PAGED_DIMS];
    for (int i = 0; i < PAGED_DIMS; i++) acc[i] = 0.0f;
    for (int j0 = 0; j0 < n; j0 += PT) {
        const int j = j0 + t;
        float sc = -INFINITY;
        if (j < n) {
            const T *kr = kp + paged_at(table, max_blocks, BS, NG, HS, s, j, g);
            float a = 0.0f;
            for (int d = 0; d < HS; d++) a += q[d] * ldf(kr[d]);
            sc = a * scale;
        }
        const float mn = fmaxf(m, block_max(sc, buf));
        const float p = j < n ? expf(sc - mn) : 0.0f, alpha = m == -INFINITY ? 0.0f : expf(m - mn);
        l = l * alpha + block_sum(p, buf);
        pr[t] = p;
        __syncthreads();
        const int cnt = n - j0 < PT ? n - j0 : PT;
        for (int i = 0; i < PAGED_DIMS; i++) {
            const int d = t + i * PT;
            if (d >= HS) break;
            float a = acc[i] * alpha;
            for (int c = 0; c < cnt; c++) a += pr[c] * ldf(vp[paged_at(table, max_blocks, BS, NG, HS, s, j0 + c, g) + d]);
            acc[i] = a;
        }
        m = mn;
        __syncthreads();   // pr is the next chunk's
    }
    T *o = out + ((size_t)r * NH + h) * HS;
    for (int i = 0; i < PAGED_DIMS; i++) {
        const int d = t + i * PT;
        if (d < HS) o[d] = stf<T>(acc[i] / l);
    }
}

template <class T>
static void apaged(mtk *k, void *out, const void *qkv, void *kp, void *vp, int N, const int32_t *seq, const int32_t *pos,
                   const int32_t *table, int max_blocks, int BS, int NH, int NG, int HS)
{
    const int rep = NH / NG;
    const size_t n = (size_t)N * NG * HS;
    LAUNCH(paged_store_kernel<T>, blocks_for(n), THREADS, 0, launch_stream(k))((T *)kp, (T *)vp, (const T *)qkv, seq, pos,
                                                                         table, max_blocks, BS, NG, rep, HS, n);
    LAUNCH(paged_attn_kernel<T>, (unsigned)N * (unsigned)NH, PT, (size_t)(HS + PT) * sizeof(float), launch_stream(k))(
        (T *)out, (const T *)qkv, (const T *)kp, (const T *)vp, seq, pos, table, max_blocks, BS, NH, NG, HS,
        1.0f / sqrtf((float)HS));
}

void attention_paged(mtk *k, void *out, const void *qkv, void *kpool, void *vpool, int N, const int32_t *seq,
                     const int32_t *pos, const int32_t *table, int max_blocks, int BS, int NH, int NG, int HS)
{
    if (N <= 0) return;
    if (HS > PAGED_DIMS * PT) {
        mtk_fail(k, "attention_paged: head size %d above %d", HS, PAGED_DIMS * PT);
        return;
    }
    MTK_CU_DISPATCH(k, apaged, k, out, qkv, kpool, vpool, N, seq, pos, table, max_blocks, BS, NH, NG, HS);
    check(k, "attention_paged");
}

}  // namespace MTK_CU_NS
