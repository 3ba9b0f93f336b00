/* test_indexed.c: Megatron .bin/.idx builder, reader, validation, merge, and a fuzz loop. */
#include <dirent.h>
#include <stdint.h>
#include <sys/stat.h>
#include <unistd.h>

#include "data/indexed.h"
#include "t.h"

static char tmpdir[256];

static unsigned char *slurp(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long sz = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *p = malloc(sz > 0 ? (size_t)sz : 1);
    *n = fread(p, 1, (size_t)sz, f);
    fclose(f);
    return p;
}

static int count_files(const char *dir)
{
    DIR *d = opendir(dir);
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d)))
        if (strcmp(de->d_name, ".") && strcmp(de->d_name, "..")) n++;
    closedir(d);
    return n;
}

static void subdir(char *out, size_t n, const char *name)
{
    snprintf(out, n, "%s/%s", tmpdir, name);
    mkdir(out, 0755);
}

/* The 94-byte worked example of the spec (section 1.2), written out byte for byte. */
static const unsigned char example_idx[94] = {
    0x4d, 0x4d, 0x49, 0x44, 0x49, 0x44, 0x58, 0x00, 0x00,        /* magic */
    0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,              /* version 1 */
    0x08,                                                        /* dtype uint16 */
    0x03, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,              /* S = 3 */
    0x03, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,              /* D = 3 */
    0x03, 0x00, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, /* sizes 3 2 1 */
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,              /* pointers 0 */
    0x06, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,              /*          6 */
    0x0a, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,              /*          10 */
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,              /* doc_idx 0 */
    0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,              /*         1 */
    0x03, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,              /*         3 */
};
static const unsigned char example_bin[12] = {0x0a, 0, 0x0b, 0, 0x0c, 0, 0x14, 0, 0x15, 0, 0x16, 0};

static int write_example(const char *prefix, mt_err *e)
{
    mt_idx_builder b;
    const uint32_t a[] = {10, 11, 12}, bb[] = {20, 21, 22};
    const int32_t lens[] = {2, 1};
    if (mt_idxb_open(&b, prefix, MT_DTYPE_UINT16, false, e)) return -1;
    if (mt_idxb_add_doc(&b, a, 3, e) || mt_idxb_add_seqs(&b, bb, 3, lens, 2, e)) {
        mt_idxb_abort(&b);
        return -1;
    }
    return mt_idxb_finalize(&b, e);
}

TEST(worked_example_bytes)
{
    char dir[300], prefix[400], path[420];
    subdir(dir, sizeof dir, "example");
    snprintf(prefix, sizeof prefix, "%s/ex", dir);
    mt_err e;
    T_EQ_INT(write_example(prefix, &e), 0);
    size_t n;
    snprintf(path, sizeof path, "%s.idx", prefix);
    unsigned char *idx = slurp(path, &n);
    T_CHECK(idx != NULL);
    if (!idx) return;
    T_EQ_INT(n, 94);
    T_CHECK(n == 94 && !memcmp(idx, example_idx, 94));
    free(idx);
    snprintf(path, sizeof path, "%s.bin", prefix);
    unsigned char *bin = slurp(path, &n);
    T_EQ_INT(n, 12);
    T_CHECK(n == 12 && !memcmp(bin, example_bin, 12));
    free(bin);
    T_EQ_INT(count_files(dir), 2); /* no temp files left */

    mt_indexed d;
    T_EQ_INT(mt_indexed_open(&d, prefix, &e), 0);
    T_EQ_INT(d.dtype, MT_DTYPE_UINT16);
    T_EQ_INT(d.n_seqs, 3);
    T_EQ_INT(d.n_docs, 2);
    T_EQ_INT(d.n_tokens, 6);
    T_EQ_INT(d.min_len, 1);
    T_EQ_INT(d.max_len, 3);
    T_CHECK(!d.has_modes);
    T_EQ_INT(mt_indexed_seq_offset(&d, 2), 10);
    T_EQ_INT(mt_indexed_doc_idx(&d, 1), 1);
    T_EQ_INT(mt_indexed_token(&d, 1, 1), 21);
    mt_ids ids = {0};
    T_EQ_INT(mt_indexed_doc_ids(&d, 1, &ids, &e), 0);
    T_EQ_INT(ids.n, 3);
    T_EQ_INT(ids.p[0], 20);
    T_EQ_INT(ids.p[2], 22);
    mt_ids_free(&ids);
    mt_indexed_close(&d);
}

