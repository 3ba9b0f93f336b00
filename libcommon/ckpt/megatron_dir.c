/* megatron_dir.c: a Megatron-LM torch-format checkpoint read as whole tensors (see megatron_dir.h). */
#include "ckpt/megatron_dir.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ckpt/checkpoint.h"
#include "ckpt/megatron_distopt.h"
#include "io/fsutil.h"
#include "mt_base.h"

/* A rank's model_optim_rng.pt: mp_rank_TT, _PPP with pipeline stages, _EEE (expert rank x) with expert
 * parallelism (ep > 1), as Megatron's get_checkpoint_name names it. */
static char *rank_path(const mt_meg_dir *m, int64_t it, int t, int p, int pp, int x, int ep)
{
    char sub[64], *s, *f;
    if (it == MT_CKPT_RELEASE) snprintf(sub, sizeof sub, "release");
    else snprintf(sub, sizeof sub, "iter_%07lld", (long long)it);
    char rank[32];
    if (pp > 1) snprintf(rank, sizeof rank, "mp_rank_%02d_%03d", t, p);
    else snprintf(rank, sizeof rank, "mp_rank_%02d", t);
    if (ep > 1) snprintf(rank + strlen(rank), sizeof rank - strlen(rank), "_%03d", x);
    s = mt_path_join(m->dir, sub);
    f = mt_path_join(s, rank);
    free(s);
    s = mt_path_join(f, "model_optim_rng.pt");
    free(f);
    return s;
}

int mt_meg_dir_is(const char *dir)
{
    int64_t it;
    mt_err e = {0};
    if (mt_ckpt_latest(dir, &it, &e) != 0) return 0;
    mt_meg_dir m = {.dir = (char *)dir};
    char *a = rank_path(&m, it, 0, 0, 1, 0, 1), *b = rank_path(&m, it, 0, 0, 2, 0, 1), *c = rank_path(&m, it, 0, 0, 2, 0, 2);
    int yes = access(a, F_OK) == 0 || access(b, F_OK) == 0 || access(c, F_OK) == 0;
    free(a);
    free(b);
    free(c);
    return yes;
}

static int int_attr(const mt_pk *args, const char *key, int dflt)
{
    const mt_pk *v = mt_pk_get(args, key);
    return v && v->kind == MT_PK_INT ? (int)v->i : dflt;
}

/* Megatron-Core's GPTModel names (spec 5.4) as the legacy ones; NULL for entries that are not weights. */
static const char *legacy_name(const char *n, int tied, char *out, size_t cap)
{
    static const char *const map[][2] = {
        {"self_attention.linear_qkv.layer_norm_", "input_layernorm."},
        {"mlp.linear_fc1.layer_norm_", "post_attention_layernorm."},
        {"pre_mlp_layernorm.", "post_attention_layernorm."},
        {"self_attention.linear_qkv.", "self_attention.query_key_value."},
        {"self_attention.linear_proj.", "self_attention.dense."},
        {"mlp.linear_fc1.", "mlp.dense_h_to_4h."},
        {"mlp.linear_fc2.", "mlp.dense_4h_to_h."},
        {"input_layernorm.", "input_layernorm."},
        /* a mixture of experts' (MoELayer: the router, SequentialMLP's experts, the shared expert) */
        {"mlp.router.", "mlp.router."},
        {"mlp.shared_experts.linear_fc1.", "mlp.shared_experts.dense_h_to_4h."},
        {"mlp.shared_experts.linear_fc2.", "mlp.shared_experts.dense_4h_to_h."},
        {"mlp.shared_experts.gate_weight", "mlp.shared_experts.gate_weight"},
    };
    size_t l = strlen(n);
    if (l >= 12 && !strcmp(n + l - 12, "_extra_state")) return NULL;
    if (!strncmp(n, "embedding.", 10)) snprintf(out, cap, "language_model.%s", n);
    else if (!strncmp(n, "decoder.final_layernorm.", 24)) snprintf(out, cap, "language_model.encoder.%s", n + 8);
    else if (!strcmp(n, "output_layer.weight"))
        snprintf(out, cap, "%s", tied ? "word_embeddings_for_head.weight" : "language_model.output_layer.weight");
    else if (!strncmp(n, "decoder.layers.", 15)) {
        const char *rest = strchr(n + 15, '.');
        if (!rest) return n;
        /* an expert's matrices: SequentialMLP's local_experts.J.linear_fc1.weight, or TEGroupedMLP's
         * experts.linear_fc1.weightJ */
        int j, at = 0;
        char fc[16];
        if ((sscanf(rest + 1, "mlp.experts.local_experts.%d.linear_%15[fc12].weight%n", &j, fc, &at) == 2 ||
             sscanf(rest + 1, "mlp.experts.linear_%15[fc12].weight%d%n", fc, &j, &at) == 2) &&
            !rest[1 + at] && j >= 0 && (!strcmp(fc, "fc1") || !strcmp(fc, "fc2"))) {
            snprintf(out, cap, "language_model.encoder.layers.%.*s.mlp.experts.local_experts.%d.%s.weight",
                     (int)(rest - n - 15), n + 15, j, fc[2] == '1' ? "dense_h_to_4h" : "dense_4h_to_h");
            return out;
        }
        for (size_t i = 0; i < sizeof map / sizeof *map; i++) {
            size_t k = strlen(map[i][0]);
            if (!strncmp(rest + 1, map[i][0], k)) {
                /* layer_norm_weight -> weight */
                snprintf(out, cap, "language_model.encoder.layers.%.*s.%s%s", (int)(rest - n - 15), n + 15, map[i][1],
                         rest + 1 + k);
                return out;
            }
        }
        return n;
    } else return n;
    return out;
}

/* The legacy model's names of older versions (before checkpoint_version 2.0: language_model.transformer,
 * layers.N.attention) as the later ones. */
static const char *old_name(const char *n, char *out, size_t cap)
{
    static const char tr[] = "language_model.transformer.";
    if (strncmp(n, tr, sizeof tr - 1)) return n;
    const char *rest = n + sizeof tr - 1, *dot = !strncmp(rest, "layers.", 7) ? strchr(rest + 7, '.') : NULL;
    if (dot && !strncmp(dot + 1, "attention.", 10))
        snprintf(out, cap, "language_model.encoder.%.*sself_%s", (int)(dot + 1 - rest), rest, dot + 1);
    else snprintf(out, cap, "language_model.encoder.%s", rest);
    return out;
}

/* The model's tensors under their dotted names (nested dicts joined with '.'), those of model chunk c of the
 * interleaved schedule (c >= 0) prefixed "model<c>." as model/layout.h names them. */
