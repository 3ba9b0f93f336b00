// gemm.cu: the project's one wrapper around matrix products, and matmul_fwd/bwd on top of it.
// CUDA build: cuBLASLt (fp32 compute, A/B in the activation dtype, C in the activation dtype or fp32),
// the bias fused as an epilogue when cuBLASLt accepts an fp32 bias for that output (otherwise a bias
// kernel after the product, decided once). Simulator build: the operands are widened to fp32 and the
// product is the CPU's BLAS sgemm, as the cpu backend computes it; bias and rounding as on the GPU.
// Products of many shapes at once (gemm_grouped, the experts' products): one cuBLAS grouped call
// (cublasGemmGroupedBatchedEx) where cuBLAS has it for the types, else one product per shape. The
// simulator build runs the grouped call's arguments as cuBLAS would, each problem through its gemm().
#include "cuda.h"
#include <stdlib.h>
#include <string.h>
#ifdef SIMT_SIM
#include <cblas.h>
#include <vector>
#else
#include <cublasLt.h>
#include <cublas_v2.h>
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
          int ldc, mtk_dtype cd, float beta, const float *bias, void *gelu_out)
{
    if (gelu_out) {   // not fused here (matmul_gelu_fwd never asks): the product, then the GeLU kernel
        mtk_fail(k, "gemm: no GeLU epilogue in the simulator build");
        return;
    }
    if (M <= 0 || N <= 0) return;
    k->stats.launches++;   // one product, as cuBLASLt's one launch
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

enum BlasOp { OP_N, OP_T };

// What cuBLAS's grouped call computes from the same arguments (column-major problems, the pointer arrays
// read from device memory), and its refusals: each problem through gemm() (which has no alpha: 1), the
// types cuBLAS supports (A, B and C of one type), its leading-dimension rule. Counts as one launch.
static bool blas_grouped(mtk *k, const BlasOp *opa, const BlasOp *opb, const int *m, const int *n, const int *kk,
                         const float *alpha, const void *const *A, mtk_dtype ab, const int *lda, const void *const *B,
                         const int *ldb, const float *beta, void *const *C, mtk_dtype ct, const int *ldc, int groups,
                         const int *gsize)
{
    if (ab != ct || ab != (mtk_dtype)k->act) return false;
    const uint64_t launches = k->stats.launches;
    for (int g = 0, p = 0; g < groups; g++) {
        const int ar = opa[g] == OP_N ? m[g] : kk[g], br = opb[g] == OP_N ? kk[g] : n[g];
        if (m[g] < 0 || n[g] < 0 || kk[g] < 0 || lda[g] < (ar > 1 ? ar : 1) || ldb[g] < (br > 1 ? br : 1) ||
            ldc[g] < (m[g] > 1 ? m[g] : 1) || alpha[g] != 1.0f)
            return false;
        // column-major C[m, n] = op(A) op(B) is row-major C[n, m] = op(B)^T op(A)^T
        for (int j = 0; j < gsize[g]; j++, p++)
            gemm(k, opb[g] == OP_T, opa[g] == OP_T, n[g], m[g], kk[g], B[p], ldb[g], A[p], lda[g], C[p], ldc[g], ct,
                 beta[g], NULL);
    }
    k->stats.launches = launches + 1;
    return true;
}

#else

enum { LT_WS = 32 << 20, PLANS = 128 };

// A product's cuBLASLt descriptors and chosen algorithm, kept by shape: a training step repeats the same
// few dozen shapes, and the heuristic query costs more than launching the product.
struct Plan {
    int used, ok;
    const char *why;   // !ok: the step cuBLASLt refused
    bool ta, tb, bias, gelu, bias16;
    int M, N, K, lda, ldb, ldc, act, cd;
    uint32_t al[4];
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t la, lb, lc;
    cublasLtMatmulAlgo_t algo;
};

static void plan_clear(Plan *p)
{
    if (p->lc) cublasLtMatrixLayoutDestroy(p->lc);
    if (p->lb) cublasLtMatrixLayoutDestroy(p->lb);
    if (p->la) cublasLtMatrixLayoutDestroy(p->la);
    if (p->op) cublasLtMatmulDescDestroy(p->op);
    memset(p, 0, sizeof *p);
}

int gemm_open(mtk *k, mt_err *e)
{
    cublasLtHandle_t h;
    if (cublasLtCreate(&h) != CUBLAS_STATUS_SUCCESS) return mtk_err_set(e, "cuda: cannot initialise cuBLASLt");
    Cu *c = cu(k);
    c->lt = h;
    c->plans = calloc(PLANS, sizeof(Plan));
    if (!c->plans || cudaMalloc(&c->lt_ws, LT_WS) != cudaSuccess) {
        cudaGetLastError();
        free(c->plans);
        c->plans = NULL;
        cublasLtDestroy(h);
        c->lt = NULL;
        return mtk_err_set(e, "cuda: cannot allocate the cuBLASLt workspace");
    }
    c->lt_ws_bytes = LT_WS;
    cublasHandle_t b;   // the grouped products' (without it they go one by one)
    c->blas = cublasCreate(&b) == CUBLAS_STATUS_SUCCESS ? (void *)b : NULL;
    cudaGetLastError();
    return 0;
}

void gemm_close(mtk *k)
{
    Cu *c = cu(k);
    Plan *pl = (Plan *)c->plans;
    for (int i = 0; pl && i < PLANS; i++) plan_clear(&pl[i]);
    free(c->plans);
    for (int q = 0; q < MTK_QUEUES; q++) {
        if (c->bias16[q]) cudaFree(c->bias16[q]);
        c->bias16[q] = NULL, c->bias16_cap[q] = 0;
    }
    if (c->blas) cublasDestroy((cublasHandle_t)c->blas);
    if (c->lt) cublasLtDestroy((cublasLtHandle_t)c->lt);
    if (c->lt_ws) cudaFree(c->lt_ws);
    c->plans = c->lt = c->lt_ws = c->blas = NULL;
}

static cudaDataType_t cuda_type(mtk_dtype t) { return t == MTK_F32 ? CUDA_R_32F : t == MTK_BF16 ? CUDA_R_16BF : CUDA_R_16F; }
static uint32_t alignment(const void *p)
{
    uint32_t a = 256;
    while (a > 1 && ((uintptr_t)p & (a - 1))) a >>= 1;
    return a;
}

// Builds the plan of one product in column-major terms: D[N,M] = op(B)[N,K] op(A)[K,M] (+ bias over the
// rows of D); p->ok = 0 when cuBLASLt has no algorithm for it.
static void plan_build(mtk *k, Plan *p)
{
    Cu *c = cu(k);
    const cudaDataType_t ab = cuda_type((mtk_dtype)p->act), ct = cuda_type((mtk_dtype)p->cd);
    cublasLtMatmulPreference_t pref = NULL;
    cublasOperation_t opa = p->tb ? CUBLAS_OP_T : CUBLAS_OP_N, opb = p->ta ? CUBLAS_OP_T : CUBLAS_OP_N;
    size_t ws = c->lt_ws_bytes;
    cublasLtMatmulHeuristicResult_t res;
    int found = 0;
    p->used = 1;
    p->why = "matmul descriptor";
    if (cublasLtMatmulDescCreate(&p->op, CUBLAS_COMPUTE_32F, CUDA_R_32F) != CUBLAS_STATUS_SUCCESS) return;
    cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof opa);
    cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof opb);
    if (p->bias || p->gelu) {
        cublasLtEpilogue_t ep = p->gelu ? (p->bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX)
                                        : CUBLASLT_EPILOGUE_BIAS;
        cudaDataType_t bt = p->bias16 ? ab : CUDA_R_32F;
        int64_t aux_ld = p->ldc;
        p->why = "epilogue";
        if (cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_EPILOGUE, &ep, sizeof ep) != CUBLAS_STATUS_SUCCESS)
            return;
        p->why = p->bias16 ? "16-bit bias type" : "fp32 bias type";
        if (p->bias &&
            cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof bt) != CUBLAS_STATUS_SUCCESS)
            return;
        p->why = "GeLU aux stride";
        if (p->gelu &&
            cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &aux_ld, sizeof aux_ld) != CUBLAS_STATUS_SUCCESS)
            return;
    }
    p->why = "layouts";
    if (cublasLtMatrixLayoutCreate(&p->la, ab, p->tb ? p->K : p->N, p->tb ? p->N : p->K, p->ldb) != CUBLAS_STATUS_SUCCESS ||
        cublasLtMatrixLayoutCreate(&p->lb, ab, p->ta ? p->M : p->K, p->ta ? p->K : p->M, p->lda) != CUBLAS_STATUS_SUCCESS ||
        cublasLtMatrixLayoutCreate(&p->lc, ct, p->N, p->M, p->ldc) != CUBLAS_STATUS_SUCCESS ||
        cublasLtMatmulPreferenceCreate(&pref) != CUBLAS_STATUS_SUCCESS)
        return;
    p->why = "no algorithm (heuristic)";
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws);
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &p->al[0], sizeof p->al[0]);
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &p->al[1], sizeof p->al[1]);
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &p->al[2], sizeof p->al[2]);
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &p->al[3], sizeof p->al[3]);
    if (cublasLtMatmulAlgoGetHeuristic((cublasLtHandle_t)c->lt, p->op, p->la, p->lb, p->lc, p->lc, pref, 1, &res,
                                       &found) == CUBLAS_STATUS_SUCCESS && found > 0) {
        p->algo = res.algo;
        p->ok = 1;
        p->why = NULL;
    }
    cublasLtMatmulPreferenceDestroy(pref);
}

