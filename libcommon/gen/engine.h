/* engine.h: the decoding engine of mt-generate (and of a server over it). A batch of prompts of one
 * length runs through the model once, then one token a step for each prompt, keeping the attention keys
 * and values of the text so far (the model's KV cache); each token is chosen by gen/sample.h from the
 * prompt's own MT19937 stream, and a continuation ends at the end-of-document token, where the stop
 * string appears, after max_new_tokens, or where the model's positions run out. Reading prompts and
 * printing continuations are the caller's. */
#ifndef MT_GEN_ENGINE_H
#define MT_GEN_ENGINE_H

#include <stddef.h>
#include <stdint.h>

#include "gen/sample.h"
#include "model/gpt.h"
#include "tok/bpe.h"
#include "util/err.h"
#include "util/vec.h"

typedef struct mt_gen_opts {
    int64_t max_new_tokens;   /* >= 1: new tokens per prompt at most */
    mt_sampling sampling;
    uint64_t seed;            /* the input's prompt i (from 0) draws from MT19937 seeded (seed + i) mod 2^32 */
    const char *stop;         /* end a continuation before the first place this appears; NULL or "": none */
    const char *const *stops; /* more such strings, n_stops of them (empty ones ignored): the continuation ends
                                 before the first place where any of them (or stop) appears */
    int n_stops;
    int prompt_logprobs;      /* gen/batch.h only: each prompt token after the first gets its log-probability
                                 (out->prompt_logprob), the prompt read a token a step; max_new_tokens may
                                 then be 0 (the prompt scored, nothing generated) */
    int top_logprobs;         /* gen/batch.h only: the likeliest ids at each scored and generated position,
                                 this many (0 to MT_GEN_MAX_TOP), in out->top_id and out->top_lp */
    int logprobs;             /* gen/batch.h: out->logprob gets each generated id's log-probability, else NaN
                                 (the sum over the vocabulary skipped); mt_gen (mt-generate) always fills it */
} mt_gen_opts;

/* Alternatives per position at most (top_logprobs; OpenAI's limit for chat completions). */
#define MT_GEN_MAX_TOP 20

/* One prompt's continuation. */
typedef struct mt_gen_seq {
    mt_ids out;          /* generated ids, the end-of-document token included when it ended the sequence */
    double *logprob;     /* per generated id: its log-probability under the model (raw logits) */
    mt_buf text;         /* the bytes of the generated tokens (none for the end of document), cut before
                            the stop string once it appears */
    size_t safe;         /* text[0..safe) is final while the sequence runs: no later token can cut it
                            (the last L - 1 bytes, L the longest stop string, may still start one) */
    const char *why;     /* NULL while running; then "eod", "stop", "length", or "abort" (ended by the
                            token callback) */
    double *prompt_logprob;   /* with prompt_logprobs: [prompt length - 1], that of prompt token i + 1 after
                                 tokens 0..i; else NULL */
    int ntop;                 /* top_logprobs: the top_id and top_lp of position i are [i * ntop, (i + 1) *
                                 ntop), the likeliest first (ties: the smaller id); positions are the
                                 scored prompt tokens' (prompt length - 1 with prompt_logprobs, else none)
                                 then the generated ones */
    int32_t *top_id;
    double *top_lp;
} mt_gen_seq;

typedef struct mt_gen_stats {
    double first_s;      /* seconds from the start to the first new tokens (the pass over the prompts) */
    double total_s;      /* seconds for the whole batch */
    size_t made;         /* new tokens of all the batch's prompts */
} mt_gen_stats;

/* Called after each new token of sequence b (of a running sequence, or of one that this token ended); for
 * a sequence of no new tokens (prompt_logprobs, max_new_tokens 0), once when its prompt is read, why set.
 * Nonzero ends a running sequence b there (its why "abort"; a client gone, say); the batch goes on with
 * the others, and ends when none is left. */
typedef int (*mt_gen_token_fn)(void *arg, int b, const mt_gen_seq *s);

typedef struct mt_gen mt_gen;

/* An engine over a loaded model and its tokenizer (bpe turns ids into bytes; ids >= vocab_size, the
 * embedding's padding rows, are never chosen; eod -1: none). */
mt_gen *mt_gen_new(mt_gpt *model, const mt_bpe *bpe, int64_t vocab_size, int64_t eod, const mt_gen_opts *o);
void mt_gen_free(mt_gen *g);

/* New tokens a prompt of prompt_len tokens may have: max_new_tokens, fewer where the model's positions
 * run out; <= 0 when the prompt leaves no position. */
int64_t mt_gen_room(const mt_gen *g, size_t prompt_len);

/* Generates for prompts[0..B), all of the same length (with room for a token), prompt b being the input's
 * (first + b)-th: its draws do not depend on the batching. seqs[0..B) receive the continuations (free
 * them with mt_gen_seq_free); on_token (may be NULL) sees each new token as it comes; *st (may be NULL)
 * the batch's timing. 0, or -1 with e set (nothing left allocated). */
int mt_gen_run(mt_gen *g, const mt_ids *prompts, int B, uint64_t first, mt_gen_seq *seqs, mt_gen_token_fn on_token,
               void *arg, mt_gen_stats *st, mt_err *e);
void mt_gen_seq_free(mt_gen_seq *s);

#endif
