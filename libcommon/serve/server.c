/* server.c: routing, request bodies, responses and the drain, over libmicrohttpd (server.h). */
#include "serve/server.h"

#include <microhttpd.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "serve/api.h"
#include "serve/metrics.h"
#include "serve/queue.h"
#include "serve/request.h"
#include "serve/response.h"
#include "serve/worker.h"
#include "tok/bpe.h"
#include "util/progress.h"

struct mt_server {
    mt_serve_opts o;
    const mt_tokenizer *tok;
    mt_serve_limits lim;
    int64_t started;
    mt_serve_queue q;
    mt_serve_worker *w;
    mt_serve_metrics metrics;
    struct MHD_Daemon *d;
    int port;
    atomic_int draining;
    atomic_uint_least64_t next_id;
    uint32_t id_salt;
    pthread_mutex_t mu;        /* guards active */
    pthread_cond_t cv;         /* signalled when active drops */
    int active;                /* requests from their first byte to their response's end */
};

enum route { R_NONE, R_HEALTH, R_MODELS, R_METRICS, R_COMPLETIONS, R_CHAT, R_API };

static const struct {
    const char *path;
    enum route r;
} routes[] = {
    {"/health", R_HEALTH},
    {"/v1/models", R_MODELS},
    {"/metrics", R_METRICS},
    {"/v1/completions", R_COMPLETIONS},
    {"/completions", R_COMPLETIONS},
    {"/v1/chat/completions", R_CHAT},
    {"/chat/completions", R_CHAT},
    {"/api", R_API},
};

/* One request of a connection, from its first call to the completed callback. */
typedef struct req_state {
    enum route route;
    const char *rpath;   /* the route's path, "other" for none (the label of /metrics) */
    char method[16], path[128];
    double t0;
    int status;
    mt_buf body;
    int too_large;
} req_state;

/* Sends body (taken over; NUL-terminated) with status and content type. */
static enum MHD_Result reply(struct MHD_Connection *c, req_state *rs, unsigned status, char *body, const char *ctype,
                             const char *hname, const char *hvalue)
{
    struct MHD_Response *res = MHD_create_response_from_buffer(strlen(body), body, MHD_RESPMEM_MUST_FREE);
    if (!res) {
        free(body);
        return MHD_NO;
    }
    MHD_add_response_header(res, MHD_HTTP_HEADER_CONTENT_TYPE, ctype);
    if (hname) MHD_add_response_header(res, hname, hvalue);
    enum MHD_Result r = MHD_queue_response(c, status, res);
    MHD_destroy_response(res);
    rs->status = (int)status;
    return r;
}

/* The methods a route takes. */
static const char *allowed(enum route r)
{
    return r == R_API ? "PUT" : r >= R_COMPLETIONS ? "POST" : "GET, HEAD";
}

static enum MHD_Result reply_fail(struct MHD_Connection *c, req_state *rs, const mt_serve_fail *f)
{
    const char *hname = NULL, *hvalue = NULL;
    if (f->status == 429) hname = MHD_HTTP_HEADER_RETRY_AFTER, hvalue = "1";
    if (f->status == 405) hname = MHD_HTTP_HEADER_ALLOW, hvalue = allowed(rs->route);
    return reply(c, rs, (unsigned)f->status, rs->route == R_API ? mt_serve_api_error_json(f) : mt_serve_error_json(f),
                 "application/json", hname, hvalue);
}

static enum MHD_Result fail(struct MHD_Connection *c, req_state *rs, int status, const char *type, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
static enum MHD_Result fail(struct MHD_Connection *c, req_state *rs, int status, const char *type, const char *fmt, ...)
{
    mt_serve_fail f = {status, type, NULL, "", ""};
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(f.msg, sizeof f.msg, fmt, ap);
    va_end(ap);
    return reply_fail(c, rs, &f);
}

/* A streamed job's events, read by libmicrohttpd's connection thread as the engine adds them. */
static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max)
{
    mt_serve_job *j = cls;
    pthread_mutex_lock(&j->mu);
    while (pos >= j->events.n && !j->done) pthread_cond_wait(&j->cv, &j->mu);
    size_t n = 0;
    if (pos < j->events.n) {
        n = j->events.n - (size_t)pos < max ? j->events.n - (size_t)pos : max;
        memcpy(buf, j->events.p + pos, n);
    }
    pthread_mutex_unlock(&j->mu);
    return n ? (ssize_t)n : MHD_CONTENT_READER_END_OF_STREAM;
}

