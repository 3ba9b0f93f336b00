/* blend.h: BlendedDataset indices (helpers.cpp build_blending_indices and the exhaustive variant) and
 * the per-dataset sizes core >= v0.12 requests from each component.
 *
 * dataset_index is int16 (core), dataset_sample_index int64. For weights w (normalized with numpy's
 * float64 sum) and a blend of N samples: dataset k is built with ceil(ceil(N*w_k) * (1 + surplus))
 * samples (surplus = --mid-level-dataset-surplus, default 0.005) and the blend has sum_k ceil(N*w_k).
 */
#ifndef MT_DATA_BLEND_H
#define MT_DATA_BLEND_H

#include <stdint.h>

#include "util/err.h"

#define MT_BLEND_SURPLUS_DEFAULT 0.005
#define MT_BLEND_MAX_DATASETS 32767

/* w[k] /= numpy.sum(w), as core's normalize(). Errors on negative, non-finite or zero-sum weights. */
int mt_blend_normalize(double *w, int k, mt_err *e);

/* Core >= v0.12 sizes for a requested blend of n samples: per_dataset[k] = ceil(ceil(n*w[k])*(1+surplus)),
 * *blend_size = sum_k ceil(n*w[k]). w must be normalized. */
int mt_blend_sizes(const double *w, int k, int64_t n, double surplus, int64_t *per_dataset, int64_t *blend_size,
                   mt_err *e);

/* build_blending_indices: for s in [0, size): pick the dataset with the largest w[k]*max(s,1) - count[k]
 * (ties to the lowest k). Then checks every dataset k was asked for at most dataset_len[k] samples
 * (dataset_len may be NULL to skip the check) and fails naming the dataset otherwise, as core does. */
int mt_blend_build(const double *w, int k, int64_t size, const int64_t *dataset_len, int16_t *dataset_index,
                   int64_t *dataset_sample_index, mt_err *e);

/* build_exhaustive_blending_indices (core, weights omitted): exactly counts[k] samples from each dataset,
 * interleaved by the same error rule over the datasets not yet exhausted. Output length sum(counts). */
int mt_blend_build_exhaustive(const int64_t *counts, int k, int16_t *dataset_index, int64_t *dataset_sample_index,
                              mt_err *e);

#endif
