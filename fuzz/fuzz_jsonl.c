/* fuzz_jsonl.c: one JSON-lines record (mt-tokenize's and mt-eval --score's documents, mt-generate's
 * prompts): the string fields of one and of two keys, then their bytes made valid UTF-8 and quoted back
 * as JSON, as mt-generate --json prints a prompt. */
#include "fuzz.h"

#include "io/jsonl.h"
#include "tok/bpe.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const char *const one[] = {"text"}, *const two[] = {"text", "content"};
    const char *line = (const char *)data;
    if (mt_jsonl_blank(line, size)) return 0;
    mt_jsonl st = {0};
    mt_jsonl_field f[2];
    mt_err e;
    mt_buf clean = {0}, quoted = {0};
    for (int pass = 0; pass < 2; pass++) {
        int n = pass ? 2 : 1;
        if (mt_jsonl_extract(&st, line, size, pass ? two : one, n, f, &e)) {
            fz_refused(&e);
            continue;
        }
        for (int i = 0; i < n; i++) {
            clean.n = quoted.n = 0;
            mt_utf8_sanitize(f[i].text, f[i].len, &clean);
            if (mt_utf8_check(clean.p, clean.n) != clean.n) abort(); /* sanitized text is valid UTF-8 */
            mt_json_quote(&quoted, f[i].text, f[i].len);
        }
    }
    mt_buf_free(&clean);
    mt_buf_free(&quoted);
    mt_jsonl_free(&st);
    return 0;
}
