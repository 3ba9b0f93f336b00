/* worker.c: the engine thread, continuous batching over the queue's jobs (worker.h). */
#include "serve/worker.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gen/batch.h"
#include "serve/response.h"
#include "util/progress.h"
#include "util/utf8.h"

/* A job taken off the queue: its choices not yet in the batch (from next), those not yet ended (left). */
typedef struct active {
    const struct mt_serve_worker *w;
    mt_serve_job *j;
    mt_gen_opts go;
    int K, next, left;
    size_t *sent;          /* per choice: the bytes of its text already streamed */
    double *last;          /* per choice: mt_now() at its last new token, 0 before its first */
    struct active *link;
} active;

struct mt_serve_worker {
    mt_serve_worker_opts o;
    mt_serve_queue *q;
    mt_gen_batch *b;
    pthread_t thread;
    atomic_int running;    /* sequences in the batch, for /metrics */
    active *head, *tail;   /* in the order they came */
};

/* Appends a stream event (under j->mu) and wakes the connection. */
static void push_text(const active *a, int k, const char *text, size_t n, const char *finish)
{
    mt_serve_event_text(&a->j->events, a->j, a->w->o.model_name, k, text, n, finish);
    pthread_cond_broadcast(&a->j->cv);
}

/* Whether token id's text holds a newline (two in a row: twice). */
static int ends_line(const mt_bpe *bpe, uint32_t id, int twice)
{
    mt_buf t = {0};
    mt_err e;
    int hit = !mt_bpe_decode(bpe, &id, 1, &t, &e) && t.n && memmem(t.p, t.n, twice ? "\n\n" : "\n", twice ? 2 : 1);
    free(t.p);
    return hit;
}

static int on_token(void *arg, int k, const mt_gen_seq *s)
{
    active *a = arg;
    mt_serve_job *j = a->j;
    int stop = atomic_load(&j->gone);
    if (!s->out.n) {   /* a prompt scored, nothing generated */
        a->left--;
        return 0;
    }
    double now = mt_now();
    mt_serve_metrics_token(a->w->o.metrics, a->last[k] == 0, now - (a->last[k] == 0 ? j->arrived : a->last[k]));
    a->last[k] = now;
    if ((j->req.stop_on_eol || j->req.stop_on_double_eol) && !s->why)
        stop |= ends_line(a->w->o.tok->bpe, s->out.p[s->out.n - 1], j->req.stop_on_double_eol);
    pthread_mutex_lock(&j->mu);
    j->made++;
    if (j->req.stream) {
        /* the text no later token can take back, without a character still incomplete; all of it at the end */
        size_t upto = s->why ? s->text.n : mt_utf8_whole(s->text.p, a->sent[k], s->safe);
        if (upto < a->sent[k]) upto = a->sent[k];   /* (the engine never cuts into its safe text) */
        if (upto > a->sent[k] || s->why)
            push_text(a, k, s->text.p + a->sent[k], upto - a->sent[k], s->why ? mt_serve_finish_reason(s->why) : NULL);
        a->sent[k] = upto;
    }
    pthread_mutex_unlock(&j->mu);
    if (s->why || stop) a->left--;   /* this choice ends here */
    return stop;
}

/* The job has no choice left in the batch: its last events, then done (failed when j->err says why). */
static void finish(mt_serve_worker *w, active *a)
{
    mt_serve_job *j = a->j;
    const mt_serve_req *r = &j->req;
    const char *failure = *j->err ? j->err : NULL;
    pthread_mutex_lock(&j->mu);
    for (int k = 0; k < a->K; k++)   /* choices that never ran (a client gone before their turn) */
        if (!j->seqs[k].why) j->seqs[k].why = "abort";
    if (failure) {
        j->failed = 1;
        if (r->stream) {
            mt_serve_fail f;
            mt_serve_fail_set(&f, 500, NULL, "%s", failure);
            f.type = "server_error";
            char *s = mt_serve_error_json(&f);
            mt_buf_append(&j->events, "data: ", 6);
            mt_buf_append(&j->events, s, strlen(s));
            mt_buf_append(&j->events, "\n\n", 2);
            free(s);
        }
    } else if (r->stream && !atomic_load(&j->gone)) {
        if (r->include_usage) mt_serve_event_usage(&j->events, j, w->o.model_name);
        mt_serve_event_done(&j->events);
    }
    size_t made = j->made;
    pthread_mutex_unlock(&j->mu);
    if (atomic_load(&j->gone)) fprintf(stderr, "%s: %s: the client has gone: stopped after %zu new tokens\n", mt_progname(), j->id, made);
    else if (failure) fprintf(stderr, "%s: %s: %s\n", mt_progname(), j->id, failure);
    free(a->sent);
    free(a->last);
    mt_serve_job_finish(j);
    mt_serve_job_unref(j);
    free(a);
}

/* A job off the queue joins the list. */
static void take(mt_serve_worker *w, mt_serve_job *j)
{
    active *a = mt_xcalloc(1, sizeof *a);
    const mt_serve_req *r = &j->req;
    a->w = w;
    a->j = j;
    a->K = a->left = r->n_prompts * r->n;
    a->go = (mt_gen_opts){r->max_tokens, r->sampling, r->seed, NULL, (const char *const *)r->stops, r->n_stops,
                         r->prompt_logprobs, r->top_logprobs, r->logprobs};
    a->sent = mt_xcalloc((size_t)a->K, sizeof *a->sent);
    a->last = mt_xcalloc((size_t)a->K, sizeof *a->last);
    pthread_mutex_lock(&j->mu);
    j->seqs = mt_xcalloc((size_t)a->K, sizeof *j->seqs);
    pthread_mutex_unlock(&j->mu);
    if (w->tail) w->tail->link = a;
    else w->head = a;
    w->tail = a;
}

