/* test_ring_attention.c: context parallelism's ring attention (libcommon/model/ring_attention.h) against
 * the attention of the whole sequence. Every rank builds the same sequences (a fixed seed), runs the
 * whole attention forward and backward on its own (mtk_attention_gqa_fwd/bwd), then its part of the ring
 * on its rows (Megatron's chunks r and 2 CP - 1 - r): out, lse and dqkv at its rows equal the whole
 * attention's, grouped-query heads and dropout included (the masks are drawn by position in the whole
 * sequence), and the bytes it sent are the ring's: CP - 1 blocks of keys and values in the forward pass,
 * as many again and CP fp32 gradients of them in the backward. The ring runs twice, its exchanges blocking
 * and then overlapped with the computation (an engine of comm/comm_async.h: a progress thread on MPI):
 * the same bits and bytes. The all_gather variant gives the same forward bits (the blocks in the same
 * order), the whole attention's gradients, and sends an all-gather of the blocks in each pass ((CP - 1)
 * blocks) and a reduce-scatter of their fp32 gradients ((CP - 1) of them) in the backward.
 * Run directly: one rank (CP = 1, no exchange). Under mpirun with --mpi (tests/pipeline/ring-attention.sh):
 * CP = the world's size, on MT_TEST_BACKEND's device buffers (cpu: the MPI communicator itself, or sim
 * through the staged one: model/device.h's mt_device_comm). The tolerances: fp32 sums in another order; the largest gaps measured on 1 to 4 ranks are
 * 4.9e-7 (out), 1.5e-7 (lse) and 4.6e-7 (dqkv) relative to each array's largest entry (MT_RING_GAPS=1
 * prints them), the bounds 10x those. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "comm/bootstrap.h"
#include "comm/comm.h"
#include "kernels.h"
#include "model/device.h"
#include "model/ring_attention.h"
#include "t.h"
#include "util/err.h"

static mt_comm *world;
static const char *backend = "cpu";

static double worst(const float *got, const float *want, size_t n)
{
    double e = 0, m = 1e-30;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)got[i] - want[i]);
        if (!(d <= e)) e = d;
        if (fabs(want[i]) > m) m = fabs(want[i]);
    }
    return e / m;
}

static float urand(uint64_t *s)
{
    *s += MT_GOLDEN64;
    return (float)((double)(mt_mix64(*s) >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

/* B sequences of Tg, NH heads in NG groups of HS, dropout p; over cp (NULL: one rank). */
static void check_ring(mt_comm *cp, int B, int Tg, int NH, int NG, int HS, float p)
{
    mt_err e;
    mtk *k = mtk_open(&(mtk_config){.backend = backend, .threads = 1, .act_dtype = MTK_F32}, &e);
    if (!k) {
        T_FAILF("backend %s: %s", backend, e.msg);
        return;
    }
    const int CP = cp ? cp->size : 1, r = cp ? cp->rank : 0, Tl = Tg / CP;
    const size_t row3 = (size_t)(NH + 2 * NG) * HS, C = (size_t)NH * HS;
    const size_t nq = (size_t)B * Tg * row3, no = (size_t)B * Tg * C, nl = (size_t)B * NH * Tg;
    const size_t lq = (size_t)B * Tl * row3, lo = (size_t)B * Tl * C, ll = (size_t)B * NH * Tl;
    mtk_limits lim = {.max_act = nq, .max_flat = nq, .max_seq = Tg, .max_head_size = HS};
    if (mtk_reserve(k, &lim, &e)) T_FAILF("%s", e.msg);
    mtk_dropout drop = {p, 77, 5};
    uint64_t seed = 12345;
    float *hq = malloc(nq * 4), *hdo = malloc(no * 4), *ho = malloc(no * 4), *hl = malloc(nl * 4), *hd = malloc(nq * 4);
    for (size_t i = 0; i < nq; i++) hq[i] = 1.5f * urand(&seed);
    for (size_t i = 0; i < no; i++) hdo[i] = urand(&seed);
    /* the whole attention */
    float *q = mtk_alloc(k, nq * 4, &e), *dout = mtk_alloc(k, no * 4, &e), *o = mtk_alloc(k, no * 4, &e);
    float *l = mtk_alloc(k, nl * 4, &e), *d = mtk_alloc(k, nq * 4, &e);
    mtk_to_device(k, q, hq, nq * 4), mtk_to_device(k, dout, hdo, no * 4);
    mtk_attention_gqa_fwd(k, o, l, q, B, Tg, NH, NG, HS, &drop);
    mtk_attention_gqa_bwd(k, d, dout, q, o, l, B, Tg, NH, NG, HS, &drop);
    mtk_to_host(k, ho, o, no * 4), mtk_to_host(k, hl, l, nl * 4), mtk_to_host(k, hd, d, nq * 4);
    /* this rank's rows of it */
    mtk_att_rows w = mt_ring_rows(r, CP, Tg);
    float *wq = malloc(lq * 4), *wdo = malloc(lo * 4), *wo = malloc(lo * 4), *wl = malloc(ll * 4), *wd = malloc(lq * 4);
    for (int b = 0; b < B; b++)
        for (int i = 0; i < Tl; i++) {
            const size_t g = (size_t)b * Tg + (size_t)(w.start[i / w.run] + i % w.run), t = (size_t)b * Tl + i;
            memcpy(wq + t * row3, hq + g * row3, row3 * 4), memcpy(wd + t * row3, hd + g * row3, row3 * 4);
            memcpy(wdo + t * C, hdo + g * C, C * 4), memcpy(wo + t * C, ho + g * C, C * 4);
            for (int h = 0; h < NH; h++) wl[((size_t)b * NH + h) * Tl + i] = hl[((size_t)b * NH + h) * Tg + (g - (size_t)b * Tg)];
        }
    /* the ring, blocking then overlapped */
    mt_comm *dc = cp ? mt_device_comm(cp, k, &e) : NULL;
    if (cp && !dc) T_FAILF("device communicator: %s", e.msg);
    float *rq = mtk_alloc(k, lq * 4, &e), *rdo = mtk_alloc(k, lo * 4, &e), *ro = mtk_alloc(k, lo * 4, &e);
    float *rl = mtk_alloc(k, ll * 4, &e), *rd = mtk_alloc(k, lq * 4, &e);
    mtk_to_device(k, rq, wq, lq * 4), mtk_to_device(k, rdo, wdo, lo * 4);
    float *go[3], *gl[3], *gd[3];
    const uint64_t blk = (uint64_t)B * Tl * 2 * NG * HS;   /* elements of a block of keys and values */
    for (int ov = 0; ov < 3; ov++) {   /* p2p blocking, p2p overlapped, all_gather */
        mt_ring_attention *ra = mt_ring_attention_new(k, dc, B, Tg, NH, NG, HS, ov == 2 ? MT_CP_ALL_GATHER : MT_CP_P2P,
                                                      ov == 1, &e);
        go[ov] = malloc(lo * 4), gl[ov] = malloc(ll * 4), gd[ov] = malloc(lq * 4);
        if (!ra) {
            T_FAILF("ring: %s", e.msg);
            continue;
        }
        uint64_t b0 = mt_ring_attention_sent(ra);
        if (mt_ring_attention_fwd(ra, ro, rl, rq, &drop, &e)) T_FAILF("forward: %s", e.msg);
        uint64_t b1 = mt_ring_attention_sent(ra);
        if (mt_ring_attention_bwd(ra, rd, rdo, rq, ro, rl, &drop, &e)) T_FAILF("backward: %s", e.msg);
        uint64_t b2 = mt_ring_attention_sent(ra);
        mtk_to_host(k, go[ov], ro, lo * 4), mtk_to_host(k, gl[ov], rl, ll * 4), mtk_to_host(k, gd[ov], rd, lq * 4);
        const double eo = worst(go[ov], wo, lo), el = worst(gl[ov], wl, ll), ed = worst(gd[ov], wd, lq);
        if (!(eo <= 5e-6 && el <= 1.5e-6 && ed <= 5e-6))
            T_FAILF("CP %d, B %d, T %d, %d heads in %d groups of %d, dropout %g%s: relative errors out %.3g, lse %.3g, "
                    "dqkv %.3g", CP, B, Tg, NH, NG, HS, p, ov == 1 ? ", overlapped" : ov ? ", all_gather" : "", eo, el, ed);
        if (getenv("MT_RING_GAPS")) printf("# gaps: out %.3g lse %.3g dqkv %.3g\n", eo, el, ed);
        T_EQ_INT(b1 - b0, (uint64_t)(CP - 1) * blk * 4);
        T_EQ_INT(b2 - b1, (uint64_t)(CP - 1) * blk * 4 + (uint64_t)(CP > 1 ? (ov == 2 ? CP - 1 : CP) : 0) * blk * 4);
        mt_ring_attention_free(ra);
    }
    if (memcmp(go[0], go[1], lo * 4) || memcmp(gl[0], gl[1], ll * 4) || memcmp(gd[0], gd[1], lq * 4))
        T_FAILF("CP %d: the overlapped ring's results differ from the blocking one's", CP);
    if (memcmp(go[0], go[2], lo * 4) || memcmp(gl[0], gl[2], ll * 4))
        T_FAILF("CP %d: the all_gather forward differs from the ring's", CP);
    for (int ov = 0; ov < 3; ov++) free(go[ov]), free(gl[ov]), free(gd[ov]);
    if (dc != cp) mt_comm_free(dc);
    void *dev[] = {q, dout, o, l, d, rq, rdo, ro, rl, rd};
    for (size_t i = 0; i < sizeof dev / sizeof *dev; i++) mtk_free(k, dev[i]);
    free(hq), free(hdo), free(ho), free(hl), free(hd), free(wq), free(wdo), free(wo), free(wl), free(wd);
    mtk_close(k);
}

