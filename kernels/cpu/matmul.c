/* matmul.c: the linear layer on cpu: out = inp . W^T + bias, and its backward, through cblas_sgemm.
 * OpenBLAS runs single-threaded (ops.c) and the products are split over OpenMP threads here, in chunks
 * of whole output rows or columns: every output element still sums over the full inner dimension in
 * one call, and no BLAS worker threads spin against the OpenMP ones between calls. */
#include <cblas.h>
#include <omp.h>

#include "cpu.h"

/* C[M,N] = alpha op(A) op(B) + beta C (row-major), cut along the longer of M and N into chunks of a
 * multiple of 64 (about CHUNKS_PER_THREAD per thread, at least 128 wide) that the threads take in turn:
 * a thread that loses its core to other work for a while holds back only its current chunk, not half of
 * the product. */
enum { CHUNKS_PER_THREAD = 4, MIN_CHUNK = 128, DW_ROWS = 2048, DW_SPLIT = 8192 };

static void par_sgemm(mtk *k, CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int M, int N, int K, float alpha, const float *A,
                      int lda, const float *B, int ldb, float beta, float *C, int ldc)
{
    cpu_state *st = k->impl;
    if (st->sgemm_dnnl && alpha == 1.0f && (beta == 0.0f || beta == 1.0f) && M > 0 && N > 0 && K > 0) {
        long sam = ta == CblasNoTrans ? lda : 1, sak = ta == CblasNoTrans ? 1 : lda;
        long sbk = tb == CblasNoTrans ? ldb : 1, sbn = tb == CblasNoTrans ? 1 : ldb;
        /* a transposed A (the weight gradient) in slabs of DW_ROWS rows, as matmul_bf16.c does */
        int slab = ta == CblasNoTrans || M <= DW_SPLIT ? M : DW_ROWS;
        for (int m0 = 0; m0 < M; m0 += slab) {
            int m = M - m0 < slab ? M - m0 : slab;
            if (cpu_dnnl_matmul(k, st->dnnl, MTK_F32, m, N, K, A + (size_t)m0 * (size_t)sam, sam, sak, B, sbk, sbn, NULL,
                                beta == 1.0f, C + (size_t)m0 * (size_t)ldc, MTK_F32, ldc))
                return;
        }
        return;
    }
    int nt = omp_get_max_threads();
    int along_m = M >= N, len = along_m ? M : N;
    int chunk = (len + CHUNKS_PER_THREAD * nt - 1) / (CHUNKS_PER_THREAD * nt);
    chunk = chunk < MIN_CHUNK ? MIN_CHUNK : (chunk + 63) / 64 * 64;
    int ns = (len + chunk - 1) / chunk;
    if (nt <= 1 || ns <= 1 || omp_in_parallel()) {
        cblas_sgemm(CblasRowMajor, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
        return;
    }
#pragma omp parallel for schedule(dynamic, 1)
    for (int s = 0; s < ns; s++) {
        int a0 = s * chunk, n = len - a0 < chunk ? len - a0 : chunk;
        if (along_m) {
            const float *As = ta == CblasNoTrans ? A + (size_t)a0 * lda : A + a0;
            cblas_sgemm(CblasRowMajor, ta, tb, n, N, K, alpha, As, lda, B, ldb, beta, C + (size_t)a0 * ldc, ldc);
        } else {
            const float *Bs = tb == CblasNoTrans ? B + a0 : B + (size_t)a0 * ldb;
            cblas_sgemm(CblasRowMajor, ta, tb, M, n, K, alpha, A, lda, Bs, ldb, beta, C + a0, ldc);
        }
    }
}

void cpu_matmul_fwd(mtk *k, float *out, const float *inp, const float *w, const float *bias, int N, int C, int OC)
{
    if (N <= 0 || OC <= 0) return;
    if (N <= MT_CPU_SMALL_N || (N <= MT_CPU_SMALL_N_BIG && (size_t)C * (size_t)OC >= MT_CPU_SMALL_BIG_W)) {
        cpu_matmul_small(out, inp, w, bias, N, C, OC);
        return;
    }
    par_sgemm(k, CblasNoTrans, CblasTrans, N, OC, C, 1.0f, inp, C, w, C, 0.0f, out, OC);
    if (!bias) return;
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        float *o = out + (size_t)n * OC;
        for (int j = 0; j < OC; j++) o[j] += bias[j];
    }
}

/* Column sums of dout [N,OC] (fp32 or bf16) added to dbias (acc) or stored in it, in row order for every
 * column: each thread owns bands of columns, so the result does not depend on the thread count. */
void cpu_bias_grad(float *dbias, const void *dout, mtk_dtype dt, int N, int OC, int acc)
{
    enum { BAND = 64 };
    int nband = (OC + BAND - 1) / BAND;
#pragma omp parallel for schedule(static)
    for (int bnd = 0; bnd < nband; bnd++) {
        int j0 = bnd * BAND, j1 = j0 + BAND < OC ? j0 + BAND : OC;
        float sum[BAND] = {0};
        for (int n = 0; n < N; n++) {
            if (dt == MTK_BF16) {
                const uint16_t *d = (const uint16_t *)dout + (size_t)n * OC;
                for (int j = j0; j < j1; j++) sum[j - j0] += mt_bf16_to_f32(d[j]);
            } else {
                const float *d = (const float *)dout + (size_t)n * OC;
                for (int j = j0; j < j1; j++) sum[j - j0] += d[j];
            }
        }
        for (int j = j0; j < j1; j++) dbias[j] = (acc ? dbias[j] : 0.0f) + sum[j - j0];
    }
}

void cpu_matmul_bwd(mtk *k, float *dinp, float *dw, float *dbias, const float *dout, const float *inp,
                    const float *w, int N, int C, int OC, int acc)
{
    if (N <= 0) return;
    if (dinp) {
        if (OC > 0)
            par_sgemm(k, CblasNoTrans, CblasNoTrans, N, C, OC, 1.0f, dout, OC, w, C, 0.0f, dinp, C);
        else
            for (size_t i = 0; i < (size_t)N * C; i++) dinp[i] = 0;
    }
    if (dw && OC > 0 && C > 0)
        par_sgemm(k, CblasTrans, CblasNoTrans, OC, C, N, 1.0f, dout, OC, inp, C, acc ? 1.0f : 0.0f, dw, C);
    if (dbias && OC > 0) cpu_bias_grad(dbias, dout, MTK_F32, N, OC, acc);
}

void cpu_sgemm(mtk *k, int ta, int tb, int M, int N, int K, const float *A, int lda, const float *B, int ldb, float beta,
               float *C, int ldc)
{
    par_sgemm(k, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, M, N, K, 1.0f, A, lda, B, ldb, beta, C,
              ldc);
}
