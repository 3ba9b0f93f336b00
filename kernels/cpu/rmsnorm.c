/* rmsnorm.c: RMSNorm over the last dimension (rstd saved) and its backward, as layernorm.c without the
 * mean and the bias. Row sums go through 8 fixed lanes, so they vectorize and add up in the same order
 * everywhere. */
#include <math.h>

#include "cpu.h"
#include "vmath.h"

enum { LANES = 8 };

MTK_CLONES static void row_fwd(float *o, float *rstd, const float *x, const float *w, int C, float eps)
{
    float a[LANES] = {0};
    int c = 0;
    for (; c + LANES <= C; c += LANES)
        for (int l = 0; l < LANES; l++) a[l] += x[c + l] * x[c + l];
    float s = 0;
    for (; c < C; c++) s += x[c] * x[c];
    for (int l = 0; l < LANES; l++) s += a[l];
    const float r = 1.0f / sqrtf(s / C + eps);
    for (c = 0; c < C; c++) o[c] = x[c] * r * w[c];
    *rstd = r;
}

void cpu_rmsnorm_fwd(mtk *k, float *out, float *rstd, const float *inp, const float *w, int N, int C, float eps)
{
    (void)k;
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) row_fwd(out + (size_t)n * C, rstd + n, inp + (size_t)n * C, w, C, eps);
}

/* dx += (dy*w - xhat * mean(dy*w*xhat)) * rstd for one row, xhat = x * rstd. */
MTK_CLONES static void row_bwd(float *dx, const float *dy, const float *x, const float *w, float r, int C)
{
    float a[LANES] = {0};
    int c = 0;
    for (; c + LANES <= C; c += LANES)
        for (int l = 0; l < LANES; l++) a[l] += dy[c + l] * w[c + l] * (x[c + l] * r);
    float s = 0;
    for (; c < C; c++) s += dy[c] * w[c] * (x[c] * r);
    for (int l = 0; l < LANES; l++) s += a[l];
    s /= C;
    for (c = 0; c < C; c++) dx[c] += (dy[c] * w[c] - x[c] * r * s) * r;
}

void cpu_rmsnorm_bwd_rows(float *dinp, const float *dout, const float *inp, const float *w, const float *rstd, int N,
                          int C)
{
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++)
        row_bwd(dinp + (size_t)n * C, dout + (size_t)n * C, inp + (size_t)n * C, w, rstd[n], C);
}

void cpu_rmsnorm_bwd(mtk *k, float *dinp, float *dw, const float *dout, const float *inp, const float *w,
                     const float *rstd, int N, int C)
{
    (void)k;
    cpu_rmsnorm_bwd_rows(dinp, dout, inp, w, rstd, N, C);
    cpu_norm_wgrad(dw, NULL, dout, inp, MTK_F32, NULL, rstd, N, C);
}