static int flatten(mt_meg_rank *r, const mt_pk *d, const char *prefix, int core, int tied, int chunk, int depth,
                   mt_err *e)
{
    if (depth > 8) return mt_err_set(e, "%s: model state dict nested too deep", r->path);
    for (size_t i = 0; i < d->len; i++) {
        const mt_pk *k = d->items[i], *v = d->vals[i];
        if (k->kind != MT_PK_STR) return mt_err_set(e, "%s: model state dict key that is not a string", r->path);
        char name[512], out[1024];
        snprintf(name, sizeof name, "%s%s", prefix, k->s);
        if (v->kind == MT_PK_DICT) {
            char p[512];
            snprintf(p, sizeof p, "%s.", name);
            if (flatten(r, v, p, core, tied, chunk, depth + 1, e)) return -1;
            continue;
        }
        const char *ln = core ? legacy_name(name, tied, out, sizeof out) : old_name(name, out, sizeof out);
        size_t l = strlen(name);
        if (!ln || (l >= 12 && !strcmp(name + l - 12, "_extra_state"))) continue;   /* Transformer Engine's */
        if (v->kind != MT_PK_TENSOR)
            return mt_err_set(e, "%s: model key '%s' is not a tensor", r->path, name);
        r->names = realloc(r->names, (size_t)(r->n + 1) * sizeof *r->names);
        r->t = realloc(r->t, (size_t)(r->n + 1) * sizeof *r->t);
        if (!r->names || !r->t) mt_die("out of memory");
        char chunked[1100];
        if (chunk >= 0) snprintf(chunked, sizeof chunked, "model%d.%s", chunk, ln), ln = chunked;
        r->names[r->n] = mt_xstrdup(ln);
        r->t[r->n++] = v->t;
        if (core && strstr(name, ".mlp.experts.linear_fc")) r->grouped_experts = 1;
    }
    return 0;
}

/* A rank's model (its file loaded): the keys, the QKV order, its tensors. */
static int rank_model(mt_meg_dir *m, mt_meg_rank *r, mt_err *e)
{
    const mt_pk *root = r->ck.root, *model = mt_pk_get(root, "model");
    if (root->kind != MT_PK_DICT) return mt_err_set(e, "%s: not a dict of a checkpoint", r->path);
    /* the interleaved schedule's model chunks: model0 ... model<vp-1> */
    const mt_pk *chunks[MT_MEG_MAX_VP] = {0};
    int nc = m->vp > 1 ? m->vp : 1;
    for (int c = 0; c < nc && m->vp > 1; c++) {
        char key[32];
        snprintf(key, sizeof key, "model%d", c);
        chunks[c] = mt_pk_get(root, key);
        if (!chunks[c] || chunks[c]->kind != MT_PK_DICT)
            return mt_err_set(e, "%s: no key '%s' (a dict: model chunk %d of %d the args give)", r->path, key, c, m->vp);
    }
    if (m->vp > 1) model = chunks[0];
    else if (!model && mt_pk_get(root, "model0"))
        return mt_err_set(e, "%s: model chunks (model0, model1, ...) but no virtual_pipeline_model_parallel_size in the args",
                          r->path);
    else chunks[0] = model;
    if (!model || model->kind != MT_PK_DICT) return mt_err_set(e, "%s: no key 'model' (a dict)", r->path);
    const mt_pk *v = mt_pk_get(root, "checkpoint_version");
    double ver = v && v->kind == MT_PK_FLOAT ? v->f : v && v->kind == MT_PK_INT ? (double)v->i : 0;
    if (ver != 0 && ver != 1 && ver < 2.0)
        return mt_err_set(e, "%s: checkpoint_version %g: not a version Megatron-LM wrote (0, 1, 2 or 3)", r->path, ver);
    r->version = ver;
    const mt_pk *untie = mt_pk_get(m->args, "untie_embeddings_and_output_weights");
    int tied = !(untie && untie->kind == MT_PK_BOOL && untie->b);
    int core = !mt_pk_get(model, "language_model");
    r->core = core;
    r->n = 0;
    for (int c = 0; c < nc; c++)
        if (flatten(r, chunks[c], "", core, tied, m->vp > 1 ? c : -1, 0, e)) return -1;
    r->used = mt_xcalloc((size_t)(r->n ? r->n : 1), 1);
    return 0;
}

/* With only the held (tensor rank, expert rank) pairs saved: every stage has a file of each tensor rank (its
 * dense slices) and for each expert rank one of each expert tensor slice (tensor rank % etp: its slices of the
 * experts); a missing one is named by its expert rank 0's (or that slice's first tensor rank's) file. */
static int check_cover(const mt_meg_dir *m, mt_err *e)
{
    unsigned char *present = mt_xmalloc((size_t)m->n);
    for (int i = 0; i < m->n; i++) present[i] = !m->r[i].absent;
    int p, t, x, gap = mt_ckpt_held_gap(present, m->tp, m->pp, m->ep, m->etp, &p, &t, &x);
    free(present);
    if (!gap) return 0;
    if (x < 0)
        return mt_err_set(e, "%s: missing: no file of tensor rank %d (nor of another expert rank's)",
                          m->r[(p * m->ep) * m->tp + t].path, t);
    return mt_err_set(e, "%s: missing: no file of expert rank %d%s (nor of another tensor rank's)",
                      m->r[(p * m->ep + x) * m->tp + t].path, x, m->etp > 1 ? " and its expert tensor slice" : "");
}

int mt_meg_dir_open(mt_meg_dir *m, const char *dir, mt_err *e)
{
    memset(m, 0, sizeof *m);
    int64_t it;
    int rc = mt_ckpt_latest(dir, &it, e);
    if (rc == 1) return mt_err_set(e, "%s: no %s: not a Megatron-LM checkpoint directory", dir, MT_CKPT_TRACKER);
    if (rc) return -1;
    m->dir = mt_xstrdup(dir);
    m->iteration = it;
    /* the first rank names the sizes */
    /* mp_rank_00, or mp_rank_00_000 (a stage or an expert rank: the args say which), or mp_rank_00_000_000 */
    mt_meg_rank first = {.path = rank_path(m, it, 0, 0, 1, 0, 1)};
    for (int k = 1; k < 3 && access(first.path, F_OK); k++) {
        free(first.path);
        first.path = rank_path(m, it, 0, 0, 2, 0, k);
    }
    if (mt_tckpt_load(&first.ck, first.path, e)) {
        free(first.path);
        free(m->dir);
        return -1;
    }
    const mt_pk *args = mt_pk_get(first.ck.root, "args");
    if (!args || args->kind != MT_PK_OBJECT) {
        mt_err_set(e, "%s: no key 'args' (an argparse.Namespace)", first.path);
        mt_tckpt_close(&first.ck);
        free(first.path);
        free(m->dir);
        return -1;
    }
    m->args = args;
    m->tp = int_attr(args, "tensor_model_parallel_size", 1);
    m->pp = int_attr(args, "pipeline_model_parallel_size", 1);
    m->vp = int_attr(args, "virtual_pipeline_model_parallel_size", 1);
    int ep = int_attr(args, "expert_model_parallel_size", 1);
    int etp = int_attr(args, "expert_tensor_parallel_size", 0);   /* absent (older Megatron), None, or 0 (mt's
                                                                        exports before it wrote tp): tp */
    if (etp <= 0) etp = m->tp;
    rc = 0;
    if (m->tp < 1 || m->pp < 1 || m->tp > 4096 || m->pp > 4096)
        rc = mt_err_set(e, "%s: args: tensor-parallel size %d, pipeline size %d", first.path, m->tp, m->pp);
    else if (m->vp < 1 || m->vp > MT_MEG_MAX_VP)
        rc = mt_err_set(e, "%s: args: virtual_pipeline_model_parallel_size %d (1 to %d)", first.path, m->vp, MT_MEG_MAX_VP);
    else if (ep < 1 || ep > 4096)
        rc = mt_err_set(e, "%s: args: expert_model_parallel_size %d", first.path, ep);
    else if (etp > m->tp || m->tp % etp)
        rc = mt_err_set(e, "%s: args: expert_tensor_parallel_size %d does not divide tensor_model_parallel_size %d",
                        first.path, etp, m->tp);
    m->ep = ep;
    m->etp = etp;
    m->n = m->tp * m->pp * m->ep;
    m->r = mt_xcalloc((size_t)m->n, sizeof *m->r);
    m->r[0] = first;
    m->root = first.ck.root;
    char *want = rank_path(m, it, 0, 0, m->pp, 0, m->ep);
    if (!rc && strcmp(want, first.path))
        rc = mt_err_set(e, "%s: pipeline size %d and expert-parallel size %d in its args, but the first rank's file is %s",
                        first.path, m->pp, m->ep, want);
    free(want);
    if (!rc) rc = rank_model(m, &m->r[0], e);
    /* an expert tensor size below tp with expert parallelism: only the (tensor rank, expert rank) pairs
     * some rank held were saved (Megatron's ranks of data-parallel or expert-data-parallel rank 0) */
    int held_only = m->ep > 1 && etp < m->tp;
    for (int i = 1; i < m->n && !rc; i++) {
        mt_meg_rank *r = &m->r[i];
        r->path = rank_path(m, it, i % m->tp, i / (m->tp * m->ep), m->pp, (i / m->tp) % m->ep, m->ep);
        if (access(r->path, F_OK) && held_only) r->absent = 1;
        else if (access(r->path, F_OK))
            rc = mt_err_set(e, "%s: missing (tensor-parallel size %d, pipeline size %d, expert-parallel size %d in the args)",
                            r->path, m->tp, m->pp, m->ep);
        else rc = mt_tckpt_load(&r->ck, r->path, e) || rank_model(m, r, e) ? -1 : 0;
    }
    if (!rc && held_only) rc = check_cover(m, e);
    if (rc) mt_meg_dir_close(m);
    return rc;
}