TEST(ring_mha)
{
    check_ring(world, 2, 48, 4, 4, 8, 0.0f);
}
TEST(ring_gqa_dropout)
{
    check_ring(world, 1, world ? 16 * world->size : 32, 6, 2, 16, 0.2f);
}
TEST(ring_ragged_tiles)
{
    /* chunks of 70 rows: 64-row tiles and a ragged one */
    check_ring(world, 1, world ? 140 * world->size : 140, 2, 1, 32, 0.1f);
}
TEST(ring_refuses_odd_split)
{
    mt_err e;
    mtk *k = mtk_open(&(mtk_config){.backend = "cpu", .threads = 1, .act_dtype = MTK_F32}, &e);
    mt_comm *st = world ? mt_comm_staged(world, k, &e) : NULL;
    const int CP = world ? world->size : 1;
    T_CHECK(mt_ring_attention_new(k, st, 1, 2 * CP + 1, 2, 1, 8, MT_CP_P2P, 0, &e) == NULL);
    T_CHECK(strstr(e.msg, "not a multiple of 2 x") != NULL);
    mt_comm_free(st);
    mtk_close(k);
}

int main(int argc, char **argv)
{
    t_bin = "test_ring_attention";
    if (getenv("MT_TEST_BACKEND")) backend = getenv("MT_TEST_BACKEND");
    mt_boot boot;
    if (argc > 1 && !strcmp(argv[1], "--mpi")) {
        mt_err e;
        int rc = mt_boot_init(&boot, &e);
        boot.threads = true;   /* the overlapped ring's progress thread */
        if (rc || mt_boot_mpi(&boot, &e) || !(world = mt_comm_mpi_world(&e))) {
            printf("not ok - test_ring_attention: bootstrap: %s\n", e.msg);
            return 1;
        }
        static char name[64];
        snprintf(name, sizeof name, "test_ring_attention[rank %d/%d]", boot.rank, boot.size);
        t_bin = name;
    }
    RUN(ring_mha);
    RUN(ring_gqa_dropout);
    RUN(ring_ragged_tiles);
    RUN(ring_refuses_odd_split);
    if (world) {
        mt_comm_free(world);
        mt_boot_finalize(&boot);
    }
    return t_total_failed ? 1 : 0;
}
