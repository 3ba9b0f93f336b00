/* request.c: reading and checking a completions or chat completions request (request.h): the fields
 * both share are read by the same code. */
#include "serve/request.h"

#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "serve/chat_prompt.h"
#include "tok/bpe.h"

int mt_serve_fail_set(mt_serve_fail *f, int status, const char *param, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(f->msg, sizeof f->msg, fmt, ap);
    va_end(ap);
    f->status = status;
    f->type = "invalid_request_error";
    f->code = NULL;
    snprintf(f->param, sizeof f->param, "%s", param ? param : "");
    return -1;
}

/* The fields a request may have; any other is refused, so that a misspelt one is not silently ignored. */
static const char *const known[] = {
    "model", "prompt", "max_tokens", "temperature", "top_p", "top_k", "n", "stream", "stream_options",
    "logprobs", "echo", "stop", "seed", "presence_penalty", "frequency_penalty", "repetition_penalty",
    "best_of", "logit_bias", "user", "suffix", NULL,
};
static const char *const known_chat[] = {
    "model", "messages", "max_tokens", "max_completion_tokens", "temperature", "top_p", "top_k", "n", "stream",
    "stream_options", "logprobs", "top_logprobs", "stop", "seed", "presence_penalty", "frequency_penalty",
    "repetition_penalty", "logit_bias", "user", NULL,
};

static const char *kind(const json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_OBJECT: return "an object";
    case JSON_ARRAY: return "a list";
    case JSON_STRING: return "a string";
    case JSON_INTEGER: return "an integer";
    case JSON_REAL: return "a number";
    case JSON_TRUE:
    case JSON_FALSE: return "a boolean";
    default: return "null";
    }
}

/* Field name of obj: absent or null leaves *out; else a boolean. */
static int get_bool(json_t *obj, const char *name, bool *out, mt_serve_fail *f)
{
    json_t *v = json_object_get(obj, name);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_boolean(v)) return mt_serve_fail_set(f, 400, name, "\"%s\" must be a boolean, not %s", name, kind(v));
    *out = json_is_true(v);
    return 0;
}

/* A number within [lo, hi] (lo_open: above lo). */
static int get_num(json_t *obj, const char *name, double lo, bool lo_open, double hi, double *out, mt_serve_fail *f)
{
    json_t *v = json_object_get(obj, name);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_number(v)) return mt_serve_fail_set(f, 400, name, "\"%s\" must be a number, not %s", name, kind(v));
    double x = json_number_value(v);
    if (!isfinite(x) || x < lo || (lo_open && x == lo) || x > hi)
        return mt_serve_fail_set(f, 400, name, "\"%s\" is %g, outside %s%g, %g]", name, x, lo_open ? "(" : "[", lo, hi);
    *out = x;
    return 0;
}

/* An integer within [lo, hi]. */
static int get_int(json_t *obj, const char *name, int64_t lo, int64_t hi, int64_t *out, mt_serve_fail *f)
{
    json_t *v = json_object_get(obj, name);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_integer(v)) return mt_serve_fail_set(f, 400, name, "\"%s\" must be an integer, not %s", name, kind(v));
    json_int_t x = json_integer_value(v);
    if (x < lo || x > hi)
        return mt_serve_fail_set(f, 400, name, "\"%s\" is %lld, outside [%lld, %lld]", name, (long long)x,
                                 (long long)lo, (long long)hi);
    *out = x;
    return 0;
}

static void add_prompt(mt_serve_req *r)
{
    r->prompts = mt_xrealloc(r->prompts, (size_t)(r->n_prompts + 1) * sizeof *r->prompts);
    r->prompt_text = mt_xrealloc(r->prompt_text, (size_t)(r->n_prompts + 1) * sizeof *r->prompt_text);
    r->prompts[r->n_prompts] = (mt_ids){0};
    r->prompt_text[r->n_prompts] = (mt_buf){0};
    r->n_prompts++;
}