// One cuBLASLt product through the plan of its shape; 0 when cuBLASLt cannot do it. aux (NULL: none):
// the GeLU epilogue, C receiving gelu(product) and aux the product (the pre-activation), both [M, ldc].
static int lt_matmul(mtk *k, bool ta, bool tb, int M, int N, int K, const void *A, int lda, const void *B, int ldb,
                     void *C, int ldc, mtk_dtype cd, float beta, const float *bias, void *aux = NULL)
{
    // With a 16-bit output, cuBLASLt's bias epilogue wants the bias in the activation dtype (Megatron keeps
    // it so in bf16 training): the fp32 bias is rounded into a buffer of the queue first.
    const void *bptr = bias;
    const bool b16 = bias && cd != MTK_F32;
    if (b16) {
        Cu *c = cu(k);
        const int q = k->queue;
        const size_t need = (size_t)N * mtk_dtype_size((mtk_dtype)k->act);
        if (c->bias16_cap[q] < need) {
            if (c->bias16[q]) cudaFree(c->bias16[q]);
            c->bias16[q] = NULL, c->bias16_cap[q] = 0;
            if (cudaMalloc(&c->bias16[q], need) != cudaSuccess) {
                cudaGetLastError();
                return 0;
            }
            c->bias16_cap[q] = need;
        }
        convert(k, c->bias16[q], (mtk_dtype)k->act, bias, MTK_F32, (size_t)N);
        bptr = c->bias16[q];
    }
    Cu *c = cu(k);
    Plan key;
    memset(&key, 0, sizeof key);
    key.ta = ta, key.tb = tb, key.bias = bias != NULL, key.bias16 = b16, key.gelu = aux != NULL, key.M = M, key.N = N, key.K = K, key.lda = lda, key.ldb = ldb;
    key.ldc = ldc, key.act = k->act, key.cd = cd;
    key.al[0] = alignment(B), key.al[1] = alignment(A), key.al[2] = key.al[3] = alignment(C);
    Plan *pl = (Plan *)c->plans, *p = NULL;
    for (int i = 0; i < PLANS && pl[i].used; i++)
        if (pl[i].ta == key.ta && pl[i].tb == key.tb && pl[i].bias == key.bias && pl[i].bias16 == key.bias16 &&
            pl[i].gelu == key.gelu &&
            pl[i].M == M && pl[i].N == N &&
            pl[i].K == K && pl[i].lda == lda && pl[i].ldb == ldb && pl[i].ldc == ldc && pl[i].act == key.act &&
            pl[i].cd == key.cd && !memcmp(pl[i].al, key.al, sizeof key.al)) {
            p = &pl[i];
            break;
        }
    if (!p) {   // a free slot, else the oldest one in turn
        p = &pl[c->next_plan++ % PLANS];
        plan_clear(p);
        *p = key;
        plan_build(k, p);
        if (!p->ok && getenv("MT_CUDA_DEBUG"))
            fprintf(stderr, "cuda: cuBLASLt refuses %c%c M=%d N=%d K=%d lda=%d ldb=%d ldc=%d act=%s out=%s%s%s: %s\n",
                    ta ? 'T' : 'N', tb ? 'T' : 'N', M, N, K, lda, ldb, ldc, mtk_dtype_name((mtk_dtype)k->act),
                    mtk_dtype_name(cd), bias ? " +bias" : "", aux ? " +gelu" : "", p->why);
    }
    if (!p->ok) return 0;
    if (bias) cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bptr, sizeof bptr);
    if (aux) cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof aux);
    const float one = 1.0f;
    k->stats.launches++;
    return cublasLtMatmul((cublasLtHandle_t)c->lt, p->op, &one, B, p->la, A, p->lb, &beta, C, p->lc, C, p->lc, &p->algo,
                          c->lt_ws, c->lt_ws_bytes, stream(k)) == CUBLAS_STATUS_SUCCESS;
}

