/* test_gpt_index.c: GPT sample indices against the spec's vectors (3.2, 3.9, 3.10), numpy RandomState
 * draws, .npy bytes, sample fetch, sampler, cache staleness; plus a --dump MANIFEST mode that the
 * pipeline test (tests/pipeline/shuffle-numpy.sh) drives to compare with a numpy reference.
 */
#include <errno.h>
#include <stdint.h>
#include <sys/stat.h>
#include <unistd.h>

#include "data/blend.h"
#include "data/gpt_cache.h"
#include "data/gpt_index.h"
#include "data/sample.h"
#include "data/split.h"
#include "io/npy.h"
#include "t.h"
#include "util/mt19937.h"

static const int32_t SIZES[6] = {5, 3, 7, 2, 9, 4};

static mt_gpt_index_params vparams(int64_t n)
{
    mt_gpt_index_params p = {n, 4, 1, 1234, true};
    return p;
}

static int eq32(const int32_t *a, const int *b, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (a[i] != b[i]) return 0;
    return 1;
}
static int equ32(const uint32_t *a, const int *b, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (a[i] != (uint32_t)b[i]) return 0;
    return 1;
}

static void check_vector(int64_t n, int epochs, int sep, const int *doc, int ndoc, const int *samp, int nsamp,
                         const int *shuf)
{
    mt_gpt_index ix;
    mt_err e;
    mt_gpt_index_params p = vparams(n);
    T_EQ_INT(mt_gpt_index_build(SIZES, 6, 0, 6, &p, &ix, &e), 0);
    T_EQ_INT(ix.plan.tokens_per_epoch, 30);
    T_EQ_INT(ix.plan.num_epochs, epochs);
    T_EQ_INT(ix.plan.separate_final_epoch, sep);
    T_EQ_INT(ix.plan.doc_index_len, ndoc);
    T_EQ_INT(ix.plan.num_samples, nsamp - 1);
    T_CHECK(!ix.plan.sample_idx_64 && !ix.plan.shuffle_idx_64);
    T_CHECK(eq32(ix.doc_idx, doc, (size_t)ndoc));
    T_CHECK(eq32(ix.sample_idx, samp, (size_t)nsamp * 2));
    T_CHECK(equ32(ix.shuffle_idx, shuf, (size_t)nsamp - 1));
    mt_gpt_index_free(&ix);
}

TEST(vector_3_9_n5)
{
    int doc[] = {2, 1, 5, 0, 4, 3};
    int samp[] = {0, 0, 0, 4, 1, 1, 2, 2, 3, 2, 4, 1, 4, 5, 5, 0};
    int shuf[] = {5, 0, 3, 4, 2, 6, 1};
    check_vector(5, 1, 0, doc, 6, samp, 8, shuf);
}

TEST(vector_3_9_n9_separate_final_epoch)
{
    int doc[] = {2, 1, 5, 0, 4, 3, 0, 4, 3, 2, 5, 1};
    int samp[] = {0, 0, 0, 4, 1, 1, 2, 2, 3, 2, 4, 1, 4, 5, 5, 0, 6, 2, 7, 1, 7, 5, 8, 0, 9, 2, 9, 6, 10, 3};
    int shuf[] = {1, 0, 3, 2, 5, 4, 6, 9, 10, 12, 8, 11, 13, 7};
    check_vector(9, 2, 1, doc, 12, samp, 15, shuf);
    mt_gpt_plan pl;
    mt_err e;
    mt_gpt_index_params p = vparams(9);
    T_EQ_INT(mt_gpt_plan_make(SIZES, 6, 0, 6, &p, &pl, &e), 0);
    T_EQ_INT(pl.num_samples_sans_final_epoch, 7);
    T_EQ_INT(pl.num_samples_per_epoch, 7);
}

