/* request.h: the body of a POST /v1/completions or /v1/chat/completions (OpenAI's fields, with top_k and
 * repetition_penalty as vLLM spells them) read and checked into an mt_serve_req, or the reason it is
 * refused: the HTTP status, a one-line message and the field at fault, which the server sends in OpenAI's
 * error shape. Everything a request can get wrong is found here, before it waits for the engine: the
 * engine only runs requests it can finish. */
#ifndef MT_SERVE_REQUEST_H
#define MT_SERVE_REQUEST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "config/tokenizer.h"
#include "gen/sample.h"
#include "util/vec.h"

/* Choices of one request at most (prompts x n). */
#define MT_SERVE_MAX_CHOICES 128
/* Stop strings of one request at most (OpenAI's limit). */
#define MT_SERVE_MAX_STOPS 4

/* Why a request is refused, as OpenAI's {"error": {"message", "type", "param", "code"}}. */
typedef struct mt_serve_fail {
    int status;          /* 400, 404, 405, 413, 429, 500, 503 */
    const char *type;    /* "invalid_request_error", ... */
    const char *code;    /* NULL, or e.g. "model_not_found" */
    char param[64];      /* the field at fault, "" for none */
    char msg[512];
} mt_serve_fail;

/* Sets f (status, param may be NULL, the message) with type "invalid_request_error"; returns -1. */
int mt_serve_fail_set(mt_serve_fail *f, int status, const char *param, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* What the server allows and the model it serves. */
struct mt_serve_chat;

typedef struct mt_serve_limits {
    const char *model;        /* the served model's name: a request's "model" must be it when given */
    int64_t max_tokens;       /* --max-tokens-limit */
    int positions;            /* the model's positions: a prompt must leave one */
    int64_t vocab_size;       /* token ids of a prompt are below it */
    const struct mt_serve_chat *chat;   /* the chat template (serve/chat_source.h), or NULL: no chat */
} mt_serve_limits;

typedef struct mt_serve_req {
    bool chat;                /* a chat completion: one prompt, its messages rendered by the chat template */
    int n_prompts;
    mt_ids *prompts;          /* each prompt's ids */
    mt_buf *prompt_text;      /* each prompt's text: the string given, or its ids decoded (for echo) */
    int n;                    /* choices per prompt: choice k = prompt (k / n), its (k % n)-th sample */
    int64_t max_tokens;       /* new tokens per choice at most (fewer where the model's positions run out) */
    mt_sampling sampling;
    uint32_t seed;            /* choice k draws from MT19937 seeded (seed + k) mod 2^32, as mt-generate's
                                 k-th prompt: given, or drawn at random when the request has none */
    bool seeded;
    int n_stops;
    char **stops;             /* non-empty strings */
    bool echo, stream, include_usage;
    bool logprobs;            /* "logprobs": 0 (a chat's true): each chosen token's log-probability */
    /* PUT /api (serve/api.h) */
    bool api;                 /* answered in Megatron's shape */
    bool prompt_logprobs;     /* each prompt token's log-probability too (max_tokens may be 0) */
    bool stop_on_eol, stop_on_double_eol;   /* stop after a new token whose text holds "\n" / "\n\n" */
    int top_logprobs;         /* "logprobs": N: the N likeliest tokens of each position too */
} mt_serve_req;

/* Reads body[0..len) into r with tok (bc: a tokenizer context of the calling thread). 0, or -1 with f
 * set and nothing left in r. */
int mt_serve_req_parse(mt_serve_req *r, const char *body, size_t len, const mt_serve_limits *lim,
                       const mt_tokenizer *tok, mt_bpe_ctx *bc, mt_serve_fail *f);
/* The same for a chat completion: "messages" (serve/chat_prompt.h) in place of "prompt", whose text is
 * tokenized as a completion's prompt is; max_completion_tokens (or max_tokens; default the server's
 * limit), "logprobs": true; no echo. */
int mt_serve_chat_req_parse(mt_serve_req *r, const char *body, size_t len, const mt_serve_limits *lim,
                            const mt_tokenizer *tok, mt_bpe_ctx *bc, mt_serve_fail *f);
void mt_serve_req_free(mt_serve_req *r);

#endif
