/* safetensors.c: safetensors writer and validating reader (see safetensors.h). */
#include "io/safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/mman.h>

#include "io/atomic.h"
#include "mt_base.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "safetensors.c assumes a little-endian host"
#endif

/* name, bits per element, rank in the reference writer's ordering (higher is written first). */
static const struct {
    const char *name;
    int bits, rank;
} dtypes[MT_ST_NDTYPES] = {
    [MT_ST_BOOL] = {"BOOL", 8, 0},           [MT_ST_U8] = {"U8", 8, 4},
    [MT_ST_I8] = {"I8", 8, 5},               [MT_ST_I16] = {"I16", 16, 11},
    [MT_ST_U16] = {"U16", 16, 12},           [MT_ST_F16] = {"F16", 16, 13},
    [MT_ST_BF16] = {"BF16", 16, 14},         [MT_ST_I32] = {"I32", 32, 15},
    [MT_ST_U32] = {"U32", 32, 16},           [MT_ST_F32] = {"F32", 32, 17},
    [MT_ST_F64] = {"F64", 64, 19},           [MT_ST_I64] = {"I64", 64, 20},
    [MT_ST_U64] = {"U64", 64, 21},           [MT_ST_F8_E4M3] = {"F8_E4M3", 8, 7},
    [MT_ST_F8_E5M2] = {"F8_E5M2", 8, 6},     [MT_ST_F8_E8M0] = {"F8_E8M0", 8, 8},
    [MT_ST_F8_E4M3FNUZ] = {"F8_E4M3FNUZ", 8, 9}, [MT_ST_F8_E5M2FNUZ] = {"F8_E5M2FNUZ", 8, 10},
    [MT_ST_F4] = {"F4", 4, 1},               [MT_ST_F6_E2M3] = {"F6_E2M3", 6, 2},
    [MT_ST_F6_E3M2] = {"F6_E3M2", 6, 3},     [MT_ST_C64] = {"C64", 64, 18},
};

const char *mt_st_dtype_name(mt_st_dtype d)
{
    return (unsigned)d < MT_ST_NDTYPES ? dtypes[d].name : NULL;
}

int mt_st_dtype_parse(const char *s)
{
    for (int i = 0; i < MT_ST_NDTYPES; i++)
        if (!strcmp(s, dtypes[i].name)) return i;
    return -1;
}

int mt_st_dtype_bits(mt_st_dtype d)
{
    return (unsigned)d < MT_ST_NDTYPES ? dtypes[d].bits : 0;
}

char *mt_st_shape_str(char *buf, size_t cap, int ndim, const int64_t *shape)
{
    size_t k = 0;
    k += (size_t)snprintf(buf, cap, "[");
    for (int i = 0; i < ndim && k < cap; i++)
        k += (size_t)snprintf(buf + k, cap - k, "%s%" PRId64, i ? ", " : "", shape[i]);
    if (k < cap) snprintf(buf + k, cap - k, "]");
    return buf;
}

/* Elements and bytes of a shape; -1 on overflow or when the bits do not make whole bytes
 * (then *why says which). */
static int shape_bytes(mt_st_dtype d, int ndim, const int64_t *shape, int64_t *numel, uint64_t *nbytes,
                       const char **why)
{
    uint64_t n = 1;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0) {
            *why = "has a negative dimension";
            return -1;
        }
        if (__builtin_mul_overflow(n, (uint64_t)shape[i], &n) || n > (uint64_t)INT64_MAX) {
            *why = "has too many elements";
            return -1;
        }
    }
    uint64_t bits;
    if (__builtin_mul_overflow(n, (uint64_t)dtypes[d].bits, &bits)) {
        *why = "has too many elements";
        return -1;
    }
    if (bits % 8) {
        *why = "is not a whole number of bytes";
        return -1;
    }
    *numel = (int64_t)n;
    *nbytes = bits / 8;
    return 0;
}

/* ---- writer ---- */

static int by_name(const void *a, const void *b, void *base)
{
    const mt_st_tensor *t = base;
    return strcmp(t[*(const int *)a].name, t[*(const int *)b].name);
}

