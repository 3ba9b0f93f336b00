/* schedule.c: Megatron's learning-rate and weight-decay schedule (see schedule.h). Every expression keeps
 * Megatron's operand order so that the doubles come out identical. */
#include "train/schedule.h"

#include <math.h>
#include <stdbool.h>
#include <string.h>

mt_sched_args mt_sched_args_default(void)
{
    mt_sched_args a;
    memset(&a, 0, sizeof a);
    a.lr = NAN;
    a.min_lr = 0.0;
    a.lr_warmup_init = 0.0;
    a.lr_decay_style = MT_LR_LINEAR;
    a.lr_wsd_decay_style = MT_WSD_EXPONENTIAL;
    a.train_iters = -1;
    a.train_samples = -1;
    a.global_batch_size = -1;
    a.lr_decay_iters = -1;
    a.lr_decay_samples = -1;
    a.lr_warmup_fraction = NAN;
    a.lr_warmup_iters = 0;
    a.lr_warmup_samples = 0;
    a.lr_wsd_decay_iters = -1;
    a.lr_wsd_decay_samples = -1;
    a.weight_decay = 0.01;
    a.start_weight_decay = NAN;
    a.end_weight_decay = NAN;
    a.weight_decay_incr_style = MT_WD_CONSTANT;
    return a;
}

int mt_sched_init_steps(mt_sched *s, double init_lr, double max_lr, double min_lr, double warmup_steps,
                        int64_t decay_steps, mt_lr_style style, int64_t wsd_decay_steps, mt_wsd_style wsd_style,
                        double start_wd, double end_wd, int64_t wd_incr_steps, mt_wd_style wd_style, mt_err *e)
{
    memset(s, 0, sizeof *s);
    if (isnan(max_lr)) return mt_err_set(e, "the learning rate (--lr) is required");
    if (!(min_lr >= 0.0)) return mt_err_set(e, "--min-lr %g is negative", min_lr);
    if (!(max_lr >= min_lr)) return mt_err_set(e, "--lr %g is below --min-lr %g", max_lr, min_lr);
    if (!(init_lr <= max_lr)) return mt_err_set(e, "--lr-warmup-init %g is above --lr %g", init_lr, max_lr);
    if (decay_steps <= 0) return mt_err_set(e, "the LR decay length (%lld samples) must be positive", (long long)decay_steps);
    if (!(warmup_steps < (double)decay_steps))
        return mt_err_set(e, "the LR warmup (%.17g samples) must be shorter than the decay (%lld samples)", warmup_steps,
                          (long long)decay_steps);
    if (style == MT_LR_WSD && wsd_decay_steps <= 0)
        return mt_err_set(e, "--lr-decay-style WSD needs a positive --lr-wsd-decay-iters or --lr-wsd-decay-samples");
    if (!(start_wd >= 0.0)) return mt_err_set(e, "the start weight decay %g is negative", start_wd);
    if (!(end_wd >= start_wd)) return mt_err_set(e, "the end weight decay %g is below the start %g", end_wd, start_wd);
    if (wd_style == MT_WD_CONSTANT && start_wd != end_wd)
        return mt_err_set(e, "constant weight decay needs equal start and end (%g, %g)", start_wd, end_wd);
    if (wd_style != MT_WD_CONSTANT && wd_incr_steps <= 0)
        return mt_err_set(e, "the weight-decay increment length (%lld samples) must be positive", (long long)wd_incr_steps);
    s->init_lr = init_lr;
    s->max_lr = max_lr;
    s->min_lr = min_lr;
    s->warmup_steps = warmup_steps;
    s->decay_steps = decay_steps;
    s->style = style;
    s->wsd_decay_steps = style == MT_LR_WSD ? wsd_decay_steps : -1;
    s->wsd_style = wsd_style;
    s->start_wd = start_wd;
    s->end_wd = end_wd;
    s->wd_incr_steps = wd_incr_steps;
    s->wd_style = wd_style;
    s->num_steps = 0;
    mt_sched_step(s, 0);
    return 0;
}

