/* pp_schedule.c: the 1F1B and interleaved pipeline schedules as event lists (see pp_schedule.h). */
#include "train/pp_schedule.h"

#include <stdio.h>
#include <stdlib.h>

#define NONE ((mt_pp_mc){-1, -1})
#define MAX_CHUNKS 64

typedef struct builder {
    int P, s, M, v;
    int ring;                    /* the interleaved schedule: neighbours around the ring of stages */
    mt_pp_event *ev;
    int n, cap;
    int inputs[MAX_CHUNKS];      /* inputs received so far per chunk: the next one is that micro-batch's */
    int grads[MAX_CHUNKS];       /* output gradients received so far per chunk */
} builder;

static void push(builder *b, mt_pp_event e)
{
    if (b->n == b->cap) {
        b->cap = b->cap ? 2 * b->cap : 64;
        b->ev = mt_xrealloc(b->ev, (size_t)b->cap * sizeof *b->ev);
    }
    b->ev[b->n++] = e;
}

/* Whether (this stage, chunk c) has a previous / next virtual stage to exchange with. */
static int has_prev(const builder *b, int c) { return b->ring ? !(b->s == 0 && c == 0) : b->s > 0; }
static int has_next(const builder *b, int c) { return b->ring ? !(b->s == b->P - 1 && c == b->v - 1) : b->s < b->P - 1; }

static void run(builder *b, mt_pp_kind k, int micro, int chunk)
{
    push(b, (mt_pp_event){.kind = k, .mc = {micro, chunk}, .send_next = NONE, .recv_next = NONE, .send_prev = NONE,
                          .recv_prev = NONE});
}

/* One exchange: the output of `out` (micro -1: none) and the input gradient of `grad` sent; an input for
 * chunk recv_in and an output gradient for chunk recv_grad received (-1: none), each the next micro-batch
 * of its chunk in order. Pieces without a neighbour are dropped, an empty exchange is not listed. */
static void exchange(builder *b, mt_pp_mc out, mt_pp_mc grad, int recv_in, int recv_grad)
{
    mt_pp_event e = {.kind = MT_PP_EXCHANGE, .mc = NONE, .send_next = NONE, .recv_next = NONE, .send_prev = NONE,
                     .recv_prev = NONE};
    if (out.micro >= 0 && has_next(b, out.chunk)) e.send_next = out;
    if (grad.micro >= 0 && has_prev(b, grad.chunk)) e.send_prev = grad;
    if (recv_in >= 0 && has_prev(b, recv_in)) e.recv_prev = (mt_pp_mc){b->inputs[recv_in]++, recv_in};
    if (recv_grad >= 0 && has_next(b, recv_grad)) e.recv_next = (mt_pp_mc){b->grads[recv_grad]++, recv_grad};
    if (e.send_next.micro >= 0 || e.send_prev.micro >= 0 || e.recv_prev.micro >= 0 || e.recv_next.micro >= 0) push(b, e);
}

static void one_f_one_b(builder *b)
{
    int M = b->M, warmup = b->P - b->s - 1 < M ? b->P - b->s - 1 : M, steady = M - warmup;
    int f = 0, k = 0;   /* the next micro-batch to forward, to backward */
    for (int i = 0; i < warmup; i++, f++) {
        exchange(b, NONE, NONE, 0, -1);
        run(b, MT_PP_FORWARD, f, 0);
        exchange(b, (mt_pp_mc){f, 0}, NONE, -1, -1);
    }
    if (steady > 0) exchange(b, NONE, NONE, 0, -1);
    for (int i = 0; i < steady; i++, f++, k++) {
        run(b, MT_PP_FORWARD, f, 0);
        exchange(b, (mt_pp_mc){f, 0}, NONE, -1, 0);
        run(b, MT_PP_BACKWARD, k, 0);
        exchange(b, NONE, (mt_pp_mc){k, 0}, i + 1 < steady ? 0 : -1, -1);
    }
    for (int i = 0; i < warmup; i++, k++) {
        exchange(b, NONE, NONE, -1, 0);
        run(b, MT_PP_BACKWARD, k, 0);
        exchange(b, NONE, (mt_pp_mc){k, 0}, -1, -1);
    }
}

/* Virtual micro-batch k of the M x v of a step: its chunk (forward: groups of P micro-batches through chunk
 * 0, 1, ...; backward: the chunks in reverse) and its micro-batch; k may be negative (Python's modulo). */
