/* launch.h: `mt-train -n N`, N ranks on this machine without a launcher given by the user.
 *
 * The ranks need a PMIx server (comm/bootstrap.h). mt-train gets one by replacing itself with Open MPI's
 * mpirun (its ORTE daemon is a PMIx server, and the MPI data plane of CPU ranks is Open MPI's anyway):
 *   mpirun [--allow-run-as-root] --quiet --oversubscribe --bind-to none -np N <this program> <the other args>
 * (--allow-run-as-root only when running as root: mt-train -n is the launcher the user asked for;
 * --quiet: mpirun prints none of its help texts, such as "Primary job terminated normally, but 1 process
 * returned a non-zero exit code", so that a failed job shows mt-train's one line and mpirun's exit status
 * is the failed rank's). The program is $MT_MPIRUN when set, else mpirun from PATH. No Slurm is involved.
 */
#ifndef MT_COMM_LAUNCH_H
#define MT_COMM_LAUNCH_H

#include "util/err.h"

/* The most ranks -n starts on one machine: a larger job is a launcher's (srun, mpirun) to start, and
 * -n 100000 would otherwise spawn processes until the machine gives out. */
#define MT_LAUNCH_MAX_RANKS 256

/* Removes "-n N" from argv (before a bare "--") and returns N, 0 when absent, -1 with e set for a bad N
 * or -n under a launcher. */
int mt_launch_take_n(int *argc, char **argv, mt_err *e);

/* execs the launcher for n ranks of this program with argv[1..argc-1]; returns -1 with e set only when
 * it could not be started. */
int mt_launch_exec(int n, int argc, char **argv, mt_err *e);

#endif