/* The stream's response is gone: sent, or its client gone, in which case the engine stops the job at its
 * next token. */
static void stream_free(void *cls)
{
    mt_serve_job *j = cls;
    atomic_store(&j->gone, 1);
    mt_serve_job_unref(j);
}

/* POST /v1/completions and /v1/chat/completions: the same job, read from either kind of body */
/* Waits for j, watching its client: one that closes its connection meanwhile (the end of its stream or an
 * error on the socket; a client that only half-closes looks the same) has gone, and the engine stops the
 * job at its next token. A request pipelined behind it is data, not an end. */
static void wait_watching(struct MHD_Connection *c, mt_serve_job *j)
{
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    int fd = ci ? ci->connect_fd : -1;
    while (!mt_serve_job_wait_for(j, 0.02)) {
        if (fd < 0 || atomic_load(&j->gone)) continue;
        struct pollfd p = {fd, POLLIN | POLLRDHUP, 0};
        char b;
        if (poll(&p, 1, 0) == 1 && ((p.revents & (POLLHUP | POLLERR | POLLRDHUP)) ||
                                    ((p.revents & POLLIN) && recv(fd, &b, 1, MSG_PEEK | MSG_DONTWAIT) == 0)))
            atomic_store(&j->gone, 1);
    }
}

static enum MHD_Result completions(mt_server *s, struct MHD_Connection *c, req_state *rs)
{
    mt_serve_req r;
    mt_serve_fail f;
    mt_bpe_ctx *bc = mt_bpe_ctx_new(s->tok->bpe);
    int chat = rs->route == R_CHAT;
    int rc = (chat ? mt_serve_chat_req_parse : rs->route == R_API ? mt_serve_api_parse : mt_serve_req_parse)(
        &r, rs->body.p ? rs->body.p : "", rs->body.n, &s->lim, s->tok, bc, &f);
    mt_bpe_ctx_free(bc);
    if (rc) return reply_fail(c, rs, &f);
    mt_serve_job *j = mt_serve_job_new(&r);
    snprintf(j->id, sizeof j->id, "%s-%08x%016llx", chat ? "chatcmpl" : "cmpl", s->id_salt,
             (unsigned long long)atomic_fetch_add(&s->next_id, 1));
    j->created = (int64_t)time(NULL);
    j->arrived = rs->t0;
    rc = mt_serve_queue_push(&s->q, j);
    if (rc) {
        mt_serve_job_unref(j);
        if (rc == MT_SERVE_QUEUE_FULL)
            return fail(c, rs, 429, "rate_limit_exceeded", "the server is busy: %d requests are waiting already; retry later",
                        s->o.max_queue);
        return fail(c, rs, 503, "server_error", "the server is shutting down");
    }
    if (j->req.stream) {
        struct MHD_Response *res = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 4096, stream_read, j, stream_free);
        if (!res) {
            atomic_store(&j->gone, 1);
            mt_serve_job_unref(j);
            return MHD_NO;
        }
        MHD_add_response_header(res, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
        MHD_add_response_header(res, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
        enum MHD_Result ok = MHD_queue_response(c, MHD_HTTP_OK, res);
        MHD_destroy_response(res);   /* the job's reference goes with the response (stream_free) */
        rs->status = 200;
        return ok;
    }
    wait_watching(c, j);
    enum MHD_Result ok = j->failed ? fail(c, rs, 500, "server_error", "%s", j->err)
                                   : reply(c, rs, MHD_HTTP_OK,
                                           j->req.api ? mt_serve_api_json(j, s->tok->bpe)
                                                      : mt_serve_completion_json(j, s->o.model_name, s->tok->bpe),
                                           "application/json", NULL, NULL);
    mt_serve_job_unref(j);
    return ok;
}

static enum MHD_Result respond(mt_server *s, struct MHD_Connection *c, req_state *rs)
{
    if (rs->too_large)
        return fail(c, rs, 413, "invalid_request_error", "the body is larger than this server's limit of %zu bytes", s->o.max_body);
    if (atomic_load(&s->draining)) {
        if (rs->route == R_HEALTH) return reply(c, rs, 503, mt_xstrdup("{\"status\":\"draining\"}"), "application/json", NULL, NULL);
        return fail(c, rs, 503, "server_error", "the server is shutting down");
    }
    switch (rs->route) {
    case R_HEALTH: return reply(c, rs, MHD_HTTP_OK, mt_xstrdup("{\"status\":\"ok\"}"), "application/json", NULL, NULL);
    case R_MODELS:
        return reply(c, rs, MHD_HTTP_OK, mt_serve_models_json(s->o.model_name, s->started, s->lim.positions),
                     "application/json", NULL, NULL);
    case R_METRICS:
        return reply(c, rs, MHD_HTTP_OK,
                     mt_serve_metrics_text(&s->metrics, mt_serve_queue_waiting(&s->q), mt_serve_worker_running(s->w)),
                     "text/plain; version=0.0.4; charset=utf-8", NULL, NULL);
    case R_COMPLETIONS:
    case R_CHAT:
    case R_API: return completions(s, c, rs);
    default: return MHD_NO;
    }
}

static enum MHD_Result handle(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                              const char *version, const char *upload, size_t *upload_size, void **con_cls)
{
    (void)version;
    mt_server *s = cls;
    req_state *rs = *con_cls;
    if (!rs) {   /* the request's headers: route it, refuse it early where that is already clear */
        rs = mt_xcalloc(1, sizeof *rs);
        *con_cls = rs;
        rs->t0 = mt_now();
        snprintf(rs->method, sizeof rs->method, "%s", method);
        snprintf(rs->path, sizeof rs->path, "%s", url);
        pthread_mutex_lock(&s->mu);
        s->active++;
        pthread_mutex_unlock(&s->mu);
        rs->rpath = "other";
        for (size_t i = 0; i < sizeof routes / sizeof *routes; i++)
            if (!strcmp(url, routes[i].path)) rs->route = routes[i].r, rs->rpath = routes[i].path;
        if (rs->route == R_NONE) return fail(c, rs, 404, "invalid_request_error", "no such path: %s", rs->path);
        int post = !strcmp(method, rs->route == R_API ? MHD_HTTP_METHOD_PUT : MHD_HTTP_METHOD_POST);
        int get = !strcmp(method, MHD_HTTP_METHOD_GET) || !strcmp(method, MHD_HTTP_METHOD_HEAD);
        if (rs->route >= R_COMPLETIONS ? !post : !get)
            return fail(c, rs, 405, "invalid_request_error", "%s %s: the method is not allowed (use %s)", rs->method,
                        rs->path, allowed(rs->route));
        if (!post) return respond(s, c, rs);
        const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
        if (cl && strtoull(cl, NULL, 10) > s->o.max_body) {   /* before the body is sent (Expect: 100-continue) */
            rs->too_large = 1;
            return respond(s, c, rs);
        }
        return MHD_YES;
    }
    if (*upload_size) {   /* the body, as it comes */
        if (!rs->too_large && rs->body.n + *upload_size <= s->o.max_body) mt_buf_append(&rs->body, upload, *upload_size);
        else rs->too_large = 1;
        *upload_size = 0;
        return MHD_YES;
    }
    return respond(s, c, rs);
}

/* A request has ended (its response sent, or its connection closed): one log line. */
static void completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe)
{
    (void)c;
    mt_server *s = cls;
    req_state *rs = *con_cls;
    if (!rs) return;
    double took = mt_now() - rs->t0;
    fprintf(stderr, "%s: %s %s %d %.1f ms%s\n", mt_progname(), rs->method, rs->path, rs->status, took * 1e3,
            toe == MHD_REQUEST_TERMINATED_COMPLETED_OK ? "" : " (connection closed early)");
    mt_serve_metrics_request(&s->metrics, rs->rpath, rs->status, took);
    free(rs->body.p);
    free(rs);
    *con_cls = NULL;
    pthread_mutex_lock(&s->mu);
    s->active--;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

static void mhd_log(void *cls, const char *fmt, va_list ap)
{
    (void)cls;
    char msg[512];
    vsnprintf(msg, sizeof msg, fmt, ap);
    size_t n = strlen(msg);
    while (n && msg[n - 1] == '\n') msg[--n] = 0;
    fprintf(stderr, "%s: http: %s\n", mt_progname(), msg);
}

mt_server *mt_server_start(mt_gpt *model, const mt_tokenizer *tok, const mt_serve_opts *o, mt_err *e)
{
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE}, *ai;
    char port[16];
    snprintf(port, sizeof port, "%d", o->port);
    int gai = getaddrinfo(o->host, port, &hints, &ai);
    if (gai) {
        mt_err_set(e, "--host %s: %s", o->host, gai_strerror(gai));
        return NULL;
    }
    mt_server *s = mt_xcalloc(1, sizeof *s);
    s->o = *o;
    s->tok = tok;
    s->started = (int64_t)time(NULL);
    s->lim = (mt_serve_limits){o->model_name, o->max_tokens_limit, mt_gpt_get_config(model)->max_position_embeddings,
                               tok->vocab_size, o->chat};
    atomic_init(&s->draining, 0);
    atomic_init(&s->next_id, 1);
    s->id_salt = (uint32_t)getpid() ^ (uint32_t)s->started;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    mt_serve_queue_init(&s->q, o->max_queue);
    mt_serve_metrics_init(&s->metrics);
    mt_serve_worker_opts wo = {model, tok, o->model_name, o->max_batch, o->max_prefill, o->kv_tokens, &s->metrics};
    if (!(s->w = mt_serve_worker_start(&wo, &s->q, e))) {
        freeaddrinfo(ai);
        mt_serve_queue_destroy(&s->q);
        mt_serve_metrics_destroy(&s->metrics);
        free(s);
        return NULL;
    }
    unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL | MHD_USE_ITC |
                     MHD_USE_ERROR_LOG | (ai->ai_family == AF_INET6 ? MHD_USE_IPv6 : 0);
    s->d = MHD_start_daemon(flags, (uint16_t)o->port, NULL, NULL, handle, s, MHD_OPTION_EXTERNAL_LOGGER, mhd_log, s,
                            MHD_OPTION_SOCK_ADDR, ai->ai_addr, MHD_OPTION_NOTIFY_COMPLETED, completed, s,
                            MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)o->conn_timeout, MHD_OPTION_CONNECTION_LIMIT,
                            (unsigned)o->max_conns, MHD_OPTION_END);
    freeaddrinfo(ai);
    if (!s->d) {
        mt_err_set(e, "cannot listen on %s port %d (in use?)", o->host, o->port);
        mt_serve_queue_close(&s->q);
        mt_serve_worker_join(s->w);
        mt_serve_queue_destroy(&s->q);
        mt_serve_metrics_destroy(&s->metrics);
        free(s);
        return NULL;
    }
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(s->d, MHD_DAEMON_INFO_BIND_PORT);
    s->port = info ? info->port : o->port;
    return s;
}

int mt_server_port(const mt_server *s)
{
    return s->port;
}

int mt_server_drain(mt_server *s)
{
    atomic_store(&s->draining, 1);
    MHD_socket fd = MHD_quiesce_daemon(s->d);   /* no new connections */
    if (fd != MHD_INVALID_SOCKET) close(fd);
    pthread_mutex_lock(&s->mu);
    int was = s->active;
    while (s->active) pthread_cond_wait(&s->cv, &s->mu);
    pthread_mutex_unlock(&s->mu);
    mt_serve_queue_close(&s->q);
    mt_serve_worker_join(s->w);
    MHD_stop_daemon(s->d);
    mt_serve_queue_destroy(&s->q);
    mt_serve_metrics_destroy(&s->metrics);
    pthread_cond_destroy(&s->cv);
    pthread_mutex_destroy(&s->mu);
    free(s);
    return was;
}
