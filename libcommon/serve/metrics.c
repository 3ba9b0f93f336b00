/* metrics.c: mt-serve's counters and histograms, and their Prometheus text (metrics.h). */
#include "serve/metrics.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "util/vec.h"

/* Seconds: the first token waits for the queue and the prompt; later ones for one step of the batch. */
static const double ttft_le[] = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60};
static const double itl_le[] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 1, 2.5};
static const double dur_le[] = {0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300};

static void hist_init(mt_serve_hist *h, const double *le, int n)
{
    memset(h, 0, sizeof *h);
    h->le = le;
    h->n = n;
}

static void hist_add(mt_serve_hist *h, double x)
{
    int i = 0;
    while (i < h->n && x > h->le[i]) i++;
    h->count[i]++;
    h->sum += x;
}

void mt_serve_metrics_init(mt_serve_metrics *m)
{
    memset(m, 0, sizeof *m);
    pthread_mutex_init(&m->mu, NULL);
    hist_init(&m->ttft, ttft_le, (int)(sizeof ttft_le / sizeof *ttft_le));
    hist_init(&m->itl, itl_le, (int)(sizeof itl_le / sizeof *itl_le));
    hist_init(&m->duration, dur_le, (int)(sizeof dur_le / sizeof *dur_le));
}

void mt_serve_metrics_destroy(mt_serve_metrics *m)
{
    pthread_mutex_destroy(&m->mu);
}

void mt_serve_metrics_request(mt_serve_metrics *m, const char *path, int status, double seconds)
{
    pthread_mutex_lock(&m->mu);
    int i = 0;
    while (i < m->npairs && !(m->req[i].status == status && !strcmp(m->req[i].path, path))) i++;
    if (i == m->npairs) {
        if (m->npairs == MT_SERVE_METRICS_PAIRS - 1 || strlen(path) >= sizeof m->req[0].path) {
            /* beyond the table: the last pair, kept for them, "other" */
            i = MT_SERVE_METRICS_PAIRS - 1;
            if (!m->req[i].path[0]) snprintf(m->req[i].path, sizeof m->req[i].path, "other");
        } else {
            snprintf(m->req[i].path, sizeof m->req[i].path, "%s", path);
            m->req[i].status = status;
            m->req[i].n = 0;
            m->npairs++;
        }
    }
    m->req[i].n++;
    hist_add(&m->duration, seconds);
    pthread_mutex_unlock(&m->mu);
}

void mt_serve_metrics_prompt(mt_serve_metrics *m, uint64_t n)
{
    pthread_mutex_lock(&m->mu);
    m->prompt_tokens += n;
    pthread_mutex_unlock(&m->mu);
}

void mt_serve_metrics_token(mt_serve_metrics *m, int first, double seconds)
{
    pthread_mutex_lock(&m->mu);
    m->generation_tokens++;
    hist_add(first ? &m->ttft : &m->itl, seconds);
    pthread_mutex_unlock(&m->mu);
}

static void put(mt_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(mt_buf *b, const char *fmt, ...)
{
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    mt_buf_append(b, line, n < (int)sizeof line ? (size_t)n : sizeof line - 1);
}

static void head(mt_buf *b, const char *name, const char *type, const char *help)
{
    put(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* A bound as Prometheus writes le: the shortest form that reads back the same. */
static void hist_text(mt_buf *b, const char *name, const char *help, const mt_serve_hist *h)
{
    head(b, name, "histogram", help);
    uint64_t cum = 0;
    for (int i = 0; i <= h->n; i++) {
        cum += h->count[i];
        if (i < h->n) put(b, "%s_bucket{le=\"%g\"} %llu\n", name, h->le[i], (unsigned long long)cum);
        else put(b, "%s_bucket{le=\"+Inf\"} %llu\n", name, (unsigned long long)cum);
    }
    put(b, "%s_sum %.17g\n%s_count %llu\n", name, h->sum, name, (unsigned long long)cum);
}

char *mt_serve_metrics_text(mt_serve_metrics *m, int waiting, int running)
{
    mt_buf b = {0};
    pthread_mutex_lock(&m->mu);
    head(&b, "mt_serve_requests_total", "counter", "HTTP requests ended, by path and status.");
    for (int i = 0; i < MT_SERVE_METRICS_PAIRS; i++)
        if (i < m->npairs || (i == MT_SERVE_METRICS_PAIRS - 1 && m->req[i].path[0])) put(&b, "mt_serve_requests_total{path=\"%s\",status=\"%d\"} %llu\n", m->req[i].path, m->req[i].status,
            (unsigned long long)m->req[i].n);
    head(&b, "mt_serve_prompt_tokens_total", "counter", "Prompt tokens read into the batch (once per choice).");
    put(&b, "mt_serve_prompt_tokens_total %llu\n", (unsigned long long)m->prompt_tokens);
    head(&b, "mt_serve_generation_tokens_total", "counter", "New tokens generated.");
    put(&b, "mt_serve_generation_tokens_total %llu\n", (unsigned long long)m->generation_tokens);
    head(&b, "mt_serve_requests_waiting", "gauge", "Requests in the queue, waiting for the engine.");
    put(&b, "mt_serve_requests_waiting %d\n", waiting);
    head(&b, "mt_serve_sequences_running", "gauge", "Sequences in the running batch.");
    put(&b, "mt_serve_sequences_running %d\n", running);
    hist_text(&b, "mt_serve_time_to_first_token_seconds",
              "Seconds from a request's arrival to the first new token of each of its choices.", &m->ttft);
    hist_text(&b, "mt_serve_inter_token_latency_seconds", "Seconds between consecutive new tokens of a choice.",
              &m->itl);
    hist_text(&b, "mt_serve_request_duration_seconds", "Seconds from a request's first byte to its response's end.",
              &m->duration);
    pthread_mutex_unlock(&m->mu);
    mt_buf_append(&b, "", 1);
    return b.p;
}
