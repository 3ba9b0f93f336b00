// swiglu.cu: SwiGLU (Megatron --swiglu) and its backward: a thread per output feature of inp [N, 2F],
// x1 the first F features of a row and x2 the last F. silu(a) = a s with s = 1 / (1 + e^-a),
// silu'(a) = s (1 + a (1 - s)).
#include "cuda.h"

namespace MTK_CU_NS {

template <class T> __global__ void swiglu_fwd_kernel(T *out, const T *inp, int F, size_t n)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        const size_t r = i / F, c = i % F;
        const float a = ldf(inp[2 * r * F + c]), b = ldf(inp[2 * r * F + F + c]);
        out[i] = stf<T>(a / (1.0f + expf(-a)) * b);
    }
}

template <class T> __global__ void swiglu_bwd_kernel(T *dinp, const T *inp, const T *dout, int F, size_t n)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        const size_t r = i / F, c = i % F, i1 = 2 * r * F + c, i2 = i1 + F;
        const float a = ldf(inp[i1]), b = ldf(inp[i2]), g = ldf(dout[i]), s = 1.0f / (1.0f + expf(-a));
        dinp[i1] = stf<T>(g * b * (s * (1.0f + a * (1.0f - s))));
        dinp[i2] = stf<T>(g * (a * s));
    }
}

template <class T> static void sw_fwd(mtk *k, void *out, const void *inp, int N, int F)
{
    const size_t n = (size_t)N * F;
    LAUNCH(swiglu_fwd_kernel<T>, blocks_for(n), THREADS, 0, launch_stream(k))((T *)out, (const T *)inp, F, n);
}
template <class T> static void sw_bwd(mtk *k, void *dinp, const void *inp, const void *dout, int N, int F)
{
    const size_t n = (size_t)N * F;
    LAUNCH(swiglu_bwd_kernel<T>, blocks_for(n), THREADS, 0, launch_stream(k))((T *)dinp, (const T *)inp, (const T *)dout, F, n);
}

void swiglu_fwd(mtk *k, void *out, const void *inp, int N, int F)
{
    if (N <= 0 || F <= 0) return;
    MTK_CU_DISPATCH(k, sw_fwd, k, out, inp, N, F);
    check(k, "swiglu_fwd");
}
void swiglu_bwd(mtk *k, void *dinp, const void *inp, const void *dout, int N, int F)
{
    if (N <= 0 || F <= 0) return;
    MTK_CU_DISPATCH(k, sw_bwd, k, dinp, inp, dout, N, F);
    check(k, "swiglu_bwd");
}

}  // namespace MTK_CU_NS
