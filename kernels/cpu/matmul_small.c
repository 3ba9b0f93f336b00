/* matmul_small.c: the linear layer for a few rows (cpu.h's MT_CPU_SMALL_N: how few), as in token-by-token
 * generation and a server's decoding steps: out[n] = inp[n] . W^T + bias. A BLAS GEMM would repack the whole weight
 * matrix for every call, which costs more than the product; here each weight row is read once, straight
 * from memory, and dotted with every input row while it is in cache.
 *
 * On x86-64 with AVX-512 or AVX2 (chosen at run time) the products go in tiles of input rows by four
 * weight rows, one vector accumulator per pair, so that each load of a weight chunk or an input chunk
 * feeds several multiply-adds; the weight rows a few tiles ahead are prefetched, since a model's weights
 * do not fit in the caches and stream from memory at every step. The work is split over the OpenMP
 * threads by output rows.
 *
 * Every output is computed the same way whatever the tile, the thread count or the number of rows N: its
 * lanes sum the inner dimension in order, then a fixed tree adds the lanes. So a row's result does not
 * depend on the other rows of the call, which a server's batch relies on (its answers equal a
 * single-request run's). The portable fallback keeps the same property with its own order. */
#include <pthread.h>

#include "cpu.h"

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#include <immintrin.h>
#define MT_SMALL_X86 1
#endif

enum {
    BLOCK = 32,   /* output rows a thread takes at a time */
    AHEAD = 8     /* weight rows prefetched ahead: two tiles, the best of 1, 2, 4 and 8 tiles on a Zen 5 */
};

/* Portable: one output at a time, the inner dimension summed by the compiler's vector lanes. */
static void rows_plain(float *out, const float *inp, const float *w, const float *bias, int N, int C, int OC, int o0,
                       int o1)
{
    for (int o = o0; o < o1; o++) {
        const float *wr = w + (size_t)o * C;
        for (int n = 0; n < N; n++) {
            const float *x = inp + (size_t)n * C;
            float acc = 0;
#pragma omp simd reduction(+ : acc)
            for (int c = 0; c < C; c++) acc += x[c] * wr[c];
            out[(size_t)n * OC + o] = acc + (bias ? bias[o] : 0.0f);
        }
    }
}

#ifdef MT_SMALL_X86
#define T512 __attribute__((target("avx512f")))
#define T256 __attribute__((target("avx2,fma")))
#define INLINE static inline __attribute__((always_inline))

/* The 16 lanes of v summed by a fixed tree. */
INLINE T512 float hsum16(__m512 v)
{
    __m256 a = _mm256_add_ps(_mm512_castps512_ps256(v), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
    __m128 b = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    b = _mm_add_ps(b, _mm_movehl_ps(b, b));
    return _mm_cvtss_f32(_mm_add_ss(b, _mm_movehdup_ps(b)));
}

/* The 8 lanes of v summed by a fixed tree. */
INLINE T256 float hsum8(__m256 v)
{
    __m128 b = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    b = _mm_add_ps(b, _mm_movehl_ps(b, b));
    return _mm_cvtss_f32(_mm_add_ss(b, _mm_movehdup_ps(b)));
}

/* R input rows (x, stride C) by J weight rows from row o: y[r * OC + o + j]. pf: weight rows to prefetch
 * (J of them, stride C), or NULL. R and J are constants at every call, so the loops unroll and the R x J
 * accumulators stay in registers. */
INLINE T512 void tile512(float *y, const float *x, const float *w, const float *bias, const float *pf, int C, int OC,
                         int o, int R, int J)
{
    __m512 acc[4][4];
    const float *wo = w + (size_t)o * C;
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int j = 0; j < J; j++) acc[r][j] = _mm512_setzero_ps();
    int c = 0;
    for (; c + 16 <= C; c += 16) {
        __m512 wv[4];
#pragma GCC unroll 4
        for (int j = 0; j < J; j++) wv[j] = _mm512_loadu_ps(wo + (size_t)j * C + c);
        if (pf)
#pragma GCC unroll 4
            for (int j = 0; j < J; j++) _mm_prefetch((const char *)(pf + (size_t)j * C + c), _MM_HINT_T0);
#pragma GCC unroll 4
        for (int r = 0; r < R; r++) {
            __m512 xv = _mm512_loadu_ps(x + (size_t)r * C + c);
#pragma GCC unroll 4
            for (int j = 0; j < J; j++) acc[r][j] = _mm512_fmadd_ps(xv, wv[j], acc[r][j]);
        }
    }
    if (c < C) {   /* the tail, zeros beyond C */
        __mmask16 m = (__mmask16)((1u << (C - c)) - 1);
        __m512 wv[4];
#pragma GCC unroll 4
        for (int j = 0; j < J; j++) wv[j] = _mm512_maskz_loadu_ps(m, wo + (size_t)j * C + c);
#pragma GCC unroll 4
        for (int r = 0; r < R; r++) {
            __m512 xv = _mm512_maskz_loadu_ps(m, x + (size_t)r * C + c);
#pragma GCC unroll 4
            for (int j = 0; j < J; j++) acc[r][j] = _mm512_fmadd_ps(xv, wv[j], acc[r][j]);
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int j = 0; j < J; j++) y[(size_t)r * OC + o + j] = hsum16(acc[r][j]) + (bias ? bias[o + j] : 0.0f);
}

/* As tile512 with 8 lanes; at most 2 x 4 accumulators (AVX2 has 16 vector registers). */
INLINE T256 void tile256(float *y, const float *x, const float *w, const float *bias, const float *pf, int C, int OC,
                         int o, int R, int J)
{
    __m256 acc[2][4];
    const float *wo = w + (size_t)o * C;
#pragma GCC unroll 2
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int j = 0; j < J; j++) acc[r][j] = _mm256_setzero_ps();
    int c = 0;
    for (; c + 8 <= C; c += 8) {
        __m256 wv[4];
#pragma GCC unroll 4
        for (int j = 0; j < J; j++) wv[j] = _mm256_loadu_ps(wo + (size_t)j * C + c);
        if (pf && !(c & 15))   /* a line of 64 bytes every other chunk */
#pragma GCC unroll 4
            for (int j = 0; j < J; j++) _mm_prefetch((const char *)(pf + (size_t)j * C + c), _MM_HINT_T0);
#pragma GCC unroll 2
        for (int r = 0; r < R; r++) {
            __m256 xv = _mm256_loadu_ps(x + (size_t)r * C + c);
#pragma GCC unroll 4
            for (int j = 0; j < J; j++) acc[r][j] = _mm256_fmadd_ps(xv, wv[j], acc[r][j]);
        }
    }
    if (c < C) {
        const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
        __m256i m = _mm256_cmpgt_epi32(_mm256_set1_epi32(C - c), lane);
        __m256 wv[4];
#pragma GCC unroll 4
        for (int j = 0; j < J; j++) wv[j] = _mm256_maskload_ps(wo + (size_t)j * C + c, m);
#pragma GCC unroll 2
        for (int r = 0; r < R; r++) {
            __m256 xv = _mm256_maskload_ps(x + (size_t)r * C + c, m);
#pragma GCC unroll 4
            for (int j = 0; j < J; j++) acc[r][j] = _mm256_fmadd_ps(xv, wv[j], acc[r][j]);
        }
    }
#pragma GCC unroll 2
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int j = 0; j < J; j++) y[(size_t)r * OC + o + j] = hsum8(acc[r][j]) + (bias ? bias[o + j] : 0.0f);
}

