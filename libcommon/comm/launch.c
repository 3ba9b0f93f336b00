/* launch.c: `mt-train -n N` by exec of mpirun (see launch.h). */
#include "comm/launch.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "util/flags.h"

int mt_launch_take_n(int *argc, char **argv, mt_err *e)
{
    for (int i = 1; i < *argc; i++) {
        if (!strcmp(argv[i], "--")) break;
        if (strcmp(argv[i], "-n")) continue;
        int64_t n;
        if (i + 1 >= *argc || mt_parse_i64(argv[i + 1], &n) || n < 1)
            return mt_err_set(e, "-n: expected a number of ranks (1 or more), got '%s'", i + 1 < *argc ? argv[i + 1] : "");
        if (n > MT_LAUNCH_MAX_RANKS)
            return mt_err_set(e, "-n %lld: at most %d ranks on one machine (start larger jobs with srun or mpirun)",
                              (long long)n, MT_LAUNCH_MAX_RANKS);
        if (getenv("PMIX_RANK") || getenv("OMPI_COMM_WORLD_SIZE") || getenv("SLURM_STEP_ID"))
            return mt_err_set(e, "-n %lld: this process was started by a launcher (srun or mpirun), which sets the "
                                 "number of ranks; drop -n", (long long)n);
        memmove(argv + i, argv + i + 2, (size_t)(*argc - i - 2 + 1) * sizeof *argv);   /* with argv[argc] */
        *argc -= 2;
        return (int)n;
    }
    return 0;
}

int mt_launch_exec(int n, int argc, char **argv, mt_err *e)
{
    static char self[PATH_MAX], np[16];
    ssize_t k = readlink("/proc/self/exe", self, sizeof self - 1);
    if (k <= 0) return mt_err_sys(e, "-n: cannot find this program (/proc/self/exe)");
    self[k] = 0;
    snprintf(np, sizeof np, "%d", n);
    const char *mpirun = getenv("MT_MPIRUN") && *getenv("MT_MPIRUN") ? getenv("MT_MPIRUN") : "mpirun";
    char **v = mt_xcalloc((size_t)argc + 14, sizeof *v);
    int j = 0;
    v[j++] = (char *)mpirun;
    if (geteuid() == 0) v[j++] = "--allow-run-as-root";
    v[j++] = "--quiet";   /* no help text of its own: a rank's error is mt-train's one line (comm/bootstrap.h) */
    v[j++] = "--oversubscribe";
    v[j++] = "--bind-to";
    v[j++] = "none";
    v[j++] = "-x";   /* each rank names itself when killed by a signal (mt_launch_watch) */
    v[j++] = MT_LAUNCH_WATCH_ENV "=1";
    v[j++] = "-np";
    v[j++] = np;
    v[j++] = self;
    for (int i = 1; i < argc; i++) v[j++] = argv[i];
    v[j] = NULL;
    fflush(NULL);
    execvp(mpirun, v);
    int err = errno;
    free(v);
    errno = err;
    return mt_err_sys(e, "-n %d: cannot run %s (Open MPI's launcher, package openmpi-bin; or set MT_MPIRUN)", n, mpirun);
}
