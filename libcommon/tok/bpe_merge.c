/* bpe_merge.c: the BPE merge loop for one piece. Short pieces use a quadratic scan over small arrays
 * (fast in practice); long ones a binary heap of candidate pairs keyed by (rank, position) over a
 * doubly linked list of symbols, with stale entries skipped when popped, so the cost is O(n log n)
 * even for megabytes without a pre-tokenizer split. A pair's rank comes from the pair table, or for a
 * tiktoken file (by_bytes) from the token its bytes make. */
#include <stdlib.h>

#include "tok/bpe_impl.h"

#define SHORT_PIECE 64
#define NO_RANK UINT32_MAX

static void scratch_grow(mt_bpe_scratch *w, size_t n)
{
    if (n <= w->cap) return;
    size_t c = w->cap ? w->cap : 256;
    while (c < n) c *= 2;
    w->id = mt_xrealloc(w->id, c * sizeof *w->id);
    w->rank = mt_xrealloc(w->rank, c * sizeof *w->rank);
    w->res = mt_xrealloc(w->res, c * sizeof *w->res);
    w->prev = mt_xrealloc(w->prev, c * sizeof *w->prev);
    w->next = mt_xrealloc(w->next, c * sizeof *w->next);
    w->pos = mt_xrealloc(w->pos, c * sizeof *w->pos);
    w->cap = c;
}

void mt_bpe_scratch_free(mt_bpe_scratch *w)
{
    free(w->id);
    free(w->rank);
    free(w->res);
    free(w->prev);
    free(w->next);
    free(w->pos);
    free(w->heap);
    memset(w, 0, sizeof *w);
}

static inline void pair_rank(const mt_bpe *b, uint32_t l, uint32_t r, uint32_t *rank, uint32_t *res)
{
    const mt_bpe_pair *e = mt_bpe_pair_find(b, l, r);
    *rank = e ? e->rank : NO_RANK;
    *res = e ? e->result : 0;
}

/* by_bytes: rank (and result) of the pair whose bytes are p[s..e), e - s >= 2 */
static inline uint32_t bytes_rank(const mt_bpe *b, const unsigned char *p, size_t s, size_t e)
{
    if (e - s == 2) return b->rank2[p[s] | (uint32_t)p[s + 1] << 8];
    int64_t id = mt_bpe_piece_find(b, p + s, e - s, mt_bpe_hash_bytes(p + s, e - s));
    return id < 0 ? NO_RANK : (uint32_t)id;
}

/* Ranks of the pair of symbols i, i + 1 of n (pos: where each starts in p[0..len)). */
static inline void short_rank(const mt_bpe *b, bool by_bytes, const unsigned char *p, size_t len, mt_bpe_scratch *w,
                              size_t i, size_t n)
{
    if (by_bytes) w->rank[i] = w->res[i] = bytes_rank(b, p, w->pos[i], i + 2 < n ? w->pos[i + 2] : len);
    else pair_rank(b, w->id[i], w->id[i + 1], &w->rank[i], &w->res[i]);
}

static inline void merge_short(const mt_bpe *b, mt_bpe_scratch *w, const unsigned char *p, size_t n, mt_ids *out,
                               bool by_bytes)
{
    uint32_t *id = w->id, *rank = w->rank, *res = w->res, *pos = w->pos;
    const size_t len = n;
    for (size_t i = 0; i < n; i++) id[i] = b->byte_id[p[i]];
    if (by_bytes)
        for (size_t i = 0; i < n; i++) pos[i] = (uint32_t)i;
    for (size_t i = 0; i + 1 < n; i++) short_rank(b, by_bytes, p, len, w, i, n);
    while (n > 1) {
        size_t m = 0;
        uint32_t best = rank[0];
        for (size_t i = 1; i + 1 < n; i++)
            if (rank[i] < best) best = rank[i], m = i;
        if (best == NO_RANK) break;
        id[m] = res[m];
        /* drop symbol m+1 and pair m+1 (its pairs shift down by one) */
        memmove(id + m + 1, id + m + 2, (n - m - 2) * sizeof *id);
        if (by_bytes) memmove(pos + m + 1, pos + m + 2, (n - m - 2) * sizeof *pos);
        if (m + 2 < n) {
            memmove(rank + m + 1, rank + m + 2, (n - m - 3) * sizeof *rank);
            memmove(res + m + 1, res + m + 2, (n - m - 3) * sizeof *res);
        }
        n--;
        if (m + 1 < n) short_rank(b, by_bytes, p, len, w, m, n);
        if (m > 0) short_rank(b, by_bytes, p, len, w, m - 1, n);
    }
    mt_ids_reserve(out, n);
    memcpy(out->p + out->n, id, n * sizeof *id);
    out->n += n;
}

