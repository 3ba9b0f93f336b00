/* test_safetensors.c: safetensors writer/reader round trips, the writer's exact bytes, and the reader's
 * strict validation of damaged files, the writer in bounded pieces and the reader of ranges (pread). Also two modes for tests/pipeline/safetensors-numpy.sh:
 *   test_safetensors --write FILE   writes a fixed set of tensors (values from a 64-bit LCG)
 *   test_safetensors --read FILE    prints every metadata entry and tensor with its values
 */
#include <inttypes.h>
#include <stdint.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io/safetensors.h"
#include "mt_base.h"
#include "t.h"

static void write_raw(const char *path, const void *p, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (!f) {
        perror(path);
        exit(1);
    }
    if (n) fwrite(p, 1, n, f);
    fclose(f);
}

/* A file with header length hlen (as stored), header text hdr and ndata data bytes (0, 1, 2, ...). */
static void make_file(const char *path, uint64_t hlen, const char *hdr, size_t ndata)
{
    size_t hl = strlen(hdr), n = 8 + hl + ndata;
    unsigned char *b = malloc(n);
    for (int i = 0; i < 8; i++) b[i] = (unsigned char)(hlen >> (8 * i));
    memcpy(b + 8, hdr, hl);
    for (size_t i = 0; i < ndata; i++) b[8 + hl + i] = (unsigned char)i;
    write_raw(path, b, n);
    free(b);
}

/* Opening a file with this header must fail with a message containing want (and naming the file). */
static void expect_bad(const char *hdr, size_t ndata, const char *want, int line)
{
    const char *p = t_path("bad.safetensors");
    make_file(p, strlen(hdr), hdr, ndata);
    mt_st_file f;
    mt_err e = {{0}};
    int rc = mt_st_open(&f, p, &e);
    if (rc == 0) {
        mt_st_close(&f);
        T_FAILF("line %d: opened a bad file: %s", line, hdr);
    } else if (!strstr(e.msg, want) || strncmp(e.msg, p, strlen(p))) {
        T_FAILF("line %d: error \"%s\" does not name the file or lacks \"%s\"", line, e.msg, want);
    }
}
#define BAD(hdr, ndata, want) expect_bad(hdr, ndata, want, __LINE__)

static uint64_t lcg(uint64_t *s)
{
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return *s;
}

/* The fixed tensors of --write: name, dtype, shape; values from lcg seeded with index + 1. */
#define NFIXED 7
static const struct {
    const char *name;
    mt_st_dtype dtype;
    int ndim;
    int64_t shape[4];
} fixed[NFIXED] = {
    {"language_model.embedding.word_embeddings.weight", MT_ST_F32, 2, {7, 5}},
    {"scalar", MT_ST_F32, 0, {0}},
    {"empty", MT_ST_F32, 2, {0, 3}},
    {"ids", MT_ST_I64, 1, {4}},
    {"counts", MT_ST_I32, 2, {2, 3}},
    {"bytes", MT_ST_U8, 1, {9}},
    {"big", MT_ST_F32, 4, {3, 4, 5, 2}},
};

/* Fills t[] and returns the allocated buffers in bufs[]. */
static void fixed_tensors(mt_st_tensor *t, void **bufs)
{
    for (int i = 0; i < NFIXED; i++) {
        memset(&t[i], 0, sizeof t[i]);
        t[i].name = fixed[i].name;
        t[i].dtype = fixed[i].dtype;
        t[i].ndim = fixed[i].ndim;
        int64_t n = 1;
        for (int d = 0; d < fixed[i].ndim; d++) n *= t[i].shape[d] = fixed[i].shape[d];
        int sz = mt_st_dtype_bits(t[i].dtype) / 8;
        unsigned char *b = calloc((size_t)(n ? n : 1), (size_t)sz);
        uint64_t s = (uint64_t)i + 1;
        for (int64_t k = 0; k < n; k++) {
            uint64_t x = lcg(&s);
            if (t[i].dtype == MT_ST_F32) {
                float v = (float)((int64_t)(x >> 40) - (1 << 23)) / 4096.0f;
                memcpy(b + 4 * k, &v, 4);
            } else if (t[i].dtype == MT_ST_I64) {
                memcpy(b + 8 * k, &x, 8);
            } else if (t[i].dtype == MT_ST_I32) {
                uint32_t v = (uint32_t)(x >> 32);
                memcpy(b + 4 * k, &v, 4);
            } else {
                b[k] = (unsigned char)(x >> 56);
            }
        }
        t[i].data = bufs[i] = b;
    }
}

