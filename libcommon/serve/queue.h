/* queue.h: the hand-off between the HTTP threads and the engine: a job (one request, its results and its
 * stream of events) and the bounded FIFO of jobs waiting for the engine.
 *
 * The engine (serve/worker.h) batches the jobs continuously: a job
 * holds everything the engine must know up front (a checked mt_serve_req); the engine reports through the
 * job only (events appended to its stream as tokens come, results and done at the end); the connection
 * tells the engine through the job only that its client has gone. A batching engine takes jobs off the
 * queue whenever it has room, lets them join the running batch at the next decoding step and finishes
 * each on its own. */
#ifndef MT_SERVE_QUEUE_H
#define MT_SERVE_QUEUE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "gen/engine.h"
#include "serve/request.h"
#include "util/vec.h"

typedef struct mt_serve_job {
    mt_serve_req req;           /* what was asked (owned) */
    char id[40];                /* "cmpl-...", the response's id */
    int64_t created;            /* Unix time of the request */
    double arrived;             /* mt_now() when its first byte came (time to first token) */
    atomic_int gone;            /* set by the connection when its client has gone; the engine stops the job */
    pthread_mutex_t mu;         /* guards what follows */
    pthread_cond_t cv;          /* signalled when events are added and when the job is done */
    mt_gen_seq *seqs;           /* req.n_prompts * req.n choices, filled by the engine */
    int done;                   /* the engine has finished with the job (seqs final, or failed) */
    int failed;                 /* the engine failed: err says why */
    char err[256];
    mt_buf events;              /* a stream's bytes so far (Server-Sent Events) */
    size_t made;                /* new tokens of all its choices so far */
    int refs;
    struct mt_serve_job *next;  /* in the queue */
} mt_serve_job;

/* A job of req (taken over: req is left empty), one reference held by the caller. */
mt_serve_job *mt_serve_job_new(mt_serve_req *req);
void mt_serve_job_ref(mt_serve_job *j);
void mt_serve_job_unref(mt_serve_job *j);
/* The engine is done with j (results or failure set): wakes its waiters. */
void mt_serve_job_finish(mt_serve_job *j);
/* Waits until j is done. */
void mt_serve_job_wait(mt_serve_job *j);
/* Waits until j is done or seconds have passed: whether it is done. */
int mt_serve_job_wait_for(mt_serve_job *j, double seconds);

typedef struct mt_serve_queue {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    mt_serve_job *head, *tail;
    int n, cap;                 /* waiting jobs, at most cap */
    int closed;
} mt_serve_queue;

enum { MT_SERVE_QUEUE_FULL = -1, MT_SERVE_QUEUE_CLOSED = -2 };

void mt_serve_queue_init(mt_serve_queue *q, int cap);
void mt_serve_queue_destroy(mt_serve_queue *q);
/* Appends j (taking a reference): 0, MT_SERVE_QUEUE_FULL when cap jobs wait already, or
 * MT_SERVE_QUEUE_CLOSED. */
int mt_serve_queue_push(mt_serve_queue *q, mt_serve_job *j);
/* The oldest waiting job (its reference passes to the caller), waiting for one; NULL once the queue is
 * closed and empty. */
mt_serve_job *mt_serve_queue_pop(mt_serve_queue *q);
/* The oldest waiting job, or NULL when none waits (never waits). */
mt_serve_job *mt_serve_queue_try_pop(mt_serve_queue *q);
/* Jobs waiting now. */
int mt_serve_queue_waiting(mt_serve_queue *q);
/* No more pushes; pop returns the jobs still waiting, then NULL. */
void mt_serve_queue_close(mt_serve_queue *q);

#endif
