/* global.c: whole tensors from the ranks of a tensor/pipeline-parallel checkpoint (global.h). */
#include "ckpt/global.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io/fsutil.h"

#include "ckpt/dist_optim.h"

static int holder(const mt_ckpt_global *g, int i, const mt_layout_tensor *lt);

/* Before anything is allocated for them: every tensor that mt_ckpt_global_read takes from a rank (not the
 * copies that only check_copies compares) is in that rank's model file with its local shape, so that sizes
 * in meta.json that the files do not have are an error, not an allocation of those sizes. */
static int check_shapes(const mt_ckpt_global *g, mt_err *e)
{
    for (int i = 0; i < g->n; i++) {
        if (!g->r[i]) continue;
        const mt_st_file *f = mt_ckpt_file(g->r[i], MT_CKPT_MODEL);
        for (int j = 0; f && j < g->l[i].n; j++) {
            const mt_layout_tensor *lt = &g->l[i].t[j];
            const mt_st_info *s = mt_st_find(f, lt->name);
            if (!s) {
                if ((lt->kind == MT_T_OUTPUT && g->whole.arch.tied_embeddings) || holder(g, i, lt) != i) continue;
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

/* Whether the rank directory name exists beside first's (the same iteration's directory). */
static int dir_exists(const mt_ckpt_reader *first, const char *name)
{
    char *top = mt_xstrdup(mt_ckpt_dir(first)), *slash = strrchr(top, '/');
    if (slash) *slash = 0;
    char *p = mt_path_join(slash ? top : ".", name);
    struct stat st;
    int yes = !stat(p, &st) && S_ISDIR(st.st_mode);
    free(p);
    free(top);
    return yes;
}

/* With an expert tensor size etp below tp only the (tensor rank, expert rank) pairs that some rank of the run
 * held were saved: every stage needs a directory of each tensor rank (its dense slices) and for each expert
 * rank one of each expert tensor rank (tensor rank % etp: its slices of the experts). */
static int check_cover(const mt_ckpt_global *g, mt_err *e)
{
    char top[4096], name[32];
    snprintf(top, sizeof top, "%s", mt_ckpt_dir(g->r[0]));   /* the iteration's directory */
    if (strrchr(top, '/')) *strrchr(top, '/') = 0;
    unsigned char *present = mt_xmalloc((size_t)g->n);
    for (int i = 0; i < g->n; i++) present[i] = g->r[i] != NULL;
    int p, t, x, gap = mt_ckpt_held_gap(present, g->tp, g->pp, g->ep, g->etp, &p, &t, &x);
    free(present);
    if (!gap) return 0;
    if (x < 0) {
        mt_ckpt_rank_name_ep(name, sizeof name, t, p, g->pp, 0, g->ep);
        return mt_err_set(e, "%s: missing shard: no directory of tensor rank %d (%s%s)", top, t, name,
                          g->ep > 1 ? " or another expert rank's" : "");
    }
    mt_ckpt_rank_name_ep(name, sizeof name, t, p, g->pp, x, g->ep);
    return mt_err_set(e, "%s: missing shard: no directory of expert rank %d%s (%s or another tensor rank's)", top, x,
                      g->etp > 1 ? " and its expert tensor slice" : "", name);
}

int mt_ckpt_global_open(mt_ckpt_global *g, mt_ckpt_reader *first, const char *load_dir, int64_t iteration,
                        const mt_model_arch *a, int tp, int pp, int vp, int ep, int etp, mt_err *e)
{
    memset(g, 0, sizeof *g);
    mt_layout_part one = {0, 1, 0, 1, 1, 0, 1, 0, 0};
    if (mt_layout_build(a, &one, &g->whole, e)) return -1;
    g->tp = tp;
    g->pp = pp;
    g->ep = ep > 1 ? ep : 1;
    g->n = tp * pp * g->ep;
    if (etp > 0 && tp % etp) {
        mt_layout_free(&g->whole);
        return mt_err_set(e, "%s: expert-tensor-parallel-size %d does not divide the tensor size %d", load_dir, etp, tp);
    }
    g->etp = etp > 0 && a->num_experts > 0 ? etp : tp;
    int grouped = g->etp < tp;
    g->r = mt_xcalloc((size_t)g->n, sizeof *g->r);
    g->l = mt_xcalloc((size_t)g->n, sizeof *g->l);
    size_t most = 1;
    for (int p = 0; p < pp; p++)
        for (int x = 0; x < g->ep; x++)
        for (int t = 0; t < tp; t++) {
            int i = (p * g->ep + x) * tp + t;
            mt_layout_part part = {t, tp, p, pp, vp, x, g->ep, grouped ? t % g->etp : 0, grouped ? g->etp : 0};
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
            mt_ckpt_rank_name_ep(name, sizeof name, t, p, pp, x, g->ep);
            if (grouped && !dir_exists(first, name)) continue;   /* a pair no rank held */
            g->r[i] = mt_ckpt_open_rank(load_dir, iteration, name, e);
            if (!g->r[i]) {
                mt_err_prefix(e, "checkpoint of tensor-parallel size %d, pipeline %d: missing shard", tp, pp);
                mt_ckpt_global_close(g);
                return -1;
            }
        }
    if ((grouped && check_cover(g, e)) || check_shapes(g, e)) {
        mt_ckpt_global_close(g);
        return -1;
    }
    g->scratch = mt_xmalloc(most * sizeof(float));
    return 0;
}

void mt_ckpt_global_close(mt_ckpt_global *g)
{
    for (int i = 0; g->fd && i < 2 * g->n; i++)
        if (g->fd[i] >= 0) close(g->fd[i]);
    for (int i = 0; g->shards_state && i < g->n; i++)
        if (g->shards_state[i] == 1) mt_dist_shards_close(&g->shards[i]);
    free(g->fd);
    free(g->shards);
    free(g->shards_state);
    for (int i = 1; g->r && i < g->n; i++)
        if (g->r[i]) mt_ckpt_close(g->r[i]);
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

static int rank_read(mt_ckpt_global *g, int which, int i, const mt_layout_tensor *ls, const char *suffix, size_t first,
                     size_t count, float *dst, mt_err *e);

/* Rank i's whole slice lt (named nm) into g->scratch: from its file, or of the moments from its
 * distributed-optimizer shards when it has no optim.safetensors. */
static int read_slice(mt_ckpt_global *g, int which, int i, const mt_layout_tensor *lt, const char *suffix, const char *nm,
                      mt_err *e)
{
    if (which == MT_CKPT_OPTIM && !mt_ckpt_has_optim(g->r[i]) &&
        json_object_get(json_object_get(mt_ckpt_meta(g->r[i]), "optimizer"), "distributed"))
        return rank_read(g, which, i, lt, suffix, 0, lt->numel, g->scratch, e);
    return mt_ckpt_read_tensor(g->r[i], which, nm, lt->ndim, lt->local_shape, g->scratch, e);
}

/* The directory the reads take tensor lt of present directory i (a tensor of g->l[i]) from: an expert's
 * from its own directory, or with an expert tensor size below tp from the first present one of its expert
 * rank, stage and expert tensor slice; any other tensor from the first present directory of its tensor rank
 * (tensor rank 0's when it is replicated) and stage: expert rank 0's, unless no rank held that pair. */
static int holder(const mt_ckpt_global *g, int i, const mt_layout_tensor *lt)
{
    int p = i / (g->ep * g->tp), x = (i / g->tp) % g->ep, t = i % g->tp;
    if (lt->expert >= 0) {
        for (int u = t % g->etp; g->etp < g->tp && u < g->tp; u += g->etp)
            if (g->r[(p * g->ep + x) * g->tp + u]) return (p * g->ep + x) * g->tp + u;
        return i;
    }
    if (lt->partition_dim < 0) t = 0;
    for (int y = 0; y < g->ep; y++)
        if (g->r[(p * g->ep + y) * g->tp + t]) return (p * g->ep + y) * g->tp + t;
    return i;
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
        const mt_layout_tensor *lt = g->r[i] ? mt_layout_get_expert(&g->l[i], w->layer, w->kind, w->expert) : NULL;
        if (!lt || holder(g, i, lt) != i) continue;   /* a copy of a slice another directory gives */
        local_name(nm, sizeof nm, lt->name, suffix);
        if (read_slice(g, which, i, lt, suffix, nm, e)) rc = -1;
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

/* The copies in rank i that mt_ckpt_global_read does not take: a tensor whose slice another directory
 * gives (a replicated tensor of tensor rank > 0, a dense one of expert rank > 0, a whole expert of tensor
 * rank > 0), equal to that copy, and the last stage's head copy of tied embeddings (equal to the first
 * stage's embeddings of the same tensor rank). */
static int check_copies(mt_ckpt_global *g, int which, int i, const char *suffix, mt_err *e)
{
    for (int j = 0; j < g->l[i].n; j++) {
        const mt_layout_tensor *lt = &g->l[i].t[j];
        char nm[200], n0[200], what[96];
        local_name(nm, sizeof nm, lt->name, suffix);
        const mt_st_file *f = mt_ckpt_file(g->r[i], which);
        if (!f || !mt_st_find(f, nm)) continue;   /* missing: reported by the reads */
        if (lt->kind == MT_T_OUTPUT && g->whole.arch.tied_embeddings) {
            const mt_layout_tensor *emb = mt_layout_get(&g->l[i % g->tp], -1, MT_T_WORD_EMB);
            int h = holder(g, i % g->tp, emb);
            emb = mt_layout_get(&g->l[h], -1, MT_T_WORD_EMB);
            local_name(n0, sizeof n0, emb->name, suffix);
            if (same_copy(g, which, i, lt, nm, h, emb, n0, "the first stage's word embeddings", e)) return -1;
            continue;
        }
        int h = holder(g, i, lt);
        if (h == i) continue;
        const mt_layout_tensor *l0 = mt_layout_get_expert(&g->l[h], lt->layer, lt->kind, lt->expert);
        local_name(n0, sizeof n0, l0->name, suffix);
        snprintf(what, sizeof what, "%s's copy", strrchr(mt_ckpt_dir(g->r[h]), '/') ? strrchr(mt_ckpt_dir(g->r[h]), '/') + 1
                                                                                    : mt_ckpt_dir(g->r[h]));
        if (same_copy(g, which, i, lt, nm, h, l0, n0, what, e)) return -1;
    }
    return 0;
}

int mt_ckpt_global_check_all_read(mt_ckpt_global *g, int which, const char *const *suffixes, mt_err *e)
{
    static const char *const none[] = {"", NULL};
    if (!suffixes) suffixes = none;
    for (int i = 0; i < g->n; i++) {
        if (!g->r[i]) continue;
        for (int s = 0; g->n > 1 && suffixes[s]; s++)
            if (check_copies(g, which, i, suffixes[s], e)) return -1;
        if (mt_ckpt_check_all_read(g->r[i], which, e)) return -1;
    }
    return 0;
}

/* ---- reading only a rank's own slices ---- */

/* Rank i's distributed-optimizer shards, opened at the first use: 1, 0 when it has none, -1 on error. */
static int rank_shards(mt_ckpt_global *g, int i, mt_err *e)
{
    if (!g->shards) {
        g->shards = mt_xcalloc((size_t)g->n, sizeof *g->shards);
        g->shards_state = mt_xcalloc((size_t)g->n, 1);
    }
    if (g->shards_state[i]) return g->shards_state[i] > 0;
    json_t *d = json_object_get(json_object_get(mt_ckpt_meta(g->r[i]), "optimizer"), "distributed");
    if (!d) {
        g->shards_state[i] = -1;
        return 0;
    }
    if (mt_dist_shards_open(&g->shards[i], mt_ckpt_dir(g->r[i]), d, g->l[i].numel, e)) return -1;
    g->shards_state[i] = 1;
    return 1;
}

int mt_ckpt_global_has_master(mt_ckpt_global *g, mt_err *e)
{
    for (int i = 0; i < g->n; i++) {
        if (!g->r[i]) continue;
        int s = rank_shards(g, i, e);
        if (s <= 0) return s;
        if (!g->shards[i].has_param) return 0;
    }
    return 1;
}

/* Elements first .. first + count - 1 of rank i's tensor ls (its slice) into dst. */
static int rank_read(mt_ckpt_global *g, int which, int i, const mt_layout_tensor *ls, const char *suffix, size_t first,
                     size_t count, float *dst, mt_err *e)
{
    if (!count) return 0;
    int moment = suffix && !strcmp(suffix, ".exp_avg_sq") ? 1 : 0;
    if (which == MT_CKPT_MASTER || (which == MT_CKPT_OPTIM && !mt_ckpt_has_optim(g->r[i]))) {
        int s = rank_shards(g, i, e);
        if (s < 0) return -1;
        if (!s) return which == MT_CKPT_MASTER ? mt_err_set(e, "%s: no optimizer shards", mt_ckpt_dir(g->r[i]))
                                               : mt_ckpt_read_tensor(g->r[i], which, "", 0, NULL, dst, e);
        return mt_dist_shards_read(&g->shards[i], which == MT_CKPT_MASTER ? 2 : moment, ls->offset + first, count, dst,
                                   &g->bytes_read, e);
    }
    const mt_st_file *f = mt_ckpt_file(g->r[i], which);
    char nm[200];
    local_name(nm, sizeof nm, ls->name, suffix);
    const mt_st_info *t = f ? mt_st_find(f, nm) : NULL;
    if (!f) return mt_ckpt_read_tensor(g->r[i], which, nm, 0, NULL, dst, e);   /* the message */
    if (!t) return mt_err_set(e, "%s: missing tensor '%s'", f->path, nm);
    int same = t->ndim == ls->ndim;
    for (int k = 0; same && k < ls->ndim; k++) same = t->shape[k] == ls->local_shape[k];
    if (!same) {
        char have[128], want[128];
        return mt_err_set(e, "%s: tensor '%s' has shape %s, this model needs %s", f->path, nm,
                          mt_st_shape_str(have, sizeof have, t->ndim, t->shape),
                          mt_st_shape_str(want, sizeof want, ls->ndim, ls->local_shape));
    }
    if (!g->fd) {
        g->fd = mt_xmalloc((size_t)g->n * 2 * sizeof *g->fd);
        for (int k = 0; k < 2 * g->n; k++) g->fd[k] = -1;
    }
    return mt_st_pread_f32(f, &g->fd[2 * i + which], t, first, count, dst, &g->bytes_read, e);
}

/* Reads that continue one another (the same rank, the next elements, the next place in dst) are one. */
typedef struct pending {
    int i;
    const mt_layout_tensor *ls;
    size_t first, count;
    float *dst;
} pending;

static int flush(mt_ckpt_global *g, int which, const char *suffix, pending *p, mt_err *e)
{
    int rc = p->count ? rank_read(g, which, p->i, p->ls, suffix, p->first, p->count, p->dst, e) : 0;
    p->count = 0;
    return rc;
}

static int add_read(mt_ckpt_global *g, int which, const char *suffix, pending *p, int i, const mt_layout_tensor *ls,
                    size_t first, size_t count, float *dst, mt_err *e)
{
    if (p->count && p->i == i && p->ls == ls && p->first + p->count == first && p->dst + p->count == dst) {
        p->count += count;
        return 0;
    }
    if (flush(g, which, suffix, p, e)) return -1;
    *p = (pending){i, ls, first, count, dst};
    return 0;
}

/* The index along ls's partition dimension of global index gi, or -1 when ls does not hold it. */
static int64_t local_index(const mt_layout_tensor *ls, int64_t gi)
{
    int pd = ls->partition_dim < 0 ? 0 : ls->partition_dim;
    if (gi >= ls->global_shape[pd]) return -1;
    if (ls->partition_dim < 0) return gi;
    int chunks = ls->partition_chunks > 1 ? ls->partition_chunks : 1;
    int64_t chunk = ls->global_shape[pd] / chunks, per = ls->local_shape[pd] / chunks, in = gi % chunk;
    if (in < ls->partition_offset || in >= ls->partition_offset + per) return -1;
    return gi / chunk * per + in - ls->partition_offset;
}

/* The global index of t's local index li along its partition dimension. */
static int64_t global_index(const mt_layout_tensor *t, int64_t li)
{
    if (t->partition_dim < 0) return li;
    int pd = t->partition_dim, chunks = t->partition_chunks > 1 ? t->partition_chunks : 1;
    int64_t per = t->local_shape[pd] / chunks;
    return li / per * (t->global_shape[pd] / chunks) + t->partition_offset + li % per;
}

int mt_ckpt_global_read_part(mt_ckpt_global *g, int which, const mt_layout_tensor *t, const char *suffix, size_t first,
                             size_t count, float *dst, mt_err *e)
{
    const mt_layout_tensor *w = mt_layout_find(&g->whole, t->whole_name);
    if (!w) return mt_err_set(e, "%s: the model has no tensor '%s'", mt_ckpt_dir(g->r[0]), t->whole_name);
    int vocab = w->kind == MT_T_WORD_EMB || w->kind == MT_T_OUTPUT;
    if (t->ndim != w->ndim || (!vocab && t->global_shape[0] != w->global_shape[0]) ||
        (t->ndim == 2 && t->global_shape[1] != w->global_shape[1]))
        return mt_err_set(e, "%s: tensor '%s' does not have the model's shape", mt_ckpt_dir(g->r[0]), t->whole_name);
    /* the ranks that hold the tensor; of a replicated one, the first */
    const mt_layout_tensor **src = mt_xcalloc((size_t)g->n, sizeof *src);
    int any = 0;
    for (int i = 0; i < g->n; i++) {
        src[i] = g->r[i] ? mt_layout_get_expert(&g->l[i], w->layer, w->kind, w->expert) : NULL;
        if (src[i] && holder(g, i, src[i]) != i) src[i] = NULL;   /* a copy of a slice another directory gives */
        any |= src[i] != NULL;
    }
    int rc = any ? 0 : mt_err_set(e, "%s: no rank holds '%s'", mt_ckpt_dir(g->r[0]), t->whole_name);
    int64_t cols = t->ndim == 2 ? t->local_shape[1] : 1;
    pending p = {0};
    for (size_t at = first; at < first + count && !rc;) {
        int64_t row = (int64_t)(at / (size_t)cols), c0 = (int64_t)(at % (size_t)cols);
        int64_t c1 = cols < c0 + (int64_t)(first + count - at) ? cols : c0 + (int64_t)(first + count - at);
        float *out = dst + (at - first);
        if (t->partition_dim == 1) {   /* columns: from each rank holding some of [off + c0, off + c1) */
            int64_t a = t->partition_offset + c0, b = t->partition_offset + c1;
            for (int i = 0; i < g->n && !rc; i++) {
                const mt_layout_tensor *ls = src[i];
                if (!ls) continue;
                int64_t sa = ls->partition_dim == 1 ? ls->partition_offset : 0, sc = ls->ndim == 2 ? ls->local_shape[1] : 1;
                int64_t lo = a > sa ? a : sa, hi = b < sa + sc ? b : sa + sc;
                if (lo >= hi) continue;
                rc = add_read(g, which, suffix, &p, i, ls, (size_t)(row * sc + lo - sa), (size_t)(hi - lo),
                              out + (lo - a), e);
            }
        } else {   /* a row (or a part of one) of the slice: from the rank holding that global row */
            int64_t gr = global_index(t, row);
            int i;
            int64_t lr = -1;
            for (i = 0; i < g->n; i++)
                if (src[i] && (lr = local_index(src[i], gr)) >= 0) break;
            if (i == g->n) {
                if (!vocab) rc = mt_err_set(e, "%s: no rank holds row %lld of '%s'", mt_ckpt_dir(g->r[0]), (long long)gr, t->whole_name);
                else memset(out, 0, sizeof(float) * (size_t)(c1 - c0));   /* padding beyond the saved rows */
            } else {
                rc = add_read(g, which, suffix, &p, i, src[i], (size_t)(lr * cols + c0), (size_t)(c1 - c0), out, e);
            }
        }
        at += (size_t)(c1 - c0);
    }
    if (!rc) rc = flush(g, which, suffix, &p, e);
    free(src);
    return rc;
}

int mt_ckpt_global_check_names(mt_ckpt_global *g, int which, const char *const *suffixes, mt_err *e)
{
    static const char *const none[] = {"", NULL};
    if (!suffixes) suffixes = none;
    char nm[200];
    for (int i = 0; i < g->n; i++) {
        if (!g->r[i]) continue;
        const mt_st_file *f = mt_ckpt_file(g->r[i], which);
        int unread = 0, first = -1;
        for (int j = 0; f && j < f->n; j++) {
            int known = 0;
            for (int k = 0; k < g->l[i].n && !known; k++)
                for (int s = 0; suffixes[s] && !known; s++) {
                    local_name(nm, sizeof nm, g->l[i].t[k].name, suffixes[s]);
                    known = !strcmp(nm, f->t[j].name);
                }
            if (!known && first < 0) first = j;
            unread += !known;
        }
        if (unread == 1) return mt_err_set(e, "%s: unexpected tensor '%s'", f->path, f->t[first].name);
        if (unread) return mt_err_set(e, "%s: unexpected tensor '%s' (and %d more)", f->path, f->t[first].name, unread - 1);
    }
    return 0;
}
