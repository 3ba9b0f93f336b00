/* bootstrap.h: who this process is in a job (rank, size, local rank, host) and the job's key-value
 * exchange, by PMIx, as ../../man/mt-train.1 (LAUNCHING) describes.
 *
 * Rules, in order:
 *   1. PMIX_NAMESPACE and PMIX_RANK set (srun --mpi=pmix, mpirun, mt-train -n): PMIx_Init; rank from
 *      it, size from PMIX_JOB_SIZE, local rank and size from PMIX_LOCAL_RANK / PMIX_LOCAL_SIZE. A
 *      failure is an error.
 *   2. Otherwise, if a launcher says there are several tasks (SLURM_STEP_NUM_TASKS, SLURM_NTASKS,
 *      OMPI_COMM_WORLD_SIZE or PMI_SIZE > 1): an error saying to launch with PMIx (srun --mpi=pmix),
 *      since each task would otherwise run alone as rank 0 and they would overwrite each other's files.
 *   3. Otherwise: a singleton, rank 0 of 1, without calling PMIx.
 * mt_boot_mpi then starts MPI (the data plane of CPU ranks) and checks that its world agrees.
 *
 * A fatal error of a rank ends the job through mt_boot_fail: printed once, the job's exit status the
 * error's, and no help text of the launcher where mt can avoid it (see mt_boot_fail).
 */
#ifndef MT_COMM_BOOTSTRAP_H
#define MT_COMM_BOOTSTRAP_H

#include <stdbool.h>
#include <stddef.h>

#include "util/err.h"

typedef struct mt_boot {
    int rank, size;              /* in the job */
    int local_rank, local_size;  /* on this node (local rank selects the GPU) */
    char host[256];
    char nspace[256];            /* PMIx namespace; "" for a singleton */
    bool pmix;                   /* PMIx_Init succeeded (to finalize) */
    bool mpi;                    /* MPI started by mt_boot_mpi (to finalize) */
    bool threads;                /* set before mt_boot_mpi: ask MPI for MPI_THREAD_MULTIPLE (a progress thread
                                    communicates while the main thread does: comm/comm_async.h) */
} mt_boot;

/* The launch check of rule 2 alone, on an environment lookup (getenv, or a test's table): 0, or -1
 * with the message when several tasks were started without PMIx. */
int mt_boot_check_env(const char *(*get)(const char *name), mt_err *e);

/* Rules 1-3. 0, or -1 with e set. */
int mt_boot_init(mt_boot *b, mt_err *e);

/* Starts MPI when size > 1 (MPI_THREAD_FUNNELED, or MPI_THREAD_MULTIPLE with b->threads) and checks
 * that MPI_COMM_WORLD has the PMIx rank and size. 0 or -1. */
int mt_boot_mpi(mt_boot *b, mt_err *e);

/* Every rank gets root's n bytes in buf (PMIx Put on root, Commit and Fence with data collection on
 * all, Get of root's key): how an NCCL unique id travels. key names the value. 0 or -1. */
int mt_boot_share(mt_boot *b, const char *key, void *buf, size_t n, int root, mt_err *e);

/* Finalizes MPI, then PMIx (whichever were started). */
void mt_boot_finalize(mt_boot *b);

/* Ends every rank of the job at once after a fatal error of this one (PMIx_Abort, which ends the job
 * without the help text MPI_Abort has the launcher print; MPI_Abort only without PMIx), so that no rank
 * waits forever in a collective. Returns only for a singleton. */
void mt_boot_abort(mt_boot *b, int status);

/* This process's rank as its launcher's environment gives it before any bootstrap (PMIX_RANK, else
 * OMPI_COMM_WORLD_RANK, SLURM_PROCID or PMI_RANK; 0 when none): who reports an error that every rank
 * meets before joining the job, such as a bad flag. */
int mt_boot_env_rank(void);

/* Ends this rank after a fatal error whose message is msg (without the program name); never returns.
 *   - A singleton prints "<prog>: <msg>" and exits with status.
 *   - With MPI started, the rank waits up to wait_s seconds for every rank of the job to fail as well
 *     (a non-blocking barrier on a communicator that only failing ranks use). When they all do, the
 *     error is the job's: each different message is printed once, by the lowest rank that has it, as
 *     "<prog>: <msg>" when all ranks have the same message and as "<ranked>: <msg>" otherwise; then
 *     every rank finalizes MPI and PMIx and exits with status, so that the launcher sees ranks that
 *     ended normally, all with the same status.
 *   - Otherwise (this rank failed alone, or MPI is not up) it prints "<ranked>: <msg>" and ends the job
 *     with mt_boot_abort(status): the launcher ends the other ranks and exits with status.
 * ranked names the rank, e.g. "mt-train: rank 1 (node7)". */
/* Ends this rank with status when every rank of the job does the same at this point: finalizes MPI
 * and PMIx (at most 10 s, then _exit) and exits, so that the launcher sees ranks that ended normally. */
MT_NORETURN void mt_boot_exit(mt_boot *b, int status);

MT_NORETURN void mt_boot_fail(mt_boot *b, const char *prog, const char *ranked, int status, const char *msg,
                              double wait_s);

#endif
