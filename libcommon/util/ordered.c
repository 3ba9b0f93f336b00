/* ordered.c: worker pool + in-order emitter over a fixed set of items (see ordered.h). */
#include "util/ordered.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>

#include "util/err.h"

struct mt_ordered {
    pthread_mutex_t mu;
    pthread_cond_t cv_work, cv_done, cv_free;
    int n_items, n_workers;
    void **items;
    /* per-slot state, slot = index of the item in items[] */
    uint64_t *seq;   /* submission number of the item in this slot */
    int *state;      /* 0 free, 1 queued, 2 running, 3 done */
    /* FIFO of slots waiting for a worker */
    int *queue, q_head, q_len;
    uint64_t next_submit, next_emit;
    bool closing, failed;
    mt_work_fn work;
    mt_emit_fn emit;
    void *user;
    void **worker_state;
    pthread_t *workers, emitter;
};

static int slot_of(mt_ordered *o, void *item)
{
    for (int i = 0; i < o->n_items; i++)
        if (o->items[i] == item) return i;
    return -1;
}

typedef struct {
    mt_ordered *o;
    int id;
} worker_arg;

static void *worker_main(void *p)
{
    worker_arg *a = p;
    mt_ordered *o = a->o;
    int id = a->id;
    free(a);
    pthread_mutex_lock(&o->mu);
    for (;;) {
        while (o->q_len == 0 && !o->closing) pthread_cond_wait(&o->cv_work, &o->mu);
        if (o->q_len == 0) break;
        int s = o->queue[o->q_head];
        o->q_head = (o->q_head + 1) % o->n_items;
        o->q_len--;
        o->state[s] = 2;
        pthread_mutex_unlock(&o->mu);
        o->work(o->worker_state ? o->worker_state[id] : NULL, o->items[s]);
        pthread_mutex_lock(&o->mu);
        o->state[s] = 3;
        pthread_cond_broadcast(&o->cv_done);
    }
    pthread_mutex_unlock(&o->mu);
    return NULL;
}

static int find_seq(mt_ordered *o, uint64_t seq)
{
    for (int i = 0; i < o->n_items; i++)
        if (o->state[i] != 0 && o->seq[i] == seq) return i;
    return -1;
}

static void *emitter_main(void *p)
{
    mt_ordered *o = p;
    pthread_mutex_lock(&o->mu);
    for (;;) {
        int s;
        while (((s = find_seq(o, o->next_emit)) < 0 || o->state[s] != 3) &&
               !(o->closing && o->next_emit == o->next_submit))
            pthread_cond_wait(&o->cv_done, &o->mu);
        if (s < 0 || o->state[s] != 3) break; /* closing and everything emitted */
        pthread_mutex_unlock(&o->mu);
        int rc = o->failed ? -1 : o->emit(o->user, o->items[s]);
        pthread_mutex_lock(&o->mu);
        if (rc) o->failed = true;
        o->state[s] = 0;
        o->next_emit++;
        pthread_cond_broadcast(&o->cv_free);
    }
    pthread_mutex_unlock(&o->mu);
    return NULL;
}

mt_ordered *mt_ordered_new(int workers, void **worker_state, void **items, int n_items, mt_work_fn work,
                           mt_emit_fn emit, void *user)
{
    mt_ordered *o = mt_xcalloc(1, sizeof *o);
    pthread_mutex_init(&o->mu, NULL);
    pthread_cond_init(&o->cv_work, NULL);
    pthread_cond_init(&o->cv_done, NULL);
    pthread_cond_init(&o->cv_free, NULL);
    o->n_items = n_items;
    o->n_workers = workers;
    o->items = items;
    o->seq = mt_xcalloc((size_t)n_items, sizeof *o->seq);
    o->state = mt_xcalloc((size_t)n_items, sizeof *o->state);
    o->queue = mt_xcalloc((size_t)n_items, sizeof *o->queue);
    o->work = work;
    o->emit = emit;
    o->user = user;
    o->worker_state = worker_state;
    o->workers = mt_xcalloc((size_t)workers, sizeof *o->workers);
    for (int i = 0; i < workers; i++) {
        worker_arg *a = mt_xmalloc(sizeof *a);
        a->o = o;
        a->id = i;
        if (pthread_create(&o->workers[i], NULL, worker_main, a)) mt_die("cannot start worker thread");
    }
    if (pthread_create(&o->emitter, NULL, emitter_main, o)) mt_die("cannot start writer thread");
    return o;
}

void *mt_ordered_acquire(mt_ordered *o)
{
    pthread_mutex_lock(&o->mu);
    for (;;) {
        if (o->failed) {
            pthread_mutex_unlock(&o->mu);
            return NULL;
        }
        for (int i = 0; i < o->n_items; i++)
            if (o->state[i] == 0 && o->seq[i] != UINT64_MAX) {
                o->seq[i] = UINT64_MAX; /* reserved: acquired but not yet submitted */
                pthread_mutex_unlock(&o->mu);
                return o->items[i];
            }
        pthread_cond_wait(&o->cv_free, &o->mu);
    }
}

void mt_ordered_submit(mt_ordered *o, void *item)
{
    pthread_mutex_lock(&o->mu);
    int s = slot_of(o, item);
    o->seq[s] = o->next_submit++;
    o->state[s] = 1;
    o->queue[(o->q_head + o->q_len) % o->n_items] = s;
    o->q_len++;
    pthread_cond_signal(&o->cv_work);
    pthread_mutex_unlock(&o->mu);
}

int mt_ordered_finish(mt_ordered *o)
{
    pthread_mutex_lock(&o->mu);
    o->closing = true;
    pthread_cond_broadcast(&o->cv_work);
    pthread_cond_broadcast(&o->cv_done);
    pthread_mutex_unlock(&o->mu);
    for (int i = 0; i < o->n_workers; i++) pthread_join(o->workers[i], NULL);
    pthread_join(o->emitter, NULL);
    int rc = o->failed ? -1 : 0;
    free(o->seq);
    free(o->state);
    free(o->queue);
    free(o->workers);
    pthread_mutex_destroy(&o->mu);
    pthread_cond_destroy(&o->cv_work);
    pthread_cond_destroy(&o->cv_done);
    pthread_cond_destroy(&o->cv_free);
    free(o);
    return rc;
}
