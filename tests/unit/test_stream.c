/* test_stream.c: token stream round trip and truncation, JSON-lines extraction, the ordered pool. */
#include <jansson.h>
#include <stdint.h>
#include <unistd.h>

#include "data/tokstream.h"
#include "io/jsonl.h"
#include "t.h"
#include "util/ordered.h"

static const char *tmpdir;

static void write_file(const char *path, const void *p, size_t n)
{
    FILE *f = fopen(path, "wb");
    fwrite(p, 1, n, f);
    fclose(f);
}

static void make_stream(mt_buf *b, uint32_t vocab, int ndocs)
{
    mt_toks_header h = {.version = 1, .token_bytes = mt_toks_token_bytes(vocab), .vocab_size = vocab, .eod = 7,
                        .flags = 1, .n_keys = 2, .keys = {"text", "title"}};
    mt_toks_put_header(b, &h);
    uint64_t toks = 0;
    for (int d = 0; d < ndocs; d++) {
        uint32_t ids[40];
        int n = (d * 7) % 40;
        for (int i = 0; i < n; i++) ids[i] = (uint32_t)((d * 131 + i * 977) % vocab);
        mt_toks_put_doc(b, &h, (uint32_t)(d % 2), ids, (size_t)n);
        toks += (uint64_t)n;
    }
    mt_toks_put_trailer(b, (uint64_t)ndocs, toks);
}

/* Reads a whole stream; returns docs read, or -1 with e set. */
static long read_stream(const char *path, mt_err *e, uint64_t *checksum)
{
    mt_reader *r;
    if (mt_reader_open(&r, path, e)) return -1;
    mt_toks_header h;
    if (mt_toks_read_header(r, &h, e)) {
        mt_reader_close(r);
        return -1;
    }
    mt_toks_state st = {0};
    mt_ids ids = {0};
    uint32_t key;
    int rc;
    long docs = 0;
    *checksum = 0;
    while ((rc = mt_toks_next(r, &h, &st, &key, &ids, e)) == 1) {
        docs++;
        for (size_t i = 0; i < ids.n; i++) *checksum = *checksum * 31 + ids.p[i] + key;
    }
    mt_ids_free(&ids);
    mt_toks_header_free(&h);
    mt_reader_close(r);
    return rc < 0 ? -1 : docs;
}

TEST(tokstream_round_trip_and_widths)
{
    char p[300];
    snprintf(p, sizeof p, "%s/s.toks", tmpdir);
    uint32_t vocabs[2] = {50257, 100000};
    for (int v = 0; v < 2; v++) {
        mt_buf b = {0};
        make_stream(&b, vocabs[v], 50);
        write_file(p, b.p, b.n);
        mt_err e;
        uint64_t sum;
        T_EQ_INT(read_stream(p, &e, &sum), 50);
        uint64_t want = 0;
        for (int d = 0; d < 50; d++)
            for (int i = 0; i < (d * 7) % 40; i++) want = want * 31 + (uint64_t)((d * 131 + i * 977) % vocabs[v]) + (uint64_t)(d % 2);
        T_EQ_INT(sum, want);
        mt_buf_free(&b);
    }
    T_EQ_INT(mt_toks_token_bytes(65499), 2);
    T_EQ_INT(mt_toks_token_bytes(65500), 4);
}

TEST(tokstream_every_truncation_is_an_error)
{
    char p[300];
    snprintf(p, sizeof p, "%s/t.toks", tmpdir);
    mt_buf b = {0};
    make_stream(&b, 50257, 6);
    for (size_t cut = 0; cut < b.n; cut++) {
        write_file(p, b.p, cut);
        mt_err e;
        uint64_t sum;
        if (read_stream(p, &e, &sum) != -1) T_FAILF("truncation at %zu not detected", cut);
        else if (cut > 40 && !strstr(e.msg, "truncated")) T_FAILF("cut %zu: message '%s'", cut, e.msg);
    }
    /* a flipped tag byte and a foreign file */
    mt_buf c = {0};
    mt_buf_append(&c, b.p, b.n);
    c.p[49] = 'X';
    write_file(p, c.p, c.n);
    mt_err e;
    uint64_t sum;
    T_EQ_INT(read_stream(p, &e, &sum), -1);
    T_CHECK(strstr(e.msg, "bad record tag") || strstr(e.msg, "key"));
    write_file(p, "{\"text\": \"hello\"}\n", 18);
    T_EQ_INT(read_stream(p, &e, &sum), -1);
    T_CHECK(strstr(e.msg, "not an mt token stream"));
    mt_buf_free(&b);
    mt_buf_free(&c);
}

