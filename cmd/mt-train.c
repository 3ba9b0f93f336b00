/* mt-train: train a GPT-2 model on one rank with Megatron-LM's flags, data order, schedule, log lines
 * and checkpoint layout (man mt-train.1). */
#include <errno.h>
#include <float.h>
#include <limits.h>
#include <stddef.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "data/gpt_dataset.h"
#include "data/split.h"
#include "kernels.h"
#include "model/gpt.h"
#include "tok/bpe.h"
#include "train/args.h"
#include "train/batch.h"
#include "train/checkpoint.h"
#include "train/evaluate.h"
#include "train/model_ckpt.h"
#include "train/optimizer.h"
#include "train/report.h"
#include "train/schedule.h"
#include "train/tensorboard.h"
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

/* Everything the loop carries; what a checkpoint must restore is marked (ckpt). */
typedef struct trainer {
    mt_train_args a;
    mtk *k;
    mt_gpt *model;
    mt_gpt_ctx *ctx;        /* activations of the micro-batch in flight */
    mt_gpt_config cfg;
    mt_adamw opt;           /* (ckpt) moments, step */
    mt_sched sched;         /* (ckpt) num_steps */
    mt_gpt_data data;
    mt_batch batch;
    int64_t vocab_size, eod;
    int num_micro;
    int64_t train_iters;
    int64_t iteration;              /* (ckpt) */
    int64_t consumed_train;         /* (ckpt) */
    int64_t consumed_valid;         /* (ckpt) */
    double flops_so_far;            /* (ckpt) num_floating_point_operations_so_far */
    int64_t last_saved;
    mt_tb *tb;
    FILE *metrics;
    double flops_per_iter;
    int memory_reported;
} trainer;

/* The dropout key of micro-batch m of the iteration that starts at iteration it (so resume redraws
 * the same masks). */
static uint64_t dropout_key(const trainer *t, int64_t it, int m)
{
    return mt_mix64(mt_mix64((uint64_t)t->a.seed + MT_GOLDEN64) ^ ((uint64_t)it * 0x100000001B3ull + (uint64_t)m));
}

/* Model FLOPs of one iteration (forward + backward = 3 x forward, no recomputation), as Megatron's
 * num_floating_point_operations counts them for GPT: per layer and token the QKV, dense and MLP
 * products, the attention scores and weighted values over the full T (causality not discounted), and
 * the logits over the padded vocabulary. */
static double flops_per_iteration(const trainer *t)
{
    double B = (double)t->a.global_batch_size, T = t->cfg.seq_length, L = t->cfg.num_layers,
           h = t->cfg.hidden_size, V = t->cfg.padded_vocab_size, f = t->cfg.ffn_hidden_size;
    /* per layer forward: qkv 6Th^2, attention scores+values 4T^2h (causal not discounted, as Megatron),
     * dense 2Th^2, mlp 4Thf; logits 2ThV; x3 for forward + backward */
    double fwd = L * (6 * T * h * h + 4 * T * T * h + 2 * T * h * h + 4 * T * h * f) + 2 * T * h * V;
    return 3 * B * fwd;
}

/* ---- checkpoints ---- */

/* The first non-finite value of n floats, or -1. */
static ptrdiff_t first_nonfinite(const float *x, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!isfinite(x[i])) return (ptrdiff_t)i;
    return -1;
}

static json_t *sched_json(const mt_sched *s)
{
    return json_pack("{s:f,s:f,s:f,s:f,s:I,s:s,s:I,s:f,s:f,s:I,s:s}", "max_lr", s->max_lr, "min_lr", s->min_lr,
                     "lr_warmup_init", s->init_lr, "lr_warmup_steps", s->warmup_steps, "lr_decay_steps",
                     (json_int_t)s->decay_steps, "lr_decay_style", mt_lr_style_name(s->style), "num_steps",
                     (json_int_t)s->num_steps, "start_wd", s->start_wd, "end_wd", s->end_wd, "wd_incr_steps",
                     (json_int_t)s->wd_incr_steps, "wd_incr_style", mt_wd_style_name(s->wd_style));
}

