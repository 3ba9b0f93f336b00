/* gpt_cache.c: cache file names, JSON description, validated load and atomic save (see gpt_cache.h). */
#include "data/gpt_cache.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "data/megatron_desc.h"
#include "data/split.h"
#include "io/atomic.h"
#include "io/fsutil.h"
#include "io/mapfile.h"
#include "util/fnv.h"

uint64_t mt_sizes_hash(const int32_t *sizes, size_t n)
{
    uint64_t h = 0x6a09e667f3bcc908ULL ^ (uint64_t)n;
    size_t i = 0;
    for (; i + 2 <= n; i += 2) {
        uint64_t w;
        memcpy(&w, sizes + i, 8);
        h = (h ^ w) * 0x9e3779b97f4a7c15ULL;
        h ^= h >> 29;
    }
    if (i < n) h = ((h ^ (uint32_t)sizes[i]) * 0x9e3779b97f4a7c15ULL);
    h ^= h >> 32;
    h *= 0xd6e8feb86659fd93ULL;
    h ^= h >> 32;
    return h;
}

int mt_dataset_fingerprint(const char *idx_path, const int32_t *sizes, size_t n, mt_dataset_fp *fp, mt_err *e)
{
    memset(fp, 0, sizeof *fp);
    if (idx_path) {
        struct stat st;
        if (stat(idx_path, &st)) return mt_err_sys(e, "%s", idx_path);
        fp->idx_size = (uint64_t)st.st_size;
        fp->idx_mtime_ns = (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec;
    }
    fp->n_seq = n;
    fp->sizes_hash = mt_sizes_hash(sizes, n);
    return 0;
}

static const char *SUFFIX[MT_CACHE_NFILES] = {"description.txt", "document_index.npy", "sample_index.npy",
                                              "shuffle_index.npy", "mt_description.json"};

char *mt_gpt_cache_megatron_description(const mt_gpt_cache_key *k)
{
    mt_megatron_gpt_id id = {k->dataset_path, k->params.num_samples, k->split_index, k->params.seed,
                             k->params.seq_length, k->split_string, k->vocab_file, k->merge_file};
    return mt_megatron_gpt_description(&id);
}

void mt_gpt_cache_paths(const char *dir, const mt_gpt_cache_key *k, char *paths[MT_CACHE_NFILES])
{
    char *desc = mt_gpt_cache_megatron_description(k);
    char *base = mt_megatron_cache_base(dir, desc, "GPTDataset", k->split_index);
    for (int i = 0; i < MT_CACHE_NFILES; i++) {
        size_t n = strlen(base) + strlen(SUFFIX[i]) + 1;
        paths[i] = mt_xmalloc(n);
        snprintf(paths[i], n, "%s%s", base, SUFFIX[i]);
    }
    free(base);
    free(desc);
}

void mt_gpt_cache_paths_legacy(const char *dir, const mt_gpt_cache_key *k, char *paths[MT_CACHE_NFILES])
{
    static const char *suffix[MT_CACHE_NFILES - 1] = {"description.json", "document_index.npy", "sample_index.npy",
                                                      "shuffle_index.npy"};
    const char *base = strrchr(k->dataset_path, '/');
    base = base ? base + 1 : k->dataset_path;
    if (!*base) base = "dataset";
    char ident[1024];
    snprintf(ident, sizeof ident, "%s\n%s\n%lld %lld\n%d %d", k->dataset_path, k->split_string, (long long)k->lo,
             (long long)k->hi, k->params.add_extra_token, (int)k->params.drop_last);
    char ns[32];
    if (k->params.num_samples < 0) snprintf(ns, sizeof ns, "all");
    else snprintf(ns, sizeof ns, "%lld", (long long)k->params.num_samples);
    for (int i = 0; i < MT_CACHE_NFILES - 1; i++) {
        size_t n = strlen(dir) + strlen(base) + 200;
        paths[i] = mt_xmalloc(n);
        snprintf(paths[i], n, "%s/%s-%s-%sns-%dsl-%us-%08x-%s", dir, base, mt_split_names[k->split_index], ns,
                 (int)k->params.seq_length, (unsigned)k->params.seed, (unsigned)(mt_fnv1a_str(ident) >> 32), suffix[i]);
    }
    paths[MT_CACHE_MT] = NULL;
}

void mt_gpt_cache_paths_free(char *paths[MT_CACHE_NFILES])
{
    for (int i = 0; i < MT_CACHE_NFILES; i++) {
        free(paths[i]);
        paths[i] = NULL;
    }
}

static const char *sample_descr(const mt_gpt_plan *p) { return p->sample_idx_64 ? "<i8" : "<i4"; }
static const char *shuffle_descr(const mt_gpt_plan *p) { return p->shuffle_idx_64 ? "<i8" : "<u4"; }

static json_t *array_desc(const char *descr, int64_t r, int64_t c)
{
    json_t *shape = json_array();
    json_array_append_new(shape, json_integer(r));
    if (c) json_array_append_new(shape, json_integer(c));
    return json_pack("{s:s, s:o}", "dtype", descr, "shape", shape);
}

char *mt_gpt_cache_description(const mt_gpt_cache_key *k, const mt_gpt_plan *p)
{
    char hash[32];
    snprintf(hash, sizeof hash, "%016llx", (unsigned long long)k->fp.sizes_hash);
    json_t *ds = json_pack("{s:s, s:I, s:I, s:I, s:s}", "path", k->dataset_path, "idx_bytes", (json_int_t)k->fp.idx_size,
                           "idx_mtime_ns", (json_int_t)k->fp.idx_mtime_ns, "num_sequences", (json_int_t)k->fp.n_seq,
                           "sizes_hash", hash);
    json_t *o = json_object();
    json_object_set_new(o, "class", json_string("GPTDataset"));
    json_object_set_new(o, "format", json_string("mt-gpt-index-1"));
    json_object_set_new(o, "dataset", ds);
    json_object_set_new(o, "index_split", json_string(mt_split_names[k->split_index]));
    json_object_set_new(o, "split", json_string(k->split_string));
    json_object_set_new(o, "split_range", json_pack("[I, I]", (json_int_t)k->lo, (json_int_t)k->hi));
    json_object_set_new(o, "num_samples", k->params.num_samples < 0 ? json_null() : json_integer(k->params.num_samples));
    json_object_set_new(o, "sequence_length", json_integer(k->params.seq_length));
    json_object_set_new(o, "add_extra_token_to_sequence", json_boolean(k->params.add_extra_token));
    json_object_set_new(o, "drop_last_partial_sequence", json_boolean(k->params.drop_last));
    json_object_set_new(o, "random_seed", json_integer(k->params.seed));
    json_object_set_new(o, "tokens_per_epoch", json_integer(p->tokens_per_epoch));
    json_object_set_new(o, "num_epochs", json_integer(p->num_epochs));
    json_object_set_new(o, "separate_final_epoch", json_boolean(p->separate_final_epoch));
    json_object_set_new(o, "dataset_length", json_integer(p->num_samples));
    json_object_set_new(o, "document_index", array_desc("<i4", p->doc_index_len, 0));
    json_object_set_new(o, "sample_index", array_desc(sample_descr(p), p->num_samples + 1, 2));
    json_object_set_new(o, "shuffle_index", array_desc(shuffle_descr(p), p->num_samples, 0));
    char *s = json_dumps(o, JSON_INDENT(4) | JSON_PRESERVE_ORDER);
    json_decref(o);
    size_t n = strlen(s);
    char *r = mt_xmalloc(n + 2);
    memcpy(r, s, n);
    r[n] = '\n';
    r[n + 1] = 0;
    free(s);
    return r;
}

/* Whole file at path equals want: 1; differs: 0 (why says so); unreadable: -1 (why says why). */
static int same_text(const char *path, const char *want, char *why, size_t why_cap)
{
    mt_map m = {0};
    mt_err le;
    if (mt_map_open(&m, path, &le)) {
        snprintf(why, why_cap, "%s", le.msg);
        return -1;
    }
    bool same = m.size == strlen(want) && !memcmp(m.data, want, m.size);
    mt_map_close(&m);
    if (!same) snprintf(why, why_cap, "%s: description differs (parameters or dataset changed)", path);
    return same;
}

/* One naming's attempt (see mt_gpt_cache_load); out->plan is made. */
static int load_named(char *paths[MT_CACHE_NFILES], const mt_gpt_cache_key *k, const int32_t *sizes,
                      mt_gpt_index *out, bool *hit, char *why, size_t why_cap, mt_err *e)
{
    char *want = mt_gpt_cache_description(k, &out->plan);
    char *megatron = paths[MT_CACHE_MT] ? mt_gpt_cache_megatron_description(k) : NULL;
    mt_err le;
    if (megatron) {
        if (same_text(paths[MT_CACHE_DESC], megatron, why, why_cap) != 1) goto miss;
        /* Megatron writes no mt description; where there is one, it decides as under the earlier names */
        if (access(paths[MT_CACHE_MT], F_OK) == 0 && same_text(paths[MT_CACHE_MT], want, why, why_cap) != 1) goto miss;
    } else if (same_text(paths[MT_CACHE_DESC], want, why, why_cap) != 1) {
        goto miss;
    }
    const mt_gpt_plan *p = &out->plan;
    const char *descr[3] = {"<i4", sample_descr(p), shuffle_descr(p)};
    int64_t shapes[3][2] = {{p->doc_index_len, -1}, {p->num_samples + 1, 2}, {p->num_samples, -1}};
    int ndims[3] = {1, 2, 1};
    for (int i = 0; i < 3; i++) {
        if (mt_npy_open(&out->npy[i], paths[i + 1], &le) ||
            mt_npy_expect(&out->npy[i], paths[i + 1], descr[i], ndims[i], shapes[i], &le)) {
            snprintf(why, why_cap, "%s", le.msg);
            for (int j = 0; j <= i; j++) mt_npy_close(&out->npy[j]);
            goto miss;
        }
    }
    out->own = false;
    out->doc_idx = (int32_t *)out->npy[0].data;
    out->sample_idx = (void *)out->npy[1].data;
    out->shuffle_idx = (void *)out->npy[2].data;
    /* A description that matches but arrays that do not hold together: damaged or edited by hand. Using
     * them would train on the wrong data (another split's documents, repeated samples): an error. */
    const char *const arrays[3] = {paths[MT_CACHE_DOC], paths[MT_CACHE_SAMPLE], paths[MT_CACHE_SHUFFLE]};
    if (mt_gpt_index_check(out, sizes, k->lo, k->hi, arrays, e)) {
        mt_err_prefix(e, "index cache");
        for (int j = 0; j < 3; j++) mt_npy_close(&out->npy[j]);
        mt_gpt_plan plan = out->plan;
        memset(out, 0, sizeof *out);
        out->plan = plan;
        free(want);
        free(megatron);
        return -1;
    }
    *hit = true;
miss:
    free(want);
    free(megatron);
    return 0;
}

int mt_gpt_cache_load(const char *dir, const mt_gpt_cache_key *k, const int32_t *sizes, size_t n_seq,
                      mt_gpt_index *out, bool *hit, char *why, size_t why_cap, mt_err *e)
{
    memset(out, 0, sizeof *out);
    *hit = false;
    if (why_cap) why[0] = 0;
    if (mt_gpt_plan_make(sizes, n_seq, k->lo, k->hi, &k->params, &out->plan, e)) return -1;
    char *paths[MT_CACHE_NFILES];
    mt_gpt_cache_paths(dir, k, paths);
    int rc = load_named(paths, k, sizes, out, hit, why, why_cap, e);
    mt_gpt_cache_paths_free(paths);
    if (rc) memset(out, 0, sizeof *out);
    if (rc || *hit) return rc;
    /* the earlier names; the reason given stays the first naming's */
    char why2[1200];
    mt_gpt_cache_paths_legacy(dir, k, paths);
    rc = load_named(paths, k, sizes, out, hit, why2, sizeof why2, e);
    mt_gpt_cache_paths_free(paths);
    if (rc) memset(out, 0, sizeof *out);
    return rc;
}

int mt_gpt_cache_save(const char *dir, const mt_gpt_cache_key *k, const mt_gpt_index *ix, mt_err *e)
{
    const mt_gpt_plan *p = &ix->plan;
    char *paths[MT_CACHE_NFILES];
    mt_gpt_cache_paths(dir, k, paths);
    /* Remove a stale description first so that a crash between array writes never pairs an old
     * description with new arrays. */
    if (unlink(paths[MT_CACHE_DESC]) && errno != ENOENT) {
        mt_err_sys(e, "cannot remove stale %s", paths[MT_CACHE_DESC]);
        mt_gpt_cache_paths_free(paths);
        return -1;
    }
    int64_t s_doc[1] = {p->doc_index_len}, s_sample[2] = {p->num_samples + 1, 2}, s_shuf[1] = {p->num_samples};
    int rc = -1;
    char *desc = NULL, *megatron = NULL;
    if (mt_npy_write(paths[MT_CACHE_DOC], "<i4", s_doc, 1, ix->doc_idx, (size_t)p->doc_index_len * 4, e)) goto out;
    if (mt_npy_write(paths[MT_CACHE_SAMPLE], sample_descr(p), s_sample, 2, ix->sample_idx,
                     (size_t)(p->num_samples + 1) * 2 * (p->sample_idx_64 ? 8 : 4), e))
        goto out;
    if (mt_npy_write(paths[MT_CACHE_SHUFFLE], shuffle_descr(p), s_shuf, 1, ix->shuffle_idx,
                     (size_t)p->num_samples * (p->shuffle_idx_64 ? 8 : 4), e))
        goto out;
    desc = mt_gpt_cache_description(k, p);
    if (mt_out_write_text(paths[MT_CACHE_MT], desc, e)) goto out;
    megatron = mt_gpt_cache_megatron_description(k);
    if (mt_out_write_text(paths[MT_CACHE_DESC], megatron, e)) goto out;
    rc = 0;
out:
    free(desc);
    free(megatron);
    mt_gpt_cache_paths_free(paths);
    return rc;
}

int mt_gpt_index_get(const char *dir, const mt_gpt_cache_key *k, const int32_t *sizes, size_t n_seq,
                     mt_gpt_index *out, bool *cached, mt_err *e)
{
    *cached = false;
    if (dir) {
        mt_out_sweep_dir(dir); /* temporaries of a build that was killed, even when nothing is rebuilt */
        char why[1200];
        if (mt_gpt_cache_load(dir, k, sizes, n_seq, out, cached, why, sizeof why, e)) return -1;
        if (*cached) return 0;
    }
    if (mt_gpt_index_build(sizes, n_seq, k->lo, k->hi, &k->params, out, e)) return -1;
    if (dir && (mt_mkdir_p(dir, e) || mt_gpt_cache_save(dir, k, out, e))) {
        mt_gpt_index_free(out);
        return -1;
    }
    return 0;
}