static void text_prompt(mt_serve_req *r, json_t *s, const mt_tokenizer *tok, mt_bpe_ctx *bc)
{
    add_prompt(r);
    const char *t = json_string_value(s);
    size_t n = json_string_length(s);
    mt_buf_append(&r->prompt_text[r->n_prompts - 1], t, n);
    mt_tokenizer_encode(tok, bc, t, n, &r->prompts[r->n_prompts - 1]);
}

/* A list of token ids as one prompt; its text is the ids decoded. */
static int ids_prompt(mt_serve_req *r, json_t *a, const mt_serve_limits *lim, const mt_tokenizer *tok, mt_serve_fail *f)
{
    add_prompt(r);
    mt_ids *ids = &r->prompts[r->n_prompts - 1];
    size_t i;
    json_t *v;
    json_array_foreach(a, i, v) {
        if (!json_is_integer(v))
            return mt_serve_fail_set(f, 400, "prompt", "a prompt of token ids holds %s at place %zu", kind(v), i);
        json_int_t id = json_integer_value(v);
        if (id < 0 || id >= lim->vocab_size)
            return mt_serve_fail_set(f, 400, "prompt", "token id %lld is outside the vocabulary [0, %lld)",
                                     (long long)id, (long long)lim->vocab_size);
        mt_ids_push(ids, (uint32_t)id);
    }
    mt_err e;
    if (ids->n && mt_bpe_decode(tok->bpe, ids->p, ids->n, &r->prompt_text[r->n_prompts - 1], &e))
        return mt_serve_fail_set(f, 400, "prompt", "%s", e.msg);
    return 0;
}

/* "prompt": a string, a list of strings, a list of token ids, or a list of lists of token ids. */
static int read_prompts(mt_serve_req *r, json_t *p, const mt_serve_limits *lim, const mt_tokenizer *tok,
                        mt_bpe_ctx *bc, mt_serve_fail *f)
{
    if (!p || json_is_null(p)) return mt_serve_fail_set(f, 400, "prompt", "the field \"prompt\" is required");
    if (json_is_string(p)) {
        text_prompt(r, p, tok, bc);
    } else if (json_is_array(p)) {
        if (!json_array_size(p)) return mt_serve_fail_set(f, 400, "prompt", "\"prompt\" is an empty list");
        json_t *first = json_array_get(p, 0);
        if (json_is_integer(first)) {
            if (ids_prompt(r, p, lim, tok, f)) return -1;
        } else if (json_is_string(first) || json_is_array(first)) {
            size_t i;
            json_t *v;
            json_array_foreach(p, i, v) {
                if (json_typeof(v) != json_typeof(first))
                    return mt_serve_fail_set(f, 400, "prompt", "\"prompt\" is a list of %s but holds %s at place %zu",
                                             json_is_string(first) ? "strings" : "lists of token ids", kind(v), i);
                if (json_is_string(v)) text_prompt(r, v, tok, bc);
                else if (ids_prompt(r, v, lim, tok, f)) return -1;
            }
        } else {
            return mt_serve_fail_set(f, 400, "prompt", "\"prompt\" is a list of %s: expected strings or token ids",
                                     kind(first));
        }
    } else {
        return mt_serve_fail_set(f, 400, "prompt", "\"prompt\" must be a string or a list, not %s", kind(p));
    }
    return 0;
}

/* Every prompt has a token and leaves a position to fill. */
static int check_prompts(const mt_serve_req *r, const mt_serve_limits *lim, mt_serve_fail *f)
{
    const char *param = r->chat ? "messages" : "prompt";
    for (int i = 0; i < r->n_prompts; i++) {
        size_t n = r->prompts[i].n;
        if (!n) return mt_serve_fail_set(f, 400, param, r->chat ? "the messages make an empty prompt" : "prompt %d is empty", i);
        if ((int64_t)n >= lim->positions)
            return mt_serve_fail_set(f, 400, param, "%s %d has %zu tokens, which leave no room in the model's %d positions",
                                     r->chat ? "the messages' prompt" : "prompt", i, n, lim->positions);
    }
    return 0;
}

