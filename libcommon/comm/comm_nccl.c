/* comm_nccl.c: the NCCL implementation of the communicator's operations table (see comm_nccl.h).
 * The Makefile defines MT_HAVE_NCCL when the CUDA toolkit has nccl.h (and links libnccl); without it
 * the functions say that this build has no NCCL. */
#include "comm/comm_nccl.h"

#include "comm/comm_async.h"

#ifdef MT_HAVE_NCCL
#include <cuda_runtime.h>
#include <nccl.h>
#include <stdlib.h>
#include <string.h>

typedef struct nccl_impl {
    ncclComm_t comm;
    cudaStream_t stream;
} nccl_impl;

static const mt_comm_ops nccl_ops;

static ncclDataType_t nccl_type(mt_cdtype t)
{
    switch (t) {
    case MT_C_F32: return ncclFloat32;
    case MT_C_F64: return ncclFloat64;
    case MT_C_I64: return ncclInt64;
    case MT_C_BYTE: return ncclUint8;
    case MT_C_BF16: return ncclBfloat16;
    case MT_C_F16: return ncclFloat16;
    }
    return ncclUint8;
}

/* Waits for the stream; the first NCCL or CUDA error as e. */
static int finish(mt_comm *c, const char *what, ncclResult_t r, mt_err *e)
{
    nccl_impl *m = c->impl;
    if (r != ncclSuccess) return mt_err_set(e, "%s (rank %d of %d): %s", what, c->rank, c->size, ncclGetErrorString(r));
    cudaError_t ce = cudaStreamSynchronize(m->stream);
    if (ce != cudaSuccess) return mt_err_set(e, "%s (rank %d of %d): %s", what, c->rank, c->size, cudaGetErrorString(ce));
    ncclResult_t ar;
    if (ncclCommGetAsyncError(m->comm, &ar) == ncclSuccess && ar != ncclSuccess)
        return mt_err_set(e, "%s (rank %d of %d): %s", what, c->rank, c->size, ncclGetErrorString(ar));
    return 0;
}

static int n_all_reduce(mt_comm *c, void *buf, size_t n, mt_cdtype t, mt_redop op, mt_err *e)
{
    nccl_impl *m = c->impl;
    if (c->size == 1) return 0;
    ncclResult_t r = ncclAllReduce(buf, buf, n, nccl_type(t), op == MT_OP_MAX ? ncclMax : ncclSum, m->comm, m->stream);
    c->bytes_sent += 2 * (n * mt_cdtype_size(t)) * (size_t)(c->size - 1) / (size_t)c->size;
    return finish(c, "ncclAllReduce", r, e);
}

/* reduce_scatter / all_gather over chunks of any sizes: one rooted operation per chunk in a group. */
static int chunks(mt_comm *c, void *buf, const size_t *counts, mt_cdtype t, int gather, mt_err *e)
{
    nccl_impl *m = c->impl;
    if (c->size == 1) return 0;
    size_t es = mt_cdtype_size(t), off = 0;
    char *b = buf;
    ncclResult_t r = ncclGroupStart();
    for (int i = 0; i < c->size && r == ncclSuccess; i++) {
        if (counts[i])
            r = gather ? ncclBroadcast(b + off * es, b + off * es, counts[i], nccl_type(t), i, m->comm, m->stream)
                       : ncclReduce(b + off * es, b + off * es, counts[i], nccl_type(t), ncclSum, i, m->comm, m->stream);
        /* ring volume: every chunk but one (the next rank's for a gather, this rank's for a reduction) */
        if (i != (gather ? (c->rank + 1) % c->size : c->rank)) c->bytes_sent += counts[i] * es;
        off += counts[i];
    }
    ncclResult_t r2 = ncclGroupEnd();
    return finish(c, gather ? "all-gather" : "reduce-scatter", r != ncclSuccess ? r : r2, e);
}
static int n_reduce_scatter(mt_comm *c, void *buf, const size_t *counts, mt_cdtype t, mt_err *e)
{
    return chunks(c, buf, counts, t, 0, e);
}
static int n_all_gather(mt_comm *c, void *buf, const size_t *counts, mt_cdtype t, mt_err *e)
{
    return chunks(c, buf, counts, t, 1, e);
}

