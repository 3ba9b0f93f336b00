/* fp8.c: FP8 emulation for Transformer Engine's delayed scaling (kernels.h, "FP8, emulated"): the
 * quantize-dequantize of a tensor with its scale, taking its amax on the way, and the update of the amax
 * histories and scales of many tensors at once. Reads and writes every activation dtype directly (no fp32
 * staging): each element is converted to fp32, scaled, rounded to the FP8 format and back, and stored.
 * The cuda backend (kernels/cuda/elementwise.cu) computes the same bits: every step is exact or one
 * correctly rounded fp32 operation (x s, 1 / s, q (1 / s), the store's rounding). */
#include <math.h>

#include "cpu.h"

/* 2^e as a float, -126 <= e <= 127 */
static inline float pow2f(int e) { return mt_bits_f32((uint32_t)(127 + e) << 23); }

/* v rounded to the FP8 format (emin: the exponent of its smallest normal, mb: mantissa bits, max: its
 * largest finite value): nearest, ties to even, saturating at +-max; NaN stays NaN. The quantum of v is
 * 2^(max(e, emin) - mb) with e = floor(log2 |v|): |v| / quantum is exact, rintf rounds it to an integer
 * (ties to even), and the product by the quantum is exact again. */
static inline float fp8_round(float v, int emin, int mb, float max)
{
    float a = fabsf(v);
    if (!(a < max)) return isnan(v) ? v : copysignf(max, v);
    int e = (int)(mt_f32_bits(a) >> 23) - 127;
    int qe = (e < emin ? emin : e) - mb;
    return copysignf(rintf(a * pow2f(-qe)) * pow2f(qe), v);
}

static inline float ld(const void *x, mtk_dtype t, size_t i)
{
    if (t == MTK_BF16) return mt_bf16_to_f32(((const uint16_t *)x)[i]);
    if (t == MTK_F16) return mt_f16_to_f32(((const uint16_t *)x)[i]);
    return ((const float *)x)[i];
}
static inline void st(void *y, mtk_dtype t, size_t i, float v)
{
    if (t == MTK_BF16) ((uint16_t *)y)[i] = mt_f32_to_bf16(v);
    else if (t == MTK_F16) ((uint16_t *)y)[i] = mt_f32_to_f16(v);
    else ((float *)y)[i] = v;
}

void cpu_fp8_qdq(mtk *k, void *y, const void *x, size_t n, mtk_fp8 fmt, const float *scale, float *amax)
{
    const mtk_dtype t = k->act;
    const int emin = mtk_fp8_emin(fmt), mb = mtk_fp8_mbits(fmt);
    const float max = mtk_fp8_max(fmt), s = *scale, inv = 1.0f / s;
    float m = 0.0f;
#pragma omp parallel for schedule(static) reduction(max : m)
    for (size_t i = 0; i < n; i++) {
        float v = ld(x, t, i), a = fabsf(v);
        m = a > m ? a : m;   /* NaN left out */
        st(y, t, i, fp8_round(v * s, emin, mb, max) * inv);
    }
    if (amax) *amax = fmaxf(*amax, m);
}

void cpu_fp8_scale_update(mtk *k, float *history, float *scale, int S, int L, mtk_fp8 fmt, mtk_amax_algo algo,
                          int margin)
{
    (void)k;
    const float scaled_max = mtk_fp8_max(fmt) * pow2f(-margin);
    for (int j = 0; j < S; j++) {
        float *h = history + j, last = h[0], amax = last;
        if (algo == MTK_AMAX_MAX)
            for (int i = 1; i < L; i++) amax = fmaxf(amax, h[(size_t)i * S]);
        for (int i = 0; i + 1 < L; i++) h[(size_t)i * S] = h[(size_t)(i + 1) * S];
        h[(size_t)(L - 1) * S] = last;
        h[0] = 0.0f;
        if (isfinite(amax) && amax > 0.0f) scale[j] = scaled_max / amax;
    }
}
