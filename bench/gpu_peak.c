/* gpu_peak.c: the device's measured bf16 GEMM rate through the kernel library (the cuda backend's
 * cuBLASLt wrapper), the denominator of bench/gpu's MFU. Prints "bf16_gemm_tflops X" for the best of
 * several timed n^3 products (default n = 8192), or "not measured: <why>" and exits 3 when no CUDA
 * backend or GPU can be opened. Usage: gpu_peak [n] [device] */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "kernels.h"

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
    const int n = argc > 1 ? atoi(argv[1]) : 8192, dev = argc > 2 ? atoi(argv[2]) : 0;
    mt_err e;
    mtk *k = mtk_open(&(mtk_config){.backend = "cuda", .device = dev, .act_dtype = MTK_BF16}, &e);
    if (!k) {
        printf("not measured: %s\n", e.msg);
        return 3;
    }
    const size_t nn = (size_t)n * n;
    mtk_limits lim = {.max_act = nn, .max_flat = 1};
    void *a = mtk_alloc(k, nn * 2, &e), *b = a ? mtk_alloc(k, nn * 2, &e) : NULL, *c = b ? mtk_alloc(k, nn * 2, &e) : NULL;
    if (!c || mtk_reserve(k, &lim, &e)) {
        printf("not measured: %s\n", e.msg);
        return 3;
    }
    mtk_matmul_fwd(k, c, a, b, NULL, n, n, n);   /* warm-up: heuristics, clocks */
    if (mtk_sync(k, &e)) {
        printf("not measured: %s\n", e.msg);
        return 3;
    }
    double best = 1e30;
    for (int r = 0; r < 5; r++) {
        const int reps = 10;
        double t0 = now();
        for (int i = 0; i < reps; i++) mtk_matmul_fwd(k, c, a, b, NULL, n, n, n);
        mtk_sync(k, NULL);
        double t = (now() - t0) / reps;
        if (t < best) best = t;
    }
    printf("bf16_gemm_tflops %.1f\n", 2.0 * n * n * (double)n / best * 1e-12);
    mtk_free(k, a), mtk_free(k, b), mtk_free(k, c);
    mtk_close(k);
    return 0;
}
