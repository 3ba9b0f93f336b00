/* bpe_encode.c: encoding text to ids: pre-tokenize, then per piece the whole-vocabulary-entry fast
 * path, the per-context piece cache, or the merge loop; the special-token splitting variant, and the
 * tokenizer.json pipeline (added tokens, the normalizer, then the post-processor's ids around the text). */
#include <stdlib.h>

#include "tok/bpe_impl.h"
#include "tok/nfc.h"
#include "tok/pretok.h"

/* Direct-mapped cache of short pieces that needed merging (a new piece evicts the old one). */
#define CACHE_SLOTS 4096
#define CACHE_KEY 26
#define CACHE_IDS 8
typedef struct cache_slot {
    uint32_t hash;
    uint8_t klen, nids; /* klen 0: empty */
    char key[CACHE_KEY];
    uint32_t ids[CACHE_IDS];
} cache_slot;

struct mt_bpe_ctx {
    const mt_bpe *b;
    mt_bpe_scratch w;
    cache_slot *cache;
    mt_nfc_scratch nw;
    mt_buf norm; /* the normalized text between two added tokens */
};

mt_bpe_ctx *mt_bpe_ctx_new(const mt_bpe *b)
{
    mt_bpe_ctx *c = mt_xcalloc(1, sizeof *c);
    c->b = b;
    c->cache = mt_xcalloc(CACHE_SLOTS, sizeof *c->cache);
    return c;
}

void mt_bpe_ctx_free(mt_bpe_ctx *c)
{
    if (!c) return;
    mt_bpe_scratch_free(&c->w);
    mt_nfc_scratch_free(&c->nw);
    mt_buf_free(&c->norm);
    free(c->cache);
    free(c);
}

static void encode_piece(mt_bpe_ctx *c, const unsigned char *p, size_t n, mt_ids *out)
{
    const mt_bpe *b = c->b;
    if (n == 1) {
        mt_ids_push(out, b->byte_id[p[0]]);
        return;
    }
    uint64_t h = mt_bpe_hash_bytes(p, n);
    int64_t id = mt_bpe_piece_find(b, p, n, h);
    if (id >= 0) {
        mt_ids_push(out, (uint32_t)id);
        return;
    }
    cache_slot *s = NULL;
    uint32_t h32 = (uint32_t)(h >> 32);
    if (n <= CACHE_KEY) {
        s = &c->cache[(h >> 20) % CACHE_SLOTS];
        if (s->klen == n && s->hash == h32 && !memcmp(s->key, p, n)) {
            mt_ids_reserve(out, s->nids);
            memcpy(out->p + out->n, s->ids, s->nids * sizeof *s->ids);
            out->n += s->nids;
            return;
        }
    }
    size_t start = out->n;
    mt_bpe_merge_piece(b, &c->w, p, n, out);
    size_t got = out->n - start;
    if (s && got <= CACHE_IDS) {
        s->hash = h32;
        s->klen = (uint8_t)n;
        s->nids = (uint8_t)got;
        memcpy(s->key, p, n);
        memcpy(s->ids, out->p + start, got * sizeof *s->ids);
    }
}

void mt_bpe_encode(mt_bpe_ctx *c, const char *text, size_t len, mt_ids *out)
{
    const unsigned char *s = (const unsigned char *)text;
    size_t pos = 0;
    mt_pattern pat = c->b->pattern;
    while (pos < len) {
        size_t end = pat == MT_PAT_GPT2 ? mt_pretok_next(text, len, pos) : mt_pretok_next_pat(pat, text, len, pos);
        /* the merge loop indexes symbols with 32-bit integers: a piece over 1 GiB (never seen in
         * text) is encoded in chunks */
        while (end - pos > (1u << 30)) {
            encode_piece(c, s + pos, 1u << 30, out);
            pos += 1u << 30;
        }
        encode_piece(c, s + pos, end - pos, out);
        pos = end;
    }
}

