/* ring_attention.c: context parallelism's ring attention (ring_attention.h): the blocks of keys and values
 * passed around the context-parallel ranks (or gathered at once), each rank's queries merged over them,
 * and the backward pass that carries each block's gradient around with it (or reduce-scatters them).
 * With overlap (an engine; MT_CP_OVERLAP=0 in the trainer turns it off) every hop travels beside a block's
 * compute: in the forward pass the next block's keys and values, in the backward pass those and the
 * partial sum of the gradient the step before sent on; only the last gradient hop, which takes each
 * block's complete gradient home after the last block, is waited for with nothing left to compute. */
#include <math.h>
#include <stdlib.h>

#include "comm/comm_async.h"
#include "model/ring_attention.h"
#include "util/err.h"

struct mt_ring_attention {
    mtk *k;
    mt_comm *cp;
    mt_comm_async *eng;       /* the overlapped exchanges' engine (NULL: blocking) */
    mt_cp_comm type;
    void *kv_all;             /* all_gather: every rank's block of keys and values (activation dtype) */
    float *dkv_all;           /* and their gradients */
    size_t *counts;           /* all_gather: nkv per rank */
    int r, CP, B, Bmax, Tg, Tl, NH, NG, HS;
    int NHt, h0;              /* the heads of the whole model and this rank's first (tensor parallelism) */
    size_t nkv, nout, nlse;   /* elements of a block of keys and values, of out, of lse (B sequences) */
    void *kv[2];              /* the block in hand and the one arriving (activation dtype) */
    float *dkv[3];            /* gradients (fp32), in turn: a step's part, the partial sum arriving, the one leaving;
                                 dkv[2] is ob's memory */
    float *o32, *ob, *lb, *dq;  /* the forward's result (fp32) and a block's (lb follows ob in one buffer); the
                                   backward's dq is o32's memory */
    size_t bytes;
};

mtk_att_rows mt_ring_rows(int r, int CP, int Tg)
{
    mtk_att_rows w = {.run = Tg / (2 * CP)};
    w.start[0] = r * w.run, w.start[1] = (2 * CP - 1 - r) * w.run;
    return w;
}

static mt_cdtype cdtype(mtk *k)
{
    mtk_dtype d = mtk_act_dtype(k);
    return d == MTK_F32 ? MT_C_F32 : d == MTK_BF16 ? MT_C_BF16 : MT_C_F16;
}

mt_ring_attention *mt_ring_attention_new(mtk *k, mt_comm *cp, int B, int Tg, int NH, int NG, int HS, mt_cp_comm type,
                                         int overlap, mt_err *e)
{
    const int CP = cp ? cp->size : 1;
    if (Tg % (2 * CP)) {
        mt_err_set(e, "context parallelism: the sequence length %d is not a multiple of 2 x %d ranks", Tg, CP);
        return NULL;
    }
    mt_ring_attention *ra = mt_xcalloc(1, sizeof *ra);
    *ra = (mt_ring_attention){.k = k, .cp = cp, .type = type, .r = cp ? cp->rank : 0, .CP = CP, .B = B, .Bmax = B,
                              .Tg = Tg, .Tl = Tg / CP, .NH = NH, .NG = NG, .HS = HS, .NHt = NH};
    ra->nkv = (size_t)B * ra->Tl * 2 * NG * HS, ra->nout = (size_t)B * ra->Tl * NH * HS;
    ra->nlse = (size_t)B * NH * ra->Tl;
    const size_t a = mtk_act_size(k), f = sizeof(float);
    const int ring = type == MT_CP_P2P || CP == 1, gather = !ring;
    const int more = ring && CP > 1;   /* the ring's second block and second and third gradients */
    /* the forward's block result (ob, then lb) and the backward's third gradient share one buffer: the
     * forward takes the one and the backward the other, never both at once */
    const size_t obl = ra->nout + ra->nlse, shared = more && ra->nkv > obl ? ra->nkv : obl;
    void **where[] = {&ra->kv[0],         &ra->kv[1],         (void **)&ra->dkv[0], (void **)&ra->dkv[1],
                      (void **)&ra->o32, (void **)&ra->ob, &ra->kv_all,         (void **)&ra->dkv_all};
    const size_t bytes[] = {ring * ra->nkv * a, more * ra->nkv * a, ring * ra->nkv * f, more * ra->nkv * f,
                            ra->nout * f,       shared * f,         gather * CP * ra->nkv * a,
                            gather * CP * ra->nkv * f};
    if (gather) {
        ra->counts = mt_xmalloc((size_t)CP * sizeof *ra->counts);
        for (int i = 0; i < CP; i++) ra->counts[i] = ra->nkv;
    }
    for (size_t i = 0; i < sizeof bytes / sizeof *bytes; i++) {
        if (!bytes[i]) continue;
        if (!(*where[i] = mtk_alloc(k, bytes[i], e))) {
            mt_ring_attention_free(ra);
            return NULL;
        }
        ra->bytes += bytes[i];
    }
    ra->dq = ra->o32;
    ra->lb = ra->ob + ra->nout;
    if (more) ra->dkv[2] = ra->ob;
    if (overlap && ring && CP > 1 && !(ra->eng = mt_comm_async_new(cp, e))) {
        mt_err_prefix(e, "ring attention");
        mt_ring_attention_free(ra);
        return NULL;
    }
    return ra;
}

