/* gpt_dataset.c: opens the datasets of --data-path, builds or loads every split's indices and blends,
 * and reads sample i of a split (see gpt_dataset.h). */
#include "data/gpt_dataset.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "data/blend.h"
#include "data/gpt_cache.h"
#include "data/megatron_desc.h"
#include "io/atomic.h"
#include "io/npy.h"
#include "util/fnv.h"
#include "util/vec.h"

static void mt_buf_puts(mt_buf *b, const char *s) { mt_buf_append(b, s, strlen(s)); }

static bool parse_number(const char *s, double *v)
{
    char *end;
    errno = 0;
    *v = strtod(s, &end);
    return end != s && *end == 0 && errno == 0;
}

int mt_data_path_parse(int n, char *const *args, char ***prefixes, double **weights, int *count, mt_err *e)
{
    *prefixes = NULL;
    *weights = NULL;
    *count = 0;
    if (n < 1) return mt_err_set(e, "--data-path: no dataset given");
    bool weighted = n % 2 == 0;
    double v;
    for (int i = 0; weighted && i < n; i += 2) weighted = parse_number(args[i], &v);
    int k = weighted ? n / 2 : n;
    if (k > MT_BLEND_MAX_DATASETS) return mt_err_set(e, "--data-path: %d datasets (at most %d)", k, MT_BLEND_MAX_DATASETS);
    char **p = mt_xcalloc((size_t)k, sizeof *p);
    double *w = weighted ? mt_xcalloc((size_t)k, sizeof *w) : NULL;
    for (int i = 0; i < k; i++) {
        if (weighted) {
            parse_number(args[2 * i], &w[i]);
            p[i] = args[2 * i + 1];
        } else {
            p[i] = args[i];
            if (n > 1 && parse_number(p[i], &v))
                goto odd;
        }
    }
    *prefixes = p;
    *weights = w;
    *count = k;
    return 0;
odd:
    free(p);
    free(w);
    return mt_err_set(e, "--data-path: expected PREFIX... or WEIGHT PREFIX pairs, got %d words with a number among "
                         "the prefixes", n);
}

char *mt_default_cache_dir(const char *given, int n, const char *const *args)
{
    if (given) return mt_xstrdup(given);
    double v;
    const char *first = n > 1 && n % 2 == 0 && parse_number(args[0], &v) ? args[1] : n ? args[0] : ".";
    const char *slash = strrchr(first, '/');
    size_t dl = slash ? (size_t)(slash - first) : 1;
    char *out = mt_xmalloc(dl + 16);
    snprintf(out, dl + 16, "%.*s/index-cache", (int)dl, slash ? first : ".");
    return out;
}

/* ---------------------------------------------------------------------------------------------- */

static int open_source(mt_gpt_source *s, const char *prefix, mt_err *e)
{
    memset(s, 0, sizeof *s);
    s->prefix = mt_xstrdup(prefix);
    if (mt_indexed_open(&s->ds, prefix, e)) return -1;
    size_t n = (size_t)s->ds.n_seqs;
    s->sizes = mt_xmalloc((n ? n : 1) * sizeof(int32_t));
    if (n) memcpy(s->sizes, s->ds.idx + 34, n * sizeof(int32_t));
    s->tok = (mt_tokens){s->ds.bin, s->ds.bin_size, s->ds.dtype, s->sizes, s->ds.idx + 34 + 4 * n, n};
    return 0;
}

static void close_source(mt_gpt_source *s)
{
    for (int k = 0; k < MT_NSPLITS; k++)
        if (s->built[k]) mt_gpt_index_free(&s->ix[k]);
    if (s->prefix) mt_indexed_close(&s->ds);
    free(s->sizes);
    free(s->prefix);
}

static int build_component(mt_gpt_source *s, const mt_gpt_data_args *a, const char *split_string, int k,
                           int64_t num_samples, mt_err *e)
{
    mt_gpt_cache_key key = {0};
    key.dataset_path = s->prefix;
    key.split_index = k;
    key.split_string = split_string;
    key.lo = s->range[k].lo;
    key.hi = s->range[k].hi;
    key.vocab_file = a->vocab_file;
    key.merge_file = a->merge_file;
    key.params = (mt_gpt_index_params){num_samples, a->seq_length, 1, a->seed, true};
    char idx_path[4096];
    snprintf(idx_path, sizeof idx_path, "%s.idx", s->prefix);
    if (mt_dataset_fingerprint(idx_path, s->sizes, (size_t)s->ds.n_seqs, &key.fp, e)) return -1;
    bool cached;
    if (mt_gpt_index_get(a->cache_dir, &key, s->sizes, (size_t)s->ds.n_seqs, &s->ix[k], &cached, e))
        return mt_err_prefix(e, "%s: %s split", s->prefix, mt_split_names[k]);
    s->built[k] = true;
    if (a->note) a->note(a->note_ctx, s->prefix, k, cached, &s->ix[k].plan);
    return 0;
}