void mt_meg_dir_close(mt_meg_dir *m)
{
    for (int i = 0; i < m->n; i++) {
        mt_meg_rank *r = &m->r[i];
        if (r->ck.root || r->ck.zip.n) mt_tckpt_close(&r->ck);
        if (r->has_dopt) mt_tckpt_close(&r->dopt);
        for (int j = 0; j < r->n; j++) free(r->names[j]);
        free(r->names);
        free(r->t);
        free(r->used);
        free(r->exp_avg);
        free(r->exp_avg_sq);
        free(r->master);
        free(r->copy);
        free(r->path);
        if (m->l) mt_layout_free(&m->l[i]);
    }
    free(m->l);
    free(m->r);
    free(m->dir);
    memset(m, 0, sizeof *m);
}

static int find(const mt_meg_rank *r, const char *name)
{
    for (int i = 0; i < r->n; i++)
        if (!strcmp(r->names[i], name)) return i;
    return -1;
}

static void shape_str(char *b, size_t cap, int ndim, const int64_t *s)
{
    if (ndim == 1) snprintf(b, cap, "[%lld]", (long long)s[0]);
    else snprintf(b, cap, "[%lld, %lld]", (long long)s[0], (long long)s[1]);
}

/* Marks rank i's tensors of which an earlier rank of its stage holds the same slice (a replicated tensor on
 * every tensor rank, the dense slices on every expert rank, an expert slice on every tensor rank of it): copies,
 * compared with the one read (and their optimizer state is that one's). */
static void mark_copies(mt_meg_dir *m, int i)
{
    const mt_layout *l = &m->l[i];
    mt_meg_rank *r = &m->r[i];
    r->copy = mt_xcalloc((size_t)(l->n ? l->n : 1), 1);
    int stage = i / (m->tp * m->ep);
    for (int j = 0; j < l->n; j++) {
        const mt_layout_tensor *lt = &l->t[j];
        for (int q = stage * m->tp * m->ep; q < i && !r->copy[j]; q++) {
            if (m->r[q].absent) continue;
            const mt_layout_tensor *o = mt_layout_find(&m->l[q], lt->name);
            r->copy[j] = o && !strcmp(o->whole_name, lt->whole_name) && o->partition_offset == lt->partition_offset &&
                         o->numel == lt->numel;
        }
    }
}

int mt_meg_dir_layout(mt_meg_dir *m, const mt_model_arch *a, mt_err *e)
{
    m->l = mt_xcalloc((size_t)m->n, sizeof *m->l);
    for (int i = 0; i < m->n; i++) {
        /* rank i: tensor rank i % tp, expert rank (i / tp) % ep, stage i / (tp ep) */
        int grouped = m->etp < m->tp;   /* the experts split over etp ranks, slice tensor rank % etp */
        mt_layout_part part = {i % m->tp, m->tp, i / (m->tp * m->ep), m->pp, m->vp, (i / m->tp) % m->ep, m->ep,
                               grouped ? (i % m->tp) % m->etp : 0, grouped ? m->etp : 0};
        if (mt_layout_build(a, &part, &m->l[i], e)) return mt_err_prefix(e, "%s", m->r[i].path);
        mt_meg_rank *r = &m->r[i];
        if (r->absent) continue;
        mark_copies(m, i);
        for (int j = 0; j < m->l[i].n; j++) {
            const mt_layout_tensor *lt = &m->l[i].t[j];
            int k = find(r, lt->name);
            if (k < 0) return mt_err_set(e, "%s: no tensor '%s' in 'model'", r->path, lt->name);
            const mt_pk_tensor *t = r->t[k];
            int ok = t->ndim == lt->ndim;
            for (int d = 0; ok && d < lt->ndim; d++) ok = t->shape[d] == lt->local_shape[d];
            if (!ok) {
                char want[64], got[64] = "[?]";
                shape_str(want, sizeof want, lt->ndim, lt->local_shape);
                if (t->ndim == 1 || t->ndim == 2) shape_str(got, sizeof got, t->ndim, t->shape);
                return mt_err_set(e, "%s: tensor '%s' has shape %s, the args give %s", r->path, lt->name, got, want);
            }
            if (t->dtype != MT_ST_F32 && t->dtype != MT_ST_BF16 && t->dtype != MT_ST_F16)
                return mt_err_set(e, "%s: tensor '%s' is %s, not a float type", r->path, lt->name, mt_st_dtype_name(t->dtype));
        }
    }
    return 0;
}

/* A tensor's elements as floats (it may be a view: transformers' converter saves transposed slices of one
 * storage). */
static int tensor_floats(mt_tckpt *ck, const mt_pk_tensor *t, float *dst, mt_err *e)
{
    int64_t cnt = mt_tckpt_numel(t);
    if (t->dtype == MT_ST_F32) return mt_tckpt_tensor_read(ck, t, dst, e);
    uint16_t *h = mt_xmalloc((size_t)(cnt ? cnt : 1) * sizeof *h);
    int rc = mt_tckpt_tensor_read(ck, t, h, e);
    for (int64_t j = 0; j < cnt && !rc; j++) dst[j] = t->dtype == MT_ST_BF16 ? mt_bf16_to_f32(h[j]) : mt_f16_to_f32(h[j]);
    free(h);
    return rc;
}