static void save_checkpoint(trainer *t)
{
    mt_err e;
    int nt = mt_gpt_num_tensors(t->model);
    size_t np = mt_gpt_num_params(t->model);
    int with_optim = !t->a.no_save_optim;
    float *host = mt_xmalloc(np * sizeof(float) * (with_optim ? 3 : 1));
    mtk_to_host(t->k, host, mt_gpt_params(t->model), np * sizeof(float));
    if (with_optim) {
        mtk_to_host(t->k, host + np, t->opt.exp_avg, np * sizeof(float));
        mtk_to_host(t->k, host + 2 * np, t->opt.exp_avg_sq, np * sizeof(float));
    }
    /* never a checkpoint of NaN/inf weights or moments: resuming from it could only go on producing NaN */
    for (int part = 0; part < (with_optim ? 3 : 1); part++) {
        ptrdiff_t bad = first_nonfinite(host + (size_t)part * np, np);
        if (bad < 0) continue;
        const char *name = "?";
        for (int i = 0; i < nt; i++) {
            const mt_gpt_tensor *g = mt_gpt_tensor_at(t->model, i);
            if ((size_t)bad >= g->offset && (size_t)bad < g->offset + g->numel) name = g->name;
        }
        mt_die("%s: not saving iteration %lld: %s%s holds a non-finite value", t->a.save, (long long)t->iteration,
               name, part == 0 ? "" : part == 1 ? ".exp_avg" : ".exp_avg_sq");
    }
    mt_ckpt_tensor *mt = mt_xcalloc((size_t)nt, sizeof *mt), *ot = mt_xcalloc((size_t)nt * 2, sizeof *ot);
    char (*names)[160] = mt_xcalloc((size_t)nt * 2, sizeof *names);
    for (int i = 0; i < nt; i++) {
        const mt_gpt_tensor *g = mt_gpt_tensor_at(t->model, i);
        mt_ckpt_tensor c = {g->name, g->ndim, {g->shape[0], g->shape[1]}, host + g->offset};
        mt[i] = c;
        if (with_optim) {
            snprintf(names[2 * i], sizeof names[0], "%s.exp_avg", g->name);
            snprintf(names[2 * i + 1], sizeof names[0], "%s.exp_avg_sq", g->name);
            mt_ckpt_tensor m1 = {names[2 * i], g->ndim, {g->shape[0], g->shape[1]}, host + np + g->offset};
            mt_ckpt_tensor m2 = {names[2 * i + 1], g->ndim, {g->shape[0], g->shape[1]}, host + 2 * np + g->offset};
            ot[2 * i] = m1;
            ot[2 * i + 1] = m2;
        }
    }
    json_t *meta = json_object();
    json_object_set_new(meta, "checkpoint_version", json_real(3.0));
    json_object_set_new(meta, "iteration", json_integer(t->iteration));
    json_object_set_new(meta, "args", mt_train_args_to_json(&t->a));
    json_object_set_new(meta, "consumed_train_samples", json_integer(t->consumed_train));
    json_object_set_new(meta, "consumed_valid_samples", json_integer(t->consumed_valid));
    json_object_set_new(meta, "num_floating_point_operations_so_far", json_real(t->flops_so_far));
    json_object_set_new(meta, "opt_param_scheduler", sched_json(&t->sched));
    if (with_optim)
        json_object_set_new(meta, "optimizer",
                            json_pack("{s:s,s:I,s:f,s:f,s:f}", "type", "adamw", "step", (json_int_t)t->opt.step,
                                      "beta1", t->opt.beta1, "beta2", t->opt.beta2, "eps", t->opt.eps));
    if (!t->a.no_save_rng)
        json_object_set_new(meta, "rng_state",
                            json_pack("{s:I,s:s}", "seed", (json_int_t)t->a.seed, "dropout",
                                      "counter-based: masks derive from seed, iteration and micro-batch"));
    json_object_set_new(meta, "loss_scaler", json_pack("{s:f}", "scale", 1.0));
    printf("saving checkpoint at iteration %7lld to %s\n", (long long)t->iteration, t->a.save);
    if (mt_ckpt_save(t->a.save, t->iteration, mt, nt, ot, with_optim ? 2 * nt : 0, meta, &e)) mt_die_err(&e);
    printf("  successfully saved checkpoint at iteration %7lld to %s\n", (long long)t->iteration, t->a.save);
    json_decref(meta);
    free(names);
    free(ot);
    free(mt);
    free(host);
    t->last_saved = t->iteration;
}

/* Numbers read from a checkpoint's meta.json are checked for type and range before any conversion (a
 * double outside an integer type's range has no defined conversion) and before use; a bad one is an
 * error naming the file and the field ("opt_param_scheduler.num_steps"). Counts stay within 2^53, where
 * doubles are exact and sums of two counts cannot overflow. */
#define META_MAX_COUNT ((int64_t)1 << 53)

static json_t *meta_get(json_t *o, const char *obj, const char *key, const char *where, const char *want)
{
    json_t *v = json_object_get(o, key);
    if (!v) mt_die("%s/meta.json: missing %s \"%s%s\"", where, want, obj, key);
    return v;
}

