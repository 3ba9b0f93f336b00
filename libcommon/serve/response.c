/* response.c: the server's JSON bodies and stream events (response.h). */
#include "serve/response.h"

#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "serve/json_text.h"

const char *mt_serve_finish_reason(const char *why)
{
    return why && !strcmp(why, "length") ? "length" : "stop";
}

json_t *mt_serve_jtext(const char *s, size_t n)
{
    mt_buf clean = {0};
    mt_utf8_sanitize(s ? s : "", n, &clean);
    json_t *v = json_stringn(clean.p ? clean.p : "", clean.n);
    free(clean.p);
    return v;
}

char *mt_serve_dump(json_t *o)
{
    char *s = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    if (!s) mt_die("out of memory writing a JSON response");
    return s;
}

/* The message and param may hold bytes of the request (a field's name, JSON's parser quoting where it
 * stopped, possibly inside a character, a cut at the buffer's end): made valid UTF-8 like any text. */
char *mt_serve_error_json(const mt_serve_fail *f)
{
    json_t *e = json_pack("{s:o, s:s, s:o, s:o}", "message", mt_serve_jtext(f->msg, strlen(f->msg)), "type",
                          f->type ? f->type : "invalid_request_error",
                          "param", f->param[0] ? mt_serve_jtext(f->param, strlen(f->param)) : json_null(),
                          "code", f->code ? json_string(f->code) : json_null());
    return mt_serve_dump(json_pack("{s:o}", "error", e));
}

char *mt_serve_models_json(const char *model, int64_t created, int positions)
{
    json_t *m = json_pack("{s:o, s:s, s:I, s:s, s:i}", "id", mt_serve_jtext(model, strlen(model)), "object", "model", "created", (json_int_t)created,
                          "owned_by", "mt", "max_model_len", positions);
    return mt_serve_dump(json_pack("{s:s, s:[o]}", "object", "list", "data", m));
}

static json_t *usage(const mt_serve_job *j)
{
    int64_t p = 0, c = 0;
    for (int i = 0; i < j->req.n_prompts; i++) p += (int64_t)j->req.prompts[i].n;
    for (int k = 0; k < j->req.n_prompts * j->req.n; k++) c += (int64_t)j->seqs[k].out.n;
    return json_pack("{s:I, s:I, s:I}", "prompt_tokens", (json_int_t)p, "completion_tokens", (json_int_t)c,
                     "total_tokens", (json_int_t)(p + c));
}

static json_t *jlogprob(double x)
{
    return isfinite(x) ? json_real(x) : json_null();
}

/* Token id's text as a JSON string, its bytes as a list of integers when bytes is not NULL. */
static json_t *token_text(const mt_bpe *bpe, uint32_t id, json_t **bytes)
{
    size_t n = 0;
    const char *b = mt_bpe_token_bytes(bpe, id, &n);
    if (bytes) {
        *bytes = json_array();
        for (size_t k = 0; b && k < n; k++) json_array_append_new(*bytes, json_integer((unsigned char)b[k]));
    }
    return mt_serve_jtext(b, b ? n : 0);
}

/* OpenAI's logprobs object of a completion's choice k: each token (with echo, the prompt's first), its
 * log-probability (null for the prompt's first), its likeliest alternatives ({text: log-probability},
 * with "logprobs" N > 0; else null) and where it starts in the text (in characters). */
