/* dist_ckpt.h: the distributed optimizer's state in a checkpoint, one file per data-parallel rank.
 *
 * With --use-distributed-optimizer every data-parallel rank r writes its shard of AdamW's moments,
 * parameters lo_r .. hi_r - 1 of the flat parameter buffer, as
 *   iter_%07d/mp_rank_00/distrib_optim_%03d.safetensors   (r)
 * with two F32 tensors "exp_avg" and "exp_avg_sq" of hi_r - lo_r elements and the metadata "offset"
 * (lo_r), "numel" (all parameters), "dp_rank" and "dp_size". The ranks write in parallel into the save's
 * temporary directory, which is installed, and the tracker updated, only when every rank has finished
 * (checkpoint.h's mt_ckpt_save_ranks_ex hook). meta.json's "optimizer" object gets
 * "distributed": {"dp_size": N, "shard_offsets": [lo_0, ..., lo_N-1, numel]}.
 *
 * Loading reassembles the whole moments from the shard files (whatever data-parallel size wrote them),
 * so a run continues with any data-parallel size and with or without the distributed optimizer.
 */
#ifndef MT_TRAIN_DIST_CKPT_H
#define MT_TRAIN_DIST_CKPT_H

#include <jansson.h>
#include <stddef.h>

#include "train/trainer.h"
#include "util/err.h"

/* The "distributed" object of meta.json's "optimizer". */
json_t *mt_dist_ckpt_meta(const mt_trainer *t);

/* The save of the ranks other than data-parallel rank 0 (which calls mt_ckpt_save_ranks_ex with
 * mt_dist_ckpt_fill): receives the directory, writes this rank's shard, joins the agreement. 0, or -1
 * with e set when this rank or another failed. */
int mt_dist_ckpt_save_peer(mt_trainer *t, mt_err *e);
/* Rank 0's side: the fill hook (arg: the trainer; tmp: the save's temporary iteration directory) and,
 * after mt_ckpt_save_ranks_ex returned rc, the end of the
 * agreement (also when the hook never ran). Returns the save's result for every rank. */
int mt_dist_ckpt_fill(const char *tmp, void *arg, mt_err *e);
int mt_dist_ckpt_save_done(mt_trainer *t, int rc, mt_err *e);

/* The whole exp_avg and exp_avg_sq (numel floats each) from the shard files of checkpoint directory dir
 * (its ".../mp_rank_00"), as distributed (meta.json's "optimizer.distributed") describes them. 0 or -1. */
int mt_dist_ckpt_read(const char *dir, const json_t *distributed, size_t numel, float *m, float *v, mt_err *e);

#endif