static int64_t meta_count(json_t *o, const char *obj, const char *key, const char *where, int64_t lo, int64_t hi)
{
    json_t *v = meta_get(o, obj, key, where, "integer");
    if (json_is_integer(v)) {
        json_int_t x = json_integer_value(v);
        if (x >= lo && x <= hi) return (int64_t)x;
        mt_die("%s/meta.json: \"%s%s\" is %lld, outside [%lld, %lld]", where, obj, key, (long long)x, (long long)lo,
               (long long)hi);
    }
    if (json_is_real(v)) {   /* 480.0 is 480; 1e300 and 2.5 are errors */
        double x = json_real_value(v);
        if (x >= (double)lo && x <= (double)hi && x == floor(x)) return (int64_t)x;
        mt_die("%s/meta.json: \"%s%s\" is %.17g, not an integer in [%lld, %lld]", where, obj, key, x, (long long)lo,
               (long long)hi);
    }
    mt_die("%s/meta.json: \"%s%s\" is not an integer", where, obj, key);
}

static double meta_real(json_t *o, const char *obj, const char *key, const char *where, double lo, double hi)
{
    json_t *v = meta_get(o, obj, key, where, "number");
    if (!json_is_number(v)) mt_die("%s/meta.json: \"%s%s\" is not a number", where, obj, key);
    double x = json_number_value(v);
    if (!(x >= lo && x <= hi)) mt_die("%s/meta.json: \"%s%s\" is %.17g, outside [%g, %g]", where, obj, key, x, lo, hi);
    return x;
}

/* A schedule style's name: one that parse knows, else an error naming the field. */
static const char *meta_style(json_t *o, const char *obj, const char *key, const char *where, int (*parse)(const char *))
{
    json_t *v = meta_get(o, obj, key, where, "string");
    if (!json_is_string(v) || parse(json_string_value(v)))
        mt_die("%s/meta.json: \"%s%s\" is not a known style name", where, obj, key);
    return json_string_value(v);
}
static int parse_lr_style(const char *s)
{
    mt_lr_style x;
    return mt_lr_style_parse(s, &x);
}
static int parse_wd_style(const char *s)
{
    mt_wd_style x;
    return mt_wd_style_parse(s, &x);
}

/* Megatron's OptimizerParamScheduler._check_and_set: this run's value with --override-opt_param-scheduler,
 * the checkpoint's with --use-checkpoint-opt_param-scheduler, and otherwise the two must agree. */
static void sched_mismatch(const char *where, const char *name, const char *saved, const char *mine)
{
    mt_die("%s: the checkpoint's %s (%s) differs from this run's (%s); pass "
           "--override-opt_param-scheduler or --use-checkpoint-opt_param-scheduler",
           where, name, saved, mine);
}

static double sched_value(const trainer *t, double mine, double saved, const char *name, const char *where)
{
    if (t->a.override_opt_param_scheduler) return mine;
    if (t->a.use_checkpoint_opt_param_scheduler) return saved;
    if (fabs(mine - saved) > 1e-12 * fmax(fabs(mine), fabs(saved))) {
        char s[32], m[32];
        snprintf(s, sizeof s, "%.17g", saved);
        snprintf(m, sizeof m, "%.17g", mine);
        sched_mismatch(where, name, s, m);
    }
    return mine;
}

static int64_t sched_count(const trainer *t, int64_t mine, int64_t saved, const char *name, const char *where)
{
    if (t->a.override_opt_param_scheduler) return mine;
    if (t->a.use_checkpoint_opt_param_scheduler) return saved;
    if (mine != saved) {
        char s[32], m[32];
        snprintf(s, sizeof s, "%lld", (long long)saved);
        snprintf(m, sizeof m, "%lld", (long long)mine);
        sched_mismatch(where, name, s, m);
    }
    return mine;
}

static const char *sched_style(const trainer *t, const char *mine, const char *saved, const char *name, const char *where)
{
    if (t->a.override_opt_param_scheduler) return mine;
    if (t->a.use_checkpoint_opt_param_scheduler) return saved;
    if (strcmp(mine, saved)) sched_mismatch(where, name, saved, mine);
    return mine;
}

/* The scheduler as Megatron's load_state_dict restores it: every field through _check_and_set, then
 * num_steps from the checkpoint (also with --override-opt_param-scheduler). The result is checked as a
 * schedule from the flags would be. */
