/* device.h: which kernel backend a program runs on (--device of mt-train, mt-eval and mt-generate). */
#ifndef MT_MODEL_DEVICE_H
#define MT_MODEL_DEVICE_H

#include "comm/comm.h"
#include "kernels.h"

/* The --device choices as the flag tables list them. */
#define MT_DEVICE_CHOICES "cpu|cuda"
/* The --device, --threads, --bf16 and --fp16 rows of the programs that run a trained model (mt-eval,
 * mt-generate), help included (util/flags.h's mt_flag). */
#define MT_FLAGS_DEVICE(device, threads, bf16, fp16)                                                         \
    {"--device", MT_F_CHOICE, (device), NULL, "where the kernels run: cpu, or cuda (the GPU of the local "   \
     "rank); default cuda when a GPU is there", 0, 0, MT_DEVICE_CHOICES},                                    \
        {"--threads", MT_F_INT, (threads), "N", "CPU threads (default: OpenMP's)", 0, 4096, NULL},           \
        {"--bf16", MT_F_BOOL, (bf16), NULL, "compute in bf16: activations and a bf16 copy of the fp32 "      \
         "weights", 0, 0, NULL},                                                                             \
        {"--fp16", MT_F_BOOL, (fp16), NULL, "compute in fp16: activations and an fp16 copy of the fp32 "     \
         "weights", 0, 0, NULL}

/* The process's rank on its node: MT_LOCAL_RANK, else LOCAL_RANK (torchrun), OMPI_COMM_WORLD_LOCAL_RANK
 * (Open MPI), SLURM_LOCALID; 0 when none is set. */
int mt_local_rank(void);
/* The number of ranks on this node: MT_LOCAL_SIZE, else LOCAL_WORLD_SIZE, OMPI_COMM_WORLD_LOCAL_SIZE; 1
 * when none is set. */
int mt_local_size(void);

/* Opens the backend for device "cpu" or "cuda" (GPU number mt_local_rank(), modulo the node's GPUs when
 * its ranks share them); device NULL means cuda when
 * a GPU can be opened, else cpu. MT_DEVICE in the environment overrides the device (e.g. MT_DEVICE=sim:
 * the CUDA kernels under the SIMT simulator, which tests compare with the cpu backend). threads: the cpu
 * backend's OpenMP threads (0: OpenMP's default). NULL + e on failure. */
mtk *mt_device_open(const char *device, int threads, mtk_dtype act, mt_err *e);

/* The communicator of host_comm's group for device buffers of k, as mt_comm_choose picks it from k's
 * backend, the local rank and size and the node's GPUs, the same on every rank of the group (collective
 * over host_comm): host_comm itself on cpu, else a new one to free before host_comm. NULL + e. */
mt_comm *mt_device_comm(mt_comm *host_comm, mtk *k, mt_err *e);

#endif
