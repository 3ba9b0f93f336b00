/* bpe_load_tiktoken.c: a tiktoken BPE file (one "base64(token bytes) rank" line per token, as
 * cl100k_base.tiktoken and o200k_base.tiktoken) into an mt_bpe. The rank is the token id and the merge
 * priority: merging the pair (a, b) makes the token a+b with priority rank(a+b), so the pair table has
 * one entry per split of each token into two tokens. Special tokens are not in the file: those of
 * cl100k_base and o200k_base come with their pattern. */
#include <stdio.h>
#include <stdlib.h>

#include "io/fsutil.h"
#include "tok/bpe_impl.h"

typedef struct special {
    const char *text;
    uint32_t id;
} special;
static const special cl100k_special[] = {{"<|endoftext|>", 100257}, {"<|fim_prefix|>", 100258},
                                          {"<|fim_middle|>", 100259}, {"<|fim_suffix|>", 100260},
                                          {"<|endofprompt|>", 100276}, {NULL, 0}};
static const special o200k_special[] = {{"<|endoftext|>", 199999}, {"<|endofprompt|>", 200018}, {NULL, 0}};

static int b64_value(unsigned char c)
{
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
}

/* Decodes standard base64 (with '=' padding) s[0..n) into out; returns the byte count or -1. */
static long b64_decode(const char *s, size_t n, unsigned char *out)
{
    if (n == 0 || n % 4) return -1;
    size_t o = 0;
    for (size_t i = 0; i < n; i += 4) {
        int v[4], pad = 0;
        for (int k = 0; k < 4; k++) {
            if (s[i + k] == '=' && i + 4 == n && k >= 2) {
                v[k] = 0;
                pad++;
            } else if (pad || (v[k] = b64_value((unsigned char)s[i + k])) < 0) {
                return -1;
            }
        }
        uint32_t x = (uint32_t)v[0] << 18 | (uint32_t)v[1] << 12 | (uint32_t)v[2] << 6 | (uint32_t)v[3];
        out[o++] = (unsigned char)(x >> 16);
        if (pad < 2) out[o++] = (unsigned char)(x >> 8);
        if (pad < 1) out[o++] = (unsigned char)x;
    }
    return (long)o;
}