/* min-heap of (rank << 32 | left position) */
static void heap_push(mt_bpe_scratch *w, size_t *hn, uint64_t v)
{
    if (*hn == w->heap_cap) {
        w->heap_cap = w->heap_cap ? 2 * w->heap_cap : 1024;
        w->heap = mt_xrealloc(w->heap, w->heap_cap * sizeof *w->heap);
    }
    uint64_t *h = w->heap;
    size_t i = (*hn)++;
    while (i > 0) {
        size_t up = (i - 1) / 2;
        if (h[up] <= v) break;
        h[i] = h[up];
        i = up;
    }
    h[i] = v;
}

static uint64_t heap_pop(mt_bpe_scratch *w, size_t *hn)
{
    uint64_t *h = w->heap, top = h[0], v = h[--*hn];
    size_t n = *hn, i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && h[c + 1] < h[c]) c++;
        if (v <= h[c]) break;
        h[i] = h[c];
        i = c;
    }
    if (n) h[i] = v;
    return top;
}

/* Rank and result of the pair at symbol l (the symbol after it is r), or NO_RANK. */
static inline uint32_t long_rank(const mt_bpe *b, const mt_bpe_scratch *w, const unsigned char *p, size_t n, int32_t l,
                                 int32_t r, uint32_t *res)
{
    if (b->by_bytes) {
        int32_t end = w->next[r];
        return *res = bytes_rank(b, p, (size_t)l, end >= 0 ? (size_t)end : n);
    }
    const mt_bpe_pair *e = mt_bpe_pair_find(b, w->id[l], w->id[r]);
    *res = e ? e->result : 0;
    return e ? e->rank : NO_RANK;
}

static void merge_long(const mt_bpe *b, mt_bpe_scratch *w, const unsigned char *p, size_t n, mt_ids *out)
{
    uint32_t *id = w->id, res;
    int32_t *prev = w->prev, *next = w->next;
    size_t hn = 0;
    for (size_t i = 0; i < n; i++) {
        id[i] = b->byte_id[p[i]];
        prev[i] = (int32_t)i - 1;
        next[i] = i + 1 < n ? (int32_t)i + 1 : -1;
    }
    for (size_t i = 0; i + 1 < n; i++) {
        uint32_t rank = long_rank(b, w, p, n, (int32_t)i, (int32_t)i + 1, &res);
        if (rank != NO_RANK) heap_push(w, &hn, (uint64_t)rank << 32 | i);
    }
    while (hn) {
        uint64_t top = heap_pop(w, &hn);
        uint32_t rank = (uint32_t)(top >> 32);
        int32_t l = (int32_t)(uint32_t)top, r = next[l];
        if (id[l] == NO_RANK || r < 0) continue; /* left symbol consumed, or now last */
        if (long_rank(b, w, p, n, l, r, &res) != rank) continue; /* the pair at l changed since this entry was pushed */
        id[l] = res;
        id[r] = NO_RANK;
        next[l] = next[r];
        if (next[r] >= 0) prev[next[r]] = l;
        if (prev[l] >= 0) {
            uint32_t f = long_rank(b, w, p, n, prev[l], l, &res);
            if (f != NO_RANK) heap_push(w, &hn, (uint64_t)f << 32 | (uint32_t)prev[l]);
        }
        if (next[l] >= 0) {
            uint32_t f = long_rank(b, w, p, n, l, next[l], &res);
            if (f != NO_RANK) heap_push(w, &hn, (uint64_t)f << 32 | (uint32_t)l);
        }
    }
    for (int32_t i = 0; i >= 0; i = next[i]) mt_ids_push(out, id[i]);
}

void mt_bpe_merge_piece(const mt_bpe *b, mt_bpe_scratch *w, const unsigned char *p, size_t n, mt_ids *out)
{
    scratch_grow(w, n);
    if (n > SHORT_PIECE) merge_long(b, w, p, n, out);
    else if (b->by_bytes) merge_short(b, w, p, n, out, true);
    else merge_short(b, w, p, n, out, false);
}
