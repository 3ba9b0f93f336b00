/* comm.c: the one-rank communicator and helpers shared by the implementations (see comm.h). */
#include "comm/comm.h"

#include <stdlib.h>
#include <string.h>

size_t mt_cdtype_size(mt_cdtype t)
{
    switch (t) {
    case MT_C_F32: return 4;
    case MT_C_F64: return 8;
    case MT_C_I64: return 8;
    case MT_C_BYTE: return 1;
    case MT_C_BF16: return 2;
    case MT_C_F16: return 2;
    }
    return 1;
}

void mt_comm_even_counts(size_t n, int size, size_t *counts)
{
    for (int i = 0; i < size; i++) counts[i] = n / (size_t)size + ((size_t)i < n % (size_t)size);
}

static int s_all_reduce(mt_comm *c, void *buf, size_t n, mt_cdtype t, mt_redop op, mt_err *e)
{
    (void)c, (void)buf, (void)n, (void)t, (void)op, (void)e;
    return 0;
}
static int s_chunks(mt_comm *c, void *buf, const size_t *counts, mt_cdtype t, mt_err *e)
{
    (void)c, (void)buf, (void)counts, (void)t, (void)e;
    return 0;
}
/* The one block: this rank's own (mt_all_to_all_v has checked that its two counts agree). */
static int s_all_to_all_v(mt_comm *c, const void *send, const size_t *sendcounts, void *recv, const size_t *recvcounts,
                          mt_cdtype t, mt_err *e)
{
    (void)c, (void)recvcounts, (void)e;
    size_t bytes = sendcounts[0] * mt_cdtype_size(t);
    if (bytes) memcpy(recv, send, bytes);
    return 0;
}
static int s_broadcast(mt_comm *c, void *buf, size_t n, mt_cdtype t, int root, mt_err *e)
{
    (void)c, (void)buf, (void)n, (void)t;
    return root == 0 ? 0 : mt_err_set(e, "broadcast from rank %d in a group of one", root);
}
static int s_send(mt_comm *c, const void *buf, size_t n, mt_cdtype t, int peer, mt_err *e)
{
    (void)c, (void)buf, (void)n, (void)t;
    return mt_err_set(e, "send to rank %d in a group of one", peer);
}
static int s_recv(mt_comm *c, void *buf, size_t n, mt_cdtype t, int peer, mt_err *e)
{
    (void)c, (void)buf, (void)n, (void)t;
    return mt_err_set(e, "receive from rank %d in a group of one", peer);
}
/* Sends to self matched in order with receives from self: copies. */
static int s_p2p(mt_comm *c, mt_p2p *ops, int n, mt_err *e)
{
    (void)c;
    int next = 0;   /* the next send to match */
    for (int i = 0; i < n; i++) {
        if (ops[i].peer != 0)
            return mt_err_set(e, "%s rank %d in a group of one", ops[i].send ? "send to" : "receive from", ops[i].peer);
        if (ops[i].send) continue;
        while (next < n && !ops[next].send) next++;
        if (next == n) return mt_err_set(e, "a receive from rank 0 without a matching send");
        size_t bytes = ops[i].n * mt_cdtype_size(ops[i].t);
        if (bytes != ops[next].n * mt_cdtype_size(ops[next].t))
            return mt_err_set(e, "a receive of %zu bytes matched with a send of %zu", bytes,
                              ops[next].n * mt_cdtype_size(ops[next].t));
        if (bytes) memmove(ops[i].buf, ops[next].buf, bytes);
        next++;
    }
    while (next < n && !ops[next].send) next++;
    return next < n ? mt_err_set(e, "a send to rank 0 without a matching receive") : 0;
}
static int s_barrier(mt_comm *c, mt_err *e)
{
    (void)c, (void)e;
    return 0;
}
static mt_comm *s_split(mt_comm *c, int color, int key, mt_err *e)
{
    (void)c, (void)color, (void)key, (void)e;
    return mt_comm_single();
}
static void s_free(mt_comm *c) { free(c); }

static const mt_comm_ops single_ops = {.name = "single",
                                       .all_reduce = s_all_reduce,
                                       .reduce_scatter = s_chunks,
                                       .all_gather = s_chunks,
                                       .all_to_all_v = s_all_to_all_v,
                                       .broadcast = s_broadcast,
                                       .send = s_send,
                                       .recv = s_recv,
                                       .p2p = s_p2p,
                                       .barrier = s_barrier,
                                       .split = s_split,
                                       .free = s_free};

mt_comm *mt_comm_single(void)
{
    mt_comm *c = mt_xcalloc(1, sizeof *c);
    c->ops = &single_ops;
    c->rank = 0;
    c->size = 1;
    return c;
}
