/* adamw.c: the AdamW update of kernels.h (decoupled weight decay, bias correction, eps after sqrt). */
#include <math.h>

#include "cpu.h"

void cpu_adamw(mtk *k, float *p, const float *g, float *m, float *v, size_t n, float lr, float b1, float b2,
               float eps, float wd, int t, float grad_scale)
{
    (void)k;
    const float bc1 = (float)(1.0 - pow(b1, t)), bc2 = (float)(1.0 - pow(b2, t));
    const float ib1 = 1.0f - b1, ib2 = 1.0f - b2;
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) {
        float gi = g[i] * grad_scale;
        float mi = b1 * m[i] + ib1 * gi;
        float vi = b2 * v[i] + ib2 * gi * gi;
        m[i] = mi;
        v[i] = vi;
        p[i] -= lr * ((mi / bc1) / (sqrtf(vi / bc2) + eps) + wd * p[i]);
    }
}
