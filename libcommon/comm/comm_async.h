/* comm_async.h: collectives started now and completed later, for the data-parallel buckets that
 * --overlap-grad-reduce and --overlap-param-gather run while the model computes, and the blocks that
 * ring attention passes on while it computes the one in hand.
 *
 * An engine works on its own duplicate of a communicator (comm.h's split with one colour), so that its
 * operations never mix with those the caller runs on the original meanwhile. Operations run one at a
 * time, in the order they were started: every rank must start the same operations in the same order.
 * Each start returns a ticket (0, 1, ... since the engine was made or last drained); waiting for a ticket
 * waits for it and every ticket before it. The results are the communicator's own bits (the same ring in
 * the same order as the blocking call), so overlapping never changes a sum.
 *
 * How it runs depends on the communicator:
 *   mpi     a progress thread of the engine runs the operations on the duplicate (MPI must give
 *           MPI_THREAD_MULTIPLE: comm/bootstrap.h's mt_boot_mpi asks for it when told to); a wait blocks
 *           the caller until the thread has finished the ticket;
 *   nccl    the operations are enqueued on a CUDA stream of the engine after an event recorded on the
 *           compute stream (so they read what the kernels before them wrote); a wait makes the compute
 *           stream wait for the ticket's event, without blocking the host (comm_nccl.h);
 *   others  (host-staged, one rank) the operation runs at once on the calling thread, and waits return.
 * An error is sticky: the wait that meets it (or any later one) returns it.
 */
#ifndef MT_COMM_COMM_ASYNC_H
#define MT_COMM_COMM_ASYNC_H

#include <stddef.h>
#include <stdint.h>

#include "comm/comm.h"
#include "util/err.h"

typedef enum { MT_ASYNC_ALL_REDUCE, MT_ASYNC_REDUCE_SCATTER, MT_ASYNC_ALL_GATHER, MT_ASYNC_P2P } mt_async_kind;

/* One operation: all_reduce of n elements of buf, or reduce_scatter / all_gather of buf's chunks
 * (counts[size]; copied at the start), or a batch of np point-to-point transfers (p2p[np], comm.h's
 * mt_p2p_batch; copied at the start: the ring of context parallelism's attention). */
typedef struct mt_async_op {
    mt_async_kind kind;
    void *buf;
    size_t n;
    const size_t *counts;
    mt_cdtype t;
    const mt_p2p *p2p;
    int np;
} mt_async_op;

typedef struct mt_comm_async mt_comm_async;

/* An engine over c's group (collective over c: it duplicates c). NULL with e set. */
mt_comm_async *mt_comm_async_new(mt_comm *c, mt_err *e);
/* Waits for everything started, then stops the engine. */
void mt_comm_async_free(mt_comm_async *a);
/* "thread", "stream" or "inline": how the engine runs (above). */
const char *mt_comm_async_mode(const mt_comm_async *a);

/* Starts op; its ticket (>= 0), or -1 with e set. */
int mt_comm_async_start(mt_comm_async *a, const mt_async_op *op, mt_err *e);
/* Waits for ticket and every one before it. 0, or -1 with e set (the first failed operation's error). */
int mt_comm_async_wait(mt_comm_async *a, int ticket, mt_err *e);
/* Waits for every ticket started, then numbers the next one 0 again. 0 or -1 as a wait. */
int mt_comm_async_drain(mt_comm_async *a, mt_err *e);
/* Tickets started since the last drain, and how many of them are complete (as far as the host knows: on a
 * stream, those waited for). */
int mt_comm_async_started(const mt_comm_async *a);
/* Bytes the engine's operations sent (its duplicate's bytes_sent; read after a drain). */
uint64_t mt_comm_async_bytes(const mt_comm_async *a);

#endif