static json_t *logprobs(const mt_serve_job *j, int k, const mt_bpe *bpe)
{
    const mt_gen_seq *s = &j->seqs[k];
    const mt_ids *prompt = &j->req.prompts[k / j->req.n];
    size_t np = j->req.echo ? prompt->n : 0, scored = s->prompt_logprob ? prompt->n - 1 : 0;
    mt_buf all = {0};   /* the text the offsets count in */
    if (np) mt_buf_append(&all, j->req.prompt_text[k / j->req.n].p, j->req.prompt_text[k / j->req.n].n);
    mt_buf_append(&all, s->text.p, s->text.n);
    json_t *toks = json_array(), *lps = json_array(), *offs = json_array(), *tops = s->ntop ? json_array() : json_null();
    size_t pos = 0, chars = 0, counted = 0;
    for (size_t i = 0; i < np + s->out.n; i++) {
        uint32_t id = i < np ? prompt->p[i] : s->out.p[i - np];
        size_t n = 0;
        mt_bpe_token_bytes(bpe, id, &n);
        size_t upto = pos < all.n ? pos : all.n;
        for (; counted < upto; counted++) chars += ((unsigned char)all.p[counted] & 0xC0) != 0x80;
        json_array_append_new(toks, token_text(bpe, id, NULL));
        json_array_append_new(offs, json_integer((json_int_t)chars));
        pos += n;
        /* the log-probability, and the place of its alternatives: none for the prompt's first token (nor for
         * a prompt not scored) */
        int known = i >= np || (i > 0 && s->prompt_logprob);
        size_t at = i < np ? i - 1 : scored + (i - np);
        json_array_append_new(lps, !known ? json_null() : jlogprob(i < np ? s->prompt_logprob[i - 1] : s->logprob[i - np]));
        if (!s->ntop) continue;
        if (!known) {
            json_array_append_new(tops, json_null());
            continue;
        }
        json_t *alt = json_object();
        for (int t = 0; t < s->ntop; t++) {
            json_t *key = token_text(bpe, (uint32_t)s->top_id[at * (size_t)s->ntop + (size_t)t], NULL);
            if (!json_object_get(alt, json_string_value(key)))   /* two ids of one text: the likelier */
                json_object_set_new(alt, json_string_value(key), jlogprob(s->top_lp[at * (size_t)s->ntop + (size_t)t]));
            json_decref(key);
        }
        json_array_append_new(tops, alt);
    }
    free(all.p);
    return json_pack("{s:o, s:o, s:o, s:o}", "tokens", toks, "token_logprobs", lps, "top_logprobs", tops, "text_offset",
                     offs);
}

/* A chat choice's logprobs: {"content": [{"token", "logprob", "bytes", "top_logprobs": [{"token",
 * "logprob", "bytes"}, ...]}, ...]}. */
static json_t *chat_logprobs(const mt_gen_seq *s, const mt_bpe *bpe)
{
    json_t *content = json_array();
    for (size_t i = 0; i < s->out.n; i++) {
        json_t *bytes, *tops = json_array();
        for (int t = 0; t < s->ntop; t++) {
            json_t *tb, *tt = token_text(bpe, (uint32_t)s->top_id[i * (size_t)s->ntop + (size_t)t], &tb);
            json_array_append_new(tops, json_pack("{s:o, s:o, s:o}", "token", tt, "logprob",
                                                  jlogprob(s->top_lp[i * (size_t)s->ntop + (size_t)t]), "bytes", tb));
        }
        json_t *tok = token_text(bpe, s->out.p[i], &bytes);
        json_array_append_new(content, json_pack("{s:o, s:o, s:o, s:o}", "token", tok, "logprob", jlogprob(s->logprob[i]),
                                                 "bytes", bytes, "top_logprobs", tops));
    }
    return json_pack("{s:o}", "content", content);
}

/* A finished chat job: object "chat.completion", each choice's text as the assistant's message. */
static char *chat_json(const mt_serve_job *j, const char *model, const mt_bpe *bpe)
{
    json_t *choices = json_array();
    for (int k = 0; k < j->req.n; k++) {
        const mt_gen_seq *s = &j->seqs[k];
        json_t *msg = json_pack("{s:s, s:o}", "role", "assistant", "content", mt_serve_jtext(s->text.p, s->text.n));
        json_array_append_new(choices, json_pack("{s:i, s:o, s:o, s:s}", "index", k, "message", msg, "logprobs",
                                                 j->req.logprobs ? chat_logprobs(s, bpe) : json_null(), "finish_reason",
                                                 mt_serve_finish_reason(s->why)));
    }
    return mt_serve_dump(json_pack("{s:s, s:s, s:I, s:o, s:o, s:o}", "id", j->id, "object", "chat.completion", "created",
                          (json_int_t)j->created, "model", mt_serve_jtext(model, strlen(model)), "choices", choices, "usage", usage(j)));
}

