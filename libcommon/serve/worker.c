/* worker.c: the engine thread, one job at a time (worker.h). */
#include "serve/worker.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "serve/response.h"
#include "util/utf8.h"

struct mt_serve_worker {
    mt_serve_worker_opts o;
    mt_serve_queue *q;
    pthread_t thread;
};

/* What the token callback of one batch needs: the job, its first choice in the batch, and the bytes of
 * each choice's text already sent (streams). */
typedef struct batch_ctx {
    const mt_serve_worker *w;
    mt_serve_job *j;
    int k0;
    size_t *sent;
} batch_ctx;

/* Appends a stream event (under j->mu) and wakes the connection. */
static void push_text(const batch_ctx *c, int k, const char *text, size_t n, const char *finish)
{
    mt_serve_event_text(&c->j->events, c->j, c->w->o.model_name, k, text, n, finish);
    pthread_cond_broadcast(&c->j->cv);
}

static int on_token(void *arg, int b, const mt_gen_seq *s)
{
    batch_ctx *c = arg;
    mt_serve_job *j = c->j;
    int k = c->k0 + b;
    pthread_mutex_lock(&j->mu);
    j->made++;
    if (j->req.stream) {
        /* the text no later token can take back, without a character still incomplete; all of it at the end */
        size_t upto = s->why ? s->text.n : mt_utf8_whole(s->text.p, c->sent[k], s->safe);
        if (upto < c->sent[k]) upto = c->sent[k];   /* (the engine never cuts into its safe text) */
        if (upto > c->sent[k] || s->why)
            push_text(c, k, s->text.p + c->sent[k], upto - c->sent[k], s->why ? mt_serve_finish_reason(s->why) : NULL);
        c->sent[k] = upto;
    }
    pthread_mutex_unlock(&j->mu);
    return atomic_load(&j->gone);
}

static void run_job(const mt_serve_worker *w, mt_serve_job *j)
{
    const mt_serve_req *r = &j->req;
    const mt_tokenizer *tok = w->o.tok;
    int K = r->n_prompts * r->n;
    pthread_mutex_lock(&j->mu);
    j->seqs = mt_xcalloc((size_t)K, sizeof *j->seqs);
    pthread_mutex_unlock(&j->mu);
    mt_gen_opts go = {r->max_tokens, r->sampling, r->seed, NULL, (const char *const *)r->stops, r->n_stops};
    mt_gen *g = mt_gen_new(w->o.model, tok->bpe, tok->vocab_size, tok->eod, &go);
    mt_ids *ids = mt_xcalloc((size_t)w->o.max_batch, sizeof *ids);
    batch_ctx c = {w, j, 0, mt_xcalloc((size_t)K, sizeof(size_t))};
    mt_err e;
    int rc = 0;
    for (int i = 0; i < r->n_prompts && !rc && !atomic_load(&j->gone); i++)
        for (int start = 0; start < r->n && !rc && !atomic_load(&j->gone); start += w->o.max_batch) {
            int B = r->n - start < w->o.max_batch ? r->n - start : w->o.max_batch;
            c.k0 = i * r->n + start;
            for (int b = 0; b < B; b++) ids[b] = r->prompts[i];
            if (r->stream && r->echo) {
                pthread_mutex_lock(&j->mu);
                for (int b = 0; b < B; b++) push_text(&c, c.k0 + b, r->prompt_text[i].p, r->prompt_text[i].n, NULL);
                pthread_mutex_unlock(&j->mu);
            }
            rc = mt_gen_run(g, ids, B, (uint64_t)c.k0, j->seqs + c.k0, on_token, &c, NULL, &e);
        }
    pthread_mutex_lock(&j->mu);
    if (rc) {
        j->failed = 1;
        snprintf(j->err, sizeof j->err, "%.255s", e.msg);
        if (r->stream) {
            mt_serve_fail f;
            mt_serve_fail_set(&f, 500, NULL, "%s", e.msg);
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
    else if (rc) fprintf(stderr, "%s: %s: %s\n", mt_progname(), j->id, e.msg);
    free(c.sent);
    free(ids);
    mt_gen_free(g);
    mt_serve_job_finish(j);
}

static void *loop(void *arg)
{
    mt_serve_worker *w = arg;
    mt_serve_job *j;
    while ((j = mt_serve_queue_pop(w->q))) {
        run_job(w, j);
        mt_serve_job_unref(j);
    }
    return NULL;
}

mt_serve_worker *mt_serve_worker_start(const mt_serve_worker_opts *o, mt_serve_queue *q, mt_err *e)
{
    mt_serve_worker *w = mt_xcalloc(1, sizeof *w);
    w->o = *o;
    w->q = q;
    int rc = pthread_create(&w->thread, NULL, loop, w);
    if (rc) {
        free(w);
        mt_err_set(e, "cannot start the engine thread: %s", strerror(rc));
        return NULL;
    }
    return w;
}

void mt_serve_worker_join(mt_serve_worker *w)
{
    if (!w) return;
    pthread_join(w->thread, NULL);
    free(w);
}
