/* bpe_load_megatron.c: Megatron's TikTokenizer: its JSON file of ranks (a list of {"rank", "token_bytes",
 * "token_str"} objects, read with the checks Megatron asserts) or a tiktoken file, and its layout of ids
 * (special tokens first, the ranks shifted behind them, the vocabulary cut to its size). The tables are
 * built by mt_bpe_from_ranks (bpe_load_tiktoken.c). */
#include <stdio.h>
#include <stdlib.h>

#include "io/fsutil.h"
#include "io/jsonfile.h"
#include "tok/bpe_impl.h"

/* The first byte of the file that is not JSON whitespace (EOF for none). */
static int first_byte(const char *path, mt_err *e)
{
    FILE *f = mt_fopen_regular(path, e);
    if (!f) return -2;
    int c;
    while ((c = getc(f)) == ' ' || c == '\t' || c == '\n' || c == '\r') {}
    fclose(f);
    return c;
}

/* Megatron's JSON ranks, at most max entries of them (the rest is not looked at, as Megatron cuts the
 * list first); *n_file is the length of the whole list. */
static int read_json(mt_bpe_ranks *r, const char *path, size_t max, size_t *n_file, mt_err *e)
{
    memset(r, 0, sizeof *r);
    json_t *root = mt_json_load_regular(path, JSON_ALLOW_NUL, e);
    if (!root) return -1;
    int rc = 0;
    uint32_t *set = NULL;
    if (!json_is_array(root)) {
        rc = mt_err_set(e, "%s: not Megatron's TikTokenizer JSON (a list of {\"rank\", \"token_bytes\", "
                           "\"token_str\"} objects)", path);
        goto out;
    }
    *n_file = json_array_size(root);
    size_t n = *n_file < max ? *n_file : max;
    if (!n) {
        rc = mt_err_set(e, "%s: no tokens", path);
        goto out;
    }
    if (n >= (1u << 28)) {
        rc = mt_err_set(e, "%s: more than 2^28 ranks", path);
        goto out;
    }
    uint64_t cap = mt_bpe_pow2_at_least(2 * n);
    set = mt_xcalloc(cap, sizeof *set);
    for (size_t i = 0; i < n; i++) {
        json_t *x = json_array_get(root, i);
        json_t *rank = json_object_get(x, "rank"), *tb = json_object_get(x, "token_bytes");
        if (!json_is_object(x) || json_object_size(x) != 3 || !rank || !tb || !json_object_get(x, "token_str")) {
            rc = mt_err_set(e, "%s: entry %zu: expected an object of exactly \"rank\", \"token_bytes\" and "
                               "\"token_str\"", path, i);
            goto out;
        }
        if (!json_is_integer(rank) || json_integer_value(rank) != (json_int_t)i) {
            rc = json_is_integer(rank)
                     ? mt_err_set(e, "%s: entry %zu: rank %lld out of order (entry %zu must have rank %zu)", path, i,
                                  (long long)json_integer_value(rank), i, i)
                     : mt_err_set(e, "%s: entry %zu: rank is not an integer", path, i);
            goto out;
        }
        const char *s = json_string_value(tb);
        size_t sl = s ? json_string_length(tb) : 0;
        mt_bpe_ranks_add(r, NULL, sl, (uint32_t)i);
        long k = s ? mt_bpe_b64_decode(s, sl, r->bytes + r->t[i].off) : -1;
        if (k <= 0) {
            rc = mt_err_set(e, "%s: entry %zu (rank %zu): token_bytes is not a non-empty base64 string", path, i, i);
            goto out;
        }
        r->t[i].len = (uint32_t)k;
        r->bytes_n = r->t[i].off + (size_t)k;
        if (i < 256 && (k != 1 || r->bytes[r->t[i].off] != i)) {
            rc = mt_err_set(e, "%s: entry %zu (rank %zu): the first 256 ranks must be the single bytes in order "
                               "(rank %zu is the byte 0x%02zx)", path, i, i, i, i);
            goto out;
        }
        int64_t was = mt_bpe_ranks_seen_or_add(set, cap - 1, r, (uint32_t)i);
        if (was >= 0) {
            rc = mt_err_set(e, "%s: entry %zu (rank %zu): the same token_bytes as rank %lld", path, i, i,
                            (long long)was);
            goto out;
        }
        if (r->bytes_n >= UINT32_MAX / 4) {
            rc = mt_err_set(e, "%s: too large", path);
            goto out;
        }
    }
out:
    free(set);
    json_decref(root);
    if (rc) mt_bpe_ranks_free(r);
    return rc;
}

