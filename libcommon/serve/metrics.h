/* metrics.h: what mt-serve counts while it runs, and GET /metrics, which shows it in Prometheus' text
 * exposition format (version 0.0.4): requests by path and status, prompt and generated tokens, the queue's
 * depth and the sequences running, and histograms of the time to first token (from the request's arrival
 * to its choice's first new token), the inter-token latency (between a choice's consecutive tokens) and
 * the request's duration. Every function may be called from any thread. */
#ifndef MT_SERVE_METRICS_H
#define MT_SERVE_METRICS_H

#include <pthread.h>
#include <stdint.h>

/* Bucket upper bounds of a histogram at most (the +Inf bucket comes on top). */
#define MT_SERVE_HIST_MAX 16

typedef struct mt_serve_hist {
    int n;                               /* bounds */
    const double *le;                    /* ascending upper bounds, seconds */
    uint64_t count[MT_SERVE_HIST_MAX + 1];   /* per bucket, not cumulative; [n]: above the last bound */
    double sum;
} mt_serve_hist;

/* Requests ended, by path and status: this many pairs at most, the last kept for path "other", status 0,
 * which counts the requests of pairs beyond the others. */
#define MT_SERVE_METRICS_PAIRS 64

typedef struct mt_serve_metrics {
    pthread_mutex_t mu;
    struct {
        char path[32];
        int status;
        uint64_t n;
    } req[MT_SERVE_METRICS_PAIRS];
    int npairs;
    uint64_t prompt_tokens, generation_tokens;
    mt_serve_hist ttft, itl, duration;
} mt_serve_metrics;

void mt_serve_metrics_init(mt_serve_metrics *m);
void mt_serve_metrics_destroy(mt_serve_metrics *m);
/* A request to path (a route's path, or anything else: counted as "other") has ended with status,
 * seconds after its first byte. */
void mt_serve_metrics_request(mt_serve_metrics *m, const char *path, int status, double seconds);
/* A choice's prompt of n tokens has joined the batch. */
void mt_serve_metrics_prompt(mt_serve_metrics *m, uint64_t n);
/* A choice's new token: its first (seconds since the request came) or a later one (seconds since its last). */
void mt_serve_metrics_token(mt_serve_metrics *m, int first, double seconds);
/* The exposition, with the gauges given (requests waiting, sequences running): a string to free. */
char *mt_serve_metrics_text(mt_serve_metrics *m, int waiting, int running);

#endif
