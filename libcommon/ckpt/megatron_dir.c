/* megatron_dir.c: a Megatron-LM torch-format checkpoint read as whole tensors (see megatron_dir.h). */
#include "ckpt/megatron_dir.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ckpt/checkpoint.h"
#include "io/fsutil.h"
#include "mt_base.h"

static char *rank_path(const mt_meg_dir *m, int64_t it, int t, int p, int pp)
{
    char sub[64], *s, *f;
    if (it == MT_CKPT_RELEASE) snprintf(sub, sizeof sub, "release");
    else snprintf(sub, sizeof sub, "iter_%07lld", (long long)it);
    char rank[32];
    if (pp > 1) snprintf(rank, sizeof rank, "mp_rank_%02d_%03d", t, p);
    else snprintf(rank, sizeof rank, "mp_rank_%02d", t);
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
    char *a = rank_path(&m, it, 0, 0, 1), *b = rank_path(&m, it, 0, 0, 2);
    int yes = access(a, F_OK) == 0 || access(b, F_OK) == 0;
    free(a);
    free(b);
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

/* The model's tensors under their dotted names (nested dicts joined with '.'). */
static int flatten(mt_meg_rank *r, const mt_pk *d, const char *prefix, int core, int tied, int depth, mt_err *e)
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
            if (flatten(r, v, p, core, tied, depth + 1, e)) return -1;
            continue;
        }
        const char *ln = core ? legacy_name(name, tied, out, sizeof out) : name;
        size_t l = strlen(name);
        if (!ln || (l >= 12 && !strcmp(name + l - 12, "_extra_state"))) continue;   /* Transformer Engine's */
        if (v->kind != MT_PK_TENSOR)
            return mt_err_set(e, "%s: model key '%s' is not a tensor", r->path, name);
        r->names = realloc(r->names, (size_t)(r->n + 1) * sizeof *r->names);
        r->t = realloc(r->t, (size_t)(r->n + 1) * sizeof *r->t);
        if (!r->names || !r->t) mt_die("out of memory");
        r->names[r->n] = mt_xstrdup(ln);
        r->t[r->n++] = v->t;
    }
    return 0;
}