size_t mt_ring_attention_plan(int B, int Tg, int CP, int NH, int NG, int HS, mt_cp_comm type, size_t asz)
{
    const size_t Tl = (size_t)(Tg / CP), nkv = (size_t)B * Tl * 2 * NG * HS, nout = (size_t)B * Tl * NH * HS;
    const size_t nlse = (size_t)B * NH * Tl, f = sizeof(float);
    const int ring = type == MT_CP_P2P || CP == 1;
    if (!ring) return (size_t)CP * nkv * (asz + f) + 2 * nout * f + nlse * f;
    const size_t shared = CP > 1 && nkv > nout + nlse ? nkv : nout + nlse;   /* ob, lb and the third gradient */
    return (CP > 1 ? 2 : 1) * nkv * (asz + f) + nout * f + shared * f;
}

void mt_ring_attention_free(mt_ring_attention *ra)
{
    if (!ra) return;
    void *p[] = {ra->kv[0], ra->kv[1], ra->dkv[0], ra->dkv[1], ra->o32, ra->ob, ra->kv_all, ra->dkv_all};
    for (size_t i = 0; i < sizeof p / sizeof *p; i++) mtk_free(ra->k, p[i]);
    mt_comm_async_free(ra->eng);
    free(ra->counts);
    free(ra);
}

size_t mt_ring_attention_bytes(const mt_ring_attention *ra) { return ra->bytes; }

uint64_t mt_ring_attention_sent(const mt_ring_attention *ra)
{
    return (ra->cp ? ra->cp->bytes_sent : 0) + (ra->eng ? mt_comm_async_bytes(ra->eng) : 0);
}

/* Starts one step of the ring (the n buffers in hand to rank r + 1, the next ones from r - 1), after the
 * kernels before it: its ticket, to wait for with finish(); blocking without an engine (ticket -1). No host
 * wait for the kernels: every communicator of device buffers orders its transfers after them (comm.h: the
 * cpu backend's MPI, whose kernels have run when they return; the staged one, which waits for k's queues;
 * NCCL, on the compute stream or after an event recorded there), so only a kernel's error is checked. */
static int start(mt_ring_attention *ra, mt_p2p *ops, int n, mt_err *e)
{
    if (mtk_status(ra->k, e)) return -2;
    if (!ra->eng) return mt_p2p_batch(ra->cp, ops, n, e) ? -2 : -1;
    int t = mt_comm_async_start(ra->eng, &(mt_async_op){.kind = MT_ASYNC_P2P, .p2p = ops, .np = n}, e);
    return t < 0 ? -2 : t;
}
static int finish(mt_ring_attention *ra, int ticket, mt_err *e)
{
    if (ticket == -2) return -1;
    if (ticket < 0) return 0;
    return mt_comm_async_drain(ra->eng, e);
}

int mt_ring_attention_batch(mt_ring_attention *ra, int B, mt_err *e)
{
    if (B <= 0 || B > ra->Bmax)
        return mt_err_set(e, "context-parallel attention: a batch of %d sequences, made for %d", B, ra->Bmax);
    ra->B = B;
    ra->nkv = (size_t)B * ra->Tl * 2 * ra->NG * ra->HS, ra->nout = (size_t)B * ra->Tl * ra->NH * ra->HS;
    ra->nlse = (size_t)B * ra->NH * ra->Tl;
    for (int i = 0; ra->counts && i < ra->CP; i++) ra->counts[i] = ra->nkv;
    return 0;
}

