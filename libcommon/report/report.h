/* report.h: Megatron's training console output and mt's JSON-lines metrics.
 *
 * The iteration log line (training_log) and the validation block (evaluate_and_print_results) are
 * formatted character for character as Megatron prints them, in one of three versions' styles:
 *   MT_LOG_V2    v2 (2021): no timestamp, "learning rate: {:.3E}", "num zeros: {:.1f}", loss keys
 *                printed only when their average is > 0; final evaluation prefixes
 *                "the end of training for val data" / "... for test data".
 *   MT_LOG_CORE  Megatron-Core training (v0.13, 2025): " [YYYY-MM-DD HH:MM:SS]" first, "learning rate:
 *                {:.6E}", "num zeros: {}" (a float count, e.g. "12.0"), " skipped samples: " when > 0,
 *                losses printed when >= 0; final prefixes "iteration N on validation set" / "... test set".
 *   MT_LOG_HEAD  as CORE with microseconds in the timestamp (" [YYYY-MM-DD HH:MM:SS.ffffff]", 2026).
 * mt appends its own fields after Megatron's last one, in the same " name: value |" form:
 * " tokens per second: {:.1f} |" and " tokens per second per GPU: {:.1f} |".
 * Numbers print as Python's format() would (NaN without a sign, "inf"/"INF").
 */
#ifndef MT_REPORT_REPORT_H
#define MT_REPORT_REPORT_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include <jansson.h>

#include "util/err.h"

typedef enum { MT_LOG_V2, MT_LOG_CORE, MT_LOG_HEAD } mt_log_style;

#define MT_LOG_MAX_LOSSES 8

typedef struct mt_loss_value {
    const char *key; /* e.g. "lm loss" */
    double value;
} mt_loss_value;

/* One log interval's values. Fields with a has_ flag are printed only when it is set. */
typedef struct mt_iter_log {
    int64_t time_sec;   /* wall clock for the timestamp (local time), see mt_log_now */
    int32_t time_usec;
    int64_t iteration, train_iters;
    int64_t consumed_samples;
    int64_t skipped_samples;           /* core styles print it when > 0 */
    double elapsed_ms;                 /* interval time / (advanced + skipped iterations), in ms */
    bool has_tflops;                   /* --log-throughput */
    double tflops_per_gpu;
    bool has_lr;
    double lr;
    int64_t global_batch_size;
    int n_losses;                      /* averages over the interval's advanced iterations */
    mt_loss_value losses[MT_LOG_MAX_LOSSES];
    double loss_scale;
    bool has_grad_norm;                /* when gradients are clipped (--clip-grad > 0) */
    double grad_norm;
    bool has_num_zeros;                /* --log-num-zeros-in-grad */
    int64_t num_zeros;
    bool has_params_norm;              /* --log-params-norm */
    double params_norm;
    int64_t skipped_iters, nan_iters;  /* in the interval */
    bool has_tokens_per_sec;           /* mt: all ranks together */
    double tokens_per_sec;
    bool has_tokens_per_sec_per_gpu;
    double tokens_per_sec_per_gpu;
} mt_iter_log;

/* The current wall clock into l->time_sec / time_usec. */
void mt_log_now(mt_iter_log *l);

/* The iteration line without a trailing newline (malloc'd). */
char *mt_format_iter_line(const mt_iter_log *l, mt_log_style style);
/* Prints it with a newline and flushes. Returns -1 on a write error. */
int mt_print_iter_line(FILE *f, const mt_iter_log *l, mt_log_style style);

/* Loss bookkeeping between log lines, as Megatron's total_loss_dict: losses summed in float32 over
 * advanced (not skipped) iterations; a skipped iteration whose losses sum to inf/NaN counts as a nan
 * iteration. A key appears once an advanced iteration reported it (so a run whose first iterations are
 * skipped prints no loss until one advances) and stays, with 0 over intervals where nothing advanced.
 * Keys are kept as pointers (use string literals or keep them alive). */
typedef struct mt_log_accum {
    int n;
    const char *keys[MT_LOG_MAX_LOSSES];
    float sums[MT_LOG_MAX_LOSSES];
    int64_t advanced, skipped, nan;
} mt_log_accum;
void mt_log_accum_add(mt_log_accum *a, bool skipped, const mt_loss_value *losses, int n);
/* Sets l->losses (sum / max(1, advanced), in double), l->n_losses, skipped_iters and nan_iters. */
void mt_log_accum_fill(const mt_log_accum *a, mt_iter_log *l);
/* Zeroes sums and counters, keeps the keys. */
void mt_log_accum_reset(mt_log_accum *a);

/* exp(min(20, value)) as Megatron computes the printed perplexity (NaN gives exp(20)). */
double mt_ppl(double loss);

typedef enum { MT_EVAL_DURING, MT_EVAL_FINAL_VALID, MT_EVAL_FINAL_TEST } mt_eval_when;
/* The prefix after "validation loss at ": "iteration N" during training; after it, by style,
 * "the end of training for val data" / "the end of training for test data" (v2) or
 * "iteration N on validation set" / "iteration N on test set" (core). Returns snprintf's count. */
int mt_eval_prefix(char *buf, size_t n, mt_log_style style, mt_eval_when when, int64_t iteration);

/* The three lines of the validation block, each ending in '\n' (malloc'd):
 *   dashes, " validation<suffix> loss at <prefix> | <key> value: %.6E | <key> PPL: %.6E | ...", dashes
 * with len(line) + 1 dashes (characters, not bytes). suffix is NULL/"" or e.g. "-0" for several sets. */
char *mt_format_validation(const char *suffix, const char *prefix, const mt_loss_value *losses, int n);
int mt_print_validation(FILE *f, const char *suffix, const char *prefix, const mt_loss_value *losses, int n);

/* JSON-lines metrics (jansson; one compact object per line, keys in this order, loss keys with spaces
 * as underscores, non-finite numbers as null):
 *   {"type":"train","iteration","train_iters","consumed_samples","time","elapsed_ms","lr",
 *    "global_batch_size","lm_loss",...,"loss_scale","grad_norm","num_zeros","params_norm",
 *    "skipped_iters","nan_iters","tflops_per_gpu","tokens_per_sec","tokens_per_sec_per_gpu"}
 * (optional fields only when present) and, per evaluation,
 *   {"type":"validation"|"test","iteration","consumed_samples","lm_loss","lm_loss_ppl",...}.
 * The strings are malloc'd, without newline; the write functions add it and flush. */
char *mt_metrics_iter_json(const mt_iter_log *l);
/* The number rule of every JSON object mt writes (metrics, mt-eval): a real, or null for NaN and +-inf,
 * which JSON cannot spell ("nan" would make the line unreadable to every JSON parser). */
json_t *mt_json_real(double v);
/* o (consumed) as one line without newline, {"key": value, ...} in insertion order, reals with 9
 * significant digits; malloc'd. */
char *mt_json_line(json_t *o);
char *mt_metrics_eval_json(const char *type, int64_t iteration, int64_t consumed_samples,
                           const mt_loss_value *losses, int n);
int mt_metrics_write_iter(FILE *f, const mt_iter_log *l, mt_err *e);
int mt_metrics_write_eval(FILE *f, const char *type, int64_t iteration, int64_t consumed_samples,
                          const mt_loss_value *losses, int n, mt_err *e);

#endif
