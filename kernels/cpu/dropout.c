/* dropout.c: dropout with the counter-based mask of kernels.h; backward recomputes the same mask. */
#include <string.h>

#include "cpu.h"

static void apply(float *out, const float *inp, size_t n, const mtk_dropout *d)
{
    if (!d || d->p <= 0.0f) {
        if (out != inp && n) memmove(out, inp, n * sizeof *out);
        return;
    }
    const float s = 1.0f / (1.0f - d->p);
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) out[i] = mtk_dropout_keep(d, i) ? inp[i] * s : 0.0f;
}

void cpu_dropout_fwd(mtk *k, float *out, const float *inp, size_t n, const mtk_dropout *d)
{
    (void)k;
    apply(out, inp, n, d);
}

void cpu_dropout_bwd(mtk *k, float *dinp, const float *dout, size_t n, const mtk_dropout *d)
{
    (void)k;
    apply(dinp, dout, n, d);
}