static int by_write_order(const void *a, const void *b, void *base)
{
    const mt_st_tensor *x = (const mt_st_tensor *)base + *(const int *)a, *y = (const mt_st_tensor *)base + *(const int *)b;
    int rx = dtypes[x->dtype].rank, ry = dtypes[y->dtype].rank;
    if (rx != ry) return ry - rx;
    return strcmp(x->name, y->name);
}

static int cmp_kv(const void *a, const void *b)
{
    return strcmp((*(const mt_st_kv *const *)a)->key, (*(const mt_st_kv *const *)b)->key);
}

int mt_st_write(const char *path, const mt_st_tensor *t, int n, const mt_st_kv *meta, int n_meta, mt_err *e)
{
    return mt_st_write_fill(path, t, n, meta, n_meta, NULL, NULL, e);
}

/* mt_st_write_fill's callback as a range callback: the whole tensor at once. */
typedef struct whole_fill {
    mt_st_fill_fn fill;
    void *ctx;
} whole_fill;

static int fill_whole(void *ctx, int index, size_t off, void *buf, size_t nbytes, mt_err *e)
{
    const whole_fill *w = ctx;
    (void)off;
    return w->fill(w->ctx, index, buf, nbytes, e);
}

int mt_st_write_fill(const char *path, const mt_st_tensor *t, int n, const mt_st_kv *meta, int n_meta,
                     mt_st_fill_fn fill, void *ctx, mt_err *e)
{
    whole_fill w = {fill, ctx};
    return mt_st_write_ranges(path, t, n, meta, n_meta, fill ? fill_whole : NULL, &w, 0, e);
}

