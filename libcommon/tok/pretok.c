/* pretok.c: GPT-2 pre-tokenizer scanner (see pretok.h). ASCII and Latin-1 go through direct tables;
 * other characters are decoded and looked up in the two-level Unicode table. */
#include "tok/pretok.h"

#include <stdint.h>

#include "tok/unicode.h"

#define O MT_UC_OTHER
#define L MT_UC_LETTER
#define N MT_UC_NUMBER
#define S MT_UC_SPACE
static const uint8_t ascii_class[128] = {
    O, O, O, O, O, O, O, O, O, S, S, S, S, S, O, O, /* 0x00: \t \n \v \f \r are White_Space */
    O, O, O, O, O, O, O, O, O, O, O, O, O, O, O, O, /* 0x10 */
    S, O, O, O, O, O, O, O, O, O, O, O, O, O, O, O, /* 0x20: space, punctuation */
    N, N, N, N, N, N, N, N, N, N, O, O, O, O, O, O, /* 0x30: digits */
    O, L, L, L, L, L, L, L, L, L, L, L, L, L, L, L, /* 0x40: upper case */
    L, L, L, L, L, L, L, L, L, L, L, O, O, O, O, O, /* 0x50 */
    O, L, L, L, L, L, L, L, L, L, L, L, L, L, L, L, /* 0x60: lower case */
    L, L, L, L, L, L, L, L, L, L, L, O, O, O, O, O, /* 0x70 */
};
#undef O
#undef L
#undef N
#undef S

/* Class and length of the character at s[i] (i < len). */
static inline int class_at(const unsigned char *s, size_t len, size_t i, size_t *n)
{
    if (s[i] < 0x80) {
        *n = 1;
        return ascii_class[s[i]];
    }
    if ((s[i] & 0xFE) == 0xC2 && i + 1 < len && (s[i + 1] & 0xC0) == 0x80) { /* U+0080..U+00FF */
        *n = 2;
        return mt_uc_latin1[(s[i] & 1) << 6 | (s[i + 1] & 0x3F)];
    }
    uint32_t cp;
    int k = mt_utf8_decode(s + i, len - i, &cp);
    if (k < 0) {
        *n = (size_t)-k;
        return MT_UC_OTHER;
    }
    *n = (size_t)k;
    return mt_uc_class(cp);
}

/* End of the run of characters of class cls starting at i. */
static size_t run_end(const unsigned char *s, size_t len, size_t i, int cls)
{
    while (i < len) {
        /* ASCII inner loop: the common case for English and code */
        unsigned char c = s[i];
        if (c < 0x80) {
            if (ascii_class[c] != cls) return i;
            i++;
            continue;
        }
        size_t n;
        if (class_at(s, len, i, &n) != cls) return i;
        i += n;
    }
    return i;
}

size_t mt_pretok_next(const char *text, size_t len, size_t pos)
{
    const unsigned char *s = (const unsigned char *)text;
    size_t n;

    /* 's 't 're 've 'm 'll 'd: literal, lower case only */
    if (s[pos] == '\'' && pos + 1 < len) {
        unsigned char a = s[pos + 1];
        if (a == 's' || a == 't' || a == 'm' || a == 'd') return pos + 2;
        if (pos + 2 < len) {
            unsigned char b = s[pos + 2];
            if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return pos + 3;
        }
    }

    int cls = class_at(s, len, pos, &n);
    /* " ?X+": one U+0020 joins a following letter, number or other run */
    if (s[pos] == ' ' && pos + 1 < len) {
        size_t n2;
        int next = class_at(s, len, pos + 1, &n2);
        if (next != MT_UC_SPACE) return run_end(s, len, pos + 1 + n2, next);
    }
    if (cls != MT_UC_SPACE) return run_end(s, len, pos + n, cls);

    /* \s+(?!\S) then \s+: a whitespace run followed by a non-space gives back its last character
     * (which then starts the next piece) unless the run is one character long; at the end of the text
     * the whole run is one piece. */
    size_t last = pos, i = pos + n;
    while (i < len) {
        size_t k;
        if (class_at(s, len, i, &k) != MT_UC_SPACE) break;
        last = i;
        i += k;
    }
    if (i == len || last == pos) return i;
    return last;
}
