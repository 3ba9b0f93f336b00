// rope.cu: rotary position embeddings on the queries and keys of a packed qkv, in place (kernels.h,
// mtk_rope_fwd): a thread per (token, rotated head, pair i < rot_dim / 2), rotating x[i], x[i + half].
// As in the cpu backend, inv_freq[i] is the float nearest 1 / base^(2i/rot_dim) (computed in double),
// the angle pos * inv_freq an fp32 product, its cos and sin fp32.
#include "cuda.h"

namespace MTK_CU_NS {

template <class T>
__global__ void rope_kernel(T *qkv, int T_, int NG, int rep, int HS, int half, float base, int pos0, float sgn, size_t n)
{
    for (size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x; idx < n; idx += (size_t)gridDim.x * blockDim.x) {
        const int i = (int)(idx % half);
        const size_t hr = idx / half;   // (token, group, rotated head j <= rep)
        const int j = (int)(hr % (rep + 1)), g = (int)(hr / (rep + 1) % NG);
        const size_t tok = hr / (rep + 1) / NG;
        const float f = (float)(1.0 / pow((double)base, (double)(2 * i) / (2 * half)));
        const float a = (float)(pos0 + (int)(tok % T_)) * f, c = cosf(a), s = sgn * sinf(a);
        T *h = qkv + (tok * NG + g) * (size_t)(rep + 2) * HS + (size_t)j * HS;
        const float x1 = ldf(h[i]), x2 = ldf(h[i + half]);
        h[i] = stf<T>(x1 * c - x2 * s);
        h[i + half] = stf<T>(x2 * c + x1 * s);
    }
}

template <class T>
static void rope_t(mtk *k, void *qkv, int B, int T_, int NH, int NG, int HS, int rot_dim, float base, int pos0,
                   int inverse)
{
    const int rep = NH / NG, half = rot_dim / 2;
    const size_t n = (size_t)B * T_ * NG * (rep + 1) * half;
    LAUNCH(rope_kernel<T>, blocks_for(n), THREADS, 0, launch_stream(k))((T *)qkv, T_, NG, rep, HS, half, base, pos0,
                                                                 inverse ? -1.0f : 1.0f, n);
}

void rope(mtk *k, void *qkv, int B, int T, int NH, int NG, int HS, int rot_dim, float base, int pos0, int inverse)
{
    if (B <= 0 || T <= 0 || rot_dim <= 0) return;
    MTK_CU_DISPATCH(k, rope_t, k, qkv, B, T, NH, NG, HS, rot_dim, base, pos0, inverse);
    check(k, "rope");
}

}  // namespace MTK_CU_NS
