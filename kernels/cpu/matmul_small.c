/* matmul_small.c: the linear layer for a few rows (N <= MT_CPU_SMALL_N), as in token-by-token generation:
 * out[n] = inp[n] . W^T + bias. A BLAS GEMM would repack the whole weight matrix for every call, which
 * costs more than the product; here each weight row is read once, straight from memory, and dotted with
 * every input row while it is in cache. The work is memory-bound, so it is split over the OpenMP threads
 * by output rows. Every output sums its inner dimension in a fixed order: results do not depend on the
 * thread count. Compiled for AVX-512, AVX2 and baseline x86-64, chosen at load time. */
#include "cpu.h"

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && \
    !defined(__SANITIZE_THREAD__)   /* sanitized ifunc resolvers crash at load time (vmath.h) */
#define MT_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define MT_CLONES
#endif

/* The dot products of one weight row with the N input rows, added to out[n * OC]. */
MT_CLONES static void rows_dot(float *out, const float *inp, const float *w, const float *bias, int N, int C, int OC,
                               int o0, int o1)
{
    int o = o0;
    /* with several inputs, four weight rows at a time (four independent sums per input, each input chunk
     * loaded once for four rows); one input streams best one row at a time */
    for (; N > 1 && o + 4 <= o1; o += 4) {
        const float *w0 = w + (size_t)o * C, *w1 = w0 + C, *w2 = w1 + C, *w3 = w2 + C;
        for (int n = 0; n < N; n++) {
            const float *x = inp + (size_t)n * C;
            float a0 = 0, a1 = 0, a2 = 0, a3 = 0;
#pragma omp simd reduction(+ : a0, a1, a2, a3)
            for (int c = 0; c < C; c++) {
                a0 += x[c] * w0[c];
                a1 += x[c] * w1[c];
                a2 += x[c] * w2[c];
                a3 += x[c] * w3[c];
            }
            float *y = out + (size_t)n * OC + o;
            y[0] = a0 + (bias ? bias[o] : 0.0f);
            y[1] = a1 + (bias ? bias[o + 1] : 0.0f);
            y[2] = a2 + (bias ? bias[o + 2] : 0.0f);
            y[3] = a3 + (bias ? bias[o + 3] : 0.0f);
        }
    }
    for (; o < o1; o++) {
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

void cpu_matmul_small(float *out, const float *inp, const float *w, const float *bias, int N, int C, int OC)
{
    enum { BLOCK = 32 };
    int nb = (OC + BLOCK - 1) / BLOCK;
#pragma omp parallel for schedule(static)
    for (int b = 0; b < nb; b++) {
        int o0 = b * BLOCK, o1 = o0 + BLOCK < OC ? o0 + BLOCK : OC;
        rows_dot(out, inp, w, bias, N, C, OC, o0, o1);
    }
}
