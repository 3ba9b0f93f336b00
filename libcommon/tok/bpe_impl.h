/* bpe_impl.h: internals shared by the bpe_*.c files: the loaded tables, their hash lookups, and the
 * per-thread scratch space of the merge loop. Not part of the public API (see bpe.h). */
#ifndef MT_TOK_BPE_IMPL_H
#define MT_TOK_BPE_IMPL_H

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include <jansson.h>

#include "tok/bpe.h"
#include "tok/pretok.h"

enum { MT_TOK_ABSENT = 0, MT_TOK_BYTE, MT_TOK_MERGED, MT_TOK_SPECIAL };

/* (left, right) -> rank and result; key = left << 32 | right, MT_PAIR_EMPTY marks a free slot. */
#define MT_PAIR_EMPTY UINT64_MAX
typedef struct mt_bpe_pair {
    uint64_t key;
    uint32_t rank, result;
} mt_bpe_pair;

/* raw token bytes -> id, for the whole-piece fast path; id1 = id + 1, 0 marks a free slot. The entry
 * holds the token's length (255: 255 or more) and first bytes, so that a lookup reads one cache line
 * for a token of up to MT_PIECE_HEAD bytes (tok_bytes only for the rest of a longer one). */
#define MT_PIECE_HEAD 11
typedef struct mt_bpe_piece {
    uint32_t id1;
    uint8_t len;
    unsigned char head[MT_PIECE_HEAD];
} mt_bpe_piece;

struct mt_bpe {
    uint32_t vocab_size, id_limit;
    uint8_t *kind;      /* [id_limit] MT_TOK_* */
    uint32_t *tok_off;  /* [id_limit + 1]: bytes of id are tok_bytes[tok_off[id] .. tok_off[id + 1]) */
    char *tok_bytes;
    uint32_t *spell_off; /* [id_limit + 1]: vocab.json spelling of id, likewise in spell */
    char *spell;
    uint32_t byte_id[256];
    mt_bpe_pair *pairs;
    uint64_t pair_mask;
    unsigned pair_shift;
    /* tiktoken: no pair table; a pair's rank and result are the id of the token its bytes make, found
     * in the whole-piece map, or for two bytes b0 b1 in rank2[b0 | b1 << 8] (UINT32_MAX: none) */
    bool by_bytes;
    uint32_t *rank2;
    mt_bpe_piece *pieces;
    uint64_t piece_mask;
    uint32_t *special; /* ids of MT_TOK_SPECIAL tokens */
    size_t n_special;
    int64_t eod;
    mt_pattern pattern;
    /* tokenizer.json added tokens, matched in the text before pre-tokenization: [0] those matched in the
     * raw text (normalized: false), [1] those matched in the normalized text; token k as the text
     * pat[pat_off[k] .. pat_off[k + 1]): its content, normalized for [1] */
    struct {
        uint32_t *id;
        size_t n;
        uint32_t *pat_off;
        char *pat;
    } added[2];
    bool nfc; /* the normalizer: NFC (nfc.h) of the text between the added tokens of [0], or none */
    uint32_t *prefix, *suffix; /* the post-processor's ids around a single sequence */
    size_t n_prefix, n_suffix;
};

/* A merge: left and right ids, resulting id, priority (lower merges first). */
typedef struct mt_bpe_merge {
    uint32_t l, r, res, rank;
} mt_bpe_merge;
typedef struct mt_bpe_merges {
    mt_bpe_merge *m;
    size_t n, cap;
    char *str;
    size_t buf_cap;
} mt_bpe_merges;

#define MT_BPE_NO_BYTE 0xFFFF
/* GPT-2's byte <-> symbol mapping (sym: byte -> code point; inv: code point < 0x144 -> byte or NO_BYTE). */
void mt_bpe_byte_symbols(uint32_t sym[256], uint16_t inv[0x144]);
/* Bytes a spelling stands for; returns their number, written to out (capacity len) unless out is NULL, or
 * -1 when some character is not a byte symbol. */
long mt_bpe_spelling_bytes(const char *sp, size_t len, const uint16_t inv[0x144], char *out);
size_t mt_bpe_pow2_at_least(size_t n);
/* Fills the vocabulary of b from a JSON object spelling -> id (path names it in errors); spellings that
 * are keys of literal (may be NULL) stand for their own UTF-8, not for byte symbols. */
