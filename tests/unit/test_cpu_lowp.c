/* test_cpu_lowp.c: the cpu backend's reduced-precision paths are exactly "fp32 arithmetic on the stored
 * values, one rounding per stored output": every operation that stages its bf16/fp16 operands a block at
 * a time (elementwise, LayerNorm forward, the cross-entropy pieces, the embedding) gives bit for bit what
 * the fp32 backend gives on the same values converted to fp32, with its outputs rounded, at sizes of
 * several blocks and odd tails (the conformance suite, test_kernels, holds the same paths to a reference
 * within a tolerance). Also: the bf16 matrix products through oneDNN against fp32 products of the same
 * bf16 values within the error of rounding the output, and their weight gradient accumulating; and the
 * same bf16 cases again on the path of a CPU for which oneDNN has no bf16 matmul (MT_CPU_BF16=fp32, the
 * path ONEDNN_MAX_CPU_ISA=AVX2 or an AVX2-only CPU gets), whose products are the fp32 backend's to the bit;
 * on such a CPU the first bf16 pass is that path, and it is not run twice. */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>

#include "kernels.h"
#include "t.h"

static mtk *kl, *kf;   /* reduced precision, fp32 */
static mtk_dtype DT;
static int STAGED;     /* kl's linear layers multiply the 16-bit values in fp32 (fp16; bf16 without oneDNN's) */

static mtk *open_dt(mtk_dtype dt)
{
    mt_err e;
    mtk *k = mtk_open(&(mtk_config){.backend = "cpu", .threads = 2, .act_dtype = dt}, &e);
    if (!k) {
        fprintf(stderr, "%s\n", e.msg);
        exit(1);
    }
    mtk_limits l = {.max_act = 1 << 22, .max_flat = 1 << 20, .max_seq = 64, .max_head_size = 64};
    if (mtk_reserve(k, &l, &e)) {
        fprintf(stderr, "%s\n", e.msg);
        exit(1);
    }
    return k;
}

/* every device buffer of a case, freed by release() at its end */
static struct {
    mtk *k;
    void *p;
} bufs[64];
static int nbufs;
static void *dev(mtk *k, size_t bytes)
{
    void *p = mtk_alloc(k, bytes, NULL);
    if (!p || nbufs == 64) {
        fprintf(stderr, "test_cpu_lowp: out of memory\n");
        exit(1);
    }
    bufs[nbufs].k = k, bufs[nbufs++].p = p;
    return p;
}
static void release(void)
{
    while (nbufs) nbufs--, mtk_free(bufs[nbufs].k, bufs[nbufs].p);
}

static uint64_t rng = 88172645463325252ull;
static float urand(void)
{
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (float)(rng >> 40) / 16777216.0f * 2.0f - 1.0f;
}

/* n random values scaled by s, stored in DT on kl (returned) and the same values in fp32 on kf (*f). */
static void *rnd(size_t n, float s, float **f)
{
    float *h = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) h[i] = urand() * s;
    void *d = dev(kl, n * 2);
    mtk_convert(kl, d, DT, h, MTK_F32, n);
    *f = dev(kf, n * sizeof(float));
    mtk_convert(kf, *f, MTK_F32, d, DT, n);   /* the stored values */
    free(h);
    return d;
}
static void *lbuf(size_t n) { return dev(kl, n * 2); }
static float *fbuf(size_t n) { return dev(kf, n * sizeof(float)); }

/* 1 when the DT buffer d holds exactly the fp32 values f rounded to DT. */
static int same(const void *d, const float *f, size_t n)
{
    uint16_t *r = malloc(n * 2);
    mtk_convert(kf, r, DT, f, MTK_F32, n);
    int ok = !memcmp(r, d, n * 2);
    free(r);
    return ok;
}
static int same_f(const float *a, const float *b, size_t n) { return !memcmp(a, b, n * sizeof(float)); }

enum { N_EW = 3 * 16384 + 77 };

