// embed.cu: token + position embedding with a vocabulary shard and a position offset, and its
// deterministic backward: no atomics; the first position of each token id sums the rows of all its
// positions in position order (the cpu backend's order), and a thread per (position, channel) sums the
// sequences of dwpe in order.
#include "cuda.h"

namespace MTK_CU_NS {

template <class T>
__global__ void embed_fwd_kernel(T *out, const int32_t *tok, const T *wte, const T *wpe, int T_, int C, int pos0,
                                 int v0, int nv, size_t n)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        const size_t row = i / C;
        const int c = (int)(i % C);
        const int64_t r = (int64_t)tok[row] - v0;
        float v = r >= 0 && r < nv ? ldf(wte[(size_t)r * C + c]) : 0.0f;
        if (wpe) v += ldf(wpe[(size_t)(pos0 + (int)(row % T_)) * C + c]);
        out[i] = stf<T>(v);
    }
}

template <class T>
static void efwd(mtk *k, void *out, const int32_t *tok, const void *wte, const void *wpe, int B, int T_, int C, int pos0,
                 int v0, int nv)
{
    const size_t n = (size_t)B * T_ * C;
    LAUNCH(embed_fwd_kernel<T>, blocks_for(n), THREADS, 0, launch_stream(k))((T *)out, tok, (const T *)wte, (const T *)wpe, T_,
                                                                      C, pos0, v0, nv, n);
}

void embed_fwd(mtk *k, void *out, const int32_t *tok, const void *wte, const void *wpe, int B, int T, int C, int pos0,
               int v0, int nv)
{
    if (B * T <= 0 || C <= 0) return;
    MTK_CU_DISPATCH(k, efwd, k, out, tok, wte, wpe, B, T, C, pos0, v0, nv);
    check(k, "embed_fwd");
}

// One block per position n: it leads its token id when no earlier position has the same id; the
// leader adds dout of every position with that id, in order, to the shard's row. It finds them 256
// positions at a time (a ballot per warp keeps them in order) and then sums their rows channel by channel.
enum { EMB_THREADS = 256 };
template <class T>
__global__ void __launch_bounds__(EMB_THREADS) embed_wte_kernel(float *dwte, const T *dout, const int32_t *tok, int N,
                                                                int C, int v0, int nv)
{
    __shared__ int list[EMB_THREADS], wcount[EMB_THREADS / 32];
    const int n = blockIdx.x, id = tok[n], lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    const int64_t r = (int64_t)id - v0;
    if (r < 0 || r >= nv) return;   // the whole block leaves
    int earlier = 0;
    for (int j = threadIdx.x; j < n; j += blockDim.x) earlier |= tok[j] == id;
    if (__syncthreads_or(earlier)) return;
    float *row = dwte + (size_t)r * C;
    for (int j0 = n; j0 < N; j0 += EMB_THREADS) {
        const int j = j0 + threadIdx.x;
        const bool match = j < N && tok[j] == id;
        const unsigned bal = __ballot_sync(0xffffffffu, match);
        if (lane == 0) wcount[w] = __popc(bal);
        __syncthreads();
        int off = 0, total = 0;
        for (int v = 0; v < EMB_THREADS / 32; v++) off += v < w ? wcount[v] : 0, total += wcount[v];
        if (match) list[off + __popc(bal & ((1u << lane) - 1))] = j;
        __syncthreads();
        if (total)
            for (int c = threadIdx.x; c < C; c += EMB_THREADS) {
                float s = row[c];
                for (int t = 0; t < total; t++) s += ldf(dout[(size_t)list[t] * C + c]);
                row[c] = s;
            }
        __syncthreads();   // list and wcount are rewritten by the next 256
    }
}

template <class T>
__global__ void embed_wpe_kernel(float *dwpe, const T *dout, int B, int T_, int C, int pos0)
{
    const size_t n = (size_t)T_ * C;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        float s = dwpe[(size_t)pos0 * C + i];
        for (int b = 0; b < B; b++) s += ldf(dout[(size_t)b * n + i]);
        dwpe[(size_t)pos0 * C + i] = s;
    }
}

template <class T>
static void ebwd(mtk *k, float *dwte, float *dwpe, const void *dout, const int32_t *tok, int B, int T_, int C, int pos0,
                 int v0, int nv)
{
    const int N = B * T_;
    LAUNCH(embed_wte_kernel<T>, N, EMB_THREADS, 0, launch_stream(k))(dwte, (const T *)dout, tok, N, C, v0, nv);
    if (dwpe)
        LAUNCH(embed_wpe_kernel<T>, blocks_for((size_t)T_ * C), THREADS, 0, launch_stream(k))(dwpe, (const T *)dout, B, T_, C,
                                                                                       pos0);
}

void embed_bwd(mtk *k, float *dwte, float *dwpe, const void *dout, const int32_t *tok, int B, int T, int C, int pos0,
               int v0, int nv)
{
    if (B * T <= 0 || C <= 0) return;
    MTK_CU_DISPATCH(k, ebwd, k, dwte, dwpe, dout, tok, B, T, C, pos0, v0, nv);
    check(k, "embed_bwd");
}

}  // namespace MTK_CU_NS
