// elementwise.cu: GeLU (tanh and erf forms) and its backward, add/acc/scale (and an fp32 acc), counter-based dropout,
// the FP8 emulation of delayed scaling (quantize-dequantize with the amax, the scale update; kernels.h, the
// cpu backend's kernels/cpu/fp8.c computes the same bits), and the two helpers the GEMM wrapper uses (a bias
// added to every row, column sums for dbias). The element-wise kernels move 16 bytes per load and store when
// every operand is 16-byte aligned, with a scalar loop for the tail (and for unaligned operands).
#include "cuda.h"

namespace MTK_CU_NS {

// out[i] = f(a[i], b[i], i) for i < n (b may be NULL: f sees 0).
template <class T, class F> __global__ void ew_kernel(T *out, const T *a, const T *b, size_t n, int vec, F f)
{
    const size_t tid = (size_t)blockIdx.x * blockDim.x + threadIdx.x, stride = (size_t)gridDim.x * blockDim.x;
    constexpr int P = Pack<T>::N;
    const size_t np = vec ? n / P : 0;
    for (size_t pk = tid; pk < np; pk += stride) {
        Pack<T> pa = reinterpret_cast<const Pack<T> *>(a)[pk], pb, po;
        if (b) pb = reinterpret_cast<const Pack<T> *>(b)[pk];
        for (int j = 0; j < P; j++) po.v[j] = stf<T>(f(ldf(pa.v[j]), b ? ldf(pb.v[j]) : 0.0f, pk * P + j));
        reinterpret_cast<Pack<T> *>(out)[pk] = po;
    }
    for (size_t i = np * P + tid; i < n; i += stride) out[i] = stf<T>(f(ldf(a[i]), b ? ldf(b[i]) : 0.0f, i));
}

template <class T, class F> static void ew(mtk *k, void *out, const void *a, const void *b, size_t n, F f)
{
    if (!n) return;
    const int vec = aligned16(out) && aligned16(a) && (!b || aligned16(b));
    const size_t work = vec ? n / Pack<T>::N + 1 : n;
    LAUNCH((ew_kernel<T, F>), blocks_for(work), THREADS, 0, launch_stream(k))((T *)out, (const T *)a, (const T *)b, n, vec, f);
}
#define EW(k, F, ...)                                                                                        \
    do {                                                                                                     \
        switch ((k)->act) {                                                                                  \
        case MTK_BF16: ew<bf16>(k, __VA_ARGS__); break;                                                      \
        case MTK_F16: ew<f16>(k, __VA_ARGS__); break;                                                        \
        default: ew<float>(k, __VA_ARGS__); break;                                                           \
        }                                                                                                    \
    } while (0)

// ---- GeLU ----
#define GELU_K 0.7978845608028654f   // sqrt(2/pi)
struct GeluF {
    int exact;
    __device__ float operator()(float x, float, size_t) const
    {
        if (exact) return 0.5f * x * (1.0f + erff(x * 0.7071067811865476f));
        return 0.5f * x * (1.0f + tanhf(GELU_K * (x + 0.044715f * x * x * x)));
    }
};
struct GeluB {   // a = x, b = dout
    int exact;
    __device__ float operator()(float x, float g, size_t) const
    {
        if (exact) return g * (0.5f * (1.0f + erff(x * 0.7071067811865476f)) + x * 0.3989422804014327f * expf(-0.5f * x * x));
        const float u = GELU_K * (x + 0.044715f * x * x * x), t = tanhf(u);
        const float du = GELU_K * (1.0f + 3.0f * 0.044715f * x * x);
        return g * (0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * du);
    }
};
void gelu_fwd(mtk *k, void *out, const void *inp, size_t n, int exact)
{
    EW(k, GeluF, out, inp, NULL, n, GeluF{exact});
    check(k, "gelu_fwd");
}
void gelu_bwd(mtk *k, void *dinp, const void *inp, const void *dout, size_t n, int exact)
{
    EW(k, GeluB, dinp, inp, dout, n, GeluB{exact});
    check(k, "gelu_bwd");
}

// ---- add, acc, scale ----
struct AddF {
    __device__ float operator()(float a, float b, size_t) const { return a + b; }
};
struct ScaleF {
    float s;
    __device__ float operator()(float a, float, size_t) const { return a * s; }
};
void add(mtk *k, void *out, const void *a, const void *b, size_t n)
{
    EW(k, AddF, out, a, b, n, AddF{});
    check(k, "add");
}
void acc(mtk *k, void *y, const void *x, size_t n)
{
    EW(k, AddF, y, y, x, n, AddF{});
    check(k, "acc");
}
void scale(mtk *k, void *x, float s, size_t n)
{
    EW(k, ScaleF, x, x, NULL, n, ScaleF{s});
    check(k, "scale");
}
void acc_f32(mtk *k, float *y, const float *x, size_t n)   // fp32 operands whatever the activation dtype
{
    ew<float>(k, y, y, x, n, AddF{});
    check(k, "acc_f32");
}

// ---- FP8 emulation (kernels.h, "FP8, emulated") ----
// v rounded to the FP8 format (emin: the exponent of its smallest normal, mb: mantissa bits, max: its
// largest finite value): nearest, ties to even, saturating at +-max (TE's __NV_SATFINITE casts); NaN stays
// NaN. |v| / quantum is exact with quantum = 2^(max(floor(log2 |v|), emin) - mb); rintf rounds it to an
// integer, ties to even; the product by the quantum is exact.
__device__ __forceinline__ float fp8_round(float v, int emin, int mb, float max)
{
    const float a = fabsf(v);
    if (!(a < max)) return a != a ? v : copysignf(max, v);   // NaN, or saturated
    const int e = (int)(__float_as_uint(a) >> 23) - 127;
    const int qe = (e < emin ? emin : e) - mb;
    return copysignf(ldexpf(rintf(ldexpf(a, -qe)), qe), v);
}
// The max of |x| (NaNs left out) goes to *amax by an atomic max of its bits: a max of values >= +0, the same
// bits in any order.
template <class T>
__global__ void fp8_qdq_kernel(T *y, const T *x, size_t n, int emin, int mb, float max, const float *scale, float *amax)
{
    __shared__ float buf[32];
    const size_t tid = (size_t)blockIdx.x * blockDim.x + threadIdx.x, stride = (size_t)gridDim.x * blockDim.x;
    const float s = *scale, inv = 1.0f / s;
    float m = 0.0f;
    for (size_t i = tid; i < n; i += stride) {
        const float v = ldf(x[i]), a = fabsf(v);
        m = a > m ? a : m;
        y[i] = stf<T>(fp8_round(v * s, emin, mb, max) * inv);
    }
    if (!amax) return;
    m = block_max(m, buf);
    if (threadIdx.x == 0 && m > 0.0f) atomicMax((unsigned int *)amax, __float_as_uint(m));
}
template <class T>
static void fp8_qdq_run(mtk *k, void *y, const void *x, size_t n, mtk_fp8 fmt, const float *scale, float *amax)
{
    const int emin = mtk_fp8_emin(fmt), mb = mtk_fp8_mbits(fmt);
    LAUNCH((fp8_qdq_kernel<T>), blocks_for(n), THREADS, 0, launch_stream(k))((T *)y, (const T *)x, n, emin, mb,
                                                                              mtk_fp8_max(fmt), scale, amax);
}
void fp8_qdq(mtk *k, void *y, const void *x, size_t n, mtk_fp8 fmt, const float *scale, float *amax)
{
    MTK_CU_DISPATCH(k, fp8_qdq_run, k, y, x, n, fmt, scale, amax);
    check(k, "fp8_qdq");
}
// One thread per tensor: its history column read, rolled and row 0 zeroed in order, then its scale.
__global__ void fp8_scale_update_kernel(float *history, float *scale, int S, int L, int algo_max, float scaled_max)
{
    for (int j = blockIdx.x * blockDim.x + threadIdx.x; j < S; j += gridDim.x * blockDim.x) {
        float *h = history + j;
        const float last = h[0];
        float amax = last;
        if (algo_max)
            for (int i = 1; i < L; i++) amax = fmaxf(amax, h[(size_t)i * S]);
        for (int i = 0; i + 1 < L; i++) h[(size_t)i * S] = h[(size_t)(i + 1) * S];
        h[(size_t)(L - 1) * S] = last;
        h[0] = 0.0f;
        if (amax > 0.0f && amax < INFINITY) scale[j] = scaled_max / amax;   // finite and > 0 (NaN fails both)
    }
}
void fp8_scale_update(mtk *k, float *history, float *scale, int S, int L, mtk_fp8 fmt, mtk_amax_algo algo, int margin)
{
    const float scaled_max = ldexpf(mtk_fp8_max(fmt), -margin);
    const int algo_max = algo == MTK_AMAX_MAX;
    LAUNCH(fp8_scale_update_kernel, blocks_for((size_t)S), THREADS, 0, launch_stream(k))(history, scale, S, L, algo_max,
                                                                                         scaled_max);
    check(k, "fp8_scale_update");
}

// ---- dropout: element i is kept iff drop_keep(seed, offset + i, p), kept values scaled by 1/(1-p) ----
struct DropF {
    uint64_t seed, offset;
    float p, s;
    __device__ float operator()(float a, float, size_t i) const { return drop_keep(seed, offset + i, p) ? a * s : 0.0f; }
};
static void dropout(mtk *k, void *out, const void *inp, size_t n, const mtk_dropout *d, const char *what)
{
    if (!d || d->p == 0.0f) {
        copy(k, out, inp, n * mtk_dtype_size(k->act));
        return;
    }
    EW(k, DropF, out, inp, NULL, n, DropF{d->seed, d->offset, d->p, 1.0f / (1.0f - d->p)});
    check(k, what);
}
void dropout_fwd(mtk *k, void *out, const void *inp, size_t n, const mtk_dropout *d) { dropout(k, out, inp, n, d, "dropout_fwd"); }
void dropout_bwd(mtk *k, void *dinp, const void *dout, size_t n, const mtk_dropout *d) { dropout(k, dinp, dout, n, d, "dropout_bwd"); }

// ---- GEMM helpers ----
template <class T> __global__ void bias_rows_kernel(T *out, const float *bias, size_t n, int OC)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        out[i] = stf<T>(ldf(out[i]) + bias[i % OC]);
}
void bias_rows(mtk *k, void *out, mtk_dtype dt, const float *bias, int N, int OC)
{
    const size_t n = (size_t)N * OC;
    if (!n) return;
    if (dt == MTK_F32) LAUNCH(bias_rows_kernel<float>, blocks_for(n), THREADS, 0, launch_stream(k))((float *)out, bias, n, OC);
    else if (dt == MTK_BF16) LAUNCH(bias_rows_kernel<bf16>, blocks_for(n), THREADS, 0, launch_stream(k))((bf16 *)out, bias, n, OC);
    else LAUNCH(bias_rows_kernel<f16>, blocks_for(n), THREADS, 0, launch_stream(k))((f16 *)out, bias, n, OC);
}

