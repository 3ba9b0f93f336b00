/* vmath.h: branch-free float exp and erfc that the compiler can vectorize (the libm calls cannot be),
 * for the softmax, GeLU and cross-entropy loops of the cpu backend. exp is accurate to a few ulp; erfc to
 * about 1e-6 relative. MTK_CLONES compiles a hot loop for AVX-512 (x86-64-v4), AVX2 and the baseline,
 * chosen at load time; the arithmetic is the same in all three (no contraction into FMA under -std=c11),
 * so results are too. AVX-512 is worth its own copy for the bf16 conversions (one narrowing instruction
 * per 16 values, against a shuffle sequence in AVX2: three times the rate). */
#ifndef MT_KERNELS_CPU_VMATH_H
#define MT_KERNELS_CPU_VMATH_H

#include <stdint.h>

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__SANITIZE_ADDRESS__) && \
    !defined(__SANITIZE_THREAD__)   /* sanitized ifunc resolvers crash at load time */
#define MTK_CLONES __attribute__((target_clones("arch=x86-64-v4", "avx2", "default")))
#else
#define MTK_CLONES
#endif

/* e^x; 0 below -87.3 (so exp(-inf) is 0), e^88.3 above 88.3, NaN for NaN. The clamp is written so that
 * NaN takes the lower bound: the float-to-int conversion below then always has a value in range (NaN's
 * would be undefined), and NaN is passed through by the last select. */
static inline float vexp(float x)
{
    const float lo = -87.3f, hi = 88.3f;
    float xc = x > lo ? (x < hi ? x : hi) : lo;
    /* x = n ln2 + r, |r| <= ln2/2; n rounded to nearest by the 1.5 * 2^23 trick */
    float nf = (xc * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
    float r = xc - nf * 0.693145751953125f;
    r = r - nf * 1.428606765330187e-06f;
    float p = 1.0f / 720.0f;
    p = p * r + 1.0f / 120.0f;
    p = p * r + 1.0f / 24.0f;
    p = p * r + 1.0f / 6.0f;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    union {
        uint32_t u;
        float f;
    } s;
    s.u = (uint32_t)((int32_t)nf + 127) << 23;
    float y = x < lo ? 0.0f : p * s.f;
    return x == x ? y : x;
}

/* erfc(z) for z >= 0 (Chebyshev fit of erfc with fractional error about 1.2e-7). */
static inline float verfc_pos(float z)
{
    float t = 1.0f / (1.0f + 0.5f * z);
    float q = 0.17087277f;
    q = q * t - 0.82215223f;
    q = q * t + 1.48851587f;
    q = q * t - 1.13520398f;
    q = q * t + 0.27886807f;
    q = q * t - 0.18628806f;
    q = q * t + 0.09678418f;
    q = q * t + 0.37409196f;
    q = q * t + 1.00002368f;
    q = q * t - 1.26551223f;
    return t * vexp(q - z * z);
}

#endif