/* "stop": a string, or a list of at most MT_SERVE_MAX_STOPS strings; empty strings are dropped. */
static int read_stops(mt_serve_req *r, json_t *s, mt_serve_fail *f)
{
    if (!s || json_is_null(s)) return 0;
    if (!json_is_string(s) && !json_is_array(s))
        return mt_serve_fail_set(f, 400, "stop", "\"stop\" must be a string or a list of strings, not %s", kind(s));
    size_t n = json_is_string(s) ? 1 : json_array_size(s);
    if (n > MT_SERVE_MAX_STOPS)
        return mt_serve_fail_set(f, 400, "stop", "\"stop\" has %zu strings, more than %d", n, MT_SERVE_MAX_STOPS);
    r->stops = mt_xcalloc(n ? n : 1, sizeof *r->stops);
    for (size_t i = 0; i < n; i++) {
        json_t *v = json_is_string(s) ? s : json_array_get(s, i);
        if (!json_is_string(v))
            return mt_serve_fail_set(f, 400, "stop", "\"stop\" holds %s at place %zu: expected strings", kind(v), i);
        if (!json_string_length(v)) continue;
        if (memchr(json_string_value(v), 0, json_string_length(v)))
            return mt_serve_fail_set(f, 400, "stop", "a stop string holds a NUL character");
        r->stops[r->n_stops++] = mt_xstrdup(json_string_value(v));
    }
    return 0;
}

/* Fields of OpenAI's that this server does not implement: accepted at their neutral values only. */
static int read_unsupported(json_t *o, int n, mt_serve_fail *f)
{
    static const char *const penalties[] = {"presence_penalty", "frequency_penalty"};
    for (int i = 0; i < 2; i++) {
        double x = 0;
        if (get_num(o, penalties[i], -2, false, 2, &x, f)) return -1;
        if (x != 0) return mt_serve_fail_set(f, 400, penalties[i], "\"%s\" is not supported (only 0)", penalties[i]);
    }
    int64_t best_of = n;
    if (get_int(o, "best_of", 1, MT_SERVE_MAX_CHOICES, &best_of, f)) return -1;
    if (best_of != n) return mt_serve_fail_set(f, 400, "best_of", "\"best_of\" is not supported (only equal to n)");
    json_t *v = json_object_get(o, "logit_bias");
    if (v && !json_is_null(v) && !(json_is_object(v) && !json_object_size(v)))
        return mt_serve_fail_set(f, 400, "logit_bias", "\"logit_bias\" is not supported (only {})");
    v = json_object_get(o, "suffix");
    if (v && !json_is_null(v) && !(json_is_string(v) && !json_string_length(v)))
        return mt_serve_fail_set(f, 400, "suffix", "\"suffix\" is not supported");
    v = json_object_get(o, "user");
    if (v && !json_is_null(v) && !json_is_string(v))
        return mt_serve_fail_set(f, 400, "user", "\"user\" must be a string, not %s", kind(v));
    return 0;
}

/* A chat request's prompt: its messages rendered by the chat template, tokenized as a completion's text. */
static int chat_prompt(mt_serve_req *r, json_t *o, const mt_serve_limits *lim, const mt_tokenizer *tok,
                       mt_bpe_ctx *bc, mt_serve_fail *f)
{
    mt_buf text = {0};
    if (mt_serve_chat_prompt(lim->chat, json_object_get(o, "messages"), &text, f)) {
        free(text.p);
        return -1;
    }
    json_t *s = json_stringn_nocheck(text.p ? text.p : "", text.n);
    free(text.p);
    text_prompt(r, s, tok, bc);
    json_decref(s);
    return 0;
}

/* logprobs: a completion's 0 to 5 (the likeliest tokens of each position, with echo the prompt's too), a
 * chat's true (top_logprobs: 0 to 20 alternatives) */