enum { W_MODEL, W_EXP_AVG, W_EXP_AVG_SQ };

/* The rows of a rank's query_key_value weight or bias (and their moments) from the order of checkpoints
 * older than version 2.0 to mt's and Megatron's since, [np, 3, hn] (as Megatron's checkpointing.py
 * fix_query_key_value_ordering does on load): version 0 held [3, np, hn], version 1 [np, hn, 3]. */
static int qkv_order(mt_meg_dir *m, const mt_meg_rank *r, const mt_pk_tensor *t, float *x, mt_err *e)
{
    const mt_pk *kv = mt_pk_get(m->args, "kv_channels"), *h = mt_pk_get(m->args, "hidden_size"),
                *nh = mt_pk_get(m->args, "num_attention_heads");
    int64_t hn = kv && kv->kind == MT_PK_INT && kv->i > 0 ? kv->i
                 : h && nh && h->kind == MT_PK_INT && nh->kind == MT_PK_INT && nh->i > 0 ? h->i / nh->i
                                                                                         : 0;
    int64_t rows = t->shape[0], cols = t->ndim == 2 ? t->shape[1] : 1;
    if (hn < 1 || rows % (3 * hn)) return mt_err_set(e, "%s: query_key_value rows %lld are not 3 x heads x %lld", r->path,
                                                     (long long)rows, (long long)hn);
    int64_t np = rows / (3 * hn);
    float *y = mt_xmalloc((size_t)(rows * cols) * sizeof *y);
    for (int64_t hd = 0; hd < np; hd++)
        for (int64_t s = 0; s < 3; s++)
            for (int64_t d = 0; d < hn; d++) {
                int64_t src = r->version == 0 ? (s * np + hd) * hn + d : (hd * hn + d) * 3 + s;
                memcpy(y + ((hd * 3 + s) * hn + d) * cols, x + src * cols, (size_t)cols * sizeof *y);
            }
    memcpy(x, y, (size_t)(rows * cols) * sizeof *y);
    free(y);
    return 0;
}

/* A rank's slice as floats: the weights (the fp32 main parameters where the optimizer holds them), or a
 * moment. */
static int slice_floats(mt_meg_dir *m, int i, int k, int which, float *dst, mt_err *e)
{
    mt_meg_rank *r = &m->r[i];
    const mt_pk_tensor *t = which == W_EXP_AVG ? (r->exp_avg ? r->exp_avg[k] : NULL)
                            : which == W_EXP_AVG_SQ ? (r->exp_avg_sq ? r->exp_avg_sq[k] : NULL)
                            : r->master && r->master[k] ? r->master[k]
                                                        : r->t[k];
    if (!t) return mt_err_set(e, "%s: no optimizer state of '%s'", r->path, r->names[k]);
    if (tensor_floats(r->has_dopt && t != r->t[k] ? &r->dopt : &r->ck, t, dst, e))
        return mt_err_prefix(e, "%s: '%s'", r->path, r->names[k]);
    if (which == W_MODEL) r->used[k] = 1;
    size_t l = strlen(r->names[k]);
    if (r->version < 2.0 && l > 22 && strstr(r->names[k] + l - 23, "query_key_value.") &&
        qkv_order(m, r, t, dst, e))
        return -1;
    return 0;
}

/* The values v of rank r's tensor k as that rank holds them: where its optimizer keeps no fp32 main copy of it
 * (a distributed optimizer's state saved in another directory) the model's bf16 or fp16 tensor, so v rounded
 * to that dtype. */
static void held_as(const mt_meg_rank *r, int k, float *v, size_t n)
{
    mt_st_dtype dt = r->t[k]->dtype;
    if ((r->master && r->master[k]) || (dt != MT_ST_BF16 && dt != MT_ST_F16)) return;
    for (size_t j = 0; j < n; j++) v[j] = dt == MT_ST_BF16 ? mt_bf16_to_f32(mt_f32_to_bf16(v[j])) : mt_f16_to_f32(mt_f32_to_f16(v[j]));
}

static int read_which(mt_meg_dir *m, int which, const char *name, int ndim, const int64_t *shape, float *dst, mt_err *e)
{
    const mt_pk *untie = mt_pk_get(m->args, "untie_embeddings_and_output_weights");
    int tied = !(untie && untie->kind == MT_PK_BOOL && untie->b);
    if (!m->l) return mt_err_set(e, "%s: the model's layout is not known yet", m->dir);
    int found = 0, rc = 0;
    for (int i = 0; i < m->n && !rc; i++)
        for (int j = 0; j < m->l[i].n && !rc && !m->r[i].absent; j++) {
            const mt_layout_tensor *lt = &m->l[i].t[j];
            if (strcmp(lt->whole_name, name) || (lt->kind == MT_T_OUTPUT && tied)) continue;
            if (lt->partition_dim < 0 && found) continue;   /* replicated: the first rank's; the others compared below */
            if (m->r[i].copy[j]) continue;                 /* another expert or tensor rank's copy: likewise */
            if (!found) {
                /* the word embeddings may be asked for with more rows (a tensor-parallel target's padding): zero */
                int more = (lt->kind == MT_T_WORD_EMB || lt->kind == MT_T_OUTPUT) && ndim == 2 && shape[0] > lt->global_shape[0];
                int ok = lt->ndim == ndim;
                for (int d = 0; ok && d < ndim; d++) ok = lt->global_shape[d] == shape[d] || (d == 0 && more);
                if (ok && more)
                    memset(dst + lt->global_shape[0] * shape[1], 0,
                           (size_t)((shape[0] - lt->global_shape[0]) * shape[1]) * sizeof(float));
                if (!ok) return mt_err_set(e, "%s: tensor '%s' is not of the shape asked for", m->dir, name);
            }
            found = 1;
            float *s = mt_xmalloc((lt->numel ? lt->numel : 1) * sizeof(float));
            rc = slice_floats(m, i, find(&m->r[i], lt->name), which, s, e);
            if (!rc) mt_layout_place(lt, s, dst);
            free(s);
        }
    if (!found && !rc) return mt_err_set(e, "%s: no tensor '%s' in the layout of its args", m->dir, name);
    /* the other ranks' copies of a replicated tensor, and the last stage's copy of tied embeddings: equal
     * to the one read (the weights; the moments are the first copy's) */
    if (which != W_MODEL) return rc;
    int first = 1;
    for (int i = 0; i < m->n && !rc; i++)
        for (int j = 0; j < m->l[i].n && !rc && !m->r[i].absent; j++) {
            const mt_layout_tensor *lt = &m->l[i].t[j];
            int head = lt->kind == MT_T_OUTPUT && tied;   /* the head copy of tied embeddings */
            int copy = m->r[i].copy[j];
            if (strcmp(lt->whole_name, name) || (!head && !copy && lt->partition_dim >= 0)) continue;
            if (!head && !copy && first) {
                first = 0;
                continue;
            }
            float *s = mt_xmalloc((lt->numel ? lt->numel : 1) * sizeof(float)), *w = mt_xmalloc((lt->numel ? lt->numel : 1) * sizeof(float));
            int k = find(&m->r[i], lt->name);
            rc = slice_floats(m, i, k, W_MODEL, s, e);
            mt_layout_slice(lt, dst, w);
            if (!rc) held_as(&m->r[i], k, w, lt->numel);
            if (!rc && memcmp(s, w, lt->numel * sizeof(float)))
                rc = mt_err_set(e, "%s: '%s' differs from %s", m->r[i].path, lt->name,
                                head ? "the first stage's word embeddings" : copy ? "another rank's copy of its slice" : "the first rank's copy");
            free(s);
            free(w);
        }
    return rc;
}

