/* api.c: Megatron's PUT /api, its request read into an mt_serve_req and its answer (api.h). */
#include "serve/api.h"

#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "serve/json_text.h"
#include "util/utf8.h"

static const char *const known[] = {
    "prompts", "tokens_to_generate", "logprobs", "temperature", "top_k", "top_p", "top_p_decay", "top_p_bound",
    "add_BOS", "stop_on_eol", "stop_on_double_eol", "prevent_newline_after_colon", "random_seed", "stop_token",
    "length_penalty", NULL,
};

/* A field that must be a boolean: absent leaves *out. */
static int boolean(json_t *o, const char *name, bool *out, mt_serve_fail *f)
{
    json_t *v = json_object_get(o, name);
    if (!v) return 0;
    if (!json_is_boolean(v)) return mt_serve_fail_set(f, 400, name, "%s must be a boolean value", name);
    *out = json_is_true(v);
    return 0;
}

/* A number in [lo, hi] (lo_open: above lo); integer: an integer. Absent leaves *out. */
static int number(json_t *o, const char *name, bool integer, double lo, bool lo_open, double hi, double *out,
                  mt_serve_fail *f)
{
    json_t *v = json_object_get(o, name);
    if (!v) return 0;
    double x = json_is_number(v) ? json_number_value(v) : NAN;
    if ((integer ? !json_is_integer(v) : !json_is_number(v)) || !isfinite(x) || x < lo || (lo_open && x == lo) ||
        x > hi)
        return mt_serve_fail_set(f, 400, name, "%s must be %s in %s%g, %g]", name, integer ? "an integer" : "a number",
                                 lo_open ? "(" : "[", lo, hi);
    *out = x;
    return 0;
}

static int read_api(mt_serve_req *r, json_t *o, const mt_serve_limits *lim, const mt_tokenizer *tok, mt_bpe_ctx *bc,
                    mt_serve_fail *f)
{
    static const char *const retired[][2] = {
        {"max_len", "max_len is no longer used; use tokens_to_generate"},
        {"sentences", "sentences is no longer used; use prompts"},
        {"beam_width", "beam search is not supported"},
    };
    for (size_t i = 0; i < sizeof retired / sizeof *retired; i++)
        if (json_object_get(o, retired[i][0])) return mt_serve_fail_set(f, 400, retired[i][0], "%s", retired[i][1]);
    const char *key;
    json_t *v;
    json_object_foreach(o, key, v) {
        int i = 0;
        while (known[i] && strcmp(known[i], key)) i++;
        if (!known[i]) return mt_serve_fail_set(f, 400, key, "unknown field \"%s\"", key);
    }
    json_t *p = json_object_get(o, "prompts");
    if (!p) return mt_serve_fail_set(f, 400, "prompts", "prompts argument required");
    if (!json_is_array(p)) return mt_serve_fail_set(f, 400, "prompts", "prompts is not a list of strings");
    if (!json_array_size(p)) return mt_serve_fail_set(f, 400, "prompts", "prompts is empty");
    if (json_array_size(p) > MT_SERVE_MAX_CHOICES)
        return mt_serve_fail_set(f, 400, "prompts", "Maximum number of prompts is %d", MT_SERVE_MAX_CHOICES);
    double gen = 64, temperature = 1, top_k = 0, top_p = 0, seed = -1, zero = 0, one = 1, stop_token = (double)tok->eod;
    bool logprobs = false, bos = false, colon = false;
    if (number(o, "tokens_to_generate", true, 0, false, (double)lim->max_tokens, &gen, f) ||
        boolean(o, "logprobs", &logprobs, f) || number(o, "temperature", false, 0, true, 100, &temperature, f) ||
        number(o, "top_k", true, 0, false, 1000, &top_k, f) || number(o, "top_p", false, 0, false, 1, &top_p, f) ||
        number(o, "top_p_decay", false, 0, false, 0, &zero, f) || number(o, "top_p_bound", false, 0, false, 0, &zero, f) ||
        number(o, "length_penalty", false, 1, false, 1, &one, f) || boolean(o, "add_BOS", &bos, f) ||
        boolean(o, "stop_on_eol", &r->stop_on_eol, f) || boolean(o, "stop_on_double_eol", &r->stop_on_double_eol, f) ||
        boolean(o, "prevent_newline_after_colon", &colon, f) ||
        number(o, "random_seed", true, 0, false, UINT32_MAX, &seed, f) ||
        number(o, "stop_token", true, (double)tok->eod, false, (double)tok->eod, &stop_token, f))
        return -1;
    if (colon) return mt_serve_fail_set(f, 400, "prevent_newline_after_colon", "prevent_newline_after_colon is not supported");
    if (gen == 0 && !logprobs)
        return mt_serve_fail_set(f, 400, "tokens_to_generate", "tokens_to_generate=0 implies logprobs should be True");
    if (top_k > 0 && top_p > 0) return mt_serve_fail_set(f, 400, "top_p", "cannot set both top-k and top-p samplings.");
    if (bos && tok->eod < 0)
        return mt_serve_fail_set(f, 400, "add_BOS", "add_BOS: this model's tokenizer has no end-of-document token");
    r->n_prompts = (int)json_array_size(p);
    r->prompts = mt_xcalloc((size_t)r->n_prompts, sizeof *r->prompts);
    r->prompt_text = mt_xcalloc((size_t)r->n_prompts, sizeof *r->prompt_text);
    for (int i = 0; i < r->n_prompts; i++) {
        json_t *s = json_array_get(p, (size_t)i);
        if (!json_is_string(s)) return mt_serve_fail_set(f, 400, "prompts", "prompts is not a list of strings");
        if (!json_string_length(s) && !bos) return mt_serve_fail_set(f, 400, "prompts", "Empty prompts require add_BOS=true");
        mt_buf_append(&r->prompt_text[i], json_string_value(s), json_string_length(s));
        if (bos) mt_ids_push(&r->prompts[i], (uint32_t)tok->eod);
        mt_tokenizer_encode(tok, bc, json_string_value(s), json_string_length(s), &r->prompts[i]);
        size_t n = r->prompts[i].n;
        if ((int64_t)n > lim->positions || ((int64_t)n == lim->positions && gen > 0))
            return mt_serve_fail_set(f, 400, "prompts", "prompt %d has %zu tokens, more than the model's %d positions %s",
                                     i, n, lim->positions, gen > 0 ? "leave room for" : "hold");
    }
    r->api = true;
    r->n = 1;
    r->max_tokens = (int64_t)gen;
    r->logprobs = logprobs;
    r->prompt_logprobs = logprobs;
    r->sampling = (mt_sampling){0, temperature, (int)top_k, top_p > 0 ? top_p : 1.0, 1.0};
    r->seeded = seed >= 0;
    if (r->seeded) r->seed = (uint32_t)seed;
    else if (getrandom(&r->seed, sizeof r->seed, 0) != (ssize_t)sizeof r->seed) r->seed = (uint32_t)time(NULL);
    return 0;
}

