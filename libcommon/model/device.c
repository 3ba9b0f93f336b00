/* device.c: the kernel backend of mt-train, mt-eval and mt-generate: --device, the MT_DEVICE override,
 * the local rank's GPU, and the communicator for the backend's buffers. */
#include <stdlib.h>
#include <string.h>

#include "comm/comm_nccl.h"
#include "model/device.h"
#include "util/err.h"

static int env_int(const char *const *vars, int dflt)
{
    for (int i = 0; vars[i]; i++) {
        const char *s = getenv(vars[i]);
        if (s && *s) {
            char *end;
            long r = strtol(s, &end, 10);
            if (!*end && r >= 0 && r < 1 << 20) return (int)r;
        }
    }
    return dflt;
}

int mt_local_rank(void)
{
    static const char *const vars[] = {"MT_LOCAL_RANK", "LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID", NULL};
    return env_int(vars, 0);
}

int mt_local_size(void)
{
    static const char *const vars[] = {"MT_LOCAL_SIZE", "LOCAL_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE", NULL};
    int n = env_int(vars, 1);
    return n > 0 ? n : 1;
}

/* The GPU of this rank: the local rank's, spread over the GPUs there are when ranks share them. */
static int local_gpu(void)
{
    int gpus = mt_comm_gpu_count(), lr = mt_local_rank();
    return gpus > 0 ? lr % gpus : lr;
}

mt_comm *mt_device_comm(mt_comm *host_comm, mtk *k, mt_err *e)
{
    mt_comm_kind kind;
    int dev;
    if (mt_comm_choose(mtk_name(k), mt_local_rank(), mt_local_size(), mt_comm_gpu_count(), mt_comm_nccl_built(), &kind,
                       &dev, e))
        return NULL;
    /* one kind for the whole group: staged where any rank needs it */
    int64_t agreed = kind;
    if (mt_all_reduce_op(host_comm, &agreed, 1, MT_C_I64, MT_OP_MAX, e)) return NULL;
    return mt_comm_for_backend(host_comm, k, (mt_comm_kind)agreed, e);
}

mtk *mt_device_open(const char *device, int threads, mtk_dtype act, mt_err *e)
{
    const char *env = getenv("MT_DEVICE");
    if (env && *env) device = env;
    mtk_config c = {.backend = device, .threads = threads, .act_dtype = act};
    c.device = device && strcmp(device, "cuda") ? 0 : local_gpu();   /* cpu and sim: one device for all ranks */
    if (device) {
        mt_err why;
        mtk *k = mtk_open(&c, &why);
        if (!k) mt_err_set(e, "--device %s: %s", device, why.msg);
        return k;
    }
    c.backend = "cuda";   /* no --device: the GPU when there is one */
    mtk *k = mtk_open(&c, e);
    if (k) return k;
    c.backend = "cpu";
    return mtk_open(&c, e);
}
