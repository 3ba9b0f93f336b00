/* report.c: Megatron's iteration log line and validation block, and JSON-lines metrics (see report.h). */
#include "report/report.h"

#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>

#include "util/vec.h"

static void bprintf(mt_buf *b, const char *fmt, ...) MT_PRINTF(2, 3);
static void bprintf(mt_buf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    mt_buf_reserve(b, (size_t)n + 1);
    va_start(ap, fmt);
    vsnprintf(b->p + b->n, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->n += (size_t)n;
}

static char *buf_str(mt_buf *b)
{
    mt_buf_putc(b, 0);
    return b->p;
}

/* Python prints NaN without a sign ("nan", "NAN"); C keeps the sign bit. */
static double py(double v) { return isnan(v) ? fabs(v) : v; }

void mt_log_now(mt_iter_log *l)
{
    struct timeval tv;
    gettimeofday(&tv, NULL);
    l->time_sec = (int64_t)tv.tv_sec;
    l->time_usec = (int32_t)tv.tv_usec;
}

static void timestamp(mt_buf *b, const mt_iter_log *l, bool usec)
{
    time_t t = (time_t)l->time_sec;
    struct tm tm;
    char s[64];
    localtime_r(&t, &tm);
    strftime(s, sizeof s, "%Y-%m-%d %H:%M:%S", &tm);
    if (usec) bprintf(b, " [%s.%06d]", s, (int)l->time_usec);
    else bprintf(b, " [%s]", s);
}

char *mt_format_iter_line(const mt_iter_log *l, mt_log_style style)
{
    mt_buf b = {0};
    bool core = style != MT_LOG_V2;
    if (core) timestamp(&b, l, style == MT_LOG_HEAD);
    bprintf(&b, " iteration %8lld/%8lld |", (long long)l->iteration, (long long)l->train_iters);
    bprintf(&b, " consumed samples: %12lld |", (long long)l->consumed_samples);
    if (core && l->skipped_samples > 0) bprintf(&b, " skipped samples: %12lld |", (long long)l->skipped_samples);
    bprintf(&b, " elapsed time per iteration (ms): %.1f |", py(l->elapsed_ms));
    if (l->has_tflops) bprintf(&b, " throughput per GPU (TFLOP/s/GPU): %.1f |", py(l->tflops_per_gpu));
    if (l->has_lr) bprintf(&b, core ? " learning rate: %.6E |" : " learning rate: %.3E |", py(l->lr));
    bprintf(&b, " global batch size: %5lld |", (long long)l->global_batch_size);
    for (int i = 0; i < l->n_losses && i < MT_LOG_MAX_LOSSES; i++) {
        double v = l->losses[i].value;
        if (core ? v >= 0.0 : v > 0.0) bprintf(&b, " %s: %.6E |", l->losses[i].key, v);
    }
    bprintf(&b, " loss scale: %.1f |", py(l->loss_scale));
    if (l->has_grad_norm) bprintf(&b, " grad norm: %.3f |", py(l->grad_norm));
    if (l->has_num_zeros) {
        if (core) bprintf(&b, " num zeros: %lld.0 |", (long long)l->num_zeros);
        else bprintf(&b, " num zeros: %.1f |", (double)l->num_zeros);
    }
    if (l->has_params_norm) bprintf(&b, " params norm: %.3f |", py(l->params_norm));
    bprintf(&b, " number of skipped iterations: %3lld |", (long long)l->skipped_iters);
    bprintf(&b, " number of nan iterations: %3lld |", (long long)l->nan_iters);
    if (l->has_tokens_per_sec) bprintf(&b, " tokens per second: %.1f |", py(l->tokens_per_sec));
    if (l->has_tokens_per_sec_per_gpu) bprintf(&b, " tokens per second per GPU: %.1f |", py(l->tokens_per_sec_per_gpu));
    return buf_str(&b);
}

int mt_print_iter_line(FILE *f, const mt_iter_log *l, mt_log_style style)
{
    char *s = mt_format_iter_line(l, style);
    int rc = fprintf(f, "%s\n", s) < 0 || fflush(f) ? -1 : 0;
    free(s);
    return rc;
}

/* ---- loss bookkeeping ---- */
static int accum_slot(mt_log_accum *a, const char *key)
{
    for (int i = 0; i < a->n; i++)
        if (!strcmp(a->keys[i], key)) return i;
    if (a->n == MT_LOG_MAX_LOSSES) return -1;
    a->keys[a->n] = key;
    a->sums[a->n] = 0.0f;
    return a->n++;
}

void mt_log_accum_add(mt_log_accum *a, bool skipped, const mt_loss_value *losses, int n)
{
    if (!skipped) {
        a->advanced++;
        for (int i = 0; i < n; i++) {
            int k = accum_slot(a, losses[i].key);
            if (k >= 0) a->sums[k] = a->sums[k] + (float)losses[i].value;
        }
        return;
    }
    a->skipped++;
    bool got_nan = false;
    for (int i = 0; i < n; i++) {
        double v = (double)(float)losses[i].value;
        if (isinf(v) || isnan(v)) got_nan = true;
    }
    a->nan += got_nan;
}

void mt_log_accum_fill(const mt_log_accum *a, mt_iter_log *l)
{
    double d = (double)(a->advanced > 1 ? a->advanced : 1);
    l->n_losses = a->n;
    for (int i = 0; i < a->n; i++) {
        l->losses[i].key = a->keys[i];
        l->losses[i].value = (double)a->sums[i] / d;
    }
    l->skipped_iters = a->skipped;
    l->nan_iters = a->nan;
}

void mt_log_accum_reset(mt_log_accum *a)
{
    for (int i = 0; i < a->n; i++) a->sums[i] = 0.0f;
    a->advanced = a->skipped = a->nan = 0;
}

/* ---- validation ---- */
double mt_ppl(double loss) { return exp(loss < 20 ? loss : 20); }

int mt_eval_prefix(char *buf, size_t n, mt_log_style style, mt_eval_when when, int64_t iteration)
{
    long long it = (long long)iteration;
    if (when == MT_EVAL_DURING) return snprintf(buf, n, "iteration %lld", it);
    if (style == MT_LOG_V2)
        return snprintf(buf, n, "the end of training for %s data", when == MT_EVAL_FINAL_TEST ? "test" : "val");
    return snprintf(buf, n, "iteration %lld on %s set", it, when == MT_EVAL_FINAL_TEST ? "test" : "validation");
}

static size_t utf8_chars(const char *s, size_t n)
{
    size_t c = 0;
    for (size_t i = 0; i < n; i++) c += ((unsigned char)s[i] & 0xC0) != 0x80;
    return c;
}

char *mt_format_validation(const char *suffix, const char *prefix, const mt_loss_value *losses, int n)
{
    mt_buf s = {0}, out = {0};
    bprintf(&s, " validation%s loss at %s | ", suffix ? suffix : "", prefix);
    for (int i = 0; i < n; i++) {
        bprintf(&s, "%s value: %.6E | ", losses[i].key, py(losses[i].value));
        bprintf(&s, "%s PPL: %.6E | ", losses[i].key, py(mt_ppl(losses[i].value)));
    }
    size_t dashes = utf8_chars(s.p, s.n) + 1;
    for (int k = 0; k < 2; k++) {
        if (k) {
            mt_buf_append(&out, s.p, s.n);
            mt_buf_putc(&out, '\n');
        }
        mt_buf_reserve(&out, dashes + 1);
        memset(out.p + out.n, '-', dashes);
        out.n += dashes;
        mt_buf_putc(&out, '\n');
    }
    mt_buf_free(&s);
    return buf_str(&out);
}

int mt_print_validation(FILE *f, const char *suffix, const char *prefix, const mt_loss_value *losses, int n)
{
    char *s = mt_format_validation(suffix, prefix, losses, n);
    int rc = fputs(s, f) < 0 || fflush(f) ? -1 : 0;
    free(s);
    return rc;
}

/* ---- JSON lines ---- */
json_t *mt_json_real(double v) { return isfinite(v) ? json_real(v) : json_null(); }

static void j_real(json_t *o, const char *key, double v) { json_object_set_new(o, key, mt_json_real(v)); }
static void j_int(json_t *o, const char *key, int64_t v) { json_object_set_new(o, key, json_integer((json_int_t)v)); }

static void j_loss(json_t *o, const char *key, const char *suffix, double v)
{
    size_t n = strlen(key), m = strlen(suffix);
    char *k = mt_xmalloc(n + m + 1);
    for (size_t i = 0; i < n; i++) k[i] = key[i] == ' ' ? '_' : key[i];
    memcpy(k + n, suffix, m + 1);
    j_real(o, k, v);
    free(k);
}

static char *j_dump(json_t *o)
{
    char *s = json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(o);
    if (!s) return mt_xstrdup("{}");
    char *r = mt_xstrdup(s); /* callers free() with the C library's free */
    free(s);
    return r;
}

char *mt_json_line(json_t *o)
{
    char *s = json_dumps(o, JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(9));
    json_decref(o);
    if (!s) return mt_xstrdup("{}");
    char *r = mt_xstrdup(s);
    free(s);
    return r;
}

char *mt_metrics_iter_json(const mt_iter_log *l)
{
    json_t *o = json_object();
    json_object_set_new(o, "type", json_string("train"));
    j_int(o, "iteration", l->iteration);
    j_int(o, "train_iters", l->train_iters);
    j_int(o, "consumed_samples", l->consumed_samples);
    if (l->skipped_samples > 0) j_int(o, "skipped_samples", l->skipped_samples);
    j_real(o, "time", (double)l->time_sec + (double)l->time_usec * 1e-6);
    j_real(o, "elapsed_ms", l->elapsed_ms);
    if (l->has_lr) j_real(o, "lr", l->lr);
    j_int(o, "global_batch_size", l->global_batch_size);
    for (int i = 0; i < l->n_losses && i < MT_LOG_MAX_LOSSES; i++) j_loss(o, l->losses[i].key, "", l->losses[i].value);
    j_real(o, "loss_scale", l->loss_scale);
    if (l->has_grad_norm) j_real(o, "grad_norm", l->grad_norm);
    if (l->has_num_zeros) j_int(o, "num_zeros", l->num_zeros);
    if (l->has_params_norm) j_real(o, "params_norm", l->params_norm);
    j_int(o, "skipped_iters", l->skipped_iters);
    j_int(o, "nan_iters", l->nan_iters);
    if (l->has_tflops) j_real(o, "tflops_per_gpu", l->tflops_per_gpu);
    if (l->has_tokens_per_sec) j_real(o, "tokens_per_sec", l->tokens_per_sec);
    if (l->has_tokens_per_sec_per_gpu) j_real(o, "tokens_per_sec_per_gpu", l->tokens_per_sec_per_gpu);
    return j_dump(o);
}

char *mt_metrics_eval_json(const char *type, int64_t iteration, int64_t consumed_samples,
                           const mt_loss_value *losses, int n)
{
    json_t *o = json_object();
    json_object_set_new(o, "type", json_string(type));
    j_int(o, "iteration", iteration);
    j_int(o, "consumed_samples", consumed_samples);
    for (int i = 0; i < n; i++) {
        j_loss(o, losses[i].key, "", losses[i].value);
        /* not mt_ppl's exp(20) for a NaN loss (Megatron's min(20, nan) in the log): null, as the loss */
        j_loss(o, losses[i].key, "_ppl", isfinite(losses[i].value) ? mt_ppl(losses[i].value) : NAN);
    }
    return j_dump(o);
}

static int write_line(FILE *f, char *s, mt_err *e)
{
    int rc = 0;
    if (fprintf(f, "%s\n", s) < 0 || fflush(f)) rc = mt_err_sys(e, "cannot write metrics");
    free(s);
    return rc;
}

int mt_metrics_write_iter(FILE *f, const mt_iter_log *l, mt_err *e) { return write_line(f, mt_metrics_iter_json(l), e); }

int mt_metrics_write_eval(FILE *f, const char *type, int64_t iteration, int64_t consumed_samples,
                          const mt_loss_value *losses, int n, mt_err *e)
{
    return write_line(f, mt_metrics_eval_json(type, iteration, consumed_samples, losses, n), e);
}