static int read_logprobs(mt_serve_req *r, json_t *o, mt_serve_fail *f)
{
    json_t *lp = json_object_get(o, "logprobs");
    int64_t k = 0;
    bool want = false;
    if (r->chat) {
        if (get_bool(o, "logprobs", &want, f) || get_int(o, "top_logprobs", 0, 20, &k, f)) return -1;
        if (k > 0 && !want) return mt_serve_fail_set(f, 400, "top_logprobs", "\"top_logprobs\" needs \"logprobs\": true");
    } else if (lp && !json_is_null(lp)) {
        if (get_int(o, "logprobs", 0, 5, &k, f)) return -1;
        want = true;
    }
    if (!want) return 0;
    if (r->stream) return mt_serve_fail_set(f, 400, "logprobs", "\"logprobs\" is not supported with \"stream\" yet");
    r->logprobs = true;
    r->top_logprobs = (int)k;
    r->prompt_logprobs |= r->echo;   /* the prompt's tokens are scored too (read a token a step) */
    return 0;
}

static int read_fields(mt_serve_req *r, json_t *o, const mt_serve_limits *lim, const mt_tokenizer *tok,
                       mt_bpe_ctx *bc, mt_serve_fail *f)
{
    const char *key;
    json_t *v;
    const char *const *names = r->chat ? known_chat : known;
    json_object_foreach(o, key, v) {
        int i = 0;
        while (names[i] && strcmp(names[i], key)) i++;
        if (!names[i]) return mt_serve_fail_set(f, 400, key, "unknown field \"%s\"", key);
    }
    v = json_object_get(o, "model");
    if (v && !json_is_null(v)) {
        if (!json_is_string(v)) return mt_serve_fail_set(f, 400, "model", "\"model\" must be a string, not %s", kind(v));
        if (strcmp(json_string_value(v), lim->model)) {
            mt_serve_fail_set(f, 404, "model", "the model \"%s\" does not exist: this server serves \"%s\"",
                              json_string_value(v), lim->model);
            f->code = "model_not_found";
            return -1;
        }
    }
    /* a chat's default: as many as the server allows (the model's positions may end it sooner) */
    int64_t max_tokens = r->chat ? lim->max_tokens : 16, n = 1, top_k = 0, seed = -1;
    double temperature = 1, top_p = 1, penalty = 1;
    const char *mt_name = r->chat && json_object_get(o, "max_completion_tokens") ? "max_completion_tokens" : "max_tokens";
    if (r->chat && get_int(o, "max_tokens", 1, INT64_MAX, &max_tokens, f)) return -1;
    if (get_int(o, mt_name, r->chat ? 1 : 0, INT64_MAX, &max_tokens, f)) return -1;
    if (max_tokens > lim->max_tokens)
        return mt_serve_fail_set(f, 400, mt_name, "\"%s\" is %lld, above this server's limit of %lld", mt_name,
                                 (long long)max_tokens, (long long)lim->max_tokens);
    if (get_int(o, "n", 1, MT_SERVE_MAX_CHOICES, &n, f) || get_num(o, "temperature", 0, false, 1e6, &temperature, f) ||
        get_num(o, "top_p", 0, true, 1, &top_p, f) || get_int(o, "top_k", -1, INT32_MAX, &top_k, f) ||
        get_num(o, "repetition_penalty", 0, true, 1e6, &penalty, f) || get_int(o, "seed", 0, UINT32_MAX, &seed, f) ||
        get_bool(o, "echo", &r->echo, f) || get_bool(o, "stream", &r->stream, f) || read_unsupported(o, (int)n, f) ||
        read_stops(r, json_object_get(o, "stop"), f))
        return -1;
    if (!max_tokens) {   /* the prompt only: scored (lm-evaluation-harness' loglikelihood asks this) */
        if (!r->echo) return mt_serve_fail_set(f, 400, "max_tokens", "\"max_tokens\" 0 needs \"echo\": true");
        if (r->stream) return mt_serve_fail_set(f, 400, "max_tokens", "\"max_tokens\" 0 is not supported with \"stream\"");
        r->prompt_logprobs = true;
    }
    if (read_logprobs(r, o, f)) return -1;
    json_t *so = json_object_get(o, "stream_options");
    if (so && !json_is_null(so)) {
        if (!json_is_object(so))
            return mt_serve_fail_set(f, 400, "stream_options", "\"stream_options\" must be an object, not %s", kind(so));
        if (!r->stream) return mt_serve_fail_set(f, 400, "stream_options", "\"stream_options\" needs \"stream\": true");
        const char *k2;
        json_t *v2;
        json_object_foreach(so, k2, v2) if (strcmp(k2, "include_usage"))
            return mt_serve_fail_set(f, 400, "stream_options", "unknown field \"stream_options.%s\"", k2);
        if (get_bool(so, "include_usage", &r->include_usage, f)) return -1;
    }
    if (r->chat ? chat_prompt(r, o, lim, tok, bc, f) : read_prompts(r, json_object_get(o, "prompt"), lim, tok, bc, f))
        return -1;
    if (check_prompts(r, lim, f)) return -1;
    if (r->n_prompts * n > MT_SERVE_MAX_CHOICES)
        return mt_serve_fail_set(f, 400, "n", "%d prompts of %lld choices each are more than %d choices", r->n_prompts,
                                 (long long)n, MT_SERVE_MAX_CHOICES);
    r->n = (int)n;
    r->max_tokens = max_tokens;
    r->sampling = (mt_sampling){temperature == 0, temperature, (int)(top_k < 0 ? 0 : top_k), top_p, penalty};
    r->seeded = seed >= 0;
    if (r->seeded) r->seed = (uint32_t)seed;
    else if (getrandom(&r->seed, sizeof r->seed, 0) != (ssize_t)sizeof r->seed) r->seed = (uint32_t)time(NULL);
    return 0;
}

