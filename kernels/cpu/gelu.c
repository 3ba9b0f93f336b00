/* gelu.c: GeLU forward and backward, tanh approximation or exact erf form, in vectorizable spans.
 * tanh form: 0.5x(1 + tanh u) = x * sigmoid(2u), u = sqrt(2/pi)(x + 0.044715x^3).
 * erf form: x * Phi(x), Phi(x) = erfc(-x/sqrt2)/2, computed from the tail so large |x| loses nothing. */
#include "cpu.h"
#include "vmath.h"

#define GELU_K 0.7978845608028654f   /* sqrt(2/pi) */
#define GELU_A 0.044715f
#define INV_SQRT2 0.7071067811865476f
#define INV_SQRT_2PI 0.3989422804014327f

enum { SPAN = 8192 };

MTK_CLONES static void fwd_tanh(float *out, const float *inp, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        float x = inp[i];
        float u = GELU_K * (x + GELU_A * x * x * x);
        out[i] = x / (1.0f + vexp(-2.0f * u));
    }
}

MTK_CLONES static void bwd_tanh(float *dinp, const float *inp, const float *dout, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        float x = inp[i];
        float u = GELU_K * (x + GELU_A * x * x * x);
        float s = 1.0f / (1.0f + vexp(-2.0f * u));
        float g = s + 2.0f * x * s * (1.0f - s) * GELU_K * (1.0f + 3.0f * GELU_A * x * x);
        dinp[i] = g * dout[i];
    }
}

static inline float phi_cdf(float x)
{
    float z = x * INV_SQRT2;
    float c = 0.5f * verfc_pos(z < 0 ? -z : z);
    return z < 0 ? c : 1.0f - c;
}

MTK_CLONES static void fwd_erf(float *out, const float *inp, size_t n)
{
    for (size_t i = 0; i < n; i++) out[i] = inp[i] * phi_cdf(inp[i]);
}

MTK_CLONES static void bwd_erf(float *dinp, const float *inp, const float *dout, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        float x = inp[i];
        float g = phi_cdf(x) + x * INV_SQRT_2PI * vexp(-0.5f * x * x);
        dinp[i] = g * dout[i];
    }
}

void cpu_gelu_fwd(mtk *k, float *out, const float *inp, size_t n, int exact)
{
    (void)k;
    size_t ns = (n + SPAN - 1) / SPAN;
#pragma omp parallel for schedule(static)
    for (size_t s = 0; s < ns; s++) {
        size_t i0 = s * SPAN, m = n - i0 < SPAN ? n - i0 : SPAN;
        if (exact) fwd_erf(out + i0, inp + i0, m);
        else fwd_tanh(out + i0, inp + i0, m);
    }
}

void cpu_gelu_bwd(mtk *k, float *dinp, const float *inp, const float *dout, size_t n, int exact)
{
    (void)k;
    size_t ns = (n + SPAN - 1) / SPAN;
#pragma omp parallel for schedule(static)
    for (size_t s = 0; s < ns; s++) {
        size_t i0 = s * SPAN, m = n - i0 < SPAN ? n - i0 : SPAN;
        if (exact) bwd_erf(dinp + i0, inp + i0, dout + i0, m);
        else bwd_tanh(dinp + i0, inp + i0, dout + i0, m);
    }
}
