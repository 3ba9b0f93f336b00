/* split.c: --split parsing (core and legacy rounding) and per-split sample counts (see split.h). */
#include "data/split.h"

#include <ctype.h>
#include <errno.h>
#include <fenv.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

const char *const mt_split_names[MT_NSPLITS] = {"train", "valid", "test"};

static double pairwise(const double *a, int64_t n)
{
    if (n < 8) {
        double r = 0.;
        for (int64_t i = 0; i < n; i++) r += a[i];
        return r;
    }
    if (n <= 128) {
        double r[8];
        int64_t i;
        for (int j = 0; j < 8; j++) r[j] = a[j];
        for (i = 8; i < n - (n % 8); i += 8)
            for (int j = 0; j < 8; j++) r[j] += a[i + j];
        double res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
        for (; i < n; i++) res += a[i];
        return res;
    }
    int64_t n2 = n / 2;
    n2 -= n2 % 8;
    return pairwise(a, n2) + pairwise(a + n2, n - n2);
}

double mt_np_sum(const double *a, int64_t n)
{
    return 0. + pairwise(a, n);
}

/* Python round() on a double, to int64: half to even on the exact value. */
static int64_t py_round(double x)
{
    return (int64_t)nearbyint(x);
}

int mt_split_weights(const char *split, double w[MT_NSPLITS], mt_err *e)
{
    int n = 0;
    for (const char *p = split; *p;) {
        if (!(isdigit((unsigned char)*p) || *p == '.')) {
            p++;
            continue;
        }
        const char *q = p;
        while (*q && (isdigit((unsigned char)*q) || *q == '.')) q++;
        char tok[64];
        size_t len = (size_t)(q - p);
        if (len >= sizeof tok) return mt_err_set(e, "--split '%s': number too long", split);
        memcpy(tok, p, len);
        tok[len] = 0;
        char *end;
        errno = 0;
        double v = strtod(tok, &end);
        if (*end || end == tok || errno) return mt_err_set(e, "--split '%s': '%s' is not a number", split, tok);
        if (n == MT_NSPLITS) return mt_err_set(e, "--split '%s': more than 3 numbers", split);
        w[n++] = v;
        p = q;
    }
    for (; n < MT_NSPLITS; n++) w[n] = 0.0;
    double s = mt_np_sum(w, MT_NSPLITS);
    if (!(s > 0) || !isfinite(s)) return mt_err_set(e, "--split '%s': weights must have a positive sum", split);
    for (int i = 0; i < MT_NSPLITS; i++) w[i] = w[i] / s;
    return 0;
}

int mt_split_ranges(const char *split, int64_t n_seq, mt_range out[MT_NSPLITS], mt_err *e)
{
    double w[MT_NSPLITS];
    if (mt_split_weights(split, w, e)) return -1;
    if (fegetround() != FE_TONEAREST) fesetround(FE_TONEAREST);
    double c[MT_NSPLITS + 1];
    c[0] = 0;
    for (int i = 0; i < MT_NSPLITS; i++) c[i + 1] = c[i] + w[i];
    for (int i = 0; i < MT_NSPLITS; i++) {
        out[i].wlo = c[i];
        out[i].whi = c[i + 1];
        out[i].present = (c[i + 1] - c[i]) != 0;
        out[i].lo = out[i].hi = 0;
        if (out[i].present) {
            out[i].lo = py_round(c[i] * (double)n_seq);
            out[i].hi = py_round(c[i + 1] * (double)n_seq);
            if (out[i].hi < out[i].lo) out[i].hi = out[i].lo;
        }
    }
    return 0;
}

int mt_split_ranges_legacy(const char *split, int64_t n_seq, mt_range out[MT_NSPLITS], mt_err *e)
{
    char sep = strchr(split, ',') ? ',' : strchr(split, '/') ? '/' : 0;
    double w[MT_NSPLITS] = {0, 0, 0};
    int n = 0;
    const char *p = split;
    for (;;) {
        const char *q = sep ? strchr(p, sep) : NULL;
        if (!q) q = p + strlen(p);
        char tok[64];
        size_t len = (size_t)(q - p);
        if (len >= sizeof tok) return mt_err_set(e, "--split '%s': field too long", split);
        memcpy(tok, p, len);
        tok[len] = 0;
        char *end;
        errno = 0;
        double v = strtod(tok, &end);
        while (*end && isspace((unsigned char)*end)) end++;
        if (end == tok || *end || errno) return mt_err_set(e, "--split '%s': '%s' is not a number", split, tok);
        if (n < MT_NSPLITS) w[n] = v;
        n++;
        if (!*q) break;
        p = q + 1;
    }
    double s = 0;
    for (int i = 0; i < MT_NSPLITS; i++) s += w[i];
    if (!(s > 0)) return mt_err_set(e, "--split '%s': weights must have a positive sum", split);
    if (fegetround() != FE_TONEAREST) fesetround(FE_TONEAREST);
    int64_t idx[MT_NSPLITS + 1] = {0};
    for (int i = 0; i < MT_NSPLITS; i++) idx[i + 1] = idx[i] + py_round(w[i] / s * (double)n_seq);
    int64_t diff = idx[MT_NSPLITS] - n_seq;
    for (int i = 1; i <= MT_NSPLITS; i++) idx[i] -= diff;
    for (int i = 0; i < MT_NSPLITS; i++) {
        out[i].present = true;
        out[i].lo = idx[i];
        out[i].hi = idx[i + 1];
        out[i].wlo = out[i].whi = 0;
        if (out[i].lo < 0 || out[i].hi < out[i].lo)
            return mt_err_set(e, "--split '%s': legacy rounding gives an invalid range for %lld sequences", split,
                              (long long)n_seq);
    }
    return 0;
}

static int mul(int64_t a, int64_t b, int64_t *r)
{
    return __builtin_mul_overflow(a, b, r) ? -1 : 0;
}

int mt_split_num_samples(int64_t train_iters, int64_t train_samples, int64_t gbs, int64_t eval_interval,
                         int64_t eval_iters, int64_t out[MT_NSPLITS], mt_err *e)
{
    if (gbs <= 0) return mt_err_set(e, "--global-batch-size must be positive");
    if (eval_interval <= 0) return mt_err_set(e, "--eval-interval must be positive");
    if (train_iters < 0 || train_samples < 0 || eval_iters < 0) return mt_err_set(e, "negative iteration count");
    if (train_samples > 0) {
        out[0] = train_samples;
        train_iters = train_samples / gbs;
    } else if (mul(train_iters, gbs, &out[0])) {
        return mt_err_set(e, "--train-iters * --global-batch-size overflows");
    }
    int64_t v;
    if (mul(train_iters / eval_interval + 1, eval_iters, &v) || mul(v, gbs, &out[1]) || mul(eval_iters, gbs, &out[2]))
        return mt_err_set(e, "evaluation sample count overflows");
    return 0;
}
