/* fuzz_bpe.c: a tokenizer's files and a text: "vocab.json" FZ_SEP "merges.txt" FZ_SEP "text". A loaded
 * tokenizer encodes the text (plain and with special tokens), every id is inside the vocabulary, and
 * decoding gives the text back whenever it is valid UTF-8 and the vocabulary is byte-level. */
#include "fuzz.h"

#include "tok/bpe.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fz_part p[3];
    fz_split(data, size, p, 3);
    const char *vocab = fz_write("vocab.json", p[0].p, p[0].n);
    const char *merges = fz_write("merges.txt", p[1].p, p[1].n);
    mt_bpe *b;
    mt_err e;
    if (mt_bpe_load(&b, vocab, merges, &e)) return fz_refused(&e);
    char *text = malloc(p[2].n ? p[2].n : 1);
    memcpy(text, p[2].p, p[2].n);
    mt_bpe_ctx *c = mt_bpe_ctx_new(b);
    mt_ids ids = {0};
    mt_buf back = {0};
    for (int special = 0; special < 2; special++) {
        ids.n = back.n = 0;
        if (special) mt_bpe_encode_special(c, text, p[2].n, &ids);
        else mt_bpe_encode(c, text, p[2].n, &ids);
        for (size_t i = 0; i < ids.n; i++)
            if (ids.p[i] >= mt_bpe_id_limit(b)) abort();
        if (mt_bpe_decode(b, ids.p, ids.n, &back, &e)) abort(); /* its own ids decode */
        if (!special && mt_utf8_check(text, p[2].n) == p[2].n &&
            (back.n != p[2].n || (p[2].n && memcmp(back.p, text, p[2].n))))   /* memcmp: never NULL */
            abort(); /* the round trip of valid UTF-8 */
    }
    mt_buf_free(&back);
    mt_ids_free(&ids);
    mt_bpe_ctx_free(c);
    free(text);
    mt_bpe_free(b);
    return 0;
}
