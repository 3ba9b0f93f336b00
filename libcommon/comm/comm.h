/* comm.h: a communicator over a group of ranks, as an operations table (like kernels' mtk_ops), so
 * that the CPU ranks' MPI implementation, the GPU ranks' NCCL implementation (comm_nccl.h) and the
 * host-staged one (device buffers copied through the host to an MPI communicator) are interchangeable.
 * mt_comm_choose says which one a group's buffers need: MPI on cpu, NCCL where every rank of a node has
 * its own GPU, staged where ranks share a GPU or run the simulator.
 *
 * Every operation is collective over the communicator's ranks unless it is send/recv. Reductions are
 * sums, except that all_reduce also takes MT_OP_MAX (mt_all_reduce_op; e.g. the row maxima of a
 * vocabulary-parallel cross-entropy). reduce_scatter and all_gather work in place on one buffer of all
 * ranks' chunks, chunk i holding counts[i] elements at offset counts[0] + ... + counts[i-1] (chunks may be empty): after
 * reduce_scatter, this rank's chunk holds the sum over ranks of that chunk; after all_gather every
 * chunk holds its owner's values. all_reduce is a reduce_scatter followed by an all_gather (a ring),
 * so every rank ends with bit-identical sums.
 *
 * all_to_all_v exchanges a block with every rank: the send buffer holds the blocks for ranks 0, 1, ...
 * one after another (sendcounts[r] elements for rank r), and the receive buffer gets the blocks from
 * ranks 0, 1, ... one after another (recvcounts[r] elements from rank r); this rank's own block is
 * copied. The two buffers must not overlap. Every rank's recvcounts[r] must equal rank r's sendcounts
 * to it (the counts are not exchanged: the caller's dispatch agrees on them first, as Megatron's
 * all-to-all token dispatcher does); a rank whose own block's two counts differ fails at once.
 *
 * Point-to-point: send and recv block until their transfer is done. mt_p2p_batch posts every send and
 * receive of a list at once and returns when all are complete, so that ranks which send to and receive
 * from each other in one call cannot deadlock (a pipeline schedule's exchanges; PyTorch's
 * batch_isend_irecv). Transfers between the same two ranks in the same direction match in list order;
 * a rank may send to itself (its receive from itself gets the data).
 *
 * Traffic: every operation adds the bytes this rank hands to the transport to c->bytes_sent (a ring
 * all-reduce of S bytes sends 2 (N-1)/N S; an all-to-all the blocks for the other ranks, not its own),
 * so that a step's traffic can be reported.
 *
 * Groups: mt_comm_split makes sub-communicators (tensor, pipeline, data-parallel groups of
 * comm/grid.h) by colour, as MPI_Comm_split does; rank order in the new group follows key.
 */
#ifndef MT_COMM_COMM_H
#define MT_COMM_COMM_H

#include <stddef.h>
#include <stdint.h>

#include "util/err.h"

/* Element types. MT_C_BF16 and MT_C_F16 are 2-byte bit patterns (kernels/mt_base.h converts them); their
 * sums are taken in fp32 at each hop and rounded to the type (to nearest even), as NCCL does. */
typedef enum { MT_C_F32, MT_C_F64, MT_C_I64, MT_C_BYTE, MT_C_BF16, MT_C_F16 } mt_cdtype;
/* The reduction of all_reduce. */
typedef enum { MT_OP_SUM, MT_OP_MAX } mt_redop;

typedef struct mt_comm mt_comm;

/* One transfer of a batch of point-to-point operations (mt_p2p_batch). */
typedef struct mt_p2p {
    int send;        /* 1 send, 0 receive */
    void *buf;
    size_t n;        /* elements */
    mt_cdtype t;
    int peer;        /* the rank in this communicator to send to / receive from */
} mt_p2p;

typedef struct mt_comm_ops {
    const char *name;
    int (*all_reduce)(mt_comm *c, void *buf, size_t n, mt_cdtype t, mt_redop op, mt_err *e);
    int (*reduce_scatter)(mt_comm *c, void *buf, const size_t *counts, mt_cdtype t, mt_err *e);
    int (*all_gather)(mt_comm *c, void *buf, const size_t *counts, mt_cdtype t, mt_err *e);
    int (*all_to_all_v)(mt_comm *c, const void *send, const size_t *sendcounts, void *recv, const size_t *recvcounts,
                        mt_cdtype t, mt_err *e);
    int (*broadcast)(mt_comm *c, void *buf, size_t n, mt_cdtype t, int root, mt_err *e);
    int (*send)(mt_comm *c, const void *buf, size_t n, mt_cdtype t, int peer, mt_err *e);
    int (*recv)(mt_comm *c, void *buf, size_t n, mt_cdtype t, int peer, mt_err *e);
    int (*p2p)(mt_comm *c, mt_p2p *ops, int n, mt_err *e);
    int (*barrier)(mt_comm *c, mt_err *e);
    mt_comm *(*split)(mt_comm *c, int color, int key, mt_err *e);
    void (*free)(mt_comm *c);
} mt_comm_ops;

struct mt_comm {
    const mt_comm_ops *ops;
    int rank, size;
    uint64_t bytes_sent;   /* bytes this rank sent, over the communicator's life */
    void *impl;
};

size_t mt_cdtype_size(mt_cdtype t);

/* A communicator of one rank: every collective is the identity and sends nothing. */
mt_comm *mt_comm_single(void);
/* MPI_COMM_WORLD (MPI must be running: comm/bootstrap.h). NULL with e set. */
mt_comm *mt_comm_mpi_world(mt_err *e);