/* The ranks of a tiktoken file below max; they must be all of 0..max-1 when max is the limit. */
static int read_lines(mt_bpe_ranks *r, const char *path, size_t max, size_t *n_file, mt_err *e)
{
    if (mt_bpe_read_tiktoken(r, path, e)) return -1;
    *n_file = r->n;
    size_t k = 0;
    for (size_t i = 0; i < r->n; i++)
        if (r->t[i].rank < max) r->t[k++] = r->t[i];
    r->n = k;
    return 0;
}

/* Megatron's layout needs every rank below inner once: the first one absent or given twice is the error. */
static int check_complete(const mt_bpe_ranks *r, size_t inner, size_t n_file, const mt_tiktoken_opts *o,
                          int64_t vocab, const char *path, mt_err *e)
{
    unsigned char *have = mt_xcalloc(inner ? inner : 1, 1);
    int rc = 0;
    for (size_t i = 0; i < r->n && !rc; i++) {
        if (have[r->t[i].rank]++) rc = mt_err_set(e, "%s: rank %u given twice", path, r->t[i].rank);
    }
    size_t miss = 0;
    while (!rc && miss < inner && have[miss]) miss++;
    if (!rc && miss < inner) {
        if (r->n < inner && miss == r->n)
            rc = mt_err_set(e, "%s: %zu ranks and %lld special tokens are fewer than the %lld ids of the vocabulary%s: "
                               "give --vocab-size %lld", path, n_file, (long long)o->num_special, (long long)vocab,
                            o->vocab_size ? "" : " (Megatron's default without --vocab-size)",
                            (long long)(o->num_special + (int64_t)r->n));
        else
            rc = mt_err_set(e, "%s: no rank %zu (Megatron's TikTokenizer needs every rank below %zu: --vocab-size %lld "
                               "less --tiktoken-num-special-tokens %lld)", path, miss, inner, (long long)vocab,
                            (long long)o->num_special);
    }
    free(have);
    return rc;
}

