/* bpe_load.c: reads vocab.json and merges.txt into an immutable mt_bpe (token bytes, pair table,
 * whole-piece map, special tokens) and answers vocabulary queries. */
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

#include "io/fsutil.h"
#include "io/jsonfile.h"
#include "tok/bpe_impl.h"
#include "tok/unicode.h"

#define MAX_ID (1u << 28) /* ids beyond this are rejected: tables are indexed by id */

/* GPT-2's byte <-> symbol mapping: printable Latin-1 bytes stand for themselves, the other 68 bytes
 * take U+0100.. in increasing byte order. */
void mt_bpe_byte_symbols(uint32_t sym[256], uint16_t inv[0x144])
{
    uint32_t next = 0x100;
    for (int i = 0; i < 0x144; i++) inv[i] = MT_BPE_NO_BYTE;
    for (int c = 0; c < 256; c++) {
        int printable = (c >= 0x21 && c <= 0x7E) || (c >= 0xA1 && c <= 0xAC) || (c >= 0xAE);
        sym[c] = printable ? (uint32_t)c : next++;
        inv[sym[c]] = (uint16_t)c;
    }
}

/* Bytes a spelling stands for; returns their number, written to out (capacity len) unless out is
 * NULL, or -1 when some character is not a byte symbol. */
long mt_bpe_spelling_bytes(const char *sp, size_t len, const uint16_t inv[0x144], char *out)
{
    const unsigned char *s = (const unsigned char *)sp;
    size_t i = 0, n = 0;
    while (i < len) {
        uint32_t cp;
        int k = mt_utf8_decode(s + i, len - i, &cp);
        if (k < 0 || cp >= 0x144 || inv[cp] == MT_BPE_NO_BYTE) return -1;
        if (out) out[n] = (char)inv[cp];
        n++;
        i += (size_t)k;
    }
    return (long)n;
}

size_t mt_bpe_pow2_at_least(size_t n)
{
    size_t c = 16;
    while (c < n) c *= 2;
    return c;
}

/* A missing, unreadable or directory path, said as such (jansson reports "line -1 column -1" for the
 * first and a syntax error for a directory). */
static int check_file(const char *path, mt_err *e)
{
    struct stat st;
    if (stat(path, &st)) return mt_err_sys(e, "%s", path);
    if (S_ISDIR(st.st_mode)) return mt_err_set(e, "%s: is a directory", path);
    return 0;
}

int mt_bpe_load_vocab_obj(mt_bpe *b, json_t *root, const char *path, const uint16_t inv[0x144],
                          const json_t *literal, mt_err *e)
{
    if (!json_is_object(root)) return mt_err_set(e, "%s: not a JSON object of token -> id", path);

    const char *key;
    size_t klen;
    json_t *val;
    uint32_t limit = 0;
    size_t spell_total = 0;
    json_object_keylen_foreach(root, key, klen, val)
    {
        json_int_t v = json_is_integer(val) ? json_integer_value(val) : -1;
        if (v < 0 || v >= (json_int_t)MAX_ID)
            return mt_err_set(e, "%s: token \"%.200s\": id must be an integer in [0, %u)", path, key, MAX_ID);
        if ((uint32_t)v + 1 > limit) limit = (uint32_t)v + 1;
        spell_total += klen;
    }
    if (spell_total >= UINT32_MAX) return mt_err_set(e, "%s: vocabulary too large", path);
    b->vocab_size = (uint32_t)json_object_size(root);
    b->id_limit = limit;
    b->kind = mt_xcalloc(limit ? limit : 1, 1);
    b->spell_off = mt_xcalloc((size_t)limit + 1, sizeof *b->spell_off);
    b->tok_off = mt_xcalloc((size_t)limit + 1, sizeof *b->tok_off);
    /* lengths first (prefix sums below), rejecting duplicate ids */
    uint32_t *slen = mt_xcalloc(limit ? limit : 1, sizeof *slen);
    json_object_keylen_foreach(root, key, klen, val)
    {
        uint32_t id = (uint32_t)json_integer_value(val);
        if (b->kind[id]) {
            free(slen);
            return mt_err_set(e, "%s: token \"%.200s\": duplicate id %u", path, key, id);
        }
        b->kind[id] = MT_TOK_SPECIAL; /* until shown to be a byte or a merge result */
        slen[id] = (uint32_t)klen;
    }
    for (uint32_t id = 0; id < limit; id++) b->spell_off[id + 1] = b->spell_off[id] + slen[id];
    free(slen);
    b->spell = mt_xmalloc(spell_total + 1);
    b->tok_bytes = mt_xmalloc(spell_total + 1); /* a token has at most as many bytes as its spelling */
    json_object_keylen_foreach(root, key, klen, val)
    {
        uint32_t id = (uint32_t)json_integer_value(val);
        memcpy(b->spell + b->spell_off[id], key, klen);
    }
    /* token bytes: the byte-symbol decoding of the spelling, or the spelling itself as UTF-8 when it
     * is not made of byte symbols (only possible for special tokens) */
    uint32_t off = 0;
    for (uint32_t id = 0; id < limit; id++) {
        b->tok_off[id] = off;
        const char *sp = b->spell + b->spell_off[id];
        size_t sl = b->spell_off[id + 1] - b->spell_off[id];
        long n = literal && json_object_getn(literal, sp, sl) ? -1 : mt_bpe_spelling_bytes(sp, sl, inv, b->tok_bytes + off);
        if (n < 0) {
            memcpy(b->tok_bytes + off, sp, sl);
            n = (long)sl;
        }
        off += (uint32_t)n;
    }
    b->tok_off[limit] = off;
    return 0;
}