TEST(int32_round_trip)
{
    char dir[300], prefix[400];
    subdir(dir, sizeof dir, "i32");
    snprintf(prefix, sizeof prefix, "%s/big", dir);
    mt_err e;
    mt_idx_builder b;
    T_EQ_INT(mt_idxb_open(&b, prefix, MT_DTYPE_INT32, false, &e), 0);
    uint32_t docs[4][5] = {{70000, 1, 2}, {5}, {0}, {INT32_MAX, 65535, 65536, 3, 4}};
    size_t lens[4] = {3, 1, 0, 5};
    for (int i = 0; i < 4; i++) T_EQ_INT(mt_idxb_add_doc(&b, docs[i], lens[i], &e), 0);
    T_EQ_INT(mt_idxb_documents(&b), 4);
    T_EQ_INT(mt_idxb_sequences(&b), 3);
    T_EQ_INT(mt_idxb_tokens(&b), 9);
    T_EQ_INT(mt_idxb_finalize(&b, &e), 0);
    mt_indexed d;
    T_EQ_INT(mt_indexed_open(&d, prefix, &e), 0);
    T_EQ_INT(d.dtype, MT_DTYPE_INT32);
    T_EQ_INT(d.itemsize, 4);
    T_EQ_INT(d.bin_size, 36);
    T_EQ_INT(d.idx_size, 34 + 12 * 3 + 8 * 5);
    T_EQ_INT(d.n_docs, 4);
    mt_ids ids = {0};
    for (int i = 0; i < 4; i++) {
        T_EQ_INT(mt_indexed_doc_ids(&d, (uint64_t)i, &ids, &e), 0);
        T_EQ_INT(ids.n, lens[i]);
        for (size_t k = 0; k < ids.n && k < lens[i]; k++) T_EQ_INT(ids.p[k], docs[i][k]);
    }
    T_EQ_INT(mt_indexed_doc_idx(&d, 3), 2); /* the empty document repeats the previous entry */
    T_EQ_INT(mt_indexed_doc_idx(&d, 4), 3);
    mt_ids_free(&ids);
    mt_indexed_close(&d);
}

TEST(empty_documents_and_datasets)
{
    char dir[300], prefix[400];
    subdir(dir, sizeof dir, "empty");
    mt_err e;
    mt_idx_builder b;
    mt_indexed d;
    /* only empty documents: S = 0, D = 4 */
    snprintf(prefix, sizeof prefix, "%s/allempty", dir);
    T_EQ_INT(mt_idxb_open(&b, prefix, MT_DTYPE_UINT16, false, &e), 0);
    for (int i = 0; i < 3; i++) T_EQ_INT(mt_idxb_add_doc(&b, NULL, 0, &e), 0);
    T_EQ_INT(mt_idxb_finalize(&b, &e), 0);
    T_EQ_INT(mt_indexed_open(&d, prefix, &e), 0);
    T_EQ_INT(d.n_seqs, 0);
    T_EQ_INT(d.n_docs, 3);
    T_EQ_INT(d.idx_size, 34 + 8 * 4);
    T_EQ_INT(d.bin_size, 0);
    T_EQ_INT(mt_indexed_doc_idx(&d, 3), 0);
    mt_indexed_close(&d);
    /* no documents at all: D = 1 */
    snprintf(prefix, sizeof prefix, "%s/nodocs", dir);
    T_EQ_INT(mt_idxb_open(&b, prefix, MT_DTYPE_UINT16, false, &e), 0);
    T_EQ_INT(mt_idxb_finalize(&b, &e), 0);
    T_EQ_INT(mt_indexed_open(&d, prefix, &e), 0);
    T_EQ_INT(d.n_docs, 0);
    T_EQ_INT(d.idx_size, 42);
    mt_indexed_close(&d);
    /* empty documents first, between and last */
    snprintf(prefix, sizeof prefix, "%s/mixed", dir);
    uint32_t x[] = {7, 8};
    T_EQ_INT(mt_idxb_open(&b, prefix, MT_DTYPE_UINT16, false, &e), 0);
    mt_idxb_add_doc(&b, NULL, 0, &e);
    mt_idxb_add_doc(&b, x, 2, &e);
    mt_idxb_add_doc(&b, NULL, 0, &e);
    mt_idxb_add_doc(&b, x, 1, &e);
    mt_idxb_add_doc(&b, NULL, 0, &e);
    T_EQ_INT(mt_idxb_finalize(&b, &e), 0);
    T_EQ_INT(mt_indexed_open(&d, prefix, &e), 0);
    const uint64_t want[] = {0, 0, 1, 1, 2, 2};
    T_EQ_INT(d.n_docs, 5);
    for (int j = 0; j < 6; j++) T_EQ_INT(mt_indexed_doc_idx(&d, (uint64_t)j), want[j]);
    mt_indexed_close(&d);
    T_EQ_INT(count_files(dir), 6);
}