TEST(vector_3_9_n13)
{
    int doc[] = {1, 2, 5, 2, 3, 4, 1, 0, 4, 5, 0, 3};
    int samp[] = {0, 0, 1, 1, 1, 5, 2, 2, 3, 2, 3, 6, 5, 1, 5, 5, 6, 0, 7, 1, 8, 0, 8, 4, 8, 8, 9, 3, 10, 3};
    int shuf[] = {7, 11, 2, 3, 1, 9, 5, 4, 0, 8, 6, 10, 13, 12};
    check_vector(13, 2, 0, doc, 12, samp, 15, shuf);
}

TEST(sample_index_int64_path_matches_int32)
{
    mt_gpt_index ix;
    mt_err e;
    mt_gpt_index_params p = vparams(13);
    T_EQ_INT(mt_gpt_index_build(SIZES, 6, 0, 6, &p, &ix, &e), 0);
    int64_t s64[30];
    T_EQ_INT(mt_gpt_build_sample_index(SIZES, ix.doc_idx, 12, 4, 1, 14, true, s64, &e), 0);
    for (int i = 0; i < 30; i++) T_EQ_INT(s64[i], ((const int32_t *)ix.sample_idx)[i]);
    /* dtype rules: int64 sample index once a sequence is longer than 2^31-1 is impossible with int32
     * sizes, so only the document index length can trigger it; uint32 shuffle below 2^32-2 samples. */
    T_CHECK(!ix.plan.sample_idx_64 && !ix.plan.shuffle_idx_64);
    mt_gpt_index_free(&ix);
    /* Plans at scale (nothing allocated): one 1-token sequence, L=1, E=1: n samples need n+1 epochs. */
    int32_t one[1] = {1};
    mt_gpt_plan pl;
    p.seq_length = 1;
    p.num_samples = 4294967293LL;
    T_EQ_INT(mt_gpt_plan_make(one, 1, 0, 1, &p, &pl, &e), 0);
    T_EQ_INT(pl.num_epochs, 4294967294LL);
    T_EQ_INT(pl.num_samples, 4294967293LL);
    T_CHECK(pl.sample_idx_64 && !pl.shuffle_idx_64);
    p.num_samples = 4294967294LL;
    T_EQ_INT(mt_gpt_plan_make(one, 1, 0, 1, &p, &pl, &e), 0);
    T_CHECK(pl.sample_idx_64 && pl.shuffle_idx_64);
    int32_t small[3] = {1000, 1000, 1000};
    p.num_samples = 1000000000LL; /* 1e9 samples of 1 token over 3000-token epochs */
    T_EQ_INT(mt_gpt_plan_make(small, 3, 0, 3, &p, &pl, &e), 0);
    T_EQ_INT(pl.num_epochs, 333334);
    T_CHECK(!pl.sample_idx_64 && !pl.shuffle_idx_64);
    p.seq_length = 2;
    p.num_samples = INT64_MAX / 2 + 1; /* n * L overflows */
    T_EQ_INT(mt_gpt_plan_make(small, 3, 0, 3, &p, &pl, &e), -1);
    T_CHECK(strstr(e.msg, "overflow"));
}

TEST(epochs_and_errors)
{
    mt_gpt_plan pl;
    mt_err e;
    mt_gpt_index_params p = vparams(7); /* 7*4+1 = 29 <= 30: one epoch */
    T_EQ_INT(mt_gpt_plan_make(SIZES, 6, 0, 6, &p, &pl, &e), 0);
    T_EQ_INT(pl.num_epochs, 1);
    p.num_samples = 8; /* 33 > 30 */
    T_EQ_INT(mt_gpt_plan_make(SIZES, 6, 0, 6, &p, &pl, &e), 0);
    T_EQ_INT(pl.num_epochs, 2);
    p.num_samples = -1; /* None: one epoch */
    T_EQ_INT(mt_gpt_plan_make(SIZES, 6, 0, 6, &p, &pl, &e), 0);
    T_EQ_INT(pl.num_epochs, 1);
    T_EQ_INT(pl.num_samples, 7);
    int32_t zeros[3] = {0, 0, 0};
    p.num_samples = 1;
    T_EQ_INT(mt_gpt_plan_make(zeros, 3, 0, 3, &p, &pl, &e), -1);
    T_CHECK(strstr(e.msg, "no tokens"));
    T_EQ_INT(mt_gpt_plan_make(SIZES, 6, 2, 7, &p, &pl, &e), -1);
    /* Without drop_last the count is a float ceil and the last sample is short. */
    p = vparams(5);
    p.drop_last = false;
    mt_gpt_index ix;
    T_EQ_INT(mt_gpt_index_build(SIZES, 6, 0, 6, &p, &ix, &e), 0);
    T_EQ_INT(ix.plan.num_samples, 8); /* ceil(29/4) */
    int64_t d, o;
    mt_gpt_sample_row(&ix, 8, &d, &o);
    T_EQ_INT(d, 5);
    T_EQ_INT(o, SIZES[ix.doc_idx[5]] - 1);
    mt_gpt_index_free(&ix);
    /* Single-precision count (spec 8.16): 2^24+1 tokens. */
    T_EQ_INT(mt_gpt_sample_count(1, (1 << 24) + 2, 1, 1, false), 1 << 24);
    T_EQ_INT(mt_gpt_sample_count(1, (1 << 24) + 2, 1, 1, true), (1 << 24) + 1);
}