int mt_bpe_load_vocab_obj(mt_bpe *b, json_t *root, const char *path, const uint16_t inv[0x144],
                          const json_t *literal, mt_err *e);
/* Appends the merge "l r" (checked against the vocabulary root; rank = its position) to m. */
int mt_bpe_merge_add(mt_bpe_merges *m, mt_bpe *b, json_t *root, const uint16_t inv[0x144], const char *l, size_t ll,
                     const char *r, size_t rl, const char *where, mt_err *e);
void mt_bpe_merges_free(mt_bpe_merges *m);
/* The pair table from the merges (a pair given twice keeps its first entry). */
void mt_bpe_build_pairs(mt_bpe *b, const mt_bpe_merge *m, size_t nm);
/* The whole-piece map (all_pieces: every byte or merged token, as tiktoken and HF's ignore_merges do;
 * otherwise those that BPE itself produces for their bytes), the special list and the default eod. */
void mt_bpe_finish(mt_bpe *b, bool all_pieces);

/* A ranks file in memory (tiktoken lines or Megatron's JSON list): the bytes of every token back to back
 * and, per token, where they are and its rank. */
typedef struct mt_bpe_rank_tok {
    uint32_t off, len, rank;
} mt_bpe_rank_tok;
typedef struct mt_bpe_ranks {
    mt_bpe_rank_tok *t;
    size_t n, cap;
    unsigned char *bytes;
    size_t bytes_n, bytes_cap;
} mt_bpe_ranks;
/* A special token of a ranks file's vocabulary (not in the file): its text, which it also stands for, and id. */
typedef struct mt_bpe_special_tok {
    const char *text;
    uint32_t id;
} mt_bpe_special_tok;
/* Standard base64 (with '=' padding) s[0..n) into out (room for 3n/4 bytes); the byte count, or -1. */
long mt_bpe_b64_decode(const char *s, size_t n, unsigned char *out);
/* Appends a token (p NULL: n bytes of room, left unset) of the given rank. */
void mt_bpe_ranks_add(mt_bpe_ranks *r, const unsigned char *p, size_t n, uint32_t rank);
void mt_bpe_ranks_free(mt_bpe_ranks *r);
/* Open-addressing set (mask + 1 slots, zeroed; 2n or more) of the byte strings of the tokens of r:
 * adds token i and returns -1, or returns the index of the token with the same bytes added before. */
int64_t mt_bpe_ranks_seen_or_add(uint32_t *set, uint64_t mask, const mt_bpe_ranks *r, uint32_t i);
/* Reads the "base64 rank" lines of a tiktoken file; errors name the file and line (a token or a rank
 * given twice among them). */
int mt_bpe_read_tiktoken(mt_bpe_ranks *r, const char *path, mt_err *e);
/* The pre-tokenizer of a ranks file: the pattern named, else cl100k's or o200k's by their rank count. */
int mt_bpe_tiktoken_pattern(const char *path, const char *name, size_t n_ranks, mt_pattern *out, mt_err *e);
/* tiktoken's special tokens of cl100k_base and o200k_base (by their pattern; none for the others). */
const mt_bpe_special_tok *mt_bpe_tiktoken_specials(mt_pattern pat, size_t *n);
/* The mt_bpe of the ranks: the token of rank k gets the id shift + k (merge priority in the same order),
 * the specials their own ids (none of them an id of a rank); eod is <|endoftext|> when it is one of them.
 * Errors name path: a rank or special given twice, a single byte without a token. */
int mt_bpe_from_ranks(mt_bpe **out, const mt_bpe_ranks *r, uint32_t shift, const mt_bpe_special_tok *sp, size_t nsp,
                      mt_pattern pat, const char *path, mt_err *e);

/* Growable scratch arrays of the merge loop (one per thread). */
typedef struct mt_bpe_scratch {
    uint32_t *id, *rank, *res, *pos;
    int32_t *prev, *next;
    uint64_t *heap;
    size_t cap, heap_cap;
} mt_bpe_scratch;

/* Hash of a byte string, word at a time: 8-byte loads (the last one overlapping the one before), or for
 * under 8 bytes two 4-byte loads or three single bytes that together cover every byte; the length is
 * mixed in first, so for each length the words read determine the string. */
