/* dist_optim.c: the distributed optimizer's shard files, one per data-parallel rank of a checkpoint, and
 * their reassembly at any data-parallel size (see dist_optim.h). */
#include "ckpt/dist_optim.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <unistd.h>

#include "ckpt/checkpoint.h"
#include "io/safetensors.h"

#define PATH_BYTES 4096

json_t *mt_dist_optim_meta(int dp_size, const size_t *lo)
{
    json_t *off = json_array();
    for (int r = 0; r <= dp_size; r++) json_array_append_new(off, json_integer((json_int_t)lo[r]));
    return json_pack("{s:i,s:o}", "dp_size", dp_size, "shard_offsets", off);
}

static void shard_name(char *buf, size_t cap, int r) { snprintf(buf, cap, "distrib_optim_%03d.safetensors", r); }

static json_t *piece(const char *file, size_t lo, size_t hi, size_t at)
{
    return json_pack("[s,I,I,I]", file, (json_int_t)lo, (json_int_t)hi, (json_int_t)at);
}

json_t *mt_dist_optim_meta_pieces(int dp_size, int ep_size, const mt_dist_src *p, int n)
{
    json_t *pieces = json_array();
    char file[96], name[40];
    for (int i = 0; i < n; i++) {
        if (p[i].hi <= p[i].lo) continue;
        shard_name(name, sizeof name, p[i].shard);
        if (p[i].dir && p[i].dir[0]) snprintf(file, sizeof file, "../%s/%s", p[i].dir, name);
        else snprintf(file, sizeof file, "%s", name);
        json_array_append_new(pieces, piece(file, p[i].lo, p[i].hi, p[i].at));
    }
    return json_pack("{s:i,s:i,s:o}", "dp_size", dp_size, "expert_model_parallel_size", ep_size, "pieces", pieces);
}

int mt_dist_optim_write_ranges(const char *dir, int dp_rank, int dp_size, size_t lo, size_t hi, size_t lo2, size_t hi2,
                               size_t numel, int with_param, mt_st_fill_range_fn fill, void *ctx, mt_err *e)
{
    char path[PATH_BYTES + 64], name[40];
    shard_name(name, sizeof name, dp_rank);
    snprintf(path, sizeof path, "%s/%s", dir, name);
    char off[32], all[32], rank[16], size[16], ranges[96];
    snprintf(off, sizeof off, "%zu", lo);
    snprintf(all, sizeof all, "%zu", numel);
    snprintf(rank, sizeof rank, "%d", dp_rank);
    snprintf(size, sizeof size, "%d", dp_size);
    snprintf(ranges, sizeof ranges, "%zu:%zu,%zu:%zu", lo, hi, lo2, hi2);
    size_t n = (hi - lo) + (hi2 - lo2);
    mt_st_kv kv[] = {{"format", "pt"}, {"offset", off}, {"numel", all}, {"dp_rank", rank}, {"dp_size", size}, {"ranges", ranges}};
    mt_st_tensor st[3] = {{MT_DIST_OPTIM_NAMES[0], MT_ST_F32, 1, {(int64_t)n}, NULL},
                          {MT_DIST_OPTIM_NAMES[1], MT_ST_F32, 1, {(int64_t)n}, NULL},
                          {MT_DIST_OPTIM_NAMES[2], MT_ST_F32, 1, {(int64_t)n}, NULL}};
    return mt_st_write_ranges(path, st, with_param ? 3 : 2, kv, hi2 > lo2 ? 6 : 5, fill, ctx, MT_DIST_OPTIM_CHUNK, e);
}

const char *const MT_DIST_OPTIM_NAMES[3] = {"exp_avg", "exp_avg_sq", "param"};

/* ---- reading ranges ---- */

/* A piece's file name: a shard file of this directory or of a sibling rank directory, nothing else. */
static int good_file(const char *f)
{
    const char *base = f;
    if (!strncmp(f, "../mp_rank_", 11)) {
        const char *p = f + 11;
        while ((*p >= '0' && *p <= '9') || *p == '_') p++;
        if (*p != '/' || p == f + 11) return 0;
        base = p + 1;
    }
    unsigned r;
    int used = 0;
    return sscanf(base, "distrib_optim_%3u.safetensors%n", &r, &used) == 1 && used > 0 && base[used] == 0;
}

