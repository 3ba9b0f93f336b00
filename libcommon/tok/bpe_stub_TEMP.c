/* bpe_stub_TEMP.c: TEMPORARY weak stand-ins for the BPE tokenizer functions mt-index calls, so this
 * branch links before tok/bpe.c exists. Remove this file when tok/bpe.c is merged: the real strong
 * definitions replace these. */
#include <string.h>

#include "tok/bpe.h"

__attribute__((weak)) int mt_bpe_load(mt_bpe **out, const char *vocab_path, const char *merges_path, mt_err *e)
{
    (void)merges_path;
    *out = NULL;
    return mt_err_set(e, "%s: the BPE tokenizer is not built into this mt", vocab_path);
}

__attribute__((weak)) void mt_bpe_free(mt_bpe *b) { (void)b; }

__attribute__((weak)) int64_t mt_bpe_eod(const mt_bpe *b)
{
    (void)b;
    return -1;
}

__attribute__((weak)) int mt_bpe_decode(const mt_bpe *b, const uint32_t *ids, size_t n, mt_buf *out, mt_err *e)
{
    (void)b, (void)ids, (void)n, (void)out;
    return mt_err_set(e, "the BPE tokenizer is not built into this mt");
}

__attribute__((weak)) size_t mt_utf8_sanitize(const char *s, size_t len, mt_buf *out)
{
    mt_buf_append(out, s, len);
    return 0;
}
