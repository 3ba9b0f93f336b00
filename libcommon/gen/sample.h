/* sample.h: choosing the next token from a model's logits, as Hugging Face's generate orders the
 * steps: repetition penalty (a logit > 0 divided by the penalty, otherwise multiplied; the ids of the
 * sequence given, nothing kept from one call to the next), temperature, top-k, top-p, then one draw from
 * the renormalized probabilities. Top-p keeps the most likely tokens up to the first whose cumulative
 * probability exceeds p, as Megatron's modify_logits_for_top_p_filtering: a token is kept while the
 * probability of those before it is at most p (Hugging Face's TopPLogitsWarper keeps it only while that
 * is below p, one token fewer where a cumulative probability equals p exactly, e.g. two equal logits and
 * p 0.5). Greedy (or temperature 0) takes the first largest logit after the penalty. Draws come from
 * numpy's MT19937 seeded with --seed, 53 bits per draw, so a seeded run repeats exactly; a draw takes the
 * first kept token, from the likeliest (ties: the smaller id), whose running probability exceeds it, so
 * that the numbers' last bits, which a batch may change, rarely change a choice. Nothing sorts the
 * vocabulary: top-k selects its k, and top-p's boundary and the draw are found by partitions on mass. */
#ifndef MT_GEN_SAMPLE_H
#define MT_GEN_SAMPLE_H

#include <stddef.h>
#include <stdint.h>

#include "util/mt19937.h"

typedef struct mt_sampling {
    int greedy;                  /* or temperature == 0 */
    double temperature;          /* > 0 */
    int top_k;                   /* 0: all */
    double top_p;                /* (0, 1]; 1: all */
    double repetition_penalty;   /* >= 1... any > 0; 1: none */
} mt_sampling;

/* Scratch for one vocabulary of V entries. */
typedef struct mt_sampler {
    int V;
    double *x;                   /* adjusted logits */
    struct mt_cand { double v; int32_t id; } *c;
    uint8_t *seen;               /* repetition penalty: ids already in the sequence */
} mt_sampler;

void mt_sampler_init(mt_sampler *s, int V);
void mt_sampler_free(mt_sampler *s);
/* The next id from logits[0..V) given the sequence so far (prev, for the penalty). *logprob receives the
 * chosen id's log-probability under the model itself (log-softmax of the raw logits); logprob NULL skips
 * that sum over the vocabulary. */
int32_t mt_sample_next(mt_sampler *s, const float *logits, const mt_sampling *p, const uint32_t *prev, size_t nprev,
                       mt_rs *rng, double *logprob);

/* The log-probability of id under logits[0..V) (log-softmax). */
double mt_logprob(const float *logits, int V, int32_t id);
/* The n likeliest ids of logits[0..V) (n <= V), the likeliest first (ties: the smaller id), into ids[0..n)
 * and their log-probabilities into lps[0..n). */
void mt_top_logprobs(const float *logits, int V, int n, int32_t *ids, double *lps);

#endif
