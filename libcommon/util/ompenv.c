/* ompenv.c: the OpenMP wait policy default of mt's programs (see ompenv.h). */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "util/ompenv.h"

void mt_omp_env_default(char **argv)
{
    if (getenv("OMP_WAIT_POLICY") || getenv("GOMP_SPINCOUNT")) return;
    const char *pre = getenv("LD_PRELOAD");
    if (pre && strstr(pre, "vgpreload")) return;
    if (setenv("OMP_WAIT_POLICY", "passive", 1)) return;
    execv("/proc/self/exe", argv);
    unsetenv("OMP_WAIT_POLICY");   /* exec failed: carry on with the runtime's default */
}
