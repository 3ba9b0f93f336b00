/* comm_staged.c: the host-staged communicator (see comm.h): each operation copies the device buffer to
 * host scratch (after waiting for the kernels' queues), runs the wrapped host communicator's operation
 * on the copy and copies the result back. For ranks whose device buffers the data plane cannot read:
 * ranks that share one GPU, and the simulator backend. */
#include "comm/comm.h"

#include <stdlib.h>

#include "kernels.h"

typedef struct staged_impl {
    mt_comm *host;      /* the wrapped communicator */
    int own_host;       /* 1 when made by split: freed with this one */
    mtk *k;
    char *tmp;          /* host scratch */
    size_t tmp_bytes;
    mt_p2p *hops;       /* the host-side list of a p2p batch */
    int nhops;
} staged_impl;

static const mt_comm_ops staged_ops;

static char *scratch(staged_impl *s, size_t bytes)
{
    if (bytes > s->tmp_bytes || !s->tmp) {
        free(s->tmp);
        s->tmp = mt_xmalloc(bytes ? bytes : 1);
        s->tmp_bytes = bytes;
    }
    return s->tmp;
}

/* Device -> host, after every queue of the kernels (the buffer's producers) is done. */
static int to_host(staged_impl *s, void *dst, const void *src, size_t bytes, mt_err *e)
{
    if (mtk_sync(s->k, e)) return mt_err_prefix(e, "staged communicator");
    if (bytes) mtk_to_host(s->k, dst, src, bytes);
    return mtk_status(s->k, e) ? mt_err_prefix(e, "staged communicator: copy to the host") : 0;
}
static int to_device(staged_impl *s, void *dst, const void *src, size_t bytes, mt_err *e)
{
    if (bytes) mtk_to_device(s->k, dst, src, bytes);
    return mtk_status(s->k, e) ? mt_err_prefix(e, "staged communicator: copy to the device") : 0;
}

/* The host communicator's bytes sent since b0, added to c's count; rc passed through. */
static int counted(mt_comm *c, uint64_t b0, int rc)
{
    c->bytes_sent += ((staged_impl *)c->impl)->host->bytes_sent - b0;
    return rc;
}

static int st_all_reduce(mt_comm *c, void *buf, size_t n, mt_cdtype t, mt_redop op, mt_err *e)
{
    staged_impl *s = c->impl;
    size_t bytes = n * mt_cdtype_size(t);
    char *h = scratch(s, bytes);
    uint64_t b0 = s->host->bytes_sent;
    if (to_host(s, h, buf, bytes, e) || counted(c, b0, mt_all_reduce_op(s->host, h, n, t, op, e))) return -1;
    return to_device(s, buf, h, bytes, e);
}

/* reduce_scatter: every chunk in, this rank's chunk out; all_gather: this rank's chunk in, every chunk out. */
static int chunks(mt_comm *c, void *buf, const size_t *counts, mt_cdtype t, int gather, mt_err *e)
{
    staged_impl *s = c->impl;
    size_t es = mt_cdtype_size(t), total = 0, off = 0;
    for (int i = 0; i < c->size; i++) {
        if (i == c->rank) off = total;
        total += counts[i];
    }
    char *h = scratch(s, total * es), *b = buf;
    size_t mine = counts[c->rank] * es;
    uint64_t b0 = s->host->bytes_sent;
    if (gather ? to_host(s, h + off * es, b + off * es, mine, e) : to_host(s, h, b, total * es, e)) return -1;
    if (counted(c, b0, (gather ? mt_all_gather : mt_reduce_scatter)(s->host, h, counts, t, e))) return -1;
    return gather ? to_device(s, b, h, total * es, e) : to_device(s, b + off * es, h + off * es, mine, e);
}
static int st_reduce_scatter(mt_comm *c, void *buf, const size_t *counts, mt_cdtype t, mt_err *e)
{
    return chunks(c, buf, counts, t, 0, e);
}
static int st_all_gather(mt_comm *c, void *buf, const size_t *counts, mt_cdtype t, mt_err *e)
{
    return chunks(c, buf, counts, t, 1, e);
}

/* Every block out to the host, the host's all-to-all between two parts of the scratch, every block back. */
static int st_all_to_all_v(mt_comm *c, const void *send, const size_t *sendcounts, void *recv, const size_t *recvcounts,
                           mt_cdtype t, mt_err *e)
{
    staged_impl *s = c->impl;
    size_t es = mt_cdtype_size(t), sb = 0, rb = 0;
    for (int i = 0; i < c->size; i++) sb += sendcounts[i] * es, rb += recvcounts[i] * es;
    char *h = scratch(s, sb + rb);
    uint64_t b0 = s->host->bytes_sent;
    if (to_host(s, h, send, sb, e) || counted(c, b0, mt_all_to_all_v(s->host, h, sendcounts, h + sb, recvcounts, t, e)))
        return -1;
    return to_device(s, recv, h + sb, rb, e);
}

