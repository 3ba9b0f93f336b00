/* blend.c: blending indices and per-dataset blend sizes (see blend.h). */
#include "data/blend.h"

#include <math.h>
#include <stdlib.h>

#include "data/split.h"

int mt_blend_normalize(double *w, int k, mt_err *e)
{
    if (k < 1 || k > MT_BLEND_MAX_DATASETS) return mt_err_set(e, "%d datasets in a blend (1..%d allowed)", k, MT_BLEND_MAX_DATASETS);
    for (int i = 0; i < k; i++)
        if (!(w[i] >= 0) || !isfinite(w[i])) return mt_err_set(e, "blend weight %d (%g) is not a non-negative number", i + 1, w[i]);
    double s = mt_np_sum(w, k);
    if (!(s > 0) || !isfinite(s)) return mt_err_set(e, "blend weights sum to %g", s);
    for (int i = 0; i < k; i++) w[i] = w[i] / s;
    return 0;
}

int mt_blend_sizes(const double *w, int k, int64_t n, double surplus, int64_t *per_dataset, int64_t *blend_size,
                   mt_err *e)
{
    int64_t total = 0;
    for (int i = 0; i < k; i++) {
        double t = ceil((double)n * w[i]);
        double b = ceil(t * (1.0 + surplus));
        if (!(b < 9.2e18)) return mt_err_set(e, "blend size for dataset %d overflows", i + 1);
        per_dataset[i] = (int64_t)b;
        total += (int64_t)t;
    }
    *blend_size = total;
    return 0;
}

int mt_blend_build(const double *w, int k, int64_t size, const int64_t *dataset_len, int16_t *dataset_index,
                   int64_t *dataset_sample_index, mt_err *e)
{
    if (k < 1 || k > MT_BLEND_MAX_DATASETS) return mt_err_set(e, "%d datasets in a blend (1..%d allowed)", k, MT_BLEND_MAX_DATASETS);
    int64_t *cur = calloc((size_t)k, sizeof *cur);
    if (!cur) return mt_err_set(e, "out of memory");
    for (int64_t s = 0; s < size; s++) {
        double x = s > 1 ? (double)s : 1.0;
        int best = 0;
        double best_err = w[0] * x - (double)cur[0];
        for (int j = 1; j < k; j++) {
            double err = w[j] * x - (double)cur[j];
            if (err > best_err) {
                best_err = err;
                best = j;
            }
        }
        dataset_index[s] = (int16_t)best;
        dataset_sample_index[s] = cur[best]++;
    }
    int rc = 0;
    if (dataset_len)
        for (int j = 0; j < k; j++)
            if (cur[j] > dataset_len[j]) {
                rc = mt_err_set(e, "blend asks dataset %d for %lld samples but it has only %lld", j + 1,
                                (long long)cur[j], (long long)dataset_len[j]);
                break;
            }
    free(cur);
    return rc;
}

int mt_blend_build_exhaustive(const int64_t *counts, int k, int16_t *dataset_index, int64_t *dataset_sample_index,
                              mt_err *e)
{
    if (k < 1 || k > MT_BLEND_MAX_DATASETS) return mt_err_set(e, "%d datasets in a blend (1..%d allowed)", k, MT_BLEND_MAX_DATASETS);
    int64_t total = 0;
    for (int i = 0; i < k; i++) {
        if (counts[i] < 0) return mt_err_set(e, "dataset %d has a negative size", i + 1);
        total += counts[i];
    }
    int64_t *cur = calloc((size_t)k, sizeof *cur);
    double *w = malloc((size_t)k * sizeof *w);
    int *live = malloc((size_t)k * sizeof *live); /* ascending ids of unspent datasets */
    if (!cur || !w || !live) {
        free(cur), free(w), free(live);
        return mt_err_set(e, "out of memory");
    }
    int nlive = 0;
    for (int i = 0; i < k; i++) {
        w[i] = (double)counts[i] / (double)total;
        if (counts[i] > 0) live[nlive++] = i;
    }
    for (int64_t s = 0; nlive > 0; s++) {
        double x = s > 1 ? (double)s : 1.0;
        int bi = 0;
        double best_err = -INFINITY;
        for (int t = 0; t < nlive; t++) {
            double err = w[live[t]] * x - (double)cur[live[t]];
            if (err > best_err || t == 0) {
                best_err = err;
                bi = t;
            }
        }
        int best = live[bi];
        dataset_index[s] = (int16_t)best;
        dataset_sample_index[s] = cur[best]++;
        if (cur[best] == counts[best]) {
            for (int t = bi; t + 1 < nlive; t++) live[t] = live[t + 1];
            nlive--;
        }
    }
    free(cur), free(w), free(live);
    return 0;
}
