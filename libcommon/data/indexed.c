/* indexed.c: reading (with full validation), writing and merging Megatron .bin/.idx datasets. */
#include "data/indexed.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

uint32_t mt_dtype_itemsize(uint8_t code)
{
    switch (code) {
    case 1: case 2: return 1;
    case 3: case 8: return 2;
    case 4: return 4;
    case 5: return 8;
    default: return 0;
    }
}

const char *mt_dtype_name(uint8_t code)
{
    static const char *names[] = {"?", "uint8", "int8", "int16", "int32", "int64", "float64", "float32", "uint16"};
    return code <= 8 ? names[code] : "?";
}

static uint64_t rd_u64(const unsigned char *p)
{
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}

int32_t mt_indexed_size(const mt_indexed *ds, uint64_t i)
{
    int32_t v;
    memcpy(&v, ds->sizes + 4 * i, 4);
    return v;
}

int64_t mt_indexed_pointer(const mt_indexed *ds, uint64_t i)
{
    int64_t v;
    memcpy(&v, ds->pointers + 8 * i, 8);
    return v;
}

int64_t mt_indexed_doc_idx(const mt_indexed *ds, uint64_t i)
{
    int64_t v;
    memcpy(&v, ds->doc_idx + 8 * i, 8);
    return v;
}

int32_t *mt_indexed_sizes_copy(const mt_indexed *ds)
{
    int32_t *v = mt_xmalloc(ds->n_seq * sizeof *v);
    if (ds->n_seq) memcpy(v, ds->sizes, ds->n_seq * sizeof *v);
    return v;
}

void mt_indexed_tokens(const mt_indexed *ds, uint64_t i, uint64_t from, uint64_t n, uint32_t *out)
{
    const unsigned char *p = ds->bin.data + mt_indexed_pointer(ds, i) + from * ds->itemsize;
    for (uint64_t k = 0; k < n; k++, p += ds->itemsize) {
        switch (ds->dtype) {
        case 1: out[k] = p[0]; break;
        case 2: out[k] = (uint32_t)(int32_t)(int8_t)p[0]; break;
        case 3: { int16_t v; memcpy(&v, p, 2); out[k] = (uint32_t)(int32_t)v; break; }
        case 8: { uint16_t v; memcpy(&v, p, 2); out[k] = v; break; }
        case 4: { int32_t v; memcpy(&v, p, 4); out[k] = (uint32_t)v; break; }
        default: { int64_t v; memcpy(&v, p, 8); out[k] = (uint32_t)v; break; }
        }
    }
}

