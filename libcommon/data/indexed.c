/* indexed.c: Megatron mmap indexed dataset reader, validator, builder and merge (see indexed.h). */
#include "data/indexed.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef unsigned long long ull;

size_t mt_dtype_size(int code)
{
    switch (code) {
    case MT_DTYPE_UINT8:
    case MT_DTYPE_INT8: return 1;
    case MT_DTYPE_INT16:
    case MT_DTYPE_UINT16: return 2;
    case MT_DTYPE_INT32: return 4;
    case MT_DTYPE_INT64: return 8;
    default: return 0;
    }
}

const char *mt_dtype_name(int code)
{
    switch (code) {
    case MT_DTYPE_UINT8: return "uint8";
    case MT_DTYPE_INT8: return "int8";
    case MT_DTYPE_INT16: return "int16";
    case MT_DTYPE_INT32: return "int32";
    case MT_DTYPE_INT64: return "int64";
    case MT_DTYPE_UINT16: return "uint16";
    case 6:
    case 7: return "float64/float32 (ambiguous)";
    default: return "unknown";
    }
}

int mt_dtype_for_vocab(uint64_t vocab_size) { return vocab_size < 65500 ? MT_DTYPE_UINT16 : MT_DTYPE_INT32; }

static uint32_t le32(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static uint64_t le64(const unsigned char *p) { return le32(p) | (uint64_t)le32(p + 4) << 32; }

int64_t mt_dtype_get(int code, const unsigned char *p, uint64_t i)
{
    switch (code) {
    case MT_DTYPE_UINT8: return p[i];
    case MT_DTYPE_INT8: return (int8_t)p[i];
    case MT_DTYPE_INT16: return (int16_t)(uint16_t)(p[2 * i] | p[2 * i + 1] << 8);
    case MT_DTYPE_UINT16: return (uint16_t)(p[2 * i] | p[2 * i + 1] << 8);
    case MT_DTYPE_INT32: return (int32_t)le32(p + 4 * i);
    case MT_DTYPE_INT64: return (int64_t)le64(p + 8 * i);
    default: return 0;
    }
}

static void put_le(unsigned char *p, uint64_t v, size_t n)
{
    for (size_t i = 0; i < n; i++) p[i] = (unsigned char)(v >> (8 * i));
}

/* ---------------------------------------------------------------------------------------------- */
/* Reader. */

static uint64_t off_sizes(uint64_t i) { return MT_IDX_HEADER + 4 * i; }
static uint64_t off_pointers(const mt_indexed *d, uint64_t i) { return MT_IDX_HEADER + 4 * d->n_seqs + 8 * i; }
static uint64_t off_doc_idx(const mt_indexed *d, uint64_t j) { return MT_IDX_HEADER + 12 * d->n_seqs + 8 * j; }
static uint64_t off_modes(const mt_indexed *d) { return MT_IDX_HEADER + 12 * d->n_seqs + 8 * (d->n_docs + 1); }

int32_t mt_indexed_seq_len(const mt_indexed *d, uint64_t i) { return (int32_t)le32(d->idx + off_sizes(i)); }
uint64_t mt_indexed_seq_offset(const mt_indexed *d, uint64_t i) { return le64(d->idx + off_pointers(d, i)); }
uint64_t mt_indexed_doc_idx(const mt_indexed *d, uint64_t j) { return le64(d->idx + off_doc_idx(d, j)); }
int mt_indexed_mode(const mt_indexed *d, uint64_t i) { return d->has_modes ? (int8_t)d->idx[off_modes(d) + i] : 0; }

int64_t mt_indexed_token(const mt_indexed *d, uint64_t i, uint64_t k)
{
    return mt_dtype_get(d->dtype, d->bin + mt_indexed_seq_offset(d, i), k);
}

int mt_indexed_doc_ids(const mt_indexed *d, uint64_t j, mt_ids *out, mt_err *e)
{
    out->n = 0;
    uint64_t a = mt_indexed_doc_idx(d, j), b = mt_indexed_doc_idx(d, j + 1);
    for (uint64_t i = a; i < b; i++) {
        uint64_t n = (uint64_t)mt_indexed_seq_len(d, i);
        const unsigned char *p = d->bin + mt_indexed_seq_offset(d, i);
        mt_ids_reserve(out, n);
        for (uint64_t k = 0; k < n; k++) {
            int64_t v = mt_dtype_get(d->dtype, p, k);
            if (v < 0 || v > (int64_t)UINT32_MAX)
                return mt_err_set(e, "%s.bin: document %llu, sequence %llu, token %llu: value %lld is not a token id",
                                  d->name, (ull)j, (ull)i, (ull)k, (long long)v);
            out->p[out->n++] = (uint32_t)v;
        }
    }
    return 0;
}

/* Saturating a*b + c for size messages. */
static uint64_t sat_muladd(uint64_t a, uint64_t b, uint64_t c)
{
    if (b && a > (UINT64_MAX - c) / b) return UINT64_MAX;
    return a * b + c;
}

static int validate(mt_indexed *d, mt_err *e)
{
    const char *nm = d->name;
    const unsigned char *p = d->idx;
    size_t size = d->idx_size;
    if (size < MT_IDX_HEADER) {
        if (size >= MT_IDX_MAGIC_LEN && memcmp(p, MT_IDX_MAGIC, MT_IDX_MAGIC_LEN))
            return mt_err_set(e, "%s.idx: byte 0: bad magic (not a Megatron MMIDIDX index)", nm);
        return mt_err_set(e, "%s.idx: truncated: %zu bytes, the header alone is %d", nm, size, MT_IDX_HEADER);
    }
    if (memcmp(p, MT_IDX_MAGIC, MT_IDX_MAGIC_LEN)) {
        if (!memcmp(p, "TNTIDX\0\0", 8))
            return mt_err_set(e, "%s.idx: byte 0: legacy TNTIDX index (--dataset-impl lazy/cached) is not supported; "
                                 "only the mmap format (MMIDIDX) is",
                              nm);
        return mt_err_set(e, "%s.idx: byte 0: bad magic (not a Megatron MMIDIDX index)", nm);
    }
    uint64_t version = le64(p + 9);
    if (version != 1)
        return mt_err_set(e, "%s.idx: byte 9: index version %llu is not supported (expected 1)", nm, (ull)version);
    int code = p[17];
    if (code == 6 || code == 7)
        return mt_err_set(e, "%s.idx: byte 17: dtype code %d is ambiguous (float64 or float32 depending on the "
                             "Megatron version that wrote it) and never holds token ids",
                          nm, code);
    if (!mt_dtype_size(code))
        return mt_err_set(e, "%s.idx: byte 17: unknown dtype code %d (expected 1-5 or 8)", nm, code);
    d->dtype = code;
    d->itemsize = mt_dtype_size(code);
    uint64_t S = le64(p + 18), D = le64(p + 26);
    uint64_t room = size - MT_IDX_HEADER;
    if (S > room / 12 || D > (room - 12 * S) / 8) {
        uint64_t need = sat_muladd(D, 8, sat_muladd(S, 12, MT_IDX_HEADER));
        if (need == UINT64_MAX)
            return mt_err_set(e, "%s.idx: byte 18: header counts S=%llu, D=%llu are impossible for a %zu-byte file", nm,
                              (ull)S, (ull)D, size);
        return mt_err_set(e, "%s.idx: byte %zu: truncated: S=%llu sequences and D=%llu doc_idx entries need %llu bytes, "
                             "the file has %zu",
                          nm, size, (ull)S, (ull)D, (ull)need, size);
    }
    if (D == 0)
        return mt_err_set(e, "%s.idx: byte 26: D=0: doc_idx must hold at least its leading 0", nm);
    uint64_t end = MT_IDX_HEADER + 12 * S + 8 * D, extra = size - end;
    if (extra && extra != S)
        return mt_err_set(e, "%s.idx: byte %llu: %llu unexpected bytes after doc_idx (expected 0, or S=%llu for a "
                             "multimodal modes array)",
                          nm, (ull)end, (ull)extra, (ull)S);
    d->n_seqs = S;
    d->n_docs = D - 1;
    d->has_modes = extra != 0;

    /* sizes and pointers, with the .bin extent */
    uint64_t expect = 0, nonempty_seqs = 0;
    int32_t mn = 0, mx = 0;
    for (uint64_t i = 0; i < S; i++) {
        int32_t len = mt_indexed_seq_len(d, i);
        if (len < 0)
            return mt_err_set(e, "%s.idx: byte %llu: sizes[%llu] = %d is negative", nm, (ull)off_sizes(i), (ull)i, len);
        uint64_t ptr = mt_indexed_seq_offset(d, i);
        if (ptr != expect)
            return mt_err_set(e, "%s.idx: byte %llu: pointers[%llu] = %lld, expected %llu (the sum of the preceding "
                                 "sizes times itemsize %zu)",
                              nm, (ull)off_pointers(d, i), (ull)i, (long long)ptr, (ull)expect, d->itemsize);
        expect += (uint64_t)len * d->itemsize;
        if (expect > d->bin_size)
            return mt_err_set(e, "%s.bin: sequence %llu ends at byte %llu but the file has only %llu bytes "
                                 "(truncated .bin, or .bin and .idx do not belong together)",
                              nm, (ull)i, (ull)expect, (ull)d->bin_size);
        if (i == 0 || len < mn) mn = len;
        if (i == 0 || len > mx) mx = len;
        nonempty_seqs += len > 0;
    }
    d->n_tokens = expect / d->itemsize;
    d->min_len = mn;
    d->max_len = mx;

    /* doc_idx */
    uint64_t prev = 0, nonempty_docs = 0;
    for (uint64_t j = 0; j < D; j++) {
        uint64_t v = mt_indexed_doc_idx(d, j);
        if (j == 0 && v != 0)
            return mt_err_set(e, "%s.idx: byte %llu: doc_idx[0] = %lld, expected 0", nm, (ull)off_doc_idx(d, 0),
                              (long long)v);
        if (v > S)
            return mt_err_set(e, "%s.idx: byte %llu: doc_idx[%llu] = %lld exceeds the sequence count S=%llu", nm,
                              (ull)off_doc_idx(d, j), (ull)j, (long long)v, (ull)S);
        if (v < prev)
            return mt_err_set(e, "%s.idx: byte %llu: doc_idx[%llu] = %lld is less than doc_idx[%llu] = %lld (must be "
                                 "non-decreasing)",
                              nm, (ull)off_doc_idx(d, j), (ull)j, (long long)v, (ull)j - 1, (long long)prev);
        if (j > 0) {
            bool any = false;
            for (uint64_t i = prev; i < v && !any; i++) any = mt_indexed_seq_len(d, i) > 0;
            nonempty_docs += any;
        }
        prev = v;
    }
    if (prev != S)
        return mt_err_set(e, "%s.idx: byte %llu: doc_idx[%llu] = %lld is the last entry but should equal the sequence "
                             "count S=%llu",
                          nm, (ull)off_doc_idx(d, D - 1), (ull)D - 1, (long long)prev, (ull)S);

    if (d->bin_size > expect) {
        uint64_t more = d->bin_size - expect;
        if (more % d->itemsize == 0 && more / d->itemsize == nonempty_docs)
            return mt_err_set(e, "%s.bin: %llu bytes, but the index accounts for %llu: %llu extra tokens, exactly one per "
                                 "non-empty document. This is Megatron's --append-eod length bug (files written "
                                 "between 2022-11-17 and 2023-08-05): the EOD tokens are in .bin but not counted in "
                                 "sizes, so sequences after the first are misaligned. Re-run the preprocessing",
                              nm, (ull)d->bin_size, (ull)expect, (ull)(more / d->itemsize));
        return mt_err_set(e, "%s.bin: %llu bytes, but the index accounts for only %llu (%llu extra bytes): .bin and .idx "
                             "do not belong together, or the data was written with Megatron's --append-eod length "
                             "bug (2022-11-17..2023-08-05)",
                          nm, (ull)d->bin_size, (ull)expect, (ull)more);
    }
    (void)nonempty_seqs;
    return 0;
}

int mt_indexed_parse(mt_indexed *d, const char *name, const void *idx, size_t idx_size, const void *bin,
                     uint64_t bin_size, mt_err *e)
{
    memset(d, 0, sizeof *d);
    d->name = mt_xstrdup(name);
    d->idx = idx;
    d->idx_size = idx_size;
    d->bin = bin;
    d->bin_size = bin_size;
    if (validate(d, e)) {
        free(d->name);
        memset(d, 0, sizeof *d);
        return -1;
    }
    return 0;
}

int mt_indexed_open(mt_indexed *d, const char *prefix, mt_err *e)
{
    memset(d, 0, sizeof *d);
    size_t n = strlen(prefix) + 5;
    char *path = mt_xmalloc(n);
    mt_map im, bm;
    snprintf(path, n, "%s.idx", prefix);
    if (mt_map_open(&im, path, e)) {
        free(path);
        size_t pl = strlen(prefix);
        if (pl > 4 && (!strcmp(prefix + pl - 4, ".bin") || !strcmp(prefix + pl - 4, ".idx")))
            mt_err_set(e, "%s: a dataset is named by its prefix, without .bin or .idx (try %.*s)", prefix, (int)(pl - 4),
                       prefix);
        return -1;
    }
    snprintf(path, n, "%s.bin", prefix);
    if (mt_map_open(&bm, path, e)) {
        free(path);
        mt_map_close(&im);
        return -1;
    }
    free(path);
    if (mt_indexed_parse(d, prefix, im.data, im.size, bm.data, bm.size, e)) {
        mt_map_close(&im);
        mt_map_close(&bm);
        return -1;
    }
    d->idx_map = im;
    d->bin_map = bm;
    return 0;
}

void mt_indexed_close(mt_indexed *d)
{
    mt_map_close(&d->idx_map);
    mt_map_close(&d->bin_map);
    free(d->name);
    memset(d, 0, sizeof *d);
}

/* ---------------------------------------------------------------------------------------------- */
/* Builder. */

static char *cat(const char *a, const char *b)
{
    size_t n = strlen(a) + strlen(b) + 1;
    char *s = mt_xmalloc(n);
    snprintf(s, n, "%s%s", a, b);
    return s;
}

int mt_idxb_open(mt_idx_builder *b, const char *prefix, int dtype, bool multimodal, mt_err *e)
{
    memset(b, 0, sizeof *b);
    if (!mt_dtype_size(dtype)) return mt_err_set(e, "%s: cannot write dtype code %d", prefix, dtype);
    b->dtype = dtype;
    b->itemsize = mt_dtype_size(dtype);
    b->multimodal = multimodal;
    char *bin = cat(prefix, ".bin");
    int rc = mt_out_open(&b->bin, bin, e);
    free(bin);
    if (rc) return -1;
    b->prefix = mt_xstrdup(prefix);
    b->active = true;
    b->cap_doc_idx = 64;
    b->doc_idx = mt_xmalloc(b->cap_doc_idx * sizeof *b->doc_idx);
    b->doc_idx[b->n_doc_idx++] = 0;
    return 0;
}

static void push_doc_idx(mt_idx_builder *b, int64_t v)
{
    if (b->n_doc_idx == b->cap_doc_idx) {
        b->cap_doc_idx *= 2;
        b->doc_idx = mt_xrealloc(b->doc_idx, b->cap_doc_idx * sizeof *b->doc_idx);
    }
    b->doc_idx[b->n_doc_idx++] = v;
}

static void reserve_sizes(mt_idx_builder *b, size_t extra)
{
    if (b->n_sizes + extra <= b->cap_sizes) return;
    size_t c = b->cap_sizes ? b->cap_sizes : 64;
    while (c < b->n_sizes + extra) c *= 2;
    b->sizes = mt_xrealloc(b->sizes, c * sizeof *b->sizes);
    if (b->multimodal) b->modes = mt_xrealloc(b->modes, c);
    b->cap_sizes = c;
}

static int check_open(mt_idx_builder *b, mt_err *e)
{
    if (!b->active || b->prepared)
        return mt_err_set(e, "%s: internal error: builder is not open for writing", b->prefix ? b->prefix : "?");
    return 0;
}

static uint64_t dtype_max(int code)
{
    switch (code) {
    case MT_DTYPE_UINT8: return 255;
    case MT_DTYPE_INT8: return 127;
    case MT_DTYPE_INT16: return 32767;
    case MT_DTYPE_UINT16: return 65535;
    default: return UINT32_MAX; /* int32 is checked separately, int64 holds any uint32 */
    }
}

static int write_ids(mt_idx_builder *b, const uint32_t *ids, size_t n, mt_err *e)
{
    uint64_t mx = b->dtype == MT_DTYPE_INT32 ? (uint64_t)INT32_MAX : dtype_max(b->dtype);
    size_t w = b->itemsize;
    const size_t chunk = 1 << 16;
    for (size_t at = 0; at < n; at += chunk) {
        size_t m = n - at < chunk ? n - at : chunk;
        b->scratch.n = 0;
        mt_buf_reserve(&b->scratch, m * w);
        unsigned char *q = (unsigned char *)b->scratch.p;
        for (size_t i = 0; i < m; i++) {
            uint32_t v = ids[at + i];
            if (v > mx)
                return mt_err_set(e, "%s.bin: document %zu: token id %u does not fit dtype %s", b->prefix,
                                  b->n_doc_idx - 1, v, mt_dtype_name(b->dtype));
            put_le(q + i * w, v, w);
        }
        if (mt_out_write(&b->bin, q, m * w, e)) return -1;
    }
    b->bin_bytes += (uint64_t)n * w;
    return 0;
}

int mt_idxb_add_seqs(mt_idx_builder *b, const uint32_t *ids, size_t n, const int32_t *lengths, size_t n_lengths,
                     mt_err *e)
{
    if (check_open(b, e)) return -1;
    uint64_t sum = 0;
    for (size_t i = 0; i < n_lengths; i++) {
        if (lengths[i] < 0) return mt_err_set(e, "%s: negative sequence length %d", b->prefix, lengths[i]);
        sum += (uint64_t)lengths[i];
    }
    if (sum != n)
        return mt_err_set(e, "%s: sequence lengths sum to %llu but the document has %zu tokens", b->prefix, (ull)sum, n);
    if (write_ids(b, ids, n, e)) return -1;
    reserve_sizes(b, n_lengths);
    for (size_t i = 0; i < n_lengths; i++) {
        if (b->multimodal) b->modes[b->n_sizes] = 0;
        b->sizes[b->n_sizes++] = lengths[i];
    }
    push_doc_idx(b, (int64_t)b->n_sizes);
    return 0;
}

int mt_idxb_add_doc(mt_idx_builder *b, const uint32_t *ids, size_t n, mt_err *e)
{
    if (n > INT32_MAX)
        return mt_err_set(e, "%s: document %zu has %zu tokens, more than a sequence can hold (2^31-1)",
                          b->prefix ? b->prefix : "?", b->n_doc_idx - 1, n);
    int32_t len = (int32_t)n;
    return mt_idxb_add_seqs(b, ids, n, &len, n ? 1 : 0, e);
}

int mt_idxb_append(mt_idx_builder *b, const mt_indexed *o, mt_err *e)
{
    if (check_open(b, e)) return -1;
    if (o->dtype != b->dtype)
        return mt_err_set(e, "cannot merge %s (dtype %s) into %s (dtype %s, from %s): the dtypes differ", o->name,
                          mt_dtype_name(o->dtype), b->prefix, mt_dtype_name(b->dtype),
                          b->dtype_from ? b->dtype_from : b->prefix);
    if (b->multimodal && !o->has_modes)
        return mt_err_set(e, "%s: has no modes array, but a multimodal merge needs one", o->name);
    uint64_t nbytes = o->n_tokens * o->itemsize;
    if (nbytes && mt_out_write(&b->bin, o->bin, nbytes, e)) return -1;
    b->bin_bytes += nbytes;
    int64_t base = (int64_t)b->n_sizes;
    reserve_sizes(b, o->n_seqs);
    for (uint64_t i = 0; i < o->n_seqs; i++) {
        if (b->multimodal) b->modes[b->n_sizes] = (int8_t)mt_indexed_mode(o, i);
        b->sizes[b->n_sizes++] = mt_indexed_seq_len(o, i);
    }
    for (uint64_t j = 1; j <= o->n_docs; j++) push_doc_idx(b, base + (int64_t)mt_indexed_doc_idx(o, j));
    return 0;
}

static int idx_put(mt_idx_builder *b, mt_err *e)
{
    int rc = mt_out_write(&b->idx, b->scratch.p, b->scratch.n, e);
    b->scratch.n = 0;
    return rc;
}

int mt_idxb_prepare(mt_idx_builder *b, mt_err *e)
{
    if (check_open(b, e)) return -1;
    char *path = cat(b->prefix, ".idx");
    int rc = mt_out_open(&b->idx, path, e);
    free(path);
    if (rc) return -1;
    unsigned char h[MT_IDX_HEADER];
    memcpy(h, MT_IDX_MAGIC, MT_IDX_MAGIC_LEN);
    put_le(h + 9, 1, 8);
    h[17] = (unsigned char)b->dtype;
    put_le(h + 18, b->n_sizes, 8);
    put_le(h + 26, b->n_doc_idx, 8);
    b->prepared = true; /* from here on abort must remove the .idx temp too */
    b->scratch.n = 0;
    mt_buf_append(&b->scratch, h, sizeof h);
    const size_t flush_at = 1 << 20;
    for (size_t i = 0; i < b->n_sizes; i++) {
        mt_buf_reserve(&b->scratch, 4);
        put_le((unsigned char *)b->scratch.p + b->scratch.n, (uint32_t)b->sizes[i], 4);
        b->scratch.n += 4;
        if (b->scratch.n >= flush_at && idx_put(b, e)) return -1;
    }
    uint64_t ptr = 0;
    for (size_t i = 0; i < b->n_sizes; i++) {
        mt_buf_reserve(&b->scratch, 8);
        put_le((unsigned char *)b->scratch.p + b->scratch.n, ptr, 8);
        b->scratch.n += 8;
        ptr += (uint64_t)b->sizes[i] * b->itemsize;
        if (b->scratch.n >= flush_at && idx_put(b, e)) return -1;
    }
    for (size_t j = 0; j < b->n_doc_idx; j++) {
        mt_buf_reserve(&b->scratch, 8);
        put_le((unsigned char *)b->scratch.p + b->scratch.n, (uint64_t)b->doc_idx[j], 8);
        b->scratch.n += 8;
        if (b->scratch.n >= flush_at && idx_put(b, e)) return -1;
    }
    if (b->multimodal && b->n_sizes) mt_buf_append(&b->scratch, b->modes, b->n_sizes);
    if (idx_put(b, e)) return -1;
    if (ptr != b->bin_bytes)
        return mt_err_set(e, "%s: internal error: sizes account for %llu bytes, %llu were written", b->prefix,
                          (ull)ptr, (ull)b->bin_bytes);
    if (fflush(b->bin.fp)) return mt_err_sys(e, "%s: write failed", b->bin.path);
    if (fflush(b->idx.fp)) return mt_err_sys(e, "%s: write failed", b->idx.path);
    return 0;
}

static void builder_free(mt_idx_builder *b)
{
    free(b->prefix);
    free(b->dtype_from);
    free(b->sizes);
    free(b->doc_idx);
    free(b->modes);
    mt_buf_free(&b->scratch);
    memset(b, 0, sizeof *b);
}

int mt_idxb_commit(mt_idx_builder *b, mt_err *e)
{
    if (!b->active || !b->prepared) return mt_err_set(e, "%s: internal error: commit before prepare", b->prefix);
    char *bin_final = mt_xstrdup(b->bin.path);
    if (mt_out_commit(&b->bin, e)) {
        free(bin_final);
        mt_idxb_abort(b);
        return -1;
    }
    if (mt_out_commit(&b->idx, e)) {
        unlink(bin_final); /* a .bin without its .idx would be mistaken for a dataset */
        free(bin_final);
        mt_idxb_abort(b);
        return -1;
    }
    free(bin_final);
    builder_free(b);
    return 0;
}

int mt_idxb_finalize(mt_idx_builder *b, mt_err *e)
{
    if (mt_idxb_prepare(b, e)) {
        mt_idxb_abort(b);
        return -1;
    }
    return mt_idxb_commit(b, e);
}

void mt_idxb_abort(mt_idx_builder *b)
{
    mt_out_abort(&b->bin); /* no-op when already committed or never opened */
    mt_out_abort(&b->idx);
    builder_free(b);
}

uint64_t mt_idxb_sequences(const mt_idx_builder *b) { return b->n_sizes; }
uint64_t mt_idxb_documents(const mt_idx_builder *b) { return b->n_doc_idx ? b->n_doc_idx - 1 : 0; }
uint64_t mt_idxb_tokens(const mt_idx_builder *b) { return b->itemsize ? b->bin_bytes / b->itemsize : 0; }
