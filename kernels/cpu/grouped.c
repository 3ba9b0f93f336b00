/* grouped.c: the experts' grouped products on cpu (kernels.h's mtk_grouped_matmul_fwd / _bwd). Every
 * group's product is cut into tiles, and the tiles of all the groups go to the OpenMP threads from one
 * list, each tile one single-threaded product. There is no barrier between groups, small groups fill the
 * threads beside large ones, and nothing is built per group size, where one product per group (the
 * reference loop in mtk.c) builds a primitive for every new count and waits for the slowest thread at the
 * end of every group.
 *
 * Through oneDNN (dnnl.c's tiles): the forward and input-gradient products take each group's rows 256, 128
 * or 64 at a time with one fixed-size primitive (oneDNN's fastest kernels), and the rest of the group's
 * rows with one primitive whose rows are given at each run; the weight gradient's tiles take a block of its
 * rows over all the group's rows, the inner size given at each run. Through OpenBLAS (MT_CPU_SGEMM=
 * openblas, fp32): the same tiles, one sgemm call each.
 *
 * Each output element is computed by one tile; the tiling depends on the counts and the thread count
 * only, so results are the same from run to run for a given thread count. Operands are fp32, or bf16
 * where oneDNN has bf16 products (the backend's bf16_dnnl); ops.c stages the others to fp32. */
#include <cblas.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "cpu.h"

enum {
    TILES_PER_THREAD = 4,   /* aim: about this many tiles per thread, for the dynamic schedule to balance */
    COL_STEP = 64           /* column blocks are multiples of this */
};
/* The rows of a full tile of the forward and input-gradient products, by preference: oneDNN's fixed-size
 * kernels run a tile of 256 rows at the rate of one large product, one of 64 rows at about 80% of it. */
static const int FULL_ROWS[] = {256, 128, 64};

typedef struct tile {
    int g;          /* the group */
    int r0, m;      /* rows [r0, r0 + m) of the whole operand (fwd/dinp), or the group's (dw: r0 its first) */
    int n0, nb;     /* output columns (fwd/dinp) or weight-gradient rows (dw) [n0, n0 + nb) */
} tile;

typedef struct plan {
    tile *t;
    int n;
    int full;   /* the rows of a full row tile (plan_rows) */
} plan;

static int round_up(int x, int step) { return (x + step - 1) / step * step; }

/* Blocks of `len` for `want` pieces: a multiple of COL_STEP wide (all of len when it is narrower). */
static int block_width(int len, int want)
{
    if (want <= 1 || len <= COL_STEP) return len;
    int w = round_up((len + want - 1) / want, COL_STEP);
    return w < len ? w : len;
}

/* The row tiles of the groups at `full` rows a tile (the rest of a group a tile of its own). */
static int row_tiles(const int32_t *counts, int G, int full)
{
    int n = 0;
    for (int g = 0; g < G; g++) n += (counts[g] + full - 1) / full;
    return n;
}

/* The tiles of a product over each group's rows, p->full at a time (the largest of FULL_ROWS that still
 * gives every thread TILES_PER_THREAD tiles, FULL_ROWS[last] else) and then the rest, and blocks of N output
 * columns (more than one when there are too few row tiles to share). */
static int plan_rows(plan *p, const int32_t *counts, int G, int N, int nt)
{
    const int want = TILES_PER_THREAD * nt, nfull = (int)(sizeof FULL_ROWS / sizeof *FULL_ROWS);
    int i = 0;
    while (i + 1 < nfull && row_tiles(counts, G, FULL_ROWS[i]) < want) i++;
    const int full = p->full = FULL_ROWS[i], rows = row_tiles(counts, G, full);
    const int nb = block_width(N, rows ? (want + rows - 1) / rows : 1), ncb = (N + nb - 1) / nb;
    p->t = malloc(sizeof *p->t * ((size_t)rows * ncb + 1));
    if (!p->t) return -1;
    p->n = 0;
    for (int g = 0, r0 = 0; g < G; r0 += counts[g++])
        for (int a = 0; a < counts[g]; a += full) {
            const int m = counts[g] - a < full ? counts[g] - a : full;
            for (int n0 = 0; n0 < N; n0 += nb) p->t[p->n++] = (tile){g, r0 + a, m, n0, N - n0 < nb ? N - n0 : nb};
        }
    return 0;
}

/* The weight gradient's tiles: each group's [OC, C] in blocks of rows, over all the group's rows (empty
 * groups too, for an assigned gradient to be zeroed). */
static int plan_dw(plan *p, const int32_t *counts, int G, int OC, int nt)
{
    int busy = 0;
    for (int g = 0; g < G; g++) busy += counts[g] > 0;
    const int want = TILES_PER_THREAD * nt, ob = block_width(OC, busy ? (want + busy - 1) / busy : 1);
    const int nob = (OC + ob - 1) / ob;
    p->t = malloc(sizeof *p->t * ((size_t)G * nob + 1));
    if (!p->t) return -1;
    p->n = 0;
    for (int g = 0, r0 = 0; g < G; r0 += counts[g++])
        for (int o0 = 0; o0 < OC; o0 += ob) p->t[p->n++] = (tile){g, r0, counts[g], o0, OC - o0 < ob ? OC - o0 : ob};
    return 0;
}

