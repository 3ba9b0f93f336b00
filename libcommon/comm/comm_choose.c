/* comm_choose.c: which communicator a group's device buffers need (comm.h: mt_comm_choose) and making
 * it over the group's host communicator. */
#include "comm/comm.h"

#include <string.h>

#include "comm/comm_nccl.h"
#include "kernels.h"

const char *mt_comm_kind_name(mt_comm_kind kind)
{
    return kind == MT_COMM_NCCL ? "nccl" : kind == MT_COMM_STAGED ? "staged" : "mpi";
}

int mt_comm_choose(const char *backend, int local_rank, int local_size, int gpus_on_node, int nccl_built,
                   mt_comm_kind *kind, int *device, mt_err *e)
{
    *device = 0;
    if (!backend || !strcmp(backend, "cpu")) {
        *kind = MT_COMM_MPI;   /* device memory is host memory */
        return 0;
    }
    if (!strcmp(backend, "sim")) {
        *kind = MT_COMM_STAGED;   /* the simulator's memory is no GPU's */
        return 0;
    }
    if (strcmp(backend, "cuda"))
        return mt_err_set(e, "no communicator for the kernel backend '%s' (cpu, sim or cuda)", backend);
    if (gpus_on_node == 0)
        return mt_err_set(e, "--device cuda: no GPU on this node (local rank %d of %d); use --device cpu", local_rank,
                          local_size);
    if (gpus_on_node < 0) {   /* a build without NCCL cannot count them: one GPU per local rank, staged */
        *device = local_rank;
        *kind = MT_COMM_STAGED;
        return 0;
    }
    *device = local_rank % gpus_on_node;
    *kind = local_size <= gpus_on_node && nccl_built ? MT_COMM_NCCL : MT_COMM_STAGED;
    return 0;
}

mt_comm *mt_comm_for_backend(mt_comm *host_comm, mtk *k, mt_comm_kind kind, mt_err *e)
{
    switch (kind) {
    case MT_COMM_MPI: return host_comm;
    case MT_COMM_STAGED: return mt_comm_staged(host_comm, k, e);
    case MT_COMM_NCCL: return mt_comm_nccl(host_comm, mtk_native_queue(k, MTK_QUEUE_COMPUTE), e);
    }
    mt_err_set(e, "unknown communicator kind %d", (int)kind);
    return NULL;
}