TEST(builder_rejects_and_cleans_up)
{
    char dir[300], prefix[400];
    subdir(dir, sizeof dir, "reject");
    snprintf(prefix, sizeof prefix, "%s/x", dir);
    mt_err e;
    mt_idx_builder b;
    uint32_t big[] = {1, 65536};
    T_EQ_INT(mt_idxb_open(&b, prefix, MT_DTYPE_UINT16, false, &e), 0);
    T_EQ_INT(count_files(dir), 1); /* the .bin temp */
    T_EQ_INT(mt_idxb_add_doc(&b, big, 2, &e), -1);
    T_CHECK(strstr(e.msg, "65536") && strstr(e.msg, "does not fit dtype uint16"));
    mt_idxb_abort(&b);
    T_EQ_INT(count_files(dir), 0);
    /* abort after prepare removes both temps */
    T_EQ_INT(mt_idxb_open(&b, prefix, MT_DTYPE_INT32, false, &e), 0);
    T_EQ_INT(mt_idxb_add_doc(&b, big, 2, &e), 0);
    T_EQ_INT(mt_idxb_prepare(&b, &e), 0);
    T_EQ_INT(count_files(dir), 2);
    mt_idxb_abort(&b);
    T_EQ_INT(count_files(dir), 0);
    int32_t bad[] = {1, 2};
    T_EQ_INT(mt_idxb_open(&b, prefix, MT_DTYPE_INT32, false, &e), 0);
    T_EQ_INT(mt_idxb_add_seqs(&b, big, 2, bad, 2, &e), -1);
    T_CHECK(strstr(e.msg, "sum to 3"));
    mt_idxb_abort(&b);
    T_EQ_INT(mt_idxb_open(&b, prefix, 7, false, &e), -1);
    T_EQ_INT(count_files(dir), 0);
    /* missing directory */
    char nodir[420];
    snprintf(nodir, sizeof nodir, "%s/no/such/dir/p", tmpdir);
    T_EQ_INT(mt_idxb_open(&b, nodir, MT_DTYPE_UINT16, false, &e), -1);
    T_CHECK(strstr(e.msg, "no/such/dir/p.bin") != NULL);
    mt_indexed d;
    T_EQ_INT(mt_indexed_open(&d, nodir, &e), -1);
    T_CHECK(strstr(e.msg, "no/such/dir/p.idx") != NULL);
}