/* A product of tiles, C = A . B (+ C) with element strides as cpu_dnnl_matmul's. A tile gives its m and its
 * width nb. Rows by groups (inner 0): C[m, nb] = A[m, K] . B[K, nb], a full tile's m through the fixed
 * primitive, other m through the one given m at the run. The weight gradient (inner 1): C[nb, N] =
 * A[nb, m] . B[m, N], the inner size m the group's rows, given at the run. Through oneDNN one primitive of
 * each kind per distinct width (at most two: the blocks and the last); through OpenBLAS one call. */
typedef struct product {
    int dnnl, inner, N, K, acc;   /* N: the fixed columns when inner; K: the fixed inner size when not */
    int full;                     /* the rows of a full row tile: its primitive's fixed M */
    mtk_dtype ab, cdt;
    long sam, sak, sbk, sbn, ldc;
    const cpu_dnnl_tile *prim[2][2];   /* [given m, fixed m][width] */
    int width[2];
} product;

/* The oneDNN primitives of the widths the tiles use; 0 or -1 (error set). */
static int product_ready(mtk *k, product *pr, const plan *p)
{
    pr->width[0] = pr->width[1] = -1;
    pr->full = p->full;
    if (!pr->dnnl) return 0;
    cpu_state *s = k->impl;
    for (int i = 0; i < p->n; i++) {
        const int nb = p->t[i].nb, j = pr->width[0] < 0 || pr->width[0] == nb ? 0 : 1;
        if (pr->width[j] == nb) continue;
        if (j == 1 && pr->width[1] >= 0) return mtk_fail(k, "grouped product: a third tile width %d", nb), -1;
        pr->width[j] = nb;
        if (pr->inner) {
            pr->prim[0][j] = cpu_dnnl_tile_get(k, s->dnnl, pr->ab, CPU_TILE_INNER, nb, pr->N, 0, pr->sam, pr->sak,
                                               pr->sbk, pr->sbn, pr->acc, pr->cdt, pr->ldc);
            pr->prim[1][j] = pr->prim[0][j];
        } else {
            pr->prim[0][j] = cpu_dnnl_tile_get(k, s->dnnl, pr->ab, CPU_TILE_ROWS, 0, nb, pr->K, pr->sam, pr->sak,
                                               pr->sbk, pr->sbn, pr->acc, pr->cdt, pr->ldc);
            pr->prim[1][j] = pr->prim[0][j] ? cpu_dnnl_tile_get(k, s->dnnl, pr->ab, CPU_TILE_FIXED, p->full, nb, pr->K,
                                                                pr->sam, pr->sak, pr->sbk, pr->sbn, pr->acc, pr->cdt,
                                                                pr->ldc)
                                             : NULL;
        }
        if (!pr->prim[0][j] || !pr->prim[1][j]) return -1;
    }
    return cpu_dnnl_tile_threads(k, s->dnnl, k->threads);
}

/* One tile's product on this thread: m rows (or inner size), nb columns; 0 or -1. */
static int product_run(mtk *k, const product *pr, int thread, int m, int nb, const void *A, const void *B, void *C)
{
    if (pr->dnnl) {
        const int j = pr->width[0] == nb ? 0 : 1, fixed = !pr->inner && m == pr->full;
        return cpu_dnnl_tile_run(((cpu_state *)k->impl)->dnnl, pr->prim[fixed][j], thread, m, A, B, C);
    }
    /* fp32 through OpenBLAS (single-threaded): op(X) is X^T when its column stride is not 1 */
    const int M = pr->inner ? nb : m, N = pr->inner ? pr->N : nb, K = pr->inner ? m : pr->K;
    const CBLAS_TRANSPOSE ta = pr->sak == 1 ? CblasNoTrans : CblasTrans, tb = pr->sbn == 1 ? CblasNoTrans : CblasTrans;
    cblas_sgemm(CblasRowMajor, ta, tb, M, N, K, 1.0f, A, (int)(pr->sak == 1 ? pr->sam : pr->sak), B,
                (int)(pr->sbn == 1 ? pr->sbk : pr->sbn), pr->acc ? 1.0f : 0.0f, C, (int)pr->ldc);
    return 0;
}

/* Runs every tile of p; each gives its operands' addresses (byte pointers). 0, or -1 with the error set. */
typedef void (*tile_operands)(const void *ctx, const tile *t, const void **A, const void **B, void **C);