/* Splits text at the tokens ids[0..ns) (leftmost match first, the longest at one position), encodes
 * the text between them with inner and appends the tokens' own ids. Token k is matched as the bytes
 * pat[pat_off[k] .. pat_off[k + 1]) when pat_off is set, else as its own bytes. */
static void split_encode(mt_bpe_ctx *c, const uint32_t *ids, size_t ns, const uint32_t *pat_off, const char *pat,
                         const char *text, size_t len, mt_ids *out,
                         void (*inner)(mt_bpe_ctx *, const char *, size_t, mt_ids *))
{
    const mt_bpe *b = c->b;
    if (!ns || !len) {
        inner(c, text, len, out);
        return;
    }
    /* next occurrence of each token (len + 1: none, SIZE_MAX: not searched yet); searched again only
     * once pos has passed it */
    size_t *at = mt_xmalloc(ns * sizeof *at);
    for (size_t k = 0; k < ns; k++) at[k] = SIZE_MAX;
    size_t pos = 0;
    for (;;) {
        size_t best = len + 1, best_len = 0, best_k = 0;
        for (size_t k = 0; k < ns; k++) {
            uint32_t id = ids[k];
            size_t tl = pat_off ? pat_off[k + 1] - pat_off[k] : b->tok_off[id + 1] - b->tok_off[id];
            if (!tl) continue;
            if (at[k] == SIZE_MAX || at[k] < pos) {
                const char *tb = pat_off ? pat + pat_off[k] : b->tok_bytes + b->tok_off[id];
                const char *f = memmem(text + pos, len - pos, tb, tl);
                at[k] = f ? (size_t)(f - text) : len + 1;
            }
            /* earliest match wins; at the same position the longest */
            if (at[k] < best || (at[k] == best && at[k] <= len && tl > best_len)) {
                best = at[k];
                best_len = tl;
                best_k = k;
            }
        }
        if (best > len) break;
        inner(c, text + pos, best - pos, out);
        mt_ids_push(out, ids[best_k]);
        pos = best + best_len;
    }
    inner(c, text + pos, len - pos, out);
    free(at);
}

void mt_bpe_encode_special(mt_bpe_ctx *c, const char *text, size_t len, mt_ids *out)
{
    split_encode(c, c->b->special, c->b->n_special, NULL, NULL, text, len, out, mt_bpe_encode);
}

/* the text between two added tokens of the first pass: normalized (as HF tokenizers, each such piece on
 * its own), then the second pass of added tokens, those matched in the normalized text */
static void encode_added_normalized(mt_bpe_ctx *c, const char *text, size_t len, mt_ids *out)
{
    const mt_bpe *b = c->b;
    if (b->nfc && mt_nfc_any(text, len)) {
        c->norm.n = 0;
        mt_nfc(&c->nw, text, len, &c->norm);
        text = c->norm.p;
        len = c->norm.n;
    }
    split_encode(c, b->added[1].id, b->added[1].n, b->added[1].pat_off, b->added[1].pat, text, len, out,
                 mt_bpe_encode);
}

void mt_bpe_encode_added(mt_bpe_ctx *c, const char *text, size_t len, mt_ids *out)
{
    split_encode(c, c->b->added[0].id, c->b->added[0].n, c->b->added[0].pat_off, c->b->added[0].pat, text, len, out,
                 encode_added_normalized);
}

size_t mt_bpe_prefix_len(const mt_bpe *b) { return b->n_prefix; }

void mt_bpe_encode_full(mt_bpe_ctx *c, const char *text, size_t len, mt_ids *out)
{
    const mt_bpe *b = c->b;
    for (size_t i = 0; i < b->n_prefix; i++) mt_ids_push(out, b->prefix[i]);
    mt_bpe_encode_added(c, text, len, out);
    for (size_t i = 0; i < b->n_suffix; i++) mt_ids_push(out, b->suffix[i]);
}
