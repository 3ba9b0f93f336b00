/* mt-train: train a GPT-2 model with Megatron-LM's flags, data order, schedule, log lines and
 * checkpoint layout, on one rank or data-parallel over the ranks of a PMIx launch (srun --mpi=pmix,
 * mpirun, mt-train -n N; man mt-train.1, LAUNCHING). The run's state, its step and its checkpoints are
 * libcommon/train's (trainer.h, train_ckpt.h), the bootstrap and communicator libcommon/comm's; this
 * file is the flags, the wiring and the reporting (by rank 0). */
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>
#include <time.h>

#include "ckpt/checkpoint.h"
#include "comm/agree.h"
#include "comm/bootstrap.h"
#include "comm/comm.h"
#include "comm/grid.h"
#include "comm/launch.h"
#include "comm/parallel.h"
#include "config/train_args.h"
#include "config/train_args_desc.h"
#include "data/split.h"
#include "kernels.h"
#include "model/evaluate.h"
#include "model/gpt.h"
#include "report/report.h"
#include "report/tensorboard.h"
#include "train/plan.h"
#include "train/train_ckpt.h"
#include "train/trainer.h"
#include "util/err.h"
#include "util/ompenv.h"

/* Megatron-Core's (v0.13) iteration line: timestamp, learning rate as %.6E */
#define LOG_STYLE MT_LOG_CORE