static const mt_st_kv fixed_meta[] = {{"format", "pt"}, {"note", "\xc3\xbc" "n\xc3\xaf" "code \xe2\x9c\x93 \"q\""}};

static int write_main(const char *path)
{
    mt_st_tensor t[NFIXED];
    void *bufs[NFIXED];
    fixed_tensors(t, bufs);
    mt_err e;
    int rc = mt_st_write(path, t, NFIXED, fixed_meta, 2, &e);
    if (rc) fprintf(stderr, "%s\n", e.msg);
    for (int i = 0; i < NFIXED; i++) free(bufs[i]);
    return rc ? 1 : 0;
}

static int read_main(const char *path)
{
    mt_st_file f;
    mt_err e;
    if (mt_st_open(&f, path, &e)) {
        fprintf(stderr, "%s\n", e.msg);
        return 1;
    }
    if (f.meta) {
        const char *k;
        json_t *v;
        json_object_foreach(f.meta, k, v) printf("meta %s=%s\n", k, json_string_value(v));
    }
    for (int i = 0; i < f.n; i++) {
        const mt_st_info *x = &f.t[i];
        char sb[256];
        printf("tensor %s %s %s", x->name, mt_st_dtype_name(x->dtype), mt_st_shape_str(sb, sizeof sb, x->ndim, x->shape));
        const unsigned char *p = x->data;
        for (int64_t k = 0; k < x->numel; k++) {
            if (x->dtype == MT_ST_F32) {
                float v;
                memcpy(&v, p + 4 * k, 4);
                printf(" %.9g", v);
            } else if (x->dtype == MT_ST_F64) {
                double v;
                memcpy(&v, p + 8 * k, 8);
                printf(" %.17g", v);
            } else if (x->dtype == MT_ST_I64) {
                int64_t v;
                memcpy(&v, p + 8 * k, 8);
                printf(" %" PRId64, v);
            } else if (x->dtype == MT_ST_I32) {
                int32_t v;
                memcpy(&v, p + 4 * k, 4);
                printf(" %" PRId32, v);
            } else if (x->dtype == MT_ST_U8) {
                printf(" %u", p[k]);
            } else {
                printf(" ?");
            }
        }
        printf("\n");
    }
    mt_st_close(&f);
    return 0;
}

static unsigned char *slurp(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long sz = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc((size_t)sz + 1);
    *n = fread(b, 1, (size_t)sz, f);
    fclose(f);
    return b;
}

