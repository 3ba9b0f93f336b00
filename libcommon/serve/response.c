/* response.c: the server's JSON bodies and stream events (response.h). */
#include "serve/response.h"

#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

const char *mt_serve_finish_reason(const char *why)
{
    return why && !strcmp(why, "length") ? "length" : "stop";
}

/* A JSON string of bytes s[0..n), invalid UTF-8 replaced. */
static json_t *jtext(const char *s, size_t n)
{
    mt_buf clean = {0};
    mt_utf8_sanitize(s ? s : "", n, &clean);
    json_t *v = json_stringn(clean.p ? clean.p : "", clean.n);
    free(clean.p);
    return v;
}

static char *dump(json_t *o)
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
    json_t *e = json_pack("{s:o, s:s, s:o, s:o}", "message", jtext(f->msg, strlen(f->msg)), "type",
                          f->type ? f->type : "invalid_request_error",
                          "param", f->param[0] ? jtext(f->param, strlen(f->param)) : json_null(),
                          "code", f->code ? json_string(f->code) : json_null());
    return dump(json_pack("{s:o}", "error", e));
}

char *mt_serve_models_json(const char *model, int64_t created, int positions)
{
    json_t *m = json_pack("{s:o, s:s, s:I, s:s, s:i}", "id", jtext(model, strlen(model)), "object", "model", "created", (json_int_t)created,
                          "owned_by", "mt", "max_model_len", positions);
    return dump(json_pack("{s:s, s:[o]}", "object", "list", "data", m));
}

static json_t *usage(const mt_serve_job *j)
{
    int64_t p = 0, c = 0;
    for (int i = 0; i < j->req.n_prompts; i++) p += (int64_t)j->req.prompts[i].n;
    for (int k = 0; k < j->req.n_prompts * j->req.n; k++) c += (int64_t)j->seqs[k].out.n;
    return json_pack("{s:I, s:I, s:I}", "prompt_tokens", (json_int_t)p, "completion_tokens", (json_int_t)c,
                     "total_tokens", (json_int_t)(p + c));
}

/* OpenAI's logprobs object of a choice: each generated token, its log-probability and where it starts in
 * the text (in characters); top_logprobs null (alternatives are not computed). */
static json_t *logprobs(const mt_gen_seq *s, const mt_bpe *bpe)
{
    json_t *toks = json_array(), *lps = json_array(), *offs = json_array();
    size_t pos = 0, chars = 0, counted = 0;
    for (size_t i = 0; i < s->out.n; i++) {
        size_t n = 0;
        const char *b = mt_bpe_token_bytes(bpe, s->out.p[i], &n);
        size_t upto = pos < s->text.n ? pos : s->text.n;
        for (; counted < upto; counted++) chars += ((unsigned char)s->text.p[counted] & 0xC0) != 0x80;
        json_array_append_new(toks, jtext(b, b ? n : 0));
        json_array_append_new(lps, isfinite(s->logprob[i]) ? json_real(s->logprob[i]) : json_null());
        json_array_append_new(offs, json_integer((json_int_t)chars));
        pos += b ? n : 0;
    }
    return json_pack("{s:o, s:o, s:n, s:o}", "tokens", toks, "token_logprobs", lps, "top_logprobs", "text_offset", offs);
}

/* A chat choice's logprobs: {"content": [{"token", "logprob", "bytes", "top_logprobs": []}, ...]}. */
static json_t *chat_logprobs(const mt_gen_seq *s, const mt_bpe *bpe)
{
    json_t *content = json_array();
    for (size_t i = 0; i < s->out.n; i++) {
        size_t n = 0;
        const char *b = mt_bpe_token_bytes(bpe, s->out.p[i], &n);
        json_t *bytes = json_array();
        for (size_t k = 0; b && k < n; k++) json_array_append_new(bytes, json_integer((unsigned char)b[k]));
        json_array_append_new(content, json_pack("{s:o, s:o, s:o, s:[]}", "token", jtext(b, b ? n : 0), "logprob",
                                                 isfinite(s->logprob[i]) ? json_real(s->logprob[i]) : json_null(),
                                                 "bytes", bytes, "top_logprobs"));
    }
    return json_pack("{s:o}", "content", content);
}

/* A finished chat job: object "chat.completion", each choice's text as the assistant's message. */
static char *chat_json(const mt_serve_job *j, const char *model, const mt_bpe *bpe)
{
    json_t *choices = json_array();
    for (int k = 0; k < j->req.n; k++) {
        const mt_gen_seq *s = &j->seqs[k];
        json_t *msg = json_pack("{s:s, s:o}", "role", "assistant", "content", jtext(s->text.p, s->text.n));
        json_array_append_new(choices, json_pack("{s:i, s:o, s:o, s:s}", "index", k, "message", msg, "logprobs",
                                                 j->req.logprobs ? chat_logprobs(s, bpe) : json_null(), "finish_reason",
                                                 mt_serve_finish_reason(s->why)));
    }
    return dump(json_pack("{s:s, s:s, s:I, s:o, s:o, s:o}", "id", j->id, "object", "chat.completion", "created",
                          (json_int_t)j->created, "model", jtext(model, strlen(model)), "choices", choices, "usage", usage(j)));
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
        json_t *c = json_pack("{s:o, s:i, s:o, s:s}", "text", jtext(t.p, t.n), "index", k, "logprobs",
                              j->req.logprobs ? logprobs(s, bpe) : json_null(), "finish_reason",
                              mt_serve_finish_reason(s->why));
        free(t.p);
        json_array_append_new(choices, c);
    }
    return dump(json_pack("{s:s, s:s, s:I, s:o, s:o, s:o}", "id", j->id, "object", "text_completion", "created",
                          (json_int_t)j->created, "model", jtext(model, strlen(model)), "choices", choices, "usage", usage(j)));
}

static void event(mt_buf *out, json_t *o)
{
    char *s = dump(o);
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
                         (json_int_t)j->created, "model", jtext(model, strlen(model)), "choices", c));
}

void mt_serve_event_role(mt_buf *out, const mt_serve_job *j, const char *model, int index)
{
    chat_chunk(out, j, model, index, json_pack("{s:s, s:s}", "role", "assistant", "content", ""), NULL);
}

void mt_serve_event_text(mt_buf *out, const mt_serve_job *j, const char *model, int index, const char *text, size_t n,
                         const char *finish)
{
    if (j->req.chat) {   /* the text, then the end in a chunk of its own */
        if (n) chat_chunk(out, j, model, index, json_pack("{s:o}", "content", jtext(text, n)), NULL);
        if (finish) chat_chunk(out, j, model, index, json_object(), finish);
        return;
    }
    json_t *c = json_pack("{s:o, s:i, s:n, s:o}", "text", jtext(text, n), "index", index, "logprobs", "finish_reason",
                          finish ? json_string(finish) : json_null());
    event(out, json_pack("{s:s, s:s, s:I, s:o, s:[o]}", "id", j->id, "object", "text_completion", "created",
                         (json_int_t)j->created, "model", jtext(model, strlen(model)), "choices", c));
}

void mt_serve_event_usage(mt_buf *out, const mt_serve_job *j, const char *model)
{
    event(out, json_pack("{s:s, s:s, s:I, s:o, s:[], s:o}", "id", j->id, "object",
                         j->req.chat ? "chat.completion.chunk" : "text_completion", "created",
                         (json_int_t)j->created, "model", jtext(model, strlen(model)), "choices", "usage", usage(j)));
}

void mt_serve_event_done(mt_buf *out)
{
    mt_buf_append(out, "data: [DONE]\n\n", 14);
}