void gemm(mtk *k, bool ta, bool tb, int M, int N, int K, const void *A, int lda, const void *B, int ldb, void *C,
          int ldc, mtk_dtype cd, float beta, const float *bias, void *gelu_out)
{
    if (M <= 0 || N <= 0) return;
    if (gelu_out) {   // gelu_out = gelu(C), C = the product: the epilogue, else the caller's fallback
        if (K > 0 && beta == 0.0f && lt_matmul(k, ta, tb, M, N, K, A, lda, B, ldb, gelu_out, ldc, cd, beta, bias, C))
            return;
        mtk_fail(k, "gemm: no GeLU epilogue for this product");
        return;
    }
    if (K <= 0) {   // nothing to multiply: C = beta C (+ bias)
        if (beta == 0.0f) cudaMemsetAsync(C, 0, (size_t)M * ldc * mtk_dtype_size(cd), stream(k));
        else if (beta != 1.0f) mtk_fail(k, "gemm: K = 0 with beta %g", beta);
        if (bias) bias_rows(k, C, cd, bias, M, N);
        return;
    }
    // the bias epilogue where cuBLASLt takes it for this shape (the plan remembers a refusal), else a kernel
    if (bias && lt_matmul(k, ta, tb, M, N, K, A, lda, B, ldb, C, ldc, cd, beta, bias)) return;
    if (!lt_matmul(k, ta, tb, M, N, K, A, lda, B, ldb, C, ldc, cd, beta, NULL)) {
        mtk_fail(k, "gemm: cuBLASLt cannot multiply %dx%d by %dx%d (%s)", M, K, K, N, mtk_dtype_name(k->act));
        return;
    }
    if (bias) bias_rows(k, C, cd, bias, M, N);
}

