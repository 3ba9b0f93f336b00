/* unicode.h: what the pre-tokenizers need to know about characters: strict UTF-8 decoding
 * (util/utf8.h) and the class of a code point
 * (letter L*, number N*, White_Space, other; or the finer classes below) from the generated Unicode
 * 16.0 tables. */
#ifndef MT_TOK_UNICODE_H
#define MT_TOK_UNICODE_H

#include <stddef.h>
#include <stdint.h>

#include "util/utf8.h"

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

#endif