/* A rank's model (its file loaded): the keys, the QKV order, its tensors. */
static int rank_model(mt_meg_dir *m, mt_meg_rank *r, mt_err *e)
{
    const mt_pk *root = r->ck.root, *model = mt_pk_get(root, "model");
    if (root->kind != MT_PK_DICT) return mt_err_set(e, "%s: not a dict of a checkpoint", r->path);
    if (!model && mt_pk_get(root, "model0"))
        return mt_err_set(e, "%s: model chunks (model0, model1, ...: the interleaved schedule) are not read yet", r->path);
    if (!model || model->kind != MT_PK_DICT) return mt_err_set(e, "%s: no key 'model' (a dict)", r->path);
    const mt_pk *v = mt_pk_get(root, "checkpoint_version");
    double ver = v && v->kind == MT_PK_FLOAT ? v->f : v && v->kind == MT_PK_INT ? (double)v->i : 0;
    if (ver < 2.0)
        return mt_err_set(e, "%s: checkpoint_version %g: query_key_value rows in an order older than [np, 3, hn] "
                             "(2.0) are not read",
                          r->path, ver);
    const mt_pk *untie = mt_pk_get(m->args, "untie_embeddings_and_output_weights");
    int tied = !(untie && untie->kind == MT_PK_BOOL && untie->b);
    int core = !mt_pk_get(model, "language_model");
    r->n = 0;
    if (flatten(r, model, "", core, tied, 0, e)) return -1;
    r->used = mt_xcalloc((size_t)(r->n ? r->n : 1), 1);
    return 0;
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
    mt_meg_rank first = {.path = rank_path(m, it, 0, 0, 1)};
    if (access(first.path, F_OK)) {
        free(first.path);
        first.path = rank_path(m, it, 0, 0, 2);
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
    const mt_pk *vp = mt_pk_get(args, "virtual_pipeline_model_parallel_size");
    int ep = int_attr(args, "expert_model_parallel_size", 1);
    rc = 0;
    if (m->tp < 1 || m->pp < 1 || m->tp > 4096 || m->pp > 4096)
        rc = mt_err_set(e, "%s: args: tensor-parallel size %d, pipeline size %d", first.path, m->tp, m->pp);
    else if ((vp && vp->kind == MT_PK_INT && vp->i > 1) || ep > 1)
        rc = mt_err_set(e, "%s: args: the interleaved schedule or expert parallelism: not read yet", first.path);
    m->n = m->tp * m->pp;
    m->r = mt_xcalloc((size_t)m->n, sizeof *m->r);
    m->r[0] = first;
    m->root = first.ck.root;
    char *want = rank_path(m, it, 0, 0, m->pp);
    if (!rc && strcmp(want, first.path))
        rc = mt_err_set(e, "%s: pipeline size %d in its args, but the rank directories are named %s", first.path, m->pp,
                        m->pp > 1 ? "mp_rank_TT" : "mp_rank_TT_PPP");
    free(want);
    if (!rc) rc = rank_model(m, &m->r[0], e);
    for (int i = 1; i < m->n && !rc; i++) {
        mt_meg_rank *r = &m->r[i];
        r->path = rank_path(m, it, i % m->tp, i / m->tp, m->pp);
        if (access(r->path, F_OK))
            rc = mt_err_set(e, "%s: missing (tensor-parallel size %d, pipeline size %d in the args)", r->path, m->tp,
                            m->pp);
        else rc = mt_tckpt_load(&r->ck, r->path, e) || rank_model(m, r, e) ? -1 : 0;
    }
    if (rc) mt_meg_dir_close(m);
    return rc;
}

void mt_meg_dir_close(mt_meg_dir *m)
{
    for (int i = 0; i < m->n; i++) {
        mt_meg_rank *r = &m->r[i];
        if (r->ck.root || r->ck.zip.n) mt_tckpt_close(&r->ck);
        for (int j = 0; j < r->n; j++) free(r->names[j]);
        free(r->names);
        free(r->t);
        free(r->used);
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

int mt_meg_dir_layout(mt_meg_dir *m, const mt_model_arch *a, mt_err *e)
{
    m->l = mt_xcalloc((size_t)m->n, sizeof *m->l);
    for (int i = 0; i < m->n; i++) {
        mt_layout_part part = {i % m->tp, m->tp, i / m->tp, m->pp, 1, 0, 1};
        if (mt_layout_build(a, &part, &m->l[i], e)) return mt_err_prefix(e, "%s", m->r[i].path);
        const mt_meg_rank *r = &m->r[i];
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

/* A rank's slice as floats. */
static int slice_floats(mt_meg_dir *m, int i, int k, float *dst, mt_err *e)
{
    mt_meg_rank *r = &m->r[i];
    const unsigned char *p;
    size_t n;
    if (mt_tckpt_tensor_bytes(&r->ck, r->t[k], &p, &n, e)) return mt_err_prefix(e, "%s: '%s'", r->path, r->names[k]);
    int64_t cnt = mt_tckpt_numel(r->t[k]);
    for (int64_t j = 0; j < cnt; j++) {
        if (r->t[k]->dtype == MT_ST_F32) memcpy(&dst[j], p + 4 * j, 4);
        else {
            uint16_t h;
            memcpy(&h, p + 2 * j, 2);
            dst[j] = r->t[k]->dtype == MT_ST_BF16 ? mt_bf16_to_f32(h) : mt_f16_to_f32(h);
        }
    }
    r->used[k] = 1;
    return 0;
}

int mt_meg_read(mt_meg_dir *m, const char *name, int ndim, const int64_t *shape, float *dst, mt_err *e)
{
    if (!m->l) return mt_err_set(e, "%s: the model's layout is not known yet", m->dir);
    int found = 0, rc = 0;
    for (int i = 0; i < m->n && !rc; i++)
        for (int j = 0; j < m->l[i].n && !rc; j++) {
            const mt_layout_tensor *lt = &m->l[i].t[j];
            if (strcmp(lt->whole_name, name) || lt->kind == MT_T_OUTPUT) continue;
            if (lt->partition_dim < 0 && found) continue;   /* replicated: the first rank's; the others compared below */
            if (!found) {
                /* the word embeddings may be asked for with more rows (a tensor-parallel target's padding): zero */
                int more = lt->kind == MT_T_WORD_EMB && ndim == 2 && shape[0] > lt->global_shape[0];
                int ok = lt->ndim == ndim;
                for (int d = 0; ok && d < ndim; d++) ok = lt->global_shape[d] == shape[d] || (d == 0 && more);
                if (ok && more)
                    memset(dst + lt->global_shape[0] * shape[1], 0,
                           (size_t)((shape[0] - lt->global_shape[0]) * shape[1]) * sizeof(float));
                if (!ok) return mt_err_set(e, "%s: tensor '%s' is not of the shape asked for", m->dir, name);
            }
            found = 1;
            float *s = mt_xmalloc((lt->numel ? lt->numel : 1) * sizeof(float));
            rc = slice_floats(m, i, find(&m->r[i], lt->name), s, e);
            if (!rc) mt_layout_place(lt, s, dst);
            free(s);
        }
    if (!found && !rc) return mt_err_set(e, "%s: no tensor '%s' in the layout of its args", m->dir, name);
    /* the other ranks' copies of a replicated tensor, and the last stage's copy of tied embeddings: equal
     * to the one read */
    int first = 1;
    for (int i = 0; i < m->n && !rc; i++)
        for (int j = 0; j < m->l[i].n && !rc; j++) {
            const mt_layout_tensor *lt = &m->l[i].t[j];
            if (strcmp(lt->whole_name, name) || (lt->kind != MT_T_OUTPUT && lt->partition_dim >= 0)) continue;
            if (lt->kind != MT_T_OUTPUT && first) {
                first = 0;
                continue;
            }
            float *s = mt_xmalloc((lt->numel ? lt->numel : 1) * sizeof(float)), *w = mt_xmalloc((lt->numel ? lt->numel : 1) * sizeof(float));
            int k = find(&m->r[i], lt->name);
            rc = slice_floats(m, i, k, s, e);
            mt_layout_slice(lt, dst, w);
            if (!rc && memcmp(s, w, lt->numel * sizeof(float)))
                rc = mt_err_set(e, "%s: '%s' differs from %s", m->r[i].path, lt->name,
                                lt->kind == MT_T_OUTPUT ? "the first stage's word embeddings" : "the first rank's copy");
            free(s);
            free(w);
        }
    return rc;
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
