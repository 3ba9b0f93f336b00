/* utf8.h: strict UTF-8 decoding of one character (maximal-subpart error lengths, as Python's
 * errors='replace'), for the tokenizers' input and the JSON-lines scanner; where text that is still
 * growing can be cut without splitting a character (streamed continuations). */
#ifndef MT_UTIL_UTF8_H
#define MT_UTIL_UTF8_H

#include <stddef.h>
#include <stdint.h>

/* Decodes one UTF-8 character at s[0..len) (len >= 1). Returns its length (1-4) and sets *cp; on an
 * invalid sequence returns minus the length of its maximal subpart (1-3 bytes, the unit that Python's
 * errors='replace' turns into one U+FFFD) and sets *cp to 0xFFFD. */
static inline int mt_utf8_decode(const unsigned char *s, size_t len, uint32_t *cp)
{
    unsigned c = s[0];
    *cp = 0xFFFD;
    if (c < 0x80) {
        *cp = c;
        return 1;
    }
    if (c < 0xC2 || c > 0xF4) return -1;
    if (c < 0xE0) {
        if (len < 2 || (s[1] & 0xC0) != 0x80) return -1;
        *cp = (c & 0x1F) << 6 | (s[1] & 0x3F);
        return 2;
    }
    /* valid range of the second byte depends on the lead byte (no overlongs, surrogates, > U+10FFFF) */
    unsigned lo = 0x80, hi = 0xBF;
    if (c == 0xE0) lo = 0xA0;
    else if (c == 0xED) hi = 0x9F;
    else if (c == 0xF0) lo = 0x90;
    else if (c == 0xF4) hi = 0x8F;
    if (len < 2 || s[1] < lo || s[1] > hi) return -1;
    if (len < 3 || (s[2] & 0xC0) != 0x80) return -2;
    if (c < 0xF0) {
        *cp = (c & 0x0F) << 12 | (s[1] & 0x3F) << 6 | (s[2] & 0x3F);
        return 3;
    }
    if (len < 4 || (s[3] & 0xC0) != 0x80) return -3;
    *cp = (c & 0x07) << 18 | (s[1] & 0x3F) << 12 | (s[2] & 0x3F) << 6 | (s[3] & 0x3F);
    return 4;
}

/* The end of s[from..to) without a last character that more bytes may still complete: to, or up to 3
 * bytes less when s[..to) ends with the start of a multi-byte character. What lies before it is final. */
static inline size_t mt_utf8_whole(const char *s, size_t from, size_t to)
{
    for (size_t back = 1; back <= 3 && back <= to - from; back++) {
        unsigned c = (unsigned char)s[to - back];
        if ((c & 0xC0) == 0x80) continue;
        size_t need = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
        return need > back ? to - back : to;
    }
    return to;
}

#endif
