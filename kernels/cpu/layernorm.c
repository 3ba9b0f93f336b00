/* layernorm.c: LayerNorm over the last dimension (mean/rstd saved) and its backward.
 * Row sums go through 8 fixed lanes, so they vectorize and add up in the same order everywhere. */
#include <math.h>

#include "cpu.h"
#include "vmath.h"

enum { LANES = 8 };

MTK_CLONES static void row_fwd(float *o, float *mean, float *rstd, const float *x, const float *w, const float *b,
                               int C, float eps)
{
    float a[LANES] = {0};
    int c = 0;
    for (; c + LANES <= C; c += LANES)
        for (int l = 0; l < LANES; l++) a[l] += x[c + l];
    float s = 0;
    for (; c < C; c++) s += x[c];
    for (int l = 0; l < LANES; l++) s += a[l], a[l] = 0;
    const float m = s / C;
    for (c = 0; c + LANES <= C; c += LANES)
        for (int l = 0; l < LANES; l++) {
            float d = x[c + l] - m;
            a[l] += d * d;
        }
    float v = 0;
    for (; c < C; c++) v += (x[c] - m) * (x[c] - m);
    for (int l = 0; l < LANES; l++) v += a[l];
    const float r = 1.0f / sqrtf(v / C + eps);
    for (c = 0; c < C; c++) o[c] = (x[c] - m) * r * w[c] + b[c];
    *mean = m;
    *rstd = r;
}

void cpu_layernorm_fwd(mtk *k, float *out, float *mean, float *rstd, const float *inp, const float *w,
                       const float *b, int N, int C, float eps)
{
    (void)k;
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++)
        row_fwd(out + (size_t)n * C, mean + n, rstd + n, inp + (size_t)n * C, w, b, C, eps);
}

/* dx += (dy*w - mean(dy*w) - norm * mean(dy*w*norm)) * rstd for one row. */
MTK_CLONES static void row_bwd(float *dx, const float *dy, const float *x, const float *w, float m, float r, int C)
{
    float a[LANES] = {0}, an[LANES] = {0};
    int c = 0;
    for (; c + LANES <= C; c += LANES)
        for (int l = 0; l < LANES; l++) {
            float dn = dy[c + l] * w[c + l];
            a[l] += dn;
            an[l] += dn * ((x[c + l] - m) * r);
        }
    float sd = 0, sdn = 0;
    for (; c < C; c++) {
        float dn = dy[c] * w[c];
        sd += dn;
        sdn += dn * ((x[c] - m) * r);
    }
    for (int l = 0; l < LANES; l++) sd += a[l], sdn += an[l];
    sd /= C;
    sdn /= C;
    for (c = 0; c < C; c++) dx[c] += (dy[c] * w[c] - sd - (x[c] - m) * r * sdn) * r;
}

void cpu_layernorm_bwd_rows(float *dinp, const float *dout, const float *inp, const float *w, const float *mean,
                            const float *rstd, int N, int C)
{
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++)
        row_bwd(dinp + (size_t)n * C, dout + (size_t)n * C, inp + (size_t)n * C, w, mean[n], rstd[n], C);
}

void cpu_layernorm_bwd(mtk *k, float *dinp, float *dw, float *db, const float *dout, const float *inp,
                       const float *w, const float *mean, const float *rstd, int N, int C)
{
    (void)k;
    cpu_layernorm_bwd_rows(dinp, dout, inp, w, mean, rstd, N, C);
    cpu_norm_wgrad(dw, db, dout, inp, MTK_F32, mean, rstd, N, C);
}