static int chunk_of(const builder *b, int k, int forward)
{
    int pv = b->P * b->v, c = ((k % pv + pv) % pv) / b->P;
    return forward ? c : b->v - 1 - c;
}
static int micro_of(const builder *b, int k) { return (k / (b->P * b->v)) * b->P + k % b->P; }
static mt_pp_mc fwd_mc(const builder *b, int k) { return (mt_pp_mc){micro_of(b, k), chunk_of(b, k, 1)}; }
static mt_pp_mc bwd_mc(const builder *b, int k) { return (mt_pp_mc){micro_of(b, k), chunk_of(b, k, 0)}; }

static void interleaved(builder *b)
{
    int P = b->P, v = b->v, total = b->M * v;
    int first = b->s == 0, last = b->s == P - 1, all_warmup = b->M == P;
    int warmup = all_warmup ? total : (P - b->s - 1) * 2 + (v - 1) * P;
    if (warmup > total) warmup = total;
    int remaining = total - warmup;
    exchange(b, NONE, NONE, 0, -1);   /* the first input */
    for (int k = 0; k < warmup; k++) {
        mt_pp_mc f = fwd_mc(b, k);
        run(b, MT_PP_FORWARD, f.micro, f.chunk);
        int nc = chunk_of(b, k + 1, 1), recv_in = !(first && nc == 0) && k != total - 1 ? nc : -1;
        int recv_grad = k == warmup - 1 && !all_warmup && !last ? v - 1 : -1;
        exchange(b, f, NONE, recv_in, recv_grad);
    }
    for (int k = 0; k < remaining; k++) {
        int fk = k + warmup, bk = k;
        mt_pp_mc f = fwd_mc(b, fk), g = bwd_mc(b, bk);
        run(b, MT_PP_FORWARD, f.micro, f.chunk);
        run(b, MT_PP_BACKWARD, g.micro, g.chunk);
        int recv_in = 1, nfc, recv_grad = 1, nbc;
        if (first) {
            nfc = chunk_of(b, fk - (P - 1), 1);
            if (nfc == v - 1) recv_in = 0;
            nfc++;
        } else nfc = chunk_of(b, fk + 1, 1);
        if (last) {
            nbc = chunk_of(b, bk - (P - 1), 0);
            if (nbc == 0) recv_grad = 0;
            nbc--;
        } else nbc = chunk_of(b, bk + 1, 0);
        if (k == remaining - 1) recv_in = 0;
        exchange(b, f, g, recv_in ? nfc : -1, recv_grad ? nbc : -1);
    }
    if (all_warmup) exchange(b, NONE, NONE, -1, v - 1);
    for (int k = remaining; k < total; k++) {
        mt_pp_mc g = bwd_mc(b, k);
        run(b, MT_PP_BACKWARD, g.micro, g.chunk);
        int nbc = chunk_of(b, k + 1, 0), recv_grad = !(last && nbc == v - 1) && k != total - 1 ? nbc : -1;
        exchange(b, NONE, g, -1, recv_grad);
    }
}

int mt_pp_schedule(int stages, int stage, int micro, int chunks, mt_pp_event **out, int *n, mt_err *e)
{
    *out = NULL;
    *n = 0;
    if (stages < 1 || stage < 0 || stage >= stages || micro < 1 || chunks < 1 || chunks > MAX_CHUNKS)
        return mt_err_set(e, "pipeline schedule: stage %d of %d, %d micro-batches, %d model chunks", stage, stages, micro,
                          chunks);
    if (chunks > 1 && micro % stages)
        return mt_err_set(e, "the interleaved schedule needs micro-batches (%d) a multiple of the stages (%d)", micro,
                          stages);
    builder b = {.P = stages, .s = stage, .M = micro, .v = chunks, .ring = chunks > 1};
    if (chunks > 1) interleaved(&b);
    else one_f_one_b(&b);
    *out = b.ev;
    *n = b.n;
    return 0;
}

static int put_mc(char *buf, int cap, int at, const char *tag, mt_pp_mc mc)
{
    if (mc.micro < 0 || at >= cap) return at;
    return at + snprintf(buf + at, (size_t)(cap - at), " %s %d %d", tag, mc.micro, mc.chunk);
}

void mt_pp_event_format(const mt_pp_event *ev, char *buf, int cap)
{
    if (ev->kind != MT_PP_EXCHANGE) {
        snprintf(buf, (size_t)cap, "%c %d %d", ev->kind == MT_PP_FORWARD ? 'F' : 'B', ev->mc.micro, ev->mc.chunk);
        return;
    }
    int at = snprintf(buf, (size_t)cap, "X");
    at = put_mc(buf, cap, at, "sn", ev->send_next);
    at = put_mc(buf, cap, at, "rn", ev->recv_next);
    at = put_mc(buf, cap, at, "sp", ev->send_prev);
    put_mc(buf, cap, at, "rp", ev->recv_prev);
}