TEST(elementwise)
{
    float *fa, *fb;
    void *a = rnd(N_EW, 3, &fa), *b = rnd(N_EW, 3, &fb), *o = lbuf(N_EW);
    float *fo = fbuf(N_EW);
    mtk_gelu_fwd(kl, o, a, N_EW, 0), mtk_gelu_fwd(kf, fo, fa, N_EW, 0);
    T_CHECK(same(o, fo, N_EW));
    mtk_gelu_fwd(kl, o, a, N_EW, 1), mtk_gelu_fwd(kf, fo, fa, N_EW, 1);
    T_CHECK(same(o, fo, N_EW));
    mtk_gelu_bwd(kl, o, a, b, N_EW, 0), mtk_gelu_bwd(kf, fo, fa, fb, N_EW, 0);
    T_CHECK(same(o, fo, N_EW));
    mtk_add(kl, o, a, b, N_EW), mtk_add(kf, fo, fa, fb, N_EW);
    T_CHECK(same(o, fo, N_EW));
    /* acc and scale in place: the fp32 side takes the rounded state each time, as the stored one is */
    mtk_acc(kl, o, a, N_EW), mtk_convert(kf, fo, MTK_F32, o, DT, N_EW);
    mtk_acc(kl, o, b, N_EW), mtk_acc(kf, fo, fb, N_EW);
    T_CHECK(same(o, fo, N_EW));
    mtk_convert(kf, fo, MTK_F32, o, DT, N_EW);
    mtk_scale(kl, o, 0.37f, N_EW), mtk_scale(kf, fo, 0.37f, N_EW);
    T_CHECK(same(o, fo, N_EW));
    /* dropout: the mask of element i is counter offset + i however the call is cut into blocks */
    mtk_dropout d = {.p = 0.3f, .seed = 99, .offset = 12345};
    mtk_dropout_fwd(kl, o, a, N_EW, &d), mtk_dropout_fwd(kf, fo, fa, N_EW, &d);
    T_CHECK(same(o, fo, N_EW));
    mtk_dropout_bwd(kl, o, b, N_EW, &d), mtk_dropout_bwd(kf, fo, fb, N_EW, &d);
    T_CHECK(same(o, fo, N_EW));
    T_CHECK(mtk_status(kl, NULL) == 0 && mtk_status(kf, NULL) == 0);
    release();
}

TEST(layernorm_forward)
{
    int N = 45, C = 771;   /* 21 rows a block: three blocks, the last short */
    float *fx, *fw, *fb2;
    void *x = rnd((size_t)N * C, 2, &fx), *o = lbuf((size_t)N * C);
    rnd(C, 1, &fw), rnd(C, 1, &fb2);
    float *fo = fbuf((size_t)N * C), *m1 = fbuf(N), *r1 = fbuf(N), *m2 = fbuf(N), *r2 = fbuf(N);
    mtk_layernorm_fwd(kl, o, m1, r1, x, fw, fb2, N, C, 1e-5f);
    mtk_layernorm_fwd(kf, fo, m2, r2, fx, fw, fb2, N, C, 1e-5f);
    T_CHECK(same(o, fo, (size_t)N * C));
    T_CHECK(same_f(m1, m2, N) && same_f(r1, r2, N));
    release();
}

TEST(cross_entropy)
{
    int N = 5, V = 20000;   /* rows wider than a block: one row per block */
    float *fx;
    void *x = rnd((size_t)N * V, 8, &fx);
    int32_t tg[5] = {0, 19999, 777, 5, 12345};
    float ds[5] = {0.5f, 1, 2, 0.25f, 1};
    float *l1 = fbuf(N), *l2 = fbuf(N), *rm1 = fbuf(N), *rm2 = fbuf(N), *se1 = fbuf(N), *se2 = fbuf(N), *tl1 = fbuf(N),
          *tl2 = fbuf(N);
    mtk_xent_fwd_bwd(kl, l1, NULL, x, tg, NULL, N, V), mtk_xent_fwd_bwd(kf, l2, NULL, fx, tg, NULL, N, V);
    T_CHECK(same_f(l1, l2, N));
    mtk_xent_rowmax(kl, rm1, x, N, V), mtk_xent_rowmax(kf, rm2, fx, N, V);
    T_CHECK(same_f(rm1, rm2, N));
    mtk_xent_sumexp(kl, se1, tl1, x, rm1, tg, N, V, 100), mtk_xent_sumexp(kf, se2, tl2, fx, rm2, tg, N, V, 100);
    T_CHECK(same_f(se1, se2, N) && same_f(tl1, tl2, N));
    void *d = lbuf((size_t)N * V);
    float *fd = fbuf((size_t)N * V);
    mtk_xent_bwd(kl, d, x, rm1, se1, tg, ds, N, V, 100), mtk_xent_bwd(kf, fd, fx, rm2, se2, tg, ds, N, V, 100);
    T_CHECK(same(d, fd, (size_t)N * V));
    /* in place, as the model's backward runs it */
    mtk_xent_fwd_bwd(kl, l1, x, x, tg, ds, N, V), mtk_xent_fwd_bwd(kf, l2, fx, fx, tg, ds, N, V);
    T_CHECK(same_f(l1, l2, N) && same(x, fx, (size_t)N * V));
    T_CHECK(mtk_status(kl, NULL) == 0);
    release();
}

