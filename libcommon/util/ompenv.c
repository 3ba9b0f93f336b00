/* ompenv.c: the OpenMP wait policy default of mt's programs (see ompenv.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "util/ompenv.h"

/* Sets var=value and re-executes the program, unless the environment already sets the wait policy. */
static void set_and_exec(char **argv, const char *var, const char *value)
{
    if (getenv("OMP_WAIT_POLICY") || getenv("GOMP_SPINCOUNT")) return;
    const char *pre = getenv("LD_PRELOAD");
    if (pre && strstr(pre, "vgpreload")) return;
    if (setenv(var, value, 1)) return;
    execv("/proc/self/exe", argv);
    unsetenv(var);   /* exec failed: carry on with the runtime's default */
}

void mt_omp_env_default(char **argv) { set_and_exec(argv, "OMP_WAIT_POLICY", "passive"); }

void mt_omp_env_spin(char **argv, int count)
{
    char v[24];
    snprintf(v, sizeof v, "%d", count);
    set_and_exec(argv, "GOMP_SPINCOUNT", v);
}