int mt_meg_read(mt_meg_dir *m, const char *name, int ndim, const int64_t *shape, float *dst, mt_err *e)
{
    return read_which(m, W_MODEL, name, ndim, shape, dst, e);
}

int mt_meg_read_optim(mt_meg_dir *m, const char *name, const char *suffix, int ndim, const int64_t *shape, float *dst,
                      mt_err *e)
{
    if (!m->has_optim) return mt_err_set(e, "%s: no optimizer state", m->dir);
    int which = !strcmp(suffix, ".exp_avg") ? W_EXP_AVG : !strcmp(suffix, ".exp_avg_sq") ? W_EXP_AVG_SQ : -1;
    if (which < 0) return mt_err_set(e, "%s: no optimizer state '%s'", m->dir, suffix);
    return read_which(m, which, name, ndim, shape, dst, e);
}

/* ---- the optimizer's state ---- */

static double num(const mt_pk *v, double dflt)
{
    return !v ? dflt : v->kind == MT_PK_FLOAT ? v->f : v->kind == MT_PK_INT || v->kind == MT_PK_BOOL ? (double)(v->kind == MT_PK_INT ? v->i : v->b) : dflt;
}

/* The value of int key k in a dict (the optimizer state's parameter indices). */
static const mt_pk *get_int(const mt_pk *d, int64_t k)
{
    for (size_t i = 0; i < d->len; i++)
        if (d->items[i]->kind == MT_PK_INT && d->items[i]->i == k) return d->vals[i];
    return NULL;
}

/* A scalar: an int, a float, or a tensor of one element (torch keeps Adam's step and the loss scale so). */
static int scalar(mt_meg_rank *r, const mt_pk *v, const char *what, double *out, mt_err *e)
{
    if (v && (v->kind == MT_PK_INT || v->kind == MT_PK_FLOAT)) {
        *out = num(v, 0);
        return 0;
    }
    if (!v || v->kind != MT_PK_TENSOR || mt_tckpt_numel(v->t) != 1)
        return mt_err_set(e, "%s: optimizer: %s is not a number", r->path, what);
    unsigned char b[8];
    if (mt_tckpt_tensor_read(&r->ck, v->t, b, e)) return -1;
    float f;
    double d;
    int64_t i;
    switch (v->t->dtype) {
    case MT_ST_F32: memcpy(&f, b, 4); *out = f; return 0;
    case MT_ST_F64: memcpy(&d, b, 8); *out = d; return 0;
    case MT_ST_I64: memcpy(&i, b, 8); *out = (double)i; return 0;
    default: return mt_err_set(e, "%s: optimizer: %s is a tensor of %s", r->path, what, mt_st_dtype_name(v->t->dtype));
    }
}

int mt_meg_param_order(const mt_layout *l, int core, int grouped, const mt_layout_tensor **out)
{
    int n = 0;
    for (int j = 0; j < l->n; j++) {
        const mt_layout_tensor *t = &l->t[j];
        int proj = t->kind == MT_T_PROJ_W || t->kind == MT_T_PROJ_B;
        if (core && t->layer >= 0 && proj) continue;
        if (core && t->layer >= 0 && (j == 0 || l->t[j - 1].layer != t->layer))
            for (int q = j; q < l->n && l->t[q].layer == t->layer; q++)
                if (l->t[q].kind == MT_T_PROJ_W || l->t[q].kind == MT_T_PROJ_B) out[n++] = &l->t[q];
        if (core && !grouped && t->expert >= 0) {
            /* a layer's experts (all their linear_fc1, then all linear_fc2 in the layout): expert by expert */
            int end = j, lo = t->expert, hi = t->expert;
            for (; end < l->n && l->t[end].expert >= 0 && l->t[end].layer == t->layer; end++) {
                if (l->t[end].expert < lo) lo = l->t[end].expert;
                if (l->t[end].expert > hi) hi = l->t[end].expert;
            }
            for (int x = lo; x <= hi; x++)
                for (int q = j; q < end; q++)
                    if (l->t[q].expert == x) out[n++] = &l->t[q];
            j = end - 1;
            continue;
        }
        out[n++] = t;
    }
    return n;
}

/* A rank's parameters sorted into Megatron's param group kinds, [no weight decay][expert], each in
 * registration order, and how many of each the optimizer's groups have taken. */
typedef struct group_lists {
    const mt_layout_tensor **t[2][2];
    int n[2][2], used[2][2];
} group_lists;

/* A dynamic loss scaler's state (fp16), kept from the first rank. */
static int read_scaler(mt_meg_dir *m, mt_meg_rank *r, int rank, const mt_pk *scaler, mt_err *e)
{
    double sc, gt = 0, ht = 0;
    int rc = scalar(r, mt_pk_get(scaler, "scale"), "grad_scaler.scale", &sc, e);
    if (!rc && mt_pk_get(scaler, "growth_tracker")) rc = scalar(r, mt_pk_get(scaler, "growth_tracker"), "grad_scaler.growth_tracker", &gt, e);
    if (!rc && mt_pk_get(scaler, "hysteresis_tracker"))
        rc = scalar(r, mt_pk_get(scaler, "hysteresis_tracker"), "grad_scaler.hysteresis_tracker", &ht, e);
    if (!rc && rank == 0) {
        m->has_scaler = 1;
        m->scale = sc;
        m->growth_tracker = (int64_t)gt;
        m->hysteresis_tracker = (int64_t)ht;
    }
    return rc;
}

static int bool_attr(const mt_pk *args, const char *key)
{
    const mt_pk *v = mt_pk_get(args, key);
    return v && v->kind == MT_PK_BOOL && v->b;
}

/* Rank i's distrib_optim.pt beside its file, loaded once (a chained optimizer's two entries share it). */
static int load_dopt(mt_meg_rank *r, mt_err *e)
{
    if (r->has_dopt) return 0;
    char *dir = mt_xstrdup(r->path), *slash = strrchr(dir, '/');
    if (slash) *slash = 0;
    char *path = mt_path_join(dir, "distrib_optim.pt");
    free(dir);
    int rc = 0;
    if (access(path, F_OK))
        rc = mt_err_set(e, "%s: missing: the distributed optimizer's state (%s holds its param groups only); convert "
                           "with --no-load-optim", path, r->path);
    else if (!(rc = mt_tckpt_load(&r->dopt, path, e))) r->has_dopt = 1;
    free(path);
    return rc;
}