void bias_add(mtk *k, void *x, const float *bias, int N, int C)
{
    bias_rows(k, x, k->act, bias, N, C);
    check(k, "bias_add");
}

// dst[c] += sum_n x[n, c], deterministic: block (32, 8) sums a 32-column strip of one chunk of rows (each
// of the 8 row lanes in row order, then the lanes in order); a second kernel adds the chunks in order.
int colsum_chunks(int N, int C)
{
    int r = (N + 255) / 256, cap = COLSUM_WS_FLOATS / (C > 0 ? C : 1);
    if (r > 64) r = 64;
    if (r > cap) r = cap;
    return r < 1 ? 1 : r;
}

template <class T> __global__ void colsum_part_kernel(float *part, const T *x, int N, int C)
{
    __shared__ float sh[8][33];
    const int c = blockIdx.x * 32 + threadIdx.x, R = gridDim.y, per = (N + R - 1) / R;
    const int n0 = blockIdx.y * per, n1 = n0 + per < N ? n0 + per : N;
    float s = 0.0f;
    if (c < C)
        for (int n = n0 + threadIdx.y; n < n1; n += 8) s += ldf(x[(size_t)n * C + c]);
    sh[threadIdx.y][threadIdx.x] = s;
    __syncthreads();
    if (threadIdx.y == 0 && c < C) {
        float t = 0.0f;
        for (int y = 0; y < 8; y++) t += sh[y][threadIdx.x];
        part[(size_t)blockIdx.y * C + c] = t;
    }
}

__global__ void colsum_finish_kernel(float *dst, const float *part, int R, int C)
{
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    float s = 0.0f;
    for (int r = 0; r < R; r++) s += part[(size_t)r * C + c];
    dst[c] += s;
}
void colsum_finish(mtk *k, float *dst, const float *part, int R, int C)
{
    LAUNCH(colsum_finish_kernel, (C + THREADS - 1) / THREADS, THREADS, 0, launch_stream(k))(dst, part, R, C);
}

template <class T> static void colsum_t(mtk *k, float *dst, const void *x, int N, int C)
{
    const int R = colsum_chunks(N, C);
    float *part = (float *)mtk_ws_take(k, (size_t)R * C * sizeof(float));
    if (!part) return;
    LAUNCH(colsum_part_kernel<T>, dim3((C + 31) / 32, R), dim3(32, 8), 0, launch_stream(k))(part, (const T *)x, N, C);
    colsum_finish(k, dst, part, R, C);
}
void colsum_acc(mtk *k, float *dst, const void *x, int N, int C)
{
    if (C > 0 && N > 0) MTK_CU_DISPATCH(k, colsum_t, k, dst, x, N, C);
}

}  // namespace MTK_CU_NS
