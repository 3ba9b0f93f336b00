// xent.cu: softmax cross-entropy over vocabulary rows, fused so that probabilities are never stored
// (the logit gradient may overwrite the logits), and the vocabulary-parallel pieces (row max, sum of
// exponentials and target logit, loss, gradient). One block per row, fp32 block reductions.
#include "cuda.h"

namespace MTK_CU_NS {

template <class T>
__global__ void xent_kernel(float *losses, T *dlogits, const T *logits, const int32_t *target, const float *dscale, int V)
{
    __shared__ float buf[32];
    const size_t n = blockIdx.x;
    const T *x = logits + n * V;
    const int tg = target[n];
    const float xt = ldf(x[tg]);
    float m = -INFINITY;
    for (int j = threadIdx.x; j < V; j += blockDim.x) m = fmaxf(m, ldf(x[j]));
    m = block_max(m, buf);
    float s = 0.0f;
    for (int j = threadIdx.x; j < V; j += blockDim.x) s += expf(ldf(x[j]) - m);
    s = block_sum(s, buf);
    if (threadIdx.x == 0) losses[n] = logf(s) + m - xt;
    if (!dlogits) return;
    const float inv = 1.0f / s, g = dscale ? dscale[n] : 1.0f;
    T *d = dlogits + n * V;   // may be x: each element is read and written by the same thread
    for (int j = threadIdx.x; j < V; j += blockDim.x) d[j] = stf<T>((expf(ldf(x[j]) - m) * inv - (j == tg)) * g);
}
// The same in two passes with 16-byte loads: an online max and sum of exponentials, then the gradient.
template <class T>
__global__ void xent_vec_kernel(float *losses, T *dlogits, const T *logits, const int32_t *target, const float *dscale,
                                int V)
{
    constexpr int E = Pack<T>::N;
    __shared__ float buf[32];
    const size_t n = blockIdx.x;
    const int P = V / E, tg = target[n];
    const Pack<T> *x = (const Pack<T> *)(logits + n * V);
    float m = -INFINITY, s = 0.0f;
    for (int p = threadIdx.x; p < P; p += blockDim.x) {
        const Pack<T> a = x[p];
#pragma unroll
        for (int e = 0; e < E; e++) {
            const float v = ldf(a.v[e]);
            if (v > m) s = s * expf(m - v) + 1.0f, m = v;
            else if (v != -INFINITY) s += expf(v - m);
        }
    }
    const float M = block_max(m, buf);
    const float S = block_sum(m == -INFINITY ? 0.0f : s * expf(m - M), buf);
    if (threadIdx.x == 0) losses[n] = logf(S) + M - ldf(logits[n * V + tg]);
    if (!dlogits) return;
    const float inv = 1.0f / S, g = dscale ? dscale[n] : 1.0f;
    Pack<T> *d = (Pack<T> *)(dlogits + n * V);   // may be x: each pack is read and written by the same thread
    for (int p = threadIdx.x; p < P; p += blockDim.x) {
        const Pack<T> a = x[p];
        Pack<T> o;
#pragma unroll
        for (int e = 0; e < E; e++) o.v[e] = stf<T>((expf(ldf(a.v[e]) - M) * inv - (p * E + e == tg)) * g);
        d[p] = o;
    }
}

template <class T>
static void xfb(mtk *k, float *losses, void *dlogits, const void *logits, const int32_t *target, const float *dscale,
                int N, int V)
{
    if (V % Pack<T>::N == 0 && aligned16(logits) && (!dlogits || aligned16(dlogits)))
        LAUNCH(xent_vec_kernel<T>, N, THREADS, 0, launch_stream(k))(losses, (T *)dlogits, (const T *)logits, target, dscale, V);
    else
        LAUNCH(xent_kernel<T>, N, THREADS, 0, launch_stream(k))(losses, (T *)dlogits, (const T *)logits, target, dscale, V);
}
void xent_fwd_bwd(mtk *k, float *losses, void *dlogits, const void *logits, const int32_t *target, const float *dscale,
                  int N, int V)
{
    if (N <= 0 || V <= 0) return;
    MTK_CU_DISPATCH(k, xfb, k, losses, dlogits, logits, target, dscale, N, V);
    check(k, "xent_fwd_bwd");
}

template <class T> __global__ void rowmax_kernel(float *rowmax, const T *logits, int V)
{
    __shared__ float buf[32];
    const T *x = logits + (size_t)blockIdx.x * V;
    float m = -INFINITY;
    for (int j = threadIdx.x; j < V; j += blockDim.x) m = fmaxf(m, ldf(x[j]));
    m = block_max(m, buf);
    if (threadIdx.x == 0) rowmax[blockIdx.x] = m;
}
template <class T> static void rmax(mtk *k, float *rowmax, const void *logits, int N, int V)
{
    LAUNCH(rowmax_kernel<T>, N, THREADS, 0, launch_stream(k))(rowmax, (const T *)logits, V);
}
void xent_rowmax(mtk *k, float *rowmax, const void *logits, int N, int V)
{
    if (N <= 0 || V <= 0) return;
    MTK_CU_DISPATCH(k, rmax, k, rowmax, logits, N, V);
    check(k, "xent_rowmax");
}

template <class T>
__global__ void sumexp_kernel(float *sumexp, float *tlogit, const T *logits, const float *rowmax, const int32_t *target,
                              int V, int v0)
{
    __shared__ float buf[32];
    const size_t n = blockIdx.x;
    const T *x = logits + n * V;
    const float m = rowmax[n];
    float s = 0.0f;
    for (int j = threadIdx.x; j < V; j += blockDim.x) s += expf(ldf(x[j]) - m);
    s = block_sum(s, buf);
    if (threadIdx.x == 0) {
        const int64_t t = (int64_t)target[n] - v0;
        sumexp[n] = s;
        tlogit[n] = t >= 0 && t < V ? ldf(x[t]) : 0.0f;
    }
}
template <class T>
static void sexp(mtk *k, float *sumexp, float *tlogit, const void *logits, const float *rowmax, const int32_t *target,
                 int N, int V, int v0)
{
    LAUNCH(sumexp_kernel<T>, N, THREADS, 0, launch_stream(k))(sumexp, tlogit, (const T *)logits, rowmax, target, V, v0);
}
void xent_sumexp(mtk *k, float *sumexp, float *tlogit, const void *logits, const float *rowmax, const int32_t *target,
                 int N, int V, int v0)
{
    if (N <= 0 || V <= 0) return;
    MTK_CU_DISPATCH(k, sexp, k, sumexp, tlogit, logits, rowmax, target, N, V, v0);
    check(k, "xent_sumexp");
}

__global__ void loss_kernel(float *losses, const float *rowmax, const float *sumexp, const float *tlogit, int N)
{
    const int n = blockIdx.x * blockDim.x + threadIdx.x;
    if (n < N) losses[n] = logf(sumexp[n]) + rowmax[n] - tlogit[n];
}
void xent_loss(mtk *k, float *losses, const float *rowmax, const float *sumexp, const float *tlogit, int N)
{
    if (N <= 0) return;
    LAUNCH(loss_kernel, (N + THREADS - 1) / THREADS, THREADS, 0, launch_stream(k))(losses, rowmax, sumexp, tlogit, N);
    check(k, "xent_loss");
}

template <class T>
__global__ void xbwd_kernel(T *dlogits, const T *logits, const float *rowmax, const float *sumexp, const int32_t *target,
                            const float *dscale, int V, int v0)
{
    const size_t n = blockIdx.x;
    const T *x = logits + n * V;
    T *d = dlogits + n * V;
    const float m = rowmax[n], inv = 1.0f / sumexp[n], g = dscale ? dscale[n] : 1.0f;
    const int64_t t = (int64_t)target[n] - v0;
    for (int j = threadIdx.x; j < V; j += blockDim.x) d[j] = stf<T>((expf(ldf(x[j]) - m) * inv - (j == t)) * g);
}
template <class T>
static void xb(mtk *k, void *dlogits, const void *logits, const float *rowmax, const float *sumexp, const int32_t *target,
               const float *dscale, int N, int V, int v0)
{
    LAUNCH(xbwd_kernel<T>, N, THREADS, 0, launch_stream(k))((T *)dlogits, (const T *)logits, rowmax, sumexp, target, dscale, V,
                                                     v0);
}
void xent_bwd(mtk *k, void *dlogits, const void *logits, const float *rowmax, const float *sumexp,
              const int32_t *target, const float *dscale, int N, int V, int v0)
{
    if (N <= 0 || V <= 0) return;
    MTK_CU_DISPATCH(k, xb, k, dlogits, logits, rowmax, sumexp, target, dscale, N, V, v0);
    check(k, "xent_bwd");
}

}  // namespace MTK_CU_NS
