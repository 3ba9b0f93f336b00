/* matmul.c: the linear layer on cpu: out = inp . W^T + bias through cblas_sgemm, and its backward. */
#include <cblas.h>

#include "cpu.h"

void cpu_matmul_fwd(mtk *k, float *out, const float *inp, const float *w, const float *bias, int N, int C, int OC)
{
    (void)k;
    if (N <= 0 || OC <= 0) return;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, OC, C, 1.0f, inp, C, w, C, 0.0f, out, OC);
    if (!bias) return;
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        float *o = out + (size_t)n * OC;
        for (int j = 0; j < OC; j++) o[j] += bias[j];
    }
}

/* Column sums of dout [N,OC] added to dbias, in row order for every column: each thread owns a band of
 * columns, so the result does not depend on the thread count. */
static void bias_grad(float *dbias, const float *dout, int N, int OC)
{
    enum { BAND = 64 };
    int nband = (OC + BAND - 1) / BAND;
#pragma omp parallel for schedule(static)
    for (int bnd = 0; bnd < nband; bnd++) {
        int j0 = bnd * BAND, j1 = j0 + BAND < OC ? j0 + BAND : OC;
        float acc[BAND] = {0};
        for (int n = 0; n < N; n++) {
            const float *d = dout + (size_t)n * OC;
            for (int j = j0; j < j1; j++) acc[j - j0] += d[j];
        }
        for (int j = j0; j < j1; j++) dbias[j] += acc[j - j0];
    }
}

void cpu_matmul_bwd(mtk *k, float *dinp, float *dw, float *dbias, const float *dout, const float *inp,
                    const float *w, int N, int C, int OC)
{
    (void)k;
    if (N <= 0) return;
    if (dinp) {
        if (OC > 0)
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, C, OC, 1.0f, dout, OC, w, C, 0.0f, dinp, C);
        else
            for (size_t i = 0; i < (size_t)N * C; i++) dinp[i] = 0;
    }
    if (dw && OC > 0 && C > 0)
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, OC, C, N, 1.0f, dout, OC, inp, C, 1.0f, dw, C);
    if (dbias && OC > 0) bias_grad(dbias, dout, N, OC);
}