TEST(embedding)
{
    int B = 3, T = 7, C = 96, nv = 50, v0 = 10, P = 16;
    float *fte, *fpe;
    void *te = rnd((size_t)nv * C, 1, &fte), *pe = rnd((size_t)P * C, 1, &fpe), *o = lbuf((size_t)B * T * C);
    float *fo = fbuf((size_t)B * T * C);
    int32_t tok[21];
    for (int i = 0; i < 21; i++) tok[i] = (i * 7) % 70;   /* some outside the shard [10, 60) */
    int32_t *dt1 = dev(kl, sizeof tok), *dt2 = dev(kf, sizeof tok);
    mtk_to_device(kl, dt1, tok, sizeof tok), mtk_to_device(kf, dt2, tok, sizeof tok);
    mtk_embed_fwd(kl, o, dt1, te, pe, B, T, C, 5, v0, nv), mtk_embed_fwd(kf, fo, dt2, fte, fpe, B, T, C, 5, v0, nv);
    T_CHECK(same(o, fo, (size_t)B * T * C));
    mtk_embed_fwd(kl, o, dt1, te, NULL, B, T, C, 0, v0, nv), mtk_embed_fwd(kf, fo, dt2, fte, NULL, B, T, C, 0, v0, nv);
    T_CHECK(same(o, fo, (size_t)B * T * C));
    release();
}