static void check_range(const mt_range *r, int present, int64_t lo, int64_t hi)
{
    T_EQ_INT(r->present, present);
    if (present) {
        T_EQ_INT(r->lo, lo);
        T_EQ_INT(r->hi, hi);
    }
}

TEST(split_examples_3_2)
{
    mt_range r[3];
    mt_err e;
    T_EQ_INT(mt_split_ranges("1,1,1", 7, r, &e), 0);
    check_range(&r[0], 1, 0, 2);
    check_range(&r[1], 1, 2, 5);
    check_range(&r[2], 1, 5, 7);
    T_EQ_INT(mt_split_ranges_legacy("1,1,1", 7, r, &e), 0);
    check_range(&r[0], 1, 0, 3);
    check_range(&r[1], 1, 3, 5);
    check_range(&r[2], 1, 5, 7);
    T_EQ_INT(mt_split_ranges("969, 30, 1", 12345, r, &e), 0);
    check_range(&r[0], 1, 0, 11962);
    T_EQ_INT(r[2].hi, 12345);
    T_EQ_INT(mt_split_ranges_legacy("969, 30, 1", 12345, r, &e), 0);
    check_range(&r[0], 1, 0, 11963);
    T_EQ_INT(r[2].hi, 12345);
    T_EQ_INT(mt_split_ranges("100,0,0", 50, r, &e), 0);
    check_range(&r[0], 1, 0, 50);
    check_range(&r[1], 0, 0, 0);
    check_range(&r[2], 0, 0, 0);
    T_EQ_INT(mt_split_ranges("98", 1000, r, &e), 0); /* padded with zeros */
    check_range(&r[0], 1, 0, 1000);
    T_CHECK(!r[1].present);
    T_EQ_INT(mt_split_ranges("90/5/5", 100, r, &e), 0);
    check_range(&r[1], 1, 90, 95);
    T_EQ_INT(mt_split_ranges("1,2,3,4", 10, r, &e), -1);
    T_EQ_INT(mt_split_ranges("0,0,0", 10, r, &e), -1);
    T_EQ_INT(mt_split_ranges("1,.,1", 10, r, &e), -1);
    /* half-to-even: 0.5 * 5 = 2.5 -> 2 */
    T_EQ_INT(mt_split_ranges("1,1", 5, r, &e), 0);
    check_range(&r[0], 1, 0, 2);
    check_range(&r[1], 1, 2, 5);
}

TEST(num_samples_3_1)
{
    int64_t n[3];
    mt_err e;
    T_EQ_INT(mt_split_num_samples(500, 0, 8, 100, 10, n, &e), 0);
    T_EQ_INT(n[0], 4000);
    T_EQ_INT(n[1], 6 * 10 * 8);
    T_EQ_INT(n[2], 80);
    T_EQ_INT(mt_split_num_samples(0, 1000, 8, 100, 10, n, &e), 0);
    T_EQ_INT(n[0], 1000);
    T_EQ_INT(n[1], (125 / 100 + 1) * 10 * 8);
    T_EQ_INT(mt_split_num_samples(INT64_MAX / 2, 0, 8, 100, 10, n, &e), -1);
}

