/* bpe_load_tiktoken.c: a tiktoken BPE file (one "base64(token bytes) rank" line per token, as
 * cl100k_base.tiktoken and o200k_base.tiktoken) into an mt_bpe. The rank is the token id and the merge
 * priority: merging the pair (a, b) makes the token a+b with priority rank(a+b), so the pair table has
 * one entry per split of each token into two tokens. Special tokens are not in the file: those of
 * cl100k_base and o200k_base come with their pattern. The file is read into an mt_bpe_ranks first, from
 * which mt_bpe_from_ranks builds the tables (bpe_load_megatron.c feeds it Megatron's JSON ranks and
 * its layout of ids). */
#include <stdio.h>
#include <stdlib.h>

#include "io/fsutil.h"
#include "tok/bpe_impl.h"

static const mt_bpe_special_tok cl100k_special[] = {{"<|endoftext|>", 100257}, {"<|fim_prefix|>", 100258},
                                                    {"<|fim_middle|>", 100259}, {"<|fim_suffix|>", 100260},
                                                    {"<|endofprompt|>", 100276}};
static const mt_bpe_special_tok o200k_special[] = {{"<|endoftext|>", 199999}, {"<|endofprompt|>", 200018}};

static int b64_value(unsigned char c)
{
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
}

long mt_bpe_b64_decode(const char *s, size_t n, unsigned char *out)
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

void mt_bpe_ranks_free(mt_bpe_ranks *r)
{
    free(r->t);
    free(r->bytes);
    memset(r, 0, sizeof *r);
}

void mt_bpe_ranks_add(mt_bpe_ranks *r, const unsigned char *p, size_t n, uint32_t rank)
{
    if (r->bytes_n + n > r->bytes_cap) {
        r->bytes_cap = 2 * (r->bytes_n + n) + 4096;
        r->bytes = mt_xrealloc(r->bytes, r->bytes_cap);
    }
    if (p) memcpy(r->bytes + r->bytes_n, p, n);
    if (r->n == r->cap) {
        r->cap = r->cap ? 2 * r->cap : 4096;
        r->t = mt_xrealloc(r->t, r->cap * sizeof *r->t);
    }
    r->t[r->n++] = (mt_bpe_rank_tok){(uint32_t)r->bytes_n, (uint32_t)n, rank};
    r->bytes_n += n;
}

int mt_bpe_read_tiktoken(mt_bpe_ranks *r, const char *path, mt_err *e)
{
    memset(r, 0, sizeof *r);
    FILE *f = mt_fopen_regular(path, e);
    if (!f) return -1;
    int c0 = getc(f);
    ungetc(c0, f);
    if (c0 == 0x1f || c0 == '[' || c0 == '{') {
        fclose(f);
        return mt_err_set(e, "%s: not a tiktoken BPE file of \"base64 rank\" lines (%s)", path,
                          c0 == 0x1f ? "gzip-compressed: gunzip it first" : "JSON ranks are not supported");
    }
    size_t lineno = 0, lcap = 0;
    char *line = NULL;
    ssize_t got;
    int rc = 0;
    while ((got = getline(&line, &lcap, f)) >= 0) {
        lineno++;
        size_t n = (size_t)got;
        while (n && (line[n - 1] == '\n' || line[n - 1] == '\r')) n--;
        if (!n) continue;
        char *sp = memchr(line, ' ', n);
        char *end = NULL;
        unsigned long rk = sp ? strtoul(sp + 1, &end, 10) : 0;
        if (!sp || end != line + n || sp + 1 == end || rk >= (1u << 28)) {
            rc = mt_err_set(e, "%s: line %zu: expected \"base64-token rank\" with a rank below 2^28", path, lineno);
            break;
        }
        size_t bl = (size_t)(sp - line);
        mt_bpe_ranks_add(r, NULL, bl, (uint32_t)rk); /* room for the decoded bytes (fewer than bl) */
        long k = mt_bpe_b64_decode(line, bl, r->bytes + r->t[r->n - 1].off);
        if (k <= 0) {
            rc = mt_err_set(e, "%s: line %zu: bad base64 token", path, lineno);
            break;
        }
        r->t[r->n - 1].len = (uint32_t)k;
        r->bytes_n = r->t[r->n - 1].off + (size_t)k;
    }
    if (!rc && ferror(f)) rc = mt_err_sys(e, "%s: read error", path);
    free(line);
    fclose(f);
    if (!rc && !r->n) rc = mt_err_set(e, "%s: no tokens", path);
    if (!rc && r->bytes_n >= UINT32_MAX / 4) rc = mt_err_set(e, "%s: too large", path);
    if (rc) mt_bpe_ranks_free(r);
    return rc;
}

int mt_bpe_tiktoken_pattern(const char *path, const char *name, size_t n_ranks, mt_pattern *out, mt_err *e)
{
    int p = name ? mt_pattern_from_name(name) : n_ranks == 100256 ? MT_PAT_CL100K : n_ranks == 199998 ? MT_PAT_O200K : -1;
    if (p < 0)
        return name ? mt_err_set(e, "--tiktoken-pattern: unknown pattern '%s'", name)
                    : mt_err_set(e, "%s: %zu ranks are neither cl100k_base's nor o200k_base's: give --tiktoken-pattern",
                                 path, n_ranks);
    *out = (mt_pattern)p;
    return 0;
}