int mt_st_write_ranges(const char *path, const mt_st_tensor *t, int n, const mt_st_kv *meta, int n_meta,
                       mt_st_fill_range_fn fill, void *ctx, size_t chunk, mt_err *e)
{
    void *buf = NULL;
    if (n < 0 || n_meta < 0) return mt_err_set(e, "%s: negative tensor or metadata count", path);
    int *order = mt_xmalloc(sizeof(int) * (size_t)(n ? n : 1));
    uint64_t *nbytes = mt_xmalloc(sizeof(uint64_t) * (size_t)(n ? n : 1));
    const mt_st_kv **kv = mt_xmalloc(sizeof *kv * (size_t)(n_meta ? n_meta : 1));
    json_t *hdr = json_object();
    char *text = NULL;
    int rc = -1;

    for (int i = 0; i < n; i++) {
        const mt_st_tensor *x = &t[i];
        int64_t numel;
        const char *why;
        if (!x->name || !x->name[0] || !strcmp(x->name, "__metadata__")) {
            mt_err_set(e, "%s: tensor %d: invalid name '%s'", path, i, x->name ? x->name : "(null)");
            goto out;
        }
        if ((unsigned)x->dtype >= MT_ST_NDTYPES) {
            mt_err_set(e, "%s: tensor '%s': invalid dtype %d", path, x->name, (int)x->dtype);
            goto out;
        }
        if (x->ndim < 0 || x->ndim > MT_ST_MAXDIM) {
            mt_err_set(e, "%s: tensor '%s': %d dimensions (0..%d supported)", path, x->name, x->ndim, MT_ST_MAXDIM);
            goto out;
        }
        if (shape_bytes(x->dtype, x->ndim, x->shape, &numel, &nbytes[i], &why)) {
            char sb[256];
            mt_err_set(e, "%s: tensor '%s': shape %s %s", path, x->name, mt_st_shape_str(sb, sizeof sb, x->ndim, x->shape),
                       why);
            goto out;
        }
        if (nbytes[i] && !x->data && !fill) {
            mt_err_set(e, "%s: tensor '%s': no data", path, x->name);
            goto out;
        }
        order[i] = i;
    }
    qsort_r(order, (size_t)n, sizeof *order, by_name, (void *)t);
    for (int i = 1; i < n; i++)
        if (!strcmp(t[order[i]].name, t[order[i - 1]].name)) {
            mt_err_set(e, "%s: duplicate tensor name '%s'", path, t[order[i]].name);
            goto out;
        }
    qsort_r(order, (size_t)n, sizeof *order, by_write_order, (void *)t);

    if (n_meta > 0) {
        for (int i = 0; i < n_meta; i++) {
            if (!meta[i].key || !meta[i].value) {
                mt_err_set(e, "%s: metadata entry %d has no key or value", path, i);
                goto out;
            }
            kv[i] = &meta[i];
        }
        qsort(kv, (size_t)n_meta, sizeof *kv, cmp_kv);
        json_t *m = json_object();
        json_object_set_new(hdr, "__metadata__", m);
        for (int i = 0; i < n_meta; i++) {
            /* json_object_set_new() takes v even when it fails */
            json_t *v = (i && !strcmp(kv[i]->key, kv[i - 1]->key)) ? NULL : json_string(kv[i]->value);
            if (!v || json_object_set_new(m, kv[i]->key, v)) {
                mt_err_set(e, "%s: metadata key '%s': invalid or duplicate key, or value not UTF-8", path, kv[i]->key);
                goto out;
            }
        }
    }
    uint64_t off = 0;
    for (int k = 0; k < n; k++) {
        const mt_st_tensor *x = &t[order[k]];
        json_t *shape = json_array();
        for (int d = 0; d < x->ndim; d++) json_array_append_new(shape, json_integer(x->shape[d]));
        json_t *info = json_object();
        json_object_set_new(info, "dtype", json_string(dtypes[x->dtype].name));
        json_object_set_new(info, "shape", shape);
        json_object_set_new(info, "data_offsets",
                            json_pack("[I, I]", (json_int_t)off, (json_int_t)(off + nbytes[order[k]])));
        if (json_object_set_new(hdr, x->name, info)) {
            mt_err_set(e, "%s: tensor name '%s' is not valid UTF-8", path, x->name);
            goto out;
        }
        off += nbytes[order[k]];
    }
    text = json_dumps(hdr, JSON_COMPACT);
    if (!text) {
        mt_err_set(e, "%s: cannot format the header", path);
        goto out;
    }
    size_t len = strlen(text), padded = (len + 7) & ~(size_t)7;
    unsigned char lenbuf[8];
    for (int i = 0; i < 8; i++) lenbuf[i] = (unsigned char)((uint64_t)padded >> (8 * i));
    mt_out o;
    if (mt_out_open(&o, path, e)) goto out;
    static const char spaces[8] = "        ";
    if (mt_out_write(&o, lenbuf, 8, e) || mt_out_write(&o, text, len, e) ||
        mt_out_write(&o, spaces, padded - len, e)) {
        mt_out_abort(&o);
        goto out;
    }
    if (chunk) chunk &= ~(size_t)7;   /* whole elements of every dtype */
    if (fill) {
        uint64_t most = 0;
        for (int i = 0; i < n; i++)
            if (!t[i].data && nbytes[i] > most) most = nbytes[i];
        if (chunk && most > chunk) most = chunk;
        buf = mt_xmalloc(most ? (size_t)most : 1);
    }
    for (int k = 0; k < n; k++) {
        int i = order[k];
        if (t[i].data || !fill) {
            if (mt_out_write(&o, t[i].data, (size_t)nbytes[i], e)) {
                mt_out_abort(&o);
                goto out;
            }
            continue;
        }
        for (uint64_t at = 0; at < nbytes[i];) {
            size_t len = (size_t)(nbytes[i] - at);
            if (chunk && len > chunk) len = chunk;
            if (fill(ctx, i, (size_t)at, buf, len, e) || mt_out_write(&o, buf, len, e)) {
                mt_out_abort(&o);
                goto out;
            }
            at += len;
        }
    }
    if (mt_out_commit(&o, e)) goto out;
    rc = 0;
out:
    free(buf);
    free(text);
    json_decref(hdr);
    free(order);
    free(nbytes);
    free(kv);
    return rc;
}

/* ---- reader ---- */

static int info_by_name(const void *a, const void *b)
{
    return strcmp(((const mt_st_info *)a)->name, ((const mt_st_info *)b)->name);
}