static volatile sig_atomic_t got_sigterm;
static void on_sigterm(int sig)
{
    (void)sig;
    got_sigterm = 1;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* The run (t), the job it is part of, and what reports on it. */
typedef struct run {
    mt_trainer t;
    mt_boot boot;
    mt_parallel par;   /* the rank's place and groups */
    mt_comm *world;    /* par.world */
    mt_tb *tb;
    FILE *metrics;
    int memory_reported;
} run;

/* How long a rank that failed waits for the others to fail too before it ends the job alone: the ranks
 * of a job meet an error of their flags, data or checkpoint within milliseconds of each other. */
#define FAIL_WAIT_S 3.0

/* Before a rank joins its job (the launch check, -n, a bad flag outside a PMIx launch) every rank meets
 * the same error: rank 0 of the launch reports it, the others end with the same status quietly, after
 * a pause: a launcher that ends a step at its first failed task (srun -K1) would otherwise stop rank 0
 * before its message when another rank gets there first (a loaded machine starts them far apart). */
static void report_before_join(const char *msg)
{
    if (mt_boot_env_rank() == 0) fprintf(stderr, "%s: %s\n", mt_progname(), msg);
    else sleep(2);
    exit(1);
}

/* In a job of several ranks, an error of every rank is printed once by rank 0 and the ranks exit 1
 * together; an error of one rank is printed by that rank, naming it, and ends the job (mt_boot_fail). */
static mt_boot *fail_boot;
static char plain_name[64], rank_name[400];
static void report_in_job(const char *msg) { mt_boot_fail(fail_boot, plain_name, rank_name, 1, msg, FAIL_WAIT_S); }

/* A bad flag under a PMIx launcher is reported through the job, as report_in_job: the ranks' shared command
 * line is every rank's error, printed once; a flag given to one rank only (mpirun's MPMD form, a wrapper
 * script) is that rank's, printed naming it while the others wait in their first collective. Returns
 * only outside such a job. */
static void report_flag_error(mt_boot *b, const char *msg)
{
    mt_err e;
    if (!getenv("PMIX_NAMESPACE") || !getenv("PMIX_RANK") || mt_boot_init(b, &e) || b->size < 2 || mt_boot_mpi(b, &e))
        return;
    snprintf(plain_name, sizeof plain_name, "%s", mt_progname());
    snprintf(rank_name, sizeof rank_name, "%s: rank %d (%s)", plain_name, b->rank, b->host);
    mt_boot_fail(b, plain_name, rank_name, 1, msg, FAIL_WAIT_S);
}

static void save_checkpoint(run *r)
{
    mt_err e;
    if (mt_trainer_params_ready(&r->t, &e) || mt_trainer_save(&r->t, stdout, &e)) mt_die_err(&e);
    /* the job goes on (or ends) only when the checkpoint is complete; an --async-save write is committed
     * later (wait_saves) */
    if (!r->t.a.async_save && mt_barrier(r->world, &e)) mt_die_err(&e);
}

/* An --async-save write in progress: finished and committed before the job stops. */
static void wait_saves(run *r)
{
    mt_err e;
    if (!r->t.save_job) return;
    if (mt_trainer_save_wait(&r->t, stdout, &e) || mt_barrier(r->world, &e)) mt_die_err(&e);
}

/* ---- evaluation ---- */

static void tb_scalar(run *r, const char *tag, int64_t step, double v)
{
    mt_err e;
    if (mt_tb_add_scalar(r->tb, tag, step, v, &e)) mt_die_err(&e);
}

static void evaluate_and_print(run *r, int split, mt_eval_when when, int64_t iters)
{
    mt_err e;
    mt_eval_result res;
    int64_t test_consumed = 0;
    int64_t *consumed = split == MT_SPLIT_VALID ? &r->t.consumed_valid : &test_consumed;
    if (mt_trainer_evaluate(&r->t, split, consumed, iters, &res, &e)) mt_die_err(&e);
    char prefix[128];
    mt_eval_prefix(prefix, sizeof prefix, LOG_STYLE, when, r->t.iteration);
    mt_loss_value lv = {"lm loss", res.loss};
    mt_print_validation(stdout, NULL, prefix, &lv, 1);
    fflush(stdout);
    if (split == MT_SPLIT_VALID && r->tb) {
        tb_scalar(r, "lm loss validation", r->t.iteration, res.loss);
        tb_scalar(r, "lm loss validation vs samples", r->t.consumed_train, res.loss);
        if (r->t.a.log_validation_ppl_to_tensorboard) {
            tb_scalar(r, "lm loss validation ppl", r->t.iteration, mt_ppl(res.loss));
            tb_scalar(r, "lm loss validation ppl vs samples", r->t.consumed_train, mt_ppl(res.loss));
        }
        if (mt_tb_flush(r->tb, &e)) mt_die_err(&e);
    }
    if (r->metrics) {
        if (mt_metrics_write_eval(r->metrics, split == MT_SPLIT_VALID ? "valid" : "test", r->t.iteration,
                                  r->t.consumed_train, &lv, 1, &e))
            mt_die_err(&e);
        fflush(r->metrics);
    }
}

/* ---- the loop ---- */

/* Megatron's memory report after the first logged iteration, for the cpu backend: what the model and
 * optimizer hold (parameters, gradients, AdamW's two moments, the activations and scratch of one
 * micro-batch) and the process's peak resident set, in MB. */
static void report_memory(const run *r)
{
    const mt_trainer *t = &r->t;
    size_t pb, gb, ab;
    mt_gpt_memory(t->model, &pb, &gb, &ab);
    double mb = 1024.0 * 1024.0, ob = (double)mt_trainer_optimizer_bytes(t);
    struct rusage ru;
    double peak = getrusage(RUSAGE_SELF, &ru) ? 0 : (double)ru.ru_maxrss * 1024.0;   /* ru_maxrss: KiB */
    /* a line per (tensor rank, stage) of the first data-parallel and context-parallel rank, gathered to rank 0 (collective) */
    int tp = t->tp_size, pp = t->pp_size;
    double *v = mt_xcalloc((size_t)(tp * pp * 5), sizeof *v);
    double mine[5] = {(double)pb, (double)gb, ob, (double)ab, peak};
    if (t->gdp_rank == 0) memcpy(v + 5 * (t->pp_rank * tp + t->tp_rank), mine, sizeof mine);
    mt_err e;
    if (r->world->size > 1 && mt_all_reduce(r->world, v, (size_t)(tp * pp * 5), MT_C_F64, &e)) mt_die_err(&e);
    for (int i = 0; i < tp * pp; i++) {
        const double *x = v + 5 * i;
        printf("[Rank %d] (after %lld iterations) memory (MB) | parameters: %.1f | gradients: %.1f | optimizer: %.1f | "
               "activations: %.1f | total: %.1f | peak RSS: %.1f\n",
               i % tp + tp * t->cp_size * t->dp_size * (i / tp), (long long)t->iteration, x[0] / mb, x[1] / mb, x[2] / mb,
               x[3] / mb, (x[0] + x[1] + x[2] + x[3]) / mb, x[4] / mb);
    }
    free(v);
    /* data-parallel traffic of the last step against a ring all-reduce of the gradients, 2 (N-1)/N of them */
    if (r->t.dp_size > 1) {
        int n = r->t.dp_size;
        printf("[Rank 0] data-parallel communication per iteration | bytes sent: %llu | gradient bytes: %zu | "
               "ring all-reduce volume 2(N-1)/N: %.0f\n",
               (unsigned long long)r->t.step_bytes, gb, 2.0 * (n - 1) / n * (double)gb);
    }
    /* tensor-parallel traffic of the last step against the ring volume of what the model must exchange */
    if (r->t.tp_size > 1)
        printf("[Rank 0] tensor-parallel communication per iteration | bytes sent: %llu | ring volume of the "
               "activations and statistics: %.0f\n",
               (unsigned long long)r->t.tp_step_bytes, mt_trainer_tp_volume(&r->t));
    if (r->t.cp_size > 1)
        printf("[Rank 0] context-parallel communication per iteration | bytes sent: %llu | keys, values, their "
               "gradients and the losses: %.0f\n",
               (unsigned long long)r->t.cp_step_bytes, mt_trainer_cp_volume(&r->t));
    if (r->t.ep_size > 1)
        printf("[Rank 0] expert-parallel communication per iteration | bytes sent: %llu\n",
               (unsigned long long)r->t.ep_step_bytes);
    if (r->t.pp_size > 1)
        printf("[Rank 0] pipeline-parallel communication per iteration | bytes sent: %llu | activations, their "
               "gradients, tied embedding gradients, loss and norm: %.0f\n",
               (unsigned long long)r->t.pp_step_bytes, mt_trainer_pp_volume(&r->t));
    fflush(stdout);
}

typedef struct interval {
    double t0;
    mt_log_accum acc;
} interval;

static void log_iteration(run *r, interval *iv, const mt_step_result *s)
{
    mt_err e;
    double dt = now_s() - iv->t0;
    int64_t n = iv->acc.advanced + iv->acc.skipped;
    mt_iter_log l;
    memset(&l, 0, sizeof l);
    mt_log_now(&l);
    l.iteration = r->t.iteration;
    l.train_iters = r->t.train_iters;
    l.consumed_samples = r->t.consumed_train;
    l.elapsed_ms = n ? dt * 1000.0 / (double)n : 0;
    l.has_lr = true;
    l.lr = r->t.sched.lr;
    l.global_batch_size = r->t.a.global_batch_size;
    mt_log_accum_fill(&iv->acc, &l);
    l.loss_scale = s->loss_scale;
    l.has_grad_norm = r->t.a.clip_grad > 0 && !s->skipped;   /* Megatron: no norm of a skipped step */
    l.grad_norm = s->grad_norm;
    l.has_tokens_per_sec = true;
    l.tokens_per_sec = dt > 0 ? (double)n * (double)r->t.a.global_batch_size * r->t.a.seq_length / dt : 0;
    /* per GPU: the job's FLOPs over its ranks, as Megatron divides by the world size */
    double tflops = dt > 0 ? (double)n * r->t.flops_per_iter / dt / 1e12 / r->world->size : 0;
    if (r->t.a.log_throughput) {
        l.has_tflops = true;
        l.tflops_per_gpu = tflops;
    }
    if (r->t.a.log_params_norm) {
        l.has_params_norm = true;
        if (mt_trainer_params_norm(&r->t, &l.params_norm, &e)) mt_die_err(&e);
    }
    mt_print_iter_line(stdout, &l, LOG_STYLE);
    fflush(stdout);
    if (r->metrics) {
        if (mt_metrics_write_iter(r->metrics, &l, &e)) mt_die_err(&e);
        fflush(r->metrics);
    }
    if (r->tb) {
        if (r->t.a.log_throughput) tb_scalar(r, "throughput", r->t.iteration, tflops);
        tb_scalar(r, "tokens-per-sec", r->t.iteration, l.tokens_per_sec);
        if (mt_tb_flush(r->tb, &e)) mt_die_err(&e);
    }
    mt_log_accum_reset(&iv->acc);
    if (!r->memory_reported) {
        report_memory(r);
        r->memory_reported = 1;
    }
    iv->t0 = now_s();
}

static void tb_iteration(run *r, const mt_step_result *st)
{
    if (!r->tb || r->t.iteration % r->t.a.tensorboard_log_interval) return;
    int64_t it = r->t.iteration, s = r->t.consumed_train;
    double loss = st->loss, grad_norm = st->grad_norm;
    tb_scalar(r, "learning-rate", it, r->t.sched.lr);
    tb_scalar(r, "learning-rate vs samples", s, r->t.sched.lr);
    tb_scalar(r, "batch-size", it, (double)r->t.a.global_batch_size);
    tb_scalar(r, "batch-size vs samples", s, (double)r->t.a.global_batch_size);
    tb_scalar(r, "lm loss", it, loss);
    tb_scalar(r, "lm loss vs samples", s, loss);
    if (!r->t.a.no_log_loss_scale_to_tensorboard) {
        tb_scalar(r, "loss-scale", it, st->loss_scale);
        tb_scalar(r, "loss-scale vs samples", s, st->loss_scale);
    }
    if (r->t.a.clip_grad > 0 && !st->skipped) {
        tb_scalar(r, "grad-norm", it, grad_norm);
        tb_scalar(r, "grad-norm vs samples", s, grad_norm);
    }
    /* the MoE layers' losses as Megatron's tracker writes them (by iteration), and with --moe-per-layer-logging
     * each layer's under moe/ (and the rows each expert computed) */
    const mt_gpt_config *c = &r->t.cfg;
    int aux = c->num_experts && c->moe_aux_type != MT_MOE_AUX_NONE && c->moe_aux_coeff > 0, z = c->num_experts && c->moe_z_coeff > 0;
    const char *lb = c->moe_aux_type == MT_MOE_AUX_SEQ ? "seq_load_balancing_loss" : "load_balancing_loss";
    if (aux) tb_scalar(r, lb, it, st->moe_lb);
    if (z) tb_scalar(r, "z_loss", it, st->moe_z);
    for (int l = 0; st->moe_layer && l < c->num_layers; l++) {
        if (!c->moe_layers[l]) continue;
        const double *v = st->moe_layer + (size_t)l * (size_t)(2 + c->num_experts);
        char tag[96];
        if (aux) snprintf(tag, sizeof tag, "moe/%s_layer_%d", lb, l), tb_scalar(r, tag, it, v[0]);
        if (z) snprintf(tag, sizeof tag, "moe/z_loss_layer_%d", l), tb_scalar(r, tag, it, v[1]);
        for (int j = 0; j < c->num_experts; j++)
            snprintf(tag, sizeof tag, "moe/tokens_per_expert_layer_%d_expert_%d", l, j), tb_scalar(r, tag, it, v[2 + j]);
    }
}

/* Whether to stop after this iteration by signal (*sig) or by --exit-duration-in-mins (*late). With
 * several ranks it must be the same iteration everywhere: the flags are summed over the job (as
 * Megatron all-gathers the signal state each iteration) and rank 0's clock decides the duration. */
static void stop_flags(run *r, double start, int *sig, int *late)
{
    double mins = r->t.a.exit_duration_in_mins;
    int64_t f[2] = {got_sigterm, mins > 0 && (now_s() - start) / 60.0 > mins};
    if (r->world->size > 1 && (r->t.a.exit_signal_handler || mins > 0)) {
        if (r->world->rank != 0) f[1] = 0;
        mt_err e;
        if (mt_all_reduce(r->world, f, 2, MT_C_I64, &e)) mt_die_err(&e);
    }
    *sig = f[0] > 0;
    *late = f[1] > 0;
}

static int train(run *r)
{
    mt_trainer *t = &r->t;
    mt_err e;
    interval iv;
    memset(&iv, 0, sizeof iv);
    iv.t0 = now_s();
    double start = now_s();
    /* MT_STEP_STATS=1: a line per step on stderr with what it cost the kernel backend (mtk_stats) */
    const int step_stats = getenv("MT_STEP_STATS") && !strcmp(getenv("MT_STEP_STATS"), "1");
    while (t->iteration < t->train_iters) {
        mt_step_result s;
        if (mt_trainer_step(t, &s, &e)) mt_die_err(&e);
        if (step_stats)
            fprintf(stderr, "step stats | rank %d | iteration %lld | host syncs: %llu | upload waits: %llu | "
                    "kernel launches: %llu | kernel ops: %llu\n", t->par->world->rank, (long long)t->iteration,
                    (unsigned long long)s.stats.syncs, (unsigned long long)s.stats.upload_waits,
                    (unsigned long long)s.stats.launches, (unsigned long long)s.stats.ops);
        /* Megatron's keys: the lm loss, then the MoE layers' load-balancing loss and z-loss when they have them */
        mt_loss_value lv[3] = {{"lm loss", s.loss}};
        int nl = 1;
        const mt_gpt_config *cfg = &t->cfg;
        if (cfg->num_experts && cfg->moe_aux_type != MT_MOE_AUX_NONE && cfg->moe_aux_coeff > 0)
            lv[nl++] = (mt_loss_value){cfg->moe_aux_type == MT_MOE_AUX_SEQ ? "seq_load_balancing_loss" : "load_balancing_loss",
                                       s.moe_lb};
        if (cfg->num_experts && cfg->moe_z_coeff > 0) lv[nl++] = (mt_loss_value){"z_loss", s.moe_z};
        mt_log_accum_add(&iv.acc, s.skipped, lv, nl);
        tb_iteration(r, &s);
        if (t->iteration % t->a.log_interval == 0) log_iteration(r, &iv, &s);
        if (t->a.eval_iters > 0 && t->iteration % t->a.eval_interval == 0 && t->data.split[MT_SPLIT_VALID].present)
            evaluate_and_print(r, MT_SPLIT_VALID, MT_EVAL_DURING, t->a.eval_iters);
        /* an --async-save write is committed at the first iteration end after every rank's has ended */
        if (t->save_job && mt_trainer_save_poll(t, stdout, &e) < 0) mt_die_err(&e);
        if (t->a.save && t->a.save_interval && t->iteration % t->a.save_interval == 0) save_checkpoint(r);
        int stop = 0, sig, late;
        stop_flags(r, start, &sig, &late);
        if (sig) {
            fprintf(stderr, "exiting program after receiving SIGTERM.\n");
            stop = 1;
        } else if (late) {
            fprintf(stderr, "exiting program after %f minutes\n", (now_s() - start) / 60.0);
            stop = 1;
        } else if (t->a.exit_interval && t->iteration % t->a.exit_interval == 0) {
            fprintf(stderr, "exiting program at iteration %lld\n", (long long)t->iteration);
            stop = 1;
        }
        if (stop) {
            if (t->a.save && t->last_saved != t->iteration) save_checkpoint(r);
            wait_saves(r);
            return 1;
        }
    }
    return 0;
}

/* The job: bootstrap (a refused launch stops here, before anything is written), MPI, the check that every
 * rank has rank 0's flags and files (comm/agree.h), the grid and the data-parallel group. Ranks other
 * than 0 print nothing on stdout. */
static void join_job(run *r, const mt_train_args *a)
{
    mt_err e;
    if (mt_boot_init(&r->boot, &e)) mt_die_err(&e);
    if (r->boot.size > 1) {
        snprintf(plain_name, sizeof plain_name, "%s", mt_progname());
        snprintf(rank_name, sizeof rank_name, "%s: rank %d (%s)", plain_name, r->boot.rank, r->boot.host);
        mt_set_progname(rank_name);   /* for warnings */
        fail_boot = &r->boot;
        mt_set_die_report(report_in_job);
    }
    /* a progress thread communicates (the gradients' buckets, the ring attention's next block) */
    r->boot.threads = a->overlap_grad_reduce || a->overlap_param_gather ||
                      (a->context_parallel_size > 1 && !strcmp(a->cp_comm_type, "p2p"));
    if (mt_boot_mpi(&r->boot, &e)) mt_die_err(&e);
    /* the ranks' flags and files agree before the first collective that depends on them (the groups) */
    if (r->boot.size > 1) {
        size_t n;
        char *desc = mt_train_args_describe(a, &n);
        if (mt_boot_agree(&r->boot, rank_name, desc, n, &e)) mt_die_err(&e);
        free(desc);
    }
    if (mt_parallel_init_expert(&r->par, &r->boot, a->tensor_model_parallel_size, a->context_parallel_size,
                                a->pipeline_model_parallel_size, a->expert_model_parallel_size,
                                a->num_experts ? a->expert_tensor_parallel_size : 0, &e))
        mt_die_err(&e);
    r->world = r->par.world;
    const mt_grid g = r->par.grid;
    if (r->boot.rank != 0 && !freopen("/dev/null", "w", stdout)) mt_die("/dev/null: %s", strerror(errno));
    printf("using world size: %d, data-parallel size: %d, context-parallel size: %d, tensor-model-parallel size: %d, "
           "pipeline-model-parallel size: %d\n",
           r->boot.size, g.dp, g.cp, g.tp, g.pp);
}

/* The --save directory, checked and locked by rank 0; its error is the job's (every rank fails with it,
 * so that it is reported once, as a bad flag is). */
static void check_save_dir(run *r, const char *save)
{
    mt_err e;
    char msg[sizeof e.msg] = "";
    if (r->boot.rank == 0 && (mt_ckpt_check_save_dir(save, &e) || mt_ckpt_lock_save_dir(save, &e) < 0))
        snprintf(msg, sizeof msg, "%s", e.msg);
    if (r->world->size > 1 && mt_broadcast(r->world, msg, sizeof msg, MT_C_BYTE, 0, &e)) mt_die_err(&e);
    if (*msg) mt_die("--save: %s", msg);
}

/* Megatron's line per (tensor rank, stage): each model-parallel rank's parameter count, gathered to rank 0. */
static void print_param_counts(run *r, mt_err *e)
{
    const mt_trainer *t = &r->t;
    int tp = t->tp_size, pp = t->pp_size;
    int64_t *n = mt_xcalloc((size_t)(tp * pp), sizeof *n);
    if (t->dp_rank == 0) n[t->pp_rank * tp + t->tp_rank] = (int64_t)mt_gpt_num_params(t->model);
    if (r->world->size > 1 && mt_all_reduce(r->world, n, (size_t)(tp * pp), MT_C_I64, e)) mt_die_err(e);
    for (int s = 0; s < pp; s++)
        for (int i = 0; i < tp; i++)
            printf(" > number of parameters on (tensor, pipeline) model parallel rank (%d, %d): %lld\n", i, s,
                   (long long)n[s * tp + i]);
    free(n);
}

/* Whether the command line asks for the planner, which runs no OpenMP threads: no re-exec to set their
 * wait policy (half of its start-up time). */
static int is_dry_run(int argc, char **argv)
{
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--dry-run")) return 1;
    return 0;
}

int main(int argc, char **argv)
{
    if (!is_dry_run(argc, argv)) mt_omp_env_spin(argv, 1000);
    mt_set_progname(argv[0]);
    mt_launch_watch(mt_progname());   /* under mt-train -n: a rank killed by a signal is named */
    mt_set_die_report(report_before_join);
    static run r;
    static mt_train_args a;
    mt_trainer *t = &r.t;
    mt_err e;
    int nranks = mt_launch_take_n(&argc, argv, &e);
    if (nranks < 0) mt_die_err(&e);
    if (mt_train_args_parse(&a, argc, argv, &e)) {
        if (nranks == 0) report_flag_error(&r.boot, e.msg);
        mt_die_err(&e);
    }
    if (a.dry_run) {   /* the planner: no rank started, nothing read but the tokenizer's vocabulary */
        int world = a.world_size ? a.world_size : a.tensor_model_parallel_size * a.pipeline_model_parallel_size;
        if (nranks > 0) mt_die("--dry-run plans --world-size ranks; -n starts them");
        if (mt_plan_print(stdout, &a, world, &e)) mt_die_err(&e);
        return 0;
    }
    if (nranks > 0) {
        mt_launch_exec(nranks, argc, argv, &e);
        mt_die_err(&e);
    }
    join_job(&r, &a);
    /* a --save that cannot be written fails now, not after the training it was to keep; one job at a time
     * writes a --save directory: rank 0 holds its lock until it exits */
    if (a.save) check_save_dir(&r, a.save);
    /* the PMIx node-local rank and size choose the GPU and the communicators of device buffers (model/device.h) */
    char lr[16], ls[16];
    snprintf(lr, sizeof lr, "%d", r.boot.local_rank), snprintf(ls, sizeof ls, "%d", r.boot.local_size);
    if (r.boot.size > 1) setenv("MT_LOCAL_RANK", lr, 1), setenv("MT_LOCAL_SIZE", ls, 1);
    if (mt_trainer_open_par(t, &a, &r.par, &e)) mt_die_err(&e);
    if (t->dev_dp) printf("> data-parallel communicator: %s\n", t->dev_dp->ops->name);
    if (t->dev_tp) printf("> tensor-parallel communicator: %s\n", t->dev_tp->ops->name);
    if (t->dev_cp) printf("> context-parallel communicator: %s\n", t->dev_cp->ops->name);
    if (t->dev_pp) printf("> pipeline-parallel communicator: %s\n", t->dev_pp->ops->name);
    if (a.bf16 || a.fp16) printf("> --%s: products through %s\n", a.bf16 ? "bf16" : "fp16", mtk_products(t->k));
    printf("> padded vocab (size: %lld) with %lld dummy tokens (new size: %d)\n", (long long)t->vocab_size,
           (long long)(t->cfg.padded_vocab_size - t->vocab_size), t->cfg.padded_vocab_size);
    print_param_counts(&r, &e);
    if (a.load) {
        int rc = mt_trainer_load(t, stdout, &e);
        if (rc < 0) mt_die_err(&e);
        if (rc == 1)
            fprintf(stderr, "WARNING: could not find %s/%s; will not load any checkpoints and will start from random\n",
                    a.load, MT_CKPT_TRACKER);
    }
    /* the distributed optimizer in bf16/fp16 holds the fp32 master of its shard from now on */
    if (mt_trainer_own_master(t, &e)) mt_die_err(&e);
    if (a.tensorboard_dir && r.boot.rank == 0) {
        r.tb = mt_tb_open(a.tensorboard_dir, &e);
        if (!r.tb) mt_die_err(&e);
    }
    if (a.metrics_file && r.boot.rank == 0) {
        r.metrics = fopen(a.metrics_file, "a");
        if (!r.metrics) mt_die("%s: %s", a.metrics_file, strerror(errno));
    }
    if (a.exit_signal_handler) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_sigterm;
        sa.sa_flags = SA_RESTART;   /* a signal must not fail a write or a collective midway */
        sigaction(SIGTERM, &sa, NULL);
    }
    int stopped = 0;
    if (!a.skip_train && t->iteration < t->train_iters) {
        printf("training ...\n");
        stopped = train(&r);
        if (!stopped && a.save && t->iteration != 0 && t->last_saved != t->iteration) save_checkpoint(&r);
        wait_saves(&r);
    }
    if (!stopped && a.eval_iters > 0) {
        if (t->data.split[MT_SPLIT_VALID].present) evaluate_and_print(&r, MT_SPLIT_VALID, MT_EVAL_FINAL_VALID, a.eval_iters);
        if (t->data.split[MT_SPLIT_TEST].present) evaluate_and_print(&r, MT_SPLIT_TEST, MT_EVAL_FINAL_TEST, a.eval_iters);
    }
    if (r.tb && mt_tb_close(r.tb, &e)) mt_die_err(&e);
    if (r.metrics) fclose(r.metrics);
    mt_trainer_close(t);
    mt_parallel_free(&r.par);
    mt_boot_finalize(&r.boot);
    return 0;
}
