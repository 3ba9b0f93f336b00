// rmsnorm.cu: RMSNorm over the last dimension (also fused with the residual add before it) and its
// backward, in the manner of layernorm.cu: one warp per row for the forward and the input gradient (fp32
// sums over lanes, rstd saved), the weight gradient (norm_wgrad.cu) as 32-channel strips over fixed chunks of
// rows, then the chunks in order: the same sums on every run.
#include "cuda.h"

namespace MTK_CU_NS {

enum { ROWS = THREADS / 32 };   // rows per block

template <class T>
__global__ void rms_fwd_kernel(T *out, float *rstd, const T *inp, const float *w, int N, int C, float eps)
{
    const int lane = threadIdx.x & 31, row = blockIdx.x * ROWS + (threadIdx.x >> 5);
    if (row >= N) return;   // whole warps leave together
    const T *x = inp + (size_t)row * C;
    T *o = out + (size_t)row * C;
    float s = 0.0f;
    for (int c = lane; c < C; c += 32) {
        const float v = ldf(x[c]);
        s += v * v;
    }
    const float r = 1.0f / sqrtf(warp_sum(s) / C + eps);
    for (int c = lane; c < C; c += 32) o[c] = stf<T>(ldf(x[c]) * r * w[c]);
    if (lane == 0) rstd[row] = r;
}

// The residual add fused in: res = a + b is stored, and its stored (rounded) value is what gets normalised.
// The dropout of b (drop.p > 0) is applied to it first, as the separate dropout stores it.
template <class T>
__global__ void add_rms_fwd_kernel(T *res, T *out, float *rstd, const T *a, const T *b, const float *w, int N, int C,
                                   float eps, DropIn drop)
{
    const int lane = threadIdx.x & 31, row = blockIdx.x * ROWS + (threadIdx.x >> 5);
    if (row >= N) return;
    const size_t o = (size_t)row * C;
    float s = 0.0f;
    for (int c = lane; c < C; c += 32) {
        const T r = stf<T>(ldf(a[o + c]) + drop.b(b[o + c], o + c));
        res[o + c] = r;   // read back below by this same lane only
        const float v = ldf(r);
        s += v * v;
    }
    const float r = 1.0f / sqrtf(warp_sum(s) / C + eps);
    for (int c = lane; c < C; c += 32) out[o + c] = stf<T>(ldf(res[o + c]) * r * w[c]);
    if (lane == 0) rstd[row] = r;
}

template <class T>
static void rms_fwd(mtk *k, void *out, float *rstd, const void *inp, const float *w, int N, int C, float eps)
{
    LAUNCH(rms_fwd_kernel<T>, (N + ROWS - 1) / ROWS, THREADS, 0, launch_stream(k))((T *)out, rstd, (const T *)inp, w, N, C, eps);
}

void rmsnorm_fwd(mtk *k, void *out, float *rstd, const void *inp, const float *w, int N, int C, float eps)
{
    if (N <= 0 || C <= 0) return;
    MTK_CU_DISPATCH(k, rms_fwd, k, out, rstd, inp, w, N, C, eps);
    check(k, "rmsnorm_fwd");
}

template <class T>
static void add_rms(mtk *k, void *res, void *out, float *rstd, const void *a, const void *b, const float *w, int N, int C,
                    float eps, DropIn drop)
{
    LAUNCH(add_rms_fwd_kernel<T>, (N + ROWS - 1) / ROWS, THREADS, 0, launch_stream(k))((T *)res, (T *)out, rstd, (const T *)a,
                                                                                (const T *)b, w, N, C, eps, drop);
}

void add_rmsnorm_fwd(mtk *k, void *res, void *out, float *rstd, const void *a, const void *b, const float *w, int N,
                     int C, float eps, const mtk_dropout *drop)
{
    if (N <= 0 || C <= 0) return;
    MTK_CU_DISPATCH(k, add_rms, k, res, out, rstd, a, b, w, N, C, eps, drop_in(drop));
    check(k, "add_rmsnorm_fwd");
}

// dinp += (dy w - xhat mean(dy w xhat)) rstd with xhat = x rstd, one warp per row. dd (NULL: none) gets
// the dropout backward of dinp as stored (drop.p > 0).
template <class T>
__global__ void rms_bwd_kernel(T *dinp, const T *dout, const T *inp, const float *w, const float *rstd, int N, int C,
                               T *dd, DropIn drop)
{
    const int lane = threadIdx.x & 31, row = blockIdx.x * ROWS + (threadIdx.x >> 5);
    if (row >= N) return;
    const T *x = inp + (size_t)row * C, *dy = dout + (size_t)row * C;
    T *dx = dinp + (size_t)row * C;
    const float r = rstd[row];
    float s = 0.0f;
    for (int c = lane; c < C; c += 32) s += ldf(dy[c]) * w[c] * (ldf(x[c]) * r);
    s = warp_sum(s) / C;
    for (int c = lane; c < C; c += 32) {
        const T g = stf<T>(ldf(dx[c]) + (ldf(dy[c]) * w[c] - ldf(x[c]) * r * s) * r);
        dx[c] = g;
        if (dd) dd[(size_t)row * C + c] = drop.g(g, (size_t)row * C + c);
    }
}

template <class T>
static void rms_bwd(mtk *k, void *dinp, float *dw, const void *dout, const void *inp, const float *w, const float *rstd,
                    int N, int C, void *ddrop, DropIn drop)
{
    LAUNCH(rms_bwd_kernel<T>, (N + ROWS - 1) / ROWS, THREADS, 0, launch_stream(k))((T *)dinp, (const T *)dout, (const T *)inp,
                                                                            w, rstd, N, C, (T *)ddrop, drop);
    norm_wgrad(k, dw, nullptr, dout, inp, nullptr, rstd, N, C);
}

void rmsnorm_bwd(mtk *k, void *dinp, float *dw, const void *dout, const void *inp, const float *w, const float *rstd,
                 int N, int C)
{
    if (N <= 0 || C <= 0) return;
    MTK_CU_DISPATCH(k, rms_bwd, k, dinp, dw, dout, inp, w, rstd, N, C, nullptr, drop_in(nullptr));
    check(k, "rmsnorm_bwd");
}

// The same, with the dropout backward of the accumulated dinp written to ddrop in the rows' pass.
void rmsnorm_bwd_drop(mtk *k, void *dinp, float *dw, const void *dout, const void *inp, const float *w,
                      const float *rstd, int N, int C, void *ddrop, const mtk_dropout *drop)
{
    if (N <= 0 || C <= 0) return;
    MTK_CU_DISPATCH(k, rms_bwd, k, dinp, dw, dout, inp, w, rstd, N, C, ddrop, drop_in(drop));
    check(k, "rmsnorm_bwd");
}

}  // namespace MTK_CU_NS
