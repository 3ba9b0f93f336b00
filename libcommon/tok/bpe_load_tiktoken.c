/* bpe_load_tiktoken.c: a tiktoken BPE file (one "base64(token bytes) rank" line per token, as
 * cl100k_base.tiktoken and o200k_base.tiktoken) into an mt_bpe. The rank is the token id and the merge
 * priority: merging the pair (a, b) makes the token a+b with priority rank(a+b), so there is no pair
 * table to derive: the merge loop looks the bytes of a+b up in the whole-piece map, as tiktoken does
 * (mt_bpe.by_bytes). Special tokens are not in the file: those of
 * cl100k_base and o200k_base come with their pattern. The file is read into an mt_bpe_ranks first, from
 * which mt_bpe_from_ranks builds the tables (bpe_load_megatron.c feeds it Megatron's JSON ranks and
 * its layout of ids). */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io/fsutil.h"
#include "tok/bpe_impl.h"

static const mt_bpe_special_tok cl100k_special[] = {{"<|endoftext|>", 100257}, {"<|fim_prefix|>", 100258},
                                                    {"<|fim_middle|>", 100259}, {"<|fim_suffix|>", 100260},
                                                    {"<|endofprompt|>", 100276}};
static const mt_bpe_special_tok o200k_special[] = {{"<|endoftext|>", 199999}, {"<|endofprompt|>", 200018}};

