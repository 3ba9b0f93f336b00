/* hf_dir.c: a Hugging Face GPT-2 or Llama directory's config and safetensors files (see hf_dir.h). */
#include "ckpt/hf_dir.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "io/fsutil.h"
#include "io/jsonfile.h"


static bool exists(const char *dir, const char *name)
{
    char *p = mt_path_join(dir, name);
    struct stat st;
    bool ok = stat(p, &st) == 0 && S_ISREG(st.st_mode);
    free(p);
    return ok;
}

bool mt_hf_dir_is(const char *dir)
{
    return exists(dir, "config.json") &&
           (exists(dir, "model.safetensors") || exists(dir, "model.safetensors.index.json") ||
            exists(dir, "pytorch_model.bin"));
}

static const mt_st_info *find(const mt_hf_dir *d, const char *name, int *fi);
static int check_names(const mt_hf_dir *d, const char **sorted, int n, mt_err *e);

static const char *embeddings_name(const mt_hf_dir *d)
{
    return d->cfg.llama ? "model.embed_tokens.weight" : "wte.weight";
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* The shard file names of model.safetensors.index.json, sorted and unique; *n set, and *doc the parsed
 * index (for check_index; the caller's to json_decref). */
static char **index_files(const char *path, int *n, json_t **doc, mt_err *e)
{
    json_t *o = mt_json_load_regular(path, JSON_REJECT_DUPLICATES, e);
    if (!o) return NULL;
    json_t *wm = json_object_get(o, "weight_map");
    char **names = NULL;
    int k = 0;
    if (!json_is_object(wm) || !json_object_size(wm)) {
        mt_err_set(e, "%s: no \"weight_map\" object", path);
        goto out;
    }
    names = mt_xcalloc(json_object_size(wm), sizeof *names);
    const char *key;
    json_t *v;
    json_object_foreach(wm, key, v)
    {
        const char *f = json_string_value(v);
        if (!f || !*f || strchr(f, '/') || !strcmp(f, ".") || !strcmp(f, "..")) {
            mt_err_set(e, "%s: weight_map[\"%s\"] is not a file name in the directory", path, key);
            for (int i = 0; i < k; i++) free(names[i]);
            free(names);
            names = NULL;
            goto out;
        }
        names[k++] = mt_xstrdup(f);
    }
    qsort(names, (size_t)k, sizeof *names, cmp_str);
    int u = 0;
    for (int i = 0; i < k; i++) {
        if (u && !strcmp(names[u - 1], names[i])) free(names[i]);
        else names[u++] = names[i];
    }
    *n = u;
    *doc = json_incref(o);
out:
    json_decref(o);
    return names;
}

static const char *base_name(const char *path)
{
    const char *s = strrchr(path, '/');
    return s ? s + 1 : path;
}

/* The index and the shards agree: every weight_map entry names a shard that holds that tensor, and every
 * tensor of a shard is listed under that shard (otherwise which copy is read would be an accident). */
static int check_index(const mt_hf_dir *d, const char *path, json_t *doc, mt_err *e)
{
    json_t *wm = json_object_get(doc, "weight_map");
    const char *key;
    json_t *v;
    json_object_foreach(wm, key, v)
    {
        const char *f = json_string_value(v);
        for (int i = 0; i < d->nfiles; i++)
            if (!strcmp(base_name(d->files[i].path), f) && !mt_st_find(&d->files[i], key))
                return mt_err_set(e, "%s: weight_map puts tensor '%s' in %s, which does not hold it", path, key, f);
    }
    for (int i = 0; i < d->nfiles; i++)
        for (int j = 0; j < d->files[i].n; j++) {
            const char *name = d->files[i].t[j].name, *f = json_string_value(json_object_get(wm, name));
            if (!f)
                return mt_err_set(e, "%s: tensor '%s' is not in the weight_map of %s", d->files[i].path, name, path);
            if (strcmp(f, base_name(d->files[i].path)))
                return mt_err_set(e, "%s: tensor '%s' is also in %s, where the weight_map of %s puts it",
                                  d->files[i].path, name, f, path);
        }
    return 0;
}

/* A tensor is there once: "transformer.X" and "X" together (in one file or two) are an error, since
 * either could be taken for the model's. */
static int check_prefix_pairs(const mt_hf_dir *d, mt_err *e)
{
    for (int i = 0; i < d->nfiles; i++)
        for (int j = 0; j < d->files[i].n; j++) {
            const char *name = d->files[i].t[j].name;
            if (strncmp(name, "transformer.", 12)) continue;
            for (int k = 0; k < d->nfiles; k++)
                if (mt_st_find(&d->files[k], name + 12))
                    return mt_err_set(e, "%s: holds both tensor '%s' and '%s'%s%s", d->files[i].path, name, name + 12,
                                      k == i ? "" : " (in ", k == i ? "" : d->files[k].path);
        }
    return 0;
}

int mt_hf_dir_open(mt_hf_dir *d, const char *dir, mt_err *e)
{
    memset(d, 0, sizeof *d);
    char *cfg = mt_path_join(dir, "config.json");
    int rc = mt_hf_config_read(cfg, &d->cfg, e);
    free(cfg);
    if (rc) return -1;
    char **names = NULL, *ix = NULL;
    json_t *doc = NULL;
    int n = 0;
    if (exists(dir, "model.safetensors")) {
        names = mt_xmalloc(sizeof *names);
        names[0] = mt_xstrdup("model.safetensors");
        n = 1;
    } else if (exists(dir, "model.safetensors.index.json")) {
        ix = mt_path_join(dir, "model.safetensors.index.json");
        names = index_files(ix, &n, &doc, e);
        if (!names) {
            free(ix);
            return -1;
        }
    } else if (exists(dir, "pytorch_model.bin")) {
        return mt_err_set(e, "%s: holds pytorch_model.bin but no model.safetensors: save it with "
                             "save_pretrained(safe_serialization=True) first", dir);
    } else {
        return mt_err_set(e, "%s: no model.safetensors or model.safetensors.index.json", dir);
    }
    d->dir = mt_xstrdup(dir);
    d->files = mt_xcalloc((size_t)n, sizeof *d->files);
    rc = 0;
    for (int i = 0; i < n; i++) {
        char *p = mt_path_join(dir, names[i]);
        if (!rc && mt_st_open(&d->files[i], p, e)) rc = -1;
        else if (!rc) d->nfiles++;
        free(p);
        free(names[i]);
    }
    free(names);
    if (!rc && doc && check_index(d, ix, doc, e)) rc = -1;
    if (!rc && check_prefix_pairs(d, e)) rc = -1;
    json_decref(doc);
    free(ix);
    if (rc) {
        mt_hf_dir_close(d);
        return -1;
    }
    int fi;
    const mt_st_info *wte = find(d, embeddings_name(d), &fi);
    d->dtype = wte ? wte->dtype : MT_ST_F32;
    return 0;
}

void mt_hf_dir_close(mt_hf_dir *d)
{
    for (int i = 0; i < d->nfiles; i++) mt_st_close(&d->files[i]);
    free(d->files);
    free(d->dir);
    memset(d, 0, sizeof *d);
}

/* The tensor called name (without prefix), with or without "transformer."; its file index in *fi. */
static const mt_st_info *find(const mt_hf_dir *d, const char *name, int *fi)
{
    char full[160];
    snprintf(full, sizeof full, "transformer.%s", name);
    for (int i = 0; i < d->nfiles; i++) {
        const mt_st_info *t = d->cfg.llama ? NULL : mt_st_find(&d->files[i], full);
        if (!t) t = mt_st_find(&d->files[i], name);
        if (t) {
            *fi = i;
            return t;
        }
    }
    return NULL;
}

/* Tensor t in the files with its shape and a float dtype (*fi: its file), or NULL with e set. */
static const mt_st_info *locate(const mt_hf_dir *d, const mt_hf_tensor *t, int *fi, mt_err *e)
{
    const mt_st_info *s = find(d, t->hf, fi);
    if (!s) {
        const char *pre = d->cfg.llama ? "" : "transformer.";
        if (d->nfiles == 1) mt_err_set(e, "%s: missing tensor '%s%s'", d->files[0].path, pre, t->hf);
        else mt_err_set(e, "%s: missing tensor '%s%s' (in none of the %d shards)", d->dir, pre, t->hf, d->nfiles);
        return NULL;
    }
    const char *file = d->files[*fi].path;
    bool same = s->ndim == t->ndim;
    for (int i = 0; same && i < t->ndim; i++) same = s->shape[i] == t->hf_shape[i];
    if (!same) {
        char a[128], b[128];
        mt_err_set(e, "%s: tensor '%s' has shape %s, config.json needs %s", file, s->name,
                   mt_st_shape_str(a, sizeof a, s->ndim, s->shape), mt_st_shape_str(b, sizeof b, t->ndim, t->hf_shape));
        return NULL;
    }
    if (s->dtype != MT_ST_F32 && s->dtype != MT_ST_F16 && s->dtype != MT_ST_BF16) {
        mt_err_set(e, "%s: tensor '%s' has dtype %s; F32, F16 or BF16 expected", file, s->name,
                   mt_st_dtype_name(s->dtype));
        return NULL;
    }
    return s;
}

int mt_hf_dir_check_shapes(const mt_hf_dir *d, const mt_hf_tensor *map, int n, mt_err *e)
{
    int fi;
    for (int i = 0; i < n; i++)
        if (!locate(d, &map[i], &fi, e)) return -1;
    return 0;
}

int mt_hf_dir_read(mt_hf_dir *d, const mt_hf_tensor *t, float *dst, mt_err *e)
{
    int fi;
    const mt_st_info *s = locate(d, t, &fi, e);
    if (!s) return -1;
    const char *file = d->files[fi].path;
    if (mt_st_to_f32(s, dst)) return mt_err_set(e, "%s: tensor '%s': cannot widen", file, s->name);
    mt_st_drop(&d->files[fi], s);
    /* a NaN or infinity would pass through conversion into a model that generates garbage: refused here,
     * the one reader of Hugging Face weights */
    for (int64_t i = 0; i < s->numel; i++)
        if (!isfinite(dst[i]))
            return mt_err_set(e, "%s: tensor '%s' holds a non-finite value (%g at element %lld)", file, s->name,
                              (double)dst[i], (long long)i);
    return 0;
}

/* "model.layers.<digits>.self_attn.rotary_emb.inv_freq": a buffer older transformers saved. */
static bool inv_freq_buffer(const char *name)
{
    if (strncmp(name, "model.layers.", 13)) return false;
    name += 13;
    if (*name < '0' || *name > '9') return false;
    while (*name >= '0' && *name <= '9') name++;
    return !strcmp(name, ".self_attn.rotary_emb.inv_freq");
}

/* "h.<digits>.attn.bias" or "h.<digits>.attn.masked_bias", with or without the prefix. */
static bool mask_buffer(const char *name)
{
    if (!strncmp(name, "transformer.", 12)) name += 12;
    if (strncmp(name, "h.", 2)) return false;
    name += 2;
    if (*name < '0' || *name > '9') return false;
    while (*name >= '0' && *name <= '9') name++;
    return !strcmp(name, ".attn.bias") || !strcmp(name, ".attn.masked_bias");
}

int mt_hf_dir_check_names(const mt_hf_dir *d, const mt_hf_tensor *map, int n, mt_err *e)
{
    /* the map's names sorted, so that a model of many layers is checked in n log n */
    const char **sorted = mt_xmalloc((size_t)(n ? n : 1) * sizeof *sorted);
    for (int k = 0; k < n; k++) sorted[k] = map[k].hf;
    qsort(sorted, (size_t)n, sizeof *sorted, cmp_str);
    int rc = check_names(d, sorted, n, e);
    free(sorted);
    return rc;
}

static int check_names(const mt_hf_dir *d, const char **sorted, int n, mt_err *e)
{
    for (int i = 0; i < d->nfiles; i++)
        for (int j = 0; j < d->files[i].n; j++) {
            const mt_st_info *t = &d->files[i].t[j];
            const char *name = !d->cfg.llama && !strncmp(t->name, "transformer.", 12) ? t->name + 12 : t->name;
            bool known = d->cfg.llama ? inv_freq_buffer(name) : mask_buffer(name);
            known = known || bsearch(&name, sorted, (size_t)n, sizeof *sorted, cmp_str);
            if (!known && !strcmp(t->name, "lm_head.weight")) {   /* tied: must be the word embeddings */
                int wi;
                const mt_st_info *w = find(d, embeddings_name(d), &wi);
                if (!w || t->dtype != w->dtype || t->nbytes != w->nbytes || (w->nbytes && memcmp(t->data, w->data, w->nbytes)))
                    return mt_err_set(e, "%s: lm_head.weight differs from the word embeddings, which config.json ties to it",
                                      d->files[i].path);
                known = true;
            }
            if (!known)
                return mt_err_set(e, "%s: unexpected tensor '%s' (not part of %s)", d->files[i].path, t->name,
                                  mt_hf_config_class(&d->cfg));
        }
    return 0;
}
