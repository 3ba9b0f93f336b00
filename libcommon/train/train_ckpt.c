/* train_ckpt.c: saving and loading a run's checkpoint state (see train_ckpt.h). */
#include "train/train_ckpt.h"

#include <float.h>
#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/checkpoint.h"
#include "ckpt/dist_optim.h"
#include "ckpt/meta.h"
#include "ckpt/open_model.h"
#include "train/dist_ckpt.h"

/* ---- saving ---- */

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

static json_t *meta_json(const mt_trainer *t, int with_optim, int shards)
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
        if (shards) json_object_set_new(o, "distributed", mt_dist_ckpt_meta(t));
        json_object_set_new(meta, "optimizer", o);
    }
    if (!t->a.no_save_rng)
        json_object_set_new(meta, "rng_state",
                            json_pack("{s:I,s:s}", "seed", (json_int_t)t->a.seed, "dropout",
                                      "counter-based: masks derive from seed, iteration and micro-batch"));
    json_object_set_new(meta, "loss_scaler", mt_loss_scaler_to_json(&t->scaler));
    return meta;
}

/* What a save writes: with_optim, the moments; shards, as the distributed optimizer's shard files of every
 * data-parallel rank (else whole, in optim.safetensors); m, v, the whole moments on the device (the
 * optimizer's own unless they were gathered from its shards). */
typedef struct save_plan {
    int with_optim, shards;
    const float *p, *m, *v;
} save_plan;

static int save_rank0(mt_trainer *t, FILE *log, const save_plan *sp, mt_err *e);

/* The host copy of this rank's parameters (sp->p) and, with full, its moments: 1 or 3 flat buffers. */
static float *host_state(mt_trainer *t, int full, const save_plan *sp)
{
    size_t np = mt_gpt_num_params(t->model);
    float *host = mt_xmalloc(np * sizeof(float) * (full ? 3 : 1));
    mtk_to_host(t->k, host, sp->p, np * sizeof(float));
    if (full) {
        mtk_to_host(t->k, host + np, sp->m, np * sizeof(float));
        mtk_to_host(t->k, host + 2 * np, sp->v, np * sizeof(float));
    }
    return host;
}

/* With tensor or pipeline parallelism the distributed optimizer's moments are all-gathered over the
 * data-parallel group (as its parameters are after an update), so that each rank directory holds whole
 * moments in optim.safetensors; *m, *v are device buffers the caller frees. */
static int gather_moments(mt_trainer *t, float **m, float **v, mt_err *e)
{
    size_t np = mt_gpt_num_params(t->model), lo = t->opt.lo, n = t->opt.hi - t->opt.lo;
    *m = mtk_alloc(t->k, np * sizeof(float), e);
    *v = *m ? mtk_alloc(t->k, np * sizeof(float), e) : NULL;
    if (!*v) return -1;
    mtk_copy(t->k, *m + lo, t->opt.exp_avg, n * sizeof(float));
    mtk_copy(t->k, *v + lo, t->opt.exp_avg_sq, n * sizeof(float));
    if (mt_grad_all_gather(&t->gs, *m, e) || mt_grad_all_gather(&t->gs, *v, e))
        return mt_err_prefix(e, "saving iteration %lld: the optimizer's shards", (long long)t->iteration);
    return 0;
}

/* Once the optimizer owns the fp32 master of its shard (mt_trainer_own_master), the whole master of this
 * rank's part is all-gathered over the data-parallel group for the save into *p, a device buffer the
 * caller frees: the save's transient 4 bytes per parameter of the part. */
static int gather_master(mt_trainer *t, float **p, mt_err *e)
{
    size_t np = mt_gpt_num_params(t->model);
    if (!(*p = mtk_alloc(t->k, np * sizeof(float), e))) return -1;
    mtk_copy(t->k, *p + t->opt.lo, t->opt.main, (t->opt.hi - t->opt.lo) * sizeof(float));
    if (mt_grad_all_gather(&t->gs, *p, e))
        return mt_err_prefix(e, "saving iteration %lld: the fp32 master's shards", (long long)t->iteration);
    return 0;
}

