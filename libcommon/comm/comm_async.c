/* comm_async.c: the engines of comm_async.h: a progress thread over an MPI duplicate, a CUDA stream over
 * an NCCL duplicate (comm_nccl.c), or the caller's thread. */
#include "comm/comm_async.h"

#include <mpi.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm_nccl.h"

enum { INLINE, THREAD, STREAM };
/* The progress thread's MPI waits test every POLL_US microseconds and sleep in between, leaving the cores to
 * the computation it overlaps (MPI_Waitall would spin on one of them). */
#define POLL_US 250

typedef struct slot {
    mt_async_op op;
    size_t *counts;   /* the engine's copy of op.counts */
    mt_p2p *p2p;      /* and of op.p2p */
} slot;

struct mt_comm_async {
    int mode;
    mt_comm *comm;        /* inline: the caller's communicator (not owned); thread: the duplicate (owned) */
    void *stream;         /* stream: comm_nccl.c's engine */
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    slot *q;
    int cap, started, done, quit, failed;
    uint64_t bytes;       /* thread: the duplicate's bytes_sent after the last operation */
    mt_err err;           /* the first failure */
};

static int run_op(mt_comm *c, const mt_async_op *op, mt_err *e)
{
    switch (op->kind) {
    case MT_ASYNC_ALL_REDUCE: return mt_all_reduce(c, op->buf, op->n, op->t, e);
    case MT_ASYNC_REDUCE_SCATTER: return mt_reduce_scatter(c, op->buf, op->counts, op->t, e);
    case MT_ASYNC_ALL_GATHER: return mt_all_gather(c, op->buf, op->counts, op->t, e);
    case MT_ASYNC_P2P: return mt_p2p_batch(c, (mt_p2p *)op->p2p, op->np, e);
    }
    return mt_err_set(e, "unknown asynchronous operation %d", (int)op->kind);
}

/* The progress thread: the started operations in order; after a failure the rest are only counted. */
static void *progress(void *arg)
{
    mt_comm_async *a = arg;
    pthread_mutex_lock(&a->mu);
    for (;;) {
        while (!a->quit && a->done == a->started) pthread_cond_wait(&a->cv, &a->mu);
        if (a->done == a->started) break;   /* quit, with nothing left */
        mt_async_op op = a->q[a->done].op;
        int failed = a->failed;
        pthread_mutex_unlock(&a->mu);
        mt_err e;
        int rc = failed ? 0 : run_op(a->comm, &op, &e);
        pthread_mutex_lock(&a->mu);
        if (rc && !a->failed) a->failed = 1, a->err = e;
        a->bytes = a->comm->bytes_sent;
        a->done++;
        pthread_cond_broadcast(&a->cv);
    }
    pthread_mutex_unlock(&a->mu);
    return NULL;
}

mt_comm_async *mt_comm_async_new(mt_comm *c, mt_err *e)
{
    mt_comm_async *a = mt_xcalloc(1, sizeof *a);
    pthread_mutex_init(&a->mu, NULL);
    pthread_cond_init(&a->cv, NULL);
    const char *name = c->ops->name;
    if (!strcmp(name, "nccl")) {
        a->mode = STREAM;
        if (!(a->stream = mt_comm_nccl_async_new(c, e))) goto fail;
        return a;
    }
    if (strcmp(name, "mpi") || c->size == 1) {
        a->mode = INLINE;
        a->comm = c;
        return a;
    }
    int level = MPI_THREAD_SINGLE;
    MPI_Query_thread(&level);
    if (level < MPI_THREAD_MULTIPLE) {
        mt_err_set(e, "communication overlapped with computation needs MPI_THREAD_MULTIPLE (this MPI gave level %d)",
                   level);
        goto fail;
    }
    a->mode = THREAD;
    if (!(a->comm = mt_comm_split(c, 0, c->rank, e))) goto fail;
    mt_comm_mpi_poll(a->comm, POLL_US);
    if (pthread_create(&a->thread, NULL, progress, a)) {
        mt_comm_free(a->comm);
        mt_err_set(e, "cannot start the communication progress thread");
        goto fail;
    }
    return a;
fail:
    pthread_mutex_destroy(&a->mu);
    pthread_cond_destroy(&a->cv);
    free(a);
    return NULL;
}

static void clear(mt_comm_async *a)
{
    for (int i = 0; i < a->started; i++) free(a->q[i].counts), free(a->q[i].p2p);
    a->started = a->done = 0;
}

