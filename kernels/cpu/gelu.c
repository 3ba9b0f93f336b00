/* gelu.c: GeLU forward and backward, tanh approximation or exact erf form. */
#include <math.h>

#include "cpu.h"

#define GELU_K 0.7978845608028654f   /* sqrt(2/pi) */
#define GELU_A 0.044715f
#define INV_SQRT2 0.7071067811865476f
#define INV_SQRT_2PI 0.3989422804014327f

void cpu_gelu_fwd(mtk *k, float *out, const float *inp, size_t n, int exact)
{
    (void)k;
    if (exact) {
#pragma omp parallel for schedule(static)
        for (size_t i = 0; i < n; i++) {
            float x = inp[i];
            out[i] = 0.5f * x * (1.0f + erff(x * INV_SQRT2));
        }
    } else {
#pragma omp parallel for schedule(static)
        for (size_t i = 0; i < n; i++) {
            float x = inp[i];
            float u = GELU_K * (x + GELU_A * x * x * x);
            out[i] = 0.5f * x * (1.0f + tanhf(u));
        }
    }
}

void cpu_gelu_bwd(mtk *k, float *dinp, const float *inp, const float *dout, size_t n, int exact)
{
    (void)k;
    if (exact) {
#pragma omp parallel for schedule(static)
        for (size_t i = 0; i < n; i++) {
            float x = inp[i];
            float g = 0.5f * (1.0f + erff(x * INV_SQRT2)) + x * INV_SQRT_2PI * expf(-0.5f * x * x);
            dinp[i] = g * dout[i];
        }
    } else {
#pragma omp parallel for schedule(static)
        for (size_t i = 0; i < n; i++) {
            float x = inp[i];
            float u = GELU_K * (x + GELU_A * x * x * x);
            float th = tanhf(u);
            float g = 0.5f * (1.0f + th) + 0.5f * x * (1.0f - th * th) * GELU_K * (1.0f + 3.0f * GELU_A * x * x);
            dinp[i] = g * dout[i];
        }
    }
}
