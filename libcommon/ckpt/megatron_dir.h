/* megatron_dir.h: a Megatron-LM `--ckpt-format torch` checkpoint directory read as whole tensors: the
 * tracker, one model_optim_rng.pt per tensor/pipeline rank (mp_rank_TT or mp_rank_TT_PPP, torch_ckpt.h),
 * the first rank's args Namespace, iteration and counters, and each tensor of the GPT model assembled
 * from the ranks' slices as model/layout.h partitions it (Megatron's own partitioning). The model's
 * state dict may be the legacy nested one (spec 5.3) or Megatron-Core's flat names (spec 5.4), which are
 * read under the legacy names; `_extra_state` entries are skipped. Nothing of the optimizer is read.
 */
#ifndef MT_CKPT_MEGATRON_DIR_H
#define MT_CKPT_MEGATRON_DIR_H

#include <stdint.h>

#include "ckpt/torch_ckpt.h"
#include "model/layout.h"
#include "util/err.h"

typedef struct mt_meg_rank {
    char *path;                 /* its model_optim_rng.pt */
    mt_tckpt ck;
    int n;                      /* its model's tensors, under legacy names */
    char **names;
    const mt_pk_tensor **t;
    unsigned char *used;
} mt_meg_rank;

typedef struct mt_meg_dir {
    char *dir;                  /* the --save directory of Megatron */
    int64_t iteration;          /* MT_CKPT_RELEASE for release/ */
    int tp, pp, n;              /* n = tp pp ranks, rank p tp + t */
    mt_meg_rank *r;
    const mt_pk *root;          /* the first rank's dict */
    const mt_pk *args;          /* its argparse.Namespace */
    mt_layout *l;               /* each rank's layout (mt_meg_dir_layout) */
} mt_meg_dir;

/* Whether dir has a tracker and a first rank's model_optim_rng.pt. */
int mt_meg_dir_is(const char *dir);
/* Opens every rank of the latest checkpoint of dir (the sizes from the first rank's args; a missing rank
 * names its file). 0, or -1 with e set (nothing left open). */
int mt_meg_dir_open(mt_meg_dir *m, const char *dir, mt_err *e);
/* The ranks' layouts for the model a (padded_vocab_size: the checkpoint's rows), every rank's tensors
 * checked to be there with their slice's shape. 0, or -1 with e set naming the file and key. */
int mt_meg_dir_layout(mt_meg_dir *m, const mt_model_arch *a, mt_err *e);
/* The whole tensor name (a one-rank legacy name) of global shape into dst. */
int mt_meg_read(mt_meg_dir *m, const char *name, int ndim, const int64_t *shape, float *dst, mt_err *e);
/* Every rank's model held nothing that was not read. */
int mt_meg_check_all_read(mt_meg_dir *m, mt_err *e);
void mt_meg_dir_close(mt_meg_dir *m);

#endif
