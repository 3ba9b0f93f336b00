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
    int tp, pp, ep, n;
    int etp;              /* the expert tensor size (tp: the experts split as the MLP); below tp each expert's
                             slice etp_rank = tensor rank % etp is in every directory of its expert rank and
                             such a tensor rank, and only the (tensor rank, expert rank) pairs some rank held
                             were saved */
    mt_ckpt_reader **r;   /* rank (p ep + x) tp + t (x the expert rank); r[0] is the caller's, not closed here;
                             NULL: a pair no rank held (etp < tp only) */
    mt_layout *l;         /* each rank's layout */
    mt_layout whole;      /* the one-rank layout: global names and shapes */
    float *scratch;       /* the largest slice */
    /* mt_ckpt_global_read_part's state: each rank's files opened for pread ([2 i + which]), its
     * distributed-optimizer shards (opened at the first use), and the data bytes read */
    int *fd;
    struct mt_dist_shards *shards;
    signed char *shards_state;   /* 0 not looked at, 1 open, -1 none */
    uint64_t bytes_read;
} mt_ckpt_global;

/* Where mt_ckpt_global_read_part takes values from: a file (MT_CKPT_MODEL, MT_CKPT_OPTIM), or the
 * distributed optimizer's shard files of each rank directory (their fp32 master, or their moments for
 * MT_CKPT_OPTIM when a rank directory has no optim.safetensors). */
#define MT_CKPT_MASTER 2

/* Opens the other ranks of the checkpoint first was opened from (load_dir, iteration) for a model of
 * architecture a saved with tensor size tp, pipeline size pp, vp model chunks per stage (the interleaved
 * schedule; 1 without), expert size ep and expert tensor size etp (0 or tp: the experts split as the MLP;
 * a divisor of tp: split over etp, 1 whole, and then the directories of the pairs no rank held are absent;
 * a stage must still have one of each tensor rank, and for each expert rank one of each expert tensor
 * rank). 0, or -1 with e set (nothing open). */
int mt_ckpt_global_open(mt_ckpt_global *g, mt_ckpt_reader *first, const char *load_dir, int64_t iteration,
                        const mt_model_arch *a, int tp, int pp, int vp, int ep, int etp, mt_err *e);
void mt_ckpt_global_close(mt_ckpt_global *g);

/* Reads the whole tensor name (a one-rank name) of file which (MT_CKPT_MODEL; MT_CKPT_OPTIM with suffix
 * ".exp_avg" or ".exp_avg_sq", NULL for the model) into dst, checking its global shape. */
int mt_ckpt_global_read(mt_ckpt_global *g, int which, const char *name, const char *suffix, int ndim,
                        const int64_t *shape, float *dst, mt_err *e);
/* Elements first .. first + count - 1 (C order) of the slice that layout tensor t (a rank of any layout
 * of the same model: t->whole_name and t's global shape) holds, into dst: only the bytes of those elements
 * are read (pread) from the ranks that hold them, counted in g->bytes_read. Vocabulary rows beyond the
 * saved ones are zero. which: MT_CKPT_MODEL, MT_CKPT_OPTIM (suffix ".exp_avg" or ".exp_avg_sq") or
 * MT_CKPT_MASTER. 0, or -1 with e set. */
int mt_ckpt_global_read_part(mt_ckpt_global *g, int which, const mt_layout_tensor *t, const char *suffix, size_t first,
                             size_t count, float *dst, mt_err *e);
/* Whether every rank directory has the distributed optimizer's shards with the fp32 master (0 or 1), or -1
 * with e set when its files are unreadable. */
int mt_ckpt_global_has_master(mt_ckpt_global *g, mt_err *e);
/* From the headers only: every tensor of every rank's file which belongs to that rank's layout (with
 * each of suffixes, as mt_ckpt_global_check_all_read): "<file>: unexpected tensor 'x' (and N more)". */
int mt_ckpt_global_check_names(mt_ckpt_global *g, int which, const char *const *suffixes, mt_err *e);

/* After the reads: every rank's file which holds nothing that was not read, for the names with each of
 * suffixes (NULL-terminated; NULL: the names alone). Replicated copies and the head copies of tied
 * embeddings are compared with the copy that was read. */
int mt_ckpt_global_check_all_read(mt_ckpt_global *g, int which, const char *const *suffixes, mt_err *e);

#endif