static int validate(mt_indexed *ds, const char *ip, const char *bp, mt_err *e)
{
    const unsigned char *d = ds->idx.data;
    size_t n = ds->idx.size;
    if (n < MT_IDX_HEADER || memcmp(d, MT_IDX_MAGIC, 9)) {
        if (n >= 8 && !memcmp(d, "TNTIDX\0\0", 8))
            return mt_err_set(e, "%s: byte 0: legacy 'lazy'/'cached' index format; only Megatron's mmap format is supported", ip);
        if (n < 9 || memcmp(d, MT_IDX_MAGIC, 9))
            return mt_err_set(e, "%s: byte 0: not a Megatron indexed dataset (bad magic)", ip);
        return mt_err_set(e, "%s: truncated header (%zu of %d bytes)", ip, n, MT_IDX_HEADER);
    }
    uint64_t version = rd_u64(d + 9);
    if (version != 1) return mt_err_set(e, "%s: byte 9: version %llu, expected 1", ip, (unsigned long long)version);
    ds->dtype = d[17];
    ds->itemsize = mt_dtype_itemsize(ds->dtype);
    if (!ds->itemsize) {
        if (ds->dtype == 6 || ds->dtype == 7)
            return mt_err_set(e, "%s: byte 17: dtype code %u means float32 or float64 depending on the Megatron version "
                                 "that wrote it; token data is never floating point", ip, ds->dtype);
        return mt_err_set(e, "%s: byte 17: unknown dtype code %u", ip, ds->dtype);
    }
    uint64_t S = rd_u64(d + 18), D = rd_u64(d + 26);
    ds->n_seq = S;
    ds->n_doc_idx = D;
    if (S > n / 12 || D > n / 8)
        return mt_err_set(e, "%s: bytes 18-33: %llu sequences / %llu document entries cannot fit in a %zu-byte file "
                             "(truncated or corrupt)", ip, (unsigned long long)S, (unsigned long long)D, n);
    uint64_t want = MT_IDX_HEADER + 12 * S + 8 * D;
    if (n == want + S && S > 0)
        ds->has_modes = true;
    else if (n != want)
        return mt_err_set(e, "%s: file is %zu bytes, but its header (%llu sequences, %llu document entries) needs "
                             "%llu: %s", ip, n, (unsigned long long)S, (unsigned long long)D, (unsigned long long)want,
                          n < want ? "truncated" : "trailing garbage");
    if (D < 1) return mt_err_set(e, "%s: byte 26: empty document index (needs at least the leading 0)", ip);
    ds->sizes = d + MT_IDX_HEADER;
    ds->pointers = ds->sizes + 4 * S;
    ds->doc_idx = ds->pointers + 8 * S;
    int64_t prev = 0;
    for (uint64_t i = 0; i < D; i++) {
        int64_t v = mt_indexed_doc_idx(ds, i);
        if ((i == 0 && v != 0) || v < prev || (uint64_t)v > S)
            return mt_err_set(e, "%s: byte %llu: doc_idx[%llu] = %lld is out of order or range (0..%llu)", ip,
                              (unsigned long long)(MT_IDX_HEADER + 12 * S + 8 * i), (unsigned long long)i,
                              (long long)v, (unsigned long long)S);
        prev = v;
    }
    if ((uint64_t)prev != S)
        return mt_err_set(e, "%s: doc_idx ends at %lld, expected the sequence count %llu", ip, (long long)prev,
                          (unsigned long long)S);
    uint64_t off = 0;
    for (uint64_t i = 0; i < S; i++) {
        int32_t sz = mt_indexed_size(ds, i);
        int64_t ptr = mt_indexed_pointer(ds, i);
        if (sz < 0)
            return mt_err_set(e, "%s: byte %llu: sizes[%llu] = %d is negative", ip,
                              (unsigned long long)(MT_IDX_HEADER + 4 * i), (unsigned long long)i, sz);
        if (ptr < 0 || (uint64_t)ptr != off)
            return mt_err_set(e, "%s: byte %llu: pointers[%llu] = %lld, expected %llu from the sizes before it", ip,
                              (unsigned long long)(MT_IDX_HEADER + 4 * S + 8 * i), (unsigned long long)i,
                              (long long)ptr, (unsigned long long)off);
        off += (uint64_t)sz * ds->itemsize;
        ds->n_tokens += (uint64_t)sz;
    }
    if (ds->bin.size < off)
        return mt_err_set(e, "%s: %zu bytes, but the index describes %llu: truncated", bp, ds->bin.size,
                          (unsigned long long)off);
    if (ds->bin.size > off)
        return mt_err_set(e, "%s: %zu bytes, %llu more than the index describes (Megatron versions of 2022-11 to "
                             "2023-08 wrote such files with --append-eod: EOD tokens not counted in sizes, so the "
                             "pointers are wrong; re-tokenize)", bp, ds->bin.size,
                          (unsigned long long)(ds->bin.size - off));
    return 0;
}

int mt_indexed_open(mt_indexed *ds, const char *prefix, mt_err *e)
{
    memset(ds, 0, sizeof *ds);
    size_t n = strlen(prefix) + 5;
    char *ip = mt_xmalloc(n), *bp = mt_xmalloc(n);
    snprintf(ip, n, "%s.idx", prefix);
    snprintf(bp, n, "%s.bin", prefix);
    int rc = mt_map_open(&ds->idx, ip, e);
    if (!rc) rc = mt_map_open(&ds->bin, bp, e);
    if (!rc) rc = validate(ds, ip, bp, e);
    free(ip);
    free(bp);
    if (rc) mt_indexed_close(ds);
    return rc;
}

void mt_indexed_close(mt_indexed *ds)
{
    mt_map_close(&ds->idx);
    mt_map_close(&ds->bin);
}

int mt_indexed_writer_open(mt_indexed_writer *w, const char *prefix, uint8_t dtype, mt_err *e)
{
    memset(w, 0, sizeof *w);
    w->itemsize = mt_dtype_itemsize(dtype);
    if (!w->itemsize) return mt_err_set(e, "%s: unsupported dtype code %u", prefix, dtype);
    w->dtype = dtype;
    w->prefix = mt_xstrdup(prefix);
    size_t n = strlen(prefix) + 5;
    char *bp = mt_xmalloc(n);
    snprintf(bp, n, "%s.bin", prefix);
    int rc = mt_out_open(&w->bin, bp, e);
    free(bp);
    if (rc) {
        free(w->prefix);
        w->prefix = NULL;
        return -1;
    }
    w->doc_idx = mt_xmalloc(64 * sizeof *w->doc_idx);
    w->cap_doc = 64;
    w->doc_idx[w->n_doc++] = 0;
    return 0;
}