int mt_sched_init(mt_sched *s, const mt_sched_args *a, mt_err *e)
{
    bool by_iters = a->train_iters > 0, by_samples = a->train_samples > 0;
    bool has_fraction = !isnan(a->lr_warmup_fraction);
    memset(s, 0, sizeof *s);
    if (by_iters && by_samples) return mt_err_set(e, "give --train-iters or --train-samples, not both");
    if (!by_iters && !by_samples) return mt_err_set(e, "either --train-iters or --train-samples must be given");
    if (a->global_batch_size <= 0) return mt_err_set(e, "--global-batch-size must be positive");

    double start_wd = a->start_weight_decay, end_wd = a->end_weight_decay;
    if (a->weight_decay_incr_style == MT_WD_CONSTANT) {
        if (!isnan(start_wd) || !isnan(end_wd))
            return mt_err_set(e, "--start-weight-decay/--end-weight-decay need a --weight-decay-incr-style other than constant");
        start_wd = end_wd = a->weight_decay;
    } else if (isnan(start_wd) || isnan(end_wd)) {
        return mt_err_set(e, "--weight-decay-incr-style %s needs --start-weight-decay and --end-weight-decay",
                          mt_wd_style_name(a->weight_decay_incr_style));
    }

    int64_t gbs = a->global_batch_size, decay, wd_steps, wsd = -1;
    double warmup;
    if (by_iters) {
        if (a->lr_decay_samples >= 0) return mt_err_set(e, "--lr-decay-samples needs sample-based training (--train-samples)");
        if (a->lr_warmup_samples != 0) return mt_err_set(e, "--lr-warmup-samples needs sample-based training (--train-samples)");
        if (has_fraction && a->lr_warmup_iters != 0)
            return mt_err_set(e, "give only one of --lr-warmup-fraction and --lr-warmup-iters");
        int64_t decay_iters = a->lr_decay_iters >= 0 ? a->lr_decay_iters : a->train_iters;
        /* counts in samples stay below 2^53 (exact in doubles; no int64 overflow in the products) */
        const int64_t most = ((int64_t)1 << 53) / gbs;
        if (a->train_iters > most || decay_iters > most || a->lr_warmup_iters > most || a->lr_wsd_decay_iters > most)
            return mt_err_set(e, "iteration counts times --global-batch-size %lld exceed 2^53 samples", (long long)gbs);
        decay = decay_iters * gbs;
        wd_steps = a->train_iters * gbs;
        if (a->lr_wsd_decay_iters >= 0) wsd = a->lr_wsd_decay_iters * gbs;
        warmup = has_fraction ? a->lr_warmup_fraction * (double)decay : (double)(a->lr_warmup_iters * gbs);
    } else {
        if (a->lr_decay_iters >= 0) return mt_err_set(e, "--lr-decay-iters needs iteration-based training (--train-iters)");
        if (a->lr_warmup_iters != 0) return mt_err_set(e, "--lr-warmup-iters needs iteration-based training (--train-iters)");
        if (has_fraction && a->lr_warmup_samples != 0)
            return mt_err_set(e, "give only one of --lr-warmup-fraction and --lr-warmup-samples");
        decay = a->lr_decay_samples >= 0 ? a->lr_decay_samples : a->train_samples;
        wd_steps = a->train_samples;
        wsd = a->lr_wsd_decay_samples;
        warmup = has_fraction ? a->lr_warmup_fraction * (double)decay : (double)a->lr_warmup_samples;
    }
    return mt_sched_init_steps(s, a->lr_warmup_init, a->lr, a->min_lr, warmup, decay, a->lr_decay_style, wsd,
                               a->lr_wsd_decay_style, start_wd, end_wd, wd_steps, a->weight_decay_incr_style, e);
}