/* ---------------------------------------------------------------------------------------------- */
/* Blend index cache, under Megatron-Core's names: {md5}-BlendedDataset-<split>-{description.txt,
 * dataset_index.npy, dataset_sample_index.npy}, with mt's description in -mt_description.json (see
 * gpt_cache.h); caches under the earlier names, <first prefix base>-blend<K>-<split>-<N>ns-<hash>-
 * {description.json, ...}, still load. mt's description embeds the components' own descriptions, so any
 * change below invalidates the blend too. */

static char *blend_description(const mt_gpt_data *d, const mt_gpt_data_args *a, int k, int64_t size, const double *w)
{
    mt_buf b = {0};
    char t[256];
    mt_buf_puts(&b, "{\n  \"class\": \"BlendedDataset\",\n");
    snprintf(t, sizeof t, "  \"split\": \"%s\",\n  \"size\": %lld,\n  \"weights\": [", mt_split_names[k], (long long)size);
    mt_buf_puts(&b, t);
    for (int i = 0; i < d->n; i++) {
        snprintf(t, sizeof t, "%s%.17g", i ? ", " : "", w[i]);
        mt_buf_puts(&b, t);
    }
    mt_buf_puts(&b, "],\n  \"datasets\": [\n");
    for (int i = 0; i < d->n; i++) {
        const mt_gpt_source *s = &d->src[i];
        mt_gpt_cache_key key = {0};
        key.dataset_path = s->prefix;
        key.split_index = k;
        key.split_string = d->split_string;
        key.lo = s->range[k].lo;
        key.hi = s->range[k].hi;
        key.vocab_file = a->vocab_file;
        key.merge_file = a->merge_file;
        key.params = (mt_gpt_index_params){s->ix[k].plan.num_samples, a->seq_length, 1, a->seed, true};
        char idx_path[4096];
        snprintf(idx_path, sizeof idx_path, "%s.idx", s->prefix);
        mt_err e;
        if (mt_dataset_fingerprint(idx_path, s->sizes, (size_t)s->ds.n_seqs, &key.fp, &e)) memset(&key.fp, 0, sizeof key.fp);
        char *c = mt_gpt_cache_description(&key, &s->ix[k].plan);
        snprintf(t, sizeof t, "%s    {\"length\": %lld, \"description_hash\": \"%016llx\"}", i ? ",\n" : "",
                 (long long)s->ix[k].plan.num_samples, (unsigned long long)mt_fnv1a_str(c));
        mt_buf_puts(&b, t);
        free(c);
    }
    mt_buf_puts(&b, "\n  ]\n}\n");
    mt_buf_putc(&b, 0);
    return b.p;
}

/* Megatron's blend description: each component as it was built (its requested samples, None for one
 * epoch) and the weights as BlendedDataset holds them: normalized once more (with weights the builder
 * has normalized them already; without, they are the component lengths). */
static char *blend_megatron_description(const mt_gpt_data *d, const mt_gpt_data_args *a, int k, int64_t size,
                                        const int64_t *requested, const double *w)
{
    mt_megatron_gpt_id *ids = mt_xcalloc((size_t)d->n, sizeof *ids);
    double *wn = mt_xmalloc((size_t)d->n * sizeof *wn);
    memcpy(wn, w, (size_t)d->n * sizeof *wn);
    mt_err e;
    if (d->weights) mt_blend_normalize(wn, d->n, &e);
    for (int i = 0; i < d->n; i++)
        ids[i] = (mt_megatron_gpt_id){d->src[i].prefix, requested[i], k, a->seed, a->seq_length, d->split_string,
                                      a->vocab_file, a->merge_file};
    char *r = mt_megatron_blend_description(ids, d->n, k, wn, size);
    free(ids);
    free(wn);
    return r;
}

