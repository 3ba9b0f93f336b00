// gemm.cu: the project's one wrapper around matrix products, and matmul_fwd/bwd on top of it.
// CUDA build: cuBLASLt (fp32 compute, A/B in the activation dtype, C in the activation dtype or fp32),
// the bias fused as an epilogue when cuBLASLt accepts an fp32 bias for that output (otherwise a bias
// kernel after the product, decided once). Simulator build: the operands are widened to fp32 and the
// product is the CPU's BLAS sgemm, as the cpu backend computes it; bias and rounding as on the GPU.
#include "cuda.h"
#ifdef SIMT_SIM
#include <cblas.h>
#include <vector>
#else
#include <cublasLt.h>
#endif

namespace MTK_CU_NS {

#ifdef SIMT_SIM

int gemm_open(mtk *k, mt_err *e)
{
    (void)k, (void)e;
    openblas_set_num_threads(1);   // the products run on the launching thread, as kernels would on a stream
    return 0;
}
void gemm_close(mtk *k) { (void)k; }

// rows x cols of a row-major matrix with leading dimension ld, widened to fp32 (same ld).
static const float *widen(std::vector<float> &buf, const void *p, mtk_dtype t, int rows, int cols, int ld)
{
    if (t == MTK_F32) return (const float *)p;
    const size_t n = rows > 0 ? (size_t)(rows - 1) * ld + cols : 0;
    buf.resize(n + 1);
    for (size_t i = 0; i < n; i++)
        buf[i] = t == MTK_BF16 ? __bfloat162float(((const bf16 *)p)[i]) : __half2float(((const f16 *)p)[i]);
    return buf.data();
}

void gemm(mtk *k, bool ta, bool tb, int M, int N, int K, const void *A, int lda, const void *B, int ldb, void *C,
          int ldc, mtk_dtype cd, float beta, const float *bias)
{
    if (M <= 0 || N <= 0) return;
    thread_local std::vector<float> ba, bb, bc;
    const float *fa = widen(ba, A, k->act, ta ? K : M, ta ? M : K, lda);
    const float *fb = widen(bb, B, k->act, tb ? N : K, tb ? K : N, ldb);
    float *fc = (float *)C;
    if (cd != MTK_F32) {
        bc.assign((size_t)(M - 1) * ldc + N, 0.0f);
        if (beta != 0.0f) widen(bc, C, cd, M, N, ldc);
        fc = bc.data();
    }
    if (K > 0)
        cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, M, N, K, 1.0f, fa,
                    lda, fb, ldb, beta, fc, ldc);
    else
        for (int m = 0; m < M; m++)
            for (int n = 0; n < N; n++) fc[(size_t)m * ldc + n] *= beta;
    for (int m = 0; m < M; m++)
        for (int n = 0; n < N; n++) {
            float v = fc[(size_t)m * ldc + n] + (bias ? bias[n] : 0.0f);
            size_t i = (size_t)m * ldc + n;
            if (cd == MTK_F32) ((float *)C)[i] = v;
            else if (cd == MTK_BF16) ((bf16 *)C)[i] = __float2bfloat16_rn(v);
            else ((f16 *)C)[i] = __float2half_rn(v);
        }
}

#else

enum { LT_WS = 32 << 20 };

int gemm_open(mtk *k, mt_err *e)
{
    cublasLtHandle_t h;
    if (cublasLtCreate(&h) != CUBLAS_STATUS_SUCCESS) return mtk_err_set(e, "cuda: cannot initialise cuBLASLt");
    Cu *c = cu(k);
    c->lt = h;
    if (cudaMalloc(&c->lt_ws, LT_WS) != cudaSuccess) {
        cudaGetLastError();
        cublasLtDestroy(h);
        return mtk_err_set(e, "cuda: cannot allocate the cuBLASLt workspace");
    }
    c->lt_ws_bytes = LT_WS;
    return 0;
}

void gemm_close(mtk *k)
{
    Cu *c = cu(k);
    if (c->lt) cublasLtDestroy((cublasLtHandle_t)c->lt);
    if (c->lt_ws) cudaFree(c->lt_ws);
    c->lt = c->lt_ws = NULL;
}

static cudaDataType_t cuda_type(mtk_dtype t) { return t == MTK_F32 ? CUDA_R_32F : t == MTK_BF16 ? CUDA_R_16BF : CUDA_R_16F; }
static uint32_t alignment(const void *p)
{
    uint32_t a = 256;
    while (a > 1 && ((uintptr_t)p & (a - 1))) a >>= 1;
    return a;
}

