/* layernorm.c: LayerNorm over the last dimension (mean/rstd saved) and its backward. */
#include <math.h>

#include "cpu.h"

void cpu_layernorm_fwd(mtk *k, float *out, float *mean, float *rstd, const float *inp, const float *w,
                       const float *b, int N, int C, float eps)
{
    (void)k;
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float *x = inp + (size_t)n * C;
        float *o = out + (size_t)n * C;
        float s = 0;
        for (int c = 0; c < C; c++) s += x[c];
        float m = s / C;
        float v = 0;
        for (int c = 0; c < C; c++) {
            float d = x[c] - m;
            v += d * d;
        }
        float r = 1.0f / sqrtf(v / C + eps);
        for (int c = 0; c < C; c++) o[c] = (x[c] - m) * r * w[c] + b[c];
        mean[n] = m;
        rstd[n] = r;
    }
}

void cpu_layernorm_bwd(mtk *k, float *dinp, float *dw, float *db, const float *dout, const float *inp,
                       const float *w, const float *mean, const float *rstd, int N, int C)
{
    (void)k;
    /* Input gradient row by row. */
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float *x = inp + (size_t)n * C, *dy = dout + (size_t)n * C;
        float *dx = dinp + (size_t)n * C;
        const float m = mean[n], r = rstd[n];
        float sd = 0, sdn = 0;   /* sums of dnorm and dnorm * norm */
        for (int c = 0; c < C; c++) {
            float dn = dy[c] * w[c];
            sd += dn;
            sdn += dn * (x[c] - m) * r;
        }
        sd /= C;
        sdn /= C;
        for (int c = 0; c < C; c++) {
            float nrm = (x[c] - m) * r;
            dx[c] += (dy[c] * w[c] - sd - nrm * sdn) * r;
        }
    }
    /* Weight and bias gradients: each thread owns a band of channels and sums the rows in order. */
    enum { BAND = 64 };
    int nband = (C + BAND - 1) / BAND;
#pragma omp parallel for schedule(static)
    for (int bnd = 0; bnd < nband; bnd++) {
        int c0 = bnd * BAND, c1 = c0 + BAND < C ? c0 + BAND : C;
        float aw[BAND] = {0}, ab[BAND] = {0};
        for (int n = 0; n < N; n++) {
            const float *x = inp + (size_t)n * C, *dy = dout + (size_t)n * C;
            const float m = mean[n], r = rstd[n];
            for (int c = c0; c < c1; c++) {
                aw[c - c0] += dy[c] * (x[c] - m) * r;
                ab[c - c0] += dy[c];
            }
        }
        for (int c = c0; c < c1; c++) {
            dw[c] += aw[c - c0];
            db[c] += ab[c - c0];
        }
    }
}