typedef cublasOperation_t BlasOp;
static const BlasOp OP_N = CUBLAS_OP_N, OP_T = CUBLAS_OP_T;

// cuBLAS's grouped product on the current stream (fp32 compute, as the cuBLASLt products), with the
// cuBLASLt workspace; false when cuBLAS refuses it.
static bool blas_grouped(mtk *k, const BlasOp *opa, const BlasOp *opb, const int *m, const int *n, const int *kk,
                         const float *alpha, const void *const *A, mtk_dtype ab, const int *lda, const void *const *B,
                         const int *ldb, const float *beta, void *const *C, mtk_dtype ct, const int *ldc, int groups,
                         const int *gsize)
{
    Cu *c = cu(k);
    cublasHandle_t h = (cublasHandle_t)c->blas;
    if (!h || cublasSetStream(h, stream(k)) != CUBLAS_STATUS_SUCCESS ||
        cublasSetWorkspace(h, c->lt_ws, c->lt_ws_bytes) != CUBLAS_STATUS_SUCCESS)
        return false;
    k->stats.launches++;
    return cublasGemmGroupedBatchedEx(h, opa, opb, m, n, kk, alpha, A, cuda_type(ab), lda, B, cuda_type(ab), ldb, beta, C,
                                      cuda_type(ct), ldc, groups, gsize, CUBLAS_COMPUTE_32F) == CUBLAS_STATUS_SUCCESS;
}

#endif

