/* grad_sync.h: the data-parallel reduction of the model's flat fp32 gradient buffer, and the shards of
 * the distributed optimizer (spec 7.7).
 *
 * Buckets: the buffer is cut into buckets of `bucket` parameters from its end backwards (the order in
 * which the backward pass finishes them, as Megatron lays out its grad buffers in reverse), and each
 * bucket is reduced on its own. Plain data parallelism all-reduces each bucket (sums: every rank's
 * micro-batch losses were already scaled by 1 / (micro-batches x data-parallel size)). The distributed
 * optimizer gives data-parallel rank r the contiguous shard [lo_r, hi_r) of the buffer (near-equal
 * parts), reduce-scatters each bucket so that rank r ends with the summed gradients of its shard, and
 * after the update all-gathers each bucket of parameters from the shards' owners.
 */
#ifndef MT_TRAIN_GRAD_SYNC_H
#define MT_TRAIN_GRAD_SYNC_H

#include <stddef.h>

#include "comm/comm.h"
#include "util/err.h"

typedef struct mt_grad_sync {
    mt_comm *dp;        /* not owned */
    size_t n;           /* elements of the buffer */
    size_t bucket;      /* elements per bucket */
    size_t *shard_lo;   /* dp->size + 1 boundaries: rank r owns [shard_lo[r], shard_lo[r + 1]) */
    size_t *counts;     /* scratch: one bucket's part of each shard */
} mt_grad_sync;

/* Megatron's default bucket: max(40M, 1M x dp) parameters. */
size_t mt_grad_sync_default_bucket(int dp_size);
void mt_grad_sync_init(mt_grad_sync *s, mt_comm *dp, size_t n, size_t bucket);
void mt_grad_sync_free(mt_grad_sync *s);

/* Buckets: how many, and bucket b's range [*lo, *hi) of the buffer (b = 0 ends at the buffer's end). */
int mt_grad_sync_buckets(const mt_grad_sync *s);
void mt_grad_sync_bucket(const mt_grad_sync *s, int b, size_t *lo, size_t *hi);
/* counts[r] = the part of [lo, hi) in rank r's shard (the chunks of that bucket's reduce-scatter and
 * all-gather). */
void mt_grad_sync_bucket_counts(const mt_grad_sync *s, size_t lo, size_t hi, size_t *counts);

/* Sums buf over the data-parallel ranks, bucket by bucket from the end. 0 or -1. */
int mt_grad_all_reduce(mt_grad_sync *s, float *buf, mt_err *e);
/* Sums buf over the ranks into this rank's shard (the rest of buf is left partial). 0 or -1. */
int mt_grad_reduce_scatter(mt_grad_sync *s, float *buf, mt_err *e);
/* Every rank's shard of buf to every rank. 0 or -1. */
int mt_grad_all_gather(mt_grad_sync *s, float *buf, mt_err *e);
/* The same for a buffer of the layout's elements in another type (the bf16/fp16 working copy). */
int mt_grad_all_gather_as(mt_grad_sync *s, void *buf, mt_cdtype t, mt_err *e);

#endif
