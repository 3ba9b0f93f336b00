/* grad_sync.c: bucketed gradient all-reduce / reduce-scatter and parameter all-gather over the
 * data-parallel group (see grad_sync.h). */
#include "train/grad_sync.h"

#include <stdlib.h>

size_t mt_grad_sync_default_bucket(int dp_size)
{
    size_t b = (size_t)1000000 * (size_t)dp_size;
    return b > 40000000 ? b : 40000000;
}

void mt_grad_sync_init(mt_grad_sync *s, mt_comm *dp, size_t n, size_t bucket)
{
    int N = dp->size;
    s->dp = dp;
    s->n = n;
    s->bucket = bucket ? bucket : n ? n : 1;
    s->shard_lo = mt_xmalloc((size_t)(N + 1) * sizeof *s->shard_lo);
    s->counts = mt_xmalloc((size_t)N * sizeof *s->counts);
    mt_comm_even_counts(n, N, s->counts);
    s->shard_lo[0] = 0;
    for (int r = 0; r < N; r++) s->shard_lo[r + 1] = s->shard_lo[r] + s->counts[r];
}

void mt_grad_sync_free(mt_grad_sync *s)
{
    free(s->shard_lo);
    free(s->counts);
    s->shard_lo = s->counts = NULL;
}

int mt_grad_all_reduce(mt_grad_sync *s, float *buf, mt_err *e)
{
    if (s->dp->size == 1) return 0;
    for (size_t end = s->n; end > 0;) {
        size_t lo = end > s->bucket ? end - s->bucket : 0;
        if (mt_all_reduce(s->dp, buf + lo, end - lo, MT_C_F32, e)) return -1;
        end = lo;
    }
    return 0;
}

int mt_grad_sync_buckets(const mt_grad_sync *s) { return s->n ? (int)((s->n + s->bucket - 1) / s->bucket) : 0; }

void mt_grad_sync_bucket(const mt_grad_sync *s, int b, size_t *lo, size_t *hi)
{
    *hi = s->n - (size_t)b * s->bucket;
    *lo = *hi > s->bucket ? *hi - s->bucket : 0;
}

void mt_grad_sync_bucket_counts(const mt_grad_sync *s, size_t lo, size_t hi, size_t *counts)
{
    for (int r = 0; r < s->dp->size; r++) {
        size_t a = s->shard_lo[r] > lo ? s->shard_lo[r] : lo, b = s->shard_lo[r + 1] < hi ? s->shard_lo[r + 1] : hi;
        counts[r] = b > a ? b - a : 0;
    }
}

/* The parts of bucket [lo, hi) that fall into each rank's shard. */
static void bucket_counts(mt_grad_sync *s, size_t lo, size_t hi) { mt_grad_sync_bucket_counts(s, lo, hi, s->counts); }

static int by_bucket(mt_grad_sync *s, void *buf, mt_cdtype t, int gather, mt_err *e)
{
    if (s->dp->size == 1) return 0;
    size_t es = mt_cdtype_size(t);
    for (size_t end = s->n; end > 0;) {
        size_t lo = end > s->bucket ? end - s->bucket : 0;
        bucket_counts(s, lo, end);
        if ((gather ? mt_all_gather : mt_reduce_scatter)(s->dp, (char *)buf + lo * es, s->counts, t, e)) return -1;
        end = lo;
    }
    return 0;
}

int mt_grad_reduce_scatter(mt_grad_sync *s, float *buf, mt_err *e) { return by_bucket(s, buf, MT_C_F32, 0, e); }
int mt_grad_all_gather(mt_grad_sync *s, float *buf, mt_err *e) { return by_bucket(s, buf, MT_C_F32, 1, e); }
int mt_grad_all_gather_as(mt_grad_sync *s, void *buf, mt_cdtype t, mt_err *e) { return by_bucket(s, buf, t, 1, e); }