void mt_ring_attention_heads(mt_ring_attention *ra, int total, int first)
{
    ra->NHt = total;
    ra->h0 = first;
}

/* With the heads split over tensor-parallel ranks and dropout on, a block runs one sequence at a time, each
 * from the counter of its first global head: ((b NHt + h0 + h) Tg + i) Tg + j is the one-rank mask's
 * counter for local head h (mtk_attention_block_fwd counts ((b NH + h) Tg + i) Tg + j). */
static int per_sequence(const mt_ring_attention *ra, const mtk_dropout *drop)
{
    return drop && drop->p > 0 && ra->NHt != ra->NH;
}
static mtk_dropout seq_drop(const mt_ring_attention *ra, const mtk_dropout *drop, int b)
{
    mtk_dropout d = *drop;
    d.offset += ((uint64_t)b * (uint64_t)ra->NHt + (uint64_t)ra->h0) * (uint64_t)ra->Tg * (uint64_t)ra->Tg;
    return d;
}

static void block_fwd(mt_ring_attention *ra, float *out, float *lse, const mtk_act *qkv, const mtk_act *kv,
                      const mtk_att_rows *mine, const mtk_att_rows *theirs, const mtk_dropout *drop)
{
    mtk *k = ra->k;
    if (!per_sequence(ra, drop)) {
        mtk_attention_block_fwd(k, out, lse, qkv, kv, ra->B, ra->Tl, ra->Tl, ra->Tg, mine, theirs, ra->NH, ra->NG,
                                ra->HS, drop);
        return;
    }
    const size_t a = mtk_act_size(k), tl = (size_t)ra->Tl, hs = (size_t)ra->HS;
    for (int b = 0; b < ra->B; b++) {
        const mtk_dropout d = seq_drop(ra, drop, b);
        mtk_attention_block_fwd(k, out + b * tl * ra->NH * hs, lse + (size_t)b * ra->NH * tl,
                                (const char *)qkv + b * tl * (ra->NH + 2 * ra->NG) * hs * a,
                                (const char *)kv + b * tl * 2 * ra->NG * hs * a, 1, ra->Tl, ra->Tl, ra->Tg, mine, theirs,
                                ra->NH, ra->NG, ra->HS, &d);
    }
}

static void block_bwd(mt_ring_attention *ra, float *dq, float *dkv, const mtk_act *dout, const mtk_act *qkv,
                      const mtk_act *kv, const mtk_act *out, const float *lse, const mtk_att_rows *mine,
                      const mtk_att_rows *theirs, const mtk_dropout *drop)
{
    mtk *k = ra->k;
    if (!per_sequence(ra, drop)) {
        mtk_attention_block_bwd(k, dq, dkv, dout, qkv, kv, out, lse, ra->B, ra->Tl, ra->Tl, ra->Tg, mine, theirs, ra->NH,
                                ra->NG, ra->HS, drop);
        return;
    }
    const size_t a = mtk_act_size(k), tl = (size_t)ra->Tl, hs = (size_t)ra->HS;
    const size_t no = tl * ra->NH * hs, nk = tl * 2 * ra->NG * hs;
    for (int b = 0; b < ra->B; b++) {
        const mtk_dropout d = seq_drop(ra, drop, b);
        mtk_attention_block_bwd(k, dq + b * no, dkv + b * nk, (const char *)dout + b * no * a,
                                (const char *)qkv + b * tl * (ra->NH + 2 * ra->NG) * hs * a,
                                (const char *)kv + b * nk * a, (const char *)out + b * no * a,
                                lse + (size_t)b * ra->NH * tl, 1, ra->Tl, ra->Tl, ra->Tg, mine, theirs, ra->NH, ra->NG,
                                ra->HS, &d);
    }
}

/* all_gather: every rank's keys and values into kv_all (rank j's block at j nkv). */
static int gather_kv(mt_ring_attention *ra, const mtk_act *qkv, mt_err *e)
{
    mtk *k = ra->k;
    mtk_attention_kv_pack(k, (char *)ra->kv_all + (size_t)ra->r * ra->nkv * mtk_act_size(k), qkv, ra->B, ra->Tl, ra->NH,
                          ra->NG, ra->HS);
    if (mtk_sync(k, e)) return -1;
    return mt_all_gather(ra->cp, ra->kv_all, ra->counts, cdtype(k), e);
}