TEST(blend_example_3_10)
{
    double w[2] = {3, 7};
    mt_err e;
    T_EQ_INT(mt_blend_normalize(w, 2, &e), 0);
    int16_t di[10];
    int64_t dsi[10];
    T_EQ_INT(mt_blend_build(w, 2, 10, NULL, di, dsi, &e), 0);
    int want_d[10] = {1, 0, 1, 1, 0, 1, 1, 0, 1, 1}, want_s[10] = {0, 0, 1, 2, 1, 3, 4, 2, 5, 6};
    for (int i = 0; i < 10; i++) {
        T_EQ_INT(di[i], want_d[i]);
        T_EQ_INT(dsi[i], want_s[i]);
    }
    int64_t len[2] = {3, 6};
    T_EQ_INT(mt_blend_build(w, 2, 10, len, di, dsi, &e), -1);
    T_CHECK(strstr(e.msg, "dataset 2") && strstr(e.msg, "7 samples"));
    int64_t per[2], size;
    T_EQ_INT(mt_blend_sizes(w, 2, 1000, MT_BLEND_SURPLUS_DEFAULT, per, &size, &e), 0);
    T_EQ_INT(per[0], 302); /* ceil(300 * 1.005) = ceil(301.5) */
    T_EQ_INT(per[1], 704); /* ceil(700 * 1.005) = ceil(703.5) */
    T_EQ_INT(size, 1000);
    int64_t counts[3] = {2, 0, 3};
    int16_t xd[5];
    int64_t xs[5];
    T_EQ_INT(mt_blend_build_exhaustive(counts, 3, xd, xs, &e), 0);
    int c0 = 0, c2 = 0;
    for (int i = 0; i < 5; i++) {
        T_CHECK(xd[i] == 0 || xd[i] == 2);
        T_EQ_INT(xs[i], xd[i] == 0 ? c0++ : c2++);
    }
    T_EQ_INT(c0, 2);
    T_EQ_INT(c2, 3);
}

TEST(numpy_randomstate_draws)
{
    mt_rs rs;
    mt_rs_seed(&rs, 1234);
    uint32_t want[5] = {822569775u, 2137449171u, 2671936806u, 3512589365u, 1880026316u};
    for (int i = 0; i < 5; i++) T_EQ_INT(mt_rs_next32(&rs), want[i]);
    mt_rs_seed(&rs, 4294967295u);
    T_CHECK(mt_rs_next64(&rs) == 1800993050274709794ULL);
    T_CHECK(mt_rs_next64(&rs) == 16830492821160766535ULL);
    mt_rs_seed(&rs, 0);
    uint64_t w2[4] = {741280623151ULL, 506137267392ULL, 291447657211ULL, 841157541223ULL};
    for (int i = 0; i < 4; i++) T_CHECK(mt_rs_interval(&rs, 1000000000000ULL) == w2[i]);
    uint32_t a[10];
    for (int i = 0; i < 10; i++) a[i] = (uint32_t)i;
    mt_rs_seed(&rs, 42);
    mt_rs_shuffle_u32(&rs, a, 10);
    int ws[10] = {8, 1, 5, 0, 7, 2, 9, 4, 3, 6};
    T_CHECK(equ32(a, ws, 10));
}

static char tmpdir[256];

static void expect_header(const char *descr, const int64_t *shape, int ndim, const char *dict)
{
    char buf[512], want[512];
    size_t n = mt_npy_header(buf, sizeof buf, descr, shape, ndim);
    T_EQ_INT(n, 128);
    memcpy(want, "\x93NUMPY\x01\x00\x76\x00", 10);
    size_t dl = strlen(dict);
    memcpy(want + 10, dict, dl);
    memset(want + 10 + dl, ' ', 128 - 11 - dl);
    want[127] = '\n';
    T_CHECK(n == 128 && !memcmp(buf, want, 128));
}

