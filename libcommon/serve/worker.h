/* worker.h: the engine thread of mt-serve: continuous batching (gen/batch.h) over the jobs of the queue.
 * Jobs are taken off the queue as they come and their choices join the running batch at the next step
 * while there is room (a sequence slot and the KV blocks of its length), the oldest job's first; a choice
 * that ends leaves at once and frees its room; a job is done when all its choices are. Choice k of a
 * request (prompt k / n) draws from MT19937 seeded (seed + k) mod 2^32, as mt-generate's k-th prompt, so
 * a request's greedy and seeded tokens are mt-generate's whatever runs beside it. A streamed job gets its
 * events as its tokens come; a job whose client has gone ends its choices at their next token. */
#ifndef MT_SERVE_WORKER_H
#define MT_SERVE_WORKER_H

#include "config/tokenizer.h"
#include "model/gpt.h"
#include "serve/metrics.h"
#include "serve/queue.h"
#include "util/err.h"

typedef struct mt_serve_worker_opts {
    mt_gpt *model;            /* used by the worker's thread only */
    const mt_tokenizer *tok;
    const char *model_name;   /* the "model" of the responses */
    int max_batch;            /* sequences running together at most */
    int max_prefill;          /* prompt tokens read in one step at most (--max-prefill-tokens) */
    int64_t kv_tokens;        /* positions of the KV cache (--kv-cache-tokens); 0: the model's positions times
                                 the smaller of max_batch and 8 */
    mt_serve_metrics *metrics; /* where tokens and their latencies are counted */
} mt_serve_worker_opts;

typedef struct mt_serve_worker mt_serve_worker;

/* Makes the engine (its KV cache) and starts the thread over q. NULL with e set when it cannot. */
mt_serve_worker *mt_serve_worker_start(const mt_serve_worker_opts *o, mt_serve_queue *q, mt_err *e);
/* Sequences in the running batch (any thread). */
int mt_serve_worker_running(mt_serve_worker *w);
/* Waits for the thread to end (after mt_serve_queue_close, once the jobs left are done) and frees w. */
void mt_serve_worker_join(mt_serve_worker *w);

#endif