int mt_trainer_save(mt_trainer *t, FILE *log, mt_err *e)
{
    /* the distributed optimizer's shards come from every data-parallel rank (dist_ckpt.h); otherwise the
     * ranks hold the same state and the first writes it; with tensor or pipeline parallelism the first
     * data-parallel rank of every (tensor rank, stage) hands its part to rank 0 of the job, which writes
     * every mp_rank_XX (mp_rank_XX_YYY) */
    save_plan sp = {.with_optim = !t->a.no_save_optim, .p = mt_gpt_params(t->model), .m = t->opt.exp_avg,
                    .v = t->opt.exp_avg_sq};
    sp.shards = sp.with_optim && t->a.use_distributed_optimizer;
    float *gm = NULL, *gv = NULL, *gp = NULL;
    int rc = t->opt.main ? gather_master(t, &gp, e) : 0;
    if (gp) sp.p = gp;
    int split = t->tp_size > 1 || t->pp_size > 1;
    if (!rc && sp.shards && split) {
        rc = gather_moments(t, &gm, &gv, e);
        sp.shards = 0, sp.m = gm, sp.v = gv;
    }
    if (rc) {
    } else if (t->dp_rank == 0 && (t->tp_rank > 0 || t->pp_rank > 0)) {
        size_t n = mt_gpt_num_params(t->model) * (sp.with_optim ? 3 : 1);
        float *host = host_state(t, sp.with_optim, &sp);
        rc = mt_send(t->world, host, n, MT_C_F32, 0, e) ? mt_err_prefix(e, "saving iteration %lld", (long long)t->iteration) : 0;
        free(host);
    } else {
        rc = t->dp_rank == 0 ? save_rank0(t, log, &sp, e) : sp.shards ? mt_dist_ckpt_save_peer(t, e) : 0;
        if (t->dp_rank == 0 && sp.shards) rc = mt_dist_ckpt_save_done(t, rc, e);
    }
    if (gp) mtk_free(t->k, gp);
    if (gm) mtk_free(t->k, gm);
    if (gv) mtk_free(t->k, gv);
    if (!rc) t->last_saved = t->iteration;
    return rc;
}

/* One tensor rank's directory: its tensors (host: its parameters, then with full its two moments, in
 * its layout l) named as Megatron names them; every value finite. */
static int rank_dir(mt_trainer *t, const mt_layout *l, const float *host, int full, mt_ckpt_rank *out, void **names_out,
                    mt_err *e)
{
    int nt = l->n;
    size_t np = l->numel;
    for (int part = 0; part < (full ? 3 : 1); part++) {
        /* never a checkpoint of NaN/inf weights or moments: resuming from it could only go on producing NaN */
        ptrdiff_t bad = first_nonfinite(host + (size_t)part * np, np);
        if (bad < 0) continue;
        const char *name = "?";
        for (int i = 0; i < nt; i++)
            if ((size_t)bad >= l->t[i].offset && (size_t)bad < l->t[i].offset + l->t[i].numel) name = l->t[i].name;
        return mt_err_set(e, "%s: not saving iteration %lld: %s%s holds a non-finite value", t->a.save,
                          (long long)t->iteration, name, part == 0 ? "" : part == 1 ? ".exp_avg" : ".exp_avg_sq");
    }
    mt_ckpt_tensor *mt = mt_xcalloc((size_t)nt, sizeof *mt), *ot = mt_xcalloc((size_t)nt * 2, sizeof *ot);
    char (*names)[160] = mt_xcalloc((size_t)nt * 2, sizeof *names);
    for (int i = 0; i < nt; i++) {
        const mt_layout_tensor *g = &l->t[i];
        mt_ckpt_tensor c = {.name = g->name, .ndim = g->ndim, .shape = {g->local_shape[0], g->local_shape[1]},
                            .data = host + g->offset};
        mt[i] = c;
        if (full) {
            snprintf(names[2 * i], sizeof names[0], "%s.exp_avg", g->name);
            snprintf(names[2 * i + 1], sizeof names[0], "%s.exp_avg_sq", g->name);
            c.name = names[2 * i], c.data = host + np + g->offset;
            ot[2 * i] = c;
            c.name = names[2 * i + 1], c.data = host + 2 * np + g->offset;
            ot[2 * i + 1] = c;
        }
    }
    out->model = mt, out->n_model = nt, out->optim = ot, out->n_optim = full ? 2 * nt : 0;
    *names_out = names;   /* the moments' names: the caller frees them after the save */
    return 0;
}

/* The job rank of (tensor rank r, data-parallel rank 0, stage s): Megatron's order, tensor rank fastest. */
static int model_rank(const mt_trainer *t, int r, int s) { return r + t->tp_size * t->dp_size * s; }

