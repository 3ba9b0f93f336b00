/* unicode.h: what the pre-tokenizers need to know about characters: strict UTF-8 decoding
 * (maximal-subpart error lengths, as Python's errors='replace') and the class of a code point
 * (letter L*, number N*, White_Space, other; or the finer classes below) from the generated Unicode
 * 16.0 tables. */
#ifndef MT_TOK_UNICODE_H
#define MT_TOK_UNICODE_H

#include <stddef.h>
#include <stdint.h>

enum { MT_UC_OTHER = 0, MT_UC_LETTER = 1, MT_UC_NUMBER = 2, MT_UC_SPACE = 3 };

#define MT_UC_BLOCK 128 /* code points per second-level block of the table */

extern const uint32_t mt_uc_limit;
extern const uint16_t mt_uc_stage1[];
extern const uint8_t mt_uc_stage2[][MT_UC_BLOCK / 4];
extern const uint8_t mt_uc_latin1[128]; /* classes of U+0080..U+00FF */

/* Class of code point cp (any value; out of range and surrogates are MT_UC_OTHER). */
static inline int mt_uc_class(uint32_t cp)
{
    if (cp >= mt_uc_limit) return MT_UC_OTHER;
    const uint8_t *blk = mt_uc_stage2[mt_uc_stage1[cp / MT_UC_BLOCK]];
    unsigned i = cp % MT_UC_BLOCK;
    return (blk[i / 4] >> (2 * (i % 4))) & 3;
}

/* Fine classes for the patterns that tell letters apart by case (o200k): Lu and Lt, Ll, Lm and Lo, the
 * marks M*, N*, White_Space, other. */
enum {
    MT_UCF_OTHER = 0, MT_UCF_UPPER, MT_UCF_LOWER, MT_UCF_LETTER, MT_UCF_MARK, MT_UCF_NUMBER, MT_UCF_SPACE
};
extern const uint32_t mt_ucf_limit;
extern const uint16_t mt_ucf_stage1[];
extern const uint8_t mt_ucf_stage2[][MT_UC_BLOCK / 2];

static inline int mt_ucf_class(uint32_t cp)
{
    if (cp >= mt_ucf_limit) return MT_UCF_OTHER;
    const uint8_t *blk = mt_ucf_stage2[mt_ucf_stage1[cp / MT_UC_BLOCK]];
    unsigned i = cp % MT_UC_BLOCK;
    return (blk[i / 2] >> (4 * (i % 2))) & 15;
}

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

#endif
