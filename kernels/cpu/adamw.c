/* adamw.c: the AdamW update of kernels.h (decoupled weight decay, bias correction, eps after sqrt), and
 * with mtk_adamw_to the working copy in the activation dtype written block by block behind it.
 * The loop runs in blocks, each compiled for AVX2 and the baseline (MTK_CLONES): the same IEEE
 * operations in the same order either way, so the same results. */
#include <math.h>

#include "cpu.h"
#include "vmath.h"

enum { BLOCK = 4096 };

MTK_CLONES static void adamw_block(float *p, const float *g, float *m, float *v, size_t n, float lr, float b1, float b2,
                                   float ib1, float ib2, float bc1, float bc2, float eps, float wd, float grad_scale)
{
    for (size_t i = 0; i < n; i++) {
        float gi = g[i] * grad_scale;
        float mi = b1 * m[i] + ib1 * gi;
        float vi = b2 * v[i] + ib2 * gi * gi;
        m[i] = mi;
        v[i] = vi;
        p[i] -= lr * ((mi / bc1) / (sqrtf(vi / bc2) + eps) + wd * p[i]);
    }
}

void cpu_adamw(mtk *k, float *p, void *work, const float *g, float *m, float *v, size_t n, float lr, float b1, float b2,
               float eps, float wd, int t, float grad_scale)
{
    const float bc1 = (float)(1.0 - pow(b1, t)), bc2 = (float)(1.0 - pow(b2, t));
    const float ib1 = 1.0f - b1, ib2 = 1.0f - b2;
    size_t nb = (n + BLOCK - 1) / BLOCK;
#pragma omp parallel for schedule(static) if (nb > 1)
    for (size_t b = 0; b < nb; b++) {
        size_t i0 = b * BLOCK, len = n - i0 < BLOCK ? n - i0 : BLOCK;
        adamw_block(p + i0, g + i0, m + i0, v + i0, len, lr, b1, b2, ib1, ib2, bc1, bc2, eps, wd, grad_scale);
        if (work)   /* the block is still in cache: the working copy costs no second pass over p */
            cpu_from_f32((char *)work + i0 * mtk_dtype_size(k->act), k->act, p + i0, len);
    }
}
