/* dist_optim.c: the distributed optimizer's shard files, one per data-parallel rank of a checkpoint, and
 * their reassembly at any data-parallel size (see dist_optim.h). */
#include "ckpt/dist_optim.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/safetensors.h"

#define PATH_BYTES 4096

json_t *mt_dist_optim_meta(int dp_size, const size_t *lo)
{
    json_t *off = json_array();
    for (int r = 0; r <= dp_size; r++) json_array_append_new(off, json_integer((json_int_t)lo[r]));
    return json_pack("{s:i,s:o}", "dp_size", dp_size, "shard_offsets", off);
}

static void shard_path(char *buf, size_t cap, const char *dir, int r)
{
    snprintf(buf, cap, "%s/distrib_optim_%03d.safetensors", dir, r);
}

int mt_dist_optim_write(const char *dir, int dp_rank, int dp_size, size_t lo, size_t numel, const float *m_v, size_t n,
                        mt_err *e)
{
    char path[PATH_BYTES + 64];
    shard_path(path, sizeof path, dir, dp_rank);
    for (size_t i = 0; i < 2 * n; i++)
        if (!isfinite(m_v[i]))
            return mt_err_set(e, "%s: not saving: %s of parameter %zu is not finite", path,
                              i < n ? "exp_avg" : "exp_avg_sq", lo + i % n);
    char off[32], all[32], rank[16], size[16];
    snprintf(off, sizeof off, "%zu", lo);
    snprintf(all, sizeof all, "%zu", numel);
    snprintf(rank, sizeof rank, "%d", dp_rank);
    snprintf(size, sizeof size, "%d", dp_size);
    mt_st_kv kv[] = {{"format", "pt"}, {"offset", off}, {"numel", all}, {"dp_rank", rank}, {"dp_size", size}};
    mt_st_tensor st[2] = {{"exp_avg", MT_ST_F32, 1, {(int64_t)n}, m_v},
                          {"exp_avg_sq", MT_ST_F32, 1, {(int64_t)n}, m_v + n}};
    return mt_st_write(path, st, 2, kv, 5, e);
}

int mt_dist_optim_read(const char *dir, const json_t *d, size_t numel, float *m, float *v, mt_err *e)
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
