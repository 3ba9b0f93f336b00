/* utf8.c: UTF-8 validation and repair for tokenizer input (mt_utf8_check, mt_utf8_sanitize in bpe.h). */
#include "tok/bpe.h"
#include "tok/unicode.h"

size_t mt_utf8_check(const char *text, size_t len)
{
    const unsigned char *s = (const unsigned char *)text;
    size_t i = 0;
    while (i < len) {
        /* skip ASCII eight bytes at a time */
        while (i + 8 <= len) {
            uint64_t w;
            memcpy(&w, s + i, 8);
            if (w & 0x8080808080808080ull) break;
            i += 8;
        }
        if (i >= len) break;
        if (s[i] < 0x80) {
            i++;
            continue;
        }
        uint32_t cp;
        int k = mt_utf8_decode(s + i, len - i, &cp);
        if (k < 0) return i;
        i += (size_t)k;
    }
    return len;
}

size_t mt_utf8_sanitize(const char *text, size_t len, mt_buf *out)
{
    const unsigned char *s = (const unsigned char *)text;
    size_t bad = 0, i = 0;
    mt_buf_reserve(out, len);
    while (i < len) {
        size_t good = mt_utf8_check(text + i, len - i);
        mt_buf_append(out, text + i, good);
        i += good;
        if (i >= len) break;
        uint32_t cp;
        int k = mt_utf8_decode(s + i, len - i, &cp);
        mt_buf_append(out, "\xEF\xBF\xBD", 3);
        bad++;
        i += (size_t)-k;
    }
    return bad;
}