TEST(merge_offsets_doc_idx)
{
    char dir[300], p1[400], p2[400], out[400], p3[400];
    subdir(dir, sizeof dir, "merge");
    snprintf(p1, sizeof p1, "%s/a", dir);
    snprintf(p2, sizeof p2, "%s/b", dir);
    snprintf(p3, sizeof p3, "%s/c", dir);
    snprintf(out, sizeof out, "%s/m", dir);
    mt_err e;
    T_EQ_INT(write_example(p1, &e), 0); /* sizes 3 2 1, doc_idx 0 1 3 */
    mt_idx_builder b;
    uint32_t x[] = {1, 2, 3, 4};
    T_EQ_INT(mt_idxb_open(&b, p2, MT_DTYPE_UINT16, false, &e), 0);
    mt_idxb_add_doc(&b, x, 4, &e);
    mt_idxb_add_doc(&b, NULL, 0, &e);
    mt_idxb_add_doc(&b, x, 2, &e);
    T_EQ_INT(mt_idxb_finalize(&b, &e), 0); /* sizes 4 2, doc_idx 0 1 1 2 */

    mt_indexed a, c;
    T_EQ_INT(mt_indexed_open(&a, p1, &e), 0);
    T_EQ_INT(mt_indexed_open(&c, p2, &e), 0);
    T_EQ_INT(mt_idxb_open(&b, out, a.dtype, false, &e), 0);
    T_EQ_INT(mt_idxb_append(&b, &a, &e), 0);
    T_EQ_INT(mt_idxb_append(&b, &c, &e), 0);
    T_EQ_INT(mt_idxb_finalize(&b, &e), 0);
    mt_indexed_close(&a);
    mt_indexed_close(&c);

    mt_indexed m;
    T_EQ_INT(mt_indexed_open(&m, out, &e), 0);
    T_EQ_INT(m.n_seqs, 5);
    T_EQ_INT(m.n_docs, 5);
    const int64_t want_doc[] = {0, 1, 3, 4, 4, 5}, want_sizes[] = {3, 2, 1, 4, 2}, want_ptr[] = {0, 6, 10, 12, 20};
    for (int j = 0; j < 6; j++) T_EQ_INT(mt_indexed_doc_idx(&m, (uint64_t)j), want_doc[j]);
    for (int i = 0; i < 5; i++) {
        T_EQ_INT(mt_indexed_seq_len(&m, (uint64_t)i), want_sizes[i]);
        T_EQ_INT(mt_indexed_seq_offset(&m, (uint64_t)i), want_ptr[i]);
    }
    T_EQ_INT(m.bin_size, 24);
    T_CHECK(m.bin && !memcmp(m.bin, example_bin, 12));
    T_EQ_INT(mt_indexed_token(&m, 3, 3), 4);
    T_EQ_INT(mt_indexed_token(&m, 4, 1), 2);
    mt_indexed_close(&m);

    /* different dtypes: the message names both datasets */
    T_EQ_INT(mt_idxb_open(&b, p3, MT_DTYPE_INT32, false, &e), 0);
    mt_idxb_add_doc(&b, x, 4, &e);
    T_EQ_INT(mt_idxb_finalize(&b, &e), 0);
    T_EQ_INT(mt_indexed_open(&a, p1, &e), 0);
    T_EQ_INT(mt_indexed_open(&c, p3, &e), 0);
    T_EQ_INT(mt_idxb_open(&b, out, a.dtype, false, &e), 0);
    b.dtype_from = mt_xstrdup(p1);
    T_EQ_INT(mt_idxb_append(&b, &a, &e), 0);
    T_EQ_INT(mt_idxb_append(&b, &c, &e), -1);
    T_CHECK(strstr(e.msg, "/merge/c (dtype int32)") && strstr(e.msg, "/merge/a") && strstr(e.msg, "uint16"));
    mt_idxb_abort(&b);
    mt_indexed_close(&a);
    mt_indexed_close(&c);
}

TEST(multimodal_modes)
{
    char dir[300], prefix[400], out[400];
    subdir(dir, sizeof dir, "modes");
    snprintf(prefix, sizeof prefix, "%s/mm", dir);
    snprintf(out, sizeof out, "%s/out", dir);
    mt_err e;
    mt_idx_builder b;
    uint32_t x[] = {1, 2, 3};
    T_EQ_INT(mt_idxb_open(&b, prefix, MT_DTYPE_INT32, true, &e), 0);
    mt_idxb_add_doc(&b, x, 3, &e);
    mt_idxb_add_doc(&b, x, 2, &e);
    T_EQ_INT(mt_idxb_finalize(&b, &e), 0);
    mt_indexed d;
    T_EQ_INT(mt_indexed_open(&d, prefix, &e), 0);
    T_CHECK(d.has_modes);
    T_EQ_INT(d.idx_size, 34 + 12 * 2 + 8 * 3 + 2);
    T_EQ_INT(mt_indexed_mode(&d, 1), 0);
    /* a plain merge drops the modes */
    T_EQ_INT(mt_idxb_open(&b, out, d.dtype, false, &e), 0);
    T_EQ_INT(mt_idxb_append(&b, &d, &e), 0);
    T_EQ_INT(mt_idxb_finalize(&b, &e), 0);
    mt_indexed o;
    T_EQ_INT(mt_indexed_open(&o, out, &e), 0);
    T_CHECK(!o.has_modes);
    T_EQ_INT(o.n_seqs, 2);
    mt_indexed_close(&o);
    mt_indexed_close(&d);
}

