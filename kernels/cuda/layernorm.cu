// layernorm.cu: LayerNorm over the last dimension (also fused with the residual add before it) and its
// backward. Forward and the input gradient: one warp per row (fp32 sums over lanes, mean and rstd
// saved; 16-byte loads and stores when rows allow); weight and bias gradients (norm_wgrad.cu): 32-channel
// strips over fixed chunks of rows, then the chunks in order: the same sums on every run.
#include "cuda.h"

namespace MTK_CU_NS {

enum { ROWS = THREADS / 32 };   // rows per block

// VEC: rows of whole 16-byte packs at aligned addresses; each lane takes every 32nd pack.
template <class T, bool VEC>
__global__ void ln_fwd_kernel(T *out, float *mean, float *rstd, const T *inp, const float *w, const float *b, int N,
                              int C, float eps)
{
    const int lane = threadIdx.x & 31, row = blockIdx.x * ROWS + (threadIdx.x >> 5);
    if (row >= N) return;   // whole warps leave together
    const T *x = inp + (size_t)row * C;
    T *o = out + (size_t)row * C;
    constexpr int P = Pack<T>::N;
    const Pack<T> *xp = reinterpret_cast<const Pack<T> *>(x);
    const int np = C / P;
    float s = 0.0f;
    if (VEC)
        for (int pk = lane; pk < np; pk += 32) {
            const Pack<T> u = xp[pk];
            for (int j = 0; j < P; j++) s += ldf(u.v[j]);
        }
    else
        for (int c = lane; c < C; c += 32) s += ldf(x[c]);
    const float m = warp_sum(s) / C;
    float v = 0.0f;
    if (VEC)
        for (int pk = lane; pk < np; pk += 32) {
            const Pack<T> u = xp[pk];
            for (int j = 0; j < P; j++) {
                const float d = ldf(u.v[j]) - m;
                v += d * d;
            }
        }
    else
        for (int c = lane; c < C; c += 32) {
            const float d = ldf(x[c]) - m;
            v += d * d;
        }
    const float r = 1.0f / sqrtf(warp_sum(v) / C + eps);
    if (VEC)
        for (int pk = lane; pk < np; pk += 32) {
            const Pack<T> u = xp[pk];
            Pack<T> y;
            for (int j = 0; j < P; j++) {
                const int c = pk * P + j;
                y.v[j] = stf<T>((ldf(u.v[j]) - m) * r * w[c] + b[c]);
            }
            reinterpret_cast<Pack<T> *>(o)[pk] = y;
        }
    else
        for (int c = lane; c < C; c += 32) o[c] = stf<T>((ldf(x[c]) - m) * r * w[c] + b[c]);
    if (lane == 0) mean[row] = m, rstd[row] = r;
}

// The residual add fused in: res = a + b is stored, and its stored (rounded) value is what gets normalised.
// The dropout of b (drop.p > 0) is applied to it first, as the separate dropout stores it.
template <class T>
__global__ void add_ln_fwd_kernel(T *res, T *out, float *mean, float *rstd, const T *a, const T *b, const float *w,
                                  const float *bias, int N, int C, float eps, DropIn drop)
{
    const int lane = threadIdx.x & 31, row = blockIdx.x * ROWS + (threadIdx.x >> 5);
    if (row >= N) return;
    const size_t o = (size_t)row * C;
    float s = 0.0f;
    for (int c = lane; c < C; c += 32) {
        const T r = stf<T>(ldf(a[o + c]) + drop.b(b[o + c], o + c));
        res[o + c] = r;   // read back below by this same lane only
        s += ldf(r);
    }
    const float m = warp_sum(s) / C;
    float v = 0.0f;
    for (int c = lane; c < C; c += 32) {
        const float d = ldf(res[o + c]) - m;
        v += d * d;
    }
    const float r = 1.0f / sqrtf(warp_sum(v) / C + eps);
    for (int c = lane; c < C; c += 32) out[o + c] = stf<T>((ldf(res[o + c]) - m) * r * w[c] + bias[c]);
    if (lane == 0) mean[row] = m, rstd[row] = r;
}

template <class T>
static void add_ln(mtk *k, void *res, void *out, float *mean, float *rstd, const void *a, const void *b, const float *w,
                   const float *bias, int N, int C, float eps, DropIn drop)
{
    LAUNCH(add_ln_fwd_kernel<T>, (N + ROWS - 1) / ROWS, THREADS, 0, launch_stream(k))((T *)res, (T *)out, mean, rstd,
                                                                               (const T *)a, (const T *)b, w, bias, N,
                                                                               C, eps, drop);
}

void add_layernorm_fwd(mtk *k, void *res, void *out, float *mean, float *rstd, const void *a, const void *b,
                       const float *w, const float *bias, int N, int C, float eps, const mtk_dropout *drop)
{
    if (N <= 0 || C <= 0) return;
    MTK_CU_DISPATCH(k, add_ln, k, res, out, mean, rstd, a, b, w, bias, N, C, eps, drop_in(drop));
    check(k, "add_layernorm_fwd");
}

template <class T>
static void ln_fwd(mtk *k, void *out, float *mean, float *rstd, const void *inp, const float *w, const float *b, int N,
                   int C, float eps)
{
    const unsigned g = (N + ROWS - 1) / ROWS;
    if (C % Pack<T>::N == 0 && aligned16(out) && aligned16(inp))
        LAUNCH((ln_fwd_kernel<T, true>), g, THREADS, 0, launch_stream(k))((T *)out, mean, rstd, (const T *)inp, w, b, N, C, eps);
    else
        LAUNCH((ln_fwd_kernel<T, false>), g, THREADS, 0, launch_stream(k))((T *)out, mean, rstd, (const T *)inp, w, b, N, C, eps);
}

void layernorm_fwd(mtk *k, void *out, float *mean, float *rstd, const void *inp, const float *w, const float *b, int N,
                   int C, float eps)
{
    if (N <= 0 || C <= 0) return;
    MTK_CU_DISPATCH(k, ln_fwd, k, out, mean, rstd, inp, w, b, N, C, eps);
    check(k, "layernorm_fwd");
}

// dinp += (dy w - mean(dy w) - xhat mean(dy w xhat)) rstd, one warp per row. dd (NULL: none) gets the
// dropout backward of dinp as stored (drop.p > 0).
template <class T>
__global__ void ln_bwd_kernel(T *dinp, const T *dout, const T *inp, const float *w, const float *mean,
                              const float *rstd, int N, int C, T *dd, DropIn drop)
{
    const int lane = threadIdx.x & 31, row = blockIdx.x * ROWS + (threadIdx.x >> 5);
    if (row >= N) return;
    const T *x = inp + (size_t)row * C, *dy = dout + (size_t)row * C;
    T *dx = dinp + (size_t)row * C;
    const float m = mean[row], r = rstd[row];
    float sd = 0.0f, sdn = 0.0f;
    for (int c = lane; c < C; c += 32) {
        const float dn = ldf(dy[c]) * w[c];
        sd += dn;
        sdn += dn * ((ldf(x[c]) - m) * r);
    }
    sd = warp_sum(sd) / C;
    sdn = warp_sum(sdn) / C;
    for (int c = lane; c < C; c += 32) {
        const float xh = (ldf(x[c]) - m) * r;
        const T g = stf<T>(ldf(dx[c]) + (ldf(dy[c]) * w[c] - sd - xh * sdn) * r);
        dx[c] = g;
        if (dd) dd[(size_t)row * C + c] = drop.g(g, (size_t)row * C + c);
    }
}

// The same with 16-byte loads and stores, when C is a multiple of the pack and the rows are aligned.
template <class T>
__global__ void ln_bwd_vec_kernel(T *dinp, const T *dout, const T *inp, const float *w, const float *mean,
                                  const float *rstd, int N, int C, T *dd, DropIn drop)
{
    constexpr int V = Pack<T>::N;
    const int lane = threadIdx.x & 31, row = blockIdx.x * ROWS + (threadIdx.x >> 5), P = C / V;
    if (row >= N) return;
    const Pack<T> *x = (const Pack<T> *)(inp + (size_t)row * C), *dy = (const Pack<T> *)(dout + (size_t)row * C);
    Pack<T> *dx = (Pack<T> *)(dinp + (size_t)row * C);
    const float m = mean[row], r = rstd[row];
    float sd = 0.0f, sdn = 0.0f;
    for (int p = lane; p < P; p += 32) {
        const Pack<T> xv = x[p], gv = dy[p];
#pragma unroll
        for (int e = 0; e < V; e++) {
            const float dn = ldf(gv.v[e]) * w[p * V + e];
            sd += dn;
            sdn += dn * ((ldf(xv.v[e]) - m) * r);
        }
    }
    sd = warp_sum(sd) / C;
    sdn = warp_sum(sdn) / C;
    for (int p = lane; p < P; p += 32) {
        const Pack<T> xv = x[p], gv = dy[p];
        Pack<T> ov = dx[p];
#pragma unroll
        for (int e = 0; e < V; e++) {
            const float xh = (ldf(xv.v[e]) - m) * r;
            ov.v[e] = stf<T>(ldf(ov.v[e]) + (ldf(gv.v[e]) * w[p * V + e] - sd - xh * sdn) * r);
        }
        dx[p] = ov;
        if (dd) {
            Pack<T> dv;
#pragma unroll
            for (int e = 0; e < V; e++) dv.v[e] = drop.g(ov.v[e], (size_t)row * C + (size_t)p * V + e);
            ((Pack<T> *)(dd + (size_t)row * C))[p] = dv;
        }
    }
}

template <class T>
static void ln_bwd(mtk *k, void *dinp, float *dw, float *db, const void *dout, const void *inp, const float *w,
                   const float *mean, const float *rstd, int N, int C, void *ddrop, DropIn drop)
{
    if (C % Pack<T>::N == 0 && aligned16(dinp) && aligned16(dout) && aligned16(inp) && (!ddrop || aligned16(ddrop)))
        LAUNCH(ln_bwd_vec_kernel<T>, (N + ROWS - 1) / ROWS, THREADS, 0, launch_stream(k))((T *)dinp, (const T *)dout,
                                                                                   (const T *)inp, w, mean, rstd, N, C,
                                                                                   (T *)ddrop, drop);
    else
        LAUNCH(ln_bwd_kernel<T>, (N + ROWS - 1) / ROWS, THREADS, 0, launch_stream(k))((T *)dinp, (const T *)dout,
                                                                               (const T *)inp, w, mean, rstd, N, C,
                                                                               (T *)ddrop, drop);
    norm_wgrad(k, dw, db, dout, inp, mean, rstd, N, C);
}

void layernorm_bwd(mtk *k, void *dinp, float *dw, float *db, const void *dout, const void *inp, const float *w,
                   const float *mean, const float *rstd, int N, int C)
{
    if (N <= 0 || C <= 0) return;
    MTK_CU_DISPATCH(k, ln_bwd, k, dinp, dw, db, dout, inp, w, mean, rstd, N, C, nullptr, drop_in(nullptr));
    check(k, "layernorm_bwd");
}

// The same, with the dropout backward of the accumulated dinp written to ddrop in the rows' pass.
void layernorm_bwd_drop(mtk *k, void *dinp, float *dw, float *db, const void *dout, const void *inp, const float *w,
                        const float *mean, const float *rstd, int N, int C, void *ddrop, const mtk_dropout *drop)
{
    if (N <= 0 || C <= 0) return;
    MTK_CU_DISPATCH(k, ln_bwd, k, dinp, dw, db, dout, inp, w, mean, rstd, N, C, ddrop, drop_in(drop));
    check(k, "layernorm_bwd");
}

}  // namespace MTK_CU_NS