TEST(npy_header_bytes_as_numpy)
{
    int64_t s1[2] = {3, 2}, s2[1] = {7}, s3[2] = {123456789012LL, 2}, s4[1] = {0};
    expect_header("<i4", s1, 2, "{'descr': '<i4', 'fortran_order': False, 'shape': (3, 2), }");
    expect_header("<u4", s2, 1, "{'descr': '<u4', 'fortran_order': False, 'shape': (7,), }");
    expect_header("<i8", s3, 2, "{'descr': '<i8', 'fortran_order': False, 'shape': (123456789012, 2), }");
    expect_header("|u1", s4, 1, "{'descr': '|u1', 'fortran_order': False, 'shape': (0,), }");
}

static void write_bytes(const char *path, const void *p, size_t n)
{
    FILE *f = fopen(path, "wb");
    fwrite(p, 1, n, f);
    fclose(f);
}

TEST(npy_reader_validates)
{
    char path[512];
    snprintf(path, sizeof path, "%s/a.npy", tmpdir);
    int32_t data[6] = {1, 2, 3, 4, 5, -6};
    int64_t shape[2] = {3, 2};
    mt_err e;
    T_EQ_INT(mt_npy_write(path, "<i4", shape, 2, data, sizeof data, &e), 0);
    mt_npy v;
    T_EQ_INT(mt_npy_open(&v, path, &e), 0);
    T_EQ_INT(v.ndim, 2);
    T_EQ_INT(v.shape[0], 3);
    T_EQ_INT(v.data_offset, 128);
    T_CHECK(!memcmp(v.data, data, sizeof data));
    T_EQ_INT(mt_npy_expect(&v, path, "<i4", 2, (int64_t[]){3, 2}, &e), 0);
    T_EQ_INT(mt_npy_expect(&v, path, "<i8", 2, NULL, &e), -1);
    T_EQ_INT(mt_npy_expect(&v, path, "<i4", 2, (int64_t[]){4, 2}, &e), -1);
    T_CHECK(strstr(e.msg, "shape[0] is 3"));
    unsigned char raw[256];
    memcpy(raw, v.map.data, v.map.size);
    size_t sz = v.map.size;
    mt_npy_close(&v);
    /* truncated data */
    write_bytes(path, raw, sz - 4);
    T_EQ_INT(mt_npy_open(&v, path, &e), -1);
    T_CHECK(strstr(e.msg, "offset 128") && strstr(e.msg, "needs 152"));
    /* bad magic */
    raw[1] = 'X';
    write_bytes(path, raw, sz);
    T_EQ_INT(mt_npy_open(&v, path, &e), -1);
    T_CHECK(strstr(e.msg, "bad magic"));
    raw[1] = 'N';
    /* header length past the end */
    raw[9] = 0x10;
    write_bytes(path, raw, sz);
    T_EQ_INT(mt_npy_open(&v, path, &e), -1);
    T_CHECK(strstr(e.msg, "runs past the end"));
    raw[9] = 0;
    /* fortran order */
    unsigned char f2[256];
    memcpy(f2, raw, sz);
    memcpy(strstr((char *)f2 + 10, "False"), "True ", 5);
    write_bytes(path, f2, sz);
    T_EQ_INT(mt_npy_open(&v, path, &e), -1);
    T_CHECK(strstr(e.msg, "fortran_order"));
    /* a shorter header (not 128) is accepted: data where the header says */
    const char *hdr = "{'descr':'<i4','fortran_order':False,'shape':(2,)}";
    unsigned char s[128];
    size_t hl = strlen(hdr) + 1;
    size_t tot = 10 + hl + 8;
    memcpy(s, "\x93NUMPY\x01\x00", 8);
    s[8] = (unsigned char)hl;
    s[9] = 0;
    memcpy(s + 10, hdr, hl - 1);
    s[10 + hl - 1] = '\n';
    int32_t two[2] = {7, 9};
    memcpy(s + 10 + hl, two, 8);
    write_bytes(path, s, tot);
    T_EQ_INT(mt_npy_open(&v, path, &e), 0);
    T_EQ_INT(v.data_offset, 10 + hl);
    int32_t got;   /* the data starts at an odd offset here: no int32_t loads through it */
    memcpy(&got, (const char *)v.data + 4, sizeof got);
    T_EQ_INT(got, 9);
    mt_npy_close(&v);
}

