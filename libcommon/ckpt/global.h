/* global.h: a checkpoint of any tensor/pipeline-parallel layout read as whole tensors. The rank
 * directories (mp_rank_TT or mp_rank_TT_PPP) are opened together; a whole tensor is assembled from the
 * slices that model/layout.h says each rank holds (rows or columns at their partition offsets, replicated
 * tensors from the first rank that has them). The last stage's copy of tied word embeddings
 * (word_embeddings_for_head) must equal the first stage's. With one rank it reads that rank's file.
 */
#ifndef MT_CKPT_GLOBAL_H
#define MT_CKPT_GLOBAL_H

#include "ckpt/checkpoint.h"
#include "model/layout.h"
#include "util/err.h"

typedef struct mt_ckpt_global {
    int tp, pp, n;
    mt_ckpt_reader **r;   /* rank p * tp + t; r[0] is the caller's, not closed here */
    mt_layout *l;         /* each rank's layout */
    mt_layout whole;      /* the one-rank layout: global names and shapes */
    float *scratch;       /* the largest slice */
} mt_ckpt_global;

/* Opens the other ranks of the checkpoint first was opened from (load_dir, iteration) for a model of
 * architecture a saved with tensor size tp, pipeline size pp and vp model chunks per stage (the
 * interleaved schedule; 1 without). 0, or -1 with e set (nothing open). */
int mt_ckpt_global_open(mt_ckpt_global *g, mt_ckpt_reader *first, const char *load_dir, int64_t iteration,
                        const mt_model_arch *a, int tp, int pp, int vp, mt_err *e);
void mt_ckpt_global_close(mt_ckpt_global *g);

/* Reads the whole tensor name (a one-rank name) of file which (MT_CKPT_MODEL; MT_CKPT_OPTIM with suffix
 * ".exp_avg" or ".exp_avg_sq", NULL for the model) into dst, checking its global shape. */
int mt_ckpt_global_read(mt_ckpt_global *g, int which, const char *name, const char *suffix, int ndim,
                        const int64_t *shape, float *dst, mt_err *e);
/* After the reads: every rank's file which holds nothing that was not read, for the names with each of
 * suffixes (NULL-terminated; NULL: the names alone). Replicated copies and the head copies of tied
 * embeddings are compared with the copy that was read. */
int mt_ckpt_global_check_all_read(mt_ckpt_global *g, int which, const char *const *suffixes, mt_err *e);

#endif
