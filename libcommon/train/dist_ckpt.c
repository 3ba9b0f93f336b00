/* dist_ckpt.c: the distributed optimizer's shard files, written by every data-parallel rank into one
 * checkpoint and read back at any data-parallel size (see dist_ckpt.h). */
#include "train/dist_ckpt.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/safetensors.h"
#include "train/ckpt_meta.h"

#define PATH_BYTES 4096

json_t *mt_dist_ckpt_meta(const mt_trainer *t)
{
    json_t *off = json_array();
    for (int r = 0; r <= t->dp_size; r++) json_array_append_new(off, json_integer((json_int_t)t->gs.shard_lo[r]));
    return json_pack("{s:i,s:o}", "dp_size", t->dp_size, "shard_offsets", off);
}

static void shard_path(char *buf, size_t cap, const char *dir, int r)
{
    snprintf(buf, cap, "%s/distrib_optim_%03d.safetensors", dir, r);
}

/* This rank's shard into dir. */
static int write_shard(mt_trainer *t, const char *dir, mt_err *e)
{
    size_t lo = t->opt.lo, n = t->opt.hi - t->opt.lo;
    float *h = mt_xmalloc((2 * n + 1) * sizeof *h);
    mtk_to_host(t->k, h, t->opt.exp_avg, n * sizeof *h);
    mtk_to_host(t->k, h + n, t->opt.exp_avg_sq, n * sizeof *h);
    char path[PATH_BYTES + 64];
    shard_path(path, sizeof path, dir, t->dp_rank);
    for (size_t i = 0; i < 2 * n; i++)
        if (!isfinite(h[i])) {
            free(h);
            return mt_err_set(e, "%s: not saving: %s of parameter %zu is not finite", path,
                              i < n ? "exp_avg" : "exp_avg_sq", lo + i % n);
        }
    char off[32], numel[32], rank[16], size[16];
    snprintf(off, sizeof off, "%zu", lo);
    snprintf(numel, sizeof numel, "%zu", t->gs.n);
    snprintf(rank, sizeof rank, "%d", t->dp_rank);
    snprintf(size, sizeof size, "%d", t->dp_size);
    mt_st_kv kv[] = {{"format", "pt"}, {"offset", off}, {"numel", numel}, {"dp_rank", rank}, {"dp_size", size}};
    mt_st_tensor st[2] = {{"exp_avg", MT_ST_F32, 1, {(int64_t)n}, h}, {"exp_avg_sq", MT_ST_F32, 1, {(int64_t)n}, h + n}};
    int rc = mt_st_write(path, st, 2, kv, 5, e);
    free(h);
    return rc;
}

/* Every rank: the shard (when dir is not empty), then the sum of the failures. */
static int shard_and_agree(mt_trainer *t, const char *dir, mt_err *e)
{
    mt_err mine;
    int64_t bad = dir[0] ? write_shard(t, dir, &mine) != 0 : 1;
    int64_t sum = bad;
    if (mt_all_reduce(t->dp, &sum, 1, MT_C_I64, e)) return -1;
    if (bad && dir[0]) {
        *e = mine;
        return -1;
    }
    if (sum) return mt_err_set(e, "checkpoint not saved: %lld data-parallel rank(s) failed to write their shard", (long long)sum);
    return 0;
}

int mt_dist_ckpt_fill(const char *tmp, void *arg, mt_err *e)
{
    mt_trainer *t = arg;
    char path[PATH_BYTES] = {0};
    if (strlen(tmp) + 12 >= PATH_BYTES) return mt_err_set(e, "%s: path too long for the data-parallel ranks", tmp);
    snprintf(path, sizeof path, "%s/mp_rank_00", tmp);
    t->dist_fill_ran = 1;
    if (mt_broadcast(t->dp, path, PATH_BYTES, MT_C_BYTE, 0, e)) return -1;
    return shard_and_agree(t, path, e);
}

