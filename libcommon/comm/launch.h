/* launch.h: `mt-train -n N`, N ranks on this machine without a launcher given by the user.
 *
 * The ranks need a PMIx server (comm/bootstrap.h). mt-train gets one by replacing itself with Open MPI's
 * mpirun (its ORTE daemon is a PMIx server, and the MPI data plane of CPU ranks is Open MPI's anyway):
 *   mpirun [--allow-run-as-root] --quiet --oversubscribe --bind-to none -x MT_LAUNCH_WATCH=1 -np N <this program> <the other args>
 * (--allow-run-as-root only when running as root: mt-train -n is the launcher the user asked for;
 * --quiet: mpirun prints none of its help texts, such as "Primary job terminated normally, but 1 process
 * returned a non-zero exit code", so that a failed job shows mt-train's one line and mpirun's exit status
 * is the failed rank's). The program is $MT_MPIRUN when set, else mpirun from PATH. No Slurm is involved.
 * mpirun prints nothing either when a rank is killed by a signal, so each rank it starts is a watcher
 * process that names such a rank (mt_launch_watch).
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

/* The variable mt_launch_exec sets for the ranks it starts ("1"). */
#define MT_LAUNCH_WATCH_ENV "MT_LAUNCH_WATCH"

/* In a rank started by mt_launch_exec (MT_LAUNCH_WATCH=1), forks: the child returns and does the rank's
 * work (without the variable, and killed with SIGKILL when its parent dies), the parent never returns. It
 * forwards SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2 and SIGCONT to the child and waits for it;
 * when the child is killed by a signal that did not come through the parent (the OOM killer, a kill of
 * its pid) it prints "<prog>: rank R (host): killed by signal N (SIGNAME)", then ends as the child did
 * (its status, or the same signal, so that mpirun --quiet exits 128 + N and prints nothing of its own).
 * Anywhere else it returns at once. */
void mt_launch_watch(const char *prog);

#endif