/* The distributed optimizer's state of rank i: its param groups (DistributedOptimizer.state_dict(), in
 * model_optim_rng.pt: Adam's hyperparameters and step, no parameters) and distrib_optim.pt beside its file,
 * each parameter's main copy and moments taken as views of the buffers' flat tensors where
 * ckpt/megatron_distopt.h lays them out. sel: -1 the only optimizer (every parameter); 0 or 1 the dense or the
 * experts' entry of a ChainedOptimizer, whose distrib_optim.pt is the list of the two states
 * (ChainedOptimizer.save_parameter_state), None where this directory's rank did not save that one (its
 * parameters' state is another directory's copy). */
static int dist_state(mt_meg_dir *m, int i, const mt_pk *groups, double *step, int sel, mt_err *e)
{
    mt_meg_rank *r = &m->r[i];
    const mt_layout *l = &m->l[i];
    for (size_t g = 0; g < groups->len; g++) {
        const mt_pk *gr = groups->items[g];
        if (gr->kind != MT_PK_DICT) return mt_err_set(e, "%s: optimizer param group %zu is not a dict", r->path, g);
        if (num(mt_pk_get(gr, "lr_mult"), 1) != 1 || num(mt_pk_get(gr, "is_decoupled_lr"), 0))
            return mt_err_set(e, "%s: optimizer param group %zu has its own learning rate: not read (convert with "
                                 "--no-load-optim)", r->path, g);
        if ((num(mt_pk_get(gr, "is_expert_parallel"), 0) != 0) != (sel == 1))
            return mt_err_set(e, "%s: optimizer param group %zu is%s of expert-parallel parameters, in the %s", r->path, g,
                              sel == 1 ? " not" : "", sel < 0 ? "only optimizer" : sel ? "experts' optimizer" : "dense one");
        if (g == 0 && sel <= 0) {
            const mt_pk *b = mt_pk_get(gr, "betas");
            if (b && b->kind == MT_PK_TUPLE && b->len == 2) m->beta1 = num(b->items[0], 0.9), m->beta2 = num(b->items[1], 0.999);
            m->eps = num(mt_pk_get(gr, "eps"), 1e-8);
        }
        if (mt_pk_get(gr, "step") && *step < 0 && scalar(r, mt_pk_get(gr, "step"), "param group step", step, e)) return -1;
    }
    if (load_dopt(r, e)) return -1;
    int rc = 0;
    const char *path = r->dopt.zip.path ? r->dopt.zip.path : r->path;
    const mt_pk *root = r->dopt.root, *bc;
    if (sel < 0 && root->kind == MT_PK_LIST)
        return mt_err_set(e, "%s: a list of optimizers' states, but the model's experts are not apart (one optimizer)", path);
    if (sel >= 0) {
        if (root->kind != MT_PK_LIST || root->len != 2)
            return mt_err_set(e, "%s: not a list of the two optimizers' states a ChainedOptimizer saves", path);
        root = root->items[sel];
        if (root->kind == MT_PK_NONE) return 0;   /* saved in another directory */
    }
    bc = root->kind == MT_PK_DICT ? mt_pk_get(root, "buckets_coalesced") : NULL;
    if (root->kind != MT_PK_DICT) rc = mt_err_set(e, "%s: not a dict of the distributed optimizer's state", path);
    else if (!bc || bc->kind != MT_PK_BOOL || !bc->b)
        rc = mt_err_set(e, "%s: no 'buckets_coalesced': the per-bucket format of Megatron-LM before February 2024, not "
                           "read (Megatron's --ckpt-convert-update-legacy-dist-opt-format rewrites it); convert with "
                           "--no-load-optim", path);
    if (rc) return rc;
    /* the buffers as the run that saved it laid them out (its args) */
    const mt_pk *args = m->args;
    int64_t np = 0;
    for (int j = 0; j < l->n; j++) np += (int64_t)l->t[j].numel;
    const mt_pk *bs = mt_pk_get(args, "ddp_bucket_size"), *nb = mt_pk_get(args, "ddp_num_buckets");
    int64_t size = bool_attr(args, "overlap_param_gather_with_optimizer_step")
                       ? 0
                       : mt_meg_bucket_size(bool_attr(args, "overlap_grad_reduce"), bs && bs->kind == MT_PK_INT ? bs->i : 0,
                                            nb && nb->kind == MT_PK_INT ? nb->i : 0,
                                            (int64_t)int_attr(args, "data_parallel_size", 1) *
                                                int_attr(args, "context_parallel_size", 1),
                                            np);
    int nc = l->chunks > 1 ? l->chunks : 1, at = 0;
    mt_meg_dbuf *b = mt_xcalloc((size_t)nc, sizeof *b);
    mt_meg_dbufs(l, r->core, r->grouped_experts, !bool_attr(args, "untie_embeddings_and_output_weights"), size, sel, b);
    if (!r->master) r->master = mt_xcalloc((size_t)(r->n ? r->n : 1), sizeof *r->master);
    static const char *const keys[3] = {"param", "exp_avg", "exp_avg_sq"};
    for (int c = 0; c < nc && !rc; c++) {
        if (sel == 1 && !b[c].n) continue;   /* a chunk without experts has no expert buffer */
        const mt_pk *g = get_int(root, at), *st, *nu;
        if (!g || g->kind != MT_PK_DICT || g->len != 1 || (st = g->vals[0])->kind != MT_PK_DICT) {
            rc = mt_err_set(e, "%s: no buffer %d (a dict of one dtype's state) for model chunk %d of %d", path, at, c, nc);
            break;
        }
        nu = mt_pk_get(st, "numel_unpadded");
        if (!nu || nu->kind != MT_PK_INT || nu->i != b[c].numel) {
            rc = mt_err_set(e, "%s: buffer %d holds %lld elements (numel_unpadded); the model's parameters in Megatron-Core's "
                               "buffer layout take %lld (args overlap_grad_reduce, ddp_bucket_size)", path, at,
                            nu && nu->kind == MT_PK_INT ? (long long)nu->i : -1LL, (long long)b[c].numel);
            break;
        }
        const mt_pk_tensor *w[3];
        for (int q = 0; q < 3 && !rc; q++) {
            const mt_pk *v = mt_pk_get(st, keys[q]);
            w[q] = v && v->kind == MT_PK_TENSOR ? v->t : NULL;
            if (!w[q] || w[q]->dtype != MT_ST_F32 || w[q]->ndim != 1 || w[q]->shape[0] != b[c].numel || w[q]->stride[0] != 1)
                rc = mt_err_set(e, "%s: buffer %d: '%s' is not an fp32 vector of its %lld elements", path, at, keys[q],
                                (long long)b[c].numel);
        }
        for (int p = 0; p < b[c].n && !rc; p++) {
            const mt_layout_tensor *lt = b[c].t[p];
            int k = find(r, lt->name);
            if (k < 0) {
                rc = mt_err_set(e, "%s: no model tensor '%s'", r->path, lt->name);
                break;
            }
            const mt_pk_tensor **to[3] = {&r->master[k], &r->exp_avg[k], &r->exp_avg_sq[k]};
            for (int q = 0; q < 3; q++)
                *to[q] = mt_pk_tensor_new(&r->dopt.arena, w[q]->key, MT_ST_F32, w[q]->storage_numel,
                                          w[q]->offset + b[c].off[p], lt->ndim, lt->local_shape)->t;
        }
        at++;
    }
    mt_meg_dbufs_free(b, nc);
    free(b);
    return rc;
}

