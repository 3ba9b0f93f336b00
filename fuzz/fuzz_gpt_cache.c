/* fuzz_gpt_cache.c: the index cache of mt-shuffle and mt-train: "document_index.npy" FZ_SEP
 * "sample_index.npy" FZ_SEP "shuffle_index.npy" under the description that a fixed small dataset and
 * split would have (any other description is only compared byte for byte and rebuilt), loaded as
 * mt_gpt_cache_load loads it: a hit must hold together, anything else is a miss or one error.
 * With MT_FUZZ_SEED=FILE set, writes the valid cache of that key to FILE as a seed and exits. */
#include "fuzz.h"

#include "data/gpt_cache.h"
#include "io/mapfile.h"

static const int32_t sizes[12] = {5, 9, 3, 17, 1, 8, 8, 2, 30, 4, 6, 11};

static mt_gpt_cache_key key(void)
{
    mt_gpt_cache_key k = {0};
    k.dataset_path = "corpus";
    k.split_index = 0;
    k.split_string = "80,20,0";
    k.lo = 0;
    k.hi = 10;
    k.params.num_samples = 40;
    k.params.seq_length = 7;
    k.params.add_extra_token = 1;
    k.params.seed = 1234;
    k.params.drop_last = true;
    k.fp.idx_size = 1000;
    k.fp.n_seq = 12;
    k.fp.sizes_hash = mt_sizes_hash(sizes, 12);
    return k;
}

static void write_seed(const char *out)
{
    mt_gpt_cache_key k = key();
    mt_gpt_index ix;
    mt_err e;
    if (mt_gpt_index_build(sizes, 12, k.lo, k.hi, &k.params, &ix, &e) || mt_gpt_cache_save(fz_dir(), &k, &ix, &e)) {
        fprintf(stderr, "%s\n", e.msg);
        exit(1);
    }
    char *paths[MT_CACHE_NFILES];
    mt_gpt_cache_paths(fz_dir(), &k, paths);
    FILE *f = fopen(out, "wb");
    for (int i = MT_CACHE_DOC; i <= MT_CACHE_SHUFFLE; i++) {
        mt_map m;
        if (mt_map_open(&m, paths[i], &e)) exit(1);
        if (i > MT_CACHE_DOC) fwrite(FZ_SEP, 1, FZ_SEP_LEN, f);
        fwrite(m.data, 1, m.size, f);
        mt_map_close(&m);
    }
    fclose(f);
    mt_gpt_cache_paths_free(paths);
    mt_gpt_index_free(&ix);
    exit(0);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    if (getenv("MT_FUZZ_SEED")) write_seed(getenv("MT_FUZZ_SEED"));
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static char *paths[MT_CACHE_NFILES];
    static mt_gpt_cache_key k;
    if (!paths[0]) {
        k = key();
        mt_gpt_cache_paths(fz_dir(), &k, paths);
        mt_gpt_plan plan;
        mt_err e;
        if (mt_gpt_plan_make(sizes, 12, k.lo, k.hi, &k.params, &plan, &e)) abort();
        char *desc = mt_gpt_cache_description(&k, &plan);
        const char *p = fz_write(strrchr(paths[MT_CACHE_MT], '/') + 1, desc, strlen(desc));
        if (strcmp(p, paths[MT_CACHE_MT])) abort();
        free(desc);
        desc = mt_gpt_cache_megatron_description(&k);
        p = fz_write(strrchr(paths[MT_CACHE_DESC], '/') + 1, desc, strlen(desc));
        if (strcmp(p, paths[MT_CACHE_DESC])) abort();
        free(desc);
    }
    fz_part part[3];
    fz_split(data, size, part, 3);
    for (int i = 0; i < 3; i++) fz_write(strrchr(paths[MT_CACHE_DOC + i], '/') + 1, part[i].p, part[i].n);
    mt_gpt_index ix;
    bool hit;
    char why[512];
    mt_err e;
    if (mt_gpt_cache_load(fz_dir(), &k, sizes, 12, &ix, &hit, why, sizeof why, &e) == 0 && hit) {
        /* a hit is used as training uses it: every sample's documents and their lengths */
        const mt_gpt_plan *pl = &ix.plan;
        for (int64_t i = 0; i < pl->num_samples; i++) {
            int64_t s = pl->shuffle_idx_64 ? ((int64_t *)ix.shuffle_idx)[i] : ((uint32_t *)ix.shuffle_idx)[i];
            int64_t d0 = pl->sample_idx_64 ? ((int64_t *)ix.sample_idx)[2 * s] : ((int32_t *)ix.sample_idx)[2 * s];
            int64_t d1 = pl->sample_idx_64 ? ((int64_t *)ix.sample_idx)[2 * s + 2] : ((int32_t *)ix.sample_idx)[2 * s + 2];
            for (int64_t d = d0; d <= d1 && d < pl->doc_index_len; d++)
                if (ix.doc_idx[d] < k.lo || ix.doc_idx[d] >= k.hi || sizes[ix.doc_idx[d]] < 0) abort();
        }
        mt_gpt_index_free(&ix);
    } else if (getenv("MT_FUZZ_VERBOSE")) {
        fprintf(stderr, "miss: %s\n", why);
    }
    return 0;
}