static void load_schedule(trainer *t, json_t *meta, const char *dir)
{
    json_t *s = json_object_get(meta, "opt_param_scheduler");
    if (!json_is_object(s)) mt_die("%s/meta.json: missing \"opt_param_scheduler\"", dir);
    const char *P = "opt_param_scheduler.";
    const double max = (double)META_MAX_COUNT;
    const mt_sched *sc = &t->sched;
    double max_lr = sched_value(t, sc->max_lr, meta_real(s, P, "max_lr", dir, 0, DBL_MAX), "learning rate", dir);
    double min_lr = sched_value(t, sc->min_lr, meta_real(s, P, "min_lr", dir, 0, DBL_MAX), "minimum learning rate", dir);
    double init_lr = sc->init_lr;   /* not in Megatron's state: optional */
    if (json_object_get(s, "lr_warmup_init"))
        init_lr = sched_value(t, sc->init_lr, meta_real(s, P, "lr_warmup_init", dir, 0, DBL_MAX),
                              "warmup initial learning rate", dir);
    double warmup = sched_value(t, sc->warmup_steps, meta_real(s, P, "lr_warmup_steps", dir, 0, max), "warmup steps", dir);
    int64_t decay = sched_count(t, sc->decay_steps, meta_count(s, P, "lr_decay_steps", dir, 1, META_MAX_COUNT),
                                "total number of decay steps", dir);
    mt_lr_style style;
    mt_lr_style_parse(sched_style(t, mt_lr_style_name(sc->style), meta_style(s, P, "lr_decay_style", dir, parse_lr_style),
                                  "learning rate decay style", dir),
                      &style);
    double start_wd = sched_value(t, sc->start_wd, meta_real(s, P, "start_wd", dir, 0, DBL_MAX), "start weight decay", dir);
    double end_wd = sched_value(t, sc->end_wd, meta_real(s, P, "end_wd", dir, 0, DBL_MAX), "end weight decay", dir);
    int64_t wd_steps = sched_count(t, sc->wd_incr_steps, meta_count(s, P, "wd_incr_steps", dir, 0, META_MAX_COUNT),
                                   "total number of weight decay steps", dir);
    mt_wd_style wd_style;
    mt_wd_style_parse(sched_style(t, mt_wd_style_name(sc->wd_style), meta_style(s, P, "wd_incr_style", dir, parse_wd_style),
                                  "weight decay incr style", dir),
                      &wd_style);
    /* samples of successful iterations: never more than were consumed */
    int64_t num_steps = meta_count(s, P, "num_steps", dir, 0, t->consumed_train);
    mt_sched ns;
    mt_err e;
    if (mt_sched_init_steps(&ns, init_lr, max_lr, min_lr, warmup, decay, style, sc->wsd_decay_steps, sc->wsd_style,
                            start_wd, end_wd, wd_steps, wd_style, &e)) {
        mt_err_prefix(&e, "%s/meta.json: opt_param_scheduler", dir);
        mt_die_err(&e);
    }
    ns.num_steps = num_steps;
    mt_sched_step(&ns, 0);
    t->sched = ns;
}

static void load_checkpoint(trainer *t)
{
    mt_err e;
    int64_t it;
    int r = mt_ckpt_latest(t->a.load, &it, &e);
    if (r < 0) mt_die_err(&e);
    if (r == 1) {
        if (t->a.exit_on_missing_checkpoint)
            mt_die("%s: no %s: no checkpoint to load (--exit-on-missing-checkpoint)", t->a.load, MT_CKPT_TRACKER);
        fprintf(stderr, "WARNING: could not find %s/%s; will not load any checkpoints and will start from random\n",
                t->a.load, MT_CKPT_TRACKER);
        return;
    }
    mt_ckpt_reader *rd = mt_ckpt_open(t->a.load, MT_CKPT_LATEST, &e);
    if (!rd) mt_die_err(&e);
    const char *dir = mt_ckpt_dir(rd);
    json_t *meta = mt_ckpt_meta(rd);
    json_t *args = json_object_get(meta, "args");
    if (!json_is_object(args)) mt_die("%s/meta.json: missing \"args\"", dir);
    if (mt_train_args_check_model(&t->a, args, dir, &e)) mt_die_err(&e);
    printf("loading checkpoint from %s at iteration %lld\n", t->a.load, (long long)mt_ckpt_iteration(rd));
    size_t np = mt_gpt_num_params(t->model);
    int nt = mt_gpt_num_tensors(t->model);
    if (mt_gpt_load_weights(t->model, t->k, rd, &e)) mt_die_err(&e);
    if (!t->a.finetune) {
        int release = mt_ckpt_is_release(rd);
        t->iteration = release ? 0 : meta_count(meta, "", "iteration", dir, 0, META_MAX_COUNT);
        t->consumed_train = meta_count(meta, "", "consumed_train_samples", dir, 0, META_MAX_COUNT);
        t->consumed_valid = meta_count(meta, "", "consumed_valid_samples", dir, 0, META_MAX_COUNT);
        t->flops_so_far = json_object_get(meta, "num_floating_point_operations_so_far")
                              ? meta_real(meta, "", "num_floating_point_operations_so_far", dir, 0, DBL_MAX)
                              : 0;
        load_schedule(t, meta, dir);
        if (!t->a.no_load_optim) {
            json_t *o = json_object_get(meta, "optimizer");
            if (!json_is_object(o)) mt_die("%s/meta.json: missing \"optimizer\"", dir);
            /* a step per successful iteration; a negative one would make the bias correction divide by 0 */
            t->opt.step = meta_count(o, "optimizer.", "step", dir, 0, release || t->iteration > INT_MAX ? INT_MAX : t->iteration);
            float *m = mt_xmalloc(np * sizeof(float)), *v = mt_xmalloc(np * sizeof(float));
            for (int i = 0; i < nt; i++) {
                const mt_gpt_tensor *g = mt_gpt_tensor_at(t->model, i);
                char n1[160], n2[160];
                snprintf(n1, sizeof n1, "%s.exp_avg", g->name);
                snprintf(n2, sizeof n2, "%s.exp_avg_sq", g->name);
                if (mt_ckpt_read_tensor(rd, MT_CKPT_OPTIM, n1, g->ndim, g->shape, m + g->offset, &e) ||
                    mt_ckpt_read_tensor(rd, MT_CKPT_OPTIM, n2, g->ndim, g->shape, v + g->offset, &e))
                    mt_die_err(&e);
            }
            mtk_to_device(t->k, t->opt.exp_avg, m, np * sizeof(float));
            mtk_to_device(t->k, t->opt.exp_avg_sq, v, np * sizeof(float));
            free(m);
            free(v);
        }
        /* --no-load-rng: nothing to restore; dropout masks derive from --seed and the iteration */
    }
    printf("  successfully loaded checkpoint from %s [ t 1/1, p 1/1 ] at iteration %lld\n", t->a.load,
            (long long)t->iteration);
    mt_ckpt_close(rd);
    t->last_saved = t->iteration;
}

