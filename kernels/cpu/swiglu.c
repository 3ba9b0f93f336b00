/* swiglu.c: SwiGLU (Megatron --swiglu) and its backward, row by row: the first F features of a row of
 * inp [N, 2F] go through silu and gate the last F. silu(a) = a s with s = 1 / (1 + e^-a), and
 * silu'(a) = s (1 + a (1 - s)). */
#include "cpu.h"
#include "vmath.h"

MTK_CLONES static void row_fwd(float *o, const float *x1, const float *x2, int F)
{
    for (int c = 0; c < F; c++) {
        const float a = x1[c];
        o[c] = a / (1.0f + vexp(-a)) * x2[c];
    }
}

MTK_CLONES static void row_bwd(float *d1, float *d2, const float *x1, const float *x2, const float *g, int F)
{
    for (int c = 0; c < F; c++) {
        const float a = x1[c], s = 1.0f / (1.0f + vexp(-a)), dy = g[c];
        d1[c] = dy * x2[c] * (s * (1.0f + a * (1.0f - s)));
        d2[c] = dy * (a * s);
    }
}

void cpu_swiglu_fwd(mtk *k, float *out, const float *inp, int N, int F)
{
    (void)k;
    const size_t F2 = 2 * (size_t)F;
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) row_fwd(out + (size_t)n * F, inp + n * F2, inp + n * F2 + F, F);
}

void cpu_swiglu_bwd(mtk *k, float *dinp, const float *inp, const float *dout, int N, int F)
{
    (void)k;
    const size_t F2 = 2 * (size_t)F;
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++)
        row_bwd(dinp + n * F2, dinp + n * F2 + F, inp + n * F2, inp + n * F2 + F, dout + (size_t)n * F, F);
}
