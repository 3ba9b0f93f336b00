/* bootstrap.c: rank, size and local rank from PMIx; the refusal of launches without PMIx; MPI's world
 * for CPU ranks; how a rank's fatal error ends the job (see bootstrap.h). */
#include "comm/bootstrap.h"

#include <mpi.h>
#include <pmix.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "util/fnv.h"

/* The communicator that only failing ranks use (mt_boot_fail), a copy of MPI_COMM_WORLD made at start. */
static MPI_Comm fail_comm = MPI_COMM_NULL;

static const char *env_get(const char *name) { return getenv(name); }

int mt_boot_check_env(const char *(*get)(const char *name), mt_err *e)
{
    static const char *const vars[] = {"SLURM_STEP_NUM_TASKS", "SLURM_NTASKS", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
        const char *v = get(vars[i]);
        if (v && atol(v) > 1)
            return mt_err_set(e,
                              "launched as one of %ld tasks (%s=%s) without PMIx: each task would run alone as "
                              "rank 0; use srun --mpi=pmix (or mpirun, or mt-train -n N)",
                              atol(v), vars[i], v);
    }
    return 0;
}

/* A value of the job (proc's rank or the wildcard) as an unsigned number, whatever its PMIx integer type. */
static int get_uint(const pmix_proc_t *proc, const char *key, uint64_t *out, mt_err *e)
{
    pmix_value_t *val = NULL;
    pmix_status_t rc = PMIx_Get(proc, key, NULL, 0, &val);
    if (rc != PMIX_SUCCESS || !val) return mt_err_set(e, "PMIx_Get(%s): %s", key, PMIx_Error_string(rc));
    int bad = 0;
    switch (val->type) {
    case PMIX_UINT32: *out = val->data.uint32; break;
    case PMIX_UINT16: *out = val->data.uint16; break;
    case PMIX_UINT64: *out = val->data.uint64; break;
    case PMIX_INT: *out = (uint64_t)val->data.integer; break;
    case PMIX_PROC_RANK: *out = val->data.rank; break;
    default: bad = 1;
    }
    PMIX_VALUE_RELEASE(val);
    return bad ? mt_err_set(e, "PMIx_Get(%s): unexpected value type", key) : 0;
}

int mt_boot_init(mt_boot *b, mt_err *e)
{
    memset(b, 0, sizeof *b);
    b->size = b->local_size = 1;
    if (gethostname(b->host, sizeof b->host - 1)) strcpy(b->host, "localhost");
    if (!getenv("PMIX_NAMESPACE") || !getenv("PMIX_RANK")) return mt_boot_check_env(env_get, e);
    pmix_proc_t me;
    pmix_status_t rc = PMIx_Init(&me, NULL, 0);
    if (rc != PMIX_SUCCESS) {
        /* PMIx must be finalized even after a failed init, or a later MPI_Init crashes */
        PMIx_Finalize(NULL, 0);
        return mt_err_set(e, "PMIx_Init: %s (PMIX_NAMESPACE=%s): the launcher's PMIx server is unreachable",
                          PMIx_Error_string(rc), getenv("PMIX_NAMESPACE"));
    }
    b->pmix = true;
    snprintf(b->nspace, sizeof b->nspace, "%s", me.nspace);
    pmix_proc_t wild, self;
    PMIX_PROC_LOAD(&wild, me.nspace, PMIX_RANK_WILDCARD);
    PMIX_PROC_LOAD(&self, me.nspace, me.rank);
    uint64_t size, lrank, lsize = 1;
    if (get_uint(&wild, PMIX_JOB_SIZE, &size, e) || get_uint(&self, PMIX_LOCAL_RANK, &lrank, e)) return -1;
    mt_err ignore;
    if (get_uint(&wild, PMIX_LOCAL_SIZE, &lsize, &ignore)) lsize = 1;
    if (size < 1 || me.rank >= size || size > INT32_MAX)
        return mt_err_set(e, "PMIx: rank %u of a job of size %llu", me.rank, (unsigned long long)size);
    b->rank = (int)me.rank;
    b->size = (int)size;
    b->local_rank = (int)lrank;
    b->local_size = (int)lsize;
    return 0;
}

