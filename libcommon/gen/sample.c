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

/* c[0..n) reordered so that its m first in rank come first, sorted; the rest in any order. A quickselect
 * (median of three, then a partition that a NaN cannot lead out of bounds), then a sort of the m. */
static void best_first(struct mt_cand *c, int n, int m)
{
    int lo = 0, hi = n - 1;
    while (m < n && lo < hi) {
        int mid = lo + (hi - lo) / 2;
        if (before(&c[mid], &c[lo])) swap_cand(&c[mid], &c[lo]);
        if (before(&c[hi], &c[lo])) swap_cand(&c[hi], &c[lo]);
        if (before(&c[hi], &c[mid])) swap_cand(&c[hi], &c[mid]);
        swap_cand(&c[mid], &c[hi]);   /* the median of three as the pivot, at hi */
        int at = lo;
        for (int i = lo; i < hi; i++)
            if (before(&c[i], &c[hi])) swap_cand(&c[i], &c[at++]);
        swap_cand(&c[at], &c[hi]);    /* the pivot in its place: all before it rank before it */
        if (at == m - 1 || at == m) break;
        if (at < m) lo = at + 1;
        else hi = at - 1;
    }
    qsort(c, (size_t)m, sizeof *c, by_value_desc);
}

/* The next prefix to rank: 256 candidates, then eight times as many, up to all n. */
static int grow(int m, int n)
{
    return m == 0 ? (n < 256 ? n : 256) : n - m < 7 * m ? n : 8 * m;
}

/* One draw at the temperature, after top-k and top-p (sample.h). The candidates are ranked only as far
 * as needed: top-k selects its k; top-p, then the draw, rank growing prefixes until one reaches the
 * boundary (the draw's walk goes from the likeliest, so it usually stops early). */
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
    int n = V, ranked = 0;   /* candidates kept; the first ranked of them are in rank order */
    if (p->top_k > 0 && p->top_k < V) {
        best_first(c, V, p->top_k);
        n = ranked = p->top_k;
    }
    double z = 0;
    for (int j = 0; j < n; j++) z += exp(c[j].v - top);
    if (p->top_p < 1.0) {   /* kept while the probability before it does not exceed p */
        double cum = 0;
        int j = 0, keep = 0;
        for (int m = ranked ? ranked : grow(0, n); !keep; m = grow(m, n)) {
            if (m > ranked) best_first(c, n, ranked = m);
            while (j < m && !((cum += exp(c[j].v - top) / z) > p->top_p)) j++;
            if (j < m || m == n) keep = j < m ? j + 1 : n;
        }
        n = keep;
        z = 0;
        for (j = 0; j < n; j++) z += exp(c[j].v - top);
    }
    double u = (double)(mt_rs_next64(rng) >> 11) * (1.0 / 9007199254740992.0) * z, acc = 0;
    for (int m = ranked ? (ranked < n ? ranked : n) : grow(0, n), j = 0;; m = grow(m, n)) {
        if (m > ranked) best_first(c, n, ranked = m);   /* the ranked prefix stays as it was */
        for (; j < m; j++) {
            acc += exp(c[j].v - top);
            if (u < acc) return c[j].id;
        }
        if (m == n) return c[n - 1].id;
    }
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
    const int penalty = p->repetition_penalty != 1.0 && nprev;
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