TEST(matmul)
{
    /* bf16: oneDNN's bf16 products; fp16: the operands staged through the fp32 ones. Either way one rounding
     * of the output to the dtype: 8 bits (bf16), 11 bits (fp16) */
    const double out_tol = DT == MTK_BF16 ? 1.0 / 128 : 1.0 / 1024;
    int N = 67, C = 41, OC = 4500;   /* more weight-gradient rows than one slab (2048) */
    float *fx, *fw, *fdy;
    void *x = rnd((size_t)N * C, 1, &fx), *w = rnd((size_t)OC * C, 1, &fw), *dy = rnd((size_t)N * OC, 1, &fdy);
    float *bias, *fo = fbuf((size_t)N * OC), *h = malloc((size_t)N * OC * 4), *g = malloc((size_t)N * OC * 4);
    rnd(OC, 1, &bias);
    void *o = lbuf((size_t)N * OC);
    mtk_matmul_fwd(kl, o, x, w, bias, N, C, OC), mtk_matmul_fwd(kf, fo, fx, fw, bias, N, C, OC);
    if (STAGED) T_CHECK(same(o, fo, (size_t)N * OC));   /* the fp32 product, rounded once */
    mtk_convert(kf, h, MTK_F32, o, DT, (size_t)N * OC);
    mtk_to_host(kf, g, fo, (size_t)N * OC * 4);
    double worst = 0;
    for (size_t i = 0; i < (size_t)N * OC; i++) worst = fmax(worst, fabs(h[i] - g[i]) / fmax(1.0, fabs(g[i])));
    T_CHECK(worst < out_tol);   /* one rounding of the output */
    /* dW accumulates: two backward passes give twice one (fp32 sums of the same products) */
    float *dw1 = fbuf((size_t)OC * C), *dw2 = fbuf((size_t)OC * C), *db = fbuf(OC);
    mtk_matmul_bwd(kl, NULL, dw1, db, dy, x, w, N, C, OC, MTK_GRAD_ACCUMULATE);
    mtk_matmul_bwd(kf, NULL, dw2, NULL, fdy, fx, fw, N, C, OC, MTK_GRAD_ACCUMULATE);
    mtk_matmul_bwd(kl, NULL, dw1, NULL, dy, x, w, N, C, OC, MTK_GRAD_ACCUMULATE);
    mtk_matmul_bwd(kf, NULL, dw2, NULL, fdy, fx, fw, N, C, OC, MTK_GRAD_ACCUMULATE);
    worst = 0;
    for (size_t i = 0; i < (size_t)OC * C; i++) worst = fmax(worst, fabs(dw1[i] - dw2[i]) / fmax(1.0, fabs(dw2[i])));
    T_CHECK(worst < 1e-4);   /* fp32 accumulation of exact products of 16-bit values, only the order differs */
    if (STAGED) T_CHECK(same_f(dw1, dw2, (size_t)OC * C));
    /* and the fp32 products (oneDNN, in slabs) against OpenBLAS's */
    setenv("MT_CPU_SGEMM", "openblas", 1);
    mtk *ko = open_dt(MTK_F32);
    unsetenv("MT_CPU_SGEMM");
    float *dw3 = mtk_alloc(ko, (size_t)OC * C * sizeof(float), NULL);
    mtk_matmul_bwd(ko, NULL, dw3, NULL, fdy, fx, fw, N, C, OC, MTK_GRAD_ACCUMULATE);
    mtk_matmul_bwd(ko, NULL, dw3, NULL, fdy, fx, fw, N, C, OC, MTK_GRAD_ACCUMULATE);
    worst = 0;
    for (size_t i = 0; i < (size_t)OC * C; i++) worst = fmax(worst, fabs(dw3[i] - dw2[i]) / fmax(1.0, fabs(dw3[i])));
    T_CHECK(worst < 1e-5);
    mtk_free(ko, dw3);
    mtk_close(ko);
    void *dx = lbuf((size_t)N * C);
    float *fdx = fbuf((size_t)N * C);
    mtk_matmul_bwd(kl, dx, NULL, NULL, dy, x, w, N, C, OC, MTK_GRAD_ACCUMULATE);
    mtk_matmul_bwd(kf, fdx, NULL, NULL, fdy, fx, fw, N, C, OC, MTK_GRAD_ACCUMULATE);
    if (STAGED) T_CHECK(same(dx, fdx, (size_t)N * C));
    mtk_convert(kf, h, MTK_F32, dx, DT, (size_t)N * C);
    worst = 0;
    for (size_t i = 0; i < (size_t)N * C; i++) worst = fmax(worst, fabs(h[i] - fdx[i]) / fmax(1.0, fabs(fdx[i])));
    T_CHECK(worst < out_tol);
    T_CHECK(mtk_status(kl, NULL) == 0);
    free(h), free(g);
    release();
}

T_MAIN_BEGIN("test_cpu_lowp")
kf = open_dt(MTK_F32);
int bf16_staged = 0;   /* the first pass took the fp32 products already: this CPU has no oneDNN bf16 matmul */
for (int d = 0; d < 3; d++) {
    /* bf16 as this CPU runs it, bf16 through fp32 products, fp16 */
    DT = d == 2 ? MTK_F16 : MTK_BF16;
    if (d == 1 && bf16_staged) {
        /* MT_CPU_BF16=fp32 would choose what the first pass chose (kernels/cpu/ops.c, products_choose):
         * the same kernels on the same values again (cpu-avx2.sh's emulated AVX2 CPU is such a CPU) */
        printf("# bf16 (fp32 products): the bf16 cases above ran on this path\n");
        continue;
    }
    if (d == 1) setenv("MT_CPU_BF16", "fp32", 1);
    kl = open_dt(DT);
    unsetenv("MT_CPU_BF16");
    STAGED = d > 0 || !strstr(mtk_products(kl), "oneDNN's bf16");
    if (d == 0) bf16_staged = STAGED;
    printf("# %s: products through %s\n", mtk_dtype_name(DT), mtk_products(kl));
    static const char *const names[] = {"bf16 ", "bf16 (fp32 products) ", "fp16 "};
    char nm[64];
#define RUN_DT(name) (snprintf(nm, sizeof nm, "%s%s", names[d], #name), t_run(nm, name))
    RUN_DT(elementwise);
    RUN_DT(layernorm_forward);
    RUN_DT(cross_entropy);
    RUN_DT(embedding);
    RUN_DT(matmul);
    mtk_close(kl);
}
mtk_close(kf);
T_MAIN_END
