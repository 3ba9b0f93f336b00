/* comm_nccl.h: the communicator of GPU ranks over NCCL (built when the CUDA toolkit's nccl.h is there:
 * MT_HAVE_NCCL). The NCCL unique id travels by PMIx (comm/bootstrap.h's mt_boot_share). Buffers are
 * device memory; every operation is enqueued on the given CUDA stream and waited for before it returns,
 * as the MPI implementation's are. Bytes sent are the ring volumes NCCL's ring algorithm sends (NCCL
 * does not report them): 2 (N-1)/N of an all-reduce, the other ranks' chunks of a reduce-scatter or
 * all-gather, the blocks for the other ranks of an all-to-all (grouped ncclSend / ncclRecv; the rank's
 * own block is a device copy on the stream). */
#ifndef MT_COMM_COMM_NCCL_H
#define MT_COMM_COMM_NCCL_H

#include "comm/bootstrap.h"
#include "comm/comm.h"

/* The job's world on the GPU of this rank's local rank (cudaSetDevice), operations on stream (a
 * cudaStream_t; NULL: the default stream). Collective over all ranks of b. NULL with e set. */
mt_comm *mt_comm_nccl_world(mt_boot *b, void *stream, mt_err *e);

/* host_comm's group on NCCL, each rank on its current GPU: rank 0's unique id broadcast over host_comm,
 * then ncclCommInitRank (collective over host_comm). NULL with e set (also in a build without NCCL). */
mt_comm *mt_comm_nccl(mt_comm *host_comm, void *stream, mt_err *e);

/* The stream engine of comm_async.h over c (an NCCL communicator): its own duplicate of c's NCCL
 * communicator (ncclCommSplit) and its own CUDA stream. An operation is enqueued on that stream after an
 * event recorded on c's stream (the compute stream: the kernels enqueued before it have written its
 * buffer), and records a done event of its ticket there; waiting for a ticket makes c's stream wait for
 * that event (cudaStreamWaitEvent: the host goes on). NULL with e set (also in a build without NCCL). */
typedef struct mt_async_op mt_async_op;
void *mt_comm_nccl_async_new(mt_comm *c, mt_err *e);
int mt_comm_nccl_async_size(void *s);
int mt_comm_nccl_async_start(void *s, const mt_async_op *op, int ticket, mt_err *e);
int mt_comm_nccl_async_wait(void *s, int ticket, mt_err *e);
uint64_t mt_comm_nccl_async_bytes(void *s);
/* Waits (on the host) for the engine's stream, then frees it. */
void mt_comm_nccl_async_free(void *s);

/* 1 when this build has NCCL (MT_HAVE_NCCL). */
int mt_comm_nccl_built(void);
/* The GPUs this process can see (0 without a driver or device), -1 in a build without NCCL. */
int mt_comm_gpu_count(void);

#endif
