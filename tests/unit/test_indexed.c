/* test_indexed.c: Megatron .bin/.idx writing (byte-exact worked example), reading, merging, and
 * validation: every truncation and random corruption of an .idx is an error, never a crash. */
#include <stdint.h>
#include <unistd.h>

#include "data/indexed.h"
#include "t.h"

static const char *tmpdir;

static size_t slurp(const char *p, unsigned char *buf, size_t cap)
{
    FILE *f = fopen(p, "rb");
    if (!f) return 0;
    size_t n = fread(buf, 1, cap, f);
    fclose(f);
    return n;
}

static void spit(const char *p, const void *buf, size_t n)
{
    FILE *f = fopen(p, "wb");
    fwrite(buf, 1, n, f);
    fclose(f);
}

/* The spec's example: uint16; doc A = [10,11,12]; doc B = two sentences [20,21],[22]. mt writes one
 * sequence per document, so build B's two sequences by merging with a hand-made dataset. */
static const unsigned char example_idx[94] = {
    0x4d, 0x4d, 0x49, 0x44, 0x49, 0x44, 0x58, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 8, 3, 0, 0, 0, 0, 0, 0, 0, 3, 0, 0, 0,
    0,    0,    0,    0,    3, 0, 0, 0, 2, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 6, 0, 0, 0, 0, 0, 0, 0,
    10,   0,    0,    0,    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 3, 0, 0, 0, 0, 0, 0, 0};
static const unsigned char example_bin[12] = {10, 0, 11, 0, 12, 0, 20, 0, 21, 0, 22, 0};

TEST(reads_the_spec_example)
{
    spit(t_path("ex.idx"), example_idx, sizeof example_idx);
    spit(t_path("ex.bin"), example_bin, sizeof example_bin);
    mt_indexed ds;
    mt_err e;
    T_EQ_INT(mt_indexed_open(&ds, t_path("ex"), &e), 0);
    T_EQ_INT(ds.dtype, 8);
    T_EQ_INT(ds.n_seq, 3);
    T_EQ_INT(ds.n_doc_idx, 3);
    T_EQ_INT(ds.n_tokens, 6);
    T_EQ_INT(mt_indexed_size(&ds, 1), 2);
    T_EQ_INT(mt_indexed_pointer(&ds, 2), 10);
    T_EQ_INT(mt_indexed_doc_idx(&ds, 1), 1);
    uint32_t t[2];
    mt_indexed_tokens(&ds, 1, 0, 2, t);
    T_EQ_INT(t[0], 20);
    int32_t *sizes = mt_indexed_sizes_copy(&ds);
    T_CHECK(sizes[0] == 3 && sizes[1] == 2 && sizes[2] == 1);
    free(sizes);
    T_EQ_INT(t[1], 21);
    /* Merging it into a fresh writer reproduces it byte for byte. */
    mt_indexed_writer w;
    T_EQ_INT(mt_indexed_writer_open(&w, t_path("copy"), 8, &e), 0);
    T_EQ_INT(mt_indexed_writer_append(&w, &ds, &e), 0);
    T_EQ_INT(mt_indexed_writer_finish(&w, &e), 0);
    unsigned char buf[200];
    T_EQ_INT(slurp(t_path("copy.idx"), buf, sizeof buf), 94);
    T_CHECK(!memcmp(buf, example_idx, 94));
    T_EQ_INT(slurp(t_path("copy.bin"), buf, sizeof buf), 12);
    T_CHECK(!memcmp(buf, example_bin, 12));
    mt_indexed_close(&ds);
}

TEST(writes_documents_and_merges)
{
    mt_err e;
    mt_indexed_writer w;
    uint32_t a[3] = {10, 11, 12}, b[2] = {70000, 5};
    /* int32 dataset with an empty document */
    T_EQ_INT(mt_indexed_writer_open(&w, t_path("w32"), 4, &e), 0);
    T_EQ_INT(mt_indexed_writer_add(&w, a, 3, &e), 0);
    T_EQ_INT(mt_indexed_writer_add(&w, NULL, 0, &e), 0);
    T_EQ_INT(mt_indexed_writer_add(&w, b, 2, &e), 0);
    T_CHECK(access(t_path("w32.idx"), F_OK) != 0); /* nothing visible before finish */
    T_EQ_INT(mt_indexed_writer_finish(&w, &e), 0);
    mt_indexed ds;
    T_EQ_INT(mt_indexed_open(&ds, t_path("w32"), &e), 0);
    T_EQ_INT(ds.n_seq, 2);
    T_EQ_INT(ds.n_doc_idx, 4);
    T_EQ_INT(mt_indexed_doc_idx(&ds, 2), 1); /* empty document: repeated value */
    uint32_t t[2];
    mt_indexed_tokens(&ds, 1, 0, 2, t);
    T_EQ_INT(t[0], 70000);
    /* merge: doc_idx offsets shift by the sequences before */
    T_EQ_INT(mt_indexed_writer_open(&w, t_path("m"), 4, &e), 0);
    T_EQ_INT(mt_indexed_writer_append(&w, &ds, &e), 0);
    T_EQ_INT(mt_indexed_writer_append(&w, &ds, &e), 0);
    T_EQ_INT(mt_indexed_writer_finish(&w, &e), 0);
    mt_indexed m;
    T_EQ_INT(mt_indexed_open(&m, t_path("m"), &e), 0);
    T_EQ_INT(m.n_seq, 4);
    T_EQ_INT(m.n_doc_idx, 7);
    int64_t want[7] = {0, 1, 1, 2, 3, 3, 4};
    for (int i = 0; i < 7; i++) T_EQ_INT(mt_indexed_doc_idx(&m, (uint64_t)i), want[i]);
    T_EQ_INT(mt_indexed_pointer(&m, 3), 32); /* (3 + 2 + 3) int32 tokens before it */
    mt_indexed_close(&m);
    /* dtype mismatch is refused */
    spit(t_path("ex.idx"), example_idx, sizeof example_idx);
    spit(t_path("ex.bin"), example_bin, sizeof example_bin);
    mt_indexed u16;
    T_EQ_INT(mt_indexed_open(&u16, t_path("ex"), &e), 0);
    T_EQ_INT(mt_indexed_writer_open(&w, t_path("mix"), 4, &e), 0);
    T_EQ_INT(mt_indexed_writer_append(&w, &u16, &e), -1);
    T_CHECK(strstr(e.msg, "uint16") && strstr(e.msg, "int32"));
    mt_indexed_writer_abort(&w);
    T_CHECK(access(t_path("mix.bin"), F_OK) != 0);
    mt_indexed_close(&u16);
    mt_indexed_close(&ds);
}

