/* mt19937.h: numpy's legacy RandomState generator (MT19937), bit for bit.
 *
 * Seeding is init_genrand (what RandomState(int seed) does), draws are the tempered 32-bit outputs,
 * the 64-bit draw is (first << 32) | second, and random_interval/shuffle follow numpy's legacy
 * distributions code, so mt_rs_shuffle_*(rs, a, n) leaves `a` exactly as
 * numpy.random.RandomState(seed).shuffle(a) would (checked against numpy 1.24).
 */
#ifndef MT_UTIL_MT19937_H
#define MT_UTIL_MT19937_H

#include <stddef.h>
#include <stdint.h>

#define MT_RS_N 624

typedef struct mt_rs {
    uint32_t key[MT_RS_N];
    int pos;
} mt_rs;

/* RandomState(seed): seed is the full [0, 2^32-1] range numpy accepts. */
void mt_rs_seed(mt_rs *rs, uint32_t seed);
uint32_t mt_rs_next32(mt_rs *rs);
uint64_t mt_rs_next64(mt_rs *rs);
/* Uniform integer in [0, max] by masked rejection (numpy random_interval). */
uint64_t mt_rs_interval(mt_rs *rs, uint64_t max);

/* In-place Fisher-Yates as numpy's legacy shuffle of a 1-D array: for i = n-1 .. 1, swap a[i] with
 * a[random_interval(i)]. The element type does not change the draws. */
void mt_rs_shuffle_i32(mt_rs *rs, int32_t *a, size_t n);
void mt_rs_shuffle_u32(mt_rs *rs, uint32_t *a, size_t n);
void mt_rs_shuffle_i64(mt_rs *rs, int64_t *a, size_t n);

#endif