static void blend_paths(const char *dir, int k, const char *megatron, char *p[4])
{
    char *base = mt_megatron_cache_base(dir, megatron, "BlendedDataset", k);
    static const char *suffix[4] = {"description.txt", "dataset_index.npy", "dataset_sample_index.npy",
                                    "mt_description.json"};
    for (int i = 0; i < 4; i++) {
        size_t n = strlen(base) + strlen(suffix[i]) + 1;
        p[i] = mt_xmalloc(n);
        snprintf(p[i], n, "%s%s", base, suffix[i]);
    }
    free(base);
}

static void blend_paths_legacy(const mt_gpt_data *d, const char *dir, int k, int64_t size, const char *desc, char *p[4])
{
    const char *base = strrchr(d->src[0].prefix, '/');
    base = base ? base + 1 : d->src[0].prefix;
    static const char *suffix[3] = {"description.json", "dataset_index.npy", "dataset_sample_index.npy"};
    for (int i = 0; i < 3; i++) {
        size_t n = strlen(dir) + strlen(base) + 128;
        p[i] = mt_xmalloc(n);
        snprintf(p[i], n, "%s/%s-blend%d-%s-%lldns-%08x-%s", dir, base, d->n, mt_split_names[k], (long long)size,
                 (unsigned)(mt_fnv1a_str(desc) & 0xffffffffu), suffix[i]);
    }
    p[3] = NULL;
}

/* The whole file at path is text. */
static bool file_is(const char *path, const char *text)
{
    mt_map m;
    mt_err le;
    if (mt_map_open(&m, path, &le)) return false;
    bool same = m.size == strlen(text) && !memcmp(m.data, text, m.size);
    mt_map_close(&m);
    return same;
}

/* Megatron's naming (p[3] set): description.txt must be megatron and mt's description, where there is one,
 * desc; the earlier naming: p[0] must be desc. */
static int blend_load(mt_gpt_split_data *sp, char *p[4], const char *desc, const char *megatron, int64_t size, int n,
                      const int64_t *lens, mt_err *e)
{
    mt_err le;
    if (p[3]) {
        if (!file_is(p[0], megatron)) return 0;
        if (access(p[3], F_OK) == 0 && !file_is(p[3], desc)) return 0;
    } else if (!file_is(p[0], desc)) {
        return 0;
    }
    mt_npy a, b;
    if (mt_npy_open(&a, p[1], &le)) return 0;
    if (mt_npy_open(&b, p[2], &le)) {
        mt_npy_close(&a);
        return 0;
    }
    int rc = !mt_npy_expect(&a, p[1], "<i2", 1, &size, &le) && !mt_npy_expect(&b, p[2], "<i8", 1, &size, &le);
    if (rc) {
        sp->ds_index = mt_xmalloc((size_t)(size ? size : 1) * 2);
        sp->ds_sample_index = mt_xmalloc((size_t)(size ? size : 1) * 8);
        if (size) {
            memcpy(sp->ds_index, a.data, (size_t)size * 2);
            memcpy(sp->ds_sample_index, b.data, (size_t)size * 8);
        }
        for (int64_t i = 0; i < size && rc == 1; i++) {
            int c = sp->ds_index[i];
            if (c < 0 || c >= n)
                rc = mt_err_set(e, "index cache: %s: entry %lld is dataset %d of %d", p[1], (long long)i, c, n);
            else if (sp->ds_sample_index[i] < 0 || sp->ds_sample_index[i] >= lens[c])
                rc = mt_err_set(e, "index cache: %s: entry %lld is sample %lld of dataset %d, which has %lld", p[2],
                                (long long)i, (long long)sp->ds_sample_index[i], c, (long long)lens[c]);
        }
        if (rc < 0) {
            free(sp->ds_index);
            free(sp->ds_sample_index);
            sp->ds_index = NULL;
            sp->ds_sample_index = NULL;
        }
    }
    mt_npy_close(&a);
    mt_npy_close(&b);
    return rc;
}

/* Arrays first, then mt's description, Megatron's last (a stale one is removed before anything). */
static int blend_save(const mt_gpt_split_data *sp, char *p[4], const char *desc, const char *megatron, int64_t size,
                      mt_err *e)
{
    if (unlink(p[0]) && errno != ENOENT) return mt_err_sys(e, "cannot remove stale %s", p[0]);
    if (mt_npy_write(p[1], "<i2", &size, 1, sp->ds_index, (size_t)size * 2, e)) return -1;
    if (mt_npy_write(p[2], "<i8", &size, 1, sp->ds_sample_index, (size_t)size * 8, e)) return -1;
    if (mt_out_write_text(p[3], desc, e)) return -1;
    return mt_out_write_text(p[0], megatron, e);
}