/* ---- evaluation ---- */

static void tb_scalar(trainer *t, const char *tag, int64_t step, double v)
{
    mt_err e;
    if (mt_tb_add_scalar(t->tb, tag, step, v, &e)) mt_die_err(&e);
}

static void evaluate_and_print(trainer *t, int split, mt_eval_when when, int64_t iters)
{
    mt_err e;
    mt_eval_result r;
    int64_t test_consumed = 0;
    int64_t *consumed = split == MT_SPLIT_VALID ? &t->consumed_valid : &test_consumed;
    if (mt_evaluate(t->ctx, &t->batch, &t->data, split, consumed, iters, t->num_micro, &r, &e)) mt_die_err(&e);
    char prefix[128];
    mt_eval_prefix(prefix, sizeof prefix, LOG_STYLE, when, t->iteration);
    mt_loss_value lv = {"lm loss", r.loss};
    mt_print_validation(stdout, NULL, prefix, &lv, 1);
    fflush(stdout);
    if (split == MT_SPLIT_VALID && t->tb) {
        tb_scalar(t, "lm loss validation", t->iteration, r.loss);
        tb_scalar(t, "lm loss validation vs samples", t->consumed_train, r.loss);
        if (t->a.log_validation_ppl_to_tensorboard) {
            tb_scalar(t, "lm loss validation ppl", t->iteration, mt_ppl(r.loss));
            tb_scalar(t, "lm loss validation ppl vs samples", t->consumed_train, mt_ppl(r.loss));
        }
        if (mt_tb_flush(t->tb, &e)) mt_die_err(&e);
    }
    if (t->metrics) {
        if (mt_metrics_write_eval(t->metrics, split == MT_SPLIT_VALID ? "valid" : "test", t->iteration,
                                  t->consumed_train, &lv, 1, &e))
            mt_die_err(&e);
        fflush(t->metrics);
    }
}

/* ---- setup ---- */

static void open_data(trainer *t)
{
    mt_err e;
    mt_gpt_data_args da = {0};
    da.n_args = t->a.data_path.n;
    da.args = (char *const *)t->a.data_path.v;
    da.split = t->a.split;
    da.seq_length = t->a.seq_length;
    da.seed = (uint32_t)t->a.seed;
    if (mt_split_num_samples(t->a.train_samples ? 0 : t->a.train_iters, t->a.train_samples, t->a.global_batch_size,
                             t->a.eval_interval, t->a.eval_iters, da.num_samples, &e))
        mt_die_err(&e);
    char *cache = mt_default_cache_dir(t->a.data_cache_path, t->a.data_path.n, t->a.data_path.v);
    da.cache_dir = cache;
    da.surplus = t->a.mid_level_dataset_surplus;
    if (mt_gpt_data_open(&t->data, &da, &e)) mt_die_err(&e);
    free(cache);
}

static void open_tokenizer(trainer *t)
{
    if (!strcmp(t->a.tokenizer_type, "NullTokenizer")) {
        t->vocab_size = t->a.vocab_size + 1;   /* Megatron's NullTokenizer: eod is the id after the vocab */
        t->eod = t->a.vocab_size;
        return;
    }
    mt_err e;
    mt_bpe *b;
    if (mt_bpe_load(&b, t->a.vocab_file, t->a.merge_file, &e)) mt_die_err(&e);
    t->vocab_size = mt_bpe_vocab_size(b);
    t->eod = mt_bpe_eod(b);
    mt_bpe_free(b);
}

