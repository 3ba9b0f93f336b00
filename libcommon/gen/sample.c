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

/* Whether candidate a ranks before b: the larger value, ties by the smaller id (a total order). */
static int before(const struct mt_cand *a, const struct mt_cand *b)
{
    return a->v > b->v || (a->v == b->v && a->id < b->id);
}

static void swap_cand(struct mt_cand *a, struct mt_cand *b)
{
    struct mt_cand t = *a;
    *a = *b, *b = t;
}

/* The median of c[lo], c[mid] and c[hi - 1] moved to c[hi - 1], then c[lo..hi - 1) partitioned: those
 * ranking before it first. Returns where the pivot then goes (it is swapped there). The comparisons
 * cannot lead out of bounds, whatever the values. */
static int partition(struct mt_cand *c, int lo, int hi)
{
    int mid = lo + (hi - lo) / 2, last = hi - 1;
    if (before(&c[mid], &c[lo])) swap_cand(&c[mid], &c[lo]);
    if (before(&c[last], &c[lo])) swap_cand(&c[last], &c[lo]);
    if (before(&c[last], &c[mid])) swap_cand(&c[last], &c[mid]);
    swap_cand(&c[mid], &c[last]);
    int at = lo;
    for (int i = lo; i < last; i++)
        if (before(&c[i], &c[last])) swap_cand(&c[i], &c[at++]);
    swap_cand(&c[at], &c[last]);
    return at;
}

/* c[0..n) rearranged so that its m first in rank come first, in no particular order (a quickselect). */
static void select_best(struct mt_cand *c, int n, int m)
{
    int lo = 0, hi = n;
    while (m > lo && m < hi && hi - lo > 1) {
        int at = partition(c, lo, hi);
        if (at == m || at == m - 1) break;
        if (at < m) lo = at + 1;
        else hi = at;
    }
}

/* The candidate, in rank order, at which the running sum of the weights exp(v - top) of c[0..n) first
 * exceeds t: c is rearranged so that those ranking before it come first (in no particular order), then
 * it; returns its index. t at or beyond the sum: the last in rank. A quickselect on mass, each
 * partition's weight deciding the side, then a sort and a walk of a last few: a draw and top-p's boundary
 * cost a few passes over the vocabulary, not a sort of it. */
static int crossing(struct mt_cand *c, int n, double top, double t)
{
    int lo = 0, hi = n;
    while (hi - lo > 32) {
        int at = partition(c, lo, hi);
        double m = 0;
        for (int i = lo; i < at; i++) m += exp(c[i].v - top);
        if (m > t) {
            hi = at;
            continue;
        }
        t -= m;
        double w = exp(c[at].v - top);
        if (w > t) return at;
        t -= w;
        lo = at + 1;
    }
    qsort(c + lo, (size_t)(hi - lo), sizeof *c, by_value_desc);
    for (int i = lo; i < hi; i++) {
        double w = exp(c[i].v - top);
        if (w > t) return i;
        t -= w;
    }
    return hi > lo ? hi - 1 : lo - 1;   /* (lo > 0 here: the range is empty only after a pivot) */
}

/* One draw at the temperature, after top-k and top-p (sample.h): the first candidate in rank order whose
 * running probability exceeds a uniform draw; top-p keeps those up to the first whose running
 * probability exceeds p. */
static int32_t draw(mt_sampler *s, const float *logits, int penalty, const mt_sampling *p, mt_rs *rng)
{
    const int V = s->V;
    struct mt_cand *c = s->c;
    double top = -INFINITY;
    for (int j = 0; j < V; j++) {
        double v = (penalty ? s->x[j] : (double)logits[j]) / p->temperature;
        c[j].v = isnan(v) ? -INFINITY : v, c[j].id = j;
        top = c[j].v > top ? c[j].v : top;
    }
    int n = V;   /* candidates kept: c[0..n) */
    if (p->top_k > 0 && p->top_k < V) select_best(c, V, n = p->top_k);
    double z = 0;
    for (int j = 0; j < n; j++) z += exp(c[j].v - top);
    if (p->top_p < 1.0) {
        n = crossing(c, n, top, p->top_p * z) + 1;
        z = 0;
        for (int j = 0; j < n; j++) z += exp(c[j].v - top);
    }
    double u = (double)(mt_rs_next64(rng) >> 11) * (1.0 / 9007199254740992.0) * z;
    return c[crossing(c, n, top, u)].id;
}

int32_t mt_sample_next(mt_sampler *s, const float *logits, const mt_sampling *p, const uint32_t *prev, size_t nprev,
                       mt_rs *rng, double *logprob)
{
    const int V = s->V;
    const int greedy = p->greedy || p->temperature <= 0, penalty = p->repetition_penalty != 1.0 && nprev;
    if (greedy && !penalty) {   /* the raw logits' first largest */
        int32_t pick = argmax(logits, V);
        if (logprob) *logprob = (double)logits[pick] - log_sum_exp(logits, V);
        return pick;
    }
    if (penalty) {
        for (int j = 0; j < V; j++) s->x[j] = logits[j];
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
        pick = draw(s, logits, penalty, p, rng);
    }
    if (logprob) *logprob = (double)logits[pick] - log_sum_exp(logits, V);
    return pick;
}
