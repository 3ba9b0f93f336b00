/* reduce.c: sum of squares (double, fixed-order blocks) and the count of non-finite values. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu.h"

enum { BLOCK = 8192 };

size_t cpu_sumsq_ws_bytes(size_t n) { return (n + BLOCK - 1) / BLOCK * sizeof(double) + 64; }

double cpu_sumsq(mtk *k, const float *x, size_t n)
{
    size_t nb = (n + BLOCK - 1) / BLOCK;
    if (!nb) return 0.0;
    double *part = mtk_ws_take(k, nb * sizeof(double));
    if (!part) return NAN;
    /* Block partials are summed in block order, so the result does not depend on the thread count. */
#pragma omp parallel for schedule(static)
    for (size_t b = 0; b < nb; b++) {
        size_t i0 = b * BLOCK, i1 = i0 + BLOCK < n ? i0 + BLOCK : n;
        double s = 0;
        for (size_t i = i0; i < i1; i++) s += (double)x[i] * x[i];
        part[b] = s;
    }
    double s = 0;
    for (size_t b = 0; b < nb; b++) s += part[b];
    return s;
}

size_t cpu_count_nonfinite(mtk *k, const float *x, size_t n)
{
    (void)k;
    size_t c = 0;
    /* Exponent bits all ones: inf or nan; a bit test keeps this right under any float optimisation flags. */
#pragma omp parallel for schedule(static) reduction(+ : c)
    for (size_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &x[i], 4);
        c += (u & 0x7f800000u) == 0x7f800000u;
    }
    return c;
}