static void build_schedule(trainer *t)
{
    mt_err e;
    mt_sched_args s = mt_sched_args_default();
    s.lr = t->a.lr;
    s.min_lr = t->a.min_lr;
    s.lr_warmup_init = t->a.lr_warmup_init;
    if (mt_lr_style_parse(t->a.lr_decay_style, &s.lr_decay_style)) mt_die("--lr-decay-style %s", t->a.lr_decay_style);
    if (mt_wd_style_parse(t->a.weight_decay_incr_style, &s.weight_decay_incr_style))
        mt_die("--weight-decay-incr-style %s", t->a.weight_decay_incr_style);
    s.train_iters = t->a.train_samples ? -1 : t->a.train_iters;
    s.train_samples = t->a.train_samples ? t->a.train_samples : -1;
    s.global_batch_size = t->a.global_batch_size;
    if (t->a.lr_decay_iters) s.lr_decay_iters = t->a.lr_decay_iters;
    if (t->a.lr_decay_samples) s.lr_decay_samples = t->a.lr_decay_samples;
    if (t->a.lr_warmup_fraction > 0) s.lr_warmup_fraction = t->a.lr_warmup_fraction;
    s.lr_warmup_iters = t->a.lr_warmup_iters;
    s.lr_warmup_samples = t->a.lr_warmup_samples;
    s.weight_decay = t->a.weight_decay;
    if (strcmp(t->a.weight_decay_incr_style, "constant")) {
        s.start_weight_decay = t->a.start_weight_decay;
        s.end_weight_decay = t->a.end_weight_decay;
    }
    if (mt_sched_init(&t->sched, &s, &e)) mt_die_err(&e);
}

static void setup(trainer *t)
{
    mt_err e;
    open_tokenizer(t);
    t->cfg = (mt_gpt_config){
        .num_layers = t->a.num_layers,
        .hidden_size = t->a.hidden_size,
        .num_heads = t->a.num_attention_heads,
        .ffn_hidden_size = t->a.ffn_hidden_size,
        .seq_length = t->a.seq_length,
        .max_position_embeddings = t->a.max_position_embeddings,
        .vocab_size = (int)t->vocab_size,
        .padded_vocab_size = mt_gpt_padded_vocab((int)t->vocab_size, t->a.make_vocab_size_divisible_by, 1),
        .layernorm_epsilon = (float)t->a.layernorm_epsilon,
        .init_method_std = t->a.init_method_std,
        .exact_gelu = t->a.no_bias_gelu_fusion && !t->a.openai_gelu,
        .hidden_dropout = (float)t->a.hidden_dropout,
        .attention_dropout = (float)t->a.attention_dropout,
    };
    if (mt_gpt_config_check(&t->cfg, &e)) mt_die_err(&e);
    t->k = mtk_open(&(mtk_config){.backend = t->a.backend, .threads = t->a.threads}, &e);
    if (!t->k) mt_die_err(&e);
    t->num_micro = (int)(t->a.global_batch_size / t->a.micro_batch_size);
    t->train_iters = mt_train_total_iters(&t->a);
    open_data(t);
    t->model = mt_gpt_create(t->k, &t->cfg, MT_GPT_TRAIN, &e);
    if (!t->model) mt_die_err(&e);
    t->ctx = mt_gpt_ctx_new(t->model, t->a.micro_batch_size, &e);
    if (!t->ctx) mt_die_err(&e);
    mt_gpt_init(t->model, (uint64_t)t->a.seed);
    if (mt_adamw_init(&t->opt, t->k, t->model, t->a.adam_beta1, t->a.adam_beta2, t->a.adam_eps, t->a.clip_grad, &e))
        mt_die_err(&e);
    build_schedule(t);
    mt_batch_init(&t->batch, t->a.micro_batch_size, t->a.seq_length, t->vocab_size, t->eod, t->a.eod_mask_loss);
    t->flops_per_iter = flops_per_iteration(t);
    printf("> padded vocab (size: %lld) with %lld dummy tokens (new size: %d)\n", (long long)t->vocab_size,
            (long long)(t->cfg.padded_vocab_size - t->vocab_size), t->cfg.padded_vocab_size);
    printf(" > number of parameters on (tensor, pipeline) model parallel rank (0, 0): %zu\n",
            mt_gpt_num_params(t->model));
}

/* ---- the loop ---- */

/* Megatron's memory report after the first logged iteration, for the cpu backend: what the model and
 * optimizer hold (parameters, gradients, AdamW's two moments, the activations and scratch of one
 * micro-batch) and the process's peak resident set, in MB. */
