/* vec.h: growable arrays of bytes (mt_buf) and of token ids (mt_ids); inline, no hidden state. */
#ifndef MT_UTIL_VEC_H
#define MT_UTIL_VEC_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "util/err.h"

typedef struct mt_buf {
    char *p;
    size_t n, cap;
} mt_buf;

typedef struct mt_ids {
    uint32_t *p;
    size_t n, cap;
} mt_ids;

static inline void mt_buf_reserve(mt_buf *b, size_t extra)
{
    if (b->n + extra <= b->cap) return;
    size_t c = b->cap ? b->cap : 64;
    while (c < b->n + extra) c *= 2;
    b->p = mt_xrealloc(b->p, c);
    b->cap = c;
}
/* As mt_buf_reserve, but a failed allocation returns -1 (b unchanged) for the caller to report. */
static inline int mt_buf_try_reserve(mt_buf *b, size_t extra)
{
    if (b->n + extra <= b->cap) return 0;
    size_t c = b->cap ? b->cap : 64;
    while (c < b->n + extra) c *= 2;
    char *p = realloc(b->p, c);
    if (!p) return -1;
    b->p = p;
    b->cap = c;
    return 0;
}
static inline void mt_buf_append(mt_buf *b, const void *s, size_t n)
{
    mt_buf_reserve(b, n);
    if (n) memcpy(b->p + b->n, s, n);
    b->n += n;
}
static inline void mt_buf_putc(mt_buf *b, char c)
{
    mt_buf_reserve(b, 1);
    b->p[b->n++] = c;
}
static inline void mt_buf_free(mt_buf *b)
{
    free(b->p);
    b->p = NULL;
    b->n = b->cap = 0;
}

static inline void mt_ids_reserve(mt_ids *v, size_t extra)
{
    if (v->n + extra <= v->cap) return;
    size_t c = v->cap ? v->cap : 64;
    while (c < v->n + extra) c *= 2;
    v->p = mt_xrealloc(v->p, c * sizeof *v->p);
    v->cap = c;
}
static inline void mt_ids_push(mt_ids *v, uint32_t id)
{
    mt_ids_reserve(v, 1);
    v->p[v->n++] = id;
}
static inline void mt_ids_free(mt_ids *v)
{
    free(v->p);
    v->p = NULL;
    v->n = v->cap = 0;
}

#endif
