/* dist_optim.c: the distributed optimizer's shard files, one per data-parallel rank of a checkpoint, and
 * their reassembly at any data-parallel size (see dist_optim.h). */
#include "ckpt/dist_optim.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <unistd.h>

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

int mt_dist_optim_write_ranges(const char *dir, int dp_rank, int dp_size, size_t lo, size_t numel, size_t n,
                               int with_param, mt_st_fill_range_fn fill, void *ctx, mt_err *e)
{
    char path[PATH_BYTES + 64];
    shard_path(path, sizeof path, dir, dp_rank);
    char off[32], all[32], rank[16], size[16];
    snprintf(off, sizeof off, "%zu", lo);
    snprintf(all, sizeof all, "%zu", numel);
    snprintf(rank, sizeof rank, "%d", dp_rank);
    snprintf(size, sizeof size, "%d", dp_size);
    mt_st_kv kv[] = {{"format", "pt"}, {"offset", off}, {"numel", all}, {"dp_rank", rank}, {"dp_size", size}};
    mt_st_tensor st[3] = {{MT_DIST_OPTIM_NAMES[0], MT_ST_F32, 1, {(int64_t)n}, NULL},
                          {MT_DIST_OPTIM_NAMES[1], MT_ST_F32, 1, {(int64_t)n}, NULL},
                          {MT_DIST_OPTIM_NAMES[2], MT_ST_F32, 1, {(int64_t)n}, NULL}};
    return mt_st_write_ranges(path, st, with_param ? 3 : 2, kv, 5, fill, ctx, MT_DIST_OPTIM_CHUNK, e);
}

const char *const MT_DIST_OPTIM_NAMES[3] = {"exp_avg", "exp_avg_sq", "param"};

/* ---- reading ranges ---- */

int mt_dist_shards_open(mt_dist_shards *s, const char *dir, const json_t *d, size_t numel, mt_err *e)
{
    memset(s, 0, sizeof *s);
    json_t *offs = json_object_get(d, "shard_offsets");
    json_t *ds = json_object_get(d, "dp_size");
    if (!json_is_integer(ds) || json_integer_value(ds) < 1 || json_integer_value(ds) > 1000000 || !json_is_array(offs) ||
        json_array_size(offs) != (size_t)json_integer_value(ds) + 1)
        return mt_err_set(e, "%s/meta.json: \"optimizer.distributed\" needs dp_size and dp_size + 1 shard_offsets", dir);
    int n = (int)json_integer_value(ds);
    json_t *last = json_array_get(offs, (size_t)n);
    if (!json_is_integer(last) || (size_t)json_integer_value(last) != numel)
        return mt_err_set(e, "%s/meta.json: the optimizer shards cover %lld parameters, this model has %zu", dir,
                          json_is_integer(last) ? (long long)json_integer_value(last) : -1LL, numel);
    s->n = n;
    s->lo = mt_xcalloc((size_t)n + 1, sizeof *s->lo);
    s->f = mt_xcalloc((size_t)n, sizeof *s->f);
    s->fd = mt_xmalloc((size_t)n * sizeof *s->fd);
    for (int r = 0; r < n; r++) s->fd[r] = -1;
    s->has_param = 1;
    for (int r = 0; r <= n; r++) {
        json_t *a = json_array_get(offs, (size_t)r);
        if (!json_is_integer(a) || json_integer_value(a) < 0 || (size_t)json_integer_value(a) > numel ||
            (r && (size_t)json_integer_value(a) < s->lo[r - 1]) || (r == 0 && json_integer_value(a) != 0)) {
            mt_dist_shards_close(s);
            return mt_err_set(e, "%s/meta.json: \"optimizer.distributed.shard_offsets\" must rise from 0 to %zu", dir, numel);
        }
        s->lo[r] = (size_t)json_integer_value(a);
    }
    for (int r = 0; r < n; r++) {
        char path[PATH_BYTES + 64];
        shard_path(path, sizeof path, dir, r);
        if (mt_st_open(&s->f[r], path, e)) {
            mt_dist_shards_close(s);
            return -1;
        }
        s->opened = r + 1;
        size_t cnt = s->lo[r + 1] - s->lo[r];
        const char *off = mt_st_meta(&s->f[r], "offset");
        if (!off || strtoull(off, NULL, 10) != s->lo[r]) {
            mt_dist_shards_close(s);
            return mt_err_set(e, "%s: metadata offset is not %zu", path, s->lo[r]);
        }
        for (int k = 0; k < 3; k++) {
            const mt_st_info *ti = mt_st_find(&s->f[r], MT_DIST_OPTIM_NAMES[k]);
            if (!ti && k == 2) {
                s->has_param = 0;
                continue;
            }
            if (!ti || ti->dtype != MT_ST_F32 || ti->ndim != 1 || (size_t)ti->numel != cnt) {
                mt_dist_shards_close(s);
                return mt_err_set(e, "%s: tensor '%s' is not F32 [%zu]", path, MT_DIST_OPTIM_NAMES[k], cnt);
            }
        }
    }
    return 0;
}

void mt_dist_shards_close(mt_dist_shards *s)
{
    for (int r = 0; r < s->opened; r++) mt_st_close(&s->f[r]);
    for (int r = 0; s->fd && r < s->n; r++)
        if (s->fd[r] >= 0) close(s->fd[r]);
    free(s->f);
    free(s->fd);
    free(s->lo);
    memset(s, 0, sizeof *s);
}

int mt_dist_shards_read(mt_dist_shards *s, int which, size_t first, size_t count, float *dst, uint64_t *bytes, mt_err *e)
{
    if (which == 2 && !s->has_param) return mt_err_set(e, "%s: no fp32 master (\"param\") in the optimizer shards", s->f[0].path);
    if (first + count > s->lo[s->n]) return mt_err_set(e, "%s: elements beyond the optimizer shards", s->f[0].path);
    for (int r = 0; r < s->n && count; r++) {
        if (first >= s->lo[r + 1] || first < s->lo[r]) continue;
        size_t take = s->lo[r + 1] - first < count ? s->lo[r + 1] - first : count;
        const mt_st_info *ti = mt_st_find(&s->f[r], MT_DIST_OPTIM_NAMES[which]);
        if (mt_st_pread_f32(&s->f[r], &s->fd[r], ti, first - s->lo[r], take, dst, bytes, e)) return -1;
        first += take, count -= take, dst += take;
    }
    return 0;
}