/* Output rows [o0, o1): tiles of 4 weight rows by 4, 2 or 1 input rows; a last 1..3 weight rows one by one
 * (a single input row: every weight row one by one). The first input tile of each weight tile prefetches
 * the weight rows AHEAD further on. */
static T512 void rows512(float *out, const float *inp, const float *w, const float *bias, int N, int C, int OC, int o0,
                         int o1)
{
    int o = o0;
    if (N == 1) {   /* one weight row at a time streams best */
        for (; o < o1; o++) tile512(out, inp, w, bias, o + AHEAD < OC ? w + (size_t)(o + AHEAD) * C : NULL, C, OC, o, 1, 1);
        return;
    }
    for (; o + 4 <= o1; o += 4) {
        const float *pf = o + AHEAD + 4 <= OC ? w + (size_t)(o + AHEAD) * C : NULL;
        int n = 0;
        for (; n + 4 <= N; n += 4, pf = NULL) tile512(out + (size_t)n * OC, inp + (size_t)n * C, w, bias, pf, C, OC, o, 4, 4);
        for (; n + 2 <= N; n += 2, pf = NULL) tile512(out + (size_t)n * OC, inp + (size_t)n * C, w, bias, pf, C, OC, o, 2, 4);
        for (; n < N; n++, pf = NULL) tile512(out + (size_t)n * OC, inp + (size_t)n * C, w, bias, pf, C, OC, o, 1, 4);
    }
    for (; o < o1; o++)
        for (int n = 0; n < N; n++) tile512(out + (size_t)n * OC, inp + (size_t)n * C, w, bias, NULL, C, OC, o, 1, 1);
}

static T256 void rows256(float *out, const float *inp, const float *w, const float *bias, int N, int C, int OC, int o0,
                         int o1)
{
    int o = o0;
    if (N == 1) {   /* one weight row at a time streams best */
        for (; o < o1; o++) tile256(out, inp, w, bias, o + AHEAD < OC ? w + (size_t)(o + AHEAD) * C : NULL, C, OC, o, 1, 1);
        return;
    }
    for (; o + 4 <= o1; o += 4) {
        const float *pf = o + AHEAD + 4 <= OC ? w + (size_t)(o + AHEAD) * C : NULL;
        int n = 0;
        for (; n + 2 <= N; n += 2, pf = NULL) tile256(out + (size_t)n * OC, inp + (size_t)n * C, w, bias, pf, C, OC, o, 2, 4);
        for (; n < N; n++, pf = NULL) tile256(out + (size_t)n * OC, inp + (size_t)n * C, w, bias, pf, C, OC, o, 1, 4);
    }
    for (; o < o1; o++)
        for (int n = 0; n < N; n++) tile256(out + (size_t)n * OC, inp + (size_t)n * C, w, bias, NULL, C, OC, o, 1, 1);
}
#endif

typedef void rows_fn(float *, const float *, const float *, const float *, int, int, int, int, int);

static rows_fn *rows = rows_plain;
static pthread_once_t rows_once = PTHREAD_ONCE_INIT;

/* The widest path this CPU runs. */
static void rows_choose(void)
{
#ifdef MT_SMALL_X86
    if (__builtin_cpu_supports("avx512f")) rows = rows512;
    else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) rows = rows256;
#endif
}

void cpu_matmul_small(float *out, const float *inp, const float *w, const float *bias, int N, int C, int OC)
{
    pthread_once(&rows_once, rows_choose);
    int nb = (OC + BLOCK - 1) / BLOCK;
#pragma omp parallel for schedule(static)
    for (int b = 0; b < nb; b++) {
        int o0 = b * BLOCK, o1 = o0 + BLOCK < OC ? o0 + BLOCK : OC;
        rows(out, inp, w, bias, N, C, OC, o0, o1);
    }
}
