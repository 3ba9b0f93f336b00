/* device.c: the kernel backend of mt-train, mt-eval and mt-generate: --device, the MT_DEVICE override,
 * and the local rank's GPU. */
#include <stdlib.h>

#include "model/device.h"
#include "util/err.h"

int mt_local_rank(void)
{
    static const char *const vars[] = {"MT_LOCAL_RANK", "LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID", NULL};
    for (int i = 0; vars[i]; i++) {
        const char *s = getenv(vars[i]);
        if (s && *s) {
            char *end;
            long r = strtol(s, &end, 10);
            if (!*end && r >= 0 && r < 1 << 20) return (int)r;
        }
    }
    return 0;
}

mtk *mt_device_open(const char *device, int threads, mtk_dtype act, mt_err *e)
{
    const char *env = getenv("MT_DEVICE");
    if (env && *env) device = env;
    mtk_config c = {.backend = device, .threads = threads, .device = mt_local_rank(), .act_dtype = act};
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