static void free_paths(char *p[4])
{
    for (int i = 0; i < 4; i++) {
        free(p[i]);
        p[i] = NULL;
    }
}

/* requested: each component's requested samples (-1: one epoch), for Megatron's description. */
static int build_blend(mt_gpt_data *d, const mt_gpt_data_args *a, int k, int64_t size, const double *w,
                       const int64_t *requested, mt_err *e)
{
    mt_gpt_split_data *sp = &d->split[k];
    sp->length = size;
    int64_t *lens = mt_xmalloc((size_t)d->n * sizeof *lens);
    for (int i = 0; i < d->n; i++) lens[i] = d->src[i].ix[k].plan.num_samples;
    char *desc = NULL, *megatron = NULL, *p[4] = {0};
    int rc = -1;
    if (a->cache_dir) {
        desc = blend_description(d, a, k, size, w);
        megatron = blend_megatron_description(d, a, k, size, requested, w);
        blend_paths(a->cache_dir, k, megatron, p);
        int hit = blend_load(sp, p, desc, megatron, size, d->n, lens, e);
        if (hit == 0) {
            char *q[4] = {0};
            blend_paths_legacy(d, a->cache_dir, k, size, desc, q);
            hit = blend_load(sp, q, desc, megatron, size, d->n, lens, e);
            free_paths(q);
        }
        if (hit < 0) goto out;
        if (hit) {
            sp->blend_cached = true;
            rc = 0;
            goto out;
        }
    }
    sp->ds_index = mt_xmalloc((size_t)(size ? size : 1) * sizeof(int16_t));
    sp->ds_sample_index = mt_xmalloc((size_t)(size ? size : 1) * sizeof(int64_t));
    if (mt_blend_build(w, d->n, size, lens, sp->ds_index, sp->ds_sample_index, e)) {
        mt_err_prefix(e, "%s split", mt_split_names[k]);
        goto out;
    }
    if (a->cache_dir && blend_save(sp, p, desc, megatron, size, e)) goto out;
    rc = 0;
out:
    free_paths(p);
    free(desc);
    free(megatron);
    free(lens);
    return rc;
}

/* ---------------------------------------------------------------------------------------------- */