int mt_serve_api_parse(mt_serve_req *r, const char *body, size_t len, const mt_serve_limits *lim,
                       const mt_tokenizer *tok, mt_bpe_ctx *bc, mt_serve_fail *f)
{
    memset(r, 0, sizeof *r);
    size_t bad = mt_utf8_check(body, len);
    if (bad < len) return mt_serve_fail_set(f, 400, NULL, "the body is not valid UTF-8 (byte %zu)", bad);
    json_error_t je;
    json_t *o = json_loadb(body, len, JSON_REJECT_DUPLICATES, &je);
    if (!o) return mt_serve_fail_set(f, 400, NULL, "malformed JSON: %s (line %d, column %d)", je.text, je.line, je.column);
    int rc = json_is_object(o) ? read_api(r, o, lim, tok, bc, f)
                               : mt_serve_fail_set(f, 400, NULL, "the body must be a JSON object");
    json_decref(o);
    if (rc) mt_serve_req_free(r);
    return rc;
}

char *mt_serve_api_json(const mt_serve_job *j, const mt_bpe *bpe)
{
    const mt_serve_req *r = &j->req;
    json_t *texts = json_array(), *tokens = json_array(), *segments = json_array(), *lps = json_array();
    for (int k = 0; k < r->n_prompts; k++) {
        const mt_gen_seq *s = &j->seqs[k];
        const mt_ids *p = &r->prompts[k];
        mt_buf t = {0};
        mt_buf_append(&t, r->prompt_text[k].p, r->prompt_text[k].n);
        mt_buf_append(&t, s->text.p, s->text.n);
        json_array_append_new(texts, mt_serve_jtext(t.p, t.n));
        json_t *ids = json_array(), *seg = json_array(), *lp = json_array();
        for (size_t i = 0; i < p->n + s->out.n; i++) {
            uint32_t id = i < p->n ? p->p[i] : s->out.p[i - p->n];
            json_array_append_new(ids, json_integer(id));
            mt_buf piece = {0};
            mt_err e;
            if (mt_bpe_decode(bpe, &id, 1, &piece, &e)) piece.n = 0;
            json_array_append_new(seg, mt_serve_jtext(piece.p, piece.n));
            free(piece.p);
            if (i && r->logprobs) {
                double x = i < p->n ? s->prompt_logprob[i - 1] : s->logprob[i - p->n];
                json_array_append_new(lp, isfinite(x) ? json_real(x) : json_null());
            }
        }
        free(t.p);
        json_array_append_new(tokens, ids);
        json_array_append_new(segments, seg);
        json_array_append_new(lps, lp);
    }
    json_t *o = json_pack("{s:o, s:o, s:o}", "text", texts, "tokens", tokens, "segments", segments);
    if (r->logprobs) json_object_set_new(o, "logprobs", lps);
    else json_decref(lps);
    return mt_serve_dump(o);
}

char *mt_serve_api_error_json(const mt_serve_fail *f)
{
    return mt_serve_dump(json_pack("{s:o}", "message", mt_serve_jtext(f->msg, strlen(f->msg))));
}