double mt_sched_lr_at(const mt_sched *s, int64_t num_steps)
{
    double n = (double)num_steps;
    /* Linear warmup from init_lr. */
    if (s->warmup_steps > 0 && n <= s->warmup_steps) return s->init_lr + (s->max_lr - s->init_lr) * n / s->warmup_steps;
    if (s->style == MT_LR_CONSTANT) return s->max_lr;
    if (num_steps > s->decay_steps) return s->min_lr;
    if (s->style == MT_LR_INVERSE_SQRT) {
        double w = s->warmup_steps > 1 ? s->warmup_steps : 1;
        double k = num_steps > 1 ? n : 1;
        double lr = s->max_lr * pow(w, 0.5) / pow(k, 0.5);
        return lr > s->min_lr ? lr : s->min_lr;
    }
    double ratio = (n - s->warmup_steps) / ((double)s->decay_steps - s->warmup_steps);
    double delta = s->max_lr - s->min_lr, c = 1.0;
    switch (s->style) {
    case MT_LR_LINEAR: c = 1.0 - ratio; break;
    case MT_LR_COSINE: c = 0.5 * (cos(M_PI * ratio) + 1.0); break;
    case MT_LR_WSD: {
        int64_t anneal_start = s->decay_steps - s->wsd_decay_steps;
        if (num_steps <= anneal_start) {
            c = 1.0;
        } else {
            double r = (double)(num_steps - anneal_start) / (double)s->wsd_decay_steps;
            switch (s->wsd_style) {
            case MT_WSD_LINEAR: c = 1.0 - r; break;
            case MT_WSD_COSINE: c = 0.5 * (cos(M_PI * r) + 1.0); break;
            case MT_WSD_EXPONENTIAL: c = 2.0 * pow(0.5, r) - 1.0; break;
            case MT_WSD_MINUS_SQRT: c = 1.0 - sqrt(r); break;
            }
        }
        break;
    }
    default: break;
    }
    return s->min_lr + c * delta;
}

double mt_sched_wd_at(const mt_sched *s, int64_t num_steps)
{
    if (num_steps > s->wd_incr_steps) return s->end_wd;
    if (s->wd_style == MT_WD_CONSTANT) return s->end_wd;
    double ratio = (double)num_steps / (double)s->wd_incr_steps;
    double delta = s->end_wd - s->start_wd;
    double c = s->wd_style == MT_WD_LINEAR ? ratio : 0.5 * (cos(M_PI * (1 - ratio)) + 1.0);
    return s->start_wd + c * delta;
}

void mt_sched_step(mt_sched *s, int64_t increment)
{
    s->num_steps += increment;
    s->lr = mt_sched_lr_at(s, s->num_steps);
    s->wd = mt_sched_wd_at(s, s->num_steps);
}

static const char *const LR_NAMES[] = {"constant", "linear", "cosine", "inverse-square-root", "WSD"};
static const char *const WSD_NAMES[] = {"exponential", "linear", "cosine", "minus_sqrt"};
static const char *const WD_NAMES[] = {"constant", "linear", "cosine"};

static int find_name(const char *const *names, int n, const char *name)
{
    for (int i = 0; i < n; i++)
        if (!strcmp(names[i], name)) return i;
    return -1;
}

int mt_lr_style_parse(const char *name, mt_lr_style *out)
{
    int i = find_name(LR_NAMES, 5, name);
    if (i < 0) return -1;
    *out = (mt_lr_style)i;
    return 0;
}
int mt_wsd_style_parse(const char *name, mt_wsd_style *out)
{
    int i = find_name(WSD_NAMES, 4, name);
    if (i < 0) return -1;
    *out = (mt_wsd_style)i;
    return 0;
}
int mt_wd_style_parse(const char *name, mt_wd_style *out)
{
    int i = find_name(WD_NAMES, 3, name);
    if (i < 0) return -1;
    *out = (mt_wd_style)i;
    return 0;
}
const char *mt_lr_style_name(mt_lr_style s) { return (unsigned)s < 5 ? LR_NAMES[s] : "?"; }
const char *mt_wsd_style_name(mt_wsd_style s) { return (unsigned)s < 4 ? WSD_NAMES[s] : "?"; }
const char *mt_wd_style_name(mt_wd_style s) { return (unsigned)s < 3 ? WD_NAMES[s] : "?"; }