int mt_boot_mpi(mt_boot *b, mt_err *e)
{
    if (b->size == 1 || b->mpi) return 0;
    int provided = 0, r = -1, n = -1;
    if (MPI_Init_thread(NULL, NULL, b->threads ? MPI_THREAD_MULTIPLE : MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS)
        return mt_err_set(e, "MPI_Init failed (rank %d of %d)", b->rank, b->size);
    b->mpi = true;
    MPI_Comm_rank(MPI_COMM_WORLD, &r);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    if (r != b->rank || n != b->size)
        return mt_err_set(e, "MPI's world (rank %d of %d) differs from PMIx's (rank %d of %d)", r, n, b->rank, b->size);
    if (MPI_Comm_dup(MPI_COMM_WORLD, &fail_comm) != MPI_SUCCESS) return mt_err_set(e, "MPI_Comm_dup failed");
    return 0;
}

int mt_boot_share(mt_boot *b, const char *key, void *buf, size_t n, int root, mt_err *e)
{
    if (!b->pmix) return 0;   /* a singleton has it already */
    pmix_status_t rc;
    if (b->rank == root) {
        pmix_value_t v;
        PMIX_VALUE_CONSTRUCT(&v);
        v.type = PMIX_BYTE_OBJECT;
        v.data.bo.bytes = buf;
        v.data.bo.size = n;
        if ((rc = PMIx_Put(PMIX_GLOBAL, key, &v)) != PMIX_SUCCESS)
            return mt_err_set(e, "PMIx_Put(%s): %s", key, PMIx_Error_string(rc));
    }
    if ((rc = PMIx_Commit()) != PMIX_SUCCESS) return mt_err_set(e, "PMIx_Commit: %s", PMIx_Error_string(rc));
    pmix_proc_t wild, src;
    PMIX_PROC_LOAD(&wild, b->nspace, PMIX_RANK_WILDCARD);
    pmix_info_t info;
    bool t = true;
    PMIX_INFO_LOAD(&info, PMIX_COLLECT_DATA, &t, PMIX_BOOL);
    rc = PMIx_Fence(&wild, 1, &info, 1);
    PMIX_INFO_DESTRUCT(&info);
    if (rc != PMIX_SUCCESS) return mt_err_set(e, "PMIx_Fence: %s", PMIx_Error_string(rc));
    if (b->rank == root) return 0;
    PMIX_PROC_LOAD(&src, b->nspace, (pmix_rank_t)root);
    pmix_value_t *val = NULL;
    rc = PMIx_Get(&src, key, NULL, 0, &val);
    if (rc != PMIX_SUCCESS || !val) return mt_err_set(e, "PMIx_Get(%s of rank %d): %s", key, root, PMIx_Error_string(rc));
    int bad = val->type != PMIX_BYTE_OBJECT || val->data.bo.size != n;
    if (!bad) memcpy(buf, val->data.bo.bytes, n);
    PMIX_VALUE_RELEASE(val);
    return bad ? mt_err_set(e, "PMIx_Get(%s of rank %d): not %zu bytes", key, root, n) : 0;
}

void mt_boot_finalize(mt_boot *b)
{
    if (b->mpi) {
        if (fail_comm != MPI_COMM_NULL) MPI_Comm_free(&fail_comm);
        MPI_Finalize();
    }
    if (b->pmix) PMIx_Finalize(NULL, 0);
    b->mpi = b->pmix = false;
}

void mt_boot_abort(mt_boot *b, int status)
{
    if (b->pmix) {
        pmix_proc_t wild;
        PMIX_PROC_LOAD(&wild, b->nspace, PMIX_RANK_WILDCARD);
        PMIx_Abort(status, NULL, &wild, 1);
        _exit(status);
    }
    if (b->mpi) MPI_Abort(MPI_COMM_WORLD, status);
}

int mt_boot_env_rank(void)
{
    static const char *const vars[] = {"PMIX_RANK", "OMPI_COMM_WORLD_RANK", "SLURM_PROCID", "PMI_RANK"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++)
        if (getenv(vars[i]) && *getenv(vars[i])) return atoi(getenv(vars[i]));
    return 0;
}

static double mono_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static volatile sig_atomic_t fail_status;
/* a finalize that does not return (an operation of the failed step still pending) ends the rank anyway */
static void on_finalize_alarm(int sig)
{
    (void)sig;
    _exit(fail_status);
}

/* Whether every rank of the job enters this within wait_s seconds (only failing ranks do). */
static bool all_ranks_failed(double wait_s)
{
    MPI_Request req;
    if (fail_comm == MPI_COMM_NULL || MPI_Ibarrier(fail_comm, &req) != MPI_SUCCESS) return false;
    const struct timespec tick = {0, 1000000};
    for (double end = mono_s() + wait_s;;) {
        int done = 0;
        if (MPI_Test(&req, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS) return false;
        if (done) return true;
        if (mono_s() > end) return false;
        nanosleep(&tick, NULL);
    }
}

void mt_boot_fail(mt_boot *b, const char *prog, const char *ranked, int status, const char *msg, double wait_s)
{
    if (b->size == 1 || !b->pmix) {
        fprintf(stderr, "%s: %s\n", prog, msg);
        exit(status);
    }
    if (!b->mpi || !all_ranks_failed(wait_s)) {
        fprintf(stderr, "%s: %s\n", ranked, msg);
        fflush(stderr);
        mt_boot_abort(b, status);
        _exit(status);
    }
    /* every rank failed: each message once, plain when it is the only one */
    uint64_t mine = mt_fnv1a_str(msg), *all = calloc((size_t)b->size, sizeof *all);
    bool first = true, one = true;
    if (all && MPI_Allgather(&mine, 1, MPI_UINT64_T, all, 1, MPI_UINT64_T, fail_comm) == MPI_SUCCESS) {
        for (int i = 0; i < b->size; i++) {
            if (all[i] != all[0]) one = false;
            if (i < b->rank && all[i] == mine) first = false;
        }
    } else one = false;   /* then every rank prints its own */
    free(all);
    if (first) fprintf(stderr, "%s: %s\n", one ? prog : ranked, msg);
    mt_boot_exit(b, status);
}

void mt_boot_exit(mt_boot *b, int status)
{
    fflush(stderr);
    fail_status = status;
    signal(SIGALRM, on_finalize_alarm);
    alarm(10);
    mt_boot_finalize(b);
    exit(status);
}