/* base64 digit values; 0x80 marks a byte that is not a digit */
static unsigned char b64_val[256];
static pthread_once_t b64_once = PTHREAD_ONCE_INIT;
static void b64_init(void)
{
    static const char digits[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    memset(b64_val, 0x80, sizeof b64_val);
    for (int i = 0; i < 64; i++) b64_val[(unsigned char)digits[i]] = (unsigned char)i;
}

long mt_bpe_b64_decode(const char *str, size_t n, unsigned char *out)
{
    const unsigned char *s = (const unsigned char *)str;
    pthread_once(&b64_once, b64_init);
    if (n == 0 || n % 4) return -1;
    size_t o = 0, last = n - 4;
    for (size_t i = 0; i < last; i += 4) {
        unsigned v0 = b64_val[s[i]], v1 = b64_val[s[i + 1]], v2 = b64_val[s[i + 2]], v3 = b64_val[s[i + 3]];
        if ((v0 | v1 | v2 | v3) & 0x80) return -1;
        uint32_t x = v0 << 18 | v1 << 12 | v2 << 6 | v3;
        out[o] = (unsigned char)(x >> 16);
        out[o + 1] = (unsigned char)(x >> 8);
        out[o + 2] = (unsigned char)x;
        o += 3;
    }
    /* the last group: "xy==" and "xyz=" stand for one and two bytes */
    const unsigned char *q = s + last;
    int pad = q[3] != '=' ? 0 : q[2] != '=' ? 1 : 2;
    unsigned v0 = b64_val[q[0]], v1 = b64_val[q[1]], v2 = pad == 2 ? 0 : b64_val[q[2]], v3 = pad ? 0 : b64_val[q[3]];
    if ((v0 | v1 | v2 | v3) & 0x80) return -1;
    uint32_t x = v0 << 18 | v1 << 12 | v2 << 6 | v3;
    out[o++] = (unsigned char)(x >> 16);
    if (pad < 2) out[o++] = (unsigned char)(x >> 8);
    if (pad < 1) out[o++] = (unsigned char)x;
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

/* Open-addressing set of token byte strings (entry indices + 1), to find a token given twice. */
int64_t mt_bpe_ranks_seen_or_add(uint32_t *set, uint64_t mask, const mt_bpe_ranks *r, uint32_t i)
{
    const unsigned char *p = r->bytes + r->t[i].off;
    size_t n = r->t[i].len;
    for (uint64_t h = mt_bpe_hash_bytes(p, n) & mask;; h = (h + 1) & mask) {
        if (!set[h]) {
            set[h] = i + 1;
            return -1;
        }
        const mt_bpe_rank_tok *o = &r->t[set[h] - 1];
        if (o->len == n && !memcmp(r->bytes + o->off, p, n)) return set[h] - 1;
    }
}

/* A token or a rank listed twice, refused naming both lines (line_of[i]: the line of token i): tiktoken
 * keeps the later rank of a token listed twice, leaving the earlier one unused, and fails on a rank
 * given to two tokens. */
static int check_twice(const mt_bpe_ranks *r, const uint32_t *line_of, const char *path, mt_err *e)
{
    uint64_t cap = mt_bpe_pow2_at_least(2 * r->n);
    uint32_t *set = mt_xcalloc(cap, sizeof *set), max_rank = 0;
    for (size_t i = 0; i < r->n; i++)
        if (r->t[i].rank > max_rank) max_rank = r->t[i].rank;
    uint32_t *by_rank = mt_xcalloc((size_t)max_rank + 1, sizeof *by_rank); /* token index + 1 */
    int rc = 0;
    for (uint32_t i = 0; i < r->n && !rc; i++) {
        int64_t was = mt_bpe_ranks_seen_or_add(set, cap - 1, r, i);
        uint32_t rk = r->t[i].rank;
        if (was >= 0)
            rc = mt_err_set(e, "%s: line %u: the token of line %u again (rank %u there, %u here): a token is "
                               "listed once", path, line_of[i], line_of[was], r->t[was].rank, rk);
        else if (by_rank[rk])
            rc = mt_err_set(e, "%s: line %u: rank %u given twice (line %u has it too)", path, line_of[i], rk,
                            line_of[by_rank[rk] - 1]);
        by_rank[rk] = i + 1;
    }
    free(by_rank);
    free(set);
    return rc;
}

/* The rank after the space: decimal digits to the end of the line, below 2^28 (what strtoul accepts
 * besides, leading blanks or a sign, is parsed by it); -1 when it is not one. */
static long parse_rank(const char *s, const char *end)
{
    if (s < end && *s >= '0' && *s <= '9') {
        uint32_t r = 0;
        for (; s < end && *s >= '0' && *s <= '9'; s++)
            if ((r = r * 10 + (uint32_t)(*s - '0')) >= (1u << 28)) return -1;
        return s == end ? (long)r : -1;
    }
    if (s == end || !memchr(" \t\v\f\r+-", *s, 7)) return -1;
    char tmp[64];
    if ((size_t)(end - s) >= sizeof tmp) return -1;
    memcpy(tmp, s, (size_t)(end - s));
    tmp[end - s] = 0;
    char *stop;
    unsigned long r = strtoul(tmp, &stop, 10);
    return stop != tmp + (end - s) || r >= (1u << 28) ? -1 : (long)r;
}

/* The whole of a regular file, NUL-terminated; NULL with e set. */
static char *read_all(const char *path, size_t *len, mt_err *e)
{
    int fd = mt_open_regular(path, e);
    if (fd < 0) return NULL;
    struct stat st;
    size_t cap = !fstat(fd, &st) && st.st_size > 0 ? (size_t)st.st_size + 1 : 1 << 16, n = 0;
    char *buf = mt_xmalloc(cap + 1);
    for (;;) {
        if (n == cap) buf = mt_xrealloc(buf, (cap *= 2) + 1);
        ssize_t got = read(fd, buf + n, cap - n);
        if (got < 0 && errno == EINTR) continue;
        if (got < 0) {
            mt_err_sys(e, "%s: read error", path);
            close(fd);
            free(buf);
            return NULL;
        }
        if (!got) break;
        n += (size_t)got;
    }
    close(fd);
    buf[n] = 0;
    *len = n;
    return buf;
}

int mt_bpe_read_tiktoken(mt_bpe_ranks *r, const char *path, mt_err *e)
{
    memset(r, 0, sizeof *r);
    size_t flen;
    char *file = read_all(path, &flen, e);
    if (!file) return -1;
    unsigned char c0 = (unsigned char)file[0];
    if (flen && (c0 == 0x1f || c0 == '[' || c0 == '{')) {
        free(file);
        return mt_err_set(e, "%s: not a tiktoken BPE file of \"base64 rank\" lines (%s)", path,
                          c0 == 0x1f ? "gzip-compressed: gunzip it first" : "JSON ranks are not supported");
    }
    if (flen >= UINT32_MAX) {
        free(file);
        return mt_err_set(e, "%s: too large", path);
    }
    /* sized once: a token per line at most, its bytes 3/4 of its base64 at most */
    size_t lines = 1;
    for (const char *q = file; (q = memchr(q, '\n', (size_t)(file + flen - q))); q++) lines++;
    r->cap = lines;
    r->t = mt_xmalloc(lines * sizeof *r->t);
    r->bytes_cap = flen / 4 * 3 + 3;
    r->bytes = mt_xmalloc(r->bytes_cap);
    uint32_t *line_of = mt_xmalloc(lines * sizeof *line_of);
    size_t lineno = 0;
    int rc = 0;
    for (const char *line = file, *fend = file + flen; line < fend;) {
        const char *nl = memchr(line, '\n', (size_t)(fend - line));
        const char *next = nl ? nl + 1 : fend, *lend = nl ? nl : fend;
        lineno++;
        while (lend > line && (lend[-1] == '\n' || lend[-1] == '\r')) lend--;
        if (lend == line) {
            line = next;
            continue;
        }
        const char *sp = memchr(line, ' ', (size_t)(lend - line));
        long rk = sp ? parse_rank(sp + 1, lend) : -1;
        if (rk < 0) {
            rc = mt_err_set(e, "%s: line %zu: expected \"base64-token rank\" with a rank below 2^28", path, lineno);
            break;
        }
        /* the ranks of a file are its tokens' numbers, 0 .. tokens - 1 give or take a few gaps: a rank far
         * beyond the lines would only size the id tables (13 bytes an id) from a hostile number */
        if ((size_t)rk >= 2 * lines + 1024) {
            rc = mt_err_set(e, "%s: line %zu: rank %ld is far beyond the file's %zu lines (ranks number the tokens)",
                            path, lineno, rk, lines);
            break;
        }
        long k = mt_bpe_b64_decode(line, (size_t)(sp - line), r->bytes + r->bytes_n);
        if (k <= 0) {
            rc = mt_err_set(e, "%s: line %zu: bad base64 token", path, lineno);
            break;
        }
        line_of[r->n] = (uint32_t)lineno;
        r->t[r->n++] = (mt_bpe_rank_tok){(uint32_t)r->bytes_n, (uint32_t)k, (uint32_t)rk};
        r->bytes_n += (size_t)k;
        line = next;
    }
    free(file);
    if (!rc && !r->n) rc = mt_err_set(e, "%s: no tokens", path);
    if (!rc) rc = check_twice(r, line_of, path, e);
    free(line_of);
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
    char sym_utf8[256][2]; /* each byte's symbol in UTF-8, sym_len[c] bytes */
    uint8_t sym_len[256];
    for (int c = 0; c < 256; c++) {
        sym_len[c] = sym[c] < 0x80 ? 1 : 2;
        sym_utf8[c][0] = (char)(sym[c] < 0x80 ? sym[c] : 0xC0 | sym[c] >> 6);
        sym_utf8[c][1] = (char)(0x80 | (sym[c] & 0x3F));
    }
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
            memcpy(b->spell + soff, sym_utf8[p[k]], 2); /* room: 2 bytes per byte */
            soff += sym_len[p[k]];
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
    /* no pair table: the merge loop ranks a pair by the token its bytes make (mt_bpe.by_bytes); ids
     * are shift + rank, in the order of the ranks */
    mt_bpe_finish(b, true);
    b->by_bytes = true;
    b->rank2 = mt_xmalloc(65536 * sizeof *b->rank2);
    memset(b->rank2, 0xFF, 65536 * sizeof *b->rank2);
    for (uint32_t id = limit; id-- > 0;) /* the lowest id of two with the same bytes, as the piece map */
        if (b->kind[id] == MT_TOK_MERGED && b->tok_off[id + 1] - b->tok_off[id] == 2) {
            const unsigned char *p = (const unsigned char *)b->tok_bytes + b->tok_off[id];
            b->rank2[p[0] | p[1] << 8] = id;
        }
    free(src);
    *out = b;
    return 0;
fail:
    free(src);
    mt_bpe_free(b);
    return rc;
}
