/* nfc.c: NFC normalization of tokenizer input (mt_nfc in nfc.h) by libutf8proc, with the characters on
 * which it and HF tokenizers differ (mt_nfc_inert) kept out of it and ASCII runs copied as they are. */
#include <utf8proc.h>

#include "tok/nfc.h"
#include "tok/unicode.h"

static int in_list(const uint32_t *list, size_t n, uint32_t cp)
{
    if (!n || cp < list[0] || cp > list[n - 1]) return 0;
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (list[mid] < cp) lo = mid + 1;
        else hi = mid;
    }
    return list[lo] == cp;
}

/* Whether NFC may change cp or what is around it (see mt_nfc_second). */
static int may_change(uint32_t cp)
{
    const utf8proc_property_t *p = utf8proc_get_property((utf8proc_int32_t)cp);
    return p->combining_class || (p->decomp_seqindex != UINT16_MAX && !p->decomp_type) ||
           in_list(mt_nfc_second, mt_nfc_n_second, cp);
}

/* NFC of valid UTF-8 s[0..len) by libutf8proc: canonical decomposition and ordering into w, composition
 * and UTF-8 in place (what utf8proc_map does, without an allocation per call). */
static void nfc_valid(mt_nfc_scratch *w, const char *s, size_t len, mt_buf *out)
{
    const utf8proc_option_t opt = UTF8PROC_STABLE | UTF8PROC_COMPOSE;
    if (!len) return;
    for (;;) {
        utf8proc_ssize_t n = utf8proc_decompose((const utf8proc_uint8_t *)s, (utf8proc_ssize_t)len, w->cp,
                                                (utf8proc_ssize_t)w->cap, opt);
        if (n < 0) break; /* not reached: s is valid UTF-8 */
        if ((size_t)n > w->cap) {
            w->cap = (size_t)n + len;
            w->cp = mt_xrealloc(w->cp, w->cap * sizeof *w->cp);
            continue;
        }
        n = utf8proc_reencode(w->cp, n, opt);
        if (n < 0) break;
        mt_buf_append(out, w->cp, (size_t)n);
        return;
    }
    mt_buf_append(out, s, len);
}

/* A run that starts with at most one ASCII character and goes on without any: split at invalid bytes
 * and at the inert characters; a part without a character that NFC may change is copied. */
static void nfc_run(mt_nfc_scratch *w, const unsigned char *s, size_t len, mt_buf *out)
{
    size_t from = 0, i = 0;
    int change = 0;
    while (i < len) {
        uint32_t cp;
        int k = mt_utf8_decode(s + i, len - i, &cp);
        if (k > 0 && !in_list(mt_nfc_inert, mt_nfc_n_inert, cp)) {
            change = change || (cp >= 0x80 && may_change(cp));
            i += (size_t)k;
            continue;
        }
        size_t n = k > 0 ? (size_t)k : (size_t)-k;
        if (change) nfc_valid(w, (const char *)s + from, i - from, out);
        else mt_buf_append(out, s + from, i - from);
        mt_buf_append(out, s + i, n);
        i += n;
        from = i;
        change = 0;
    }
    if (change) nfc_valid(w, (const char *)s + from, len - from, out);
    else mt_buf_append(out, s + from, len - from);
}

void mt_nfc(mt_nfc_scratch *w, const char *text, size_t len, mt_buf *out)
{
    /* An ASCII character is a starter that composes with nothing before it, so the text splits before
     * any; the last one before other characters may compose with them and goes with them. */
    const unsigned char *s = (const unsigned char *)text;
    size_t i = 0;
    mt_buf_reserve(out, len);
    while (i < len) {
        size_t j = i;
        while (j < len && s[j] < 0x80) j++;
        if (j == len) {
            mt_buf_append(out, s + i, len - i);
            return;
        }
        size_t from = j > i ? j - 1 : j, k = j;
        mt_buf_append(out, s + i, from - i);
        while (k < len && s[k] >= 0x80) k++;
        nfc_run(w, s + from, k - from, out);
        i = k;
    }
}

void mt_nfc_scratch_free(mt_nfc_scratch *w)
{
    free(w->cp);
    w->cp = NULL;
    w->cap = 0;
}
