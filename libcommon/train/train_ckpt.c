/* train_ckpt.c: saving and loading a run's checkpoint state (see train_ckpt.h). */
#include "train/train_ckpt.h"

#include <float.h>
#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ckpt/checkpoint.h"
#include "ckpt/dist_optim.h"
#include "ckpt/meta.h"
#include "ckpt/open_model.h"
#include "model/fp8.h"
#include "train/ckpt_write.h"

/* ---- the metadata of a save (ckpt_write.c writes the files) ---- */

static json_t *sched_json(const mt_sched *s)
{
    return json_pack("{s:f,s:f,s:f,s:f,s:I,s:s,s:I,s:f,s:f,s:I,s:s}", "max_lr", s->max_lr, "min_lr", s->min_lr,
                     "lr_warmup_init", s->init_lr, "lr_warmup_steps", s->warmup_steps, "lr_decay_steps",
                     (json_int_t)s->decay_steps, "lr_decay_style", mt_lr_style_name(s->style), "num_steps",
                     (json_int_t)s->num_steps, "start_wd", s->start_wd, "end_wd", s->end_wd, "wd_incr_steps",
                     (json_int_t)s->wd_incr_steps, "wd_incr_style", mt_wd_style_name(s->wd_style));
}

/* The FP8 state of this rank's stage (Transformer Engine keeps it as each module's _extra_state): the
 * recipe, the global layers [first_layer, first_layer + layers), the experts of an MoE layer on a rank
 * (local_experts, with MoE layers), and model/fp8.h's floats of them. */
static json_t *fp8_json(const mt_trainer *t)
{
    size_t n = mt_gpt_fp8_state_numel(t->model);
    float *h = mt_xmalloc(n * sizeof *h);
    mt_gpt_fp8_state_get(t->model, h);
    json_t *st = json_array();
    for (size_t i = 0; i < n; i++) json_array_append_new(st, json_real(h[i]));
    free(h);
    int first, layers, El = mt_gpt_fp8_local_experts(t->model);
    mt_gpt_fp8_layers(t->model, &first, &layers);
    json_t *o = json_pack("{s:s,s:i,s:i,s:s,s:i,s:i,s:o}", "format", t->a.fp8_format, "margin", t->a.fp8_margin,
                          "amax_history_len", t->a.fp8_amax_history_len, "amax_compute_algo", t->a.fp8_amax_compute_algo,
                          "first_layer", first, "layers", layers, "state", st);
    if (El) json_object_set_new(o, "local_experts", json_integer(El));
    return o;
}

json_t *mt_trainer_ckpt_meta(const mt_trainer *t, int with_optim, json_t *distributed)
{
    json_t *meta = json_object();
    json_object_set_new(meta, "checkpoint_version", json_real(3.0));
    json_object_set_new(meta, "iteration", json_integer(t->iteration));
    json_object_set_new(meta, "args", mt_train_args_to_json(&t->a));
    json_object_set_new(meta, "consumed_train_samples", json_integer(t->consumed_train));
    json_object_set_new(meta, "consumed_valid_samples", json_integer(t->consumed_valid));
    json_object_set_new(meta, "num_floating_point_operations_so_far", json_real(t->flops_so_far));
    json_object_set_new(meta, "opt_param_scheduler", sched_json(&t->sched));
    if (with_optim) {
        json_t *o = json_pack("{s:s,s:I,s:f,s:f,s:f}", "type", "adamw", "step", (json_int_t)t->opt.step, "beta1",
                              t->opt.beta1, "beta2", t->opt.beta2, "eps", t->opt.eps);
        if (distributed) json_object_set_new(o, "distributed", distributed);
        json_object_set_new(meta, "optimizer", o);
    } else json_decref(distributed);
    if (!t->a.no_save_rng)
        json_object_set_new(meta, "rng_state",
                            json_pack("{s:I,s:s}", "seed", (json_int_t)t->a.seed, "dropout",
                                      "counter-based: masks derive from seed, iteration and micro-batch"));
    json_object_set_new(meta, "loss_scaler", mt_loss_scaler_to_json(&t->scaler));
    if (mt_gpt_fp8_state_numel(t->model)) json_object_set_new(meta, "fp8", fp8_json(t));
    return meta;
}