int mt_bpe_load_tiktoken(mt_bpe **out, const char *path, const char *pattern, mt_err *e)
{
    *out = NULL;
    FILE *f = mt_fopen_regular(path, e);
    if (!f) return -1;
    int c0 = getc(f);
    ungetc(c0, f);
    if (c0 == 0x1f || c0 == '[' || c0 == '{') {
        fclose(f);
        return mt_err_set(e, "%s: not a tiktoken BPE file of \"base64 rank\" lines (%s)", path,
                          c0 == 0x1f ? "gzip-compressed: gunzip it first" : "JSON ranks are not supported");
    }
    /* lines first: token bytes back to back, rank of each */
    typedef struct {
        uint32_t off, len, rank;
    } tok;
    tok *t = NULL;
    size_t nt = 0, cap = 0, lineno = 0, lcap = 0, bytes_n = 0, bytes_cap = 0;
    unsigned char *bytes = NULL;
    char *line = NULL;
    ssize_t got;
    int rc = 0;
    uint32_t limit = 0;
    while ((got = getline(&line, &lcap, f)) >= 0) {
        lineno++;
        size_t n = (size_t)got;
        while (n && (line[n - 1] == '\n' || line[n - 1] == '\r')) n--;
        if (!n) continue;
        char *sp = memchr(line, ' ', n);
        char *end = NULL;
        unsigned long r = sp ? strtoul(sp + 1, &end, 10) : 0;
        if (!sp || end != line + n || sp + 1 == end || r >= (1u << 28)) {
            rc = mt_err_set(e, "%s: line %zu: expected \"base64-token rank\" with a rank below 2^28", path, lineno);
            break;
        }
        size_t bl = (size_t)(sp - line);
        if (bytes_n + bl > bytes_cap) {
            bytes_cap = 2 * (bytes_n + bl) + 4096;
            bytes = mt_xrealloc(bytes, bytes_cap);
        }
        long k = b64_decode(line, bl, bytes + bytes_n);
        if (k <= 0) {
            rc = mt_err_set(e, "%s: line %zu: bad base64 token", path, lineno);
            break;
        }
        if (nt == cap) {
            cap = cap ? 2 * cap : 4096;
            t = mt_xrealloc(t, cap * sizeof *t);
        }
        t[nt++] = (tok){(uint32_t)bytes_n, (uint32_t)k, (uint32_t)r};
        bytes_n += (size_t)k;
        if (r + 1 > limit) limit = (uint32_t)r + 1;
    }
    if (!rc && ferror(f)) rc = mt_err_sys(e, "%s: read error", path);
    free(line);
    fclose(f);
    if (!rc && !nt) rc = mt_err_set(e, "%s: no tokens", path);
    if (!rc && bytes_n >= UINT32_MAX / 4) rc = mt_err_set(e, "%s: too large", path);
    const special *sp = NULL;
    mt_pattern pat = MT_PAT_COUNT;
    if (!rc) {
        int p = pattern ? mt_pattern_from_name(pattern)
                : nt == 100256 ? MT_PAT_CL100K : nt == 199998 ? MT_PAT_O200K : -1;
        if (p < 0)
            rc = pattern ? mt_err_set(e, "--tiktoken-pattern: unknown pattern '%s'", pattern)
                         : mt_err_set(e, "%s: %zu ranks are neither cl100k_base's nor o200k_base's: give "
                                         "--tiktoken-pattern", path, nt);
        else pat = (mt_pattern)p;
        sp = pat == MT_PAT_CL100K ? cl100k_special : pat == MT_PAT_O200K ? o200k_special : NULL;
    }
    if (rc) {
        free(t);
        free(bytes);
        return rc;
    }
    for (const special *s = sp; s && s->text; s++)
        if (s->id + 1 > limit) limit = s->id + 1;

    mt_bpe *b = mt_xcalloc(1, sizeof *b);
    b->pattern = pat;
    b->id_limit = limit;
    b->kind = mt_xcalloc(limit, 1);
    b->tok_off = mt_xcalloc((size_t)limit + 1, sizeof *b->tok_off);
    b->spell_off = mt_xcalloc((size_t)limit + 1, sizeof *b->spell_off);
    uint32_t *src = mt_xmalloc((size_t)limit * sizeof *src); /* index into t, or UINT32_MAX */
    for (uint32_t i = 0; i < limit; i++) src[i] = UINT32_MAX;
    for (size_t i = 0; i < nt; i++) {
        if (src[t[i].rank] != UINT32_MAX) {
            rc = mt_err_set(e, "%s: rank %u given twice", path, t[i].rank);
            goto fail;
        }
        src[t[i].rank] = (uint32_t)i;
    }
    for (const special *s = sp; s && s->text; s++)
        if (src[s->id] != UINT32_MAX) {
            rc = mt_err_set(e, "%s: rank %u is %s's special token id", path, s->id, mt_pattern_name(pat));
            goto fail;
        }
    /* bytes and spellings (GPT-2's byte symbols, at most 2 UTF-8 bytes per byte) */
    size_t total = bytes_n;
    for (const special *s = sp; s && s->text; s++) total += strlen(s->text);
    b->tok_bytes = mt_xmalloc(total + 1);
    b->spell = mt_xmalloc(2 * total + 1);
    uint32_t sym[256];
    uint16_t inv[0x144];
    mt_bpe_byte_symbols(sym, inv);
    uint32_t off = 0, soff = 0;
    for (uint32_t id = 0; id < limit; id++) {
        b->tok_off[id] = off;
        b->spell_off[id] = soff;
        if (src[id] != UINT32_MAX) {
            const unsigned char *p = bytes + t[src[id]].off;
            uint32_t n = t[src[id]].len;
            memcpy(b->tok_bytes + off, p, n);
            off += n;
            for (uint32_t k = 0; k < n; k++) {
                uint32_t u = sym[p[k]];
                if (u < 0x80) b->spell[soff++] = (char)u;
                else {
                    b->spell[soff++] = (char)(0xC0 | u >> 6);
                    b->spell[soff++] = (char)(0x80 | (u & 0x3F));
                }
            }
            b->kind[id] = n == 1 ? MT_TOK_BYTE : MT_TOK_MERGED;
            b->vocab_size++;
            if (n == 1) b->byte_id[p[0]] = id;
        }
    }
    b->tok_off[limit] = off;
    b->spell_off[limit] = soff;
    for (const special *s = sp; s && s->text; s++) {
        /* specials spell and stand for their own text; appended after the ranks' bytes */
        size_t n = strlen(s->text);
        uint32_t id = s->id;
        if (id + 1 != limit && b->tok_off[id + 1] != b->tok_off[id]) continue; /* unreachable: checked above */
        /* the offsets are prefix sums: put the text at the end and point the entry there by moving the
         * tail offsets (only specials sit above the ranks, so this is cheap) */
        memmove(b->tok_bytes + b->tok_off[id] + n, b->tok_bytes + b->tok_off[id], off - b->tok_off[id]);
        memcpy(b->tok_bytes + b->tok_off[id], s->text, n);
        memmove(b->spell + b->spell_off[id] + n, b->spell + b->spell_off[id], soff - b->spell_off[id]);
        memcpy(b->spell + b->spell_off[id], s->text, n);
        for (uint32_t k = id + 1; k <= limit; k++) {
            b->tok_off[k] += (uint32_t)n;
            b->spell_off[k] += (uint32_t)n;
        }
        off += (uint32_t)n;
        soff += (uint32_t)n;
        b->kind[id] = MT_TOK_SPECIAL;
        b->vocab_size++;
    }
    for (int c = 0; c < 256; c++)
        if (b->kind[b->byte_id[c]] != MT_TOK_BYTE || b->tok_bytes[b->tok_off[b->byte_id[c]]] != (char)c) {
            rc = mt_err_set(e, "%s: no token for the single byte 0x%02x", path, c);
            goto fail;
        }
    /* whole-piece map of every token first: it finds the parts of each split */
    mt_bpe_finish(b, true);
    mt_bpe_merges m = {0};
    for (uint32_t id = 0; id < limit; id++) {
        if (b->kind[id] != MT_TOK_MERGED) continue;
        const unsigned char *p = (const unsigned char *)b->tok_bytes + b->tok_off[id];
        size_t n = b->tok_off[id + 1] - b->tok_off[id];
        for (size_t k = 1; k < n; k++) {
            int64_t l = mt_bpe_piece_find(b, p, k, mt_bpe_hash_bytes(p, k));
            int64_t r = l < 0 ? -1 : mt_bpe_piece_find(b, p + k, n - k, mt_bpe_hash_bytes(p + k, n - k));
            if (r < 0) continue;
            if (m.n == m.cap) {
                m.cap = m.cap ? 2 * m.cap : 1 << 16;
                m.m = mt_xrealloc(m.m, m.cap * sizeof *m.m);
            }
            m.m[m.n++] = (mt_bpe_merge){(uint32_t)l, (uint32_t)r, id, id};
        }
    }
    mt_bpe_build_pairs(b, m.m, m.n);
    mt_bpe_merges_free(&m);
    free(src);
    free(t);
    free(bytes);
    *out = b;
    return 0;
fail:
    free(src);
    free(t);
    free(bytes);
    mt_bpe_free(b);
    return rc;
}