int mt_gpt_data_open(mt_gpt_data *d, const mt_gpt_data_args *a, mt_err *e)
{
    memset(d, 0, sizeof *d);
    if (a->seq_length < 1) return mt_err_set(e, "--seq-length must be at least 1");
    char **prefixes;
    double *weights;
    int n;
    if (mt_data_path_parse(a->n_args, a->args, &prefixes, &weights, &n, e)) return -1;
    d->n = n;
    d->seq_length = a->seq_length;
    d->split_string = mt_xstrdup(a->split ? a->split : "969, 30, 1");
    d->src = mt_xcalloc((size_t)n, sizeof *d->src);
    d->blended = !(n == 1 && !weights);
    int rc = -1;
    for (int i = 0; i < n; i++)
        if (open_source(&d->src[i], prefixes[i], e)) goto out;
    for (int i = 0; i < n; i++)
        if (mt_split_ranges(d->split_string, (int64_t)d->src[i].ds.n_seqs, d->src[i].range, e))
            goto out;
    if (weights) {
        d->weights = weights;
        weights = NULL;
        if (mt_blend_normalize(d->weights, n, e)) goto out;
    }
    for (int k = 0; k < MT_NSPLITS; k++) {
        mt_gpt_split_data *sp = &d->split[k];
        int64_t N = a->num_samples[k];
        sp->requested = N;
        /* A split is present when it has width in the (first) dataset, as the ranges depend only on
         * the split string's weights being non-zero. */
        sp->present = d->src[0].range[k].present;
        /* Zero samples asked of a split whose documents hold no tokens: nothing to build (Megatron-Core
         * would loop forever looking for the one extra token); asking samples of it stays an error. */
        if (sp->present && N == 0 && (!d->blended || d->weights)) {   /* (an unweighted blend takes whole epochs) */
            int64_t tokens = 0;
            for (int i = 0; i < n; i++)
                for (int64_t j = d->src[i].range[k].lo; j < d->src[i].range[k].hi; j++) tokens += d->src[i].sizes[j];
            if (tokens == 0) sp->present = false;
        }
        if (!sp->present) continue;
        if (!d->blended) {
            if (build_component(&d->src[0], a, d->split_string, k, N, e)) goto out;
            sp->length = d->src[0].ix[k].plan.num_samples;
            continue;
        }
        if (d->weights && N >= 0) {   /* (N < 0, the whole split: one epoch of every component, as unweighted) */
            int64_t *per = mt_xmalloc((size_t)n * sizeof *per), size;
            if (mt_blend_sizes(d->weights, n, N, a->surplus, per, &size, e)) {
                free(per);
                goto out;
            }
            for (int i = 0; i < n; i++)
                if (build_component(&d->src[i], a, d->split_string, k, per[i], e)) {
                    free(per);
                    goto out;
                }
            int rc2 = build_blend(d, a, k, size, d->weights, per, e);
            free(per);
            if (rc2) goto out;
        } else {
            double *w = mt_xmalloc((size_t)n * sizeof *w);
            int64_t total = 0;
            for (int i = 0; i < n; i++) {
                if (build_component(&d->src[i], a, d->split_string, k, -1, e)) {
                    free(w);
                    goto out;
                }
                w[i] = (double)d->src[i].ix[k].plan.num_samples;
                total += d->src[i].ix[k].plan.num_samples;
                /* Megatron-Core's BlendedDataset asserts every weight (here a length) is positive (a weighted
                 * blend evaluated whole, N < 0, is mt's: its empty components just get no share) */
                if (w[i] <= 0 && !d->weights) {
                    free(w);
                    mt_err_set(e, "--data-path %s: no samples in the %s split (a blend without weights needs "
                                  "samples of every dataset in every split it builds)",
                               d->src[i].prefix, mt_split_names[k]);
                    goto out;
                }
            }
            if (mt_blend_normalize(w, n, e)) {
                free(w);
                mt_err_prefix(e, "%s split", mt_split_names[k]);
                goto out;
            }
            int64_t *one_epoch = mt_xmalloc((size_t)n * sizeof *one_epoch);
            for (int i = 0; i < n; i++) one_epoch[i] = -1;
            int rc2 = build_blend(d, a, k, N >= 0 && N < total ? N : total, w, one_epoch, e);
            free(one_epoch);
            free(w);
            if (rc2) goto out;
        }
    }
    rc = 0;
out:
    free(prefixes);
    free(weights);
    if (rc) mt_gpt_data_close(d);
    return rc;
}

void mt_gpt_data_close(mt_gpt_data *d)
{
    for (int i = 0; i < d->n; i++) close_source(&d->src[i]);
    for (int k = 0; k < MT_NSPLITS; k++) {
        free(d->split[k].ds_index);
        free(d->split[k].ds_sample_index);
    }
    free(d->src);
    free(d->weights);
    free(d->split_string);
    memset(d, 0, sizeof *d);
}

void mt_gpt_data_locate(const mt_gpt_data *d, int split, int64_t i, int *component, int64_t *sample)
{
    const mt_gpt_split_data *sp = &d->split[split];
    if (!d->blended) {
        *component = 0;
        *sample = i;
    } else {
        *component = sp->ds_index[i];
        *sample = sp->ds_sample_index[i];
    }
}

int64_t mt_gpt_data_sample(const mt_gpt_data *d, int split, int64_t i, int64_t *out, mt_err *e)
{
    const mt_gpt_split_data *sp = &d->split[split];
    if (!sp->present) return mt_err_set(e, "the %s split is empty (see --split)", mt_split_names[split]);
    if (i < 0 || i >= sp->length)
        return mt_err_set(e, "%s sample %lld out of range (the split has %lld)", mt_split_names[split], (long long)i,
                          (long long)sp->length);
    int c;
    int64_t j;
    mt_gpt_data_locate(d, split, i, &c, &j);
    const mt_gpt_source *s = &d->src[c];
    int64_t n = mt_gpt_sample_fetch(&s->tok, &s->ix[split], d->seq_length, 1, j, -1, out, e);
    if (n < 0) return mt_err_prefix(e, "%s", s->prefix);
    return n;
}