/* This rank's own block by a device copy on the stream, then one group of an ncclSend and an ncclRecv per
 * other rank with a non-empty block. */
static int n_all_to_all_v(mt_comm *c, const void *send, const size_t *sendcounts, void *recv, const size_t *recvcounts,
                          mt_cdtype t, mt_err *e)
{
    nccl_impl *m = c->impl;
    size_t es = mt_cdtype_size(t), so = 0, ro = 0;
    const char *sb = send;
    char *rb = recv;
    for (int i = 0; i < c->rank; i++) so += sendcounts[i], ro += recvcounts[i];
    if (sendcounts[c->rank]) {
        cudaError_t ce = cudaMemcpyAsync(rb + ro * es, sb + so * es, sendcounts[c->rank] * es, cudaMemcpyDeviceToDevice,
                                         m->stream);
        if (ce != cudaSuccess)
            return mt_err_set(e, "all-to-all (rank %d of %d): own block: %s", c->rank, c->size, cudaGetErrorString(ce));
    }
    if (c->size == 1) return finish(c, "all-to-all", ncclSuccess, e);
    so = ro = 0;
    ncclResult_t r = ncclGroupStart();
    for (int i = 0; i < c->size && r == ncclSuccess; i++) {
        if (i != c->rank && sendcounts[i]) {
            r = ncclSend(sb + so * es, sendcounts[i], nccl_type(t), i, m->comm, m->stream);
            c->bytes_sent += sendcounts[i] * es;
        }
        if (i != c->rank && recvcounts[i] && r == ncclSuccess)
            r = ncclRecv(rb + ro * es, recvcounts[i], nccl_type(t), i, m->comm, m->stream);
        so += sendcounts[i], ro += recvcounts[i];
    }
    ncclResult_t r2 = ncclGroupEnd();
    return finish(c, "all-to-all", r != ncclSuccess ? r : r2, e);
}

static int n_broadcast(mt_comm *c, void *buf, size_t n, mt_cdtype t, int root, mt_err *e)
{
    nccl_impl *m = c->impl;
    if (root < 0 || root >= c->size) return mt_err_set(e, "broadcast from rank %d of %d", root, c->size);
    if (c->size == 1) return 0;
    ncclResult_t r = ncclBroadcast(buf, buf, n, nccl_type(t), root, m->comm, m->stream);
    if ((c->rank - root + c->size) % c->size != c->size - 1) c->bytes_sent += n * mt_cdtype_size(t);
    return finish(c, "ncclBroadcast", r, e);
}

static int n_send(mt_comm *c, const void *buf, size_t n, mt_cdtype t, int peer, mt_err *e)
{
    nccl_impl *m = c->impl;
    ncclResult_t r = ncclSend(buf, n, nccl_type(t), peer, m->comm, m->stream);
    c->bytes_sent += n * mt_cdtype_size(t);
    return finish(c, "ncclSend", r, e);
}

static int n_recv(mt_comm *c, void *buf, size_t n, mt_cdtype t, int peer, mt_err *e)
{
    nccl_impl *m = c->impl;
    return finish(c, "ncclRecv", ncclRecv(buf, n, nccl_type(t), peer, m->comm, m->stream), e);
}

static int n_p2p(mt_comm *c, mt_p2p *ops, int n, mt_err *e)
{
    nccl_impl *m = c->impl;
    ncclResult_t r = ncclGroupStart();
    for (int i = 0; i < n && r == ncclSuccess; i++) {
        if (ops[i].peer < 0 || ops[i].peer >= c->size) {
            ncclGroupEnd();
            return mt_err_set(e, "%s rank %d of %d", ops[i].send ? "send to" : "receive from", ops[i].peer, c->size);
        }
        if (ops[i].send) {
            r = ncclSend(ops[i].buf, ops[i].n, nccl_type(ops[i].t), ops[i].peer, m->comm, m->stream);
            c->bytes_sent += ops[i].n * mt_cdtype_size(ops[i].t);
        } else r = ncclRecv(ops[i].buf, ops[i].n, nccl_type(ops[i].t), ops[i].peer, m->comm, m->stream);
    }
    ncclResult_t r2 = ncclGroupEnd();
    return finish(c, "point-to-point batch", r != ncclSuccess ? r : r2, e);
}

