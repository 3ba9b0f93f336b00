/* batch.h: continuous batching over the model's paged KV cache (model/gpt.h's mt_gpt_paged), the engine of
 * a server. Sequences join the running batch between steps and leave it when they end, their KV blocks
 * given back at once. A step runs one new token of every sequence that is decoding and, within the step's
 * prefill budget, the next chunk of the prompts still being read (the oldest first), so a long prompt does
 * not hold the others back. Each sequence is what mt_gen_run makes of its prompt alone: its own options
 * and stop strings, its tokens drawn by gen/sample.h from its own MT19937 stream (the seed it is given), and
 * its text and end as gen/seq.h keeps them; only the rounding of the products over the step's rows depends
 * on what else runs. A sequence joins only when its slot and the blocks of its whole length (prompt and
 * new tokens) are free, so a running sequence never waits for memory. */
#ifndef MT_GEN_BATCH_H
#define MT_GEN_BATCH_H

#include <stdint.h>

#include "gen/engine.h"
#include "model/gpt.h"
#include "tok/bpe.h"
#include "util/err.h"
#include "util/vec.h"

typedef struct mt_gen_batch_opts {
    int max_seqs;       /* sequences running at once */
    int max_prefill;    /* prompt tokens read in one step at most, over all the prompts being read */
    int block_size;     /* positions of a KV block */
    int nblocks;        /* blocks of the pool */
} mt_gen_batch_opts;

typedef struct mt_gen_batch mt_gen_batch;

/* An engine over a loaded model (one rank) and its tokenizer (ids >= vocab_size are never drawn; eod -1:
 * none). NULL with e set. */
mt_gen_batch *mt_gen_batch_new(mt_gpt *model, const mt_bpe *bpe, int64_t vocab_size, int64_t eod,
                               const mt_gen_batch_opts *o, mt_err *e);
void mt_gen_batch_free(mt_gen_batch *b);

/* Adds a sequence: prompt (copied), o's max_new_tokens, sampling, stop strings (kept: they must outlive
 * the sequence) and prompt_logprobs, draws from MT19937 seeded seed; out receives its continuation as
 * mt_gen_run fills one, and the prompt's log-probabilities when asked (free it with mt_gen_seq_free); fn
 * (may be NULL) sees each new token as on_token does, called with tag.
 * 0 when it joined; 1 when there is no room now (no slot, or not the blocks of its length: retry after a
 * step); -1 with e set when it can never run (its prompt leaves no position, or needs more blocks than the
 * pool has). */
int mt_gen_batch_add(mt_gen_batch *b, const mt_ids *prompt, const mt_gen_opts *o, uint32_t seed, mt_gen_seq *out,
                     mt_gen_token_fn fn, void *arg, int tag, mt_err *e);
/* One step of every running sequence; those that end leave after their last fn call. The number still
 * running, or -1 with e set (a kernel failed: every running sequence is ended with why "abort"). */
int mt_gen_batch_step(mt_gen_batch *b, mt_err *e);
int mt_gen_batch_running(const mt_gen_batch *b);

#endif
