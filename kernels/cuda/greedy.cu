// greedy.cu: greedy decoding's choice on the device (kernels.h, mtk_greedy): one block per row, the
// row's max and its first index by block reductions, the exponentials' sum in fp64 by a tree in shared
// memory.
#include "cuda.h"

namespace MTK_CU_NS {

template <class T>
__global__ void greedy_kernel(int32_t *ids, double *lp, const T *logits, int V, int ld)
{
    __shared__ float buf[32];
    __shared__ double sh[THREADS];
    const T *x = logits + (size_t)blockIdx.x * ld;
    float m = -INFINITY;
    for (int j = threadIdx.x; j < V; j += blockDim.x) m = fmaxf(m, ldf(x[j]));
    m = block_max(m, buf);
    float first = -INFINITY;   // -(the thread's first index holding the max): exact below 2^24
    for (int j = threadIdx.x; j < V; j += blockDim.x)
        if (ldf(x[j]) == m) {
            first = -(float)j;
            break;
        }
    first = block_max(first, buf);
    double s = 0;
    for (int j = threadIdx.x; j < V; j += blockDim.x) s += exp((double)ldf(x[j]) - (double)m);
    sh[threadIdx.x] = s;
    __syncthreads();
    for (int o = (int)blockDim.x / 2; o > 0; o >>= 1) {
        if ((int)threadIdx.x < o) sh[threadIdx.x] += sh[threadIdx.x + o];
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        const float x0 = ldf(x[0]);
        const int id = x0 != x0 || first == -INFINITY ? 0 : (int)(-first);   // a leading NaN: 0, as the host
        ids[blockIdx.x] = id;
        lp[blockIdx.x] = (double)ldf(x[id]) - ((double)m + log(sh[0]));
    }
}

template <class T>
static void gr(mtk *k, int32_t *ids, double *lp, const void *logits, int N, int V, int ld)
{
    LAUNCH(greedy_kernel<T>, N, THREADS, 0, launch_stream(k))(ids, lp, (const T *)logits, V, ld);
}
void greedy(mtk *k, int32_t *ids, double *lp, const void *logits, int N, int V, int ld)
{
    if (N <= 0 || V <= 0) return;
    if (V >= (1 << 24)) {
        mtk_fail(k, "greedy: %d logits a row, above the 2^24 this kernel indexes exactly", V);
        return;
    }
    MTK_CU_DISPATCH(k, gr, k, ids, lp, logits, N, V, ld);
    check(k, "greedy");
}

}  // namespace MTK_CU_NS
