/* test_bpe.c: the byte-level BPE tokenizer: the pattern's edge cases with exact GPT-2 ids, round
 * trips, UTF-8 repair, load errors, a small hand-made vocabulary, tiktoken ranks file and tokenizer.json
 * (the ids of its added tokens, their matching around the NFC normalizer), adversarial
 * long pieces and the golden ids in tests/golden (made with tiktoken).
 * Also a helper for tests/pipeline/bpe-oracle.sh:
 *   test_bpe --encode-lines [--special] VOCAB MERGES < lines
 *   test_bpe --encode-lines [--special] hf TOKENIZER_JSON < lines   (--special: with added tokens and the
 *                                                                    post-processor, mt_bpe_encode_full)
 *   test_bpe --encode-lines [--special] tiktoken[:PATTERN] FILE < lines
 *   test_bpe --pretok-lines PATTERN < lines   (the pieces' byte lengths, for bpe-families-oracle.py)
 * reads one JSON string literal per line and prints its ids space-separated, one line each. */
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "t.h"
#include "tok/bpe.h"
#include "tok/pretok.h"

static char top[1024] = ".";
static const char *tmpdir;
static mt_bpe *gpt2;
static mt_bpe_ctx *ctx;

static void write_file(const char *path, const char *s)
{
    FILE *f = fopen(path, "wb");
    fputs(s, f);
    fclose(f);
}

/* ids of s as "1 2 3" (static buffer, valid until the next call) */
static const char *ids_str(const mt_ids *v)
{
    static char buf[1 << 16];
    size_t o = 0;
    buf[0] = 0;
    for (size_t i = 0; i < v->n && o + 16 < sizeof buf; i++)
        o += (size_t)snprintf(buf + o, sizeof buf - o, i ? " %u" : "%u", v->p[i]);
    return buf;
}

static const char *enc_n(const char *s, size_t n)
{
    mt_ids v = {0};
    mt_bpe_encode(ctx, s, n, &v);
    const char *r = ids_str(&v);
    mt_ids_free(&v);
    return r;
}
static const char *enc(const char *s) { return enc_n(s, strlen(s)); }

static int load_gpt2(void)
{
    if (gpt2) return 0;
    char v[1200], m[1200];
    snprintf(v, sizeof v, "%s/share/gpt2/vocab.json", top);
    snprintf(m, sizeof m, "%s/share/gpt2/merges.txt", top);
    mt_err e = {{0}};
    if (mt_bpe_load(&gpt2, v, m, &e)) {
        fprintf(stderr, "%s\n", e.msg);
        return -1;
    }
    ctx = mt_bpe_ctx_new(gpt2);
    return 0;
}

#define NEED_GPT2()                                                                                          \
    do {                                                                                                     \
        if (load_gpt2()) {                                                                                   \
            T_FAILF("cannot load GPT-2 files under %.300s/share/gpt2", top);                                     \
            return;                                                                                          \
        }                                                                                                    \
    } while (0)

TEST(gpt2_loads)
{
    NEED_GPT2();
    T_EQ_INT(mt_bpe_vocab_size(gpt2), 50257);
    T_EQ_INT(mt_bpe_id_limit(gpt2), 50257);
    T_EQ_INT(mt_bpe_eod(gpt2), 50256);
    T_EQ_INT(mt_bpe_lookup(gpt2, "<|endoftext|>"), 50256);
    T_EQ_INT(mt_bpe_lookup(gpt2, "\xc4\xa0the"), 262); /* "Ġthe" */
    T_EQ_INT(mt_bpe_lookup(gpt2, "no such token"), -1);
    size_t n;
    const char *p = mt_bpe_token_bytes(gpt2, 262, &n);
    T_CHECK(p && n == 4 && !memcmp(p, " the", 4));
    p = mt_bpe_token_bytes(gpt2, 198, &n);
    T_CHECK(p && n == 1 && p[0] == '\n');
    T_CHECK(mt_bpe_token_bytes(gpt2, 50257, &n) == NULL);
}

TEST(whitespace_runs)
{
    NEED_GPT2();
    T_EQ_STR(enc("a\n\nb"), "64 198 198 65");
    T_EQ_STR(enc("a\n\n"), "64 628");
    T_EQ_STR(enc("x   \n  y"), "87 220 220 220 198 220 331");
    T_EQ_STR(enc("a\r\n\r\nb"), "64 201 198 201 198 65");
    T_EQ_STR(enc("end   "), "437 220 220 220");
    T_EQ_STR(enc("  leading"), "220 3756");
    T_EQ_STR(enc("a  \tb"), "64 220 220 197 65");
    T_EQ_STR(enc(""), "");
    T_EQ_STR(enc(" "), "220");
}

TEST(contractions)
{
    NEED_GPT2();
    T_EQ_STR(enc("I'M here"), "40 6 44 994");
    T_EQ_STR(enc("'steal"), "338 660 282");
    T_EQ_STR(enc("''s"), "7061 82");
    T_EQ_STR(enc(" 's"), "705 82");
    T_EQ_STR(enc("hello!'s"), "31373 13679 82");
    T_EQ_STR(enc("I'm we're they've you'll he'd it's don't"), "40 1101 356 821 484 1053 345 1183 339 1549 340 338 836 470");
}

TEST(unicode_spaces_and_numbers)
{
    NEED_GPT2();
    T_EQ_STR(enc("a\xc2\xa0" "b"), "64 1849 65");        /* NBSP does not attach */
    T_EQ_STR(enc("a\tb"), "64 197 65");
    T_EQ_STR(enc("a\xe3\x80\x80" "b"), "64 5099 222 65"); /* U+3000 */
    T_EQ_STR(enc(" 2024\xe5\xb9\xb4"), "48609 33176 112"); /* " 2024年" */
    T_EQ_STR(enc("a\xe2\x80\xa8\xe2\x80\xa9" "b"), "64 447 101 447 102 65");
    /* U+200B, U+FEFF, U+180E are not White_Space */
    T_EQ_STR(enc("x\xe2\x80\x8by\xef\xbb\xbfz\xe1\xa0\x8e"), "87 9525 88 171 119 123 89 157 254 236");
    T_EQ_STR(enc("\xc2\x85" "a"), "126 227 64"); /* U+0085 */
}