static int gathered_fwd(mt_ring_attention *ra, mtk_act *out, float *lse, const mtk_act *qkv, const mtk_dropout *drop,
                        mt_err *e)
{
    mtk *k = ra->k;
    const int r = ra->r, CP = ra->CP;
    const mtk_att_rows mine = mt_ring_rows(r, CP, ra->Tg);
    if (gather_kv(ra, qkv, e)) return mt_err_prefix(e, "context-parallel attention, gathering the keys and values");
    for (int step = 0; step < CP; step++) {   /* the blocks in the ring's order: its bits */
        const int j = (r - step + CP) % CP;
        const mtk_att_rows theirs = mt_ring_rows(j, CP, ra->Tg);
        const void *kv = (const char *)ra->kv_all + (size_t)j * ra->nkv * mtk_act_size(k);
        if (step == 0) {
            block_fwd(ra, ra->o32, lse, qkv, kv, &mine, &theirs, drop);
        } else {
            block_fwd(ra, ra->ob, ra->lb, qkv, kv, &mine, &theirs, drop);
            mtk_attention_merge(k, ra->o32, lse, ra->ob, ra->lb, ra->B, ra->Tl, ra->NH, ra->HS);
        }
    }
    mtk_convert(k, out, mtk_act_dtype(k), ra->o32, MTK_F32, ra->nout);
    return mtk_status(k, e);
}

static int gathered_bwd(mt_ring_attention *ra, mtk_act *dqkv, const mtk_act *dout, const mtk_act *qkv,
                        const mtk_act *out, const float *lse, const mtk_dropout *drop, mt_err *e)
{
    mtk *k = ra->k;
    const int r = ra->r, CP = ra->CP;
    const mtk_att_rows mine = mt_ring_rows(r, CP, ra->Tg);
    if (gather_kv(ra, qkv, e)) return mt_err_prefix(e, "context-parallel attention backward, gathering");
    mtk_zero(k, ra->dkv_all, (size_t)CP * ra->nkv * sizeof(float));
    mtk_zero(k, ra->dq, ra->nout * sizeof(float));
    for (int step = 0; step < CP; step++) {
        const int j = (r - step + CP) % CP;
        const mtk_att_rows theirs = mt_ring_rows(j, CP, ra->Tg);
        block_bwd(ra, ra->dq, ra->dkv_all + (size_t)j * ra->nkv, dout, qkv,
                  (const char *)ra->kv_all + (size_t)j * ra->nkv * mtk_act_size(k), out, lse, &mine, &theirs, drop);
    }
    /* each block's gradient summed over the ranks' queries, into its owner */
    if (mtk_sync(k, e) || mt_reduce_scatter(ra->cp, ra->dkv_all, ra->counts, MT_C_F32, e))
        return mt_err_prefix(e, "context-parallel attention backward, the keys' and values' gradients");
    mtk_attention_dqkv_pack(k, dqkv, ra->dq, ra->dkv_all + (size_t)r * ra->nkv, ra->B, ra->Tl, ra->NH, ra->NG, ra->HS);
    return mtk_status(k, e);
}

int mt_ring_attention_fwd(mt_ring_attention *ra, mtk_act *out, float *lse, const mtk_act *qkv, const mtk_dropout *drop,
                          mt_err *e)
{
    mtk *k = ra->k;
    const int r = ra->r, CP = ra->CP, next = (r + 1) % CP, prev = (r + CP - 1) % CP;
    const mtk_att_rows mine = mt_ring_rows(r, CP, ra->Tg);
    if (ra->kv_all) return gathered_fwd(ra, out, lse, qkv, drop, e);
    mtk_attention_kv_pack(k, ra->kv[0], qkv, ra->B, ra->Tl, ra->NH, ra->NG, ra->HS);
    for (int step = 0, cur = 0; step < CP; step++, cur ^= 1) {
        const int j = (r - step + CP) % CP;   /* whose block is in hand */
        const mtk_att_rows theirs = mt_ring_rows(j, CP, ra->Tg);
        /* the block in hand goes on (and the next one comes) while it is computed with */
        mt_p2p ops[] = {{1, ra->kv[cur], ra->nkv, cdtype(k), next}, {0, ra->kv[cur ^ 1], ra->nkv, cdtype(k), prev}};
        const int ticket = step + 1 < CP ? start(ra, ops, 2, e) : -1;
        if (ticket == -2) return mt_err_prefix(e, "ring attention, step %d", step + 1);
        if (step == 0) {   /* the first block straight into the result */
            block_fwd(ra, ra->o32, lse, qkv, ra->kv[cur], &mine, &theirs, drop);
        } else {
            block_fwd(ra, ra->ob, ra->lb, qkv, ra->kv[cur], &mine, &theirs, drop);
            mtk_attention_merge(k, ra->o32, lse, ra->ob, ra->lb, ra->B, ra->Tl, ra->NH, ra->HS);
        }
        if (finish(ra, ticket, e)) return mt_err_prefix(e, "ring attention, step %d", step + 1);
    }
    mtk_convert(k, out, mtk_act_dtype(k), ra->o32, MTK_F32, ra->nout);
    return mtk_status(k, e);
}

