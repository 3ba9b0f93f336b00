/* elementwise.c: add, accumulate and scale over flat float arrays; a bias added to every row. */
#include "cpu.h"

void cpu_add(mtk *k, float *out, const float *a, const float *b, size_t n)
{
    (void)k;
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) out[i] = a[i] + b[i];
}

void cpu_acc(mtk *k, float *y, const float *x, size_t n)
{
    (void)k;
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) y[i] += x[i];
}

void cpu_bias_add(mtk *k, float *x, const float *bias, int N, int C)
{
    (void)k;
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++)
        for (int c = 0; c < C; c++) x[(size_t)n * C + c] += bias[c];
}

void cpu_scale(mtk *k, float *x, float s, size_t n)
{
    (void)k;
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) x[i] *= s;
}