TEST(roundtrip)
{
    mt_st_tensor t[NFIXED];
    void *bufs[NFIXED];
    fixed_tensors(t, bufs);
    const char *p = t_path("rt.safetensors");
    mt_err e = {{0}};
    T_EQ_INT(mt_st_write(p, t, NFIXED, fixed_meta, 2, &e), 0);
    mt_st_file f;
    if (mt_st_open(&f, p, &e)) {
        T_FAILF("open: %s", e.msg);
        return;
    }
    T_EQ_INT(f.n, NFIXED);
    T_EQ_INT(f.header_len % 8, 0);
    T_EQ_STR(mt_st_meta(&f, "format"), "pt");
    T_EQ_STR(mt_st_meta(&f, "note"), fixed_meta[1].value);
    T_CHECK(mt_st_meta(&f, "nope") == NULL);
    T_CHECK(mt_st_find(&f, "nope") == NULL);
    T_CHECK(mt_st_find(&f, "") == NULL);
    for (int i = 0; i < NFIXED; i++) {
        const mt_st_info *x = mt_st_find(&f, t[i].name);
        if (!x) {
            T_FAILF("tensor %s not found", t[i].name);
            continue;
        }
        T_EQ_STR(x->name, t[i].name);
        T_EQ_INT(x->dtype, t[i].dtype);
        T_EQ_INT(x->ndim, t[i].ndim);
        int64_t n = 1;
        for (int d = 0; d < x->ndim; d++) {
            T_EQ_INT(x->shape[d], t[i].shape[d]);
            n *= t[i].shape[d];
        }
        T_EQ_INT(x->numel, n);
        T_EQ_INT(x->nbytes, n * mt_st_dtype_bits(x->dtype) / 8);
        if (n) T_CHECK(x->data && !memcmp(x->data, t[i].data, x->nbytes));
        else T_CHECK(x->data == NULL);
    }
    /* The layout: I64 first, then F32 by name, I32, U8; data back to back from 0. */
    const char *want[] = {"ids", "big", "empty", "language_model.embedding.word_embeddings.weight", "scalar", "counts",
                          "bytes"};
    size_t at = 0;
    for (int i = 0; i < NFIXED; i++) {
        const mt_st_info *x = mt_st_find(&f, want[i]);
        T_CHECK(x && x->begin == at);
        if (x) at += x->nbytes;
    }
    T_EQ_INT(f.map.size, 8 + f.header_len + at);
    mt_st_close(&f);
    for (int i = 0; i < NFIXED; i++) free(bufs[i]);
}

TEST(writer_exact_bytes)
{
    float a[2] = {1.0f, -2.5f};
    int64_t b[1] = {7};
    mt_st_tensor t[2] = {{.name = "a", .dtype = MT_ST_F32, .ndim = 1, .shape = {2}, .data = a},
                         {.name = "b", .dtype = MT_ST_I64, .ndim = 2, .shape = {1, 1}, .data = b}};
    mt_st_kv m[1] = {{"format", "pt"}};
    const char *p = t_path("exact.safetensors");
    mt_err e;
    T_EQ_INT(mt_st_write(p, t, 2, m, 1, &e), 0);
    const char *hdr = "{\"__metadata__\":{\"format\":\"pt\"},\"b\":{\"dtype\":\"I64\",\"shape\":[1,1],\"data_offsets\":[0,8]},"
                      "\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]}}";
    size_t hl = strlen(hdr), padded = (hl + 7) / 8 * 8;
    unsigned char want[512];
    memset(want, ' ', sizeof want);
    for (int i = 0; i < 8; i++) want[i] = (unsigned char)(padded >> (8 * i));
    memcpy(want + 8, hdr, hl);
    memcpy(want + 8 + padded, b, 8);
    memcpy(want + 16 + padded, a, 8);
    size_t n;
    unsigned char *got = slurp(p, &n);
    T_EQ_INT(n, 8 + padded + 16);
    T_CHECK(got && n == 8 + padded + 16 && !memcmp(got, want, n));
    free(got);
    /* No tensors, no metadata: "{}" padded to 8. */
    T_EQ_INT(mt_st_write(p, NULL, 0, NULL, 0, &e), 0);
    got = slurp(p, &n);
    T_CHECK(got && n == 16 && got[0] == 8 && !memcmp(got + 8, "{}      ", 8));
    free(got);
    mt_st_file f;
    T_EQ_INT(mt_st_open(&f, p, &e), 0);
    T_EQ_INT(f.n, 0);
    T_CHECK(mt_st_find(&f, "a") == NULL);
    mt_st_close(&f);
}

