/* comm_nccl.h: the communicator of GPU ranks over NCCL (built when the CUDA toolkit's nccl.h is there:
 * MT_HAVE_NCCL). The NCCL unique id travels by PMIx (comm/bootstrap.h's mt_boot_share). Buffers are
 * device memory; every operation is enqueued on the given CUDA stream and waited for before it returns,
 * as the MPI implementation's are. Bytes sent are the ring volumes NCCL's ring algorithm sends (NCCL
 * does not report them): 2 (N-1)/N of an all-reduce, the other ranks' chunks of a reduce-scatter or
 * all-gather. */
#ifndef MT_COMM_COMM_NCCL_H
#define MT_COMM_COMM_NCCL_H

#include "comm/bootstrap.h"
#include "comm/comm.h"

/* The job's world on the GPU of this rank's local rank (cudaSetDevice), operations on stream (a
 * cudaStream_t; NULL: the default stream). Collective over all ranks of b. NULL with e set. */
mt_comm *mt_comm_nccl_world(mt_boot *b, void *stream, mt_err *e);

#endif