void mt_comm_async_free(mt_comm_async *a)
{
    if (!a) return;
    mt_err ignore;
    if (a->mode == THREAD) {
        pthread_mutex_lock(&a->mu);
        a->quit = 1;
        pthread_cond_broadcast(&a->cv);
        pthread_mutex_unlock(&a->mu);
        pthread_join(a->thread, NULL);
        mt_comm_free(a->comm);
    } else if (a->mode == STREAM) {
        mt_comm_async_drain(a, &ignore);
        mt_comm_nccl_async_free(a->stream);
    }
    clear(a);
    free(a->q);
    pthread_mutex_destroy(&a->mu);
    pthread_cond_destroy(&a->cv);
    free(a);
}

const char *mt_comm_async_mode(const mt_comm_async *a)
{
    return a->mode == THREAD ? "thread" : a->mode == STREAM ? "stream" : "inline";
}

int mt_comm_async_start(mt_comm_async *a, const mt_async_op *op, mt_err *e)
{
    int size = a->mode == STREAM ? mt_comm_nccl_async_size(a->stream) : a->comm->size;
    size_t *counts = NULL;
    mt_p2p *p2p = NULL;
    if (op->kind == MT_ASYNC_REDUCE_SCATTER || op->kind == MT_ASYNC_ALL_GATHER) {
        counts = mt_xmalloc((size_t)size * sizeof *counts);
        memcpy(counts, op->counts, (size_t)size * sizeof *counts);
    } else if (op->kind == MT_ASYNC_P2P) {
        p2p = mt_xmalloc((size_t)(op->np > 0 ? op->np : 1) * sizeof *p2p);
        memcpy(p2p, op->p2p, (size_t)op->np * sizeof *p2p);
    }
    pthread_mutex_lock(&a->mu);
    if (a->started == a->cap) {
        a->cap = a->cap ? 2 * a->cap : 16;
        a->q = mt_xrealloc(a->q, (size_t)a->cap * sizeof *a->q);
    }
    int ticket = a->started;
    a->q[ticket].op = *op;
    a->q[ticket].op.counts = counts;
    a->q[ticket].counts = counts;
    a->q[ticket].op.p2p = p2p;
    a->q[ticket].p2p = p2p;
    int rc = 0;
    if (a->mode == THREAD) {
        a->started++;
        pthread_cond_broadcast(&a->cv);
    } else {
        mt_err oe;
        rc = a->failed ? 0
             : a->mode == STREAM ? mt_comm_nccl_async_start(a->stream, &a->q[ticket].op, ticket, &oe)
                                 : run_op(a->comm, &a->q[ticket].op, &oe);
        if (rc && !a->failed) a->failed = 1, a->err = oe;
        a->started++;
        if (a->mode == INLINE) a->done = a->started;
    }
    int failed = a->failed;
    mt_err err = a->err;
    pthread_mutex_unlock(&a->mu);
    if (failed) {
        *e = err;
        return -1;
    }
    return ticket;
}

int mt_comm_async_wait(mt_comm_async *a, int ticket, mt_err *e)
{
    pthread_mutex_lock(&a->mu);
    if (a->mode == THREAD)
        while (a->done <= ticket && a->done < a->started) pthread_cond_wait(&a->cv, &a->mu);
    else if (a->mode == STREAM && ticket >= a->done && ticket < a->started && !a->failed) {
        mt_err oe;
        if (mt_comm_nccl_async_wait(a->stream, ticket, &oe)) a->failed = 1, a->err = oe;
        else a->done = ticket + 1;
    }
    int failed = a->failed;
    mt_err err = a->err;
    pthread_mutex_unlock(&a->mu);
    if (failed) {
        *e = err;
        return -1;
    }
    return 0;
}

int mt_comm_async_drain(mt_comm_async *a, mt_err *e)
{
    int rc = a->started ? mt_comm_async_wait(a, a->started - 1, e) : 0;
    pthread_mutex_lock(&a->mu);
    clear(a);
    pthread_mutex_unlock(&a->mu);
    return rc;
}

int mt_comm_async_started(const mt_comm_async *a) { return a->started; }

uint64_t mt_comm_async_bytes(const mt_comm_async *a)
{
    if (a->mode == STREAM) return mt_comm_nccl_async_bytes(a->stream);
    if (a->mode != THREAD) return 0;   /* inline: counted on the caller's communicator */
    mt_comm_async *m = (mt_comm_async *)a;
    pthread_mutex_lock(&m->mu);
    uint64_t n = m->bytes;
    pthread_mutex_unlock(&m->mu);
    return n;
}
