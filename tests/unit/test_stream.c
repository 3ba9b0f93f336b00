/* test_stream.c: token stream round trip and truncation, JSON-lines extraction, the ordered pool. */
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
    RUN(ordered_pool_keeps_order);
    t_tmpdir_remove();
T_MAIN_END