/* After the distributed optimizer's entries of rank i: every parameter whose slice no earlier rank holds has
 * its state (a copy's, and the head copy of tied embeddings', is read from another rank). */
static int dist_complete(mt_meg_dir *m, int i, mt_err *e)
{
    mt_meg_rank *r = &m->r[i];
    const mt_layout *l = &m->l[i];
    for (int j = 0; j < l->n; j++) {
        int k = find(r, l->t[j].name);
        int head = l->t[j].kind == MT_T_OUTPUT && !bool_attr(m->args, "untie_embeddings_and_output_weights");
        if (k >= 0 && !r->copy[j] && !head && !r->exp_avg[k])
            return mt_err_set(e, "%s: no state of model tensor '%s' in its buffers (distrib_optim.pt beside it)", r->path,
                              r->names[k]);
    }
    return 0;
}

/* One optimizer's state (an entry of a ChainedOptimizer's list, or the only one): 1 when it has per-parameter
 * state, 0 when not (a dummy, or never stepped), -1 on error. Its parameters are taken from gl by their
 * groups' kinds; *step and the scaler are filled in. */
static int optim_entry(mt_meg_dir *m, mt_meg_rank *r, int rank, const mt_pk *opt, int sel, group_lists *gl, double *step,
                       mt_err *e)
{
    const mt_pk *sd = opt, *masters = NULL, *scaler = NULL;
    if (!opt || opt->kind != MT_PK_DICT) return 0;
    if (mt_pk_get(opt, "optimizer")) {   /* Float16OptimizerWithFloat16Params */
        sd = mt_pk_get(opt, "optimizer");
        masters = mt_pk_get(opt, "fp32_from_fp16_params");
        scaler = mt_pk_get(opt, "grad_scaler");
        if (sd->kind != MT_PK_DICT) return mt_err_set(e, "%s: optimizer.optimizer is not a dict", r->path);
    }
    const mt_pk *state = mt_pk_get(sd, "state"), *groups = mt_pk_get(sd, "param_groups");
    if (!state && sd != opt && groups && groups->kind == MT_PK_LIST) {   /* DistributedOptimizer */
        if (dist_state(m, rank, groups, step, sel, e) || (scaler && scaler->kind == MT_PK_DICT && read_scaler(m, r, rank, scaler, e)))
            return -1;
        return 1;
    }
    if (state && state->kind == MT_PK_DICT && !state->len && groups && groups->kind == MT_PK_LIST) {
        /* no state: a dummy, never stepped, or (2) an optimizer of no parameters on this rank (a chained one's
         * experts on a stage without experts) */
        size_t np = 0;
        for (size_t g = 0; g < groups->len; g++) {
            const mt_pk *ps = groups->items[g]->kind == MT_PK_DICT ? mt_pk_get(groups->items[g], "params") : NULL;
            np += ps && ps->kind == MT_PK_LIST ? ps->len : 1;
        }
        return np ? 0 : 2;
    }
    if (!state || state->kind != MT_PK_DICT || !state->len) return 0;
    if (!groups || groups->kind != MT_PK_LIST)
        return mt_err_set(e, "%s: optimizer state without a list of param_groups", r->path);
    if (masters && (masters->kind != MT_PK_LIST || masters->len != groups->len))
        return mt_err_set(e, "%s: optimizer: fp32_from_fp16_params is not a list per param group", r->path);
    if (masters && !r->master) r->master = mt_xcalloc((size_t)(r->n ? r->n : 1), sizeof *r->master);
    int rc = 0;
    for (size_t g = 0; g < groups->len && !rc; g++) {
        const mt_pk *gr = groups->items[g], *params = gr->kind == MT_PK_DICT ? mt_pk_get(gr, "params") : NULL;
        if (!params || params->kind != MT_PK_LIST) {
            rc = mt_err_set(e, "%s: optimizer param group %zu has no list of params", r->path, g);
            break;
        }
        /* the group's kind: Megatron's wd_mult (0 for biases and 1-D parameters), or in older versions its
         * weight_decay (0), or its place (the second); is_expert_parallel for the experts' */
        const mt_pk *wm = mt_pk_get(gr, "wd_mult"), *wd = mt_pk_get(gr, "weight_decay");
        int no = wm ? num(wm, 1) == 0 : wd ? num(wd, 1) == 0 : g == 1, ex = num(mt_pk_get(gr, "is_expert_parallel"), 0) != 0;
        if (num(mt_pk_get(gr, "lr_mult"), 1) != 1 || num(mt_pk_get(gr, "is_decoupled_lr"), 0)) {
            rc = mt_err_set(e, "%s: optimizer param group %zu has its own learning rate: not read (convert with "
                               "--no-load-optim)", r->path, g);
            break;
        }
        if (g == 0) {
            const mt_pk *b = mt_pk_get(gr, "betas");
            if (b && b->kind == MT_PK_TUPLE && b->len == 2) m->beta1 = num(b->items[0], 0.9), m->beta2 = num(b->items[1], 0.999);
            m->eps = num(mt_pk_get(gr, "eps"), 1e-8);
            if (mt_pk_get(gr, "step") && *step < 0) rc = scalar(r, mt_pk_get(gr, "step"), "param group step", step, e);
        }
        const mt_pk *mg = masters ? masters->items[g] : NULL;
        if (mg && (mg->kind != MT_PK_LIST || mg->len != params->len)) {
            rc = mt_err_set(e, "%s: optimizer: fp32_from_fp16_params[%zu] does not hold the group's %zu parameters",
                            r->path, g, params->len);
            break;
        }
        for (size_t q = 0; q < params->len && !rc; q++) {
            int *at = &gl->used[no][ex];
            if (*at >= gl->n[no][ex]) {
                rc = mt_err_set(e, "%s: optimizer param group %zu holds more %s%s parameters than the model's %d", r->path,
                                g, ex ? "expert " : "", no ? "1-D and bias" : "weight-decayed", gl->n[no][ex]);
                break;
            }
            const mt_layout_tensor *lt = gl->t[no][ex][(*at)++];
            int k = find(r, lt->name);
            const mt_pk *idx = params->items[q], *ps = idx->kind == MT_PK_INT ? get_int(state, idx->i) : NULL;
            const mt_pk *avg = ps && ps->kind == MT_PK_DICT ? mt_pk_get(ps, "exp_avg") : NULL,
                        *sq = ps && ps->kind == MT_PK_DICT ? mt_pk_get(ps, "exp_avg_sq") : NULL,
                        *ma = mg ? mg->items[q] : NULL;
            if (!avg || !sq || avg->kind != MT_PK_TENSOR || sq->kind != MT_PK_TENSOR || (ma && ma->kind != MT_PK_TENSOR)) {
                rc = mt_err_set(e, "%s: optimizer: no exp_avg and exp_avg_sq tensors for parameter %zu of group %zu "
                                   "('%s')", r->path, q, g, lt->name);
                break;
            }
            const mt_pk_tensor *ts[3] = {avg->t, sq->t, ma ? ma->t : NULL};
            for (int s3 = 0; s3 < 3 && !rc; s3++) {
                const mt_pk_tensor *t = ts[s3];
                if (!t) continue;
                int ok = t->ndim == lt->ndim && (t->dtype == MT_ST_F32 || t->dtype == MT_ST_BF16 || t->dtype == MT_ST_F16);
                for (int d = 0; ok && d < lt->ndim; d++) ok = t->shape[d] == lt->local_shape[d];
                if (!ok)
                    rc = mt_err_set(e, "%s: optimizer: %s of parameter %zu of group %zu is not a float tensor of the "
                                       "shape of '%s'", r->path, s3 == 0 ? "exp_avg" : s3 == 1 ? "exp_avg_sq" : "the fp32 copy",
                                    q, g, lt->name);
            }
            if (rc) break;
            r->exp_avg[k] = avg->t;
            r->exp_avg_sq[k] = sq->t;
            if (masters) r->master[k] = ma->t;
            if (*step < 0 && mt_pk_get(ps, "step")) rc = scalar(r, mt_pk_get(ps, "step"), "step", step, e);
        }
    }
    if (!rc && scaler && scaler->kind == MT_PK_DICT) rc = read_scaler(m, r, rank, scaler, e);
    return rc ? -1 : 1;
}