static int load_vocab(mt_bpe *b, const char *path, const uint16_t inv[0x144], json_t **rootp, mt_err *e)
{
    if (check_file(path, e)) return -1;
    json_t *root = mt_json_load_regular(path, JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, e);
    if (!root) return -1;
    *rootp = root;
    return mt_bpe_load_vocab_obj(b, root, path, inv, NULL, e);
}

static void pair_insert(mt_bpe *b, uint64_t key, uint32_t rank, uint32_t result)
{
    uint64_t i = (key * 0x9E3779B97F4A7C15ull) >> b->pair_shift;
    while (b->pairs[i].key != MT_PAIR_EMPTY) i = (i + 1) & b->pair_mask;
    b->pairs[i] = (mt_bpe_pair){key, rank, result};
}

/* id of a spelling, or -1; parts must consist of byte symbols (checked by the caller) */
static int64_t vocab_id(json_t *root, const char *s, size_t n)
{
    json_t *v = json_object_getn(root, s, n);
    return v ? (int64_t)json_integer_value(v) : -1;
}

/* One merge "l r" (spellings of byte symbols); where names it in errors (file and line). */
int mt_bpe_merge_add(mt_bpe_merges *m, mt_bpe *b, json_t *root, const uint16_t inv[0x144], const char *l, size_t ll,
                     const char *r, size_t rl, const char *where, mt_err *e)
{
    int64_t a = vocab_id(root, l, ll), c = vocab_id(root, r, rl);
    if (a < 0 || c < 0)
        return mt_err_set(e, "%s: \"%.*s\" is not in the vocabulary", where, a < 0 ? (int)ll : (int)rl, a < 0 ? l : r);
    if (mt_bpe_spelling_bytes(l, ll, inv, NULL) < 0 || mt_bpe_spelling_bytes(r, rl, inv, NULL) < 0)
        return mt_err_set(e, "%s: merge parts must be byte-level symbols", where);
    if (m->n == m->cap) {
        m->cap = m->cap ? 2 * m->cap : 1024;
        m->m = mt_xrealloc(m->m, m->cap * sizeof *m->m);
    }
    /* the result is the concatenated spelling */
    if (m->buf_cap < ll + rl) {
        m->buf_cap = ll + rl;
        m->str = mt_xrealloc(m->str, m->buf_cap);
    }
    memcpy(m->str, l, ll);
    memcpy(m->str + ll, r, rl);
    int64_t res = vocab_id(root, m->str, ll + rl);
    if (res < 0)
        return mt_err_set(e, "%s: merge result \"%.*s\" is not in the vocabulary", where, (int)(ll + rl), m->str);
    if (m->n >= UINT32_MAX - 1) return mt_err_set(e, "%s: too many merges", where);
    m->m[m->n] = (mt_bpe_merge){(uint32_t)a, (uint32_t)c, (uint32_t)res, (uint32_t)m->n};
    m->n++;
    b->kind[res] = MT_TOK_MERGED;
    return 0;
}