const mt_bpe_special_tok *mt_bpe_tiktoken_specials(mt_pattern pat, size_t *n)
{
    *n = pat == MT_PAT_CL100K ? sizeof cl100k_special / sizeof *cl100k_special
         : pat == MT_PAT_O200K ? sizeof o200k_special / sizeof *o200k_special : 0;
    return pat == MT_PAT_CL100K ? cl100k_special : pat == MT_PAT_O200K ? o200k_special : NULL;
}

int mt_bpe_load_tiktoken(mt_bpe **out, const char *path, const char *pattern, mt_err *e)
{
    *out = NULL;
    mt_bpe_ranks r;
    mt_pattern pat;
    if (mt_bpe_read_tiktoken(&r, path, e)) return -1;
    if (mt_bpe_tiktoken_pattern(path, pattern, r.n, &pat, e)) {
        mt_bpe_ranks_free(&r);
        return -1;
    }
    size_t nsp;
    const mt_bpe_special_tok *sp = mt_bpe_tiktoken_specials(pat, &nsp);
    int rc = mt_bpe_from_ranks(out, &r, 0, sp, nsp, pat, path, e);
    mt_bpe_ranks_free(&r);
    return rc;
}

int mt_bpe_from_ranks(mt_bpe **out, const mt_bpe_ranks *r, uint32_t shift, const mt_bpe_special_tok *sp, size_t nsp,
                      mt_pattern pat, const char *path, mt_err *e)
{
    *out = NULL;
    const mt_bpe_rank_tok *t = r->t;
    const unsigned char *bytes = r->bytes;
    size_t nt = r->n;
    int rc = 0;
    uint32_t limit = 0;
    for (size_t i = 0; i < nt; i++)
        if (shift + t[i].rank + 1 > limit) limit = shift + t[i].rank + 1;
    for (size_t s = 0; s < nsp; s++)
        if (sp[s].id + 1 > limit) limit = sp[s].id + 1;

    mt_bpe *b = mt_xcalloc(1, sizeof *b);
    b->pattern = pat;
    b->id_limit = limit;
    b->kind = mt_xcalloc(limit, 1);
    b->tok_off = mt_xcalloc((size_t)limit + 1, sizeof *b->tok_off);
    b->spell_off = mt_xcalloc((size_t)limit + 1, sizeof *b->spell_off);
    /* index into t, nt + s for the special sp[s], or UINT32_MAX */
    uint32_t *src = mt_xmalloc((size_t)limit * sizeof *src);
    for (uint32_t i = 0; i < limit; i++) src[i] = UINT32_MAX;
    for (size_t i = 0; i < nt; i++) {
        if (src[shift + t[i].rank] != UINT32_MAX) {
            rc = mt_err_set(e, "%s: rank %u given twice", path, t[i].rank);
            goto fail;
        }
        src[shift + t[i].rank] = (uint32_t)i;
    }
    size_t total = r->bytes_n;
    for (size_t s = 0; s < nsp; s++) {
        if (src[sp[s].id] != UINT32_MAX) {
            rc = src[sp[s].id] < nt ? mt_err_set(e, "%s: rank %u is the id of the special token %s", path,
                                                  t[src[sp[s].id]].rank, sp[s].text)
                                    : mt_err_set(e, "%s: special token %s given twice", path, sp[s].text);
            goto fail;
        }
        src[sp[s].id] = (uint32_t)(nt + s);
        total += strlen(sp[s].text);
    }
    /* bytes and spellings (GPT-2's byte symbols, at most 2 UTF-8 bytes per byte); specials spell and
     * stand for their own text */
    b->tok_bytes = mt_xmalloc(total + 1);
    b->spell = mt_xmalloc(2 * total + 1);
    uint32_t sym[256];
    uint16_t inv[0x144];
    mt_bpe_byte_symbols(sym, inv);
    uint32_t off = 0, soff = 0;
    for (uint32_t id = 0; id < limit; id++) {
        b->tok_off[id] = off;
        b->spell_off[id] = soff;
        if (src[id] == UINT32_MAX) continue;
        if (src[id] >= nt) {
            const char *text = sp[src[id] - nt].text;
            uint32_t n = (uint32_t)strlen(text);
            memcpy(b->tok_bytes + off, text, n);
            memcpy(b->spell + soff, text, n);
            off += n;
            soff += n;
            b->kind[id] = MT_TOK_SPECIAL;
            b->vocab_size++;
            continue;
        }
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
    b->tok_off[limit] = off;
    b->spell_off[limit] = soff;
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
            int64_t rr = l < 0 ? -1 : mt_bpe_piece_find(b, p + k, n - k, mt_bpe_hash_bytes(p + k, n - k));
            if (rr < 0) continue;
            if (m.n == m.cap) {
                m.cap = m.cap ? 2 * m.cap : 1 << 16;
                m.m = mt_xrealloc(m.m, m.cap * sizeof *m.m);
            }
            m.m[m.n++] = (mt_bpe_merge){(uint32_t)l, (uint32_t)rr, id, id};
        }
    }
    mt_bpe_build_pairs(b, m.m, m.n);
    mt_bpe_merges_free(&m);
    free(src);
    *out = b;
    return 0;
fail:
    free(src);
    mt_bpe_free(b);
    return rc;
}
