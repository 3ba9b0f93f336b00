/* sample.c: next-token choice from logits (sample.h). */
#include "gen/sample.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "util/err.h"

void mt_sampler_init(mt_sampler *s, int V)
{
    s->V = V;
    s->x = mt_xmalloc((size_t)V * sizeof *s->x);
    s->c = mt_xmalloc((size_t)V * sizeof *s->c);
    s->seen = mt_xcalloc((size_t)V, 1);
}

void mt_sampler_free(mt_sampler *s)
{
    free(s->x);
    free(s->c);
    free(s->seen);
    memset(s, 0, sizeof *s);
}

static int by_value_desc(const void *a, const void *b)
{
    const struct mt_cand *x = a, *y = b;
    if (x->v != y->v) return x->v > y->v ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;   /* ties: the smaller id first, as a stable sort would */
}

/* log(sum exp(logits[0..V))) */
static double log_sum_exp(const float *logits, int V)
{
    double mx = -INFINITY, se = 0;
    for (int j = 0; j < V; j++) mx = logits[j] > mx ? logits[j] : mx;
    for (int j = 0; j < V; j++) se += exp((double)logits[j] - mx);
    return mx + log(se);
}

double mt_logprob(const float *logits, int V, int32_t id)
{
    return (double)logits[id] - log_sum_exp(logits, V);
}

void mt_top_logprobs(const float *logits, int V, int n, int32_t *ids, double *lps)
{
    const double lse = log_sum_exp(logits, V);
    int have = 0;
    for (int j = 0; j < V; j++) {   /* insertion into the n best so far: n is small */
        if (have == n && logits[j] <= logits[ids[n - 1]]) continue;
        int at = have < n ? have++ : n - 1;
        while (at > 0 && logits[j] > logits[ids[at - 1]]) {
            ids[at] = ids[at - 1];
            at--;
        }
        ids[at] = j;
    }
    for (int i = 0; i < n; i++) lps[i] = (double)logits[ids[i]] - lse;
}

/* The first index of the largest of x[0..V), as a scan that keeps the first strictly larger value: a NaN
 * never wins, except at 0 where the scan starts. In two passes, the maximum then its first place, so that
 * both vectorize. */
static int32_t argmax(const float *x, int V)
{
    if (isnan(x[0])) return 0;
    float mx = x[0];
#pragma omp simd reduction(max : mx)
    for (int j = 1; j < V; j++) mx = x[j] > mx ? x[j] : mx;
    for (int j = 0; j < V; j++)
        if (x[j] == mx) return j;
    return 0;
}

int32_t mt_sample_next(mt_sampler *s, const float *logits, const mt_sampling *p, const uint32_t *prev, size_t nprev,
                       mt_rs *rng, double *logprob)
{
    const int V = s->V;
    const int greedy = p->greedy || p->temperature <= 0;
    if (greedy && !(p->repetition_penalty != 1.0 && nprev)) {   /* the raw logits' first largest */
        int32_t pick = argmax(logits, V);
        if (logprob) *logprob = (double)logits[pick] - log_sum_exp(logits, V);
        return pick;
    }
    for (int j = 0; j < V; j++) s->x[j] = logits[j];
    if (p->repetition_penalty != 1.0 && nprev) {
        for (size_t i = 0; i < nprev; i++)
            if (prev[i] < (uint32_t)V) s->seen[prev[i]] = 1;
        for (int j = 0; j < V; j++)
            if (s->seen[j]) {
                s->x[j] = s->x[j] > 0 ? s->x[j] / p->repetition_penalty : s->x[j] * p->repetition_penalty;
                s->seen[j] = 0;
            }
    }
    int32_t pick = 0;
    if (greedy) {
        for (int j = 1; j < V; j++)
            if (s->x[j] > s->x[pick]) pick = j;
    } else {
        for (int j = 0; j < V; j++) s->c[j].v = s->x[j] / p->temperature, s->c[j].id = j;
        qsort(s->c, (size_t)V, sizeof *s->c, by_value_desc);
        int n = p->top_k > 0 && p->top_k < V ? p->top_k : V;
        double top = s->c[0].v, z = 0;
        for (int j = 0; j < n; j++) z += s->x[j] = exp(s->c[j].v - top);   /* x reused for the weights */
        if (p->top_p < 1.0) {
            double cum = 0;
            int keep = n;
            for (int j = 0; j < n; j++) {   /* kept while the probability before it does not exceed p */
                cum += s->x[j] / z;
                if (cum > p->top_p) {
                    keep = j + 1;
                    break;
                }
            }
            n = keep;
            z = 0;
            for (int j = 0; j < n; j++) z += s->x[j];
        }
        double u = (double)(mt_rs_next64(rng) >> 11) * (1.0 / 9007199254740992.0) * z, acc = 0;
        pick = s->c[n - 1].id;
        for (int j = 0; j < n; j++) {
            acc += s->x[j];
            if (u < acc) {
                pick = s->c[j].id;
                break;
            }
        }
    }
    if (logprob) *logprob = (double)logits[pick] - log_sum_exp(logits, V);
    return pick;
}
