/* schedule.h: Megatron's learning-rate and weight-decay schedule (OptimizerParamScheduler).
 *
 * The schedule counts steps in samples: an iteration-based run converts its iteration counts with the
 * global batch size (decay = lr_decay_iters*gbs, warmup = lr_warmup_iters*gbs or lr_warmup_fraction*decay,
 * weight-decay steps = train_iters*gbs), a sample-based run uses the sample counts as they are. The
 * trainer calls mt_sched_step(s, gbs) after every successful (not skipped) iteration; s->lr and s->wd
 * then hold the values the next optimizer step uses, which is also the LR Megatron prints.
 * Arithmetic follows Megatron's expressions operation for operation, so results are bit-identical to
 * it in double precision (warmup steps may be fractional with --lr-warmup-fraction, as in Megatron).
 */
#ifndef MT_TRAIN_SCHEDULE_H
#define MT_TRAIN_SCHEDULE_H

#include <stdint.h>

#include "util/err.h"

typedef enum { MT_LR_CONSTANT, MT_LR_LINEAR, MT_LR_COSINE, MT_LR_INVERSE_SQRT, MT_LR_WSD } mt_lr_style;
typedef enum { MT_WSD_EXPONENTIAL, MT_WSD_LINEAR, MT_WSD_COSINE, MT_WSD_MINUS_SQRT } mt_wsd_style;
typedef enum { MT_WD_CONSTANT, MT_WD_LINEAR, MT_WD_COSINE } mt_wd_style;

/* The command-line options that shape the schedule, named after Megatron's. Use mt_sched_args_default()
 * and then set what was given. "Unset" is -1 for counts and NAN for the optional doubles. */
typedef struct mt_sched_args {
    double lr;                   /* --lr (required, > 0 not enforced: Megatron only asserts ordering) */
    double min_lr;               /* --min-lr, 0.0 */
    double lr_warmup_init;       /* --lr-warmup-init, 0.0 */
    mt_lr_style lr_decay_style;  /* --lr-decay-style, linear */
    mt_wsd_style lr_wsd_decay_style; /* --lr-wsd-decay-style, exponential */
    int64_t train_iters;         /* --train-iters, or -1 */
    int64_t train_samples;       /* --train-samples, or -1 (exactly one of the two) */
    int64_t global_batch_size;   /* --global-batch-size */
    int64_t lr_decay_iters;      /* --lr-decay-iters, -1: train_iters */
    int64_t lr_decay_samples;    /* --lr-decay-samples, -1: train_samples */
    double lr_warmup_fraction;   /* --lr-warmup-fraction, NAN: unset */
    int64_t lr_warmup_iters;     /* --lr-warmup-iters, 0 */
    int64_t lr_warmup_samples;   /* --lr-warmup-samples, 0 */
    int64_t lr_wsd_decay_iters;  /* --lr-wsd-decay-iters, -1 (needed by WSD with --train-iters) */
    int64_t lr_wsd_decay_samples; /* --lr-wsd-decay-samples, -1 (needed by WSD with --train-samples) */
    double weight_decay;         /* --weight-decay, 0.01 */
    double start_weight_decay;   /* --start-weight-decay, NAN (required unless style constant) */
    double end_weight_decay;     /* --end-weight-decay, NAN (required unless style constant) */
    mt_wd_style weight_decay_incr_style; /* --weight-decay-incr-style, constant */
} mt_sched_args;

/* The scheduler's state: the values Megatron's OptimizerParamScheduler holds (and checkpoints as
 * opt_param_scheduler: max_lr, min_lr, lr_warmup_steps, lr_decay_steps, lr_decay_style, num_steps,
 * start_wd, end_wd, wd_incr_steps, wd_incr_style). */
typedef struct mt_sched {
    double init_lr, max_lr, min_lr;
    double warmup_steps;      /* in samples; fractional with --lr-warmup-fraction */
    int64_t decay_steps;      /* in samples, > warmup_steps */
    int64_t wsd_decay_steps;  /* WSD annealing length in samples (-1 when not WSD) */
    mt_lr_style style;
    mt_wsd_style wsd_style;
    double start_wd, end_wd;
    int64_t wd_incr_steps;
    mt_wd_style wd_style;
    int64_t num_steps;        /* samples stepped so far */
    double lr, wd;            /* lr and wd at num_steps (set by init and every step) */
} mt_sched;

mt_sched_args mt_sched_args_default(void);

/* Builds the schedule from the options as Megatron's argument checks and get_optimizer_param_scheduler
 * do, then steps 0 (num_steps = 0, lr and wd set). Returns -1 with a message on inconsistent options
 * (both or neither of train iters/samples, iteration options in a sample run or the other way round,
 * two warmup options, warmup >= decay, min_lr > lr, init > lr, WSD without its decay length, ...). */
int mt_sched_init(mt_sched *s, const mt_sched_args *a, mt_err *e);

/* Builds directly from values in samples (no conversion), e.g. from a checkpoint. Same checks. */
int mt_sched_init_steps(mt_sched *s, double init_lr, double max_lr, double min_lr, double warmup_steps,
                        int64_t decay_steps, mt_lr_style style, int64_t wsd_decay_steps, mt_wsd_style wsd_style,
                        double start_wd, double end_wd, int64_t wd_incr_steps, mt_wd_style wd_style, mt_err *e);

/* num_steps += increment (samples of the iteration, i.e. the global batch size); updates lr and wd. */
void mt_sched_step(mt_sched *s, int64_t increment);

/* The learning rate / weight decay after num_steps samples (pure; s->num_steps is not used). */
double mt_sched_lr_at(const mt_sched *s, int64_t num_steps);
double mt_sched_wd_at(const mt_sched *s, int64_t num_steps);

/* Option spellings <-> values: "constant|linear|cosine|inverse-square-root|WSD",
 * "exponential|linear|cosine|minus_sqrt", "constant|linear|cosine". Parsers return -1 when unknown. */
int mt_lr_style_parse(const char *name, mt_lr_style *out);
int mt_wsd_style_parse(const char *name, mt_wsd_style *out);
int mt_wd_style_parse(const char *name, mt_wd_style *out);
const char *mt_lr_style_name(mt_lr_style s);
const char *mt_wsd_style_name(mt_wsd_style s);
const char *mt_wd_style_name(mt_wd_style s);

#endif