char *mt_serve_completion_json(const mt_serve_job *j, const char *model, const mt_bpe *bpe)
{
    if (j->req.chat) return chat_json(j, model, bpe);
    json_t *choices = json_array();
    for (int k = 0; k < j->req.n_prompts * j->req.n; k++) {
        const mt_gen_seq *s = &j->seqs[k];
        mt_buf t = {0};
        if (j->req.echo) {
            const mt_buf *p = &j->req.prompt_text[k / j->req.n];
            mt_buf_append(&t, p->p ? p->p : "", p->n);
        }
        mt_buf_append(&t, s->text.p ? s->text.p : "", s->text.n);
        json_t *c = json_pack("{s:o, s:i, s:o, s:s}", "text", mt_serve_jtext(t.p, t.n), "index", k, "logprobs",
                              j->req.logprobs ? logprobs(j, k, bpe) : json_null(), "finish_reason",
                              mt_serve_finish_reason(s->why));
        free(t.p);
        json_array_append_new(choices, c);
    }
    return mt_serve_dump(json_pack("{s:s, s:s, s:I, s:o, s:o, s:o}", "id", j->id, "object", "text_completion", "created",
                          (json_int_t)j->created, "model", mt_serve_jtext(model, strlen(model)), "choices", choices, "usage", usage(j)));
}

static void event(mt_buf *out, json_t *o)
{
    char *s = mt_serve_dump(o);
    mt_buf_append(out, "data: ", 6);
    mt_buf_append(out, s, strlen(s));
    mt_buf_append(out, "\n\n", 2);
    free(s);
}

/* A chat stream's chunk of choice index: delta and finish_reason (NULL: null). */
static void chat_chunk(mt_buf *out, const mt_serve_job *j, const char *model, int index, json_t *delta, const char *finish)
{
    json_t *c = json_pack("{s:i, s:o, s:n, s:o}", "index", index, "delta", delta, "logprobs", "finish_reason",
                          finish ? json_string(finish) : json_null());
    event(out, json_pack("{s:s, s:s, s:I, s:o, s:[o]}", "id", j->id, "object", "chat.completion.chunk", "created",
                         (json_int_t)j->created, "model", mt_serve_jtext(model, strlen(model)), "choices", c));
}

void mt_serve_event_role(mt_buf *out, const mt_serve_job *j, const char *model, int index)
{
    chat_chunk(out, j, model, index, json_pack("{s:s, s:s}", "role", "assistant", "content", ""), NULL);
}

void mt_serve_event_text(mt_buf *out, const mt_serve_job *j, const char *model, int index, const char *text, size_t n,
                         const char *finish)
{
    if (j->req.chat) {   /* the text, then the end in a chunk of its own */
        if (n) chat_chunk(out, j, model, index, json_pack("{s:o}", "content", mt_serve_jtext(text, n)), NULL);
        if (finish) chat_chunk(out, j, model, index, json_object(), finish);
        return;
    }
    json_t *c = json_pack("{s:o, s:i, s:n, s:o}", "text", mt_serve_jtext(text, n), "index", index, "logprobs", "finish_reason",
                          finish ? json_string(finish) : json_null());
    event(out, json_pack("{s:s, s:s, s:I, s:o, s:[o]}", "id", j->id, "object", "text_completion", "created",
                         (json_int_t)j->created, "model", mt_serve_jtext(model, strlen(model)), "choices", c));
}

void mt_serve_event_usage(mt_buf *out, const mt_serve_job *j, const char *model)
{
    event(out, json_pack("{s:s, s:s, s:I, s:o, s:[], s:o}", "id", j->id, "object",
                         j->req.chat ? "chat.completion.chunk" : "text_completion", "created",
                         (json_int_t)j->created, "model", mt_serve_jtext(model, strlen(model)), "choices", "usage", usage(j)));
}

void mt_serve_event_done(mt_buf *out)
{
    mt_buf_append(out, "data: [DONE]\n\n", 14);
}
