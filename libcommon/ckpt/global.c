/* global.c: whole tensors from the ranks of a tensor/pipeline-parallel checkpoint (global.h). */
#include "ckpt/global.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Before anything is allocated for them: every tensor that mt_ckpt_global_read takes from a rank (not the
 * copies that only check_copies compares) is in that rank's model file with its local shape, so that sizes
 * in meta.json that the files do not have are an error, not an allocation of those sizes. */
static int check_shapes(const mt_ckpt_global *g, mt_err *e)
{
    for (int i = 0; i < g->n; i++) {
        const mt_st_file *f = mt_ckpt_file(g->r[i], MT_CKPT_MODEL);
        for (int j = 0; f && j < g->l[i].n; j++) {
            const mt_layout_tensor *lt = &g->l[i].t[j];
            const mt_st_info *s = mt_st_find(f, lt->name);
            if (!s) {
                if ((lt->kind == MT_T_OUTPUT && g->whole.arch.tied_embeddings) || (lt->partition_dim < 0 && i % g->tp))
                    continue;
                return mt_err_set(e, "%s: missing tensor '%s'", f->path, lt->name);
            }
            bool same = s->ndim == lt->ndim;
            for (int k = 0; same && k < lt->ndim; k++) same = s->shape[k] == lt->local_shape[k];
            if (!same) {
                char a[128], b[128];
                return mt_err_set(e, "%s: tensor '%s' has shape %s, this model needs %s", f->path, lt->name,
                                  mt_st_shape_str(a, sizeof a, s->ndim, s->shape),
                                  mt_st_shape_str(b, sizeof b, lt->ndim, lt->local_shape));
            }
        }
    }
    return 0;
}

int mt_ckpt_global_open(mt_ckpt_global *g, mt_ckpt_reader *first, const char *load_dir, int64_t iteration,
                        const mt_model_arch *a, int tp, int pp, int vp, mt_err *e)
{
    memset(g, 0, sizeof *g);
    mt_layout_part one = {0, 1, 0, 1, 1};
    if (mt_layout_build(a, &one, &g->whole, e)) return -1;
    g->tp = tp;
    g->pp = pp;
    g->n = tp * pp;
    g->r = mt_xcalloc((size_t)g->n, sizeof *g->r);
    g->l = mt_xcalloc((size_t)g->n, sizeof *g->l);
    size_t most = 1;
    for (int p = 0; p < pp; p++)
        for (int t = 0; t < tp; t++) {
            int i = p * tp + t;
            mt_layout_part part = {t, tp, p, pp, vp};
            if (mt_layout_build(a, &part, &g->l[i], e)) {
                mt_err_prefix(e, "checkpoint of tensor-parallel size %d, pipeline %d", tp, pp);
                mt_ckpt_global_close(g);
                return -1;
            }
            for (int j = 0; j < g->l[i].n; j++)
                if (g->l[i].t[j].numel > most) most = g->l[i].t[j].numel;
            if (i == 0) {
                g->r[0] = first;
                continue;
            }
            char name[32];
            mt_ckpt_rank_name(name, sizeof name, t, p, pp);
            g->r[i] = mt_ckpt_open_rank(load_dir, iteration, name, e);
            if (!g->r[i]) {
                mt_err_prefix(e, "checkpoint of tensor-parallel size %d, pipeline %d: missing shard", tp, pp);
                mt_ckpt_global_close(g);
                return -1;
            }
        }
    if (check_shapes(g, e)) {
        mt_ckpt_global_close(g);
        return -1;
    }
    g->scratch = mt_xmalloc(most * sizeof(float));
    return 0;
}

void mt_ckpt_global_close(mt_ckpt_global *g)
{
    for (int i = 1; g->r && i < g->n; i++) mt_ckpt_close(g->r[i]);
    for (int i = 0; g->l && i < g->n; i++) mt_layout_free(&g->l[i]);
    mt_layout_free(&g->whole);
    free(g->r);
    free(g->l);
    free(g->scratch);
    memset(g, 0, sizeof *g);
}

static void local_name(char *buf, size_t cap, const char *name, const char *suffix)
{
    snprintf(buf, cap, "%s%s", name, suffix ? suffix : "");
}

