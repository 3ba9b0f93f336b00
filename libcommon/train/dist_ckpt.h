/* dist_ckpt.h: the trainer's save of the distributed optimizer's state (--use-distributed-optimizer): every
 * data-parallel rank writes its shard of AdamW's moments (the files are ckpt/dist_optim.h's) in parallel
 * into the save's temporary directory, which is installed, and the tracker updated, only when every rank
 * has finished (ckpt/checkpoint.h's mt_ckpt_save_ranks_ex hook). Loading reads the shards back with
 * mt_dist_optim_read, at any data-parallel size.
 */
#ifndef MT_TRAIN_DIST_CKPT_H
#define MT_TRAIN_DIST_CKPT_H

#include <jansson.h>

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

#endif