// The grouped call's arguments, one group of one problem per product, in the column-major terms of gemm()'s
// cuBLASLt plans (D[N, M] = op(B) op(A)); the pointer arrays go to the workspace through to_device. Any
// product cuBLAS could refuse (its alignment rule for pointers, no product to compute), a workspace without
// room for the pointers, or a refusal (then remembered for this output type) takes gemm() per product.
void gemm_grouped(mtk *k, bool ta, bool tb, const GemmGroup *g, int n, int lda, int ldb, int ldc, mtk_dtype cd,
                  float beta)
{
    Cu *c = cu(k);
    const size_t ptr = 3 * (size_t)n;
    bool one = n > 0 && cd == (mtk_dtype)k->act && !(c->grouped_refused & (1u << cd)) &&
               ptr * sizeof(void *) + 64 <= k->ws_bytes - k->ws_used;   // room for the pointer arrays
    for (int i = 0; i < n && one; i++)
        one = g[i].M > 0 && g[i].N > 0 && g[i].K > 0 && aligned16(g[i].A) && aligned16(g[i].B) && aligned16(g[i].C);
    if (one) {
        const size_t ints = 7 * (size_t)n, ops = 2 * (size_t)n, flt = 2 * (size_t)n;
        char *h = (char *)host_scratch(k, 1, ptr * sizeof(void *) + ints * sizeof(int) + ops * sizeof(BlasOp) +
                                                 flt * sizeof(float));
        void **dp = h ? (void **)mtk_ws_take(k, ptr * sizeof(void *)) : NULL;
        if (!dp) return;   // the error is set
        const void **hp = (const void **)h;
        int *m = (int *)(hp + ptr), *nn = m + n, *kk = nn + n, *la = kk + n, *lb = la + n, *lc = lb + n, *gs = lc + n;
        BlasOp *oa = (BlasOp *)(gs + n), *ob = oa + n;
        float *al = (float *)(ob + n), *be = al + n;
        for (int i = 0; i < n; i++) {
            hp[i] = g[i].B, hp[n + i] = g[i].A, hp[2 * n + i] = g[i].C;
            m[i] = g[i].N, nn[i] = g[i].M, kk[i] = g[i].K, la[i] = ldb, lb[i] = lda, lc[i] = ldc, gs[i] = 1;
            oa[i] = tb ? OP_T : OP_N, ob[i] = ta ? OP_T : OP_N, al[i] = 1.0f, be[i] = beta;
        }
        to_device(k, dp, hp, ptr * sizeof(void *));
        if (k->failed) return;
        if (blas_grouped(k, oa, ob, m, nn, kk, al, (const void *const *)dp, (mtk_dtype)k->act, la,
                         (const void *const *)dp + n, lb, be, dp + 2 * n, cd, lc, n, gs))
            return;
        c->grouped_refused |= 1u << cd;
        cudaGetLastError();
        if (getenv("MT_CUDA_DEBUG"))
            fprintf(stderr, "%s: the grouped product refuses %s operands, %s output: one product per group\n",
                    MTK_CU_OPS.name, mtk_dtype_name((mtk_dtype)k->act), mtk_dtype_name(cd));
    }
    for (int i = 0; i < n; i++)
        gemm(k, ta, tb, g[i].M, g[i].N, g[i].K, g[i].A, lda, g[i].B, ldb, g[i].C, ldc, cd, beta, NULL);
}

void matmul_fwd(mtk *k, void *out, const void *inp, const void *w, const float *bias, int N, int C, int OC)
{
    gemm(k, false, true, N, OC, C, inp, C, w, C, out, OC, k->act, 0.0f, bias);
    check(k, "matmul_fwd");
}

// The tanh GeLU as cuBLASLt's epilogue when it takes this product (the cuda build), else the product and
// then the GeLU kernel.
void matmul_gelu_fwd(mtk *k, void *out, void *pre, const void *inp, const void *w, const float *bias, int N, int C,
                     int OC, int exact)
{
#ifndef SIMT_SIM
    if (!exact && C > 0) {
        gemm(k, false, true, N, OC, C, inp, C, w, C, pre, OC, k->act, 0.0f, bias, out);
        if (!k->failed) {
            check(k, "matmul_gelu_fwd");
            return;
        }
        mtk_clear_error(k);   // refused (no device error): the unfused path from now on
    }
#endif
    gemm(k, false, true, N, OC, C, inp, C, w, C, pre, OC, k->act, 0.0f, bias);
    if (!k->failed) gelu_fwd(k, out, pre, (size_t)N * OC, exact);
    check(k, "matmul_gelu_fwd");
}

void matmul_bwd(mtk *k, void *dinp, float *dw, float *dbias, const void *dout, const void *inp, const void *w, int N,
                int C, int OC, int acc)
{
    if (dinp) gemm(k, false, false, N, C, OC, dout, OC, w, C, dinp, C, k->act, 0.0f, NULL);
    if (dw) gemm(k, true, false, OC, C, N, dout, OC, inp, C, dw, C, MTK_F32, acc ? 1.0f : 0.0f, NULL);
    if (dbias && !acc) cudaMemsetAsync(dbias, 0, (size_t)OC * sizeof(float), stream(k));
    if (dbias) colsum_acc(k, dbias, dout, N, OC);
    check(k, "matmul_bwd");
}

}  // namespace MTK_CU_NS
