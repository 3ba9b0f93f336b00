// norm_wgrad.cu: the weight gradients of the LayerNorm and RMSNorm backward (dw += sum_n dy xhat, and
// LayerNorm's db += sum_n dy): per 32-channel strip and fixed chunk of rows (as colsum_acc), then the
// chunks in order, so the sums are the same on every run.
#include "cuda.h"

namespace MTK_CU_NS {

// mean null: RMSNorm, xhat = x rstd, no pb
template <class T>
__global__ void norm_wgrad_kernel(float *pw, float *pb, const T *dout, const T *inp, const float *mean,
                                  const float *rstd, int N, int C)
{
    __shared__ float sw[8][33], sb[8][33];
    const int c = blockIdx.x * 32 + threadIdx.x, R = gridDim.y, per = (N + R - 1) / R;
    const int n0 = blockIdx.y * per, n1 = n0 + per < N ? n0 + per : N;
    float aw = 0.0f, ab = 0.0f;
    if (c < C && mean)
        for (int n = n0 + threadIdx.y; n < n1; n += 8) {
            const float dy = ldf(dout[(size_t)n * C + c]);
            aw += dy * ((ldf(inp[(size_t)n * C + c]) - mean[n]) * rstd[n]);
            ab += dy;
        }
    else if (c < C)
        for (int n = n0 + threadIdx.y; n < n1; n += 8)
            aw += ldf(dout[(size_t)n * C + c]) * (ldf(inp[(size_t)n * C + c]) * rstd[n]);
    sw[threadIdx.y][threadIdx.x] = aw;
    sb[threadIdx.y][threadIdx.x] = ab;
    __syncthreads();
    if (threadIdx.y == 0 && c < C) {
        float tw = 0.0f, tb = 0.0f;
        for (int y = 0; y < 8; y++) tw += sw[y][threadIdx.x], tb += sb[y][threadIdx.x];
        pw[(size_t)blockIdx.y * C + c] = tw;
        if (pb) pb[(size_t)blockIdx.y * C + c] = tb;
    }
}

template <class T>
static void norm_wgrad_t(mtk *k, float *dw, float *db, const void *dout, const void *inp, const float *mean,
                         const float *rstd, int N, int C)
{
    const int R = colsum_chunks(N, C);
    float *pw = (float *)mtk_ws_take(k, (size_t)R * C * sizeof(float));
    float *pb = pw && mean ? (float *)mtk_ws_take(k, (size_t)R * C * sizeof(float)) : nullptr;
    if (!pw || (mean && !pb)) return;
    LAUNCH(norm_wgrad_kernel<T>, dim3((C + 31) / 32, R), dim3(32, 8), 0, launch_stream(k))(pw, pb, (const T *)dout,
                                                                                   (const T *)inp, mean, rstd, N, C);
    colsum_finish(k, dw, pw, R, C);
    if (mean) colsum_finish(k, db, pb, R, C);
}

void norm_wgrad(mtk *k, float *dw, float *db, const void *dout, const void *inp, const float *mean, const float *rstd,
                int N, int C)
{
    MTK_CU_DISPATCH(k, norm_wgrad_t, k, dw, db, dout, inp, mean, rstd, N, C);
}

}  // namespace MTK_CU_NS
