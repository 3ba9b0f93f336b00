/* queue.c: jobs and the bounded FIFO between the HTTP threads and the engine (queue.h). */
#include "serve/queue.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

mt_serve_job *mt_serve_job_new(mt_serve_req *req)
{
    mt_serve_job *j = mt_xcalloc(1, sizeof *j);
    j->req = *req;
    memset(req, 0, sizeof *req);
    atomic_init(&j->gone, 0);
    pthread_mutex_init(&j->mu, NULL);
    pthread_cond_init(&j->cv, NULL);
    j->refs = 1;
    return j;
}

void mt_serve_job_ref(mt_serve_job *j)
{
    pthread_mutex_lock(&j->mu);
    j->refs++;
    pthread_mutex_unlock(&j->mu);
}

void mt_serve_job_unref(mt_serve_job *j)
{
    if (!j) return;
    pthread_mutex_lock(&j->mu);
    int left = --j->refs;
    pthread_mutex_unlock(&j->mu);
    if (left) return;
    int n = j->req.n_prompts * j->req.n;
    if (j->seqs)
        for (int k = 0; k < n; k++) mt_gen_seq_free(&j->seqs[k]);
    free(j->seqs);
    free(j->events.p);
    mt_serve_req_free(&j->req);
    pthread_cond_destroy(&j->cv);
    pthread_mutex_destroy(&j->mu);
    free(j);
}

void mt_serve_job_finish(mt_serve_job *j)
{
    pthread_mutex_lock(&j->mu);
    j->done = 1;
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
}

void mt_serve_job_wait(mt_serve_job *j)
{
    pthread_mutex_lock(&j->mu);
    while (!j->done) pthread_cond_wait(&j->cv, &j->mu);
    pthread_mutex_unlock(&j->mu);
}

int mt_serve_job_wait_for(mt_serve_job *j, double seconds)
{
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    double ns = (double)t.tv_nsec + seconds * 1e9;
    t.tv_sec += (time_t)(ns / 1e9);
    t.tv_nsec = (long)(ns - (double)(time_t)(ns / 1e9) * 1e9);
    pthread_mutex_lock(&j->mu);
    while (!j->done && pthread_cond_timedwait(&j->cv, &j->mu, &t) == 0) continue;
    int done = j->done;
    pthread_mutex_unlock(&j->mu);
    return done;
}

void mt_serve_queue_init(mt_serve_queue *q, int cap)
{
    memset(q, 0, sizeof *q);
    pthread_mutex_init(&q->mu, NULL);
    pthread_cond_init(&q->cv, NULL);
    q->cap = cap;
}

void mt_serve_queue_destroy(mt_serve_queue *q)
{
    mt_serve_job *j;
    while ((j = q->head)) {
        q->head = j->next;
        mt_serve_job_unref(j);
    }
    pthread_cond_destroy(&q->cv);
    pthread_mutex_destroy(&q->mu);
}

int mt_serve_queue_push(mt_serve_queue *q, mt_serve_job *j)
{
    pthread_mutex_lock(&q->mu);
    int rc = q->closed ? MT_SERVE_QUEUE_CLOSED : q->n >= q->cap ? MT_SERVE_QUEUE_FULL : 0;
    if (!rc) {
        mt_serve_job_ref(j);
        j->next = NULL;
        if (q->tail) q->tail->next = j;
        else q->head = j;
        q->tail = j;
        q->n++;
        pthread_cond_signal(&q->cv);
    }
    pthread_mutex_unlock(&q->mu);
    return rc;
}

static mt_serve_job *pop(mt_serve_queue *q, int wait)
{
    pthread_mutex_lock(&q->mu);
    while (wait && !q->head && !q->closed) pthread_cond_wait(&q->cv, &q->mu);
    mt_serve_job *j = q->head;
    if (j) {
        q->head = j->next;
        if (!q->head) q->tail = NULL;
        q->n--;
        j->next = NULL;
    }
    pthread_mutex_unlock(&q->mu);
    return j;
}

mt_serve_job *mt_serve_queue_pop(mt_serve_queue *q) { return pop(q, 1); }
mt_serve_job *mt_serve_queue_try_pop(mt_serve_queue *q) { return pop(q, 0); }

int mt_serve_queue_waiting(mt_serve_queue *q)
{
    pthread_mutex_lock(&q->mu);
    int n = q->n;
    pthread_mutex_unlock(&q->mu);
    return n;
}

void mt_serve_queue_close(mt_serve_queue *q)
{
    pthread_mutex_lock(&q->mu);
    q->closed = 1;
    pthread_cond_broadcast(&q->cv);
    pthread_mutex_unlock(&q->mu);
}