int mt_dist_ckpt_save_done(mt_trainer *t, int rc, mt_err *e)
{
    mt_err ce;
    if (!t->dist_fill_ran) {
        /* rank 0 failed before the shards: release the others */
        char path[PATH_BYTES] = {0};
        if (mt_broadcast(t->dp, path, PATH_BYTES, MT_C_BYTE, 0, &ce) || shard_and_agree(t, path, &ce)) {}
    }
    t->dist_fill_ran = 0;
    int64_t r = rc;
    if (mt_broadcast(t->dp, &r, 1, MT_C_I64, 0, &ce)) {
        *e = ce;
        return -1;
    }
    return rc;
}

int mt_dist_ckpt_save_peer(mt_trainer *t, mt_err *e)
{
    char path[PATH_BYTES];
    if (mt_broadcast(t->dp, path, PATH_BYTES, MT_C_BYTE, 0, e)) return -1;
    path[PATH_BYTES - 1] = 0;
    int rc = shard_and_agree(t, path, e);
    int64_t r0 = 0;
    if (mt_broadcast(t->dp, &r0, 1, MT_C_I64, 0, e)) return -1;
    if (!rc && r0) return mt_err_set(e, "checkpoint of iteration %lld not saved: data-parallel rank 0 failed",
                                     (long long)t->iteration);
    return rc;
}

int mt_dist_ckpt_read(const char *dir, const json_t *d, size_t numel, float *m, float *v, mt_err *e)
{
    json_t *offs = json_object_get(d, "shard_offsets");
    json_t *ds = json_object_get(d, "dp_size");
    if (!json_is_integer(ds) || json_integer_value(ds) < 1 || !json_is_array(offs) ||
        json_array_size(offs) != (size_t)json_integer_value(ds) + 1)
        return mt_err_set(e, "%s/meta.json: \"optimizer.distributed\" needs dp_size and dp_size + 1 shard_offsets", dir);
    int n = (int)json_integer_value(ds);
    json_t *last = json_array_get(offs, (size_t)n);
    if (!json_is_integer(last) || (size_t)json_integer_value(last) != numel)
        return mt_err_set(e, "%s/meta.json: the optimizer shards cover %lld parameters, this model has %zu", dir,
                          json_is_integer(last) ? (long long)json_integer_value(last) : -1LL, numel);
    for (int r = 0; r < n; r++) {
        json_t *a = json_array_get(offs, (size_t)r), *b = json_array_get(offs, (size_t)r + 1);
        if (!json_is_integer(a) || !json_is_integer(b) || json_integer_value(a) < 0 ||
            json_integer_value(b) < json_integer_value(a) || (size_t)json_integer_value(b) > numel)
            return mt_err_set(e, "%s/meta.json: \"optimizer.distributed.shard_offsets\" must rise from 0 to %zu", dir, numel);
        size_t lo = (size_t)json_integer_value(a), cnt = (size_t)json_integer_value(b) - lo;
        char path[PATH_BYTES + 64];
        shard_path(path, sizeof path, dir, r);
        mt_st_file f;
        if (mt_st_open(&f, path, e)) return -1;
        int rc = 0;
        const char *off = mt_st_meta(&f, "offset");
        if (!off || strtoull(off, NULL, 10) != lo) rc = mt_err_set(e, "%s: metadata offset is not %zu", path, lo);
        const char *names[2] = {"exp_avg", "exp_avg_sq"};
        float *dst[2] = {m, v};
        for (int k = 0; k < 2 && !rc; k++) {
            const mt_st_info *ti = mt_st_find(&f, names[k]);
            if (!ti) rc = mt_err_set(e, "%s: missing tensor '%s'", path, names[k]);
            else if (ti->dtype != MT_ST_F32 || ti->ndim != 1 || (size_t)ti->numel != cnt)
                rc = mt_err_set(e, "%s: tensor '%s' is not F32 [%zu]", path, names[k], cnt);
            else if (cnt) memcpy(dst[k] + lo, ti->data, cnt * sizeof(float));
        }
        mt_st_close(&f);
        if (rc) return -1;
    }
    return 0;
}