TEST(sample_fetch_crosses_sequences)
{
    /* Tokens: sequence s item k = 100*s + k, stored as uint16 with pointers into one buffer. */
    uint16_t bin[30];
    int64_t ptr[6];
    int64_t off = 0;
    for (int s = 0; s < 6; s++) {
        ptr[s] = off * 2;
        for (int k = 0; k < SIZES[s]; k++) bin[off++] = (uint16_t)(100 * s + k);
    }
    mt_tokens t = {(const unsigned char *)bin, sizeof bin, 8, SIZES, ptr, 6};
    mt_gpt_index ix;
    mt_err e;
    mt_gpt_index_params p = vparams(5);
    T_EQ_INT(mt_gpt_index_build(SIZES, 6, 0, 6, &p, &ix, &e), 0);
    int64_t out[5];
    /* sample 0 -> shuffle 5 -> rows (4,1),(4,5): doc_idx[4] = 4, items 1..5 */
    T_EQ_INT(mt_gpt_sample_fetch(&t, &ix, 4, 1, 0, -1, out, &e), 5);
    int64_t w0[5] = {401, 402, 403, 404, 405};
    T_CHECK(!memcmp(out, w0, sizeof w0));
    /* sample 1 -> shuffle 0 -> rows (0,0),(0,4): seq 2 items 0..4 */
    T_EQ_INT(mt_gpt_sample_fetch(&t, &ix, 4, 1, 1, -1, out, &e), 5);
    int64_t w1[5] = {200, 201, 202, 203, 204};
    T_CHECK(!memcmp(out, w1, sizeof w1));
    /* sample 4 -> shuffle 2 -> rows (1,1),(2,2): seq 1 items 1..2, seq 5 items 0..2 */
    T_EQ_INT(mt_gpt_sample_fetch(&t, &ix, 4, 1, 4, -1, out, &e), 5);
    int64_t w4[5] = {101, 102, 500, 501, 502};
    T_CHECK(!memcmp(out, w4, sizeof w4));
    /* sample 3 -> shuffle 4 -> rows (3,2),(4,1): seq 0 items 2..4, seq 4 items 0..1 */
    T_EQ_INT(mt_gpt_sample_fetch(&t, &ix, 4, 1, 3, -1, out, &e), 5);
    int64_t w3[5] = {2, 3, 4, 400, 401};
    T_CHECK(!memcmp(out, w3, sizeof w3));
    T_EQ_INT(mt_gpt_sample_fetch(&t, &ix, 4, 1, 7, -1, out, &e), -1);
    t.bin_size = 40; /* .bin shorter than the index says */
    T_EQ_INT(mt_gpt_sample_fetch(&t, &ix, 4, 1, 0, -1, out, &e), -1);
    T_CHECK(strstr(e.msg, "past the end"));
    mt_gpt_index_free(&ix);
}

TEST(sampler_ids_3_12)
{
    mt_sampler s = {100, 16, 2, 3, 12};
    mt_err e;
    T_EQ_INT(mt_sampler_check(&s, &e), 0);
    T_EQ_INT(mt_sampler_micro_batches(&s), 2);
    T_EQ_INT(mt_sampler_first(&s, 0, 0, 0), 16);
    T_EQ_INT(mt_sampler_first(&s, 0, 0, 2), 20);
    T_EQ_INT(mt_sampler_first(&s, 0, 1, 1), 24);
    T_EQ_INT(mt_sampler_first(&s, 2, 1, 2), 16 + 24 + 6 + 4);
    /* last complete chunk of 6 ends at 100: starts at 94 = 16 + 78 -> iteration 6, micro 1 */
    T_EQ_INT(mt_sampler_first(&s, 6, 1, 0), 94);
    T_EQ_INT(mt_sampler_first(&s, 7, 0, 0), -1);
    mt_sampler bad = {100, 0, 2, 3, 10};
    T_EQ_INT(mt_sampler_check(&bad, &e), -1);
}

