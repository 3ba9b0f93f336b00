/* megatron_convert.h: a Megatron-LM torch-format checkpoint (ckpt/megatron_dir.h) opened as a model
 * (ckpt/open_model.h: its args as mt's, the tokenizer they name) and written as an mt checkpoint of any
 * tensor/pipeline layout with its iteration, consumed samples, learning-rate schedule and, where Megatron
 * saved it, the optimizer's state (Adam's moments and step, the fp32 main parameters as the weights, the
 * loss scaler), so that mt-train --load continues it.
 */
#ifndef MT_CKPT_MEGATRON_CONVERT_H
#define MT_CKPT_MEGATRON_CONVERT_H

#include "ckpt/megatron_dir.h"
#include "ckpt/open_model.h"
#include "ckpt/reshard.h"
#include "util/err.h"

/* Opens the Megatron checkpoint dir into m and mc for writing at tensor size tp: the vocabulary keeps the
 * checkpoint's padded rows (make-vocab-size-divisible-by chosen so that tp pads to them). vocab_file and
 * merge_file override the args' (NULL: theirs). The optimizer's state is read unless no_optim
 * (mt_meg_dir_optim). 0, or -1 with e set (nothing left open). */
int mt_meg_open(mt_model_ckpt *mc, mt_meg_dir *m, const char *dir, int tp, const char *vocab_file,
                const char *merge_file, int no_optim, mt_err *e);
void mt_meg_close(mt_model_ckpt *mc, mt_meg_dir *m);

/* Writes the opened checkpoint under save (a directory mt_ckpt_check_new_save_dir accepts) at its
 * iteration (release stays release) with tensor size tp (as opened) and pipeline size pp, a model with experts
 * over ep expert ranks with expert tensor size etp (0: tp; as mt_ckpt_write_layout). Nothing is left under
 * save on failure. 0, or -1 with e set. */
int mt_meg_import_ckpt(mt_model_ckpt *mc, const char *save, int tp, int pp, int ep, int etp, mt_ckpt_progress *progress,
                       mt_err *e);

#endif
