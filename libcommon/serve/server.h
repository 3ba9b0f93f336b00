/* server.h: mt-serve's HTTP server: a loaded model behind OpenAI's completions API, on libmicrohttpd.
 *
 *   GET  /health                          200 {"status": "ok"} (503 while draining)
 *   GET  /v1/models                       the served model, in OpenAI's list shape
 *   GET  /metrics                         counters, gauges and latency histograms in Prometheus' text
 *                                         format (serve/metrics.h)
 *   POST /v1/completions, /completions    a completion (serve/request.h's fields), or with "stream": true
 *                                         Server-Sent Events, one per piece of text, then [DONE]
 *   PUT  /api                             Megatron's older interface (serve/api.h)
 *   POST /v1/chat/completions,            a chat completion: the messages rendered by the chat template
 *        /chat/completions                (serve/chat_prompt.h), then run as a completion; streamed as
 *                                         "chat.completion.chunk" events
 *
 * Errors (but /api's) are OpenAI's {"error": {...}} with the status that says what went wrong: 400 for a bad request,
 * 404 for another path or model, 405 for another method (with Allow), 413 for a body above the limit,
 * 429 with Retry-After when the queue is full, 503 while draining. libmicrohttpd runs a thread per
 * connection, which waits for its job (a streamed one reads the job's events as they come); the engine
 * is serve/worker.h's thread (continuous batching) behind the bounded queue of serve/queue.h. */
#ifndef MT_SERVE_SERVER_H
#define MT_SERVE_SERVER_H

#include <stddef.h>
#include <stdint.h>

#include "config/tokenizer.h"
#include "model/gpt.h"
#include "util/err.h"

typedef struct mt_serve_opts {
    const char *host;          /* address to listen on: a name or a numeric IPv4 / IPv6 address */
    int port;                  /* 0: any free port (mt_server_port says which) */
    const char *model_name;    /* the served model's name */
    int max_batch;             /* sequences the engine runs together at most */
    int max_prefill;           /* prompt tokens the engine reads in one step at most */
    int64_t kv_tokens;         /* positions of its KV cache (0: serve/worker.h's default) */
    int max_queue;             /* requests waiting for the engine at most; more get 429 */
    int64_t max_tokens_limit;  /* "max_tokens" at most */
    size_t max_body;           /* request body bytes at most; more get 413 */
    int conn_timeout;          /* seconds a connection may stay idle (headers or body not coming, or no
                                  request on a kept-alive one) before it is closed */
    int max_conns;             /* open connections at most; more are closed at once */
    const struct mt_serve_chat *chat;   /* the chat template (serve/chat_source.h; the caller's), or NULL */
} mt_serve_opts;

typedef struct mt_server mt_server;

/* Starts the engine thread and listens. model and tok stay the caller's and must outlive the server.
 * NULL with e set (e.g. the port is taken). */
mt_server *mt_server_start(mt_gpt *model, const mt_tokenizer *tok, const mt_serve_opts *o, mt_err *e);
/* The port it listens on. */
int mt_server_port(const mt_server *s);
/* Drains and frees s: stops accepting connections (new requests on open ones get 503), lets every
 * running and waiting request finish, streams included, then stops. Returns the number of requests that
 * were in flight when the drain began. */
int mt_server_drain(mt_server *s);

#endif