/* The pieces from "shard_offsets" (file r holds lo[r] .. lo[r + 1] - 1 from its start) or "pieces". */
static int read_pieces(mt_dist_shards *s, const char *dir, const json_t *d, size_t numel, char (**files)[128], mt_err *e)
{
    json_t *offs = json_object_get(d, "shard_offsets"), *pcs = json_object_get(d, "pieces");
    json_t *ds = json_object_get(d, "dp_size");
    if (!json_is_integer(ds) || json_integer_value(ds) < 1 || json_integer_value(ds) > 1000000)
        return mt_err_set(e, "%s/meta.json: \"optimizer.distributed\" needs dp_size", dir);
    if (json_is_array(pcs)) {
        size_t np = json_array_size(pcs), at = 0;
        s->piece = mt_xcalloc(np ? np : 1, sizeof *s->piece);
        *files = mt_xcalloc(np ? np : 1, sizeof **files);
        for (size_t k = 0; k < np; k++) {
            const char *f;
            json_int_t lo, hi, off;
            if (json_unpack(json_array_get(pcs, k), "[sIII!]", &f, &lo, &hi, &off) || !good_file(f) || lo < 0 ||
                hi <= lo || off < 0 || (size_t)lo != at || (size_t)hi > numel)
                return mt_err_set(e, "%s/meta.json: \"optimizer.distributed.pieces\"[%zu] is not [shard file, lo, hi, at] "
                                     "continuing from %zu", dir, k, at);
            int fi = 0;
            while (fi < s->n && strcmp((*files)[fi], f)) fi++;
            if (fi == s->n) snprintf((*files)[s->n++], sizeof **files, "%s", f);
            s->piece[s->npieces++] = (mt_dist_piece){(size_t)lo, (size_t)hi, fi, (size_t)off};
            at = (size_t)hi;
        }
        if (at != numel)
            return mt_err_set(e, "%s/meta.json: the optimizer shards cover %zu parameters, this model has %zu", dir, at, numel);
        return 0;
    }
    int n = (int)json_integer_value(ds);
    if (!json_is_array(offs) || json_array_size(offs) != (size_t)n + 1)
        return mt_err_set(e, "%s/meta.json: \"optimizer.distributed\" needs dp_size and dp_size + 1 shard_offsets", dir);
    json_t *last = json_array_get(offs, (size_t)n);
    if (!json_is_integer(last) || (size_t)json_integer_value(last) != numel)
        return mt_err_set(e, "%s/meta.json: the optimizer shards cover %lld parameters, this model has %zu", dir,
                          json_is_integer(last) ? (long long)json_integer_value(last) : -1LL, numel);
    s->piece = mt_xcalloc((size_t)n, sizeof *s->piece);
    *files = mt_xcalloc((size_t)n, sizeof **files);
    size_t prev = 0;
    for (int r = 0; r <= n; r++) {
        json_t *a = json_array_get(offs, (size_t)r);
        if (!json_is_integer(a) || json_integer_value(a) < 0 || (size_t)json_integer_value(a) > numel ||
            (size_t)json_integer_value(a) < prev || (r == 0 && json_integer_value(a) != 0))
            return mt_err_set(e, "%s/meta.json: \"optimizer.distributed.shard_offsets\" must rise from 0 to %zu", dir, numel);
        size_t v = (size_t)json_integer_value(a);
        if (r) s->piece[r - 1] = (mt_dist_piece){prev, v, r - 1, 0};
        prev = v;
    }
    for (int r = 0; r < n; r++) shard_name((*files)[r], sizeof **files, r);
    s->n = s->npieces = n;
    return 0;
}

/* The ranges file f holds, from its metadata: "ranges" ("lo:hi,lo2:hi2"), else "offset" and the tensors'
 * length. 2 ranges at most; how many, or -1. */
static int file_ranges(const mt_st_file *f, size_t cnt, size_t r[4])
{
    const char *rg = mt_st_meta(f, "ranges"), *off = mt_st_meta(f, "offset");
    if (rg) {
        unsigned long long v[4];
        int used = 0;
        if (sscanf(rg, "%llu:%llu,%llu:%llu%n", &v[0], &v[1], &v[2], &v[3], &used) != 4 || rg[used] || v[1] < v[0] ||
            v[3] < v[2] || (v[1] - v[0]) + (v[3] - v[2]) != cnt)
            return -1;
        for (int i = 0; i < 4; i++) r[i] = (size_t)v[i];
        return 2;
    }
    if (!off) return -1;
    r[0] = (size_t)strtoull(off, NULL, 10), r[1] = r[0] + cnt;
    return 1;
}