static void expect_error(const unsigned char *idx, size_t n, const unsigned char *bin, size_t bn, const char *frag)
{
    spit(t_path("bad.idx"), idx, n);
    spit(t_path("bad.bin"), bin, bn);
    mt_indexed ds;
    mt_err e;
    if (mt_indexed_open(&ds, t_path("bad"), &e) == 0) {
        mt_indexed_close(&ds);
        T_FAILF("accepted a dataset that should fail with '%s'", frag);
    } else if (frag && !strstr(e.msg, frag)) {
        T_FAILF("message '%s' lacks '%s'", e.msg, frag);
    }
}

TEST(validation_messages)
{
    unsigned char x[94];
    memcpy(x, example_idx, 94);
    expect_error(x, 90, example_bin, 12, "truncated");
    expect_error(x, 20, example_bin, 12, "truncated header");
    expect_error((const unsigned char *)"hello world, this is not an index at all.", 40, example_bin, 12, "bad magic");
    expect_error(x, 94, example_bin, 10, ".bin: 10 bytes, but the index describes 12");
    expect_error(x, 94, (const unsigned char *)"0123456789abcdef", 14, "2022-11 to 2023-08");
    x[17] = 7;
    expect_error(x, 94, example_bin, 12, "dtype code 7");
    memcpy(x, example_idx, 94);
    x[9] = 2;
    expect_error(x, 94, example_bin, 12, "version 2");
    memcpy(x, example_idx, 94);
    x[54] = 7; /* pointers[1] */
    expect_error(x, 94, example_bin, 12, "pointers[1] = 7");
    memcpy(x, example_idx, 94);
    x[86] = 5; /* doc_idx[2] */
    expect_error(x, 94, example_bin, 12, "doc_idx[2] = 5");
    memcpy(x, example_idx, 94);
    x[37] = 0x80; /* sizes[0] negative */
    expect_error(x, 94, example_bin, 12, "negative");
    memcpy(x, example_idx, 94);
    x[25] = 0x10; /* huge S */
    expect_error(x, 94, example_bin, 12, "cannot fit");
    unsigned char longer[99] = {0};
    memcpy(longer, example_idx, 94);
    expect_error(longer, sizeof longer, example_bin, 12, "trailing garbage");
}

TEST(fuzz_never_reads_out_of_bounds)
{
    /* every truncation, and seeded random byte flips: each either validates or is an error */
    uint64_t s = 12345;
    unsigned char x[94];
    int accepted = 0;
    for (size_t cut = 0; cut < 94; cut++) {
        spit(t_path("f.idx"), example_idx, cut);
        spit(t_path("f.bin"), example_bin, 12);
        mt_indexed ds;
        mt_err e;
        if (mt_indexed_open(&ds, t_path("f"), &e) == 0) T_FAILF("truncation at %zu accepted", cut);
    }
    for (int iter = 0; iter < 3000; iter++) {
        memcpy(x, example_idx, 94);
        int flips = 1 + iter % 3;
        for (int f = 0; f < flips; f++) {
            s = s * 6364136223846793005ULL + 1442695040888963407ULL;
            x[(s >> 33) % 94] ^= (unsigned char)(1u << ((s >> 20) % 8));
        }
        spit(t_path("f.idx"), x, 94);
        mt_indexed ds;
        mt_err e;
        if (mt_indexed_open(&ds, t_path("f"), &e) == 0) {
            /* anything accepted must be self-consistent: read every token */
            uint32_t t[16];
            for (uint64_t i = 0; i < ds.n_seq; i++) {
                int32_t n = mt_indexed_size(&ds, i);
                if (n > 16) n = 16;
                mt_indexed_tokens(&ds, i, 0, (uint64_t)n, t);
            }
            accepted++;
            mt_indexed_close(&ds);
        }
    }
    T_CHECK(accepted < 3000); /* the flips do get caught */
}

T_MAIN_BEGIN("test_indexed")
    tmpdir = t_tmpdir();
    RUN(reads_the_spec_example);
    RUN(writes_documents_and_merges);
    RUN(validation_messages);
    RUN(fuzz_never_reads_out_of_bounds);
    t_tmpdir_remove();
T_MAIN_END