static inline uint64_t mt_bpe_hash_bytes(const unsigned char *p, size_t n)
{
    uint64_t h = 0x9E3779B97F4A7C15ull ^ (n * 0xff51afd7ed558ccdull), v;
    if (n > 8) {
        while (n > 8) {
            memcpy(&v, p, 8);
            h = (h ^ v) * 0xbf58476d1ce4e5b9ull;
            h ^= h >> 31;
            p += 8;
            n -= 8;
        }
        memcpy(&v, p + n - 8, 8);
    } else if (n >= 4) {
        uint32_t a, b;
        memcpy(&a, p, 4);
        memcpy(&b, p + n - 4, 4);
        v = (uint64_t)b << 32 | a;
    } else {
        v = n ? (uint64_t)p[0] | (uint64_t)p[n / 2] << 8 | (uint64_t)p[n - 1] << 16 : 0;
    }
    h = (h ^ v) * 0x94d049bb133111ebull;
    h = (h ^ (h >> 32)) * 0xbf58476d1ce4e5b9ull;
    return h ^ (h >> 29);
}

static inline const mt_bpe_pair *mt_bpe_pair_find(const mt_bpe *b, uint32_t left, uint32_t right)
{
    uint64_t key = (uint64_t)left << 32 | right;
    uint64_t i = (key * 0x9E3779B97F4A7C15ull) >> b->pair_shift;
    for (;;) {
        const mt_bpe_pair *e = &b->pairs[i];
        if (e->key == key) return e;
        if (e->key == MT_PAIR_EMPTY) return NULL;
        i = (i + 1) & b->pair_mask;
    }
}

/* a[0..n) == b[0..n) for n <= 16, by two loads of each that together cover the bytes */
static inline bool mt_bpe_eq_short(const unsigned char *a, const unsigned char *b, size_t n)
{
    if (n >= 8) {
        uint64_t x0, x1, y0, y1;
        memcpy(&x0, a, 8), memcpy(&y0, b, 8), memcpy(&x1, a + n - 8, 8), memcpy(&y1, b + n - 8, 8);
        return ((x0 ^ y0) | (x1 ^ y1)) == 0;
    }
    if (n >= 4) {
        uint32_t x0, x1, y0, y1;
        memcpy(&x0, a, 4), memcpy(&y0, b, 4), memcpy(&x1, a + n - 4, 4), memcpy(&y1, b + n - 4, 4);
        return ((x0 ^ y0) | (x1 ^ y1)) == 0;
    }
    return !n || (a[0] == b[0] && a[n / 2] == b[n / 2] && a[n - 1] == b[n - 1]);
}

/* Id of the token whose bytes are exactly p[0..n) and that BPE itself produces for them, or -1. */
static inline int64_t mt_bpe_piece_find(const mt_bpe *b, const unsigned char *p, size_t n, uint64_t h)
{
    uint64_t i = h & b->piece_mask;
    uint8_t len = n < 255 ? (uint8_t)n : 255;
    for (;;) {
        const mt_bpe_piece *e = &b->pieces[i];
        if (!e->id1) return -1;
        if (e->len == len) {
            if (n <= MT_PIECE_HEAD) {
                if (mt_bpe_eq_short(e->head, p, n)) return e->id1 - 1;
            } else if (mt_bpe_eq_short(e->head, p, MT_PIECE_HEAD)) {
                uint32_t id = e->id1 - 1, off = b->tok_off[id];
                if (b->tok_off[id + 1] - off == n && !memcmp(b->tok_bytes + off, p, n)) return id;
            }
        }
        i = (i + 1) & b->piece_mask;
    }
}

/* Byte-level BPE of one piece p[0..n) (n >= 1) by merge rank, lowest rank first, leftmost among
 * equals (pairs ranked by the pair table, or by_bytes by the token their bytes make); appends the ids
 * to out. O(n^2) scan for short pieces, a heap over a linked list for long. */
void mt_bpe_merge_piece(const mt_bpe *b, mt_bpe_scratch *w, const unsigned char *p, size_t n, mt_ids *out);
void mt_bpe_scratch_free(mt_bpe_scratch *w);

#endif
