// moe_router.cu: the router's fp32 logits and their backward, and the shared experts' sigmoid gate.
// The logits are gemm.cu's product of the activation-dtype operands into fp32 (cuBLASLt, fp32 compute).
// The backward multiplies the fp32 dlogits by an activation-dtype operand: with fp32 activations through
// gemm.cu; with 16-bit ones (cuBLASLt multiplies operands of one type, and rounding dlogits would lose
// what the fp32 router keeps) a tiled kernel that widens each operand as it loads it, every output summed
// by one thread in a fixed order.
#include "cuda.h"

namespace MTK_CU_NS {

enum { TM = 64, TN = 64, TK = 16 };   // a block's tile: 64 x 64 outputs, 16 of the summed dimension at a time

__device__ __forceinline__ void put(float *c, float v, int acc) { *c = acc ? *c + v : v; }
template <class T> __device__ __forceinline__ void put(T *c, float v, int) { *c = stf<T>(ldf(*c) + v); }

// C[M, N] (ldc) = sum over k of A(m, k) B(k, n), A fp32 at A[m sam + k sak], B at B[k sbk + n sbn]; an fp32 C
// is assigned or added to (acc), a 16-bit one always added to. 256 threads, each 4 x 4 outputs of the tile
// (rows ty + 16 i, columns tx + 16 j), the sum over k in order.
template <class TB, class TC>
__global__ void __launch_bounds__(256) mixed_gemm_kernel(TC *C, int ldc, const float *A, long long sam, long long sak,
                                                         const TB *B, long long sbk, long long sbn, int M, int N, int K,
                                                         int acc)
{
    __shared__ float As[TK][TM + 1], Bs[TK][TN + 1];
    const int tid = threadIdx.x, tx = tid % 16, ty = tid / 16;
    const int m0 = blockIdx.y * TM, n0 = blockIdx.x * TN;
    float s[4][4] = {};
    for (int k0 = 0; k0 < K; k0 += TK) {
        for (int i = tid; i < TK * TM; i += 256) {
            const int kk = i / TM, m = m0 + i % TM, k = k0 + kk;
            As[kk][i % TM] = m < M && k < K ? A[m * sam + k * sak] : 0.0f;
        }
        for (int i = tid; i < TK * TN; i += 256) {
            const int kk = i / TN, n = n0 + i % TN, k = k0 + kk;
            Bs[kk][i % TN] = n < N && k < K ? ldf(B[k * sbk + n * sbn]) : 0.0f;
        }
        __syncthreads();
        const int kn = K - k0 < TK ? K - k0 : TK;
        for (int kk = 0; kk < kn; kk++) {
            float a[4], b[4];
#pragma unroll
            for (int i = 0; i < 4; i++) a[i] = As[kk][ty + 16 * i], b[i] = Bs[kk][tx + 16 * i];
#pragma unroll
            for (int i = 0; i < 4; i++)
#pragma unroll
                for (int j = 0; j < 4; j++) s[i][j] += a[i] * b[j];
        }
        __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int j = 0; j < 4; j++) {
            const int m = m0 + ty + 16 * i, n = n0 + tx + 16 * j;
            if (m < M && n < N) put(C + (size_t)m * ldc + n, s[i][j], acc);
        }
}

template <class TB, class TC>
static void mixed_gemm(mtk *k, TC *C, int ldc, const float *A, long long sam, long long sak, const TB *B, long long sbk,
                       long long sbn, int M, int N, int K, int acc)
{
    const dim3 grid((N + TN - 1) / TN, (M + TM - 1) / TM);
    LAUNCH((mixed_gemm_kernel<TB, TC>), grid, 256, 0, launch_stream(k))(C, ldc, A, sam, sak, B, sbk, sbn, M, N, K, acc);
}

void router_fwd(mtk *k, float *logits, const void *inp, const void *w, int N, int C, int E)
{
    gemm(k, false, true, N, E, C, inp, C, w, C, logits, E, MTK_F32, 0.0f, NULL);
    check(k, "router_fwd");
}

// dw [E, C] = dlogits^T inp (A(e, n) = dlogits[n E + e]); dinp [N, C] += dlogits w (A(n, e) = dlogits[n E + e]).
template <class T>
static void rbwd(mtk *k, void *dinp, float *dw, const float *dlogits, const void *inp, const void *w, int N, int C,
                 int E, int acc)
{
    if (dw) mixed_gemm(k, dw, C, dlogits, 1, E, (const T *)inp, C, 1, E, C, N, acc);
    if (dinp) mixed_gemm(k, (T *)dinp, C, dlogits, E, 1, (const T *)w, C, 1, N, C, E, 1);
}

void router_bwd(mtk *k, void *dinp, float *dw, const float *dlogits, const void *inp, const void *w, int N, int C, int E,
                int acc)
{
    if (N <= 0 || C <= 0 || E <= 0) return;
    if (k->act == MTK_F32) {
        if (dw) gemm(k, true, false, E, C, N, dlogits, E, inp, C, dw, C, MTK_F32, acc ? 1.0f : 0.0f, NULL);
        if (dinp) gemm(k, false, false, N, C, E, dlogits, E, w, C, dinp, C, MTK_F32, 1.0f, NULL);
    } else if (k->act == MTK_BF16)
        rbwd<bf16>(k, dinp, dw, dlogits, inp, w, N, C, E, acc);
    else
        rbwd<f16>(k, dinp, dw, dlogits, inp, w, N, C, E, acc);
    check(k, "router_bwd");
}

__device__ __forceinline__ float sigmoidf(float x) { return 1.0f / (1.0f + expf(-x)); }

// out[n] += x[n] s(logit[n]): a thread per element.
template <class T> __global__ void gate_fwd_kernel(T *out, const T *x, const float *logit, int C, size_t n)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        out[i] = stf<T>(ldf(out[i]) + ldf(x[i]) * sigmoidf(logit[i / C]));
}