int mt_ckpt_global_read(mt_ckpt_global *g, int which, const char *name, const char *suffix, int ndim,
                        const int64_t *shape, float *dst, mt_err *e)
{
    char nm[200];
    const mt_layout_tensor *w = mt_layout_find(&g->whole, name);
    if (!w) return mt_err_set(e, "%s: the model has no tensor '%s'", mt_ckpt_dir(g->r[0]), name);
    /* the word embeddings (and an untied output layer) may be asked with other padding than the checkpoint's (the vocabulary is padded
     * for the tensor-parallel size): rows beyond the saved ones are zero, saved padding rows beyond the
     * asked ones are left out */
    int vocab = (w->kind == MT_T_WORD_EMB || w->kind == MT_T_OUTPUT) && ndim == 2 && shape[1] == w->global_shape[1];
    if (ndim != w->ndim || (!vocab && shape[0] != w->global_shape[0]) || (ndim == 2 && shape[1] != w->global_shape[1]))
        return mt_err_set(e, "%s: tensor '%s' does not have the model's shape", mt_ckpt_dir(g->r[0]), name);
    int64_t rows = w->global_shape[0], cols = ndim == 2 ? w->global_shape[1] : 1;
    float *out = vocab && shape[0] != rows ? mt_xmalloc((size_t)(rows * cols) * sizeof(float)) : dst;
    int found = 0, rc = 0;
    for (int i = 0; i < g->n && !rc; i++) {
        const mt_layout_tensor *lt = mt_layout_get(&g->l[i], w->layer, w->kind);
        if (!lt) continue;
        if (lt->partition_dim < 0 && found) continue;   /* replicated: the first holder's */
        local_name(nm, sizeof nm, lt->name, suffix);
        if (mt_ckpt_read_tensor(g->r[i], which, nm, lt->ndim, lt->local_shape, g->scratch, e)) rc = -1;
        else mt_layout_place(lt, g->scratch, out);
        found = 1;
    }
    if (!rc && !found) rc = mt_err_set(e, "%s: no rank holds '%s'", mt_ckpt_dir(g->r[0]), name);
    if (out != dst) {
        int64_t keep = rows < shape[0] ? rows : shape[0];
        memcpy(dst, out, sizeof(float) * (size_t)(keep * cols));
        memset(dst + keep * cols, 0, sizeof(float) * (size_t)((shape[0] - keep) * cols));
        free(out);
    }
    return rc;
}

/* Compares the copy nm (layout lt) in rank i with the one of rank j named n0 (layout l0). */
static int same_copy(mt_ckpt_global *g, int which, int i, const mt_layout_tensor *lt, const char *nm, int j,
                     const mt_layout_tensor *l0, const char *n0, const char *what, mt_err *e)
{
    float *copy = mt_xmalloc(lt->numel * sizeof(float));
    int rc = mt_ckpt_read_tensor(g->r[i], which, nm, lt->ndim, lt->local_shape, copy, e) ||
                     mt_ckpt_read_tensor(g->r[j], which, n0, l0->ndim, l0->local_shape, g->scratch, e)
                 ? -1
                 : 0;
    if (!rc && memcmp(copy, g->scratch, lt->numel * sizeof(float)))
        rc = mt_err_set(e, "%s: '%s' differs from %s", mt_ckpt_dir(g->r[i]), nm, what);
    free(copy);
    return rc;
}

/* The copies in rank i that mt_ckpt_global_read does not take: a replicated tensor of tensor rank > 0
 * (equal to tensor rank 0's) and the last stage's head copy of tied embeddings (equal to the first
 * stage's embeddings of the same tensor rank). */
static int check_copies(mt_ckpt_global *g, int which, int i, const char *suffix, mt_err *e)
{
    for (int j = 0; j < g->l[i].n; j++) {
        const mt_layout_tensor *lt = &g->l[i].t[j];
        char nm[200], n0[200];
        local_name(nm, sizeof nm, lt->name, suffix);
        const mt_st_file *f = mt_ckpt_file(g->r[i], which);
        if (!f || !mt_st_find(f, nm)) continue;   /* missing: reported by the reads */
        if (lt->kind == MT_T_OUTPUT && g->whole.arch.tied_embeddings) {
            int t = i % g->tp;
            const mt_layout_tensor *emb = mt_layout_get(&g->l[t], -1, MT_T_WORD_EMB);
            local_name(n0, sizeof n0, emb->name, suffix);
            if (same_copy(g, which, i, lt, nm, t, emb, n0, "the first stage's word embeddings", e)) return -1;
        } else if (lt->partition_dim < 0 && i % g->tp != 0) {
            int r0 = i - i % g->tp;
            const mt_layout_tensor *l0 = mt_layout_get(&g->l[r0], lt->layer, lt->kind);
            local_name(n0, sizeof n0, l0->name, suffix);
            if (same_copy(g, which, i, lt, nm, r0, l0, n0, "tensor rank 0's copy", e)) return -1;
        }
    }
    return 0;
}

int mt_ckpt_global_check_all_read(mt_ckpt_global *g, int which, const char *const *suffixes, mt_err *e)
{
    static const char *const none[] = {"", NULL};
    if (!suffixes) suffixes = none;
    for (int i = 0; i < g->n; i++) {
        for (int s = 0; g->n > 1 && suffixes[s]; s++)
            if (check_copies(g, which, i, suffixes[s], e)) return -1;
        if (mt_ckpt_check_all_read(g->r[i], which, e)) return -1;
    }
    return 0;
}
