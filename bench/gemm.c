/* gemm.c: the linear layer's three products (forward out = x W^T, backward dx = dy W and dW += dy^T x)
 * through mt's cpu kernel backend at given shapes, with fp32 operands through OpenBLAS
 * (MT_CPU_SGEMM=openblas), fp32 through oneDNN (the default), and bf16 operands as the backend
 * multiplies them on this CPU (oneDNN's bf16 matmul where it has one, else the fp32 products of the bf16
 * values; the path is printed first), fp32 accumulation, best of several repetitions after a warm-up.
 * Prints one row per shape with GFLOP/s of each (2 N C OC flops per product). Built and run by
 * bench/gemm-cpu and bench/train-cpu.
 * Usage: gemm THREADS N:C:OC... */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static char bf16_path[160];   /* the bf16 products' path, as the backend says it */

/* GFLOP/s of fwd, dinp and dw products on a backend opened with dtype and MT_CPU_SGEMM=sgemm. */
static int run(int nt, mtk_dtype dt, const char *sgemm, int N, int C, int OC, double g[3])
{
    setenv("MT_CPU_SGEMM", sgemm, 1);
    mt_err e;
    mtk *k = mtk_open(&(mtk_config){.backend = "cpu", .threads = nt, .act_dtype = dt}, &e);
    if (!k) {
        fprintf(stderr, "gemm: %s\n", e.msg);
        return -1;
    }
    if (dt == MTK_BF16) snprintf(bf16_path, sizeof bf16_path, "%s", mtk_products(k));
    size_t a = mtk_act_size(k), big = (size_t)N * C;
    if ((size_t)N * OC > big) big = (size_t)N * OC;
    if ((size_t)OC * C > big) big = (size_t)OC * C;
    mtk_limits lim = {.max_act = big, .max_flat = 1, .max_seq = 1, .max_head_size = 1};
    void *x = mtk_alloc(k, (size_t)N * C * a, &e), *w = mtk_alloc(k, (size_t)OC * C * a, &e);
    void *y = mtk_alloc(k, (size_t)N * OC * a, &e), *dx = mtk_alloc(k, (size_t)N * C * a, &e);
    float *dw = mtk_alloc(k, (size_t)OC * C * sizeof(float), &e), *bias = mtk_alloc(k, (size_t)OC * sizeof(float), &e);
    float *h = malloc(big * sizeof(float));
    if (mtk_reserve(k, &lim, &e) || !x || !w || !y || !dx || !dw || !bias || !h) {
        fprintf(stderr, "gemm: out of memory\n");
        return -1;
    }
    for (size_t i = 0; i < big; i++) h[i] = (float)((i * 2654435761u) % 1000) / 1000.0f - 0.5f;
    mtk_convert(k, x, dt, h, MTK_F32, (size_t)N * C);
    mtk_convert(k, w, dt, h, MTK_F32, (size_t)OC * C);
    mtk_convert(k, y, dt, h, MTK_F32, (size_t)N * OC);
    double flops = 2.0 * N * C * OC;
    for (int op = 0; op < 3; op++) {
        double best = 1e30;
        for (int rep = 0; rep < 6; rep++) {
            double t0 = now_s();
            if (op == 0) mtk_matmul_fwd(k, y, x, w, bias, N, C, OC);
            else if (op == 1) mtk_matmul_bwd(k, dx, NULL, NULL, y, x, w, N, C, OC, MTK_GRAD_ASSIGN);
            else mtk_matmul_bwd(k, NULL, dw, NULL, y, x, w, N, C, OC, MTK_GRAD_ACCUMULATE);
            mtk_sync(k, NULL);
            double t = now_s() - t0;
            if (rep > 0 && t < best) best = t;
        }
        g[op] = flops / best / 1e9;
    }
    int rc = mtk_status(k, &e);
    if (rc) fprintf(stderr, "gemm: %s\n", e.msg);
    mtk_free(k, x), mtk_free(k, w), mtk_free(k, y), mtk_free(k, dx), mtk_free(k, dw), mtk_free(k, bias);
    free(h);
    mtk_close(k);
    return rc;
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: gemm THREADS N:C:OC...\n");
        return 2;
    }
    int nt = atoi(argv[1]);
    double probe[3];
    if (run(nt, MTK_BF16, "onednn", 16, 16, 16, probe)) return 1;
    printf("bf16 products through %s\n", bf16_path);
    printf("%-20s | %-26s | %-26s | %-26s\n", "N x C -> OC", "fp32 OpenBLAS fwd/dx/dW", "fp32 oneDNN fwd/dx/dW",
           "bf16 fwd/dx/dW");
    double tot[3][3] = {{0}};
    for (int i = 2; i < argc; i++) {
        int N, C, OC;
        if (sscanf(argv[i], "%d:%d:%d", &N, &C, &OC) != 3 || N <= 0 || C <= 0 || OC <= 0) {
            fprintf(stderr, "gemm: bad shape %s\n", argv[i]);
            return 2;
        }
        double g[3][3];
        if (run(nt, MTK_F32, "openblas", N, C, OC, g[0]) || run(nt, MTK_F32, "onednn", N, C, OC, g[1]) ||
            run(nt, MTK_BF16, "onednn", N, C, OC, g[2]))
            return 1;
        printf("%5d x %5d -> %5d |", N, C, OC);
        for (int s = 0; s < 3; s++) {
            printf(" %7.1f %7.1f %7.1f    |", g[s][0], g[s][1], g[s][2]);
            for (int op = 0; op < 3; op++) tot[s][op] += 2.0 * N * C * OC / (g[s][op] * 1e9);
        }
        printf("\n");
    }
    double t[3];
    for (int s = 0; s < 3; s++) t[s] = tot[s][0] + tot[s][1] + tot[s][2];
    printf("all shapes, one of each product: fp32 OpenBLAS %.1f ms, fp32 oneDNN %.1f ms, bf16 %.1f ms "
           "(oneDNN fp32 %.2fx OpenBLAS, bf16 %.2fx the faster fp32)\n",
           t[0] * 1e3, t[1] * 1e3, t[2] * 1e3, t[0] / t[1], (t[0] < t[1] ? t[0] : t[1]) / t[2]);
    return 0;
}