/* Validation: each corruption class of the worked example gives its message. */
static void put64(unsigned char *p, uint64_t v)
{
    for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i));
}

static const char *try_parse(const unsigned char *idx, size_t n, uint64_t bin_size)
{
    static mt_err e;
    mt_indexed d;
    /* an exact-size copy, so that any read past the end is caught by ASan */
    unsigned char *copy = malloc(n ? n : 1);
    memcpy(copy, idx, n);
    int rc = mt_indexed_parse(&d, "ds", copy, n, NULL, bin_size, &e);
    free(copy);
    if (rc == 0) {
        mt_indexed_close(&d);
        return NULL;
    }
    return e.msg;
}

#define T_REJECTS(buf, n, binsz, frag)                                                                       \
    do {                                                                                                     \
        const char *t_m = try_parse(buf, n, binsz);                                                          \
        if (!t_m)                                                                                            \
            T_FAILF("%s:%d: accepted, expected an error with \"%s\"", __FILE__, __LINE__, frag);             \
        else if (!strstr(t_m, frag))                                                                         \
            T_FAILF("%s:%d: message \"%s\" lacks \"%s\"", __FILE__, __LINE__, t_m, frag);                    \
    } while (0)

TEST(validation_messages)
{
    unsigned char b[200];
    T_CHECK(try_parse(example_idx, 94, 12) == NULL);

    T_REJECTS(example_idx, 20, 12, "truncated: 20 bytes");
    T_REJECTS(example_idx, 0, 12, "truncated: 0 bytes");
    T_REJECTS(example_idx, 93, 12, "ds.idx: byte 93: truncated: S=3 sequences and D=3 doc_idx entries need 94 bytes");
    memcpy(b, example_idx, 94);
    b[3] = 'X';
    T_REJECTS(b, 94, 12, "ds.idx: byte 0: bad magic");
    memcpy(b, "TNTIDX\0\0", 8);
    T_REJECTS(b, 94, 12, "legacy TNTIDX");
    memcpy(b, example_idx, 94);
    b[9] = 2;
    T_REJECTS(b, 94, 12, "byte 9: index version 2 is not supported");
    memcpy(b, example_idx, 94);
    b[17] = 6;
    T_REJECTS(b, 94, 12, "byte 17: dtype code 6 is ambiguous");
    b[17] = 7;
    T_REJECTS(b, 94, 12, "dtype code 7 is ambiguous");
    b[17] = 9;
    T_REJECTS(b, 94, 12, "unknown dtype code 9");
    b[17] = 0;
    T_REJECTS(b, 94, 12, "unknown dtype code 0");
    memcpy(b, example_idx, 94);
    put64(b + 18, 4);
    T_REJECTS(b, 94, 12, "S=4 sequences");
    put64(b + 18, UINT64_MAX / 4);
    T_REJECTS(b, 94, 12, "impossible for a 94-byte file");
    memcpy(b, example_idx, 94);
    put64(b + 26, 0);
    T_REJECTS(b, 94, 12, "D=0");
    /* trailing bytes: S of them is a modes array, anything else is not */
    memcpy(b, example_idx, 94);
    memset(b + 94, 1, 10);
    T_CHECK(try_parse(b, 97, 12) == NULL);
    T_REJECTS(b, 95, 12, "byte 94: 1 unexpected bytes after doc_idx");
    T_REJECTS(b, 98, 12, "4 unexpected bytes after doc_idx (expected 0, or S=3");
    /* sizes */
    memcpy(b, example_idx, 94);
    memset(b + 38, 0xff, 4);
    T_REJECTS(b, 94, 12, "ds.idx: byte 38: sizes[1] = -1 is negative");
    /* pointers */
    memcpy(b, example_idx, 94);
    b[46] = 2;
    T_REJECTS(b, 94, 12, "byte 46: pointers[0] = 2, expected 0");
    memcpy(b, example_idx, 94);
    b[62] = 12;
    T_REJECTS(b, 94, 12, "byte 62: pointers[2] = 12, expected 10");
    memcpy(b, example_idx, 94);
    memset(b + 54, 0xff, 8);
    T_REJECTS(b, 94, 12, "pointers[1] = -1, expected 6");
    /* .bin extent */
    T_REJECTS(example_idx, 94, 10, "ds.bin: sequence 2 ends at byte 12 but the file has only 10 bytes");
    T_REJECTS(example_idx, 94, 0, "sequence 0 ends at byte 6");
    /* doc_idx */
    memcpy(b, example_idx, 94);
    b[70] = 1;
    T_REJECTS(b, 94, 12, "byte 70: doc_idx[0] = 1, expected 0");
    memcpy(b, example_idx, 94);
    b[78] = 4;
    T_REJECTS(b, 94, 12, "byte 78: doc_idx[1] = 4 exceeds the sequence count S=3");
    memcpy(b, example_idx, 94);
    memset(b + 78, 0xff, 8);
    T_REJECTS(b, 94, 12, "doc_idx[1] = -1 exceeds");
    memcpy(b, example_idx, 94);
    b[86] = 2;
    T_REJECTS(b, 94, 12, "byte 86: doc_idx[2] = 2 is the last entry but should equal the sequence count S=3");
    /* non-decreasing: D=4 with doc_idx 0 2 1 3 */
    memcpy(b, example_idx, 94);
    put64(b + 26, 4);
    put64(b + 70, 0);
    put64(b + 78, 2);
    put64(b + 86, 1);
    put64(b + 94, 3);
    T_REJECTS(b, 102, 12, "byte 86: doc_idx[2] = 1 is less than doc_idx[1] = 2");
    /* .bin longer than the index: Megatron's EOD length bug (one extra token per non-empty document) */
    T_REJECTS(example_idx, 94, 16, "--append-eod length bug");
    T_REJECTS(example_idx, 94, 16, "2 extra tokens, exactly one per non-empty document");
    T_REJECTS(example_idx, 94, 13, "1 extra bytes");
    T_REJECTS(example_idx, 94, 14, "do not belong together");
}