/* The host-staged communicator over host_comm, for device buffers of the kernels k that the data plane
 * cannot read (ranks sharing a GPU, the simulator backend): each operation waits for k's queues, copies
 * the device buffer to host scratch (mtk_to_host), runs host_comm's operation on the copy and copies the
 * result back (mtk_to_device); only what the operation defines travels (this rank's chunk back after a
 * reduce_scatter, this rank's chunk in before an all_gather). The results are host_comm's bits, and so
 * are the bytes sent. It does not own host_comm: free host_comm after it. Its split is a staged
 * communicator over host_comm's split, which that one owns. NULL with e set. */
typedef struct mtk mtk;
mt_comm *mt_comm_staged(mt_comm *host_comm, mtk *k, mt_err *e);

/* Which communicator a group's device buffers need (ordered so that the largest wins when ranks differ). */
typedef enum { MT_COMM_MPI, MT_COMM_NCCL, MT_COMM_STAGED } mt_comm_kind;
const char *mt_comm_kind_name(mt_comm_kind kind);

/* The choice for kernel backend `backend` ("cpu", "sim", "cuda") of a rank that is local_rank of
 * local_size ranks on a node with gpus_on_node GPUs (-1: unknown, a build without NCCL), nccl_built
 * when NCCL is in this build: MPI on cpu (device memory is host memory); STAGED on sim, on cuda when the
 * node's ranks share GPUs (local_size > gpus_on_node), without NCCL, or when the GPUs cannot be counted;
 * else NCCL. *device: the GPU of this rank, local_rank % gpus_on_node (local rank -> device, as
 * Megatron). -1 with e set when nothing can work: cuda on a node without a GPU, an unknown backend. */
int mt_comm_choose(const char *backend, int local_rank, int local_size, int gpus_on_node, int nccl_built,
                   mt_comm_kind *kind, int *device, mt_err *e);

/* The communicator of kind over host_comm's group for device buffers of k: host_comm itself for MPI (the
 * caller then must not free it twice), a staged one (not owning host_comm), or NCCL (its unique id
 * broadcast over host_comm; operations on k's compute queue, after the kernels enqueued there; collective
 * over host_comm). NULL with e set. */
mt_comm *mt_comm_for_backend(mt_comm *host_comm, mtk *k, mt_comm_kind kind, mt_err *e);

/* The operations, through the table. */
static inline int mt_all_reduce(mt_comm *c, void *buf, size_t n, mt_cdtype t, mt_err *e)
{
    return c->ops->all_reduce(c, buf, n, t, MT_OP_SUM, e);
}
static inline int mt_all_reduce_op(mt_comm *c, void *buf, size_t n, mt_cdtype t, mt_redop op, mt_err *e)
{
    return c->ops->all_reduce(c, buf, n, t, op, e);
}
static inline int mt_reduce_scatter(mt_comm *c, void *buf, const size_t *counts, mt_cdtype t, mt_err *e)
{
    return c->ops->reduce_scatter(c, buf, counts, t, e);
}
static inline int mt_all_gather(mt_comm *c, void *buf, const size_t *counts, mt_cdtype t, mt_err *e)
{
    return c->ops->all_gather(c, buf, counts, t, e);
}
/* sendcounts[r] elements from send (the peers' blocks one after another, in rank order) to rank r, and
 * recvcounts[r] elements from rank r into recv (likewise); every rank's recvcounts[r] must be rank r's
 * sendcounts to it. */
static inline int mt_all_to_all_v(mt_comm *c, const void *send, const size_t *sendcounts, void *recv,
                                  const size_t *recvcounts, mt_cdtype t, mt_err *e)
{
    if (sendcounts[c->rank] != recvcounts[c->rank])
        return mt_err_set(e, "all-to-all: rank %d sends %zu elements to itself but receives %zu", c->rank,
                          sendcounts[c->rank], recvcounts[c->rank]);
    return c->ops->all_to_all_v(c, send, sendcounts, recv, recvcounts, t, e);
}
static inline int mt_broadcast(mt_comm *c, void *buf, size_t n, mt_cdtype t, int root, mt_err *e)
{
    return c->ops->broadcast(c, buf, n, t, root, e);
}
static inline int mt_send(mt_comm *c, const void *buf, size_t n, mt_cdtype t, int peer, mt_err *e)
{
    return c->ops->send(c, buf, n, t, peer, e);
}
static inline int mt_recv(mt_comm *c, void *buf, size_t n, mt_cdtype t, int peer, mt_err *e)
{
    return c->ops->recv(c, buf, n, t, peer, e);
}
static inline int mt_p2p_batch(mt_comm *c, mt_p2p *ops, int n, mt_err *e) { return c->ops->p2p(c, ops, n, e); }
static inline int mt_barrier(mt_comm *c, mt_err *e) { return c->ops->barrier(c, e); }
static inline mt_comm *mt_comm_split(mt_comm *c, int color, int key, mt_err *e) { return c->ops->split(c, color, key, e); }
static inline void mt_comm_free(mt_comm *c)
{
    if (c) c->ops->free(c);
}

/* On an MPI communicator: its collectives' and batches' waits test for completion every us microseconds and
 * sleep in between instead of spinning in MPI_Waitall (0: spin again), for a progress thread that shares
 * the cores with computation (comm_async.h). Nothing on other communicators. */
void mt_comm_mpi_poll(mt_comm *c, int us);
/* On an MPI communicator: the largest block length or offset in bytes that all_to_all_v hands to MPI as an
 * int (default INT_MAX); a larger block goes as a datatype of pieces of at most this size at its 64-bit
 * offset (comm_mpi.c). Smaller limits are for tests of that path on small buffers. Nothing on others. */
void mt_comm_mpi_int_limit(mt_comm *c, size_t bytes);

/* counts[i] = the share of chunk i when n elements are cut into size near-equal contiguous chunks
 * (the first n % size one longer). */
void mt_comm_even_counts(size_t n, int size, size_t *counts);

#endif