/* Whether an optimizer's state dict (or a chained one's list) has a param group of expert-parallel parameters
 * (is_expert_parallel: experts whose gradients are reduced over other ranks, with expert parallelism or an
 * expert tensor size other than the tensor size); without, the experts are in the dense groups. */
static int expert_groups(const mt_pk *opt)
{
    if (opt && opt->kind == MT_PK_LIST) {
        for (size_t q = 0; q < opt->len; q++)
            if (expert_groups(opt->items[q])) return 1;
        return 0;
    }
    if (!opt || opt->kind != MT_PK_DICT) return 0;
    const mt_pk *sd = mt_pk_get(opt, "optimizer") ? mt_pk_get(opt, "optimizer") : opt, *groups;
    if (sd->kind != MT_PK_DICT || !(groups = mt_pk_get(sd, "param_groups")) || groups->kind != MT_PK_LIST) return 0;
    for (size_t g = 0; g < groups->len; g++)
        if (groups->items[g]->kind == MT_PK_DICT && num(mt_pk_get(groups->items[g], "is_expert_parallel"), 0) != 0) return 1;
    return 0;
}

/* One rank's state: 1 when it has one, 0 when not, -1 on error. A model with expert-parallel experts has
 * Megatron's ChainedOptimizer: a list of the dense parameters' optimizer state and the experts'. */
static int rank_optim(mt_meg_dir *m, int i, mt_err *e)
{
    mt_meg_rank *r = &m->r[i];
    const mt_layout *l = &m->l[i];
    const mt_pk *opt = mt_pk_get(r->ck.root, "optimizer");
    if (!opt || (opt->kind != MT_PK_DICT && opt->kind != MT_PK_LIST)) return 0;
    if (opt->kind == MT_PK_LIST && opt->len != 2)
        return mt_err_set(e, "%s: optimizer: a ChainedOptimizer's list of %zu states; Megatron's holds 2 (the dense "
                             "parameters', the experts')", r->path, opt->len);
    group_lists gl = {0};
    const mt_layout_tensor **order = mt_xcalloc((size_t)(l->n ? l->n : 1), sizeof *order);
    int n = mt_meg_param_order(l, r->core, r->grouped_experts, order), rc = 0, have = 0, sep = expert_groups(opt);
    for (int a = 0; a < 2; a++)
        for (int b = 0; b < 2; b++) gl.t[a][b] = mt_xcalloc((size_t)(n ? n : 1), sizeof *gl.t[a][b]);
    for (int j = 0; j < n; j++) {
        int no = order[j]->no_decay != 0, ex = order[j]->expert >= 0 && sep;
        gl.t[no][ex][gl.n[no][ex]++] = order[j];
    }
    r->exp_avg = mt_xcalloc((size_t)(r->n ? r->n : 1), sizeof *r->exp_avg);
    r->exp_avg_sq = mt_xcalloc((size_t)(r->n ? r->n : 1), sizeof *r->exp_avg_sq);
    double step = -1;
    have = 2;
    size_t ne = opt->kind == MT_PK_LIST ? opt->len : 1;
    for (size_t q = 0; q < ne && !rc; q++) {
        int h = optim_entry(m, r, i, opt->kind == MT_PK_LIST ? opt->items[q] : opt, opt->kind == MT_PK_LIST ? (int)q : -1,
                            &gl, &step, e);
        if (h < 0) rc = -1;
        else if (h == 2) continue;   /* no parameters here */
        else if (q && h != have && have != 2) rc = mt_err_set(e, "%s: optimizer: a chained optimizer's entries do not all hold state", r->path);
        have = h;
    }
    if (!rc && have == 1 && r->has_dopt) rc = dist_complete(m, i, e);
    if (!rc && have == 1 && !r->has_dopt)   /* (the distributed optimizer's buffers hold every parameter) */
        for (int a = 0; a < 2 && !rc; a++)
            for (int b = 0; b < 2 && !rc; b++)
                if (gl.used[a][b] != gl.n[a][b])
                    rc = mt_err_set(e, "%s: optimizer holds %d %s%s parameters, the model has %d", r->path, gl.used[a][b],
                                    b ? "expert " : "", a ? "1-D and bias" : "weight-decayed", gl.n[a][b]);
    if (!rc && have == 1 && !(step >= 0 && step <= 1e15 && step == (double)(int64_t)step))
        rc = mt_err_set(e, "%s: optimizer: no step count", r->path);
    if (!rc && have == 1) {
        if (i == 0) m->step = (int64_t)step;
        else if (m->step != (int64_t)step)
            rc = mt_err_set(e, "%s: optimizer step %lld, the first rank's %lld", r->path, (long long)step, (long long)m->step);
    }
    free(order);
    for (int a = 0; a < 2; a++)
        for (int b = 0; b < 2; b++) free(gl.t[a][b]);
    return rc ? -1 : have == 1;
}

int mt_meg_dir_optim(mt_meg_dir *m, mt_err *e)
{
    if (!m->l) return mt_err_set(e, "%s: the model's layout is not known yet", m->dir);
    m->beta1 = 0.9, m->beta2 = 0.999, m->eps = 1e-8;
    int have = 0;
    for (int i = 0; i < m->n; i++) {
        if (m->r[i].absent) continue;
        int rc = rank_optim(m, i, e);
        if (rc < 0) return -1;
        if (i && rc != have)
            return mt_err_set(e, "%s: %s optimizer state, unlike the first rank", m->r[i].path, rc ? "has" : "has no");
        have = rc;
    }
    m->has_optim = have;
    return 0;
}

int mt_meg_check_all_read(mt_meg_dir *m, mt_err *e)
{
    for (int i = 0; i < m->n; i++)
        for (int k = 0; k < m->r[i].n; k++)
            if (!m->r[i].used[k])
                return mt_err_set(e, "%s: model tensor '%s' is not one of this model's (args)", m->r[i].path,
                                  m->r[i].names[k]);
    return 0;
}