void mt_bpe_merges_free(mt_bpe_merges *m)
{
    free(m->m);
    free(m->str);
    memset(m, 0, sizeof *m);
}

void mt_bpe_build_pairs(mt_bpe *b, const mt_bpe_merge *m, size_t nm)
{
    size_t size = mt_bpe_pow2_at_least(2 * nm);
    b->pair_mask = size - 1;
    b->pair_shift = 64;
    for (size_t s = size; s > 1; s /= 2) b->pair_shift--;
    b->pairs = mt_xmalloc(size * sizeof *b->pairs);
    for (size_t i = 0; i < size; i++) b->pairs[i].key = MT_PAIR_EMPTY;
    for (size_t i = 0; i < nm; i++) {
        uint64_t key = (uint64_t)m[i].l << 32 | m[i].r;
        /* a repeated pair keeps its first (lowest) rank */
        if (mt_bpe_pair_find(b, m[i].l, m[i].r)) continue;
        pair_insert(b, key, m[i].rank, m[i].res);
    }
}

static int load_merges(mt_bpe *b, const char *path, json_t *root, const uint16_t inv[0x144], mt_err *e)
{
    if (check_file(path, e)) return -1;
    FILE *f = mt_fopen_regular(path, e);   /* a FIFO is refused, not waited on */
    if (!f) return -1;
    /* collect the merges, then size the pair table */
    mt_bpe_merges m = {0};
    size_t lineno = 0;
    char *line = NULL;
    size_t lcap = 0;
    ssize_t got;
    int rc = 0;
    while ((got = getline(&line, &lcap, f)) >= 0) {
        lineno++;
        size_t n = (size_t)got;
        if (n && line[n - 1] == '\n') n--;
        if (n && line[n - 1] == '\r') n--;
        if (lineno == 1 && n >= 8 && !memcmp(line, "#version", 8)) continue;
        char *sp = memchr(line, ' ', n);
        if (!sp || sp == line || sp == line + n - 1 || memchr(sp + 1, ' ', (size_t)(line + n - sp - 1))) {
            rc = mt_err_set(e, "%s: line %zu: expected two tokens separated by one space", path, lineno);
            break;
        }
        char where[600];
        snprintf(where, sizeof where, "%.500s: line %zu", path, lineno);
        size_t la = (size_t)(sp - line);
        if ((rc = mt_bpe_merge_add(&m, b, root, inv, line, la, sp + 1, n - la - 1, where, e))) break;
    }
    if (!rc && ferror(f)) rc = mt_err_sys(e, "%s: read error", path);
    free(line);
    fclose(f);
    if (!rc) mt_bpe_build_pairs(b, m.m, m.n);
    mt_bpe_merges_free(&m);
    return rc;
}

/* Whole-piece map: every byte or merge-result token that BPE itself produces for its own bytes (for
 * GPT-2 that is all of them), so the fast path never changes the result of the merge loop. */
static void build_piece_map(mt_bpe *b, bool all_pieces)
{
    size_t size = mt_bpe_pow2_at_least(2 * (size_t)b->vocab_size);
    b->piece_mask = size - 1;
    b->pieces = mt_xcalloc(size, sizeof *b->pieces);
    mt_bpe_scratch w = {0};
    mt_ids ids = {0};
    for (uint32_t id = 0; id < b->id_limit; id++) {
        if (b->kind[id] != MT_TOK_BYTE && b->kind[id] != MT_TOK_MERGED) continue;
        const unsigned char *p = (const unsigned char *)b->tok_bytes + b->tok_off[id];
        size_t n = b->tok_off[id + 1] - b->tok_off[id];
        if (!all_pieces) {
            ids.n = 0;
            mt_bpe_merge_piece(b, &w, p, n, &ids);
            if (ids.n != 1 || ids.p[0] != id) continue;
        }
        uint64_t h = mt_bpe_hash_bytes(p, n);
        uint64_t i = h & b->piece_mask;
        while (b->pieces[i].id1) i = (i + 1) & b->piece_mask;
        mt_bpe_piece *e = &b->pieces[i];
        e->id1 = id + 1;
        e->len = n < 255 ? (uint8_t)n : 255;
        memcpy(e->head, p, n < MT_PIECE_HEAD ? n : MT_PIECE_HEAD);
    }
    mt_ids_free(&ids);
    mt_bpe_scratch_free(&w);
}