static int run_tiles(mtk *k, const product *pr, const plan *p, tile_operands at, const void *ctx, const char *what)
{
    int failed = 0;
#pragma omp parallel for schedule(dynamic, 1) reduction(| : failed) num_threads(k->threads)
    for (int i = 0; i < p->n; i++) {
        const tile *t = &p->t[i];
        const void *A, *B;
        void *C;
        if (t->m <= 0) continue;
        at(ctx, t, &A, &B, &C);
        failed |= product_run(k, pr, omp_get_thread_num(), t->m, t->nb, A, B, C) != 0;
    }
    if (failed) mtk_fail(k, "oneDNN: a tile of the grouped product (%s) failed", what);
    return failed ? -1 : 0;
}

typedef struct rows_ctx {
    const char *A, *W;
    char *C;
    size_t a, lda, ldc, wgroup;   /* element bytes, the row strides of A and C, a group's weights (elements) */
    long sbn;                     /* B's column stride: where column n0 of the group's B starts */
} rows_ctx;

static void rows_operands(const void *ctx, const tile *t, const void **A, const void **B, void **C)
{
    const rows_ctx *c = ctx;
    *A = c->A + (size_t)t->r0 * c->lda * c->a;
    *B = c->W + ((size_t)t->g * c->wgroup + (size_t)t->n0 * (size_t)c->sbn) * c->a;
    *C = c->C + ((size_t)t->r0 * c->ldc + (size_t)t->n0) * c->a;
}

/* out[R, N] = A[R, K] . B_g rows by groups; B_g's element (kk, n) at W + g OC C + kk sbk + n sbn. */
static void grouped_rows(mtk *k, mtk_dtype dt, void *out, const void *A, const void *W, const int32_t *counts,
                         int G, int K, int N, long sbk, long sbn, size_t wgroup, const char *what)
{
    cpu_state *s = k->impl;
    plan p;
    if (plan_rows(&p, counts, G, N, k->threads)) {
        mtk_fail(k, "out of memory");
        return;
    }
    product pr = {.dnnl = dt != MTK_F32 || s->sgemm_dnnl, .K = K, .ab = dt, .cdt = dt, .sam = K, .sak = 1,
                  .sbk = sbk, .sbn = sbn, .ldc = N};
    rows_ctx c = {.A = A, .W = W, .C = out, .a = dt == MTK_F32 ? 4 : 2, .lda = (size_t)K, .ldc = (size_t)N,
                  .wgroup = wgroup, .sbn = sbn};
    if (!product_ready(k, &pr, &p)) run_tiles(k, &pr, &p, rows_operands, &c, what);
    free(p.t);
}

void cpu_grouped_fwd(mtk *k, mtk_dtype dt, void *out, const void *inp, const void *w, const int32_t *counts, int G,
                     int C, int OC)
{
    /* out_g = inp_g . w_g^T: B(c, o) = w_g[o C + c] */
    grouped_rows(k, dt, out, inp, w, counts, G, C, OC, 1, C, (size_t)OC * C, "forward");
}

typedef struct dw_ctx {
    const char *dout, *inp;
    float *dw;
    size_t a;
    int C, OC;
} dw_ctx;

static void dw_operands(const void *ctx, const tile *t, const void **A, const void **B, void **C)
{
    const dw_ctx *c = ctx;
    *A = c->dout + ((size_t)t->r0 * c->OC + (size_t)t->n0) * c->a;   /* dout^T: (o, r) at r OC + o */
    *B = c->inp + (size_t)t->r0 * c->C * c->a;
    *C = c->dw + ((size_t)t->g * c->OC + (size_t)t->n0) * c->C;
}

void cpu_grouped_bwd(mtk *k, mtk_dtype dt, void *dinp, float *dw, const void *dout, const void *inp, const void *w,
                     const int32_t *counts, int G, int C, int OC, int acc)
{
    cpu_state *s = k->impl;
    /* dinp_g = dout_g . w_g: B(o, c) = w_g[o C + c] */
    if (dinp) grouped_rows(k, dt, dinp, dout, w, counts, G, OC, C, C, 1, (size_t)OC * C, "input gradient");
    if (!dw || k->failed) return;
    plan p;
    if (plan_dw(&p, counts, G, OC, k->threads)) {
        mtk_fail(k, "out of memory");
        return;
    }
    /* dw_g[o0 .. o0 + ob) (+)= dout_g[:, o0 ..]^T . inp_g, the inner size the group's rows */
    product pr = {.dnnl = dt != MTK_F32 || s->sgemm_dnnl, .inner = 1, .N = C, .acc = acc, .ab = dt, .cdt = MTK_F32,
                  .sam = 1, .sak = OC, .sbk = C, .sbn = 1, .ldc = C};
    dw_ctx c = {.dout = dout, .inp = inp, .dw = dw, .a = dt == MTK_F32 ? 4 : 2, .C = C, .OC = OC};
    for (int i = 0; i < p.n && !acc; i++)   /* an empty group's assigned gradient is zero */
        if (!p.t[i].m) memset(dw + ((size_t)p.t[i].g * OC + (size_t)p.t[i].n0) * C, 0, sizeof(float) * (size_t)p.t[i].nb * C);
    if (!product_ready(k, &pr, &p)) run_tiles(k, &pr, &p, dw_operands, &c, "weight gradient");
    free(p.t);
}
