/* mt19937.c: numpy legacy RandomState MT19937 seeding, draws, interval and shuffle (see mt19937.h). */
#include "util/mt19937.h"

#define MT_M 397
#define MATRIX_A 0x9908b0dfU
#define UPPER_MASK 0x80000000U
#define LOWER_MASK 0x7fffffffU

void mt_rs_seed(mt_rs *rs, uint32_t seed)
{
    rs->key[0] = seed;
    for (int i = 1; i < MT_RS_N; i++)
        rs->key[i] = 1812433253U * (rs->key[i - 1] ^ (rs->key[i - 1] >> 30)) + (uint32_t)i;
    rs->pos = MT_RS_N;
}

static void regenerate(mt_rs *rs)
{
    uint32_t *k = rs->key, y;
    int i;
    for (i = 0; i < MT_RS_N - MT_M; i++) {
        y = (k[i] & UPPER_MASK) | (k[i + 1] & LOWER_MASK);
        k[i] = k[i + MT_M] ^ (y >> 1) ^ (-(y & 1) & MATRIX_A);
    }
    for (; i < MT_RS_N - 1; i++) {
        y = (k[i] & UPPER_MASK) | (k[i + 1] & LOWER_MASK);
        k[i] = k[i + (MT_M - MT_RS_N)] ^ (y >> 1) ^ (-(y & 1) & MATRIX_A);
    }
    y = (k[MT_RS_N - 1] & UPPER_MASK) | (k[0] & LOWER_MASK);
    k[MT_RS_N - 1] = k[MT_M - 1] ^ (y >> 1) ^ (-(y & 1) & MATRIX_A);
    rs->pos = 0;
}

uint32_t mt_rs_next32(mt_rs *rs)
{
    if (rs->pos >= MT_RS_N) regenerate(rs);
    uint32_t y = rs->key[rs->pos++];
    y ^= y >> 11;
    y ^= (y << 7) & 0x9d2c5680U;
    y ^= (y << 15) & 0xefc60000U;
    y ^= y >> 18;
    return y;
}

uint64_t mt_rs_next64(mt_rs *rs)
{
    uint64_t hi = mt_rs_next32(rs);
    return (hi << 32) | mt_rs_next32(rs);
}

uint64_t mt_rs_interval(mt_rs *rs, uint64_t max)
{
    if (max == 0) return 0;
    uint64_t mask = max, v;
    mask |= mask >> 1;
    mask |= mask >> 2;
    mask |= mask >> 4;
    mask |= mask >> 8;
    mask |= mask >> 16;
    mask |= mask >> 32;
    if (max <= 0xffffffffULL) {
        while ((v = (mt_rs_next32(rs) & mask)) > max) {}
    } else {
        while ((v = (mt_rs_next64(rs) & mask)) > max) {}
    }
    return v;
}

#define SHUFFLE(name, T)                                                                                     \
    void name(mt_rs *rs, T *a, size_t n)                                                                     \
    {                                                                                                        \
        for (size_t i = n; i-- > 1;) {                                                                       \
            size_t j = (size_t)mt_rs_interval(rs, i);                                                        \
            T t = a[i];                                                                                      \
            a[i] = a[j];                                                                                     \
            a[j] = t;                                                                                        \
        }                                                                                                    \
    }
SHUFFLE(mt_rs_shuffle_i32, int32_t)
SHUFFLE(mt_rs_shuffle_u32, uint32_t)
SHUFFLE(mt_rs_shuffle_i64, int64_t)