/* ---- the scheduler ---- */

/* A schedule style's name: one that parse knows, else an error naming the field. */
static int meta_style(const json_t *o, const char *obj, const char *key, const char *where,
                      int (*parse)(const char *), const char **out, mt_err *e)
{
    json_t *v = json_object_get(o, key);
    if (!v) return mt_err_set(e, "%s/meta.json: missing string \"%s%s\"", where, obj, key);
    if (!json_is_string(v) || parse(json_string_value(v)))
        return mt_err_set(e, "%s/meta.json: \"%s%s\" is not a known style name", where, obj, key);
    *out = json_string_value(v);
    return 0;
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
static int sched_mismatch(const char *where, const char *name, const char *saved, const char *mine, mt_err *e)
{
    return mt_err_set(e,
                      "%s: the checkpoint's %s (%s) differs from this run's (%s); pass "
                      "--override-opt_param-scheduler or --use-checkpoint-opt_param-scheduler",
                      where, name, saved, mine);
}

static int sched_value(const mt_trainer *t, double mine, double saved, const char *name, const char *where,
                       double *out, mt_err *e)
{
    *out = mine;
    if (t->a.override_opt_param_scheduler) return 0;
    if (t->a.use_checkpoint_opt_param_scheduler) {
        *out = saved;
        return 0;
    }
    if (fabs(mine - saved) > 1e-12 * fmax(fabs(mine), fabs(saved))) {
        char s[32], m[32];
        snprintf(s, sizeof s, "%.17g", saved);
        snprintf(m, sizeof m, "%.17g", mine);
        return sched_mismatch(where, name, s, m, e);
    }
    return 0;
}

static int sched_count(const mt_trainer *t, int64_t mine, int64_t saved, const char *name, const char *where,
                       int64_t *out, mt_err *e)
{
    *out = mine;
    if (t->a.override_opt_param_scheduler) return 0;
    if (t->a.use_checkpoint_opt_param_scheduler) {
        *out = saved;
        return 0;
    }
    if (mine != saved) {
        char s[32], m[32];
        snprintf(s, sizeof s, "%lld", (long long)saved);
        snprintf(m, sizeof m, "%lld", (long long)mine);
        return sched_mismatch(where, name, s, m, e);
    }
    return 0;
}

static int sched_style(const mt_trainer *t, const char *mine, const char *saved, const char *name, const char *where,
                       const char **out, mt_err *e)
{
    *out = mine;
    if (t->a.override_opt_param_scheduler) return 0;
    if (t->a.use_checkpoint_opt_param_scheduler) {
        *out = saved;
        return 0;
    }
    if (strcmp(mine, saved)) return sched_mismatch(where, name, saved, mine, e);
    return 0;
}

/* A real field of the scheduler through _check_and_set. */
static int sched_real_field(const mt_trainer *t, const json_t *s, const char *key, double hi, double mine,
                            const char *name, const char *dir, double *out, mt_err *e)
{
    double saved;
    if (mt_meta_real(s, "opt_param_scheduler.", key, dir, 0, hi, &saved, e)) return -1;
    return sched_value(t, mine, saved, name, dir, out, e);
}

static int sched_count_field(const mt_trainer *t, const json_t *s, const char *key, int64_t lo, int64_t mine,
                             const char *name, const char *dir, int64_t *out, mt_err *e)
{
    int64_t saved;
    if (mt_meta_count(s, "opt_param_scheduler.", key, dir, lo, MT_META_MAX_COUNT, &saved, e)) return -1;
    return sched_count(t, mine, saved, name, dir, out, e);
}

/* The scheduler as Megatron's load_state_dict restores it: every field through _check_and_set, then
 * num_steps from the checkpoint (also with --override-opt_param-scheduler). The result is checked as a
 * schedule from the flags would be. */
static int load_schedule(mt_trainer *t, const json_t *meta, const char *dir, mt_err *e)
{
    json_t *s = json_object_get(meta, "opt_param_scheduler");
    if (!json_is_object(s)) return mt_err_set(e, "%s/meta.json: missing \"opt_param_scheduler\"", dir);
    const char *P = "opt_param_scheduler.";
    const double max = (double)MT_META_MAX_COUNT;
    const mt_sched *sc = &t->sched;
    double max_lr, min_lr, init_lr = sc->init_lr, warmup, start_wd, end_wd;
    int64_t decay, wd_steps, num_steps;
    const char *saved_style = NULL, *lr_style = NULL, *saved_wd_style = NULL, *wd_style_name = NULL;
    if (sched_real_field(t, s, "max_lr", DBL_MAX, sc->max_lr, "learning rate", dir, &max_lr, e) ||
        sched_real_field(t, s, "min_lr", DBL_MAX, sc->min_lr, "minimum learning rate", dir, &min_lr, e))
        return -1;
    /* not in Megatron's state: optional */
    if (json_object_get(s, "lr_warmup_init") &&
        sched_real_field(t, s, "lr_warmup_init", DBL_MAX, sc->init_lr, "warmup initial learning rate", dir, &init_lr, e))
        return -1;
    if (sched_real_field(t, s, "lr_warmup_steps", max, sc->warmup_steps, "warmup steps", dir, &warmup, e) ||
        sched_count_field(t, s, "lr_decay_steps", 1, sc->decay_steps, "total number of decay steps", dir, &decay, e) ||
        meta_style(s, P, "lr_decay_style", dir, parse_lr_style, &saved_style, e) ||
        sched_style(t, mt_lr_style_name(sc->style), saved_style, "learning rate decay style", dir, &lr_style, e) ||
        sched_real_field(t, s, "start_wd", DBL_MAX, sc->start_wd, "start weight decay", dir, &start_wd, e) ||
        sched_real_field(t, s, "end_wd", DBL_MAX, sc->end_wd, "end weight decay", dir, &end_wd, e) ||
        sched_count_field(t, s, "wd_incr_steps", 0, sc->wd_incr_steps, "total number of weight decay steps", dir,
                          &wd_steps, e) ||
        meta_style(s, P, "wd_incr_style", dir, parse_wd_style, &saved_wd_style, e) ||
        sched_style(t, mt_wd_style_name(sc->wd_style), saved_wd_style, "weight decay incr style", dir, &wd_style_name,
                    e) ||
        /* samples of successful iterations: never more than were consumed */
        mt_meta_count(s, P, "num_steps", dir, 0, t->consumed_train, &num_steps, e))
        return -1;
    mt_lr_style style;
    mt_wd_style wd_style;
    mt_lr_style_parse(lr_style, &style);
    mt_wd_style_parse(wd_style_name, &wd_style);
    mt_sched ns;
    if (mt_sched_init_steps(&ns, init_lr, max_lr, min_lr, warmup, decay, style, sc->wsd_decay_steps, sc->wsd_style,
                            start_wd, end_wd, wd_steps, wd_style, e))
        return mt_err_prefix(e, "%s/meta.json: opt_param_scheduler", dir);
    ns.num_steps = num_steps;
    mt_sched_step(&ns, 0);
    t->sched = ns;
    return 0;
}

/* ---- loading ---- */

/* AdamW's step and this rank's moments: of parameters lo .. hi - 1 (all unless the optimizer is sharded),
 * each tensor's part of that range read alone, from optim.safetensors or the shards of any layout. */
static int load_optimizer(mt_trainer *t, mt_model_ckpt *mc, mt_err *e)
{
    json_t *o = json_object_get(mc->meta, "optimizer");
    if (!json_is_object(o)) return mt_err_set(e, "%s/meta.json: missing \"optimizer\" (weights only, e.g. converted from Megatron-LM: load with --no-load-optim)", mc->dir);
    /* a step per successful iteration; a negative one would make the bias correction divide by 0 */
    if (mt_meta_count(o, "optimizer.", "step", mc->dir, 0, t->iteration > INT_MAX ? INT_MAX : t->iteration,
                      &t->opt.step, e))
        return -1;
    if (!mt_model_has_optim(mc))
        return mt_err_set(e, "%s: no optimizer state (optim.safetensors absent; saved with --no-save-optim?)", mc->dir);
    size_t n = mt_adamw_count(&t->opt);
    float *m = mt_xmalloc((n ? n : 1) * sizeof(float)), *v = mt_xmalloc((n ? n : 1) * sizeof(float));
    const mt_layout *l = mt_gpt_layout(t->model);
    int rc = 0;
    /* the shard's ranges (one, or the dense and the experts' with expert parallelism), one after the other */
    size_t range[2][2] = {{t->opt.lo, t->opt.hi}, {t->opt.lo2, t->opt.hi2}}, at = 0;
    for (int q = 0; q < 2 && !rc; at += range[q][1] - range[q][0], q++) {
        size_t lo = range[q][0], hi = range[q][1];
        for (int i = 0; i < l->n && !rc; i++) {
            const mt_layout_tensor *g = &l->t[i];
            size_t a = g->offset > lo ? g->offset : lo, b = g->offset + g->numel < hi ? g->offset + g->numel : hi;
            if (a >= b) continue;
            size_t d = at + (a - lo);
            rc = mt_model_read_range(mc, g, MT_CKPT_OPTIM, ".exp_avg", a - g->offset, b - a, m + d, e) ||
                         mt_model_read_range(mc, g, MT_CKPT_OPTIM, ".exp_avg_sq", a - g->offset, b - a, v + d, e)
                     ? -1
                     : 0;
        }
    }
    /* names only: a stage reads its own */
    static const char *const moments[] = {".exp_avg", ".exp_avg_sq", NULL};
    if (!rc && t->pp_size == 1 && mt_ckpt_has_optim(mc->reader)) rc = mt_ckpt_global_check_names(mc->g, MT_CKPT_OPTIM, moments, e);
    if (!rc) {
        mtk_to_device(t->k, t->opt.exp_avg, m, n * sizeof(float));
        mtk_to_device(t->k, t->opt.exp_avg_sq, v, n * sizeof(float));
    }
    free(m);
    free(v);
    return rc;
}

/* Global layer l's FP8 tensors with El experts a rank (model/fp8.h): forward (*f) and gradients (*b). */
static void fp8_widths(const mt_model_arch *arch, int l, int El, size_t *f, size_t *b)
{
    int wf, wb;
    mt_fp8_layer_tensors(mt_arch_is_moe(arch, l), El, &wf, &wb);
    *f = (size_t)wf, *b = (size_t)wb;
}

/* The FP8 state of global layer gl from a rank's meta.json "fp8" (o), into this rank's host state h (its
 * layers [first, first + nl), El experts a rank). 1 when o covers gl. */
static int fp8_layer_from(json_t *o, const mt_model_arch *arch, int gl, int L, float *h, int first, int nl, int El,
                          const char *dir, mt_err *e)
{
    json_t *st = json_object_get(o, "state");
    json_int_t f0 = json_integer_value(json_object_get(o, "first_layer")), n = json_integer_value(json_object_get(o, "layers"));
    json_t *jEl = json_object_get(o, "local_experts");
    json_int_t sEl = json_integer_value(jEl);
    if (f0 < 0 || n < 1 || f0 + n > arch->num_layers)
        return mt_err_set(e, "%s/meta.json: \"fp8\" names layers %lld to %lld, not layers of this model (1 to %d)", dir,
                          (long long)f0 + 1, (long long)(f0 + n), arch->num_layers);
    if (arch->num_experts > 0 && (!json_is_integer(jEl) || sEl < 1 || sEl > arch->num_experts))
        return mt_err_set(e, "%s/meta.json: \"fp8.local_experts\" is missing or not a count of experts (1 to %d)", dir,
                          arch->num_experts);
    if (gl < f0 || gl >= f0 + n) return 0;
    size_t wf, wb, sf = 0, sb = 0, sof = 0, sob = 0, df = 0, db = 0, dof = 0, dob = 0;
    for (int l = (int)f0; l < f0 + n; l++) {   /* the checkpoint's layers: gl's place and the totals */
        if (l == gl) sof = sf, sob = sb;
        fp8_widths(arch, l, (int)sEl, &wf, &wb);
        sf += wf, sb += wb;
    }
    for (int l = first; l < first + nl; l++) {   /* this run's */
        if (l == gl) dof = df, dob = db;
        fp8_widths(arch, l, El, &wf, &wb);
        df += wf, db += wb;
    }
    if (!json_is_array(st) || json_array_size(st) != (size_t)(L + 1) * (sf + sb))
        return mt_err_set(e, "%s/meta.json: \"fp8.state\" does not hold %lld layers' FP8 state", dir, (long long)n);
    if (mt_arch_is_moe(arch, gl) && sEl != El)
        return mt_err_set(e, "%s/meta.json: the FP8 state of MoE layer %d is for %lld experts a rank, this run has %d "
                             "(--expert-model-parallel-size): load with --finetune to start it afresh",
                          dir, gl + 1, (long long)sEl, El);
    /* source and destination offsets of the four arrays (scale_f, hist_f, scale_b, hist_b) and of the layer's
     * tensors in a row of each */
    size_t so[4] = {0, sf, (size_t)(L + 1) * sf, (size_t)(L + 1) * sf + sb};
    size_t ho[4] = {0, df, (size_t)(L + 1) * df, (size_t)(L + 1) * df + db};
    fp8_widths(arch, gl, El, &wf, &wb);
    for (int a = 0; a < 4; a++) {
        int fw = a < 2, rows = a % 2 ? L : 1;
        size_t w = fw ? wf : wb, ss = fw ? sf : sb, ds = fw ? df : db, sl = fw ? sof : sob, dl = fw ? dof : dob;
        for (int r = 0; r < rows; r++)
            for (size_t j = 0; j < w; j++) {
                json_t *v = json_array_get(st, so[a] + (size_t)r * ss + sl + j);
                if (!json_is_number(v))
                    return mt_err_set(e, "%s/meta.json: \"fp8.state\" holds a value that is not a number", dir);
                h[ho[a] + (size_t)r * ds + dl + j] = (float)json_number_value(v);
            }
    }
    return 1;
}

/* The FP8 state of this rank's layers from the checkpoint's rank directories (any stage layout); none in
 * the checkpoint (saved without --fp8-format): the fresh state stays. */
static int load_fp8(mt_trainer *t, mt_model_ckpt *mc, mt_err *e)
{
    int n = mc->g ? mc->g->n : 1, first, nl, L = t->a.fp8_amax_history_len, found = 0, rc = 0;
    int El = mt_gpt_fp8_local_experts(t->model);
    const mt_model_arch *arch = &mt_gpt_layout(t->model)->arch;
    mt_gpt_fp8_layers(t->model, &first, &nl);
    for (int i = 0; i < n; i++) {
        mt_ckpt_reader *r = mc->g ? mc->g->r[i] : mc->reader;
        found |= r && json_is_object(json_object_get(mt_ckpt_meta(r), "fp8"));
    }
    if (!found) return 0;
    float *h = mt_xmalloc(mt_gpt_fp8_state_numel(t->model) * sizeof *h);
    for (int li = 0; li < nl && !rc; li++) {
        int got = 0;
        for (int i = 0; i < n && !got && !rc; i++) {
            mt_ckpt_reader *r = mc->g ? mc->g->r[i] : mc->reader;
            json_t *o = r ? json_object_get(mt_ckpt_meta(r), "fp8") : NULL;
            if (!json_is_object(o)) continue;
            const char *fmt = json_string_value(json_object_get(o, "format"));
            json_int_t len = json_integer_value(json_object_get(o, "amax_history_len"));
            if (!fmt || strcmp(fmt, t->a.fp8_format))
                rc = mt_err_set(e, "%s: the checkpoint's FP8 state is for --fp8-format %s, this run's is %s (load with --finetune to start it afresh)",
                                mc->dir, fmt ? fmt : "(none)", t->a.fp8_format);
            else if (len != L)
                rc = mt_err_set(e, "%s: the checkpoint's FP8 amax histories hold %lld entries, this run's --fp8-amax-history-len is %d",
                                mc->dir, (long long)len, L);
            else if ((got = fp8_layer_from(o, arch, first + li, L, h, first, nl, El, mc->dir, e)) < 0) rc = -1;
        }
        if (!rc && !got) rc = mt_err_set(e, "%s: no rank directory holds the FP8 state of layer %d", mc->dir, first + li + 1);
    }
    if (!rc) mt_gpt_fp8_state_set(t->model, h);
    free(h);
    return rc;
}

/* The counters, the scheduler and (unless --no-load-optim) the optimizer. */
static int load_state(mt_trainer *t, mt_model_ckpt *mc, mt_err *e)
{
    const char *dir = mc->dir;
    json_t *meta = mc->meta;
    int release = mt_ckpt_is_release(mc->reader);
    t->iteration = 0;
    /* as Megatron: a release checkpoint (e.g. converted from Hugging Face) gives weights only; training
     * starts at iteration 0 with this run's schedule and fresh optimizer state */
    if (release) return 0;
    if (mt_meta_count(meta, "", "iteration", dir, 0, MT_META_MAX_COUNT, &t->iteration, e)) return -1;
    if (mt_meta_count(meta, "", "consumed_train_samples", dir, 0, MT_META_MAX_COUNT, &t->consumed_train, e) ||
        mt_meta_count(meta, "", "consumed_valid_samples", dir, 0, MT_META_MAX_COUNT, &t->consumed_valid, e))
        return -1;
    t->flops_so_far = 0;
    if (json_object_get(meta, "num_floating_point_operations_so_far") &&
        mt_meta_real(meta, "", "num_floating_point_operations_so_far", dir, 0, DBL_MAX, &t->flops_so_far, e))
        return -1;
    if (load_schedule(t, meta, dir, e)) return -1;
    if (!t->a.no_load_optim && load_optimizer(t, mc, e)) return -1;
    /* the dynamic scaler's state belongs to the optimizer's (Megatron: optimizer["grad_scaler"]); it is
     * restored when the checkpoint was written by an --fp16 run with a dynamic scaler */
    json_t *ls = json_object_get(meta, "loss_scaler");
    if (!t->a.no_load_optim && t->scaler.dynamic && json_is_true(json_object_get(ls, "dynamic")) &&
        mt_loss_scaler_from_json(&t->scaler, ls, dir, e))
        return -1;
    /* FP8's scales and amax histories (the modules' extra state: loaded with the weights, as TE's) */
    if (mt_gpt_fp8_state_numel(t->model) && load_fp8(t, mc, e)) return -1;
    /* --no-load-rng: nothing to restore; dropout masks derive from --seed and the iteration */
    return 0;
}

int mt_trainer_load(mt_trainer *t, FILE *log, mt_err *e)
{
    int64_t it;
    int r = mt_ckpt_latest(t->a.load, &it, e);
    if (r < 0) return -1;
    if (r == 1 && mt_hf_dir_is(t->a.load))
        return mt_err_set(e, "%s: a Hugging Face model directory, not a checkpoint: convert it first with "
                             "mt-ckpt-convert --from hf --in %s --save DIR, then --load DIR --finetune",
                          t->a.load, t->a.load);
    if (r == 1) {
        if (t->a.exit_on_missing_checkpoint)
            return mt_err_set(e, "%s: no %s: no checkpoint to load (--exit-on-missing-checkpoint)", t->a.load,
                              MT_CKPT_TRACKER);
        return 1;
    }
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    mt_model_ckpt mc;
    mt_model_open_opts o = {.iteration = MT_CKPT_LATEST, .expect = &t->a};
    if (mt_model_open(&mc, t->a.load, &o, e)) return -1;
    if (log) fprintf(log, "loading checkpoint from %s at iteration %lld\n", t->a.load, (long long)mt_ckpt_iteration(mc.reader));
    int rc = mt_model_load_weights(&mc, t->k, t->model, e);
    if (!rc && !t->a.finetune) rc = load_state(t, &mc, e);
    if (!rc && log)
        fprintf(log, "  successfully loaded checkpoint from %s [ t %d/%d, p %d/%d ] at iteration %lld\n", t->a.load,
                t->tp_rank + 1, t->tp_size, t->pp_rank + 1, t->pp_size, (long long)t->iteration);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    if (!rc)
        mt_ckpt_stats_load(t, t->iteration, mt_model_bytes_read(&mc),
                           (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec));
    mt_model_close(&mc);
    if (!rc) t->last_saved = t->iteration;
    return rc;
}