TEST(jsonl_fields_and_errors)
{
    mt_jsonl st = {0};
    mt_jsonl_field f[2];
    const char *keys[] = {"text", "b"};
    mt_err e;
    const char *l1 = "{\"b\": \"x\\u0000y\", \"text\": \"caf\\u00e9 \\ud83d\\ude00\", \"n\": 1}";
    T_EQ_INT(mt_jsonl_extract(&st, l1, strlen(l1), keys, 2, f, &e), 0);
    T_EQ_INT(f[0].len, 10);
    T_CHECK(!memcmp(f[0].text, "caf\xc3\xa9 \xf0\x9f\x98\x80", 10));
    T_EQ_INT(f[1].len, 3);
    const char *l2 = "{\"text\": \"a\\udc00b\\ud800\", \"b\": \"\\\\ud800\"}";
    T_EQ_INT(mt_jsonl_extract(&st, l2, strlen(l2), keys, 2, f, &e), 0);
    T_EQ_INT(f[0].len, 8);
    T_CHECK(!memcmp(f[0].text, "a\xef\xbf\xbd" "b\xef\xbf\xbd", 8));
    T_EQ_INT(f[1].len, 6); /* an escaped backslash is not a surrogate escape */
    const char *l3 = "{\"text\": \"a\\udc00b\", \"b\": \"\"}"; /* a lone low surrogate alone */
    T_EQ_INT(mt_jsonl_extract(&st, l3, strlen(l3), keys, 2, f, &e), 0);
    T_CHECK(f[0].len == 5 && !memcmp(f[0].text, "a\xef\xbf\xbd" "b", 5));
    const char *bad[] = {"{\"text\": \"x\"", "[\"text\"]", "{\"b\": \"x\"}", "{\"text\": null, \"b\": \"\"}",
                         "{\"text\": \"\xff\", \"b\": \"\"}"};
    const char *want[] = {"malformed JSON", "expected a JSON object", "missing key 'text'", "is null", "malformed"};
    for (int i = 0; i < 5; i++) {
        T_EQ_INT(mt_jsonl_extract(&st, bad[i], strlen(bad[i]), keys, 2, f, &e), -1);
        if (!strstr(e.msg, want[i])) T_FAILF("case %d: '%s' lacks '%s'", i, e.msg, want[i]);
    }
    mt_buf q = {0};
    mt_json_quote(&q, "a\"\\\n\x01", 5);
    T_CHECK(q.n == 15 && !memcmp(q.p, "\"a\\\"\\\\\\n\\u0001\"", 15));
    mt_buf_free(&q);
    mt_jsonl_free(&st);
}

/* jsonl's own scanner against jansson: on each line jansson's verdict (an object whose "text" is a
 * string, with its bytes, or anything else) and mt_jsonl_extract's must agree. Lines: tricky ones by
 * hand, then seeded random records with escapes, UTF-8, numbers near the overflows, nesting, duplicate
 * keys, each also with a fragment put in at a random place. */