static int st_broadcast(mt_comm *c, void *buf, size_t n, mt_cdtype t, int root, mt_err *e)
{
    staged_impl *s = c->impl;
    size_t bytes = n * mt_cdtype_size(t);
    char *h = scratch(s, bytes);
    uint64_t b0 = s->host->bytes_sent;
    if (c->rank == root && to_host(s, h, buf, bytes, e)) return -1;
    if (counted(c, b0, mt_broadcast(s->host, h, n, t, root, e))) return -1;
    return c->rank == root ? 0 : to_device(s, buf, h, bytes, e);
}

static int st_send(mt_comm *c, const void *buf, size_t n, mt_cdtype t, int peer, mt_err *e)
{
    staged_impl *s = c->impl;
    size_t bytes = n * mt_cdtype_size(t);
    char *h = scratch(s, bytes);
    uint64_t b0 = s->host->bytes_sent;
    if (to_host(s, h, buf, bytes, e)) return -1;
    return counted(c, b0, mt_send(s->host, h, n, t, peer, e));
}

static int st_recv(mt_comm *c, void *buf, size_t n, mt_cdtype t, int peer, mt_err *e)
{
    staged_impl *s = c->impl;
    size_t bytes = n * mt_cdtype_size(t);
    char *h = scratch(s, bytes);
    if (mt_recv(s->host, h, n, t, peer, e)) return -1;
    return to_device(s, buf, h, bytes, e);
}

/* Every send staged into its own part of the scratch, the host batch, every receive copied out. */
static int st_p2p(mt_comm *c, mt_p2p *ops, int n, mt_err *e)
{
    staged_impl *s = c->impl;
    size_t total = 0;
    for (int i = 0; i < n; i++) total += ops[i].n * mt_cdtype_size(ops[i].t);
    char *h = scratch(s, total);
    if (n > s->nhops) {
        free(s->hops);
        s->hops = mt_xmalloc((size_t)n * sizeof *s->hops);
        s->nhops = n;
    }
    size_t off = 0;
    for (int i = 0; i < n; i++) {
        size_t bytes = ops[i].n * mt_cdtype_size(ops[i].t);
        s->hops[i] = ops[i];
        s->hops[i].buf = h + off;
        if (ops[i].send && to_host(s, h + off, ops[i].buf, bytes, e)) return -1;
        off += bytes;
    }
    uint64_t b0 = s->host->bytes_sent;
    if (counted(c, b0, mt_p2p_batch(s->host, s->hops, n, e))) return -1;
    off = 0;
    for (int i = 0; i < n; i++) {
        size_t bytes = ops[i].n * mt_cdtype_size(ops[i].t);
        if (!ops[i].send && to_device(s, ops[i].buf, h + off, bytes, e)) return -1;
        off += bytes;
    }
    return 0;
}

static int st_barrier(mt_comm *c, mt_err *e) { return mt_barrier(((staged_impl *)c->impl)->host, e); }

static mt_comm *wrap(mt_comm *host, int own, mtk *k)
{
    mt_comm *c = mt_xcalloc(1, sizeof *c);
    staged_impl *s = mt_xcalloc(1, sizeof *s);
    s->host = host;
    s->own_host = own;
    s->k = k;
    c->ops = &staged_ops;
    c->impl = s;
    c->rank = host->rank;
    c->size = host->size;
    return c;
}

static mt_comm *st_split(mt_comm *c, int color, int key, mt_err *e)
{
    staged_impl *s = c->impl;
    mt_comm *h = mt_comm_split(s->host, color, key, e);
    return h ? wrap(h, 1, s->k) : NULL;
}

static void st_free(mt_comm *c)
{
    staged_impl *s = c->impl;
    if (s->own_host) mt_comm_free(s->host);
    free(s->tmp);
    free(s->hops);
    free(s);
    free(c);
}

static const mt_comm_ops staged_ops = {.name = "staged",
                                       .all_reduce = st_all_reduce,
                                       .reduce_scatter = st_reduce_scatter,
                                       .all_gather = st_all_gather,
                                       .all_to_all_v = st_all_to_all_v,
                                       .broadcast = st_broadcast,
                                       .send = st_send,
                                       .recv = st_recv,
                                       .p2p = st_p2p,
                                       .barrier = st_barrier,
                                       .split = st_split,
                                       .free = st_free};

mt_comm *mt_comm_staged(mt_comm *host_comm, mtk *k, mt_err *e)
{
    if (!host_comm || !k) {
        mt_err_set(e, "staged communicator: no host communicator or no kernels");
        return NULL;
    }
    return wrap(host_comm, 0, k);
}
