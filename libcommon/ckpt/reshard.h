/* reshard.h: the model of an opened checkpoint (ckpt/open_model.h) written as a checkpoint of any
 * tensor/pipeline-parallel layout. Every tensor of every target rank is a slice of a whole tensor read
 * from the source (a checkpoint of any layout, or a Hugging Face directory), one tensor at a time.
 */
#ifndef MT_CKPT_RESHARD_H
#define MT_CKPT_RESHARD_H

#include <jansson.h>
#include <stdint.h>

#include "ckpt/open_model.h"
#include "util/err.h"

/* Called after each tensor written: done of total (for a progress display). */
typedef void mt_ckpt_progress(int done, int total);

/* Writes the model of mc (and its AdamW moments when with_optim) as iteration it (or MT_CKPT_RELEASE) of
 * a checkpoint of tensor size tp, pipeline size pp, expert-parallel size ep (1: none; a model with experts
 * only) and expert tensor size etp (0 or tp: the experts split as the MLP; 1: whole, in the directory of
 * every tensor rank of their expert rank) under save: every rank's meta.json is meta with those sizes in
 * its args. progress may be NULL. The source holding anything it did not read (a tensor of
 * another model) is an error found before the checkpoint is installed: nothing appears under save, the
 * tracker included. 0, or -1 with e set. */
int mt_ckpt_write_layout(mt_model_ckpt *mc, const char *save, int64_t it, int tp, int pp, int ep, int etp,
                         const json_t *meta, int with_optim, mt_ckpt_progress *progress, mt_err *e);

/* The checkpoint of mc (not a Hugging Face directory) at its iteration, with its AdamW moments when it has
 * them, as a checkpoint of tensor size tp, pipeline size pp, expert sizes ep and etp under save (a directory that
 * mt_ckpt_check_save_dir accepts); distributed-optimizer shards become each rank's optim.safetensors.
 * Fails when the source holds tensors the model does not have. *with_optim: whether moments were
 * written. 0, or -1 with e set. */
int mt_ckpt_reshard(mt_model_ckpt *mc, const char *save, int tp, int pp, int ep, int etp, mt_ckpt_progress *progress,
                    int *with_optim, mt_err *e);

#endif
