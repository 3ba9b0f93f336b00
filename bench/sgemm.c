/* sgemm.c: the machine's single-precision matrix-multiply rate for bench/train-cpu: cblas_sgemm of
 * OpenBLAS (the library mt links) on an M x N x K product with its own threading at the given thread
 * count, best of several timed repetitions after a warm-up, printed as "GFLOP/s CORENAME" (2MNK flops per
 * product; CORENAME is the kernel set OpenBLAS chose for this CPU).
 * Usage: sgemm THREADS [M N K] (default 1024 1024 1024). Built by bench/train-cpu with cc -lopenblas. */
#define _POSIX_C_SOURCE 200809L
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
    if (argc != 2 && argc != 5) {
        fprintf(stderr, "usage: sgemm THREADS [M N K]\n");
        return 2;
    }
    int nt = atoi(argv[1]);
    int M = argc == 5 ? atoi(argv[2]) : 1024, N = argc == 5 ? atoi(argv[3]) : 1024, K = argc == 5 ? atoi(argv[4]) : 1024;
    if (nt <= 0 || M <= 0 || N <= 0 || K <= 0) {
        fprintf(stderr, "sgemm: bad sizes\n");
        return 2;
    }
    openblas_set_num_threads(nt);
    float *A = malloc(sizeof(float) * (size_t)M * K), *B = malloc(sizeof(float) * (size_t)K * N),
          *C = malloc(sizeof(float) * (size_t)M * N);
    if (!A || !B || !C) return 1;
    for (size_t i = 0; i < (size_t)M * K; i++) A[i] = (float)((i * 7919u) % 1000u) * 1e-3f - 0.5f;
    for (size_t i = 0; i < (size_t)K * N; i++) B[i] = (float)((i * 104729u) % 1000u) * 1e-3f - 0.5f;
    double flop = 2.0 * M * N * K, best = 0;
    /* enough products per repetition for about 0.1 s at 100 GFLOP/s */
    int per = (int)(1e10 / flop) + 1;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, M, N, K, 1.0f, A, K, B, N, 0.0f, C, N);
    for (int rep = 0; rep < 7; rep++) {
        double t0 = now_s();
        for (int i = 0; i < per; i++)
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, M, N, K, 1.0f, A, K, B, N, 0.0f, C, N);
        double r = flop * per / (now_s() - t0) / 1e9;
        if (r > best) best = r;
    }
    printf("%.1f %s\n", best, openblas_get_corename());
    free(A);
    free(B);
    free(C);
    return 0;
}