TEST(writer_rejects_bad_input)
{
    float a[4] = {0};
    const char *p = t_path("w.safetensors");
    mt_err e;
    mt_st_tensor dup[2] = {{.name = "x", .dtype = MT_ST_F32, .ndim = 1, .shape = {1}, .data = a},
                           {.name = "x", .dtype = MT_ST_F32, .ndim = 1, .shape = {2}, .data = a}};
    T_EQ_INT(mt_st_write(p, dup, 2, NULL, 0, &e), -1);
    T_CHECK(strstr(e.msg, "duplicate tensor name 'x'"));
    mt_st_tensor neg = {.name = "n", .dtype = MT_ST_F32, .ndim = 2, .shape = {2, -1}, .data = a};
    T_EQ_INT(mt_st_write(p, &neg, 1, NULL, 0, &e), -1);
    T_CHECK(strstr(e.msg, "tensor 'n': shape [2, -1] has a negative dimension"));
    mt_st_tensor meta = {.name = "__metadata__", .dtype = MT_ST_F32, .ndim = 0, .data = a};
    T_EQ_INT(mt_st_write(p, &meta, 1, NULL, 0, &e), -1);
    T_CHECK(strstr(e.msg, "invalid name"));
    mt_st_tensor nodata = {.name = "z", .dtype = MT_ST_F32, .ndim = 1, .shape = {3}};
    T_EQ_INT(mt_st_write(p, &nodata, 1, NULL, 0, &e), -1);
    T_CHECK(strstr(e.msg, "tensor 'z': no data"));
    mt_st_tensor dims = {.name = "d", .dtype = MT_ST_F32, .ndim = 9, .data = a};
    T_EQ_INT(mt_st_write(p, &dims, 1, NULL, 0, &e), -1);
    T_CHECK(strstr(e.msg, "9 dimensions"));
    mt_st_tensor f4 = {.name = "q", .dtype = MT_ST_F4, .ndim = 1, .shape = {3}, .data = a};
    T_EQ_INT(mt_st_write(p, &f4, 1, NULL, 0, &e), -1);
    T_CHECK(strstr(e.msg, "not a whole number of bytes"));
    mt_st_tensor badutf = {.name = "\xff", .dtype = MT_ST_F32, .ndim = 0, .data = a};
    T_EQ_INT(mt_st_write(p, &badutf, 1, NULL, 0, &e), -1);
    T_CHECK(strstr(e.msg, "UTF-8"));
    mt_st_kv kv[2] = {{"k", "1"}, {"k", "2"}};
    T_EQ_INT(mt_st_write(p, NULL, 0, kv, 2, &e), -1);
    T_CHECK(strstr(e.msg, "metadata key 'k'"));
    struct stat st;
    T_CHECK(stat(p, &st) != 0); /* nothing was left behind */
}

