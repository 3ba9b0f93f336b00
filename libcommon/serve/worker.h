/* worker.h: the engine thread of mt-serve: takes jobs off the queue one at a time and runs each with
 * gen/engine.h, as mt-generate would run the same prompts: choice k of a request (prompt k / n) draws
 * from MT19937 seeded (seed + k) mod 2^32, as mt-generate's k-th prompt, so a request's greedy and seeded
 * tokens are mt-generate's; the n choices of a prompt run as one batch (at most max_batch at once),
 * whose results do not depend on the batching. A streamed job gets its events as its tokens come; a job
 * whose client has gone stops at its next token. One job at a time is the first step: continuous batching
 * replaces this file, not the queue (serve/queue.h). */
#ifndef MT_SERVE_WORKER_H
#define MT_SERVE_WORKER_H

#include "config/tokenizer.h"
#include "model/gpt.h"
#include "serve/queue.h"
#include "util/err.h"

typedef struct mt_serve_worker_opts {
    mt_gpt *model;            /* used by the worker's thread only */
    const mt_tokenizer *tok;
    const char *model_name;   /* the "model" of the responses */
    int max_batch;            /* choices run together at most */
} mt_serve_worker_opts;

typedef struct mt_serve_worker mt_serve_worker;

/* Starts the thread over q. NULL with e set when it cannot start. */
mt_serve_worker *mt_serve_worker_start(const mt_serve_worker_opts *o, mt_serve_queue *q, mt_err *e);
/* Waits for the thread to end (after mt_serve_queue_close, once the jobs left are done) and frees w. */
void mt_serve_worker_join(mt_serve_worker *w);

#endif
