/* reduce.c: sum of squares (double, fixed-order blocks and lanes) and the count of non-finite values. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu.h"
#include "vmath.h"

enum { BLOCK = 8192, LANES = 8 };

/* Sum of squares of one block in double, in LANES fixed lanes (vectorizable; the same order everywhere). */
MTK_CLONES static double block_sumsq(const float *x, size_t n)
{
    double a[LANES] = {0};
    size_t i = 0;
    for (; i + LANES <= n; i += LANES)
        for (int l = 0; l < LANES; l++) a[l] += (double)x[i + l] * x[i + l];
    double s = 0;
    for (; i < n; i++) s += (double)x[i] * x[i];
    for (int l = 0; l < LANES; l++) s += a[l];
    return s;
}

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
        part[b] = block_sumsq(x + i0, i1 - i0);
    }
    double s = 0;
    for (size_t b = 0; b < nb; b++) s += part[b];
    return s;
}

void cpu_sumsq_spans(mtk *k, double *out, const float *x, const mtk_span *span, int nspan)
{
    double s = 0;
    size_t used = k->ws_used;
    for (int i = 0; i < nspan; i++) {
        if (!span[i].n) continue;
        k->ws_used = used;   /* each span's block partials in the same scratch */
        s += cpu_sumsq(k, x + span[i].off, span[i].n);
    }
    k->ws_used = used;
    *out = s;
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