// dx = dout s; dlogit = (dout . x) s (1 - s): a block per row, the dot product a block sum.
template <class T>
__global__ void gate_bwd_kernel(T *dx, float *dlogit, const T *dout, const T *x, const float *logit, int C)
{
    __shared__ float buf[32];
    const size_t r = blockIdx.x, o = r * C;
    const float s = sigmoidf(logit[r]);
    float dot = 0.0f;
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        const float g = ldf(dout[o + c]);
        dot += g * ldf(x[o + c]);
        dx[o + c] = stf<T>(g * s);
    }
    dot = block_sum(dot, buf);
    if (threadIdx.x == 0) dlogit[r] = dot * s * (1.0f - s);
}

template <class T> static void gfwd(mtk *k, void *out, const void *x, const float *logit, int N, int C)
{
    const size_t n = (size_t)N * C;
    LAUNCH(gate_fwd_kernel<T>, blocks_for(n), THREADS, 0, launch_stream(k))((T *)out, (const T *)x, logit, C, n);
}
template <class T>
static void gbwd(mtk *k, void *dx, float *dlogit, const void *dout, const void *x, const float *logit, int N, int C)
{
    LAUNCH(gate_bwd_kernel<T>, N, THREADS, 0, launch_stream(k))((T *)dx, dlogit, (const T *)dout, (const T *)x, logit, C);
}

void sigmoid_gate_fwd(mtk *k, void *out, const void *x, const float *logit, int N, int C)
{
    if (N <= 0 || C <= 0) return;
    MTK_CU_DISPATCH(k, gfwd, k, out, x, logit, N, C);
    check(k, "sigmoid_gate_fwd");
}
void sigmoid_gate_bwd(mtk *k, void *dx, float *dlogit, const void *dout, const void *x, const float *logit, int N, int C)
{
    if (N <= 0) return;
    MTK_CU_DISPATCH(k, gbwd, k, dx, dlogit, dout, x, logit, N, C);
    check(k, "sigmoid_gate_bwd");
}

}  // namespace MTK_CU_NS