TEST(special_tokens)
{
    NEED_GPT2();
    const char *s = "<|endoftext|>";
    T_EQ_STR(enc(s), "27 91 437 1659 5239 91 29");
    mt_ids v = {0};
    mt_bpe_encode_special(ctx, s, strlen(s), &v);
    T_EQ_STR(ids_str(&v), "50256");
    v.n = 0;
    const char *t = "Hello<|endoftext|><|endoftext|> world<|endoftext";
    mt_bpe_encode_special(ctx, t, strlen(t), &v);
    T_EQ_STR(ids_str(&v), "15496 50256 50256 995 27 91 437 1659 5239");
    v.n = 0;
    mt_bpe_encode_special(ctx, "abc", 3, &v);
    T_EQ_STR(ids_str(&v), enc("abc"));
    mt_ids_free(&v);
}

static int round_trips(const char *s, size_t n)
{
    mt_ids v = {0};
    mt_buf out = {0};
    mt_err e;
    mt_bpe_encode(ctx, s, n, &v);
    int ok = mt_bpe_decode(gpt2, v.p, v.n, &out, &e) == 0 && out.n == n && !memcmp(out.p, s, n);
    mt_ids_free(&v);
    mt_buf_free(&out);
    return ok;
}

TEST(round_trip)
{
    NEED_GPT2();
    const char *cases[] = {
        "Hello, world! It's 2024.\n\n\tdef f(x):\n        return x**2  # square\n",
        "Gr\xc3\xbc\xc3\x9f" "e aus K\xc3\xb6ln \xe2\x80\x94 \xd0\x9f\xd1\x80\xd0\xb8\xd0\xb2\xd0\xb5\xd1\x82 \xe4\xbd\xa0\xe5\xa5\xbd",
        "\xf0\x9f\x91\xa9\xf0\x9f\x8f\xbd\xe2\x80\x8d\xf0\x9f\x92\xbb e\xcc\x81\xcc\x81\xcc\x81 \xe2\x80\xa8\r\n",
        "\x01\x02\x7f \xc2\xad", "   ", "'", "''", "'ll've'",
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
        if (!round_trips(cases[i], strlen(cases[i]))) T_FAILF("case %zu does not round-trip", i);
    /* NUL bytes are ordinary characters */
    T_CHECK(round_trips("a\0b\0\0 c", 7));
    T_EQ_STR(enc_n("a\0b", 3), "64 188 65");
    mt_err e;
    mt_buf out = {0};
    uint32_t bad[] = {64, 50257};
    T_EQ_INT(mt_bpe_decode(gpt2, bad, 2, &out, &e), -1);
    T_CHECK(strstr(e.msg, "50257") != NULL);
    mt_buf_free(&out);
}

static const char *sanitized(const char *s, size_t n, size_t *bad)
{
    static char buf[256];
    mt_buf out = {0};
    *bad = mt_utf8_sanitize(s, n, &out);
    size_t m = out.n < sizeof buf - 1 ? out.n : sizeof buf - 1;
    memcpy(buf, out.p, m);
    buf[m] = 0;
    mt_buf_free(&out);
    return buf;
}

#define FFFD "\xef\xbf\xbd"
TEST(utf8_repair)
{
    size_t bad;
    T_EQ_INT(mt_utf8_check("abc\xc3\xa9", 5), 5);
    T_EQ_INT(mt_utf8_check("ab\xc3", 3), 2);
    T_EQ_INT(mt_utf8_check("ab\xed\xa0\x80", 5), 2); /* surrogate */
    T_EQ_INT(mt_utf8_check("\xf4\x90\x80\x80", 4), 0); /* > U+10FFFF */
    T_EQ_INT(mt_utf8_check("\xc0\xaf", 2), 0);        /* overlong */
    T_EQ_INT(mt_utf8_check("0123456789abcdef\x80", 17), 16);
    /* Python: b'...'.decode('utf-8', 'replace') */
    T_EQ_STR(sanitized("a\x80" "b", 3, &bad), "a" FFFD "b");
    T_EQ_INT(bad, 1);
    T_EQ_STR(sanitized("\xe2\x82", 2, &bad), FFFD); /* truncated 3-byte sequence: one replacement */
    T_EQ_INT(bad, 1);
    T_EQ_STR(sanitized("\xe2\x82x", 3, &bad), FFFD "x");
    T_EQ_STR(sanitized("\xf0\x9f\x98", 3, &bad), FFFD);
    T_EQ_STR(sanitized("\xed\xa0\x80", 3, &bad), FFFD FFFD FFFD); /* surrogate: ED then two lone bytes */
    T_EQ_INT(bad, 3);
    T_EQ_STR(sanitized("\xf4\x90\x80\x80", 4, &bad), FFFD FFFD FFFD FFFD);
    T_EQ_STR(sanitized("\xc0\xaf", 2, &bad), FFFD FFFD);
    T_EQ_STR(sanitized("\xe0\x80\xaf", 3, &bad), FFFD FFFD FFFD);
    T_EQ_STR(sanitized("\xf0\x90\x80\xf0\x9f\x98\x80", 7, &bad), FFFD "\xf0\x9f\x98\x80");
    T_EQ_INT(bad, 1);
    T_EQ_STR(sanitized("\xff\xfe", 2, &bad), FFFD FFFD);
    T_EQ_STR(sanitized("ok", 2, &bad), "ok");
    T_EQ_INT(bad, 0);
}

/* a vocab.json with the 256 byte symbols (ids 1000 + byte, so not GPT-2's) plus extra entries */
static void write_vocab(const char *path, const char *extra, int skip_byte)
{
    json_t *o = json_object();
    unsigned next = 0x100;
    for (int c = 0; c < 256; c++) {
        int printable = (c >= 0x21 && c <= 0x7E) || (c >= 0xA1 && c <= 0xAC) || (c >= 0xAE);
        unsigned cp = printable ? (unsigned)c : next++;
        char u[3] = {0};
        if (cp < 0x80) u[0] = (char)cp;
        else u[0] = (char)(0xC0 | cp >> 6), u[1] = (char)(0x80 | (cp & 0x3F));
        if (c != skip_byte) json_object_set_new(o, u, json_integer(1000 + c));
    }
    if (extra) {
        json_t *x = json_loads(extra, 0, NULL);
        json_object_update(o, x);
        json_decref(x);
    }
    json_dump_file(o, path, JSON_INDENT(1));
    json_decref(o);
}

TEST(custom_vocab)
{
    char *v = t_path("v.json"), *m = t_path("m.txt");
    /* ids deliberately unrelated to merge order; "Ġ" is the space symbol */
    write_vocab(v, "{\"bc\": 7, \"ab\": 3, \"abc\": 5, \"aa\": 9, \"\xc4\xa0" "a\": 11, \"<s>\": 2, \"<x y>\": 4}", -1);
    write_file(m, "#version: 0.2\nb c\na b\na bc\na a\n\xc4\xa0 a\n");
    mt_bpe *b;
    mt_err e = {{0}};
    if (mt_bpe_load(&b, v, m, &e)) {
        T_FAILF("load: %.300s", e.msg);
        return;
    }
    T_EQ_INT(mt_bpe_vocab_size(b), 263);
    T_EQ_INT(mt_bpe_id_limit(b), 1256);
    T_EQ_INT(mt_bpe_eod(b), -1);
    T_EQ_INT(mt_bpe_lookup(b, "abc"), 5);
    mt_bpe_ctx *c = mt_bpe_ctx_new(b);
    mt_ids ids = {0};
    struct {
        const char *in, *want;
    } cases[] = {
        {"abc", "5"},             /* b c (rank 0) then a bc: the whole piece */
        {"ab", "3"},              /* a b */
        {"abab", "3 3"},          /* a b twice */
        {"aaa", "9 1097"},        /* leftmost of equal ranks: aa a */
        {"aaaa", "9 9"},
        {"abcd", "5 1100"},       /* abc + d (d is byte 0x64) */
        {"cab", "1099 3"},
        {" a a", "11 11"},        /* " a" merges */
        {"x <s> y", "1120 1032 1060 1115 1062 1032 1121"}, /* <s> is plain text here */
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        ids.n = 0;
        mt_bpe_encode(c, cases[i].in, strlen(cases[i].in), &ids);
        if (strcmp(ids_str(&ids), cases[i].want))
            T_FAILF("\"%s\" -> %s, expected %s", cases[i].in, ids_str(&ids), cases[i].want);
    }
    /* special tokens: "<s>" and "<x y>" (its spelling is not byte symbols: its bytes are itself) */
    ids.n = 0;
    const char *s = "ab<s>ab<x y><s";
    mt_bpe_encode_special(c, s, strlen(s), &ids);
    T_EQ_STR(ids_str(&ids), "3 2 3 4 1060 1115");
    size_t n;
    const char *p = mt_bpe_token_bytes(b, 4, &n);
    T_CHECK(p && n == 5 && !memcmp(p, "<x y>", 5));
    T_CHECK(mt_bpe_token_bytes(b, 6, &n) == NULL); /* a gap in the ids */
    /* a long piece goes through the heap-based merge loop and must agree with the short one */
    char longs[301];
    for (int i = 0; i < 300; i++) longs[i] = "abc"[i % 3];
    longs[300] = 0;
    ids.n = 0;
    mt_bpe_encode(c, longs, 300, &ids);
    T_EQ_INT(ids.n, 100);
    int all5 = 1;
    for (size_t i = 0; i < ids.n; i++) all5 &= ids.p[i] == 5;
    T_CHECK(all5);
    memset(longs, 'a', 299);
    longs[299] = 0;
    ids.n = 0;
    mt_bpe_encode(c, longs, 299, &ids);
    T_EQ_INT(ids.n, 150);
    T_EQ_INT(ids.p[0], 9);
    T_EQ_INT(ids.p[149], 1097);
    mt_ids_free(&ids);
    mt_bpe_ctx_free(c);
    mt_bpe_free(b);
}

/* loading v/m must fail with a message containing want1 and want2 */
static void expect_load_error(const char *v, const char *m, const char *want1, const char *want2, int line)
{
    mt_bpe *b = NULL;
    mt_err e = {{0}};
    if (mt_bpe_load(&b, v, m, &e) == 0) {
        T_FAILF("line %d: load succeeded", line);
        mt_bpe_free(b);
        return;
    }
    if (!strstr(e.msg, want1) || !strstr(e.msg, want2))
        T_FAILF("line %d: message \"%.300s\" lacks \"%s\" / \"%s\"", line, e.msg, want1, want2);
}

TEST(load_errors)
{
    char *v = t_path("ev.json"), *m = t_path("em.txt"), *good = t_path("good.json");
    write_vocab(good, "{\"ab\": 3}", -1);
    write_file(m, "#version: 0.2\na b\n");
    write_file(v, "{\"a\": 1,\n \"b\": 2,\n \"c\": ");
    expect_load_error(v, m, "ev.json", "line 3", __LINE__); /* truncated JSON */
    write_file(v, "[1, 2]");
    expect_load_error(v, m, "ev.json", "object", __LINE__);
    write_file(v, "{\"a\": 1, \"b\": \"x\"}");
    expect_load_error(v, m, "ev.json", "\"b\"", __LINE__);
    write_file(v, "{\"a\": 1, \"b\": 1}");
    expect_load_error(v, m, "ev.json", "duplicate id 1", __LINE__);
    write_vocab(v, "{\"ab\": 3}", 'q');
    expect_load_error(v, m, "ev.json", "byte 0x71", __LINE__); /* missing byte symbol */
    expect_load_error(t_path("missing.json"), m, "missing.json", "No such file", __LINE__);

    write_file(m, "#version: 0.2\na b\nab\n");
    expect_load_error(good, m, "em.txt", "line 3", __LINE__); /* one part */
    write_file(m, "a b\na  b\n");
    expect_load_error(good, m, "em.txt", "line 2", __LINE__);
    write_file(m, "a b\n\n");
    expect_load_error(good, m, "em.txt", "line 2", __LINE__); /* empty line */
    write_file(m, "a b\nab zz\n");
    expect_load_error(good, m, "line 2", "\"zz\" is not in the vocabulary", __LINE__);
    write_file(m, "a b\nb a\n");
    expect_load_error(good, m, "line 2", "merge result \"ba\"", __LINE__);
    expect_load_error(good, t_path("missing.txt"), "missing.txt", "No such file", __LINE__);
    /* CRLF line ends and a missing final newline are accepted */
    write_file(m, "#version: 0.2\r\na b\r\na b");
    mt_bpe *b;
    mt_err e = {{0}};
    if (mt_bpe_load(&b, good, m, &e)) T_FAILF("CRLF merges: %.300s", e.msg);
    else mt_bpe_free(b);
}

/* Megatron's TikTokenizer: 256 bytes + "ab", "abc", "cd" (ranks 256..258) as its JSON and as tiktoken
 * lines; 5 special tokens before them, then <unk> <s> </s>; the ids and the same tables from both files. */
static void encode_str(const mt_bpe *b, const char *s, mt_ids *ids)
{
    mt_bpe_ctx *c = mt_bpe_ctx_new(b);
    ids->n = 0;
    mt_bpe_encode(c, s, strlen(s), ids);
    mt_bpe_ctx_free(c);
}

TEST(megatron_tiktoken)
{
    static const char *const merged[] = {"ab", "abc", "cd"};
    char *js = t_path("ranks.json"), *tk = t_path("ranks.tiktoken");
    FILE *fj = fopen(js, "w");
    fputs("[", fj);
    static const char b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    for (int i = 0; i < 259; i++) {
        unsigned char t[4] = {0};
        size_t n = i < 256 ? 1 : strlen(merged[i - 256]);
        if (i < 256) t[0] = (unsigned char)i;
        else memcpy(t, merged[i - 256], n);
        char enc[8] = {0};
        unsigned x = (unsigned)t[0] << 16 | (unsigned)t[1] << 8 | t[2];
        enc[0] = b64[x >> 18], enc[1] = b64[x >> 12 & 63], enc[2] = n > 1 ? b64[x >> 6 & 63] : '=';
        enc[3] = n > 2 ? b64[x & 63] : '=';
        fprintf(fj, "%s{\"rank\": %d, \"token_bytes\": \"%s\", \"token_str\": null}", i ? ", " : "", i, enc);
    }
    fputs("]", fj);
    fclose(fj);
    FILE *ft = fopen(tk, "w");   /* the same ranks as tiktoken lines, in reverse order */
    for (int i = 258; i >= 0; i--) {
        unsigned char t[4] = {0};
        size_t n = i < 256 ? 1 : strlen(merged[i - 256]);
        if (i < 256) t[0] = (unsigned char)i;
        else memcpy(t, merged[i - 256], n);
        unsigned x = (unsigned)t[0] << 16 | (unsigned)t[1] << 8 | t[2];
        fprintf(ft, "%c%c%c%c %d\n", b64[x >> 18], b64[x >> 12 & 63], n > 1 ? b64[x >> 6 & 63] : '=',
                n > 2 ? b64[x & 63] : '=', i);
    }
    fclose(ft);
    mt_tiktoken_opts o = {"v1", 5, NULL, 0, 5 + 259};
    mt_bpe *b[2] = {NULL, NULL};
    mt_err e = {{0}};
    for (int k = 0; k < 2; k++)
        if (mt_bpe_load_tiktoken_megatron(&b[k], k ? tk : js, &o, &e)) T_FAILF("load %s: %.300s", k ? tk : js, e.msg);
    if (!b[0] || !b[1]) goto out;
    mt_ids ids = {0};
    for (int k = 0; k < 2; k++) {
        T_EQ_INT(mt_bpe_id_limit(b[k]), 264);
        T_EQ_INT(mt_bpe_vocab_size(b[k]), 264);
        T_EQ_INT(mt_bpe_eod(b[k]), 2);
        T_EQ_INT(mt_bpe_lookup(b[k], "<unk>"), 0);
        T_EQ_INT(mt_bpe_lookup(b[k], "<SPECIAL_4>"), 4);
        encode_str(b[k], "abcd", &ids);   /* "abc" (rank 257) + "d" (byte 100): ids shifted by 5 */
        T_EQ_INT(ids.n, 2);
        if (ids.n == 2) {
            T_EQ_INT(ids.p[0], 5 + 257);
            T_EQ_INT(ids.p[1], 5 + 'd');
        }
        encode_str(b[k], "<s>", &ids);     /* special tokens are text */
        T_EQ_INT(ids.n, 3);
        if (ids.n) T_EQ_INT(ids.p[0], 5 + '<');
        uint32_t sp[] = {1, 5 + 258, 3};
        mt_buf out = {0};
        if (mt_bpe_decode(b[k], sp, 3, &out, &e)) T_FAILF("decode: %.300s", e.msg);
        else T_CHECK(out.n == 16 && !memcmp(out.p, "<s>cd<SPECIAL_3>", 16));
        mt_buf_free(&out);
    }
    /* a vocabulary of 3 ranks fewer: the last 3 ranks are cut */
    mt_bpe *c;
    o.vocab_size = 5 + 256;
    if (mt_bpe_load_tiktoken_megatron(&c, js, &o, &e)) T_FAILF("cut: %.300s", e.msg);
    else {
        encode_str(c, "abcd", &ids);
        T_EQ_INT(ids.n, 4);
        mt_bpe_free(c);
    }
    /* 0 special tokens: the ranks are the ids */
    mt_tiktoken_opts plain = {"v1", 0, NULL, 0, 0};
    if (mt_bpe_load_tiktoken_megatron(&c, js, &plain, &e)) T_FAILF("plain: %.300s", e.msg);
    else {
        encode_str(c, "abcd", &ids);
        T_CHECK(ids.n == 2 && ids.p[0] == 257 && ids.p[1] == 'd');
        T_EQ_INT(mt_bpe_eod(c), -1);
        mt_bpe_free(c);
    }
    /* too few ranks for the vocabulary: the message says which --vocab-size fits */
    o.vocab_size = 5 + 260;
    if (!mt_bpe_load_tiktoken_megatron(&c, tk, &o, &e)) {
        T_FAILF("a vocabulary beyond the ranks was accepted");
        mt_bpe_free(c);
    } else {
        T_CHECK(strstr(e.msg, "give --vocab-size 264") != NULL);
    }
    mt_ids_free(&ids);
out:
    mt_bpe_free(b[0]);
    mt_bpe_free(b[1]);
}

/* A tiktoken file of the 256 bytes (rank = byte value, in the file from 255 down) and the lines after. */
static void write_tiktoken(const char *path, const char *more)
{
    static const char b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    FILE *f = fopen(path, "wb");
    for (int c = 255; c >= 0; c--) fprintf(f, "%c%c== %d\n", b64[c >> 2], b64[(c & 3) << 4], c);
    fputs(more, f);
    fclose(f);
}

static const char *enc_tiktoken(mt_bpe *b, const char *s, size_t n)
{
    mt_bpe_ctx *c = mt_bpe_ctx_new(b);
    mt_ids v = {0};
    mt_bpe_encode(c, s, n, &v);
    const char *r = ids_str(&v);
    mt_ids_free(&v);
    mt_bpe_ctx_free(c);
    return r;
}

static void expect_tiktoken_error(const char *path, const char *want, int line)
{
    mt_bpe *b;
    mt_err e = {{0}};
    if (!mt_bpe_load_tiktoken(&b, path, "gpt2", &e)) {
        mt_bpe_free(b);
        T_FAILF("test_bpe.c:%d: loaded, expected an error with \"%s\"", line, want);
    } else if (!strstr(e.msg, want) || !strstr(e.msg, "t.tiktoken")) {
        T_FAILF("test_bpe.c:%d: error \"%.300s\" lacks \"%s\" or the file", line, e.msg, want);
    }
}

/* A tiktoken ranks file: padding and line ends as tiktoken writes and reads them, a pair ranked by the
 * token its bytes make (no pair table), in short pieces and in long ones (the heap-based loop), and the
 * lines refused, each naming the file and line. */
TEST(tiktoken_file)
{
    char *path = t_path("t.tiktoken");
    /* "bc" 256 < "ab" 257 < "abc" 258 < "aa" 259 < "aaaa" 260, lines out of rank order, CRLF, an empty
     * line, "+" before a rank (strtoul's, as before), no final newline */
    write_tiktoken(path, "YWFhYQ== 260\nYWI= 257\r\n\nYmM= +256\nYWE= 259\nYWJj 258");
    mt_bpe *b;
    mt_err e = {{0}};
    if (mt_bpe_load_tiktoken(&b, path, "gpt2", &e)) {
        T_FAILF("load: %.300s", e.msg);
        return;
    }
    T_EQ_INT(mt_bpe_vocab_size(b), 261);
    size_t len;
    const char *tb = mt_bpe_token_bytes(b, 260, &len);
    T_CHECK(tb && len == 4 && !memcmp(tb, "aaaa", 4));
    T_EQ_STR(enc_tiktoken(b, "abc", 3), "258");      /* whole piece */
    T_EQ_STR(enc_tiktoken(b, "abcd", 4), "258 100"); /* bc first, then a+bc */
    T_EQ_STR(enc_tiktoken(b, "xabc", 4), "120 258");
    T_EQ_STR(enc_tiktoken(b, "aaaaa", 5), "260 97");
    char as[200];
    memset(as, 'a', sizeof as);
    /* 63 a: 31 aa + a, then 15 aaaa + aa + a; 131 a (over 64 bytes: the heap) likewise 32 aaaa + aa + a */
    for (size_t n = 63; n <= 131; n += 68) {
        char want[400] = "";
        for (size_t k = 0; k < n / 4; k++) strcat(want, "260 ");
        strcat(want, "259 97");
        T_EQ_STR(enc_tiktoken(b, as, n), want);
    }
    /* the long loop's last pairs: 65 a then "bcbc": bc twice, a+bc (258 < 259), then the 64 a */
    memcpy(as + 65, "bcbc", 4);
    T_EQ_STR(enc_tiktoken(b, as, 69), "260 260 260 260 260 260 260 260 260 260 260 260 260 260 260 260 258 256");
    mt_bpe_free(b);

    write_tiktoken(path, "YWI 300\n");
    expect_tiktoken_error(path, "line 257: bad base64", __LINE__);
    write_tiktoken(path, "YW=I 300\n");
    expect_tiktoken_error(path, "line 257: bad base64", __LINE__);
    write_tiktoken(path, "Y=== 300\n");
    expect_tiktoken_error(path, "line 257: bad base64", __LINE__);
    write_tiktoken(path, "YW\x01= 300\n");
    expect_tiktoken_error(path, "line 257: bad base64", __LINE__);
    write_tiktoken(path, "\nYWI= 300x\n");
    expect_tiktoken_error(path, "line 258: expected", __LINE__);
    write_tiktoken(path, "YWI= 268435456\n");
    expect_tiktoken_error(path, "line 257: expected", __LINE__);
    write_tiktoken(path, "YWI= 100000000\n");
    expect_tiktoken_error(path, "line 257: rank 100000000 is far beyond the file's 258 lines", __LINE__);
    write_tiktoken(path, "YWI= 1540\n");
    expect_tiktoken_error(path, "line 257: rank 1540 is far beyond", __LINE__);
    write_tiktoken(path, "YWI= 99999999999999999999999\n");
    expect_tiktoken_error(path, "line 257: expected", __LINE__);
    write_tiktoken(path, "YWI=\n");
    expect_tiktoken_error(path, "line 257: expected", __LINE__);
    write_tiktoken(path, "YWI= \n");
    expect_tiktoken_error(path, "line 257: expected", __LINE__);
    write_tiktoken(path, "YWI= 97\n");
    expect_tiktoken_error(path, "line 257: rank 97 given twice (line 159 has it too)", __LINE__);
    /* a token listed twice: tiktoken keeps the later rank (258, leaving 256 unused), mt refuses it */
    write_tiktoken(path, "YWI= 256\nYmM= 257\nYWI= 258\n");
    expect_tiktoken_error(path, "line 259: the token of line 257 again (rank 256 there, 258 here)", __LINE__);
    write_tiktoken(path, "YWI= 256\nYWI= 256\n");
    expect_tiktoken_error(path, "line 258: the token of line 257 again", __LINE__);
    write_tiktoken(path, "YQ== 256\n");
    expect_tiktoken_error(path, "line 257: the token of line 159 again (rank 97 there, 256 here)", __LINE__);
    write_file(path, "\x1f\x8b\x08");
    expect_tiktoken_error(path, "gunzip", __LINE__);
    write_file(path, "YQ== 0\n");
    expect_tiktoken_error(path, "single byte 0x00", __LINE__);
    write_file(path, "");
    expect_tiktoken_error(path, "no tokens", __LINE__);
}

/* A tokenizer.json of the 256 byte symbols (id = byte value), "ab" 256 and "bc" 257 by the merges "a b" and
 * "b c", GPT-2's ByteLevel pre-tokenizer, extra vocab entries (a JSON object, or NULL), the added tokens
 * (a JSON list of [id, content, normalized, special]) and, with nfc, the NFC normalizer. */
static void write_tokenizer_json(const char *path, const char *extra, const char *added, int nfc)
{
    json_t *vocab = json_object(), *list = json_array(), *a = json_loads(added, 0, NULL);
    unsigned next = 0x100;
    for (int c = 0; c < 256; c++) {
        int printable = (c >= 0x21 && c <= 0x7E) || (c >= 0xA1 && c <= 0xAC) || (c >= 0xAE);
        unsigned cp = printable ? (unsigned)c : next++;
        char u[3] = {0};
        if (cp < 0x80) u[0] = (char)cp;
        else u[0] = (char)(0xC0 | cp >> 6), u[1] = (char)(0x80 | (cp & 0x3F));
        json_object_set_new(vocab, u, json_integer(c));
    }
    json_object_set_new(vocab, "ab", json_integer(256));
    json_object_set_new(vocab, "bc", json_integer(257));
    if (extra) {
        json_t *x = json_loads(extra, 0, NULL);
        json_object_update(vocab, x);
        json_decref(x);
    }
    size_t i;
    json_t *t;
    json_array_foreach(a, i, t)
        json_array_append_new(list, json_pack("{s:O, s:O, s:b, s:b, s:b, s:O, s:O}", "id", json_array_get(t, 0),
                                              "content", json_array_get(t, 1), "single_word", 0, "lstrip", 0,
                                              "rstrip", 0, "normalized", json_array_get(t, 2), "special",
                                              json_array_get(t, 3)));
    json_t *root = json_pack("{s:s, s:o, s:o, s:{s:s, s:b, s:b}, s:{s:s, s:o, s:[s, s], s:b}}", "version", "1.0",
                             "added_tokens", list, "normalizer", nfc ? json_pack("{s:s}", "type", "NFC") : json_null(),
                             "pre_tokenizer", "type", "ByteLevel", "add_prefix_space", 0, "use_regex", 1, "model",
                             "type", "BPE", "vocab", vocab, "merges", "a b", "b c", "ignore_merges", 0);
    json_dump_file(root, path, 0);
    json_decref(root);
    json_decref(a);
}

/* ids of s by tokenizer.json's own encoding (added tokens, normalizer, post-processor) */
static const char *enc_hf(mt_bpe *b, const char *s)
{
    mt_bpe_ctx *c = mt_bpe_ctx_new(b);
    mt_ids v = {0};
    mt_bpe_encode_full(c, s, strlen(s), &v);
    const char *r = ids_str(&v);
    mt_ids_free(&v);
    mt_bpe_ctx_free(c);
    return r;
}

/* Loads path as a tokenizer.json, failing the case with the message when it does not load. */
static mt_bpe *load_hf(const char *path, int line)
{
    mt_bpe *b;
    mt_err e = {{0}};
    if (mt_bpe_load_hf(&b, path, &e)) {
        T_FAILF("test_bpe.c:%d: load: %.300s", line, e.msg);
        return NULL;
    }
    return b;
}

static void expect_hf_error(const char *path, const char *want, int line)
{
    mt_bpe *b;
    mt_err e = {{0}};
    if (!mt_bpe_load_hf(&b, path, &e)) {
        mt_bpe_free(b);
        T_FAILF("test_bpe.c:%d: loaded, expected an error with \"%s\"", line, want);
    } else if (!strstr(e.msg, want) || !strstr(e.msg, "tok.json")) {
        T_FAILF("test_bpe.c:%d: error \"%.300s\" lacks \"%s\" or the file", line, e.msg, want);
    }
}

/* The ids of added tokens as HF tokenizers gives them (the ids written in the file are not read back):
 * a token in the vocabulary keeps its vocab id, the others follow the vocabulary's entries in the order of
 * the list, a token listed again is the same token; its content is matched as text. The expected ids are
 * tokenizers 0.23's for the same files (tests/oracle/tok-id-rules.py checks them against it). */
TEST(hf_added_ids)
{
    char *p = t_path("tok.json");
    mt_bpe *b;
    size_t len;
    /* an id leaving a gap: the next free id, 258 */
    write_tokenizer_json(p, NULL, "[[300, \"<x>\", false, true]]", 0);
    if ((b = load_hf(p, __LINE__))) {
        T_EQ_STR(enc_hf(b, "a<x>b"), "97 258 98");
        const char *tb = mt_bpe_token_bytes(b, 258, &len);
        T_CHECK(tb && len == 3 && !memcmp(tb, "<x>", 3));
        T_CHECK(!mt_bpe_token_bytes(b, 300, &len));
        T_EQ_INT(mt_bpe_id_limit(b), 259);
        mt_bpe_free(b);
    }
    /* in the order of the list, not of the ids written */
    write_tokenizer_json(p, NULL, "[[259, \"<x>\", false, true], [258, \"<y>\", false, true]]", 0);
    if ((b = load_hf(p, __LINE__))) {
        T_EQ_STR(enc_hf(b, "<x><y>"), "258 259");
        mt_bpe_free(b);
    }
    /* a token listed again with the same flags: the same token, no id of its own */
    write_tokenizer_json(p, NULL, "[[258, \"<x>\", false, true], [259, \"<x>\", false, true], [260, \"<y>\", false, true]]", 0);
    if ((b = load_hf(p, __LINE__))) {
        T_EQ_STR(enc_hf(b, "<x><y>"), "258 259");
        mt_bpe_free(b);
    }
    /* a vocab entry: its vocab id, whatever the list says */
    write_tokenizer_json(p, NULL, "[[300, \"ab\", false, true]]", 0);
    if ((b = load_hf(p, __LINE__))) {
        T_EQ_STR(enc_hf(b, "xab"), "120 256");
        T_EQ_INT(mt_bpe_id_limit(b), 258);
        mt_bpe_free(b);
    }
    /* a vocab entry in byte symbols is matched as those characters ("Ġab"), not as the bytes " ab" */
    write_tokenizer_json(p, "{\"\\u0120ab\": 258}", "[[258, \"\\u0120ab\", false, true]]", 0);
    if ((b = load_hf(p, __LINE__))) {
        T_EQ_STR(enc_hf(b, "x ab \xc4\xa0" "ab"), "120 32 256 32 258");
        mt_bpe_free(b);
    }
    /* refused: the same token with other flags; an id HF would give that a vocab entry has (the vocab's
     * 258 entries leave 258 free, then "bc" has 259) */
    write_tokenizer_json(p, NULL, "[[258, \"<x>\", false, true], [258, \"<x>\", true, true]]", 0);
    expect_hf_error(p, "added_tokens[1]: \"<x>\" again (added_tokens[0]) with other", __LINE__);
    write_tokenizer_json(p, "{\"bc\": 259}", "[[258, \"<x>\", false, true], [259, \"<y>\", false, true]]", 0);
    expect_hf_error(p, "added_tokens[1]: HF tokenizers numbers \"<y>\" 259", __LINE__);
    write_tokenizer_json(p, NULL, "[[-1, \"<x>\", false, true]]", 0);
    expect_hf_error(p, "added_tokens[0]: needs a content string and an id", __LINE__);
}

/* Added tokens and the NFC normalizer, as HF tokenizers: those with normalized false are matched in the
 * raw text first, as written ("e" U+0301 only, not U+00E9); the text between them is normalized, then
 * those with normalized true are matched in it as their content normalized ("A" U+030A, NFC U+00C5, is
 * matched by either spelling). Ids from tokenizers 0.23. */
TEST(hf_added_nfc)
{
    char *p = t_path("tok.json");
    write_tokenizer_json(p, NULL, "[[258, \"A\\u030a\", true, false], [259, \"e\\u0301\", false, false]]", 1);
    mt_bpe *b = load_hf(p, __LINE__);
    if (!b) return;
    T_EQ_STR(enc_hf(b, "\xc3\x85"), "258");          /* U+00C5 */
    T_EQ_STR(enc_hf(b, "A\xcc\x8a"), "258");         /* A U+030A */
    T_EQ_STR(enc_hf(b, "e\xcc\x81"), "259");         /* e U+0301 */
    T_EQ_STR(enc_hf(b, "\xc3\xa9"), "195 169");      /* U+00E9: not the raw token, its bytes */
    T_EQ_STR(enc_hf(b, "xe\xcc\x81y"), "120 259 121");
    T_EQ_STR(enc_hf(b, "e\xcc\x81" "A\xcc\x8a\xc3\xa9"), "259 258 195 169");
    mt_bpe_free(b);
}

TEST(adversarial_long_pieces)
{
    NEED_GPT2();
    size_t n = 1 << 20;
    char *s = malloc(n + 1);
    memset(s, 'a', n);
    T_CHECK(round_trips(s, n));
    /* base64 of pseudo-random bytes: long pieces of letters, digits and +/ */
    static const char b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    uint64_t x = 88172645463325252ull;
    for (size_t i = 0; i < n; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        s[i] = b64[x % 64];
    }
    T_CHECK(round_trips(s, n));
    /* one piece of 1 MB of a single non-ASCII letter */
    for (size_t i = 0; i + 1 < n; i += 2) s[i] = (char)0xc3, s[i + 1] = (char)0xa9;
    T_CHECK(round_trips(s, n));
    /* invalid UTF-8 still encodes (byte by byte where needed) and round-trips */
    for (size_t i = 0; i < n; i++) s[i] = (char)(x = x * 6364136223846793005ull + 1442695040888963407ull, x >> 56);
    T_CHECK(round_trips(s, n));
    free(s);
}

/* tests/golden/gpt2.jsonl: {"text": ..., "ids": [...]} per line, made by tests/golden/make-golden.py */
TEST(golden_ids)
{
    NEED_GPT2();
    char path[1200];
    snprintf(path, sizeof path, "%s/tests/golden/gpt2.jsonl", top);
    FILE *f = fopen(path, "r");
    if (!f) {
        T_FAILF("cannot open %.300s", path);
        return;
    }
    char *line = NULL;
    size_t cap = 0, lineno = 0, checked = 0;
    mt_ids v = {0};
    while (getline(&line, &cap, f) > 0) {
        lineno++;
        json_error_t je;
        json_t *o = json_loads(line, JSON_ALLOW_NUL, &je);
        json_t *t = json_object_get(o, "text"), *ids = json_object_get(o, "ids");
        if (!json_is_string(t) || !json_is_array(ids)) {
            T_FAILF("%.300s: line %zu: bad golden line", path, lineno);
            json_decref(o);
            break;
        }
        v.n = 0;
        mt_bpe_encode(ctx, json_string_value(t), json_string_length(t), &v);
        int same = v.n == json_array_size(ids);
        for (size_t i = 0; same && i < v.n; i++) same = v.p[i] == json_integer_value(json_array_get(ids, i));
        if (!same) T_FAILF("golden line %zu: got %.300s", lineno, ids_str(&v));
        checked++;
        json_decref(o);
    }
    free(line);
    fclose(f);
    mt_ids_free(&v);
    T_CHECK(checked >= 50);
}

/* --pretok-lines PATTERN: JSON string per input line -> the byte lengths of its pieces per output line */
static int pretok_lines(int argc, char **argv)
{
    int p = argc == 3 ? mt_pattern_from_name(argv[2]) : -1;
    if (p < 0) {
        fprintf(stderr, "usage: test_bpe --pretok-lines PATTERN < lines\n");
        return 2;
    }
    char *line = NULL;
    size_t cap = 0;
    while (getline(&line, &cap, stdin) > 0) {
        json_t *s = json_loads(line, JSON_DECODE_ANY | JSON_ALLOW_NUL, NULL);
        const char *t = json_string_value(s);
        size_t len = json_string_length(s), pos = 0;
        while (t && pos < len) {
            size_t end = mt_pretok_next_pat((mt_pattern)p, t, len, pos);
            printf(pos ? " %zu" : "%zu", end - pos);
            pos = end;
        }
        putchar('\n');
        json_decref(s);
    }
    free(line);
    return 0;
}

/* --encode-lines [--special] VOCAB MERGES: JSON string per input line -> ids per output line */
static int encode_lines(int argc, char **argv)
{
    int special = argc > 2 && !strcmp(argv[2], "--special");
    if (argc != 4 + special) {
        fprintf(stderr, "usage: test_bpe --encode-lines [--special] VOCAB MERGES < lines\n");
        return 2;
    }
    mt_bpe *b;
    mt_err e;
    int rc0 = !strcmp(argv[2 + special], "hf")         ? mt_bpe_load_hf(&b, argv[3 + special], &e)
              : !strncmp(argv[2 + special], "tiktoken", 8) ? mt_bpe_load_tiktoken(&b, argv[3 + special],
                                                                 argv[2 + special][8] ? argv[2 + special] + 9 : NULL, &e)
                                                         : mt_bpe_load(&b, argv[2 + special], argv[3 + special], &e);
    if (rc0) {
        fprintf(stderr, "test_bpe: %s\n", e.msg);
        return 1;
    }
    mt_bpe_ctx *c = mt_bpe_ctx_new(b);
    mt_ids v = {0};
    char *line = NULL;
    size_t cap = 0, lineno = 0;
    int rc = 0;
    while (getline(&line, &cap, stdin) > 0) {
        lineno++;
        json_error_t je;
        json_t *s = json_loads(line, JSON_DECODE_ANY | JSON_ALLOW_NUL, &je);
        if (!json_is_string(s)) {
            fprintf(stderr, "test_bpe: stdin: line %zu: not a JSON string: %s\n", lineno, je.text);
            rc = 1;
            json_decref(s);
            break;
        }
        v.n = 0;
        if (special && !strcmp(argv[3], "hf")) mt_bpe_encode_full(c, json_string_value(s), json_string_length(s), &v);
        else if (special) mt_bpe_encode_special(c, json_string_value(s), json_string_length(s), &v);
        else mt_bpe_encode(c, json_string_value(s), json_string_length(s), &v);
        for (size_t i = 0; i < v.n; i++) printf(i ? " %u" : "%u", v.p[i]);
        putchar('\n');
        json_decref(s);
    }
    free(line);
    mt_ids_free(&v);
    mt_bpe_ctx_free(c);
    mt_bpe_free(b);
    return rc;
}

int main(int argc, char **argv)
{
    if (argc > 1 && !strcmp(argv[1], "--encode-lines")) return encode_lines(argc, argv);
    if (argc > 1 && !strcmp(argv[1], "--pretok-lines")) return pretok_lines(argc, argv);
    t_bin = "test_bpe";
    const char *t = getenv("MT_TOP");
    if (t && *t) snprintf(top, sizeof top, "%s", t);
    tmpdir = t_tmpdir();
    RUN(gpt2_loads);
    RUN(whitespace_runs);
    RUN(contractions);
    RUN(unicode_spaces_and_numbers);
    RUN(special_tokens);
    RUN(round_trip);
    RUN(utf8_repair);
    RUN(custom_vocab);
    RUN(load_errors);
    RUN(megatron_tiktoken);
    RUN(tiktoken_file);
    RUN(hf_added_ids);
    RUN(hf_added_nfc);
    RUN(adversarial_long_pieces);
    RUN(golden_ids);
    t_tmpdir_remove();
    mt_bpe_ctx_free(ctx);
    mt_bpe_free(gpt2);
    return t_total_failed ? 1 : 0;
}