static int n_barrier(mt_comm *c, mt_err *e)
{
    nccl_impl *m = c->impl;
    if (c->size == 1) return 0;
    float *x;
    if (cudaMalloc((void **)&x, sizeof *x) != cudaSuccess) return mt_err_set(e, "barrier: cudaMalloc failed");
    ncclResult_t r = ncclAllReduce(x, x, 1, ncclFloat32, ncclSum, m->comm, m->stream);
    int rc = finish(c, "barrier", r, e);
    cudaFree(x);
    return rc;
}

static mt_comm *wrap(ncclComm_t comm, cudaStream_t stream)
{
    mt_comm *c = mt_xcalloc(1, sizeof *c);
    nccl_impl *m = mt_xcalloc(1, sizeof *m);
    m->comm = comm;
    m->stream = stream;
    c->ops = &nccl_ops;
    c->impl = m;
    ncclCommUserRank(comm, &c->rank);
    ncclCommCount(comm, &c->size);
    return c;
}

static mt_comm *n_split(mt_comm *c, int color, int key, mt_err *e)
{
    nccl_impl *m = c->impl;
    ncclComm_t nc;
    ncclResult_t r = ncclCommSplit(m->comm, color, key, &nc, NULL);
    if (r != ncclSuccess) {
        mt_err_set(e, "ncclCommSplit: %s", ncclGetErrorString(r));
        return NULL;
    }
    return wrap(nc, m->stream);
}

static void n_free(mt_comm *c)
{
    nccl_impl *m = c->impl;
    ncclCommDestroy(m->comm);
    free(m);
    free(c);
}

static const mt_comm_ops nccl_ops = {.name = "nccl",
                                     .all_reduce = n_all_reduce,
                                     .reduce_scatter = n_reduce_scatter,
                                     .all_gather = n_all_gather,
                                     .all_to_all_v = n_all_to_all_v,
                                     .broadcast = n_broadcast,
                                     .send = n_send,
                                     .recv = n_recv,
                                     .p2p = n_p2p,
                                     .barrier = n_barrier,
                                     .split = n_split,
                                     .free = n_free};

mt_comm *mt_comm_nccl_world(mt_boot *b, void *stream, mt_err *e)
{
    if (cudaSetDevice(b->local_rank) != cudaSuccess) {
        mt_err_set(e, "rank %d: cannot use GPU %d (local rank)", b->rank, b->local_rank);
        return NULL;
    }
    ncclUniqueId id;
    if (b->rank == 0 && ncclGetUniqueId(&id) != ncclSuccess) {
        mt_err_set(e, "ncclGetUniqueId failed");
        return NULL;
    }
    if (mt_boot_share(b, "mt.nccl.unique_id", &id, sizeof id, 0, e)) return NULL;
    ncclComm_t comm;
    ncclResult_t r = ncclCommInitRank(&comm, b->size, id, b->rank);
    if (r != ncclSuccess) {
        mt_err_set(e, "ncclCommInitRank (rank %d of %d): %s", b->rank, b->size, ncclGetErrorString(r));
        return NULL;
    }
    return wrap(comm, (cudaStream_t)stream);
}
/* The group of host_comm on NCCL: rank 0's unique id broadcast over host_comm, one ncclCommInitRank. */
mt_comm *mt_comm_nccl(mt_comm *host_comm, void *stream, mt_err *e)
{
    ncclUniqueId id;
    memset(&id, 0, sizeof id);
    ncclResult_t r = host_comm->rank == 0 ? ncclGetUniqueId(&id) : ncclSuccess;
    int64_t ok = r == ncclSuccess;
    /* every rank learns whether rank 0 has an id, so that none waits for it in vain */
    if (mt_broadcast(host_comm, &ok, 1, MT_C_I64, 0, e)) return NULL;
    if (!ok) {
        mt_err_set(e, "ncclGetUniqueId (rank 0): %s", ncclGetErrorString(r));
        return NULL;
    }
    if (mt_broadcast(host_comm, &id, sizeof id, MT_C_BYTE, 0, e)) return NULL;
    ncclComm_t comm;
    r = ncclCommInitRank(&comm, host_comm->size, id, host_comm->rank);
    if (r != ncclSuccess) {
        mt_err_set(e, "ncclCommInitRank (rank %d of %d): %s", host_comm->rank, host_comm->size, ncclGetErrorString(r));
        return NULL;
    }
    return wrap(comm, (cudaStream_t)stream);
}

