/* mt-train: train a GPT-2 model on one rank with Megatron-LM's flags, data order, schedule, log lines
 * and checkpoint layout (man mt-train.1). The run's state, its step and its checkpoints are
 * libcommon/train's (trainer.h, train_ckpt.h); this file is the flags, the wiring and the reporting. */
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "data/split.h"
#include "kernels.h"
#include "model/gpt.h"
#include "train/args.h"
#include "train/checkpoint.h"
#include "train/evaluate.h"
#include "train/report.h"
#include "train/tensorboard.h"
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

/* The run (t) and what reports on it. */
typedef struct run {
    mt_trainer t;
    mt_tb *tb;
    FILE *metrics;
    int memory_reported;
} run;

static void save_checkpoint(run *r)
{
    mt_err e;
    if (mt_trainer_save(&r->t, stdout, &e)) mt_die_err(&e);
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
    if (mt_evaluate(r->t.ctx, &r->t.batch, &r->t.data, split, consumed, iters, r->t.num_micro, &res, &e)) mt_die_err(&e);
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
    size_t pb, gb, ab;
    mt_gpt_memory(r->t.model, &pb, &gb, &ab);
    double mb = 1024.0 * 1024.0, ob = 2.0 * (double)mt_gpt_num_params(r->t.model) * sizeof(float);
    struct rusage ru;
    double peak = getrusage(RUSAGE_SELF, &ru) ? 0 : (double)ru.ru_maxrss * 1024.0;   /* ru_maxrss: KiB */
    printf("[Rank 0] (after %lld iterations) memory (MB) | parameters: %.1f | gradients: %.1f | optimizer: %.1f | "
           "activations: %.1f | total: %.1f | peak RSS: %.1f\n",
           (long long)r->t.iteration, pb / mb, gb / mb, ob / mb, ab / mb, (pb + gb + ob + ab) / mb, peak / mb);
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
    double tflops = dt > 0 ? (double)n * r->t.flops_per_iter / dt / 1e12 : 0;
    if (r->t.a.log_throughput) {
        l.has_tflops = true;
        l.tflops_per_gpu = tflops;
    }
    if (r->t.a.log_params_norm) {
        l.has_params_norm = true;
        l.params_norm = mt_params_norm(r->t.k, r->t.model);
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
}

static int train(run *r)
{
    mt_trainer *t = &r->t;
    mt_err e;
    interval iv;
    memset(&iv, 0, sizeof iv);
    iv.t0 = now_s();
    double start = now_s();
    while (t->iteration < t->train_iters) {
        mt_step_result s;
        if (mt_trainer_step(t, &s, &e)) mt_die_err(&e);
        mt_loss_value lv = {"lm loss", s.loss};
        mt_log_accum_add(&iv.acc, s.skipped, &lv, 1);
        tb_iteration(r, &s);
        if (t->iteration % t->a.log_interval == 0) log_iteration(r, &iv, &s);
        if (t->a.eval_iters > 0 && t->iteration % t->a.eval_interval == 0 && t->data.split[MT_SPLIT_VALID].present)
            evaluate_and_print(r, MT_SPLIT_VALID, MT_EVAL_DURING, t->a.eval_iters);
        if (t->a.save && t->a.save_interval && t->iteration % t->a.save_interval == 0) save_checkpoint(r);
        int stop = 0;
        if (got_sigterm) {
            fprintf(stderr, "exiting program after receiving SIGTERM.\n");
            stop = 1;
        } else if (t->a.exit_duration_in_mins > 0 && (now_s() - start) / 60.0 > t->a.exit_duration_in_mins) {
            fprintf(stderr, "exiting program after %f minutes\n", (now_s() - start) / 60.0);
            stop = 1;
        } else if (t->a.exit_interval && t->iteration % t->a.exit_interval == 0) {
            fprintf(stderr, "exiting program at iteration %lld\n", (long long)t->iteration);
            stop = 1;
        }
        if (stop) {
            if (t->a.save && t->last_saved != t->iteration) save_checkpoint(r);
            return 1;
        }
    }
    return 0;
}

int main(int argc, char **argv)
{
    mt_omp_env_default(argv);
    mt_set_progname(argv[0]);
    static run r;
    static mt_train_args a;
    mt_trainer *t = &r.t;
    mt_err e;
    if (mt_train_args_parse(&a, argc, argv, &e)) mt_die_err(&e);
    /* a --save that cannot be written fails now, not after the training it was to keep */
    if (a.save && mt_ckpt_check_save_dir(a.save, &e)) mt_die("--save: %s", e.msg);
    if (mt_trainer_open(t, &a, &e)) mt_die_err(&e);
    printf("> padded vocab (size: %lld) with %lld dummy tokens (new size: %d)\n", (long long)t->vocab_size,
           (long long)(t->cfg.padded_vocab_size - t->vocab_size), t->cfg.padded_vocab_size);
    printf(" > number of parameters on (tensor, pipeline) model parallel rank (0, 0): %zu\n",
           mt_gpt_num_params(t->model));
    if (a.load) {
        int rc = mt_trainer_load(t, stdout, &e);
        if (rc < 0) mt_die_err(&e);
        if (rc == 1)
            fprintf(stderr, "WARNING: could not find %s/%s; will not load any checkpoints and will start from random\n",
                    a.load, MT_CKPT_TRACKER);
    }
    if (a.tensorboard_dir) {
        r.tb = mt_tb_open(a.tensorboard_dir, &e);
        if (!r.tb) mt_die_err(&e);
    }
    if (a.metrics_file) {
        r.metrics = fopen(a.metrics_file, "a");
        if (!r.metrics) mt_die("%s: %s", a.metrics_file, strerror(errno));
    }
    if (a.exit_signal_handler) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_sigterm;
        sigaction(SIGTERM, &sa, NULL);
    }
    int stopped = 0;
    if (!a.skip_train && t->iteration < t->train_iters) {
        printf("training ...\n");
        stopped = train(&r);
        if (!stopped && a.save && t->iteration != 0 && t->last_saved != t->iteration) save_checkpoint(&r);
    }
    if (!stopped && a.eval_iters > 0) {
        if (t->data.split[MT_SPLIT_VALID].present) evaluate_and_print(&r, MT_SPLIT_VALID, MT_EVAL_FINAL_VALID, a.eval_iters);
        if (t->data.split[MT_SPLIT_TEST].present) evaluate_and_print(&r, MT_SPLIT_TEST, MT_EVAL_FINAL_TEST, a.eval_iters);
    }
    if (r.tb && mt_tb_close(r.tb, &e)) mt_die_err(&e);
    if (r.metrics) fclose(r.metrics);
    mt_trainer_close(t);
    return 0;
}