TEST(reader_rejects_damaged_files)
{
    const char *p = t_path("bad.safetensors");
    mt_st_file f;
    mt_err e;
    /* length field */
    write_raw(p, "", 0);
    T_EQ_INT(mt_st_open(&f, p, &e), -1);
    T_CHECK(strstr(e.msg, "truncated: 0 bytes"));
    write_raw(p, "\x02\0\0\0\0", 5);
    T_EQ_INT(mt_st_open(&f, p, &e), -1);
    T_CHECK(strstr(e.msg, "truncated: 5 bytes"));
    make_file(p, 1ull << 40, "{}", 0);
    T_EQ_INT(mt_st_open(&f, p, &e), -1);
    T_CHECK(strstr(e.msg, "header length 1099511627776 exceeds the limit"));
    make_file(p, 100000001, "{}", 0);
    T_EQ_INT(mt_st_open(&f, p, &e), -1);
    T_CHECK(strstr(e.msg, "exceeds the limit"));
    make_file(p, 100, "{}", 10);
    T_EQ_INT(mt_st_open(&f, p, &e), -1);
    T_CHECK(strstr(e.msg, "truncated: header length 100 but the file has 20 bytes"));
    T_EQ_INT(mt_st_open(&f, t_path("does-not-exist"), &e), -1);
    T_CHECK(strstr(e.msg, "does-not-exist") && strstr(e.msg, "No such file"));

    /* JSON */
    BAD("{\"a\":", 0, "header JSON");
    BAD("[1, 2]", 0, "header is not a JSON object");
    BAD("{} x", 0, "header JSON");
    BAD("{\"a\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[0,4]},"
        "\"a\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[0,4]}}", 4, "duplicate");
    BAD("{\"\xff\":{}}", 0, "header JSON");
    BAD("{\"__metadata__\":{\"k\":1}}", 0, "__metadata__ 'k' is not a string");
    BAD("{\"__metadata__\":[]}", 0, "__metadata__ is not an object");
    BAD("{\"x\":[0]}", 0, "tensor 'x': entry is not a JSON object");
    BAD("{\"x\":{\"dtype\":\"F32\",\"shape\":[1]}}", 4, "tensor 'x': missing \"data_offsets\"");
    BAD("{\"x\":{\"dtype\":\"F32\",\"data_offsets\":[0,4]}}", 4, "tensor 'x': missing \"shape\"");
    BAD("{\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4],\"extra\":1}}", 4, "tensor 'x': unknown key 'extra'");

    /* dtype and shape */
    BAD("{\"x\":{\"dtype\":\"F33\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "tensor 'x': unknown dtype \"F33\"");
    BAD("{\"x\":{\"dtype\":\"f32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "unknown dtype \"f32\"");
    BAD("{\"x\":{\"dtype\":4,\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "unknown dtype 4");
    BAD("{\"x\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}", 4, "shape[0] is not a non-negative integer");
    BAD("{\"x\":{\"dtype\":\"F32\",\"shape\":[1.5],\"data_offsets\":[0,4]}}", 4, "shape[0] is not a non-negative integer");
    BAD("{\"x\":{\"dtype\":\"F32\",\"shape\":{},\"data_offsets\":[0,4]}}", 4, "shape is not an array");
    BAD("{\"x\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,4]}}", 4, "9 dimensions");
    BAD("{\"x\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296],\"data_offsets\":[0,4]}}", 4, "too many elements");
    BAD("{\"x\":{\"dtype\":\"F4\",\"shape\":[3],\"data_offsets\":[0,2]}}", 2, "not a whole number of bytes");
    {
        char want[600];
        snprintf(want, sizeof want, "%s: tensor 'x': data_offsets [0, 12] do not match shape [4, 4] F32 (64 bytes)", p);
        const char *h = "{\"x\":{\"dtype\":\"F32\",\"shape\":[4,4],\"data_offsets\":[0,12]}}        ";
        make_file(p, strlen(h), h, 12);
        T_EQ_INT(mt_st_open(&f, p, &e), -1);
        T_EQ_STR(e.msg, want);
    }
    BAD("{\"x\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[0,8]}}", 8, "do not match shape [] F32 (4 bytes)");

    /* offsets */
    BAD("{\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0]}}", 4, "data_offsets is not an array [begin, end]");
    BAD("{\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,\"4\"]}}", 4, "data_offsets are not non-negative");
    BAD("{\"x\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[4,0]}}", 4, "data_offsets [4, 0] end before they begin");
    BAD("{\"x\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}", 8,
        "tensor 'x': data_offsets [0, 16] run past the end of the data (8 bytes; file truncated?)");
    BAD("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
        "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}", 12,
        "tensor 'b': data_offsets [4, 12] overlap tensor 'a' [0, 8]");
    BAD("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
        "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, "overlap tensor");
    BAD("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
        "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]}}", 12,
        "tensor 'b': data_offsets [8, 12] leave a gap after tensor 'a' [0, 4]");
    BAD("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8, "tensor 'a': data_offsets [4, 8]: the first tensor must begin at 0");
    BAD("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 8,
        "4 bytes of data after the last tensor (tensors end at 4, the data is 8 bytes)");
    BAD("{}", 1, "1 bytes of data after the last tensor");

    /* Valid corner cases the reference reader accepts: empty tensors anywhere, an unpadded header,
     * unaligned data, leading whitespace. */
    const char *ok = " {\"e\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[0,0]},"
                     "\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]},"
                     "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[1,5]}}";
    make_file(p, strlen(ok), ok, 5);
    if (mt_st_open(&f, p, &e)) {
        T_FAILF("valid file rejected: %s", e.msg);
    } else {
        const mt_st_info *b = mt_st_find(&f, "b");
        T_CHECK(b && b->begin == 1 && b->data == f.map.data + 8 + strlen(ok) + 1);
        T_CHECK(mt_st_find(&f, "e") && mt_st_find(&f, "e")->data == NULL);
        mt_st_close(&f);
    }
}

/* Every proper prefix of a valid file is rejected (never crashes), and a flipped byte in the header
 * either is rejected cleanly or still describes a consistent file. */
TEST(truncated_and_flipped_files)
{
    mt_st_tensor t[NFIXED];
    void *bufs[NFIXED];
    fixed_tensors(t, bufs);
    const char *p = t_path("full.safetensors"), *q = t_path("cut.safetensors");
    mt_err e;
    T_EQ_INT(mt_st_write(p, t, NFIXED, fixed_meta, 2, &e), 0);
    size_t n;
    unsigned char *b = slurp(p, &n);
    if (!b) {
        T_FAILF("cannot read %s", p);
        return;
    }
    int accepted = 0;
    for (size_t k = 0; k < n; k++) {
        write_raw(q, b, k);
        mt_st_file f;
        if (mt_st_open(&f, q, &e) == 0) {
            accepted++;
            mt_st_close(&f);
        }
    }
    T_EQ_INT(accepted, 0);
    size_t hl = (size_t)b[0] | (size_t)b[1] << 8;
    uint64_t s = 99;
    for (int k = 0; k < 400; k++) {
        unsigned char *c = malloc(n);
        memcpy(c, b, n);
        size_t at = lcg(&s) % (8 + hl);
        c[at] ^= (unsigned char)(1u << (lcg(&s) % 8));
        write_raw(q, c, n);
        mt_st_file f;
        if (mt_st_open(&f, q, &e) == 0) {
            size_t total = 0;
            for (int i = 0; i < f.n; i++) total += f.t[i].nbytes;
            T_EQ_INT(8 + f.header_len + total, f.map.size);
            mt_st_close(&f);
        } else {
            T_CHECK(!strncmp(e.msg, q, strlen(q)));
        }
        free(c);
    }
    free(b);
    for (int i = 0; i < NFIXED; i++) free(bufs[i]);
}

TEST(dtype_table)
{
    T_EQ_INT(mt_st_dtype_parse("F32"), MT_ST_F32);
    T_EQ_INT(mt_st_dtype_parse("BF16"), MT_ST_BF16);
    T_EQ_INT(mt_st_dtype_parse("F8_E4M3"), MT_ST_F8_E4M3);
    T_EQ_INT(mt_st_dtype_parse("C64"), MT_ST_C64);
    T_EQ_INT(mt_st_dtype_parse("F31"), -1);
    for (int d = 0; d < MT_ST_NDTYPES; d++) {
        T_CHECK(mt_st_dtype_name((mt_st_dtype)d) != NULL);
        T_EQ_INT(mt_st_dtype_parse(mt_st_dtype_name((mt_st_dtype)d)), d);
    }
    T_EQ_INT(mt_st_dtype_bits(MT_ST_BOOL), 8);
    T_EQ_INT(mt_st_dtype_bits(MT_ST_F4), 4);
    T_EQ_INT(mt_st_dtype_bits(MT_ST_I64), 64);
    T_CHECK(mt_st_dtype_name(MT_ST_NDTYPES) == NULL);
}

/* mt_st_write_ranges' fill: the bytes of the tensors' arrays (ctx), recording the largest piece asked. */
static size_t most_piece;
static int fill_from(void *ctx, int index, size_t off, void *buf, size_t nbytes, mt_err *e)
{
    (void)e;
    const unsigned char *const *src = ctx;
    memcpy(buf, src[index] + off, nbytes);
    if (nbytes > most_piece) most_piece = nbytes;
    return 0;
}

TEST(ranges_writer_and_pread)
{
    enum { N = 1000 };
    static float a[N];
    static uint16_t h[N];
    for (int i = 0; i < N; i++) a[i] = (float)i * 0.5f - 7.0f, h[i] = (uint16_t)(0x3f80 + i % 64);   /* bf16 */
    mt_st_tensor t[2] = {{.name = "a", .dtype = MT_ST_F32, .ndim = 2, .shape = {25, 40}, .data = a},
                         {.name = "h", .dtype = MT_ST_BF16, .ndim = 1, .shape = {N}, .data = h}};
    mt_st_kv m[1] = {{"format", "pt"}};
    const char *whole = t_path("whole.safetensors"), *parts = t_path("parts.safetensors");
    mt_err e;
    T_EQ_INT(mt_st_write(whole, t, 2, m, 1, &e), 0);
    const unsigned char *src[2] = {(const unsigned char *)a, (const unsigned char *)h};
    mt_st_tensor u[2] = {t[0], t[1]};
    u[0].data = u[1].data = NULL;
    most_piece = 0;
    T_EQ_INT(mt_st_write_ranges(parts, u, 2, m, 1, fill_from, src, 100, &e), 0);   /* pieces of 96 bytes */
    T_EQ_INT(most_piece, 96);
    size_t n1, n2;
    unsigned char *b1 = slurp(whole, &n1), *b2 = slurp(parts, &n2);
    T_CHECK(b1 && b2 && n1 == n2 && !memcmp(b1, b2, n1));   /* the same bytes, written piece by piece */
    free(b1);
    free(b2);
    /* pread of a range: F32 as stored, BF16 widened; the bytes read are the range's */
    mt_st_file f;
    T_EQ_INT(mt_st_open(&f, parts, &e), 0);
    float got[300];
    uint64_t bytes = 0;
    int fd = -1;
    T_EQ_INT(mt_st_pread_f32(&f, &fd, mt_st_find(&f, "a"), 123, 300, got, &bytes, &e), 0);
    T_CHECK(!memcmp(got, a + 123, sizeof got));
    T_EQ_INT(bytes, 300 * 4);
    T_EQ_INT(mt_st_pread_f32(&f, &fd, mt_st_find(&f, "h"), 700, 300, got, &bytes, &e), 0);
    int same = 1;
    for (int i = 0; i < 300; i++) same &= got[i] == mt_bf16_to_f32(h[700 + i]);
    T_CHECK(same);
    T_EQ_INT(bytes, 300 * 4 + 300 * 2);
    T_EQ_INT(mt_st_pread_f32(&f, &fd, mt_st_find(&f, "h"), 900, 101, got, &bytes, &e), -1);   /* beyond its end */
    close(fd);
    mt_st_close(&f);
}

T_MAIN_BEGIN("test_safetensors")
if (argc == 3 && !strcmp(argv[1], "--write")) return write_main(argv[2]);
if (argc == 3 && !strcmp(argv[1], "--read")) return read_main(argv[2]);
t_tmpdir();
RUN(roundtrip);
RUN(writer_exact_bytes);
RUN(writer_rejects_bad_input);
RUN(reader_rejects_damaged_files);
RUN(truncated_and_flipped_files);
RUN(dtype_table);
RUN(ranges_writer_and_pread);
t_tmpdir_remove();
T_MAIN_END
