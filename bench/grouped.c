/* grouped.c: the experts' grouped products (mtk_grouped_matmul_fwd / _bwd) through mt's cpu kernel
 * backend, as its tiles (the default) and as one product per expert (MT_CPU_GROUPED=loop, the reference),
 * against one product of the same rows and FLOPs (mtk_matmul_fwd / _bwd of all the rows by one expert's
 * matrix): N tokens routed to E experts, top K, with uneven counts (a Zipf-like share per expert, the
 * largest about 3x the mean), rows of C times [OC, C]. As in training, where each step routes anew, the
 * counts change from one repetition to the next (a few rows move between experts). Best of several repetitions after a warm-up;
 * prints, for fp32 and bf16, GFLOP/s of the tiles, the loop and the single forward, input gradient and
 * weight gradient, and the ratios tiles / single and loop / single. Built and run by bench/moe-cpu.
 * Usage: grouped THREADS N K E C OC */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "kernels.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* GFLOP/s of the three products, grouped (g) and single (s); loop: the grouped ones as the reference loop. */
static int run(int nt, mtk_dtype dt, int loop, int R, const int32_t *share, int E, int C, int OC, double g[3],
               double s[3])
{
    mt_err e;
    int32_t counts[1024];
    if (E > 1024) return -1;
    setenv("MT_CPU_GROUPED", loop ? "loop" : "tiles", 1);
    mtk *k = mtk_open(&(mtk_config){.backend = "cpu", .threads = nt, .act_dtype = dt}, &e);
    if (!k) {
        fprintf(stderr, "grouped: %s\n", e.msg);
        return -1;
    }
    size_t a = mtk_act_size(k), big = (size_t)R * (C > OC ? C : OC);
    mtk_limits lim = {.max_act = big, .max_flat = 1, .max_seq = 1, .max_head_size = 1};
    void *x = mtk_alloc(k, (size_t)R * C * a, &e), *w = mtk_alloc(k, (size_t)E * OC * C * a, &e);
    void *y = mtk_alloc(k, (size_t)R * OC * a, &e), *dx = mtk_alloc(k, (size_t)R * C * a, &e);
    float *dw = mtk_alloc(k, (size_t)E * OC * C * sizeof(float), &e);
    size_t hn = big > (size_t)E * OC * C ? big : (size_t)E * OC * C;
    float *h = malloc(hn * sizeof(float));
    if (mtk_reserve(k, &lim, &e) || !x || !w || !y || !dx || !dw || !h) {
        fprintf(stderr, "grouped: out of memory\n");
        return -1;
    }
    for (size_t i = 0; i < hn; i++) h[i] = (float)((i * 2654435761u) % 1000) / 1000.0f - 0.5f;
    mtk_convert(k, x, dt, h, MTK_F32, (size_t)R * C);
    mtk_convert(k, w, dt, h, MTK_F32, (size_t)E * OC * C);
    mtk_convert(k, y, dt, h, MTK_F32, (size_t)R * OC);
    double flops = 2.0 * R * C * OC;
    for (int grouped = 0; grouped < 2; grouped++)
        for (int op = 0; op < 3; op++) {
            double best = 1e30;
            for (int rep = 0; rep < 6; rep++) {
                for (int i = 0; i < E; i++) counts[i] = share[i];   /* a new routing: rows move in pairs */
                for (int i = 0; i + 1 < E; i += 2) {
                    const int want = (3 * rep + op) * (1 + i % 5), moved = want < counts[i] ? want : counts[i];
                    counts[i] -= moved, counts[i + 1] += moved;
                }
                double t0 = now_s();
                if (grouped) {
                    if (op == 0) mtk_grouped_matmul_fwd(k, y, x, w, counts, E, C, OC);
                    else if (op == 1) mtk_grouped_matmul_bwd(k, dx, NULL, y, x, w, counts, E, C, OC, MTK_GRAD_ASSIGN);
                    else mtk_grouped_matmul_bwd(k, NULL, dw, y, x, w, counts, E, C, OC, MTK_GRAD_ACCUMULATE);
                } else {
                    if (op == 0) mtk_matmul_fwd(k, y, x, w, NULL, R, C, OC);
                    else if (op == 1) mtk_matmul_bwd(k, dx, NULL, NULL, y, x, w, R, C, OC, MTK_GRAD_ASSIGN);
                    else mtk_matmul_bwd(k, NULL, dw, NULL, y, x, w, R, C, OC, MTK_GRAD_ACCUMULATE);
                }
                mtk_sync(k, NULL);
                double t = now_s() - t0;
                if (rep > 0 && t < best) best = t;
            }
            (grouped ? g : s)[op] = flops / best / 1e9;
        }
    int rc = mtk_status(k, &e);
    if (rc) fprintf(stderr, "grouped: %s\n", e.msg);
    mtk_free(k, x), mtk_free(k, w), mtk_free(k, y), mtk_free(k, dx), mtk_free(k, dw);
    free(h);
    mtk_close(k);
    return rc;
}

int main(int argc, char **argv)
{
    if (argc != 7) {
        fprintf(stderr, "usage: grouped THREADS N K E C OC\n");
        return 2;
    }
    int nt = atoi(argv[1]), N = atoi(argv[2]), K = atoi(argv[3]), E = atoi(argv[4]), C = atoi(argv[5]), OC = atoi(argv[6]);
    if (nt < 1 || N < 1 || K < 1 || E < K || C < 1 || OC < 1) return 2;
    int32_t *counts = malloc(sizeof(int32_t) * (size_t)E);
    double sum = 0;
    for (int i = 0; i < E; i++) sum += 1.0 / (1.0 + 0.35 * i);
    int R = N * K, left = R;
    for (int i = 0; i < E; i++) {   /* uneven shares summing to N K */
        counts[i] = i == E - 1 ? left : (int)floor(R * (1.0 / (1.0 + 0.35 * i)) / sum);
        left -= counts[i];
    }
    printf("%d tokens, top %d of %d experts: %d rows of %d x [%d, %d]; counts %d .. %d\n", N, K, E, R, C, OC, C,
           counts[E - 1], counts[0]);
    printf("%-5s %-8s %12s %12s %12s %12s %10s\n", "dtype", "product", "tiles", "loop", "single", "tiles/single",
           "loop/single");
    static const char *const names[3] = {"forward", "dinput", "dweight"};
    for (int d = 0; d < 2; d++) {
        mtk_dtype dt = d ? MTK_BF16 : MTK_F32;
        double g[3], s[3], l[3], s2[3];
        if (run(nt, dt, 0, R, counts, E, C, OC, g, s) || run(nt, dt, 1, R, counts, E, C, OC, l, s2)) return 1;
        for (int op = 0; op < 3; op++) {
            const double single = s[op] > s2[op] ? s[op] : s2[op];   /* the better of its two measurements */
            printf("%-5s %-8s %7.1f GF/s %7.1f GF/s %7.1f GF/s %12.3f %10.3f\n", d ? "bf16" : "fp32", names[op], g[op],
                   l[op], single, g[op] / single, l[op] / single);
        }
    }
    free(counts);
    return 0;
}
