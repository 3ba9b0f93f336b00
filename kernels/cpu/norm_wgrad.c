/* norm_wgrad.c: the weight gradients of the LayerNorm and RMSNorm backward, dw += dy * xhat (and
 * LayerNorm's db += dy) over all rows, from dout and inp stored in any dtype. */
#include "cpu.h"
#include "vmath.h"

/* dw[c0..c1) (and db) over all rows, in row order; each row's band converted to fp32 first when reduced.
 * mean NULL: RMSNorm, xhat = x * rstd, no db. */
MTK_CLONES static void band_wgrad(float *dw, float *db, const void *dout, const void *inp, mtk_dtype dt,
                                  const float *mean, const float *rstd, int N, int C, int c0, int c1)
{
    float aw[64] = {0}, ab[64] = {0}, xs[64], dys[64];
    const int wd = c1 - c0;
    const size_t es = mtk_dtype_size(dt);
    for (int n = 0; n < N; n++) {
        const size_t o = (size_t)n * C + c0;
        const float *x = (const float *)inp + o, *dy = (const float *)dout + o;
        if (dt != MTK_F32) {
            cpu_to_f32(xs, (const char *)inp + o * es, dt, (size_t)wd);
            cpu_to_f32(dys, (const char *)dout + o * es, dt, (size_t)wd);
            x = xs, dy = dys;
        }
        const float r = rstd[n];
        if (mean) {
            const float m = mean[n];
            for (int c = 0; c < wd; c++) {
                aw[c] += dy[c] * ((x[c] - m) * r);
                ab[c] += dy[c];
            }
        } else
            for (int c = 0; c < wd; c++) aw[c] += dy[c] * (x[c] * r);
    }
    for (int c = 0; c < wd; c++) dw[c0 + c] += aw[c];
    if (mean)
        for (int c = 0; c < wd; c++) db[c0 + c] += ab[c];
}

void cpu_norm_wgrad(float *dw, float *db, const void *dout, const void *inp, mtk_dtype dt, const float *mean,
                    const float *rstd, int N, int C)
{
    /* Each thread owns bands of 64 channels, so the sums do not depend on the thread count. */
    const int nband = (C + 63) / 64;
#pragma omp parallel for schedule(static)
    for (int bnd = 0; bnd < nband; bnd++)
        band_wgrad(dw, db, dout, inp, dt, mean, rstd, N, C, bnd * 64, bnd * 64 + 64 < C ? bnd * 64 + 64 : C);
}
