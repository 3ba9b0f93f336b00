/* ckpt_write.h: a run's checkpoint written by every rank in parallel, each only what it owns, and
 * committed once by an agreement of the job (synchronously, or with --async-save from a copy of the
 * state by a background thread while training goes on).
 *
 * What a rank writes into the save's temporary directory (rank 0 creates it and sends its name to all):
 *   data-parallel rank 0 of each (tensor rank, stage): its mp_rank_TT[_PPP] directory's model.safetensors
 *     (fp32; where the distributed optimizer owns the fp32 master, the working copy's values widened to
 *     fp32 and the 1-D tensors' fp32 values), optim.safetensors (the moments, without the distributed
 *     optimizer) and meta.json;
 *   with --use-distributed-optimizer every data-parallel rank: distrib_optim_DDD.safetensors in its own
 *     mp_rank_TT[_PPP] directory: its range of that directory's flat buffer, the moments and, where the
 *     optimizer owns it, the fp32 master (ckpt/dist_optim.h).
 * Values go from the device to the file in pieces of MT_CKPT_CHUNK_BYTES (1 MiB): beyond its state a rank
 * holds at most MT_CKPT_STAGE_BYTES during a synchronous save (a piece in fp32, the piece's 2-byte source,
 * and the 1 MiB output buffer of the file). With --async-save the rank's share is copied aside first (host
 * memory), the staging bound plus that copy.
 *
 * Commit: each rank writes and fsyncs its files and directory, then one all-reduce over the job sums the
 * ranks' failures; with none, rank 0 renames the directory to iter_%07d and writes the tracker last,
 * otherwise it removes the directory. A rank that fails or dies leaves the previous checkpoint the latest.
 * With --async-save the agreement happens on the main thread: mt_trainer_save_poll at the end of each
 * iteration (an all-reduce of "done" while a write is pending) commits once every rank's write has ended;
 * mt_trainer_save_wait waits for the write first (the next save, --exit-interval, a signal, the end). The
 * background thread only writes files and fsyncs: no collective, no kernel.
 *
 * MT_CKPT_STATS=1: a line per rank and save on standard error, "ckpt stats | rank R | save iteration I |
 * bytes written B | seconds S | rss before KB | peak rss KB" (the peak reset at the start of the save),
 * and per load "ckpt stats | rank R | load iteration I | bytes read B | seconds S".
 */
#ifndef MT_TRAIN_CKPT_WRITE_H
#define MT_TRAIN_CKPT_WRITE_H

#include <jansson.h>
#include <stdio.h>

#include "train/trainer.h"
#include "util/err.h"

#define MT_CKPT_STAGE_BYTES ((size_t)3 << 20)

/* Saves iteration t->iteration to --save (every rank calls it): synchronously, or with --async-save by
 * starting the background write (after waiting for the previous one). Prints Megatron's "saving
 * checkpoint ..." and "successfully saved ..." lines on log (rank 0). Never a checkpoint of non-finite
 * values: an error naming the tensor. Sets t->last_saved. 0, or -1 with e set (every rank: the job's
 * agreement). */
int mt_trainer_save(mt_trainer *t, FILE *log, mt_err *e);
/* With an --async-save write pending: whether every rank's has ended (an all-reduce; every rank calls it
 * at the same iterations); if so the save is committed and 1 returned; 0 while writes go on; -1 with e set
 * when the save failed. 0 when nothing is pending. */
int mt_trainer_save_poll(mt_trainer *t, FILE *log, mt_err *e);
/* Waits for this rank's pending write, then commits as mt_trainer_save_poll. 0 (also with nothing
 * pending), or -1 with e set. */
int mt_trainer_save_wait(mt_trainer *t, FILE *log, mt_err *e);

/* meta.json of a save (train_ckpt.c): with_optim, the optimizer's state; distributed (taken, may be NULL),
 * where its distributed shards lie (ckpt/dist_optim.h). */
json_t *mt_trainer_ckpt_meta(const mt_trainer *t, int with_optim, json_t *distributed);

/* Prints the MT_CKPT_STATS load line (train_ckpt.c). */
void mt_ckpt_stats_load(const mt_trainer *t, int64_t iteration, uint64_t bytes, double seconds);

#endif