TEST(cache_roundtrip_and_staleness)
{
    char dir[512];
    snprintf(dir, sizeof dir, "%s/cache/sub", tmpdir);
    mt_gpt_cache_key k = {"/data/corpus_text_document", 0, "969, 30, 1", 0, 6, vparams(9), {0}, NULL, NULL};
    mt_err e;
    T_EQ_INT(mt_dataset_fingerprint(NULL, SIZES, 6, &k.fp, &e), 0);
    mt_gpt_index a, b;
    bool cached;
    T_EQ_INT(mt_gpt_index_get(dir, &k, SIZES, 6, &a, &cached, &e), 0);
    T_CHECK(!cached);
    T_EQ_INT(mt_gpt_index_get(dir, &k, SIZES, 6, &b, &cached, &e), 0);
    T_CHECK(cached);
    T_CHECK(!b.own);
    T_CHECK(!memcmp(a.doc_idx, b.doc_idx, 12 * 4));
    T_CHECK(!memcmp(a.sample_idx, b.sample_idx, 15 * 8));
    T_CHECK(!memcmp(a.shuffle_idx, b.shuffle_idx, 14 * 4));
    mt_gpt_index_free(&b);
    char *paths[MT_CACHE_NFILES];
    mt_gpt_cache_paths(dir, &k, paths);
    /* Megatron-Core's name: the MD5 of its description (the hash python3's json.dumps(indent=4) and
     * hashlib give for these parameters, tests/oracle/megatron_cache_names.py). */
    T_CHECK(strstr(paths[MT_CACHE_DOC], "/3526af9f4d25078ee6720d63a0d48d89-GPTDataset-train-document_index.npy"));
    T_CHECK(strstr(paths[MT_CACHE_DESC], "/3526af9f4d25078ee6720d63a0d48d89-GPTDataset-train-description.txt"));
    /* Different sizes (same count) -> fingerprint differs -> stale, rebuilt. */
    int32_t sizes2[6] = {5, 3, 7, 2, 9, 5};
    mt_gpt_cache_key k2 = k;
    T_EQ_INT(mt_dataset_fingerprint(NULL, sizes2, 6, &k2.fp, &e), 0);
    char why[1200];
    bool hit;
    T_EQ_INT(mt_gpt_cache_load(dir, &k2, sizes2, 6, &b, &hit, why, sizeof why, &e), 0);
    T_CHECK(!hit);
    T_CHECK(strstr(why, "description differs"));
    /* Truncated array -> stale. */
    T_EQ_INT(truncate(paths[MT_CACHE_SAMPLE], 100), 0);
    T_EQ_INT(mt_gpt_cache_load(dir, &k, SIZES, 6, &b, &hit, why, sizeof why, &e), 0);
    T_CHECK(!hit);
    T_CHECK(strstr(why, "sample_index.npy"));
    T_EQ_INT(mt_gpt_index_get(dir, &k, SIZES, 6, &b, &cached, &e), 0);
    T_CHECK(!cached);
    mt_gpt_index_free(&b);
    T_EQ_INT(mt_gpt_index_get(dir, &k, SIZES, 6, &b, &cached, &e), 0);
    T_CHECK(cached);
    T_CHECK(!memcmp(a.sample_idx, b.sample_idx, 15 * 8));
    mt_gpt_index_free(&b);
    /* Megatron's description.txt, byte for byte; mt's description names the parameters. */
    mt_map m;
    static const char megatron[] =
        "{\n    \"class\": \"GPTDataset\",\n    \"dataset_path\": \"/data/corpus_text_document\",\n"
        "    \"num_samples\": 9,\n    \"index_split\": \"train\",\n    \"random_seed\": 1234,\n"
        "    \"sequence_length\": 4,\n    \"split\": \"969, 30, 1\",\n    \"split_matrix\": [\n        [\n"
        "            0,\n            0.969\n        ],\n        [\n            0.969,\n            0.999\n"
        "        ],\n        [\n            0.999,\n            1.0\n        ]\n    ],\n    \"tokenizer\": null\n}";
    T_EQ_INT(mt_map_open(&m, paths[MT_CACHE_DESC], &e), 0);
    T_CHECK(m.size == strlen(megatron) && !memcmp(m.data, megatron, m.size));
    mt_map_close(&m);
    T_EQ_INT(mt_map_open(&m, paths[MT_CACHE_MT], &e), 0);
    char *d = strndup((const char *)m.data, m.size);
    T_CHECK(strstr(d, "\"num_samples\": 9") && strstr(d, "\"random_seed\": 1234") && strstr(d, "\"sizes_hash\"") &&
            strstr(d, "\"separate_final_epoch\": true"));
    free(d);
    mt_map_close(&m);
    /* A cache under the earlier names (mt's description as description.json) still loads, and a
     * stale one there is not used. */
    char *old[MT_CACHE_NFILES];
    mt_gpt_cache_paths_legacy(dir, &k, old);
    T_CHECK(strstr(old[MT_CACHE_DOC], "/corpus_text_document-train-9ns-4sl-1234s-") &&
            strstr(old[MT_CACHE_DOC], "-document_index.npy") && !old[MT_CACHE_MT]);
    T_EQ_INT(rename(paths[MT_CACHE_MT], old[MT_CACHE_DESC]), 0);
    for (int i = MT_CACHE_DOC; i <= MT_CACHE_SHUFFLE; i++) T_EQ_INT(rename(paths[i], old[i]), 0);
    T_EQ_INT(unlink(paths[MT_CACHE_DESC]), 0);
    T_EQ_INT(mt_gpt_cache_load(dir, &k, SIZES, 6, &b, &hit, why, sizeof why, &e), 0);
    T_CHECK(hit);
    T_CHECK(!memcmp(a.shuffle_idx, b.shuffle_idx, 14 * 4));
    mt_gpt_index_free(&b);
    T_EQ_INT(mt_gpt_cache_load(dir, &k2, sizes2, 6, &b, &hit, why, sizeof why, &e), 0);
    T_CHECK(!hit);
    /* A cache Megatron wrote (no mt description) loads. */
    T_EQ_INT(unlink(old[MT_CACHE_DESC]), 0);
    T_EQ_INT(mt_gpt_index_get(dir, &k, SIZES, 6, &b, &cached, &e), 0);
    T_CHECK(!cached);
    mt_gpt_index_free(&b);
    T_EQ_INT(unlink(paths[MT_CACHE_MT]), 0);
    T_EQ_INT(mt_gpt_cache_load(dir, &k, SIZES, 6, &b, &hit, why, sizeof why, &e), 0);
    T_CHECK(hit);
    mt_gpt_index_free(&b);
    mt_gpt_cache_paths_free(old);
    mt_gpt_cache_paths_free(paths);
    mt_gpt_index_free(&a);
}

#include "gpt_index_dump.inc"

T_MAIN_BEGIN("test_gpt_index")
if (argc > 2 && !strcmp(argv[1], "--dump")) return dump_main(argv[2]);
{
    const char *d = t_tmpdir();
    if (strlen(d) >= sizeof tmpdir) return 1;
    memcpy(tmpdir, d, strlen(d) + 1);
}
RUN(vector_3_9_n5);
RUN(vector_3_9_n9_separate_final_epoch);
RUN(vector_3_9_n13);
RUN(sample_index_int64_path_matches_int32);
RUN(epochs_and_errors);
RUN(split_examples_3_2);
RUN(num_samples_3_1);
RUN(blend_example_3_10);
RUN(numpy_randomstate_draws);
RUN(npy_header_bytes_as_numpy);
RUN(npy_reader_validates);
RUN(sample_fetch_crosses_sequences);
RUN(sampler_ids_3_12);
RUN(cache_roundtrip_and_staleness);
t_tmpdir_remove();
T_MAIN_END