static void report_memory(const trainer *t)
{
    size_t pb, gb, ab;
    mt_gpt_memory(t->model, &pb, &gb, &ab);
    double mb = 1024.0 * 1024.0, ob = 2.0 * (double)mt_gpt_num_params(t->model) * sizeof(float);
    struct rusage ru;
    double peak = getrusage(RUSAGE_SELF, &ru) ? 0 : (double)ru.ru_maxrss * 1024.0;   /* ru_maxrss: KiB */
    printf("[Rank 0] (after %lld iterations) memory (MB) | parameters: %.1f | gradients: %.1f | optimizer: %.1f | "
           "activations: %.1f | total: %.1f | peak RSS: %.1f\n",
           (long long)t->iteration, pb / mb, gb / mb, ob / mb, ab / mb, (pb + gb + ob + ab) / mb, peak / mb);
    fflush(stdout);
}

typedef struct interval {
    double t0;
    mt_log_accum acc;
} interval;

static void log_iteration(trainer *t, interval *iv, double grad_norm)
{
    mt_err e;
    double dt = now_s() - iv->t0;
    int64_t n = iv->acc.advanced + iv->acc.skipped;
    mt_iter_log l;
    memset(&l, 0, sizeof l);
    mt_log_now(&l);
    l.iteration = t->iteration;
    l.train_iters = t->train_iters;
    l.consumed_samples = t->consumed_train;
    l.elapsed_ms = n ? dt * 1000.0 / (double)n : 0;
    l.has_lr = true;
    l.lr = t->sched.lr;
    l.global_batch_size = t->a.global_batch_size;
    mt_log_accum_fill(&iv->acc, &l);
    l.loss_scale = 1.0;
    l.has_grad_norm = t->a.clip_grad > 0;
    l.grad_norm = grad_norm;
    l.has_tokens_per_sec = true;
    l.tokens_per_sec = dt > 0 ? (double)n * (double)t->a.global_batch_size * t->a.seq_length / dt : 0;
    double tflops = dt > 0 ? (double)n * t->flops_per_iter / dt / 1e12 : 0;
    if (t->a.log_throughput) {
        l.has_tflops = true;
        l.tflops_per_gpu = tflops;
    }
    if (t->a.log_params_norm) {
        l.has_params_norm = true;
        l.params_norm = mt_params_norm(t->k, t->model);
    }
    mt_print_iter_line(stdout, &l, LOG_STYLE);
    fflush(stdout);
    if (t->metrics) {
        if (mt_metrics_write_iter(t->metrics, &l, &e)) mt_die_err(&e);
        fflush(t->metrics);
    }
    if (t->tb) {
        if (t->a.log_throughput) tb_scalar(t, "throughput", t->iteration, tflops);
        tb_scalar(t, "tokens-per-sec", t->iteration, l.tokens_per_sec);
        if (mt_tb_flush(t->tb, &e)) mt_die_err(&e);
    }
    mt_log_accum_reset(&iv->acc);
    if (!t->memory_reported) {
        report_memory(t);
        t->memory_reported = 1;
    }
    iv->t0 = now_s();
}

static void tb_iteration(trainer *t, double loss, double grad_norm)
{
    if (!t->tb || t->iteration % t->a.tensorboard_log_interval) return;
    int64_t it = t->iteration, s = t->consumed_train;
    tb_scalar(t, "learning-rate", it, t->sched.lr);
    tb_scalar(t, "learning-rate vs samples", s, t->sched.lr);
    tb_scalar(t, "batch-size", it, (double)t->a.global_batch_size);
    tb_scalar(t, "batch-size vs samples", s, (double)t->a.global_batch_size);
    tb_scalar(t, "lm loss", it, loss);
    tb_scalar(t, "lm loss vs samples", s, loss);
    if (!t->a.no_log_loss_scale_to_tensorboard) {
        tb_scalar(t, "loss-scale", it, 1.0);
        tb_scalar(t, "loss-scale vs samples", s, 1.0);
    }
    if (t->a.clip_grad > 0) {
        tb_scalar(t, "grad-norm", it, grad_norm);
        tb_scalar(t, "grad-norm vs samples", s, grad_norm);
    }
}

/* Megatron's --check-for-nan-in-loss-and-grad (on unless --no-check-for-nan-in-loss-and-grad): a
 * non-finite loss or grad norm stops the run before the optimizer step, so that neither the weights nor
 * a checkpoint take it. */
static void check_finite(const trainer *t, const char *what, double v)
{
    if (t->a.no_check_for_nan_in_loss_and_grad || isfinite(v)) return;
    mt_die("iteration %lld: %s is %g; stopping before the optimizer step, no checkpoint written "
           "(--no-check-for-nan-in-loss-and-grad skips such iterations instead)",
           (long long)t->iteration + 1, what, v);
}

