/* fuzz_tiktoken.c: Megatron's TikTokenizer JSON ranks and a text: "ranks.json" FZ_SEP "text". A list
 * that loads with the ranks as ids also loads behind 3 special tokens (Megatron's layout, vocabulary
 * 3 + its ids, eod </s> = 2), and the text encodes to the same tokens in both, every id shifted by 3,
 * inside the vocabulary, decoding back to the text when it is valid UTF-8. Inputs not starting with '['
 * are left out: tiktoken lines with sparse ranks ask for tables as large as the largest rank. */
#include "fuzz.h"

#include "tok/bpe.h"

static void encode(const mt_bpe *b, const char *text, size_t n, mt_ids *ids)
{
    mt_bpe_ctx *c = mt_bpe_ctx_new(b);
    ids->n = 0;
    mt_bpe_encode(c, text, n, ids);
    mt_bpe_ctx_free(c);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fz_part p[2];
    fz_split(data, size, p, 2);
    if (!p[0].n || p[0].p[0] != '[') return 0;
    const char *path = fz_write("ranks.json", p[0].p, p[0].n);
    mt_tiktoken_opts plain = {"v1", 0, NULL, 0, 0};
    mt_bpe *b0, *b1;
    mt_err e;
    if (mt_bpe_load_tiktoken_megatron(&b0, path, &plain, &e)) return fz_refused(&e);
    uint32_t n = mt_bpe_id_limit(b0);
    mt_tiktoken_opts meg = {"v1", 3, NULL, 0, 3 + (int64_t)n};
    if (mt_bpe_load_tiktoken_megatron(&b1, path, &meg, &e)) abort();
    if (mt_bpe_id_limit(b1) != 3 + n || mt_bpe_eod(b1) != 2) abort();
    char *text = malloc(p[1].n ? p[1].n : 1);
    memcpy(text, p[1].p, p[1].n);
    mt_ids i0 = {0}, i1 = {0};
    mt_buf back = {0};
    encode(b0, text, p[1].n, &i0);
    encode(b1, text, p[1].n, &i1);
    if (i0.n != i1.n) abort();
    for (size_t i = 0; i < i0.n; i++)
        if (i0.p[i] >= n || i1.p[i] != i0.p[i] + 3) abort();
    if (mt_bpe_decode(b1, i1.p, i1.n, &back, &e)) abort();
    if (mt_utf8_check(text, p[1].n) == p[1].n && (back.n != p[1].n || (p[1].n && memcmp(back.p, text, p[1].n)))) abort();
    mt_buf_free(&back);
    mt_ids_free(&i0);
    mt_ids_free(&i1);
    free(text);
    mt_bpe_free(b0);
    mt_bpe_free(b1);
    return 0;
}