static int info_by_offset(const void *a, const void *b)
{
    const mt_st_info *x = *(const mt_st_info *const *)a, *y = *(const mt_st_info *const *)b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->nbytes != y->nbytes) return x->nbytes < y->nbytes ? -1 : 1;
    return strcmp(x->name, y->name);
}

/* A JSON integer >= 0 (or -1 when it is not one). */
static int64_t nonneg_int(const json_t *v)
{
    if (!json_is_integer(v) || json_integer_value(v) < 0) return -1;
    return (int64_t)json_integer_value(v);
}

/* Parses one tensor entry into ti; buflen bounds the offsets. */
static int parse_entry(const char *path, const char *name, json_t *v, size_t buflen, mt_st_info *ti, mt_err *e)
{
    memset(ti, 0, sizeof *ti);
    ti->name = name;
    if (!json_is_object(v)) return mt_err_set(e, "%s: tensor '%s': entry is not a JSON object", path, name);
    const char *key;
    json_t *val;
    json_object_foreach(v, key, val)
    {
        if (strcmp(key, "dtype") && strcmp(key, "shape") && strcmp(key, "data_offsets"))
            return mt_err_set(e, "%s: tensor '%s': unknown key '%s'", path, name, key);
    }
    json_t *dt = json_object_get(v, "dtype"), *sh = json_object_get(v, "shape"), *of = json_object_get(v, "data_offsets");
    if (!dt || !sh || !of)
        return mt_err_set(e, "%s: tensor '%s': missing \"%s\"", path, name, !dt ? "dtype" : !sh ? "shape" : "data_offsets");
    int d = json_is_string(dt) ? mt_st_dtype_parse(json_string_value(dt)) : -1;
    if (d < 0) {
        char *s = json_dumps(dt, JSON_ENCODE_ANY | JSON_COMPACT);
        mt_err_set(e, "%s: tensor '%s': unknown dtype %.100s", path, name, s ? s : "?");
        free(s);
        return -1;
    }
    ti->dtype = (mt_st_dtype)d;
    if (!json_is_array(sh)) return mt_err_set(e, "%s: tensor '%s': shape is not an array", path, name);
    if (json_array_size(sh) > MT_ST_MAXDIM)
        return mt_err_set(e, "%s: tensor '%s': shape has %zu dimensions, at most %d are supported", path, name,
                          json_array_size(sh), MT_ST_MAXDIM);
    ti->ndim = (int)json_array_size(sh);
    for (int i = 0; i < ti->ndim; i++) {
        ti->shape[i] = nonneg_int(json_array_get(sh, (size_t)i));
        if (ti->shape[i] < 0)
            return mt_err_set(e, "%s: tensor '%s': shape[%d] is not a non-negative integer", path, name, i);
    }
    if (!json_is_array(of) || json_array_size(of) != 2)
        return mt_err_set(e, "%s: tensor '%s': data_offsets is not an array [begin, end]", path, name);
    int64_t b = nonneg_int(json_array_get(of, 0)), en = nonneg_int(json_array_get(of, 1));
    if (b < 0 || en < 0)
        return mt_err_set(e, "%s: tensor '%s': data_offsets are not non-negative integers", path, name);
    if (en < b)
        return mt_err_set(e, "%s: tensor '%s': data_offsets [%" PRId64 ", %" PRId64 "] end before they begin", path,
                          name, b, en);
    char sb[256];
    mt_st_shape_str(sb, sizeof sb, ti->ndim, ti->shape);
    uint64_t nbytes;
    const char *why;
    if (shape_bytes(ti->dtype, ti->ndim, ti->shape, &ti->numel, &nbytes, &why))
        return mt_err_set(e, "%s: tensor '%s': shape %s %s %s", path, name, sb, dtypes[d].name, why);
    if ((uint64_t)(en - b) != nbytes)
        return mt_err_set(e, "%s: tensor '%s': data_offsets [%" PRId64 ", %" PRId64 "] do not match shape %s %s (%" PRIu64
                          " bytes)", path, name, b, en, sb, dtypes[d].name, nbytes);
    if ((uint64_t)en > buflen)
        return mt_err_set(e, "%s: tensor '%s': data_offsets [%" PRId64 ", %" PRId64
                          "] run past the end of the data (%zu bytes; file truncated?)", path, name, b, en, buflen);
    ti->begin = (size_t)b;
    ti->nbytes = (size_t)nbytes;
    return 0;
}

