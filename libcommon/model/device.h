/* device.h: which kernel backend a program runs on (--device of mt-train, mt-eval and mt-generate). */
#ifndef MT_MODEL_DEVICE_H
#define MT_MODEL_DEVICE_H

#include "kernels.h"

/* The --device choices as the flag tables list them. */
#define MT_DEVICE_CHOICES "cpu|cuda"

/* The process's rank on its node: MT_LOCAL_RANK, else LOCAL_RANK (torchrun), OMPI_COMM_WORLD_LOCAL_RANK
 * (Open MPI), SLURM_LOCALID; 0 when none is set. */
int mt_local_rank(void);

/* Opens the backend for device "cpu" or "cuda" (GPU number mt_local_rank()); device NULL means cuda when
 * a GPU can be opened, else cpu. MT_DEVICE in the environment overrides the device (e.g. MT_DEVICE=sim:
 * the CUDA kernels under the SIMT simulator, which tests compare with the cpu backend). threads: the cpu
 * backend's OpenMP threads (0: OpenMP's default). NULL + e on failure. */
mtk *mt_device_open(const char *device, int threads, mtk_dtype act, mt_err *e);

#endif
