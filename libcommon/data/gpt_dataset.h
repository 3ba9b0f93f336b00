/* gpt_dataset.h: the GPT training data as Megatron-Core's BlendedMegatronDatasetBuilder assembles it.
 *
 * From --data-path (one prefix, or weight/prefix pairs, or several prefixes without weights), --split,
 * the sequence length, the seed and the requested samples per split, this opens every indexed dataset,
 * builds (or loads from the cache directory) each component's GPT indices per split and, for blends,
 * the blending indices; then sample i of a split is seq_length + 1 tokens read from the mmap'd .bin.
 * mt-shuffle precomputes the caches with it; mt-train and mt-eval read batches through it.
 *
 * Core rules followed (spec 3.10): a single prefix without a weight is used directly; otherwise the
 * datasets are blended. With weights, component k of a split of N samples is built with
 * ceil(ceil(N*w_k) * (1 + surplus)) samples and the blend has sum_k ceil(N*w_k); without weights every
 * component is one epoch (num_samples None), the weights are the component lengths and the blend has
 * min(N, sum of lengths); a component without samples in a split is an error, as core's BlendedDataset
 * asserts every weight is positive. Every component uses the same seed.
 */
#ifndef MT_DATA_GPT_DATASET_H
#define MT_DATA_GPT_DATASET_H

#include <stdbool.h>
#include <stdint.h>

#include "data/gpt_index.h"
#include "data/indexed.h"
#include "data/sample.h"
#include "data/split.h"
#include "util/err.h"

typedef struct mt_gpt_data_args {
    int n_args;               /* --data-path words as given */
    char *const *args;
    const char *split;        /* NULL: "969, 30, 1" */
    int32_t seq_length;
    uint32_t seed;
    int64_t num_samples[MT_NSPLITS]; /* requested per split (mt_split_num_samples) */
    const char *cache_dir;    /* NULL: build in memory only */
    double surplus;           /* --mid-level-dataset-surplus, 0.005 */
    /* --vocab-file and --merge-file as given, of a GPT2BPETokenizer (NULL: none known): Megatron's
     * cache descriptions, and so the cache names, hold them */
    const char *vocab_file, *merge_file;
    /* Called before each index build or load (may be NULL): what = "train", ..., cached tells if
     * the index came from the cache. */
    void (*note)(void *ctx, const char *prefix, int split, bool cached, const mt_gpt_plan *plan);
    void *note_ctx;
} mt_gpt_data_args;

typedef struct mt_gpt_source {
    char *prefix;
    mt_indexed ds;
    int32_t *sizes;           /* aligned copy of the .idx sizes array */
    mt_tokens tok;
    mt_range range[MT_NSPLITS];
    mt_gpt_index ix[MT_NSPLITS];
    bool built[MT_NSPLITS];
} mt_gpt_source;

typedef struct mt_gpt_split_data {
    bool present;             /* false: the split has zero width, or the dataset is empty */
    int64_t length;           /* samples in the split */
    int64_t requested;
    /* blends only: */
    int16_t *ds_index;        /* [length] */
    int64_t *ds_sample_index; /* [length] */
    bool blend_cached;
} mt_gpt_split_data;

typedef struct mt_gpt_data {
    int n;                    /* datasets */
    mt_gpt_source *src;
    double *weights;          /* normalized, NULL for a single unweighted prefix */
    bool blended;
    char *split_string;
    int32_t seq_length;
    mt_gpt_split_data split[MT_NSPLITS];
} mt_gpt_data;

/* Parses the --data-path words into prefixes and (optional) weights. Weighted form: an even number of
 * words where every other word, starting with the first, is a number. */
int mt_data_path_parse(int n, char *const *args, char ***prefixes, double **weights, int *count, mt_err *e);

/* The index cache directory: given, or index-cache/ in the directory of the first dataset prefix of the
 * --data-path words (malloc'd). mt-shuffle, mt-train and mt-eval agree on it. */
char *mt_default_cache_dir(const char *given, int n_args, const char *const *args);

int mt_gpt_data_open(mt_gpt_data *d, const mt_gpt_data_args *a, mt_err *e);
void mt_gpt_data_close(mt_gpt_data *d);

/* Sample i of a split: seq_length + 1 tokens into out. Returns the number of real tokens (the rest
 * is padded with -1 at the very end of the data) or -1 with e set. */
int64_t mt_gpt_data_sample(const mt_gpt_data *d, int split, int64_t i, int64_t *out, mt_err *e);
/* Which component and which of its samples blend sample i is (component 0, i for a single dataset). */
void mt_gpt_data_locate(const mt_gpt_data *d, int split, int64_t i, int *component, int64_t *sample);

#endif