int mt_st_open(mt_st_file *f, const char *path, mt_err *e)
{
    memset(f, 0, sizeof *f);
    if (mt_map_open(&f->map, path, e)) return -1;
    const unsigned char *p = f->map.data;
    size_t size = f->map.size;
    mt_st_info **byoff = NULL;
    if (size < 8) {
        mt_err_set(e, "%s: truncated: %zu bytes, too short for the 8-byte header length", path, size);
        goto fail;
    }
    uint64_t n = 0;
    for (int i = 0; i < 8; i++) n |= (uint64_t)p[i] << (8 * i);
    if (n > MT_ST_MAX_HEADER) {
        mt_err_set(e, "%s: header length %" PRIu64 " exceeds the limit of %u bytes (not a safetensors file?)", path, n,
                   MT_ST_MAX_HEADER);
        goto fail;
    }
    if (n + 8 > size) {
        mt_err_set(e, "%s: truncated: header length %" PRIu64 " but the file has %zu bytes", path, n, size);
        goto fail;
    }
    json_error_t je;
    f->header = json_loadb((const char *)p + 8, (size_t)n, JSON_REJECT_DUPLICATES, &je);
    if (!f->header) {
        mt_err_set(e, "%s: header JSON: byte %d (file offset %d): %s", path, je.position, 8 + je.position, je.text);
        goto fail;
    }
    if (!json_is_object(f->header)) {
        mt_err_set(e, "%s: header is not a JSON object", path);
        goto fail;
    }
    size_t buflen = size - 8 - (size_t)n;
    f->header_len = (size_t)n;
    f->t = mt_xcalloc(json_object_size(f->header) + 1, sizeof *f->t);
    const char *key;
    json_t *val;
    json_object_foreach(f->header, key, val)
    {
        if (!strcmp(key, "__metadata__")) {
            if (!json_is_object(val)) {
                mt_err_set(e, "%s: __metadata__ is not an object", path);
                goto fail;
            }
            const char *mk;
            json_t *mv;
            json_object_foreach(val, mk, mv)
            {
                if (!json_is_string(mv)) {
                    mt_err_set(e, "%s: __metadata__ '%s' is not a string", path, mk);
                    goto fail;
                }
            }
            f->meta = val;
            continue;
        }
        if (parse_entry(path, key, val, buflen, &f->t[f->n], e)) goto fail;
        f->n++;
    }
    /* Sorted by offset the tensors must tile the buffer exactly. */
    byoff = mt_xmalloc(sizeof *byoff * (size_t)(f->n ? f->n : 1));
    for (int i = 0; i < f->n; i++) byoff[i] = &f->t[i];
    qsort(byoff, (size_t)f->n, sizeof *byoff, info_by_offset);
    size_t at = 0;
    for (int i = 0; i < f->n; i++) {
        const mt_st_info *x = byoff[i];
        if (x->begin != at) {
            if (i == 0)
                mt_err_set(e, "%s: tensor '%s': data_offsets [%zu, %zu]: the first tensor must begin at 0", path,
                           x->name, x->begin, x->begin + x->nbytes);
            else
                mt_err_set(e, "%s: tensor '%s': data_offsets [%zu, %zu] %s tensor '%s' [%zu, %zu]", path, x->name,
                           x->begin, x->begin + x->nbytes, x->begin < at ? "overlap" : "leave a gap after",
                           byoff[i - 1]->name, byoff[i - 1]->begin, at);
            goto fail;
        }
        at += x->nbytes;
    }
    if (at != buflen) {
        mt_err_set(e, "%s: %zu bytes of data after the last tensor (tensors end at %zu, the data is %zu bytes)", path,
                   buflen - at, at, buflen);
        goto fail;
    }
    for (int i = 0; i < f->n; i++)
        f->t[i].data = f->t[i].nbytes ? p + 8 + n + f->t[i].begin : NULL;
    qsort(f->t, (size_t)f->n, sizeof *f->t, info_by_name);
    free(byoff);
    f->path = mt_xstrdup(path);
    return 0;
fail:
    free(byoff);
    mt_st_close(f);
    return -1;
}