void mt_bpe_finish(mt_bpe *b, bool all_pieces)
{
    build_piece_map(b, all_pieces);
    for (uint32_t id = 0; id < b->id_limit; id++)
        if (b->kind[id] == MT_TOK_SPECIAL) b->n_special++;
    b->special = mt_xmalloc((b->n_special ? b->n_special : 1) * sizeof *b->special);
    b->n_special = 0;
    for (uint32_t id = 0; id < b->id_limit; id++)
        if (b->kind[id] == MT_TOK_SPECIAL) b->special[b->n_special++] = id;
    b->eod = mt_bpe_lookup(b, "<|endoftext|>");
}

int mt_bpe_load(mt_bpe **out, const char *vocab_path, const char *merges_path, mt_err *e)
{
    *out = NULL;
    mt_bpe *b = mt_xcalloc(1, sizeof *b);
    json_t *root = NULL;
    uint32_t sym[256];
    uint16_t inv[0x144];
    mt_bpe_byte_symbols(sym, inv);
    if (load_vocab(b, vocab_path, inv, &root, e)) goto fail;
    for (int c = 0; c < 256; c++) {
        char u[2] = {(char)(0xC0 | sym[c] >> 6), (char)(0x80 | (sym[c] & 0x3F))};
        if (sym[c] < 0x80) u[0] = (char)sym[c];
        int64_t id = vocab_id(root, u, sym[c] < 0x80 ? 1 : 2);
        if (id < 0) {
            mt_err_set(e, "%s: no entry for byte 0x%02x (symbol \"%.*s\")", vocab_path, c, sym[c] < 0x80 ? 1 : 2,
                       u);
            goto fail;
        }
        b->byte_id[c] = (uint32_t)id;
        b->kind[id] = MT_TOK_BYTE;
    }
    if (load_merges(b, merges_path, root, inv, e)) goto fail;
    json_decref(root);
    root = NULL;
    mt_bpe_finish(b, false);
    *out = b;
    return 0;
fail:
    json_decref(root);
    mt_bpe_free(b);
    return -1;
}

void mt_bpe_free(mt_bpe *b)
{
    if (!b) return;
    free(b->kind);
    free(b->tok_off);
    free(b->tok_bytes);
    free(b->spell_off);
    free(b->spell);
    free(b->pairs);
    free(b->rank2);
    free(b->pieces);
    free(b->special);
    free(b->added[0].id);
    free(b->added[1].id);
    free(b->added[0].pat_off);
    free(b->added[0].pat);
    free(b->added[1].pat_off);
    free(b->added[1].pat);
    free(b->prefix);
    free(b->suffix);
    free(b);
}

const char *mt_bpe_pattern_name(const mt_bpe *b) { return mt_pattern_name(b->pattern); }
uint32_t mt_bpe_vocab_size(const mt_bpe *b) { return b->vocab_size; }
uint32_t mt_bpe_id_limit(const mt_bpe *b) { return b->id_limit; }
int64_t mt_bpe_eod(const mt_bpe *b) { return b->eod; }

int64_t mt_bpe_lookup(const mt_bpe *b, const char *token)
{
    size_t n = strlen(token);
    for (uint32_t id = 0; id < b->id_limit; id++)
        if (b->kind[id] && b->spell_off[id + 1] - b->spell_off[id] == n &&
            !memcmp(b->spell + b->spell_off[id], token, n))
            return id;
    return -1;
}

const char *mt_bpe_token_bytes(const mt_bpe *b, uint32_t id, size_t *len)
{
    if (id >= b->id_limit || !b->kind[id]) return NULL;
    *len = b->tok_off[id + 1] - b->tok_off[id];
    return b->tok_bytes + b->tok_off[id];
}

int mt_bpe_decode(const mt_bpe *b, const uint32_t *ids, size_t n, mt_buf *out, mt_err *e)
{
    for (size_t i = 0; i < n; i++) {
        size_t len;
        const char *p = mt_bpe_token_bytes(b, ids[i], &len);
        if (!p) return mt_err_set(e, "token id %u at position %zu is not in the vocabulary", ids[i], i);
        mt_buf_append(out, p, len);
    }
    return 0;
}