static int parse(mt_serve_req *r, bool chat, const char *body, size_t len, const mt_serve_limits *lim,
                 const mt_tokenizer *tok, mt_bpe_ctx *bc, mt_serve_fail *f)
{
    memset(r, 0, sizeof *r);
    r->chat = chat;
    size_t bad = mt_utf8_check(body, len);
    if (bad < len) return mt_serve_fail_set(f, 400, NULL, "the body is not valid UTF-8 (byte %zu)", bad);
    json_error_t je;
    json_t *o = json_loadb(body, len, JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, &je);
    if (!o) return mt_serve_fail_set(f, 400, NULL, "malformed JSON: %s (line %d, column %d)", je.text, je.line, je.column);
    int rc = 0;
    if (!json_is_object(o)) rc = mt_serve_fail_set(f, 400, NULL, "the body must be a JSON object, not %s", kind(o));
    else rc = read_fields(r, o, lim, tok, bc, f);
    json_decref(o);
    if (rc) mt_serve_req_free(r);
    return rc;
}

int mt_serve_req_parse(mt_serve_req *r, const char *body, size_t len, const mt_serve_limits *lim,
                       const mt_tokenizer *tok, mt_bpe_ctx *bc, mt_serve_fail *f)
{
    return parse(r, false, body, len, lim, tok, bc, f);
}

int mt_serve_chat_req_parse(mt_serve_req *r, const char *body, size_t len, const mt_serve_limits *lim,
                            const mt_tokenizer *tok, mt_bpe_ctx *bc, mt_serve_fail *f)
{
    return parse(r, true, body, len, lim, tok, bc, f);
}

void mt_serve_req_free(mt_serve_req *r)
{
    for (int i = 0; i < r->n_prompts; i++) {
        free(r->prompts[i].p);
        free(r->prompt_text[i].p);
    }
    free(r->prompts);
    free(r->prompt_text);
    for (int i = 0; i < r->n_stops; i++) free(r->stops[i]);
    free(r->stops);
    memset(r, 0, sizeof *r);
}