/* A buggy-era file for real: the EOD is in .bin but not in sizes. */
TEST(eod_length_bug_files)
{
    char dir[300], prefix[400], path[420];
    subdir(dir, sizeof dir, "eodbug");
    snprintf(prefix, sizeof prefix, "%s/old", dir);
    mt_err e;
    T_EQ_INT(write_example(prefix, &e), 0);
    snprintf(path, sizeof path, "%s.bin", prefix);
    /* rewrite .bin as the 2022-11..2023-08 builder did: doc A + EOD, doc B + EOD */
    const unsigned char bin[16] = {10, 0, 11, 0, 12, 0, 0x50, 0xc4, 20, 0, 21, 0, 22, 0, 0x50, 0xc4};
    FILE *f = fopen(path, "wb");
    fwrite(bin, 1, 16, f);
    fclose(f);
    mt_indexed d;
    T_EQ_INT(mt_indexed_open(&d, prefix, &e), -1);
    T_CHECK(strstr(e.msg, "/eodbug/old.bin: 16 bytes, but the index accounts for 12") != NULL);
    T_CHECK(strstr(e.msg, "2022-11-17") != NULL);
}

/* Fuzz: every truncation and many random corruptions of a small valid index must be rejected or
 * accepted cleanly, and whatever is accepted must be readable within bounds. */