/* ---- the stream engine of comm_async.h ---- */

typedef struct nccl_async {
    mt_comm *own;              /* the duplicate: its NCCL communicator, on the engine's stream */
    cudaStream_t compute, side;
    cudaEvent_t ready;         /* recorded on the compute stream before each operation */
    cudaEvent_t *done;         /* per ticket, made as tickets first reach them */
    int ndone;
} nccl_async;

static int cuda_fail(const char *what, cudaError_t ce, mt_err *e)
{
    return mt_err_set(e, "%s: %s", what, cudaGetErrorString(ce));
}

void *mt_comm_nccl_async_new(mt_comm *c, mt_err *e)
{
    nccl_async *s = mt_xcalloc(1, sizeof *s);
    s->compute = ((nccl_impl *)c->impl)->stream;
    cudaError_t ce = cudaStreamCreateWithFlags(&s->side, cudaStreamNonBlocking);
    if (ce != cudaSuccess) {
        cuda_fail("the communication stream", ce, e);
        free(s);
        return NULL;
    }
    if ((ce = cudaEventCreateWithFlags(&s->ready, cudaEventDisableTiming)) != cudaSuccess) {
        cuda_fail("the communication stream's event", ce, e);
        cudaStreamDestroy(s->side);
        free(s);
        return NULL;
    }
    if (!(s->own = n_split(c, 0, c->rank, e))) {
        cudaEventDestroy(s->ready);
        cudaStreamDestroy(s->side);
        free(s);
        return NULL;
    }
    ((nccl_impl *)s->own->impl)->stream = s->side;
    return s;
}

int mt_comm_nccl_async_size(void *s) { return ((nccl_async *)s)->own->size; }

int mt_comm_nccl_async_start(void *sp, const mt_async_op *op, int ticket, mt_err *e)
{
    nccl_async *s = sp;
    mt_comm *c = s->own;
    nccl_impl *m = c->impl;
    while (s->ndone <= ticket) {
        s->done = mt_xrealloc(s->done, (size_t)(s->ndone + 1) * sizeof *s->done);
        cudaError_t ce = cudaEventCreateWithFlags(&s->done[s->ndone], cudaEventDisableTiming);
        if (ce != cudaSuccess) return cuda_fail("a communication event", ce, e);
        s->ndone++;
    }
    cudaError_t ce = cudaEventRecord(s->ready, s->compute);
    if (ce == cudaSuccess) ce = cudaStreamWaitEvent(s->side, s->ready, 0);
    if (ce != cudaSuccess) return cuda_fail("ordering a bucket after the kernels", ce, e);
    ncclResult_t r = ncclSuccess;
    if (c->size > 1) {
        if (op->kind == MT_ASYNC_ALL_REDUCE) {
            r = ncclAllReduce(op->buf, op->buf, op->n, nccl_type(op->t), ncclSum, m->comm, s->side);
            c->bytes_sent += 2 * (op->n * mt_cdtype_size(op->t)) * (size_t)(c->size - 1) / (size_t)c->size;
        } else if (op->kind == MT_ASYNC_P2P) {   /* one group of sends and receives, as the blocking batch */
            r = ncclGroupStart();
            for (int i = 0; i < op->np && r == ncclSuccess; i++) {
                const mt_p2p *q = &op->p2p[i];
                r = q->send ? ncclSend(q->buf, q->n, nccl_type(q->t), q->peer, m->comm, s->side)
                            : ncclRecv(q->buf, q->n, nccl_type(q->t), q->peer, m->comm, s->side);
                if (q->send) c->bytes_sent += q->n * mt_cdtype_size(q->t);
            }
            ncclResult_t r2 = ncclGroupEnd();
            if (r == ncclSuccess) r = r2;
        } else {
            /* chunks as the blocking reduce_scatter / all_gather run them, without the host wait */
            int gather = op->kind == MT_ASYNC_ALL_GATHER;
            size_t es = mt_cdtype_size(op->t), off = 0;
            char *b = op->buf;
            r = ncclGroupStart();
            for (int i = 0; i < c->size && r == ncclSuccess; i++) {
                size_t n = op->counts[i];
                if (n)
                    r = gather ? ncclBroadcast(b + off * es, b + off * es, n, nccl_type(op->t), i, m->comm, s->side)
                               : ncclReduce(b + off * es, b + off * es, n, nccl_type(op->t), ncclSum, i, m->comm, s->side);
                if (i != (gather ? (c->rank + 1) % c->size : c->rank)) c->bytes_sent += n * es;
                off += n;
            }
            ncclResult_t r2 = ncclGroupEnd();
            if (r == ncclSuccess) r = r2;
        }
    }
    if (r != ncclSuccess) return mt_err_set(e, "bucket (rank %d of %d): %s", c->rank, c->size, ncclGetErrorString(r));
    ce = cudaEventRecord(s->done[ticket], s->side);
    return ce == cudaSuccess ? 0 : cuda_fail("a bucket's event", ce, e);
}

