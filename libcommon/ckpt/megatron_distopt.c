/* megatron_distopt.c: the parameter layout of Megatron-Core's gradient buffers, which orders the
 * distributed optimizer's distrib_optim.pt (megatron_distopt.h). */
#include "ckpt/megatron_distopt.h"

#include <stdio.h>
#include <stdlib.h>

#include "ckpt/megatron_dir.h"
#include "util/err.h"

int64_t mt_meg_bucket_size(int overlap_grad_reduce, int64_t ddp_bucket_size, int64_t num_buckets, int64_t dp_cp,
                           int64_t num_parameters)
{
    if (!overlap_grad_reduce) return 0;
    if (num_buckets > 0) return num_parameters / num_buckets > 0 ? num_parameters / num_buckets : 1;
    if (ddp_bucket_size > 0) return ddp_bucket_size;
    return 1000000 * dp_cp > 40000000 ? 1000000 * dp_cp : 40000000;
}

/* The model chunk of a layout tensor: "model<c>." names a chunk's tensors when there are several. */
static int chunk_of(const mt_layout *l, const mt_layout_tensor *t)
{
    int c = 0;
    if (l->chunks > 1 && sscanf(t->name, "model%d.", &c) != 1) c = 0;
    return c;
}

void mt_meg_dbufs(const mt_layout *l, int core, int grouped, int tied, int64_t bucket_size, int sel, mt_meg_dbuf *b)
{
    int nc = l->chunks > 1 ? l->chunks : 1;
    const mt_layout_tensor **order = mt_xcalloc((size_t)(l->n ? l->n : 1), sizeof *order);
    int n = mt_meg_param_order(l, core, grouped, order);
    int first = l->part.pp_stage == 0, last = l->part.pp_stage == l->part.pp_stages - 1;
    for (int c = 0; c < nc; c++) {
        mt_meg_dbuf *d = &b[c];
        d->n = 0;
        d->t = mt_xcalloc((size_t)(n ? n : 1), sizeof *d->t);
        d->off = mt_xcalloc((size_t)(n ? n : 1), sizeof *d->off);
        int64_t size = first && c == 0 ? bucket_size : 0, base = 0, at = 0;
        int in_bucket = 0;
        for (int j = n - 1; j >= 0; j--) {   /* the buffer runs backward through the registration order */
            const mt_layout_tensor *t = order[j];
            if (chunk_of(l, t) != c || (sel >= 0 && (t->expert >= 0) != sel)) continue;
            /* Megatron-Core marks the word embeddings shared_embedding on the first stage's first chunk and the
             * output layer's copy on the last stage's last chunk, when a pipeline splits tied embeddings */
            int shared = core && tied && l->part.pp_stages > 1 &&
                         ((first && c == 0 && t->kind == MT_T_WORD_EMB) || (last && c == nc - 1 && t->kind == MT_T_OUTPUT));
            at = (at + 63) / 64 * 64;
            if (shared && in_bucket) {   /* the bucket so far closes where this one would start */
                base += at;
                at = 0;
                in_bucket = 0;
            }
            d->t[d->n] = t;
            d->off[d->n++] = base + at;
            at += (int64_t)t->numel;
            in_bucket = 1;
            if ((size > 0 && at >= size) || shared) {
                base += at;
                at = 0;
                in_bucket = 0;
            }
        }
        d->numel = base + (in_bucket ? at : 0);
    }
    free(order);
}

void mt_meg_dbufs_free(mt_meg_dbuf *b, int n)
{
    for (int i = 0; i < n; i++) {
        free(b[i].t);
        free(b[i].off);
        b[i].t = NULL;
        b[i].off = NULL;
    }
}