static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint64_t rnd(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

static size_t bin_have; /* bytes actually held by the bin buffer passed to fuzz_one */

static int fuzz_one(const unsigned char *idx, size_t n, const unsigned char *bin, size_t bn)
{
    unsigned char *ci = malloc(n ? n : 1), *cb = calloc(bn ? bn : 1, 1);
    memcpy(ci, idx, n);
    memcpy(cb, bin, bn < bin_have ? bn : bin_have);
    mt_indexed d;
    mt_err e;
    int rc = mt_indexed_parse(&d, "fz", ci, n, bn ? cb : NULL, bn, &e);
    if (rc == 0) {
        mt_ids ids = {0};
        int64_t sum = 0;
        for (uint64_t j = 0; j < d.n_docs; j++) {
            if (mt_indexed_doc_ids(&d, j, &ids, &e) == 0)
                for (size_t k = 0; k < ids.n; k++) sum += ids.p[k];
        }
        for (uint64_t i = 0; i < d.n_seqs; i++) sum += mt_indexed_mode(&d, i);
        (void)sum;
        mt_ids_free(&ids);
        mt_indexed_close(&d);
    } else if (!strstr(e.msg, "fz.")) {
        rc = 2; /* every message names the file */
    }
    free(ci);
    free(cb);
    return rc;
}

TEST(fuzz_truncations_and_flips)
{
    char dir[300], prefix[400], path[420];
    subdir(dir, sizeof dir, "fuzz");
    snprintf(prefix, sizeof prefix, "%s/f", dir);
    mt_err e;
    mt_idx_builder b;
    T_EQ_INT(mt_idxb_open(&b, prefix, MT_DTYPE_UINT16, false, &e), 0);
    uint32_t x[] = {5, 6, 7, 8, 9, 10, 11};
    int32_t l3[] = {2, 0, 3};
    mt_idxb_add_doc(&b, x, 7, &e);
    mt_idxb_add_doc(&b, NULL, 0, &e);
    mt_idxb_add_seqs(&b, x, 5, l3, 3, &e);
    mt_idxb_add_doc(&b, x + 3, 1, &e);
    T_EQ_INT(mt_idxb_finalize(&b, &e), 0);
    size_t n, bn;
    snprintf(path, sizeof path, "%s.idx", prefix);
    unsigned char *idx = slurp(path, &n);
    snprintf(path, sizeof path, "%s.bin", prefix);
    unsigned char *bin = slurp(path, &bn);
    bin_have = bn;
    T_EQ_INT(fuzz_one(idx, n, bin, bn), 0);
    int accepted = 0, unnamed = 0;
    for (size_t cut = 0; cut < n; cut++) {
        int rc = fuzz_one(idx, cut, bin, bn);
        accepted += rc == 0;
        unnamed += rc == 2;
    }
    T_EQ_INT(accepted, 0); /* no proper prefix of an index without modes is valid */
    for (size_t cut = 0; cut < bn; cut++) {
        int rc = fuzz_one(idx, n, bin, cut);
        accepted += rc == 0;
        unnamed += rc == 2;
    }
    T_EQ_INT(accepted, 0);
    unsigned char *m = malloc(n + 256);
    int ok_flips = 0;
    for (int it = 0; it < 20000; it++) {
        memcpy(m, idx, n);
        int flips = 1 + (int)(rnd() % 3);
        for (int k = 0; k < flips; k++) {
            size_t at = rnd() % n;
            if (rnd() % 2)
                m[at] ^= (unsigned char)(1u << (rnd() % 8));
            else
                m[at] = (unsigned char)rnd();
        }
        size_t len = n;
        if (rnd() % 8 == 0) len = rnd() % (n + 16);
        if (len > n) memset(m + n, (int)(rnd() & 0xff), len - n);
        int rc = fuzz_one(m, len, bin, rnd() % 4 ? bn : rnd() % (bn + 8));
        ok_flips += rc == 0;
        unnamed += rc == 2;
    }
    T_EQ_INT(unnamed, 0);
    /* Some corruptions stay valid (e.g. a flipped token-free byte in a size that is compensated): we
     * only insist that most are caught. */
    fprintf(stderr, "# fuzz: %d of 20000 corruptions accepted\n", ok_flips);
    T_CHECK(ok_flips < 2000);
    /* header-only random garbage with the right magic */
    for (int it = 0; it < 5000; it++) {
        size_t len = 34 + rnd() % 120;
        for (size_t k = 0; k < len; k++) m[k] = (unsigned char)rnd();
        memcpy(m, MT_IDX_MAGIC, 9);
        if (rnd() % 2) put64(m + 9, 1);
        if (rnd() % 2) m[17] = 8;
        if (rnd() % 2) put64(m + 18, rnd() % 8);
        if (rnd() % 2) put64(m + 26, rnd() % 8);
        unnamed += fuzz_one(m, len, bin, bn) == 2;
    }
    T_EQ_INT(unnamed, 0);
    free(m);
    free(idx);
    free(bin);
}

T_MAIN_BEGIN("test_indexed")
    const char *d = t_tmpdir();
    if (strlen(d) >= sizeof tmpdir) return 1;
    memcpy(tmpdir, d, strlen(d) + 1);
    RUN(worked_example_bytes);
    RUN(int32_round_trip);
    RUN(empty_documents_and_datasets);
    RUN(builder_rejects_and_cleans_up);
    RUN(merge_offsets_doc_idx);
    RUN(multimodal_modes);
    RUN(validation_messages);
    RUN(eod_length_bug_files);
    RUN(fuzz_truncations_and_flips);
    t_tmpdir_remove();
T_MAIN_END