static unsigned long long jx = 88172645463325252ull;
static unsigned jrnd(unsigned n)
{
    jx ^= jx << 13, jx ^= jx >> 7, jx ^= jx << 17;
    return (unsigned)(jx % n);
}
static void jput(mt_buf *b, const char *s) { mt_buf_append(b, s, strlen(s)); }
static void jvalue(mt_buf *b, int depth)
{
    static const char *leaf[] = {"\"abc\"", "\"\\\"\\\\\\/\\b\\f\\n\\r\\t\"", "\"\\u00e9\\u20AC\\ud83d\\ude00\\u0000\"",
                                 "\"caf\xc3\xa9 \xf0\x9f\x98\x80\"", "0", "-12", "3.25e-7", "1E+99", "1e100", "123456789012345678",
                                 "1234567890123456789", "99999999999999999999", "-9223372036854775809", "1.5e308", "1e309",
                                 "0.000000000000000000001", "true", "false", "null", "\"\""};
    unsigned t = jrnd(depth > 3 ? 2 : 4);
    if (t == 2 || t == 3) {
        jput(b, t == 2 ? "[" : "{");
        for (int i = 0, k = (int)jrnd(4); i < k; i++) {
            if (i) jput(b, jrnd(2) ? "," : " ,\t");
            if (t == 3) jput(b, jrnd(2) ? "\"text\": " : "\"k\":");
            jvalue(b, depth + 1);
        }
        jput(b, t == 2 ? "]" : "}");
    } else {
        jput(b, leaf[jrnd(sizeof leaf / sizeof *leaf)]);
    }
}

static void jsonl_agrees(const char *line, size_t len, int *fast_seen)
{
    static const char *const keys[] = {"text"};
    mt_jsonl st = {0};
    mt_jsonl_field f;
    mt_err e;
    int rc = mt_jsonl_extract(&st, line, len, keys, 1, &f, &e);
    if (!rc && !st.doc) (*fast_seen)++;
    json_error_t je;
    json_t *j = json_loadb(line, len, JSON_ALLOW_NUL, &je), *v = json_is_object(j) ? json_object_get(j, "text") : NULL;
    if (!j && strstr(je.text, "invalid Unicode")) { /* lone surrogates: the repair's (jsonl_fields_and_errors) */
        mt_jsonl_free(&st);
        return;
    }
    if (json_is_string(v) ? rc || f.len != json_string_length(v) || memcmp(f.text, json_string_value(v), f.len) ||
                                f.text[f.len]
                          : !rc)
        T_FAILF("jansson and mt_jsonl_extract (%d) differ on [%.300s]", rc, line);
    json_decref(j);
    mt_jsonl_free(&st);
}

TEST(jsonl_scanner_agrees_with_jansson)
{
    static const char *hand[] = {
        "{\"text\": \"a\"}", " {\"text\":\"a\"} \r", "{\"text\": \"a\", \"text\": \"b\"}", "{\"text\": \"a\", \"text\": 1}",
        "{\"text\": 1, \"text\": \"b\"}", "{\"te\\u0078t\": \"a\"}", "{\"text\": \"a\"} x", "{\"text\": \"a\",}",
        "{\"text\": \"\x01\"}", "{\"text\": \"\xc0\xaf\"}", "{\"text\": \"\xed\xa0\x80\"}", "{\"text\": \"\xf4\x90\x80\x80\"}",
        "{\"x\": \"\xe2\x82\"}", "{\"text\": \"\\x\"}", "{\"text\": \"\\u12\"}", "{\"text\": 01}", "{\"n\": 1.}",
        "{\"n\": .5, \"text\": \"\"}", "{\"n\": 1e, \"text\": \"\"}", "{\"n\": -, \"text\": \"\"}", "{\"n\": tru, \"text\": \"\"}",
        "{\"n\": truex, \"text\": \"\"}", "{\"n\": 1e999, \"text\": \"\"}", "{\"n\": 1e99, \"text\": \"\"}",
        "{\"n\": 9223372036854775808, \"text\": \"\"}", "{\"n\": -9223372036854775808, \"text\": \"\"}",
        "\xef\xbb\xbf{\"text\": \"a\"}", "{\"text\": \"a\"}\n", "{\"text\": \"a\" \"b\"}", "{\"text\" \"a\"}", "{text: \"a\"}",
        "{\"\": 1, \"text\": \"\\ud83d\\ude00\"}", "{\"text\": \"\\ud83d\\u0041\"}", "{\"text\": \"\\uDBFF\\uDFFF\"}",
        "{\"n\": [[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]], \"text\": \"\"}", "{}", "",
    };
    int fast_seen = 0;
    for (size_t i = 0; i < sizeof hand / sizeof *hand; i++) jsonl_agrees(hand[i], strlen(hand[i]), &fast_seen);
    static const char *frag[] = {"\"", "\\", "\\u", "\\ude00", "{", "}", "[", "]", ",", ":", " ", "\x01", "\x80", "\xc3",
                                 "\xed\xa0\x80", "0", "-", ".", "e", "+", "9", "true", "\"text\":", "\xe2\x82\xac"};
    mt_buf b = {0}, m = {0};
    for (int it = 0; it < 20000; it++) {
        b.n = 0;
        jput(&b, "{");
        for (int i = 0, k = 1 + (int)jrnd(4); i < k; i++) {
            if (i) jput(&b, ",");
            static const char *str[] = {"\"abc\"", "\"\\\"\\\\\\/\\b\\f\\n\\r\\t\"", "\"\\u00e9\\u20AC\\ud83d\\ude00\\u0000\"",
                                        "\"caf\xc3\xa9 \xf0\x9f\x98\x80\"", "\"\""};
            int text = (int)jrnd(2);
            jput(&b, text ? "\"text\": " : "\"k\": ");
            if (text && jrnd(4)) jput(&b, str[jrnd(5)]);
            else jvalue(&b, 1);
        }
        jput(&b, "}");
        jsonl_agrees(b.p, b.n, &fast_seen);
        size_t at = jrnd((unsigned)b.n + 1);
        const char *fr = frag[jrnd(sizeof frag / sizeof *frag)];
        m.n = 0;
        mt_buf_append(&m, b.p, at);
        jput(&m, fr);
        mt_buf_append(&m, b.p + at, b.n - at);
        jsonl_agrees(m.p, m.n, &fast_seen);
    }
    T_CHECK(fast_seen > 5000); /* the scanner itself was tested, not only jansson behind it */
    mt_buf_free(&b);
    mt_buf_free(&m);
}