/* One optimizer step over num_micro micro-batches. Returns the pre-clip grad norm (NaN/inf: skipped). */
static double train_step(trainer *t, double *loss_sum, double *tokens)
{
    mt_err e;
    mt_gpt_zero_grad(t->model);
    *loss_sum = *tokens = 0;
    for (int m = 0; m < t->num_micro; m++) {
        if (mt_batch_read(&t->batch, &t->data, MT_SPLIT_TRAIN, t->consumed_train + (int64_t)m * t->a.micro_batch_size, &e))
            mt_die_err(&e);
        mt_gpt_set_dropout(t->ctx, 1, dropout_key(t, t->iteration, m));
        mt_gpt_loss l;
        if (mt_gpt_forward(t->ctx, t->batch.tokens, t->batch.targets, t->batch.loss_mask, t->batch.B, t->batch.T, NULL,
                           &l, &e) ||
            mt_gpt_backward(t->ctx, l.count > 0 ? (double)(1.0f / (float)t->num_micro) / l.count : 0.0, &e))
            mt_die_err(&e);
        *loss_sum += l.sum;
        *tokens += l.count;
    }
    mt_gpt_set_dropout(t->ctx, 0, 0);
    check_finite(t, "the lm loss", *tokens > 0 ? *loss_sum / *tokens : 0);
    double norm = mt_adamw_step(&t->opt, t->sched.lr, t->sched.wd);   /* no update when norm is NaN/inf */
    check_finite(t, "the grad norm", norm);
    return norm;
}

static int train(trainer *t)
{
    interval iv;
    memset(&iv, 0, sizeof iv);
    iv.t0 = now_s();
    double start = now_s();
    double grad_norm = 0;
    while (t->iteration < t->train_iters) {
        double loss_sum, tokens;
        grad_norm = train_step(t, &loss_sum, &tokens);
        int ok = isfinite(grad_norm);
        if (ok) mt_sched_step(&t->sched, t->a.global_batch_size);
        t->iteration++;
        t->consumed_train += t->a.global_batch_size;
        t->flops_so_far += t->flops_per_iter;
        double loss = tokens > 0 ? loss_sum / tokens : 0;
        mt_loss_value lv = {"lm loss", loss};
        mt_log_accum_add(&iv.acc, !ok, &lv, 1);
        tb_iteration(t, loss, grad_norm);
        if (t->iteration % t->a.log_interval == 0) log_iteration(t, &iv, grad_norm);
        if (t->a.eval_iters > 0 && t->iteration % t->a.eval_interval == 0 && t->data.split[MT_SPLIT_VALID].present) {
            evaluate_and_print(t, MT_SPLIT_VALID, MT_EVAL_DURING, t->a.eval_iters);
        }
        if (t->a.save && t->a.save_interval && t->iteration % t->a.save_interval == 0) save_checkpoint(t);
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
            if (t->a.save && t->last_saved != t->iteration) save_checkpoint(t);
            return 1;
        }
    }
    return 0;
}

int main(int argc, char **argv)
{
    mt_omp_env_default(argv);
    mt_set_progname(argv[0]);
    static trainer t;
    mt_err e;
    if (mt_train_args_parse(&t.a, argc, argv, &e)) mt_die_err(&e);
    /* a --save that cannot be written fails now, not after the training it was to keep */
    if (t.a.save && mt_ckpt_check_save_dir(t.a.save, &e)) mt_die("--save: %s", e.msg);
    setup(&t);
    if (t.a.load) load_checkpoint(&t);
    if (t.a.tensorboard_dir) {
        t.tb = mt_tb_open(t.a.tensorboard_dir, &e);
        if (!t.tb) mt_die_err(&e);
    }
    if (t.a.metrics_file) {
        t.metrics = fopen(t.a.metrics_file, "a");
        if (!t.metrics) mt_die("%s: %s", t.a.metrics_file, strerror(errno));
    }
    if (t.a.exit_signal_handler) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_sigterm;
        sigaction(SIGTERM, &sa, NULL);
    }
    int stopped = 0;
    if (!t.a.skip_train && t.iteration < t.train_iters) {
        printf("training ...\n");
        stopped = train(&t);
        if (!stopped && t.a.save && t.iteration != 0 && t.last_saved != t.iteration) save_checkpoint(&t);
    }
    if (!stopped && t.a.eval_iters > 0) {
        if (t.data.split[MT_SPLIT_VALID].present) evaluate_and_print(&t, MT_SPLIT_VALID, MT_EVAL_FINAL_VALID, t.a.eval_iters);
        if (t.data.split[MT_SPLIT_TEST].present) evaluate_and_print(&t, MT_SPLIT_TEST, MT_EVAL_FINAL_TEST, t.a.eval_iters);
    }
    if (t.tb && mt_tb_close(t.tb, &e)) mt_die_err(&e);
    if (t.metrics) fclose(t.metrics);
    mt_batch_free(&t.batch);
    mt_adamw_free(&t.opt);
    mt_gpt_ctx_free(t.ctx);
    mt_gpt_free(t.model);
    mt_gpt_data_close(&t.data);
    mtk_close(t.k);
    return 0;
}