/* Megatron's special tokens: the given ones (or <unk> <s> </s>), then <SPECIAL_i> up to num_special. */
static int specials(const mt_tiktoken_opts *o, int64_t vocab, mt_bpe_special_tok **out, char **names, mt_err *e)
{
    static const char *const dflt[] = {"<unk>", "<s>", "</s>"};
    const char *const *given = o->special ? o->special : dflt;
    int ng = o->special ? o->n_special : 3;
    if (o->special && !ng) return mt_err_set(e, "--tiktoken-special-tokens: no tokens given");
    for (int k = 0; k < 3; k++) {
        int found = 0;
        for (int i = 0; i < ng; i++) found |= !strcmp(given[i], dflt[k]);
        if (!found) return mt_err_set(e, "--tiktoken-special-tokens: %s missing (the list must include <unk>, <s> and </s>)", dflt[k]);
    }
    if (o->num_special < ng)
        return mt_err_set(e, "--tiktoken-num-special-tokens %lld: fewer than the %d special tokens", (long long)o->num_special, ng);
    if (o->num_special >= vocab)
        return mt_err_set(e, "--tiktoken-num-special-tokens %lld: not below the vocabulary size %lld%s", (long long)o->num_special,
                          (long long)vocab, o->vocab_size ? " (--vocab-size)" : " (Megatron's default without --vocab-size)");
    size_t n = (size_t)o->num_special, bytes = 0;
    for (size_t i = (size_t)ng; i < n; i++) bytes += (size_t)snprintf(NULL, 0, "<SPECIAL_%zu>", i) + 1;
    mt_bpe_special_tok *sp = mt_xmalloc(n * sizeof *sp);
    char *buf = mt_xmalloc(bytes + 1), *p = buf;
    for (size_t i = 0; i < n; i++) {
        if (i < (size_t)ng) {
            sp[i].text = given[i];
        } else {
            sp[i].text = p;
            p += sprintf(p, "<SPECIAL_%zu>", i) + 1;
        }
        sp[i].id = (uint32_t)i;
    }
    /* names given twice, or a given name that is also a filler's */
    for (size_t i = 0; i < (size_t)ng; i++) {
        if (!*given[i]) {
            free(sp);
            free(buf);
            return mt_err_set(e, "--tiktoken-special-tokens: an empty token");
        }
        for (size_t j = 0; j < n; j++)
            if (j != i && !strcmp(sp[j].text, given[i])) {
                free(sp);
                free(buf);
                return mt_err_set(e, "--tiktoken-special-tokens: %s is given twice%s", given[i],
                                  j >= (size_t)ng ? " (it is also the name of a filler special token)" : "");
            }
    }
    *out = sp;
    *names = buf;
    return 0;
}

int mt_bpe_load_tiktoken_megatron(mt_bpe **out, const char *path, const mt_tiktoken_opts *o, mt_err *e)
{
    *out = NULL;
    if (o->num_special < 0) return mt_err_set(e, "--tiktoken-num-special-tokens: negative");
    if (!o->num_special && o->special)
        return mt_err_set(e, "--tiktoken-special-tokens needs --tiktoken-num-special-tokens above 0");
    int c0 = first_byte(path, e);
    if (c0 == -2) return -1;
    if (c0 == '{')
        return mt_err_set(e, "%s: a JSON object, not Megatron's TikTokenizer JSON (a list of {\"rank\", "
                             "\"token_bytes\", \"token_str\"} objects) nor a tiktoken file", path);
    bool json = c0 == '[';
    if (!json && !o->num_special) return mt_bpe_load_tiktoken(out, path, o->pattern, e);

    int64_t vocab = o->vocab_size ? o->vocab_size : MT_TIKTOKEN_VOCAB_DEFAULT;
    mt_bpe_special_tok *sp = NULL;
    char *names = NULL;
    if (o->num_special && specials(o, vocab, &sp, &names, e)) return -1;
    size_t inner = o->num_special ? (size_t)(vocab - o->num_special) : SIZE_MAX, n_file = 0;
    mt_bpe_ranks r;
    int rc = json ? read_json(&r, path, inner, &n_file, e) : read_lines(&r, path, inner, &n_file, e);
    if (rc) goto out;
    mt_pattern pat;
    if ((rc = mt_bpe_tiktoken_pattern(path, o->pattern, n_file, &pat, e))) goto ranks;
    if (o->num_special) {
        if ((rc = check_complete(&r, inner, n_file, o, vocab, path, e))) goto ranks;
        rc = mt_bpe_from_ranks(out, &r, (uint32_t)o->num_special, sp, (size_t)o->num_special, pat, path, e);
        if (!rc) (*out)->eod = mt_bpe_lookup(*out, "</s>");
    } else {
        /* Megatron's JSON with the ranks as ids, as a tiktoken file's */
        size_t nsp;
        const mt_bpe_special_tok *own = mt_bpe_tiktoken_specials(pat, &nsp);
        rc = mt_bpe_from_ranks(out, &r, 0, own, nsp, pat, path, e);
    }
ranks:
    mt_bpe_ranks_free(&r);
out:
    free(sp);
    free(names);
    return rc;
}