int mt_dist_shards_open(mt_dist_shards *s, const char *dir, const json_t *d, size_t numel, mt_err *e)
{
    memset(s, 0, sizeof *s);
    char(*files)[128] = NULL;
    if (read_pieces(s, dir, d, numel, &files, e)) {
        free(files);
        mt_dist_shards_close(s);
        return -1;
    }
    s->f = mt_xcalloc((size_t)(s->n ? s->n : 1), sizeof *s->f);
    s->fd = mt_xmalloc((size_t)(s->n ? s->n : 1) * sizeof *s->fd);
    for (int r = 0; r < s->n; r++) s->fd[r] = -1;
    s->has_param = 1;
    int rc = 0;
    for (int r = 0; r < s->n && !rc; r++) {
        char path[PATH_BYTES + 160];
        snprintf(path, sizeof path, "%s/%s", dir, files[r]);
        if (mt_st_open(&s->f[r], path, e)) {
            rc = -1;
            break;
        }
        s->opened = r + 1;
        const mt_st_info *t0 = mt_st_find(&s->f[r], MT_DIST_OPTIM_NAMES[0]);
        size_t cnt = t0 && t0->ndim == 1 ? (size_t)t0->numel : 0;
        for (int k = 0; k < 3 && !rc; k++) {
            const mt_st_info *ti = mt_st_find(&s->f[r], MT_DIST_OPTIM_NAMES[k]);
            if (!ti && k == 2) s->has_param = 0;
            else if (!ti || ti->dtype != MT_ST_F32 || ti->ndim != 1 || (size_t)ti->numel != cnt)
                rc = mt_err_set(e, "%s: tensor '%s' is not F32 [%zu]", path, MT_DIST_OPTIM_NAMES[k], cnt);
        }
        /* each piece in this file must be where the file says it holds those elements */
        size_t rg[4];
        int nr = rc ? 0 : file_ranges(&s->f[r], cnt, rg);
        if (!rc && nr < 0) rc = mt_err_set(e, "%s: no valid \"offset\" or \"ranges\" metadata", path);
        for (int k = 0; k < s->npieces && !rc; k++) {
            const mt_dist_piece *p = &s->piece[k];
            if (p->file != r) continue;
            int ok = 0;
            for (int q = 0; q < nr && !ok; q++) {
                size_t before = q ? rg[1] - rg[0] : 0;
                ok = p->lo >= rg[2 * q] && p->hi <= rg[2 * q + 1] && p->at == before + (p->lo - rg[2 * q]);
            }
            if (!ok)
                rc = mt_err_set(e, "%s: does not hold parameters %zu .. %zu at element %zu (its metadata: offset %s, ranges %s)",
                                path, p->lo, p->hi - 1, p->at, mt_st_meta(&s->f[r], "offset") ? mt_st_meta(&s->f[r], "offset") : "-",
                                mt_st_meta(&s->f[r], "ranges") ? mt_st_meta(&s->f[r], "ranges") : "-");
        }
    }
    free(files);
    if (rc) mt_dist_shards_close(s);
    return rc;
}

void mt_dist_shards_close(mt_dist_shards *s)
{
    for (int r = 0; r < s->opened; r++) mt_st_close(&s->f[r]);
    for (int r = 0; s->fd && r < s->n; r++)
        if (s->fd[r] >= 0) close(s->fd[r]);
    free(s->f);
    free(s->fd);
    free(s->piece);
    memset(s, 0, sizeof *s);
}

int mt_dist_shards_read(mt_dist_shards *s, int which, size_t first, size_t count, float *dst, uint64_t *bytes, mt_err *e)
{
    if (which == 2 && !s->has_param) return mt_err_set(e, "%s: no fp32 master (\"param\") in the optimizer shards", s->f[0].path);
    size_t end = s->npieces ? s->piece[s->npieces - 1].hi : 0;
    if (first + count > end) return mt_err_set(e, "%s: elements beyond the optimizer shards", s->n ? s->f[0].path : "optimizer");
    for (int k = 0; k < s->npieces && count; k++) {
        const mt_dist_piece *p = &s->piece[k];
        if (first >= p->hi || first < p->lo) continue;
        size_t take = p->hi - first < count ? p->hi - first : count;
        mt_st_file *f = &s->f[p->file];
        const mt_st_info *ti = mt_st_find(f, MT_DIST_OPTIM_NAMES[which]);
        if (mt_st_pread_f32(f, &s->fd[p->file], ti, p->at + (first - p->lo), take, dst, bytes, e)) return -1;
        first += take, count -= take, dst += take;
    }
    return 0;
}
