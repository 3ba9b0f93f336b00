/* tokstream.c: writing and reading the mt token stream (format in tokstream.h and mt-formats.5). */
#include "data/tokstream.h"

#include <stdlib.h>
#include <string.h>

uint32_t mt_toks_token_bytes(uint32_t vocab_size) { return vocab_size < 65500 ? 2 : 4; }

static void put_u32(mt_buf *b, uint32_t v)
{
    unsigned char c[4] = {(unsigned char)v, (unsigned char)(v >> 8), (unsigned char)(v >> 16), (unsigned char)(v >> 24)};
    mt_buf_append(b, c, 4);
}

static void put_u64(mt_buf *b, uint64_t v)
{
    put_u32(b, (uint32_t)v);
    put_u32(b, (uint32_t)(v >> 32));
}

static uint32_t get_u32(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t get_u64(const unsigned char *p) { return get_u32(p) | (uint64_t)get_u32(p + 4) << 32; }

void mt_toks_put_header(mt_buf *out, const mt_toks_header *h)
{
    mt_buf_append(out, MT_TOKS_MAGIC, 8);
    put_u32(out, MT_TOKS_VERSION);
    put_u32(out, h->token_bytes);
    put_u32(out, h->vocab_size);
    put_u32(out, (uint32_t)h->eod);
    put_u32(out, h->flags);
    put_u32(out, h->n_keys);
    for (uint32_t k = 0; k < h->n_keys; k++) {
        uint32_t n = (uint32_t)strlen(h->keys[k]);
        put_u32(out, n);
        mt_buf_append(out, h->keys[k], n);
    }
}

void mt_toks_put_doc(mt_buf *out, const mt_toks_header *h, uint32_t key, const uint32_t *ids, size_t n)
{
    mt_buf_putc(out, 'D');
    put_u32(out, key);
    put_u32(out, (uint32_t)n);
    if (h->token_bytes == 2) {
        mt_buf_reserve(out, 2 * n);
        unsigned char *p = (unsigned char *)out->p + out->n;
        for (size_t i = 0; i < n; i++) {
            p[2 * i] = (unsigned char)ids[i];
            p[2 * i + 1] = (unsigned char)(ids[i] >> 8);
        }
        out->n += 2 * n;
    } else {
        mt_buf_reserve(out, 4 * n);
        unsigned char *p = (unsigned char *)out->p + out->n;
        for (size_t i = 0; i < n; i++) {
            p[4 * i] = (unsigned char)ids[i];
            p[4 * i + 1] = (unsigned char)(ids[i] >> 8);
            p[4 * i + 2] = (unsigned char)(ids[i] >> 16);
            p[4 * i + 3] = (unsigned char)(ids[i] >> 24);
        }
        out->n += 4 * n;
    }
}

void mt_toks_put_trailer(mt_buf *out, uint64_t docs, uint64_t tokens)
{
    mt_buf_putc(out, 'E');
    put_u64(out, docs);
    put_u64(out, tokens);
}

void mt_toks_header_free(mt_toks_header *h)
{
    for (uint32_t k = 0; k < h->n_keys && k < MT_TOKS_MAX_KEYS; k++) free(h->keys[k]);
    memset(h, 0, sizeof *h);
}

static int need(mt_reader *r, void *buf, size_t n, const char *what, mt_err *e)
{
    uint64_t at = mt_reader_offset(r);
    int rc = mt_reader_read_full(r, buf, n, e);
    if (rc == 1) return 0;
    if (rc == 0)
        return mt_err_set(e, "%s: token stream truncated at byte %llu (expected %s)", mt_reader_name(r),
                          (unsigned long long)at, what);
    return mt_err_prefix(e, "token stream (reading %s)", what);
}

static int read_header(mt_reader *r, mt_toks_header *h, mt_err *e);

int mt_toks_read_header(mt_reader *r, mt_toks_header *h, mt_err *e)
{
    int rc = read_header(r, h, e);
    if (rc) mt_toks_header_free(h);
    return rc;
}

static int read_header(mt_reader *r, mt_toks_header *h, mt_err *e)
{
    memset(h, 0, sizeof *h);
    unsigned char b[32];
    int rc = mt_reader_read_full(r, b, 8, e);
    if (rc < 0) return -1;
    if (rc == 0) return mt_err_set(e, "%s: empty input, expected an mt token stream", mt_reader_name(r));
    if (memcmp(b, MT_TOKS_MAGIC, 8)) {
        if (!memcmp(b, "MTTOKSv", 7))
            return mt_err_set(e, "%s: token stream format version '%c' is not supported (this mt reads v1)",
                              mt_reader_name(r), b[7]);
        return mt_err_set(e, "%s: byte 0: not an mt token stream (bad magic; expected the output of mt-tokenize)",
                          mt_reader_name(r));
    }
    if (need(r, b, 24, "header", e)) return -1;
    h->version = get_u32(b);
    h->token_bytes = get_u32(b + 4);
    h->vocab_size = get_u32(b + 8);
    h->eod = (int32_t)get_u32(b + 12);
    h->flags = get_u32(b + 16);
    h->n_keys = get_u32(b + 20);
    const char *nm = mt_reader_name(r);
    if (h->version != MT_TOKS_VERSION)
        return mt_err_set(e, "%s: byte 8: token stream version %u is not supported (this mt reads %u)", nm,
                          h->version, MT_TOKS_VERSION);
    if (h->token_bytes != 2 && h->token_bytes != 4)
        return mt_err_set(e, "%s: byte 12: bad token width %u (must be 2 or 4)", nm, h->token_bytes);
    if (h->vocab_size == 0 || (h->token_bytes == 2 && h->vocab_size > 65536))
        return mt_err_set(e, "%s: byte 16: vocabulary size %u does not fit token width %u", nm, h->vocab_size,
                          h->token_bytes);
    if (h->eod < -1 || (h->eod >= 0 && (uint32_t)h->eod >= h->vocab_size))
        return mt_err_set(e, "%s: byte 20: EOD id %d outside the vocabulary (%u)", nm, h->eod, h->vocab_size);
    if (h->n_keys == 0 || h->n_keys > MT_TOKS_MAX_KEYS)
        return mt_err_set(e, "%s: byte 28: bad key count %u (1..%d)", nm, h->n_keys, MT_TOKS_MAX_KEYS);
    uint32_t nk = h->n_keys;
    h->n_keys = 0;
    for (uint32_t k = 0; k < nk; k++) {
        if (need(r, b, 4, "key length", e)) return -1;
        uint32_t n = get_u32(b);
        if (n == 0 || n > 4096)
            return mt_err_set(e, "%s: byte %llu: bad key name length %u", nm,
                              (unsigned long long)mt_reader_offset(r) - 4, n);
        char *s = mt_xmalloc(n + 1);
        if (need(r, s, n, "key name", e)) {
            free(s);
            return -1;
        }
        s[n] = 0;
        if (memchr(s, 0, n) || memchr(s, '/', n)) {
            free(s);
            return mt_err_set(e, "%s: key %u: key names may not contain NUL or '/'", nm, k);
        }
        h->keys[h->n_keys++] = s;
    }
    return 0;
}

int mt_toks_next(mt_reader *r, const mt_toks_header *h, mt_toks_state *st, uint32_t *key, mt_ids *ids, mt_err *e)
{
    const char *nm = mt_reader_name(r);
    unsigned char b[16];
    if (st->done) return 0;
    uint64_t at = mt_reader_offset(r);
    int rc = mt_reader_read_full(r, b, 1, e);
    if (rc < 0) return -1;
    if (rc == 0)
        return mt_err_set(e, "%s: token stream truncated at byte %llu after %llu documents (no end record: "
                             "was the producer killed?)",
                          nm, (unsigned long long)at, (unsigned long long)st->docs);
    if (b[0] == 'E') {
        if (need(r, b, 16, "end record", e)) return -1;
        uint64_t docs = get_u64(b), tokens = get_u64(b + 8);
        if (docs != st->docs || tokens != st->tokens)
            return mt_err_set(e, "%s: byte %llu: end record says %llu documents/%llu tokens but the stream held "
                                 "%llu/%llu",
                              nm, (unsigned long long)at, (unsigned long long)docs, (unsigned long long)tokens,
                              (unsigned long long)st->docs, (unsigned long long)st->tokens);
        unsigned char extra;
        rc = mt_reader_read_full(r, &extra, 1, e);
        if (rc < 0) return -1;
        if (rc == 1) return mt_err_set(e, "%s: byte %llu: data after the end record", nm, (unsigned long long)at + 17);
        st->done = true;
        return 0;
    }
    if (b[0] != 'D')
        return mt_err_set(e, "%s: byte %llu: bad record tag 0x%02x (corrupt token stream)", nm, (unsigned long long)at,
                          b[0]);
    if (need(r, b, 8, "document record", e)) return -1;
    uint32_t k = get_u32(b), n = get_u32(b + 4);
    if (k >= h->n_keys)
        return mt_err_set(e, "%s: byte %llu: key index %u out of range (%u keys)", nm, (unsigned long long)at, k,
                          h->n_keys);
    size_t w = h->token_bytes;
    /* The ids are read in chunks, the array growing with what has arrived: a count in a cut or corrupt
     * record asks for no more memory than the stream holds (a pipe has no size to check it against).
     * Each chunk is read in place at the end of its space, then widened front to back. */
    ids->n = 0;
    for (uint32_t done = 0; done < n;) {
        uint32_t c = n - done < (1u << 20) ? n - done : 1u << 20;
        mt_ids_reserve(ids, c);
        uint32_t *dst = ids->p + ids->n;
        unsigned char *raw = (unsigned char *)dst + (size_t)c * 4 - (size_t)c * w;
        if (need(r, raw, (size_t)c * w, "token ids", e)) return -1;
        for (uint32_t i = 0; i < c; i++) {
            uint32_t v = w == 2 ? (uint32_t)raw[2 * i] | (uint32_t)raw[2 * i + 1] << 8 : get_u32(raw + 4 * i);
            if (v >= h->vocab_size)
                return mt_err_set(e, "%s: byte %llu: token id %u outside the vocabulary (%u)", nm,
                                  (unsigned long long)(at + 9 + ((uint64_t)done + i) * w), v, h->vocab_size);
            dst[i] = v;
        }
        ids->n += c;
        done += c;
    }
    *key = k;
    st->docs++;
    st->tokens += n;
    return 1;
}