int mt_comm_nccl_async_wait(void *sp, int ticket, mt_err *e)
{
    nccl_async *s = sp;
    if (ticket < 0 || ticket >= s->ndone) return mt_err_set(e, "waiting for bucket %d of %d", ticket, s->ndone);
    cudaError_t ce = cudaStreamWaitEvent(s->compute, s->done[ticket], 0);
    if (ce != cudaSuccess) return cuda_fail("waiting for a bucket", ce, e);
    ncclResult_t ar;
    if (ncclCommGetAsyncError(((nccl_impl *)s->own->impl)->comm, &ar) == ncclSuccess && ar != ncclSuccess)
        return mt_err_set(e, "bucket: %s", ncclGetErrorString(ar));
    return 0;
}

uint64_t mt_comm_nccl_async_bytes(void *s) { return ((nccl_async *)s)->own->bytes_sent; }

void mt_comm_nccl_async_free(void *sp)
{
    nccl_async *s = sp;
    if (!s) return;
    cudaStreamSynchronize(s->side);
    for (int i = 0; i < s->ndone; i++) cudaEventDestroy(s->done[i]);
    free(s->done);
    cudaEventDestroy(s->ready);
    n_free(s->own);
    cudaStreamDestroy(s->side);
    free(s);
}

int mt_comm_nccl_built(void) { return 1; }

int mt_comm_gpu_count(void)
{
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    return n;
}
#else
mt_comm *mt_comm_nccl_world(mt_boot *b, void *stream, mt_err *e)
{
    (void)b, (void)stream;
    mt_err_set(e, "this build has no NCCL (no nccl.h in the CUDA toolkit)");
    return NULL;
}
mt_comm *mt_comm_nccl(mt_comm *host_comm, void *stream, mt_err *e)
{
    (void)host_comm;
    return mt_comm_nccl_world(NULL, stream, e);
}
void *mt_comm_nccl_async_new(mt_comm *c, mt_err *e)
{
    (void)c;
    mt_err_set(e, "this build has no NCCL (no nccl.h in the CUDA toolkit)");
    return NULL;
}
int mt_comm_nccl_async_size(void *s)
{
    (void)s;
    return 1;
}
int mt_comm_nccl_async_start(void *s, const mt_async_op *op, int ticket, mt_err *e)
{
    (void)s, (void)op, (void)ticket;
    return mt_err_set(e, "this build has no NCCL");
}
int mt_comm_nccl_async_wait(void *s, int ticket, mt_err *e)
{
    (void)s, (void)ticket;
    return mt_err_set(e, "this build has no NCCL");
}
uint64_t mt_comm_nccl_async_bytes(void *s)
{
    (void)s;
    return 0;
}
void mt_comm_nccl_async_free(void *s) { (void)s; }
int mt_comm_nccl_built(void) { return 0; }
int mt_comm_gpu_count(void) { return -1; }
#endif