/* Lets the waiting choices join while there is room, the oldest job's first; jobs that are over are
 * finished and dropped. */
static void admit(mt_serve_worker *w)
{
    int room = 1;
    active **pa = &w->head, *prev = NULL;
    while (*pa) {
        active *a = *pa;
        mt_serve_job *j = a->j;
        const mt_serve_req *r = &j->req;
        const char *failure = NULL;
        mt_err e;
        if (atomic_load(&j->gone)) {   /* its choices not yet running never will */
            a->left -= a->K - a->next;
            a->next = a->K;
        }
        while (room && a->next < a->K && !failure) {
            int k = a->next, rc = mt_gen_batch_add(w->b, &r->prompts[k / r->n], &a->go, (uint32_t)(r->seed + (uint32_t)k),
                                                   &j->seqs[k], on_token, a, k, &e);
            if (rc == 1) room = 0;
            else if (rc < 0) failure = e.msg;
            else {
                a->next++;
                mt_serve_metrics_prompt(w->o.metrics, r->prompts[k / r->n].n);
                if (r->stream && (r->echo || r->chat)) {   /* a stream's first event: the prompt, or a chat's role */
                    pthread_mutex_lock(&j->mu);
                    if (r->chat) {
                        mt_serve_event_role(&j->events, j, w->o.model_name, k);
                        pthread_cond_broadcast(&j->cv);
                    } else {
                        push_text(a, k, r->prompt_text[k / r->n].p, r->prompt_text[k / r->n].n, NULL);
                    }
                    pthread_mutex_unlock(&j->mu);
                }
            }
        }
        if (failure) {   /* a choice that can never run: the job fails once its running choices end */
            a->left -= a->K - a->next;
            a->next = a->K;
            snprintf(j->err, sizeof j->err, "%.255s", failure);
        }
        if (a->next == a->K && a->left == 0) {
            *pa = a->link;
            if (w->tail == a) w->tail = prev;
            finish(w, a);
            continue;
        }
        prev = a;
        pa = &a->link;
    }
}

/* Whether a job taken has choices that have not joined yet. */
static int waiting(const mt_serve_worker *w)
{
    for (const active *a = w->head; a; a = a->link)
        if (a->next < a->K) return 1;
    return 0;
}

static void *loop(void *arg)
{
    mt_serve_worker *w = arg;
    for (;;) {
        mt_serve_job *j;
        if (!w->head) {   /* idle: wait for a job, or the end */
            if (!(j = mt_serve_queue_pop(w->q))) break;
            take(w, j);
        }
        admit(w);
        /* more jobs while every choice taken has joined: the others wait in the queue (its limit) */
        while (!waiting(w) && (j = mt_serve_queue_try_pop(w->q))) {
            take(w, j);
            admit(w);
        }
        mt_err e;
        if (mt_gen_batch_running(w->b) && mt_gen_batch_step(w->b, &e) < 0) {
            /* a kernel failed: every job in the batch fails with it */
            for (active *a = w->head; a; a = a->link) {
                a->left = 0;
                a->next = a->K;
                snprintf(a->j->err, sizeof a->j->err, "%.255s", e.msg);
            }
        }
        admit(w);   /* finishes the jobs the step ended */
        atomic_store(&w->running, mt_gen_batch_running(w->b));
    }
    return NULL;
}

mt_serve_worker *mt_serve_worker_start(const mt_serve_worker_opts *o, mt_serve_queue *q, mt_err *e)
{
    const int block = 16, positions = mt_gpt_get_config(o->model)->max_position_embeddings;
    int64_t kv = o->kv_tokens > 0 ? o->kv_tokens : (int64_t)positions * (o->max_batch < 8 ? o->max_batch : 8);
    if (kv < positions) {
        mt_err_set(e, "--kv-cache-tokens %lld: less than one sequence of the model's %d positions", (long long)kv,
                   positions);
        return NULL;
    }
    mt_gen_batch_opts bo = {o->max_batch, o->max_prefill, block, (int)((kv + block - 1) / block)};
    mt_serve_worker *w = mt_xcalloc(1, sizeof *w);
    w->o = *o;
    w->q = q;
    if (!(w->b = mt_gen_batch_new(o->model, o->tok->bpe, o->tok->vocab_size, o->tok->eod, &bo, e))) {
        free(w);
        return NULL;
    }
    int rc = pthread_create(&w->thread, NULL, loop, w);
    if (rc) {
        mt_gen_batch_free(w->b);
        free(w);
        mt_err_set(e, "cannot start the engine thread: %s", strerror(rc));
        return NULL;
    }
    return w;
}

int mt_serve_worker_running(mt_serve_worker *w)
{
    return atomic_load(&w->running);
}

void mt_serve_worker_join(mt_serve_worker *w)
{
    if (!w) return;
    pthread_join(w->thread, NULL);
    mt_gen_batch_free(w->b);
    free(w);
}