typedef struct {
    int value, result;
} job;

static int emitted[1000], n_emitted, fail_at = -1;

static void square(void *ws, void *item)
{
    (void)ws;
    job *j = item;
    if (j->value % 7 == 0) usleep(200); /* out-of-order completion */
    j->result = j->value * j->value;
}

static int collect(void *user, void *item)
{
    (void)user;
    job *j = item;
    if (j->value == fail_at) return -1;
    emitted[n_emitted++] = j->result;
    return 0;
}

TEST(ordered_pool_keeps_order)
{
    job jobs[6];
    void *items[6];
    for (int i = 0; i < 6; i++) items[i] = &jobs[i];
    for (int workers = 1; workers <= 4; workers += 3) {
        n_emitted = 0;
        fail_at = -1;
        mt_ordered *o = mt_ordered_new(workers, NULL, items, 6, square, collect, NULL);
        for (int v = 0; v < 1000; v++) {
            job *j = mt_ordered_acquire(o);
            j->value = v;
            mt_ordered_submit(o, j);
        }
        T_EQ_INT(mt_ordered_finish(o), 0);
        T_EQ_INT(n_emitted, 1000);
        for (int v = 0; v < 1000; v++)
            if (emitted[v] != v * v) {
                T_FAILF("workers %d: item %d out of order", workers, v);
                break;
            }
    }
    /* an emit failure stops the pool: acquire returns NULL, finish reports it */
    n_emitted = 0;
    fail_at = 50;
    mt_ordered *o = mt_ordered_new(2, NULL, items, 6, square, collect, NULL);
    int v = 0;
    for (; v < 1000; v++) {
        job *j = mt_ordered_acquire(o);
        if (!j) break;
        j->value = v;
        mt_ordered_submit(o, j);
    }
    T_EQ_INT(mt_ordered_finish(o), -1);
    T_EQ_INT(n_emitted, 50);
    T_CHECK(v < 1000);
}

T_MAIN_BEGIN("test_stream")
    tmpdir = t_tmpdir();
    RUN(tokstream_round_trip_and_widths);
    RUN(tokstream_every_truncation_is_an_error);
    RUN(jsonl_fields_and_errors);
    RUN(jsonl_scanner_agrees_with_jansson);
    RUN(ordered_pool_keeps_order);
    t_tmpdir_remove();
T_MAIN_END
