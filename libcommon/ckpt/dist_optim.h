/* dist_optim.h: the distributed optimizer's state in a checkpoint, one file per data-parallel rank.
 *
 * With --use-distributed-optimizer every data-parallel rank r writes its shard of AdamW's moments,
 * parameters lo_r .. hi_r - 1 of the flat parameter buffer, as
 *   iter_%07d/mp_rank_00/distrib_optim_%03d.safetensors   (r)
 * with two F32 tensors "exp_avg" and "exp_avg_sq" of hi_r - lo_r elements and the metadata "offset"
 * (lo_r), "numel" (all parameters), "dp_rank" and "dp_size". meta.json's "optimizer" object gets
 * "distributed": {"dp_size": N, "shard_offsets": [lo_0, ..., lo_N-1, numel]}. How the ranks agree on a
 * save is the trainer's (train/dist_ckpt.h).
 *
 * Loading reassembles the whole moments from the shard files (whatever data-parallel size wrote them),
 * so a run continues with any data-parallel size and with or without the distributed optimizer.
 */
#ifndef MT_CKPT_DIST_OPTIM_H
#define MT_CKPT_DIST_OPTIM_H

#include <jansson.h>
#include <stddef.h>

#include "util/err.h"

/* The "distributed" object of meta.json's "optimizer": dp_size shards, shard r from lo[r] to lo[r + 1]. */
json_t *mt_dist_optim_meta(int dp_size, const size_t *lo);

/* Writes data-parallel rank dp_rank's shard into dir (the checkpoint's ".../mp_rank_00"): m_v holds n
 * exp_avg values, then n exp_avg_sq values, of parameters lo .. lo + n - 1 of numel. Never a shard of
 * non-finite moments: an error naming the parameter. 0, or -1 with e set. */
int mt_dist_optim_write(const char *dir, int dp_rank, int dp_size, size_t lo, size_t numel, const float *m_v, size_t n,
                        mt_err *e);

/* The whole exp_avg and exp_avg_sq (numel floats each) from the shard files of checkpoint directory dir
 * (its ".../mp_rank_00"), as distributed (meta.json's "optimizer.distributed") describes them. 0 or -1. */
int mt_dist_optim_read(const char *dir, const json_t *distributed, size_t numel, float *m, float *v, mt_err *e);

#endif
