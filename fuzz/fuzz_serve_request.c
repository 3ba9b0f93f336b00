/* fuzz_serve_request.c: the body of a POST /v1/completions (mt-serve's requests, serve/request.h) with
 * GPT-2's tokenizer from share/gpt2 ($MT_TOP, else the current directory): a request that is accepted
 * holds what the engine relies on (1 to 128 choices, prompts of 1 to positions - 1 ids inside the
 * vocabulary, max_tokens within the limit, at most 4 non-empty stop strings); a refused one names a
 * status and a message; the JSON the server would send for either (the completion of empty choices with
 * echo, a stream event, the error) parses back. */
#include <jansson.h>

#include "fuzz.h"
#include "serve/request.h"
#include "serve/response.h"
#include "tok/bpe.h"

static mt_tokenizer tok;
static mt_bpe_ctx *bc;
static const mt_serve_limits lim = {"ck", 64, 48, 50257, NULL};

static void parses_back(const char *s, size_t n)
{
    json_error_t je;
    json_t *v = json_loadb(s, n, JSON_ALLOW_NUL, &je);
    if (!v) abort();
    json_decref(v);
}

static void setup(void)
{
    const char *top = getenv("MT_TOP");
    char v[4200], m[4200];
    snprintf(v, sizeof v, "%s/share/gpt2/vocab.json", top && *top ? top : ".");
    snprintf(m, sizeof m, "%s/share/gpt2/merges.txt", top && *top ? top : ".");
    mt_err e;
    if (mt_bpe_load(&tok.bpe, v, m, &e)) {
        fprintf(stderr, "fuzz_serve_request: %s (run from the top directory or set MT_TOP)\n", e.msg);
        abort();
    }
    tok.vocab_size = 50257;
    tok.eod = 50256;
    bc = mt_bpe_ctx_new(tok.bpe);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!tok.bpe) setup();
    mt_serve_req r;
    mt_serve_fail f;
    if (mt_serve_req_parse(&r, (const char *)data, size, &lim, &tok, bc, &f)) {
        if (f.status < 400 || f.status > 599 || !f.msg[0]) abort();
        char *s = mt_serve_error_json(&f);
        parses_back(s, strlen(s));
        free(s);
        return 0;
    }
    int K = r.n_prompts * r.n;
    if (r.n_prompts < 1 || r.n < 1 || K > MT_SERVE_MAX_CHOICES || r.max_tokens < 0 || r.max_tokens > lim.max_tokens ||
        r.n_stops > MT_SERVE_MAX_STOPS || (!r.max_tokens && !(r.echo && r.prompt_logprobs)) ||
        (r.echo && r.logprobs && !r.prompt_logprobs) || r.top_logprobs < 0 || r.top_logprobs > MT_GEN_MAX_TOP)
        abort();
    for (int i = 0; i < r.n_prompts; i++) {
        if (!r.prompts[i].n || (int64_t)r.prompts[i].n >= lim.positions) abort();
        for (size_t t = 0; t < r.prompts[i].n; t++)
            if (r.prompts[i].p[t] >= lim.vocab_size) abort();
    }
    for (int i = 0; i < r.n_stops; i++)
        if (!r.stops[i][0]) abort();
    /* the server's JSON for it: choices with no tokens, the prompts echoed (and scored, as the engine would
     * with logprobs: each position's log-probability and its alternatives, all of token 0) */
    r.echo = true;
    r.prompt_logprobs |= r.logprobs;
    mt_serve_job *j = mt_serve_job_new(&r);
    snprintf(j->id, sizeof j->id, "cmpl-fuzz");
    j->seqs = mt_xcalloc((size_t)K, sizeof *j->seqs);
    for (int k = 0; k < K && j->req.prompt_logprobs; k++) {
        size_t at = j->req.prompts[k / j->req.n].n, nt = (size_t)j->req.top_logprobs;
        j->seqs[k].prompt_logprob = mt_xcalloc(at, sizeof(double));
        j->seqs[k].ntop = (int)nt;
        j->seqs[k].top_id = mt_xcalloc(at * nt + 1, sizeof(int32_t));
        j->seqs[k].top_lp = mt_xcalloc(at * nt + 1, sizeof(double));
    }
    char *s = mt_serve_completion_json(j, "ck", tok.bpe);
    parses_back(s, strlen(s));
    free(s);
    const mt_buf *p = &j->req.prompt_text[0];
    mt_serve_event_text(&j->events, j, "ck", 0, p->p, p->n, "stop");
    if (j->events.n < 8 || memcmp(j->events.p, "data: ", 6)) abort();
    parses_back(j->events.p + 6, j->events.n - 8);
    mt_serve_job_unref(j);
    return 0;
}
