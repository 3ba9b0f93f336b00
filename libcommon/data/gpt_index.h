/* gpt_index.h: Megatron GPTDataset index building: epochs, document index, sample index, shuffle index.
 *
 * Input is the dataset's per-sequence token counts (int32, 4-byte aligned) and the split's sequence
 * range [lo, hi); nothing else of the dataset is read. Outputs are what core GPTDataset caches:
 *   document_index  int32[num_epochs * (hi - lo)]     sequence ids, shuffled (3.5)
 *   sample_index    int32 or int64 [num_samples + 1][2] (position in document_index, token offset) (3.6)
 *   shuffle_index   uint32 or int64 [num_samples]      (3.7)
 * consuming one RandomState(seed) in Megatron's order. Time and memory are proportional to the outputs;
 * all counts are int64.
 */
#ifndef MT_DATA_GPT_INDEX_H
#define MT_DATA_GPT_INDEX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "io/npy.h"
#include "util/err.h"
#include "util/mt19937.h"

typedef struct mt_gpt_index_params {
    int64_t num_samples;  /* requested samples for this split; < 0 means None (one epoch) */
    int32_t seq_length;   /* L >= 1 */
    int add_extra_token;  /* E: 1 (Megatron default) or 0 */
    uint32_t seed;        /* --seed */
    bool drop_last;       /* true except valid with drop_last_partial_validation_sequence=False */
} mt_gpt_index_params;

typedef struct mt_gpt_plan {
    int64_t tokens_per_epoch; /* T */
    int64_t num_epochs;
    bool separate_final_epoch;
    int64_t num_samples_sans_final_epoch; /* n_before (only meaningful when separate) */
    int64_t num_samples_per_epoch;
    int64_t num_samples;   /* rows of sample_index - 1 = length of shuffle_index = dataset length */
    int64_t doc_index_len; /* num_epochs * (hi - lo) */
    bool sample_idx_64;    /* sample_index dtype int64 (else int32) */
    bool shuffle_idx_64;   /* shuffle_index dtype int64 (else uint32) */
} mt_gpt_plan;

/* Epochs, final-epoch separation, output sizes and dtypes (3.3, 3.6, 3.7), without building anything.
 * n_seq is the whole dataset (the sample_index dtype rule looks at max over all sizes). */
int mt_gpt_plan_make(const int32_t *sizes, size_t n_seq, int64_t lo, int64_t hi, const mt_gpt_index_params *p,
                     mt_gpt_plan *plan, mt_err *e);

typedef struct mt_gpt_index {
    mt_gpt_plan plan;
    int32_t *doc_idx;   /* [plan.doc_index_len] */
    void *sample_idx;   /* int32_t or int64_t [plan.num_samples + 1][2] */
    void *shuffle_idx;  /* uint32_t or int64_t [plan.num_samples] */
    /* Storage: either heap (own = true) or mapped cache files. */
    bool own;
    mt_npy npy[3];
} mt_gpt_index;

/* Builds all three arrays in memory. */
int mt_gpt_index_build(const int32_t *sizes, size_t n_seq, int64_t lo, int64_t hi, const mt_gpt_index_params *p,
                       mt_gpt_index *out, mt_err *e);
void mt_gpt_index_free(mt_gpt_index *ix);
/* Structural checks of arrays read from a cache, in one pass each: every document index entry lies in
 * the split's sequences [lo, hi); the sample index rows advance (document position, offset) strictly,
 * within the document index and each document's length; the shuffle index is a permutation of
 * [0, num_samples). -1 with a message naming the offending file (paths: document, sample, shuffle). */
int mt_gpt_index_check(const mt_gpt_index *ix, const int32_t *sizes, int64_t lo, int64_t hi,
                       const char *const paths[3], mt_err *e);

/* The pieces, exposed for tests and tools. */
/* Megatron _build_document_index: docs lo..hi-1 repeated num_epochs times, shuffled (once, or twice
 * when separate: first num_epochs-1 epochs, then the last). out has num_epochs*(hi-lo) entries. */
void mt_gpt_build_doc_index(int64_t lo, int64_t hi, int64_t num_epochs, bool separate, mt_rs *rs, int32_t *out);
/* helpers.cpp's sample count: drop_last ? (e*T - E) / L : ceil((float)(e*T - E) / L) (single precision). */
int64_t mt_gpt_sample_count(int64_t num_epochs, int64_t tokens_per_epoch, int32_t seq_length, int E, bool drop_last);
/* helpers.cpp build_sample_idx: fills num_samples+1 rows of (doc position, offset) into out, int32 or
 * int64 pairs. Returns -1 (e set) if the data runs out before the last sample. */
int mt_gpt_build_sample_index(const int32_t *sizes, const int32_t *doc_idx, int64_t doc_idx_len, int32_t seq_length,
                              int E, int64_t num_samples, bool is64, void *out, mt_err *e);
/* Shuffle index: arange(0, n_first) shuffled, then arange(n_first, total) shuffled (if non-empty),
 * into a uint32 (is64 false) or int64 array. */
void mt_gpt_build_shuffle_index(int64_t n_first, int64_t total, bool is64, mt_rs *rs, void *out);

/* Accessors that hide the dtype. */
static inline void mt_gpt_sample_row(const mt_gpt_index *ix, int64_t i, int64_t *doc_pos, int64_t *offset)
{
    if (ix->plan.sample_idx_64) {
        const int64_t *s = ix->sample_idx;
        *doc_pos = s[2 * i];
        *offset = s[2 * i + 1];
    } else {
        const int32_t *s = ix->sample_idx;
        *doc_pos = s[2 * i];
        *offset = s[2 * i + 1];
    }
}
static inline int64_t mt_gpt_shuffle_at(const mt_gpt_index *ix, int64_t i)
{
    return ix->plan.shuffle_idx_64 ? ((const int64_t *)ix->shuffle_idx)[i]
                                   : (int64_t)((const uint32_t *)ix->shuffle_idx)[i];
}

#endif