static int save_rank0(mt_trainer *t, FILE *log, const save_plan *sp, mt_err *e)
{
    int tp = t->tp_size, pp = t->pp_size, n_ranks = tp * pp;
    int with_optim = sp->with_optim, shards = sp->shards;
    int full_optim = with_optim && !shards;   /* optim.safetensors: the whole moments */
    /* every (tensor rank, stage)'s state: this rank's, the others' received from them, each in its layout;
     * index s * tp + r as the directories are numbered */
    mt_layout *lay = mt_xcalloc((size_t)n_ranks, sizeof *lay);
    float **host = mt_xcalloc((size_t)n_ranks, sizeof *host);
    mt_ckpt_rank *ranks = mt_xcalloc((size_t)n_ranks, sizeof *ranks);
    char (*dirs)[32] = mt_xcalloc((size_t)n_ranks, sizeof *dirs);
    void **names = mt_xcalloc((size_t)n_ranks, sizeof *names);
    json_t *meta = meta_json(t, with_optim, shards);
    mt_model_arch arch = mt_gpt_layout(t->model)->arch;
    int rc = 0;
    for (int i = 0; i < n_ranks && !rc; i++) {
        int r = i % tp, s = i / tp;
        mt_layout_part part = {r, tp, s, pp, t->vp};
        rc = mt_layout_build(&arch, &part, &lay[i], e);
        if (rc) break;
        size_t n = lay[i].numel * (full_optim ? 3 : 1);
        if (i == 0) host[i] = host_state(t, full_optim, sp);
        else {
            host[i] = mt_xmalloc(n * sizeof(float));
            rc = mt_recv(t->world, host[i], n, MT_C_F32, model_rank(t, r, s), e);
        }
    }
    for (int i = 0; i < n_ranks && !rc; i++) {
        mt_ckpt_rank_name(dirs[i], sizeof dirs[i], i % tp, i / tp, pp);
        rc = rank_dir(t, &lay[i], host[i], full_optim, &ranks[i], &names[i], e);
        ranks[i].name = dirs[i];
        ranks[i].meta = meta;
    }
    if (!rc) {
        if (log) fprintf(log, "saving checkpoint at iteration %7lld to %s\n", (long long)t->iteration, t->a.save);
        rc = mt_ckpt_save_ranks_ex(t->a.save, t->iteration, ranks, n_ranks, shards ? mt_dist_ckpt_fill : NULL, t, e);
        if (!rc && log)
            fprintf(log, "  successfully saved checkpoint at iteration %7lld to %s\n", (long long)t->iteration,
                    t->a.save);
    }
    json_decref(meta);
    for (int i = 0; i < n_ranks; i++) {
        free((void *)ranks[i].model);
        free((void *)ranks[i].optim);
        free(names[i]);
        free(host[i]);
        mt_layout_free(&lay[i]);
    }
    free(ranks), free(host), free(lay), free(dirs), free(names);
    return rc;
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

static int load_optimizer(mt_trainer *t, mt_model_ckpt *mc, mt_err *e)
{
    json_t *o = json_object_get(mc->meta, "optimizer");
    if (!json_is_object(o)) return mt_err_set(e, "%s/meta.json: missing \"optimizer\"", mc->dir);
    /* a step per successful iteration; a negative one would make the bias correction divide by 0 */
    if (mt_meta_count(o, "optimizer.", "step", mc->dir, 0, t->iteration > INT_MAX ? INT_MAX : t->iteration,
                      &t->opt.step, e))
        return -1;
    size_t np = mt_gpt_num_params(t->model);
    int nt = mt_gpt_num_tensors(t->model), rc = 0;
    float *m = mt_xmalloc(np * sizeof(float)), *v = mt_xmalloc(np * sizeof(float));
    /* moments saved as distributed-optimizer shards (any data-parallel size): the whole of them first */
    json_t *dist = json_object_get(o, "distributed");
    if (dist && !mt_ckpt_has_optim(mc->reader) && t->tp_size == 1 && t->pp_size == 1) {   /* the same flat layout */
        rc = mt_dist_optim_read(mc->dir, dist, np, m, v, e);
        nt = 0;
    }
    const mt_layout *l = mt_gpt_layout(t->model);
    for (int i = 0; i < nt && !rc; i++) {   /* this rank's slices of the whole moments */
        const mt_layout_tensor *g = &l->t[i];
        rc = mt_model_read_part(mc, g, ".exp_avg", m + g->offset, e) || mt_model_read_part(mc, g, ".exp_avg_sq", v + g->offset, e)
                 ? -1
                 : 0;
    }
    if (!rc && nt && t->pp_size == 1) rc = mt_model_check_all_read_optim(mc, e);   /* a stage reads its own */
    if (!rc) {   /* this rank's part (all unless the optimizer is sharded) */
        mtk_to_device(t->k, t->opt.exp_avg, m + t->opt.lo, (t->opt.hi - t->opt.lo) * sizeof(float));
        mtk_to_device(t->k, t->opt.exp_avg_sq, v + t->opt.lo, (t->opt.hi - t->opt.lo) * sizeof(float));
    }
    free(m);
    free(v);
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
    mt_model_ckpt mc;
    mt_model_open_opts o = {.iteration = MT_CKPT_LATEST, .expect = &t->a};
    if (mt_model_open(&mc, t->a.load, &o, e)) return -1;
    if (log) fprintf(log, "loading checkpoint from %s at iteration %lld\n", t->a.load, (long long)mt_ckpt_iteration(mc.reader));
    int rc = mt_model_load_weights(&mc, t->k, t->model, e);
    if (!rc && !t->a.finetune) rc = load_state(t, &mc, e);
    if (!rc && log)
        fprintf(log, "  successfully loaded checkpoint from %s [ t %d/%d, p %d/%d ] at iteration %lld\n", t->a.load,
                t->tp_rank + 1, t->tp_size, t->pp_rank + 1, t->pp_size, (long long)t->iteration);
    mt_model_close(&mc);
    if (!rc) t->last_saved = t->iteration;
    return rc;
}