// One cuBLASLt product in column-major terms: D[N,M] = op(B)[N,K] op(A)[K,M] (+ bias over rows of D).
static int lt_matmul(mtk *k, bool ta, bool tb, int M, int N, int K, const void *A, int lda, const void *B, int ldb,
                     void *C, int ldc, mtk_dtype cd, float beta, const float *bias)
{
    Cu *c = cu(k);
    const cudaDataType_t ab = cuda_type(k->act), ct = cuda_type(cd);
    cublasLtMatmulDesc_t op = NULL;
    cublasLtMatrixLayout_t la = NULL, lb = NULL, lc = NULL;
    cublasLtMatmulPreference_t pref = NULL;
    int ok = 0;
    cublasOperation_t opa = tb ? CUBLAS_OP_T : CUBLAS_OP_N, opb = ta ? CUBLAS_OP_T : CUBLAS_OP_N;
    size_t ws = c->lt_ws_bytes;
    uint32_t al[4] = {alignment(B), alignment(A), alignment(C), alignment(C)};
    cublasLtMatmulHeuristicResult_t res;
    int found = 0;
    const float one = 1.0f;
    if (cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F) != CUBLAS_STATUS_SUCCESS) goto done;
    cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof opa);
    cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof opb);
    if (bias) {
        cublasLtEpilogue_t ep = CUBLASLT_EPILOGUE_BIAS;
        cudaDataType_t bt = CUDA_R_32F;
        cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &ep, sizeof ep);
        cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias);
        if (cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof bt) != CUBLAS_STATUS_SUCCESS)
            goto done;
    }
    if (cublasLtMatrixLayoutCreate(&la, ab, tb ? K : N, tb ? N : K, ldb) != CUBLAS_STATUS_SUCCESS) goto done;
    if (cublasLtMatrixLayoutCreate(&lb, ab, ta ? M : K, ta ? K : M, lda) != CUBLAS_STATUS_SUCCESS) goto done;
    if (cublasLtMatrixLayoutCreate(&lc, ct, N, M, ldc) != CUBLAS_STATUS_SUCCESS) goto done;
    if (cublasLtMatmulPreferenceCreate(&pref) != CUBLAS_STATUS_SUCCESS) goto done;
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws);
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al[0], sizeof al[0]);
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al[1], sizeof al[1]);
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al[2], sizeof al[2]);
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al[3], sizeof al[3]);
    if (cublasLtMatmulAlgoGetHeuristic((cublasLtHandle_t)c->lt, op, la, lb, lc, lc, pref, 1, &res, &found) !=
            CUBLAS_STATUS_SUCCESS || found == 0)
        goto done;
    ok = cublasLtMatmul((cublasLtHandle_t)c->lt, op, &one, B, la, A, lb, &beta, C, lc, C, lc, &res.algo, c->lt_ws, ws,
                        stream(k)) == CUBLAS_STATUS_SUCCESS;
done:
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    if (lc) cublasLtMatrixLayoutDestroy(lc);
    if (lb) cublasLtMatrixLayoutDestroy(lb);
    if (la) cublasLtMatrixLayoutDestroy(la);
    if (op) cublasLtMatmulDescDestroy(op);
    return ok;
}

void gemm(mtk *k, bool ta, bool tb, int M, int N, int K, const void *A, int lda, const void *B, int ldb, void *C,
          int ldc, mtk_dtype cd, float beta, const float *bias)
{
    if (M <= 0 || N <= 0) return;
    if (K <= 0) {   // nothing to multiply: C = beta C (+ bias)
        if (beta == 0.0f) cudaMemsetAsync(C, 0, (size_t)M * ldc * mtk_dtype_size(cd), stream(k));
        else if (beta != 1.0f) mtk_fail(k, "gemm: K = 0 with beta %g", beta);
        if (bias) bias_rows(k, C, cd, bias, M, N);
        return;
    }
    Cu *c = cu(k);
    if (bias && !c->bias_epilogue_off) {
        if (lt_matmul(k, ta, tb, M, N, K, A, lda, B, ldb, C, ldc, cd, beta, bias)) return;
        c->bias_epilogue_off = 1;   // this cuBLASLt refuses an fp32 bias here: a kernel adds it from now on
    }
    if (!lt_matmul(k, ta, tb, M, N, K, A, lda, B, ldb, C, ldc, cd, beta, NULL)) {
        mtk_fail(k, "gemm: cuBLASLt cannot multiply %dx%d by %dx%d (%s)", M, K, K, N, mtk_dtype_name(k->act));
        return;
    }
    if (bias) bias_rows(k, C, cd, bias, M, N);
}

#endif

void matmul_fwd(mtk *k, void *out, const void *inp, const void *w, const float *bias, int N, int C, int OC)
{
    gemm(k, false, true, N, OC, C, inp, C, w, C, out, OC, k->act, 0.0f, bias);
    check(k, "matmul_fwd");
}

void matmul_bwd(mtk *k, void *dinp, float *dw, float *dbias, const void *dout, const void *inp, const void *w, int N,
                int C, int OC)
{
    if (dinp) gemm(k, false, false, N, C, OC, dout, OC, w, C, dinp, C, k->act, 0.0f, NULL);
    if (dw) gemm(k, true, false, OC, C, N, dout, OC, inp, C, dw, C, MTK_F32, 1.0f, NULL);
    if (dbias) colsum_acc(k, dbias, dout, N, OC);
    check(k, "matmul_bwd");
}

}  // namespace MTK_CU_NS
