/* sample.h: reading GPT samples out of the token data, and the pretraining sampler's id arithmetic.
 *
 * A sample is seq_length + E consecutive tokens of the shuffled document order, crossing sequence
 * boundaries (spec 3.8). The token data is described by mt_tokens: the mmap'd .bin, the Megatron dtype
 * code of its items and the .idx sizes/pointers arrays (pointers are read byte-wise, so an unaligned
 * view straight into the .idx is fine). The sampler (3.12, MegatronPretrainingSampler) maps
 * (iteration, micro-batch, data-parallel rank) to global sample ids.
 */
#ifndef MT_DATA_SAMPLE_H
#define MT_DATA_SAMPLE_H

#include <stdint.h>

#include "data/gpt_index.h"
#include "util/err.h"

typedef struct mt_tokens {
    const unsigned char *bin; /* mmap of <prefix>.bin */
    uint64_t bin_size;
    int dtype;                /* .idx dtype code: 1 u8, 2 i8, 3 i16, 4 i32, 5 i64, 8 u16 */
    const int32_t *sizes;     /* items per sequence */
    const void *pointers;     /* int64 LE byte offsets into .bin, one per sequence (any alignment) */
    uint64_t n_seq;
} mt_tokens;

/* Bytes per item for a dtype code usable for tokens, 0 otherwise (6/7 floats are rejected). */
int mt_tokens_itemsize(int dtype);

/* Reads count items of sequence seq starting at item offset into out (as int64), bounds-checked
 * against sizes and the .bin size. */
int mt_tokens_read(const mt_tokens *t, int64_t seq, int64_t offset, int64_t count, int64_t *out, mt_err *e);

/* Sample i (0 <= i < plan.num_samples) of a built split: shuffle, then sample_index rows j and j+1.
 * Writes seq_length + E tokens; a short sample (end of data, drop_last false) is padded with pad.
 * Returns the number of real tokens, or -1 with e set. */
int64_t mt_gpt_sample_fetch(const mt_tokens *t, const mt_gpt_index *ix, int32_t seq_length, int E, int64_t i,
                            int64_t pad, int64_t *out, mt_err *e);

typedef struct mt_sampler {
    int64_t total_samples;    /* dataset (or blend) length */
    int64_t consumed_samples; /* restored from the checkpoint; 0 for a fresh run */
    int64_t micro_batch_size;
    int64_t data_parallel_size;
    int64_t global_batch_size; /* multiple of micro_batch_size * data_parallel_size */
} mt_sampler;

int mt_sampler_check(const mt_sampler *s, mt_err *e);
/* First global sample id of micro-batch m of iteration b (counted from consumed_samples) on rank r;
 * the micro-batch is ids [first, first + micro_batch_size). Returns -1 when that micro-step's
 * mbs*dp chunk would not be complete within total_samples (the sampler drops it). */
int64_t mt_sampler_first(const mt_sampler *s, int64_t iteration, int64_t micro, int64_t rank);
/* Micro-batches per iteration: gbs / (mbs * dp). */
int64_t mt_sampler_micro_batches(const mt_sampler *s);

#endif