void mt_st_close(mt_st_file *f)
{
    free(f->t);
    json_decref(f->header);
    mt_map_close(&f->map);
    free(f->path);
    memset(f, 0, sizeof *f);
}

const mt_st_info *mt_st_find(const mt_st_file *f, const char *name)
{
    if (!f->n) return NULL;
    mt_st_info key = {.name = name};
    return bsearch(&key, f->t, (size_t)f->n, sizeof *f->t, info_by_name);
}

const char *mt_st_meta(const mt_st_file *f, const char *key)
{
    return f->meta ? json_string_value(json_object_get(f->meta, key)) : NULL;
}

int mt_st_to_f32(const mt_st_info *t, float *dst)
{
    const unsigned char *p = t->data;
    switch (t->dtype) {
    case MT_ST_F32:
        if (t->nbytes) memcpy(dst, p, t->nbytes);
        return 0;
    case MT_ST_BF16:
        for (int64_t i = 0; i < t->numel; i++) dst[i] = mt_bf16_to_f32((uint16_t)(p[2 * i] | p[2 * i + 1] << 8));
        return 0;
    case MT_ST_F16:
        for (int64_t i = 0; i < t->numel; i++) dst[i] = mt_f16_to_f32((uint16_t)(p[2 * i] | p[2 * i + 1] << 8));
        return 0;
    default:
        return -1;
    }
}

void mt_st_drop(const mt_st_file *f, const mt_st_info *t)
{
    if (!t->nbytes || !f->map.data) return;
    long page = sysconf(_SC_PAGESIZE);
    uintptr_t a = (uintptr_t)t->data & ~(uintptr_t)(page - 1), b = (uintptr_t)t->data + t->nbytes;
    madvise((void *)a, b - a, MADV_DONTNEED);   /* a read-only file mapping: the pages come back from the file */
}

int mt_st_pread_f32(const mt_st_file *f, int *fd, const mt_st_info *t, size_t first, size_t count, float *dst,
                    uint64_t *bytes, mt_err *e)
{
    int es = mt_st_dtype_bits(t->dtype) / 8;
    if (t->dtype != MT_ST_F32 && t->dtype != MT_ST_BF16 && t->dtype != MT_ST_F16)
        return mt_err_set(e, "%s: tensor '%s' is %s, not F32, F16 or BF16", f->path, t->name, mt_st_dtype_name(t->dtype));
    if (first + count > (size_t)t->numel) return mt_err_set(e, "%s: tensor '%s': elements beyond its end", f->path, t->name);
    if (*fd < 0 && (*fd = open(f->path, O_RDONLY | O_CLOEXEC)) < 0) return mt_err_sys(e, "%s", f->path);
    size_t nb = count * (size_t)es;
    unsigned char *buf = t->dtype == MT_ST_F32 ? (unsigned char *)dst : mt_xmalloc(nb ? nb : 1);
    off_t at = (off_t)(8 + f->header_len + t->begin + first * (size_t)es);
    int rc = 0;
    for (size_t got = 0; got < nb;) {
        ssize_t r = pread(*fd, buf + got, nb - got, at + (off_t)got);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) {
            rc = r < 0 ? mt_err_sys(e, "%s: read", f->path) : mt_err_set(e, "%s: ends before tensor '%s' does", f->path, t->name);
            break;
        }
        got += (size_t)r;
    }
    if (!rc && t->dtype != MT_ST_F32) {
        mt_st_info part = *t;
        part.data = buf, part.numel = (int64_t)count, part.nbytes = nb;
        mt_st_to_f32(&part, dst);
    }
    if (buf != (unsigned char *)dst) free(buf);
    if (!rc && bytes) *bytes += nb;
    return rc;
}