static void push_seq(mt_indexed_writer *w, int32_t size)
{
    if (w->n_seq == w->cap_seq) {
        w->cap_seq = w->cap_seq ? 2 * w->cap_seq : 1024;
        w->sizes = mt_xrealloc(w->sizes, w->cap_seq * sizeof *w->sizes);
    }
    w->sizes[w->n_seq++] = size;
}

static void push_doc(mt_indexed_writer *w, int64_t v)
{
    if (w->n_doc == w->cap_doc) {
        w->cap_doc *= 2;
        w->doc_idx = mt_xrealloc(w->doc_idx, w->cap_doc * sizeof *w->doc_idx);
    }
    w->doc_idx[w->n_doc++] = v;
}

int mt_indexed_writer_add(mt_indexed_writer *w, const uint32_t *ids, uint64_t n, mt_err *e)
{
    if (n > INT32_MAX) return mt_err_set(e, "%s: a document of %llu tokens exceeds Megatron's int32 sizes", w->prefix,
                                         (unsigned long long)n);
    size_t bytes = (size_t)n * w->itemsize;
    if (bytes > w->scratch_cap) {
        w->scratch_cap = bytes * 2;
        w->scratch = mt_xrealloc(w->scratch, w->scratch_cap);
    }
    for (uint64_t i = 0; i < n; i++) {
        uint64_t v = ids[i];
        memcpy(w->scratch + i * w->itemsize, &v, w->itemsize); /* little-endian host */
    }
    if (mt_out_write(&w->bin, w->scratch, bytes, e)) return -1;
    w->bin_bytes += bytes;
    if (n) push_seq(w, (int32_t)n);
    push_doc(w, (int64_t)w->n_seq);
    return 0;
}

int mt_indexed_writer_append(mt_indexed_writer *w, const mt_indexed *ds, mt_err *e)
{
    if (ds->dtype != w->dtype)
        return mt_err_set(e, "cannot merge a %s dataset into %s, which is %s", mt_dtype_name(ds->dtype), w->prefix,
                          mt_dtype_name(w->dtype));
    if (mt_out_write(&w->bin, ds->bin.data, ds->bin.size, e)) return -1;
    w->bin_bytes += ds->bin.size;
    uint64_t base = w->n_seq;
    for (uint64_t i = 0; i < ds->n_seq; i++) push_seq(w, mt_indexed_size(ds, i));
    for (uint64_t i = 1; i < ds->n_doc_idx; i++) push_doc(w, (int64_t)base + mt_indexed_doc_idx(ds, i));
    return 0;
}

static void put(unsigned char **p, const void *v, size_t n)
{
    memcpy(*p, v, n);
    *p += n;
}

int mt_indexed_writer_finish(mt_indexed_writer *w, mt_err *e)
{
    size_t n = strlen(w->prefix) + 5;
    char *ip = mt_xmalloc(n);
    snprintf(ip, n, "%s.idx", w->prefix);
    mt_out idx;
    if (mt_out_open(&idx, ip, e)) {
        free(ip);
        mt_indexed_writer_abort(w);
        return -1;
    }
    free(ip);
    unsigned char hdr[MT_IDX_HEADER], *p = hdr;
    uint64_t version = 1, S = w->n_seq, D = w->n_doc;
    put(&p, MT_IDX_MAGIC, 9);
    put(&p, &version, 8);
    put(&p, &w->dtype, 1);
    put(&p, &S, 8);
    put(&p, &D, 8);
    int rc = mt_out_write(&idx, hdr, sizeof hdr, e);
    if (!rc) rc = mt_out_write(&idx, w->sizes, S * sizeof *w->sizes, e);
    int64_t ptr = 0;
    for (uint64_t i = 0; i < S && !rc; i++) {
        rc = mt_out_write(&idx, &ptr, 8, e);
        ptr += (int64_t)w->sizes[i] * w->itemsize;
    }
    if (!rc) rc = mt_out_write(&idx, w->doc_idx, D * sizeof *w->doc_idx, e);
    /* .bin first: a crash in between leaves a new .bin with an old or missing .idx, which the reader's
     * size checks reject, never a new .idx over an old .bin. */
    if (!rc) rc = mt_out_commit(&w->bin, e);
    if (!rc) rc = mt_out_commit(&idx, e);
    if (rc) {
        mt_out_abort(&idx);
        mt_indexed_writer_abort(w);
        return -1;
    }
    mt_indexed_writer_abort(w); /* frees; the committed .bin is not touched */
    return 0;
}

void mt_indexed_writer_abort(mt_indexed_writer *w)
{
    mt_out_abort(&w->bin);
    free(w->sizes);
    free(w->doc_idx);
    free(w->scratch);
    free(w->prefix);
    memset(w, 0, sizeof *w);
}
