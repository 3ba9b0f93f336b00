/* mt_base.h: the few definitions that kernels/ and libcommon/ share, kept here so that kernels/ builds
 * on its own (it includes nothing from libcommon): the error value every library function fills, the
 * splitmix64 finaliser that derives seeds and dropout masks, and the storage dtypes with their host-side
 * conversions (round to nearest even, as CUDA's __float2bfloat16_rn and __float2half_rn). */
#ifndef MT_BASE_H
#define MT_BASE_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* A one-line message naming the file and line/offset or the operation; see libcommon/util/err.h. */
typedef struct mt_err {
    char msg[1024];
} mt_err;

/* splitmix64's finaliser (Steele, Lea, Flood 2014): a bijective 64-bit mixer. */
static inline uint64_t mt_mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
#define MT_GOLDEN64 0x9E3779B97F4A7C15ull

/* Storage types of device buffers. Arithmetic and reductions are fp32 whatever the storage. */
typedef enum mtk_dtype { MTK_F32 = 0, MTK_BF16 = 1, MTK_F16 = 2 } mtk_dtype;

static inline size_t mtk_dtype_size(mtk_dtype t) { return t == MTK_F32 ? 4 : 2; }
static inline const char *mtk_dtype_name(mtk_dtype t) { return t == MTK_F32 ? "fp32" : t == MTK_BF16 ? "bf16" : "fp16"; }

static inline uint32_t mt_f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}
static inline float mt_bits_f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* fp32 -> bf16, round to nearest even; NaN stays a (quiet) NaN. */
static inline uint16_t mt_f32_to_bf16(float f)
{
    uint32_t u = mt_f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}
static inline float mt_bf16_to_f32(uint16_t h) { return mt_bits_f32((uint32_t)h << 16); }

/* fp32 -> IEEE half, round to nearest even, overflow to inf, subnormals kept. */
static inline uint16_t mt_f32_to_f16(float f)
{
    uint32_t u = mt_f32_bits(f), sign = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return (uint16_t)(sign | 0x7e00u);          /* NaN */
    if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u);         /* rounds to >= 65520: inf */
    if (a < 0x38800000u) {                                            /* below 2^-14: subnormal or zero */
        if (a < 0x33000000u) return (uint16_t)sign;                  /* at most 2^-25: rounds to 0 */
        /* a = m * 2^(E-150) with the implicit bit in m; in units of 2^-24: m >> (126 - E), rounded */
        uint32_t m = (a & 0x7fffffu) | 0x800000u, s = 126 - (a >> 23);
        uint32_t q = m >> s, rr = m & ((1u << s) - 1u), half = 1u << (s - 1);
        if (rr > half || (rr == half && (q & 1u))) q++;
        return (uint16_t)(sign | q);
    }
    uint32_t m = a + 0xfffu + ((a >> 13) & 1u) - 0x38000000u;   /* rebias 127 -> 15, round */
    return (uint16_t)(sign | (m >> 13));
}
static inline float mt_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    if (e == 0x1f) return mt_bits_f32(sign | 0x7f800000u | (m << 13));
    if (e == 0) {
        float v = (float)m * (1.0f / 16777216.0f);   /* m * 2^-24 */
        return sign ? -v : v;
    }
    return mt_bits_f32(sign | ((e + 112) << 23) | (m << 13));
}

#endif
