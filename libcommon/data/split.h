/* split.h: Megatron's --split string -> per-split sequence ranges, and requested sample counts.
 *
 * Core semantics (parse_and_normalize_split + convert_split_vector_to_split_matrix): every match of
 * [.0-9]+ is a weight, padded with 0 to three, normalized in float64; split k covers
 * [round(c_k * N), round(c_{k+1} * N)) with c the cumulative weights and round half-to-even; a
 * zero-width split is absent (not built). The legacy (v2, 2019-2023) rule is kept as an option.
 */
#ifndef MT_DATA_SPLIT_H
#define MT_DATA_SPLIT_H

#include <stdbool.h>
#include <stdint.h>

#include "util/err.h"

enum { MT_SPLIT_TRAIN, MT_SPLIT_VALID, MT_SPLIT_TEST, MT_NSPLITS };

extern const char *const mt_split_names[MT_NSPLITS]; /* "train", "valid", "test" */

typedef struct mt_range {
    bool present; /* false: split has zero width (core: None, not built) */
    int64_t lo, hi;
    double wlo, whi; /* the normalized cumulative bookends (core), for descriptions */
} mt_range;

/* Parses and normalizes a split string as core does; w receives the three weights. */
int mt_split_weights(const char *split, double w[MT_NSPLITS], mt_err *e);
/* Core: ranges for a dataset of n_seq sequences. */
int mt_split_ranges(const char *split, int64_t n_seq, mt_range out[MT_NSPLITS], mt_err *e);
/* v2/legacy get_train_valid_test_split_: every split is present (possibly empty). */
int mt_split_ranges_legacy(const char *split, int64_t n_seq, mt_range out[MT_NSPLITS], mt_err *e);

/* numpy.sum of a float64 vector (pairwise summation, bit-identical for the sizes used here). */
double mt_np_sum(const double *a, int64_t n);

/* Section 3.1: train = train_samples if > 0 else train_iters * gbs;
 * valid = (train_iters // eval_interval + 1) * eval_iters * gbs; test = eval_iters * gbs.
 * With --train-samples, train_iters for the valid count is train_samples // gbs (Megatron's
 * conversion). Overflow is an error. */
int mt_split_num_samples(int64_t train_iters, int64_t train_samples, int64_t global_batch_size,
                         int64_t eval_interval, int64_t eval_iters, int64_t out[MT_NSPLITS], mt_err *e);

#endif