int mt_ring_attention_bwd(mt_ring_attention *ra, mtk_act *dqkv, const mtk_act *dout, const mtk_act *qkv,
                          const mtk_act *out, const float *lse, const mtk_dropout *drop, mt_err *e)
{
    mtk *k = ra->k;
    const int r = ra->r, CP = ra->CP, next = (r + 1) % CP, prev = (r + CP - 1) % CP;
    const mtk_att_rows mine = mt_ring_rows(r, CP, ra->Tg);
    if (ra->kv_all) return gathered_bwd(ra, dqkv, dout, qkv, out, lse, drop, e);
    mtk_attention_kv_pack(k, ra->kv[0], qkv, ra->B, ra->Tl, ra->NH, ra->NG, ra->HS);
    mtk_zero(k, ra->dq, ra->nout * sizeof(float));
    /* The gradients of the blocks follow them around the ring, overlapped as the blocks are: step s computes
     * its part of the block in hand's gradient into dkv[s % 3] while the partial sum of that block (the
     * ranks' before this one, sent at their step s - 1) arrives in dkv[(s + 1) % 3]; then takes it in and
     * sends the sum on, the next block's arriving in dkv[(s + 2) % 3] (the buffer the step before sent, and
     * free now) during step s + 1. The last step's hop takes each block's complete gradient home. */
    int dticket = -1;   /* the gradient hop in flight */
    for (int step = 0, cur = 0; step < CP; step++, cur ^= 1) {
        const int j = (r - step + CP) % CP;
        const mtk_att_rows theirs = mt_ring_rows(j, CP, ra->Tg);
        float *part = ra->dkv[step % 3];
        /* the block goes on while it is computed with (and the previous gradient hop travels) */
        mt_p2p kv[] = {{1, ra->kv[cur], ra->nkv, cdtype(k), next}, {0, ra->kv[cur ^ 1], ra->nkv, cdtype(k), prev}};
        const int ticket = step + 1 < CP ? start(ra, kv, 2, e) : -1;
        if (ticket == -2) return mt_err_prefix(e, "ring attention backward, step %d", step + 1);
        mtk_zero(k, part, ra->nkv * sizeof(float));
        block_bwd(ra, ra->dq, part, dout, qkv, ra->kv[cur], out, lse, &mine, &theirs, drop);
        if (finish(ra, ticket > dticket ? ticket : dticket, e))   /* the block's hop and the gradient's */
            return mt_err_prefix(e, "ring attention backward, step %d", step + 1);
        if (CP == 1) break;
        /* the partial sum of the ranks before (none at the first step) added, and the sum sent on */
        if (step > 0) mtk_acc_f32(k, part, ra->dkv[(step + 1) % 3], ra->nkv);
        mt_p2p dkv[] = {{1, part, ra->nkv, MT_C_F32, next}, {0, ra->dkv[(step + 2) % 3], ra->nkv, MT_C_F32, prev}};
        if ((dticket = start(ra, dkv, 2, e)) == -2)
            return mt_err_prefix(e, "ring attention backward, step %d", step + 1);
    }
    if (finish(ra, dticket, e)) return mt_err_prefix(e, "ring attention backward, the gradients' last hop");
    /* this rank's own block's gradient, complete (with one rank, the only step's part) */
    mtk_attention_dqkv_pack(k, dqkv, ra->dq, ra->dkv[CP == 1 ? 0 : (CP + 1) % 3], ra->B, ra->Tl, ra->NH, ra->NG,
                            ra->HS);
    return mtk_status(k, e);
}
