/* test_serve_request: serve/request.h without a server: the prompt forms and what they become, the
 * defaults, the neutral values of OpenAI's unimplemented fields, and each refusal with its status and the
 * field it names (serve.sh asks a running mt-serve; this covers the rest of the table); chat requests:
 * the prompt is the rendered messages tokenized as a completion's text, their own fields and refusals. */
#include "serve/request.h"

#include "serve/chat_source.h"

#include "t.h"
#include "tok/bpe.h"

static char top[1024] = ".";
static mt_tokenizer tok;
static mt_bpe_ctx *bc;
static const mt_serve_limits lim = {"ck", 64, 48, 50257, NULL};

static int parse(const char *body, mt_serve_req *r, mt_serve_fail *f)
{
    return mt_serve_req_parse(r, body, strlen(body), &lim, &tok, bc, f);
}

/* body is refused with status, naming param ("" for none) */
static void refused(const char *body, int status, const char *param)
{
    mt_serve_req r;
    mt_serve_fail f;
    if (!parse(body, &r, &f)) {
        mt_serve_req_free(&r);
        T_FAILF("accepted: %s", body);
    } else if (f.status != status || strcmp(f.param, param) || !f.msg[0] || strcmp(f.type, "invalid_request_error")) {
        T_FAILF("%s: %d, param \"%s\" (%s); expected %d, \"%s\"", body, f.status, f.param, f.msg, status, param);
    }
}

static void accepted(const char *body, mt_serve_req *r)
{
    mt_serve_fail f;
    if (parse(body, r, &f)) {
        T_FAILF("refused: %s: %s", body, f.msg);
        memset(r, 0, sizeof *r);
    }
}

TEST(prompt_forms)
{
    mt_serve_req r;
    mt_ids want = {0};
    mt_bpe_encode(bc, "def f3(x", 8, &want);
    accepted("{\"prompt\": \"def f3(x\"}", &r);
    T_EQ_INT(r.n_prompts, 1);
    T_CHECK(r.n_prompts == 1 && r.prompts[0].n == want.n && !memcmp(r.prompts[0].p, want.p, want.n * 4));
    mt_serve_req_free(&r);
    accepted("{\"prompt\": [\"def f3(x\", \"import os\"]}", &r);
    T_EQ_INT(r.n_prompts, 2);
    T_CHECK(r.n_prompts == 2 && r.prompts[0].n == want.n && r.prompts[1].n == 2);
    mt_serve_req_free(&r);
    accepted("{\"prompt\": [4299, 277]}", &r);   /* one prompt of ids; its text is the ids decoded */
    T_CHECK(r.n_prompts == 1 && r.prompts[0].n == 2 && r.prompts[0].p[0] == 4299 && r.prompts[0].p[1] == 277);
    T_CHECK(r.n_prompts == 1 && r.prompt_text[0].n == 5 && !memcmp(r.prompt_text[0].p, "def f", 5));
    mt_serve_req_free(&r);
    accepted("{\"prompt\": [[4299], [277, 18, 7]]}", &r);
    T_CHECK(r.n_prompts == 2 && r.prompts[0].n == 1 && r.prompts[1].n == 3);
    mt_serve_req_free(&r);
    free(want.p);
}

TEST(defaults_and_values)
{
    mt_serve_req r;
    accepted("{\"prompt\": \"x\"}", &r);
    T_CHECK(r.n == 1 && r.max_tokens == 16 && !r.sampling.greedy && r.sampling.temperature == 1);
    T_CHECK(r.sampling.top_k == 0 && r.sampling.top_p == 1 && r.sampling.repetition_penalty == 1);
    T_CHECK(!r.seeded && !r.echo && !r.stream && !r.logprobs && r.n_stops == 0);
    mt_serve_req_free(&r);
    accepted("{\"prompt\": \"x\", \"temperature\": 0, \"top_k\": -1, \"seed\": 4294967295, \"n\": 3, \"max_tokens\": 64,"
             " \"stop\": [\"a\", \"\", \"\\n\"], \"logprobs\": 0, \"top_p\": 0.5}", &r);
    T_CHECK(r.sampling.greedy && r.sampling.top_k == 0 && r.seeded && r.seed == 4294967295u && r.n == 3);
    T_CHECK(r.max_tokens == 64 && r.logprobs && r.sampling.top_p == 0.5 && !r.top_logprobs && !r.prompt_logprobs);
    T_CHECK(r.n_stops == 2 && !strcmp(r.stops[0], "a") && !strcmp(r.stops[1], "\n"));   /* "" dropped */
    mt_serve_req_free(&r);
    accepted("{\"prompt\": \"x\", \"stream\": true, \"stream_options\": {\"include_usage\": true}, \"stop\": \"yy\","
             " \"echo\": true}", &r);
    T_CHECK(r.stream && r.include_usage && r.echo && r.n_stops == 1 && !strcmp(r.stops[0], "yy"));
    mt_serve_req_free(&r);
    /* the alternatives; with echo the prompt's log-probabilities; max_tokens 0 scores the prompt only */
    accepted("{\"prompt\": \"x\", \"logprobs\": 5}", &r);
    T_CHECK(r.logprobs && r.top_logprobs == 5 && !r.prompt_logprobs);
    mt_serve_req_free(&r);
    accepted("{\"prompt\": \"x\", \"logprobs\": 2, \"echo\": true}", &r);
    T_CHECK(r.logprobs && r.top_logprobs == 2 && r.prompt_logprobs && r.max_tokens == 16);
    mt_serve_req_free(&r);
    accepted("{\"prompt\": \"x y\", \"logprobs\": 0, \"echo\": true, \"max_tokens\": 0}", &r);
    T_CHECK(r.logprobs && !r.top_logprobs && r.prompt_logprobs && r.max_tokens == 0);
    mt_serve_req_free(&r);
    /* OpenAI's fields that are not implemented pass at their neutral values */
    accepted("{\"prompt\": \"x\", \"presence_penalty\": 0, \"frequency_penalty\": 0, \"best_of\": 2, \"n\": 2,"
             " \"logit_bias\": {}, \"suffix\": \"\", \"user\": \"u\", \"model\": \"ck\", \"seed\": null}", &r);
    T_CHECK(r.n == 2);
    mt_serve_req_free(&r);
}

TEST(refusals)
{
    static const struct {
        const char *body;
        int status;
        const char *param;
    } cases[] = {
        {"", 400, ""},
        {"{\"prompt\": \"x\"} x", 400, ""},
        {"\"x\"", 400, ""},
        {"{}", 400, "prompt"},
        {"{\"prompt\": null}", 400, "prompt"},
        {"{\"prompt\": []}", 400, "prompt"},
        {"{\"prompt\": [true]}", 400, "prompt"},
        {"{\"prompt\": [[1, 2], \"x\"]}", 400, "prompt"},
        {"{\"prompt\": [1, \"x\"]}", 400, "prompt"},
        {"{\"prompt\": [-1]}", 400, "prompt"},
        {"{\"prompt\": [[]]}", 400, "prompt"},
        {"{\"prompt\": {\"a\": 1}}", 400, "prompt"},
        {"{\"prompt\": \"x\", \"Prompt\": \"y\"}", 400, "Prompt"},
        {"{\"prompt\": \"x\", \"max_tokens\": 0}", 400, "max_tokens"},
        {"{\"prompt\": \"x\", \"max_tokens\": 1.5}", 400, "max_tokens"},
        {"{\"prompt\": \"x\", \"max_tokens\": \"8\"}", 400, "max_tokens"},
        {"{\"prompt\": \"x\", \"temperature\": -1}", 400, "temperature"},
        {"{\"prompt\": \"x\", \"temperature\": true}", 400, "temperature"},
        {"{\"prompt\": \"x\", \"top_p\": 0}", 400, "top_p"},
        {"{\"prompt\": \"x\", \"top_p\": 1.5}", 400, "top_p"},
        {"{\"prompt\": \"x\", \"top_k\": -2}", 400, "top_k"},
        {"{\"prompt\": \"x\", \"repetition_penalty\": 0}", 400, "repetition_penalty"},
        {"{\"prompt\": \"x\", \"seed\": -1}", 400, "seed"},
        {"{\"prompt\": \"x\", \"seed\": 4294967296}", 400, "seed"},
        {"{\"prompt\": \"x\", \"n\": 0}", 400, "n"},
        {"{\"prompt\": \"x\", \"n\": 129}", 400, "n"},
        {"{\"prompt\": [\"x\", \"y\"], \"n\": 65}", 400, "n"},
        {"{\"prompt\": \"x\", \"echo\": 1}", 400, "echo"},
        {"{\"prompt\": \"x\", \"stream\": \"yes\"}", 400, "stream"},
        {"{\"prompt\": \"x\", \"stop\": 5}", 400, "stop"},
        {"{\"prompt\": \"x\", \"stop\": [\"a\", 5]}", 400, "stop"},
        {"{\"prompt\": \"x\", \"stop\": [\"a\", \"b\", \"c\", \"d\", \"e\"]}", 400, "stop"},
        {"{\"prompt\": \"x\", \"stop\": \"a\\u0000b\"}", 400, "stop"},
        {"{\"prompt\": \"x\", \"stream_options\": {\"include_usage\": true}}", 400, "stream_options"},
        {"{\"prompt\": \"x\", \"stream\": true, \"stream_options\": {\"usage\": true}}", 400, "stream_options"},
        {"{\"prompt\": \"x\", \"stream\": true, \"stream_options\": []}", 400, "stream_options"},
        {"{\"prompt\": \"x\", \"logprobs\": 6}", 400, "logprobs"},
        {"{\"prompt\": \"x\", \"logprobs\": -1}", 400, "logprobs"},
        {"{\"prompt\": \"x\", \"logprobs\": 0, \"stream\": true}", 400, "logprobs"},
        {"{\"prompt\": \"x\", \"max_tokens\": 0}", 400, "max_tokens"},
        {"{\"prompt\": \"x\", \"max_tokens\": 0, \"echo\": true, \"stream\": true}", 400, "max_tokens"},
        {"{\"prompt\": \"x\", \"presence_penalty\": 0.5}", 400, "presence_penalty"},
        {"{\"prompt\": \"x\", \"frequency_penalty\": 3}", 400, "frequency_penalty"},
        {"{\"prompt\": \"x\", \"best_of\": 2}", 400, "best_of"},
        {"{\"prompt\": \"x\", \"logit_bias\": {\"1\": 2}}", 400, "logit_bias"},
        {"{\"prompt\": \"x\", \"suffix\": \"y\"}", 400, "suffix"},
        {"{\"prompt\": \"x\", \"user\": 5}", 400, "user"},
        {"{\"prompt\": \"x\", \"model\": 5}", 400, "model"},
        {"{\"prompt\": \"x\", \"model\": \"other\"}", 404, "model"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) refused(cases[i].body, cases[i].status, cases[i].param);
    refused("{\"prompt\": \"caf\xe9\"}", 400, "");   /* invalid UTF-8 */
    mt_serve_req r;
    mt_serve_fail f;
    const char body[] = "{\"prompt\": \"x\"}\0";   /* a NUL byte after the object */
    T_EQ_INT(mt_serve_req_parse(&r, body, sizeof body - 1, &lim, &tok, bc, &f), -1);
    parse("{\"prompt\": \"x\", \"model\": \"other\"}", &r, &f);
    T_CHECK(f.code && !strcmp(f.code, "model_not_found"));
}

TEST(prompt_room)
{
    /* 48 positions: a prompt of 47 ids leaves one, of 48 none */
    char body[600] = "{\"prompt\": [";
    for (int i = 0; i < 48; i++) snprintf(body + strlen(body), sizeof body - strlen(body), "%s%d", i ? ", " : "", 87);
    strcat(body, "]}");
    refused(body, 400, "prompt");
    char *comma = strrchr(body, ',');
    strcpy(comma, "]}");
    mt_serve_req r;
    accepted(body, &r);
    T_CHECK(r.n_prompts == 1 && r.prompts[0].n == 47);
    mt_serve_req_free(&r);
    refused("{\"prompt\": [50257]}", 400, "prompt");   /* ids below the tokenizer's vocabulary */
    refused("{\"prompt\": \"x\", \"max_tokens\": 65}", 400, "max_tokens");
}

/* A chat request of body against a server with template src (NULL: none) */
static int chat_parse(const char *src, const char *body, mt_serve_req *r, mt_serve_fail *f)
{
    mt_serve_chat ch = {0};
    mt_err e;
    if (src && !(ch.tmpl = mt_chat_template_parse(src, strlen(src), &e))) {
        T_FAILF("%s", e.msg);
        return -1;
    }
    ch.bos = "<s>";
    ch.eos = "<|endoftext|>";
    snprintf(ch.why, sizeof ch.why, "no tokenizer_config.json");
    mt_serve_limits cl = lim;
    cl.chat = &ch;
    int rc = mt_serve_chat_req_parse(r, body, strlen(body), &cl, &tok, bc, f);
    mt_chat_template_free(ch.tmpl);
    return rc;
}

static const char *const tmpl = "{% for m in messages %}{{ m.role }}: {{ m.content }}{{ eos_token }}\n{% endfor %}"
                                "{% if m is defined %}never{% endif %}{% if add_generation_prompt %}assistant:{% endif %}"
                                "{% if messages[0].role == 'tool' %}{{ raise_exception('no tools') }}{% endif %}";

TEST(chat)
{
    mt_serve_req r;
    mt_serve_fail f;
    const char *text = "system: be brief<|endoftext|>\nuser: def f(x<|endoftext|>\nassistant:";
    mt_ids want = {0};
    mt_tokenizer_encode(&tok, bc, text, strlen(text), &want);   /* as a completion's prompt text */
    if (chat_parse(tmpl, "{\"messages\": [{\"role\": \"system\", \"content\": \"be brief\"}, {\"role\": \"user\","
                         " \"content\": [{\"type\": \"text\", \"text\": \"def\"}, {\"type\": \"text\", \"text\": \"f(x\"}]}]}", &r, &f)) {
        T_FAILF("refused: %s", f.msg);
    } else {
        T_CHECK(r.chat && r.n_prompts == 1 && r.n == 1 && !r.echo && !r.logprobs);
        T_EQ_INT(r.max_tokens, 64);   /* the server's limit */
        /* the parts are joined by a newline: "def\nf(x" */
        mt_ids parts = {0};
        const char *t2 = "system: be brief<|endoftext|>\nuser: def\nf(x<|endoftext|>\nassistant:";
        mt_tokenizer_encode(&tok, bc, t2, strlen(t2), &parts);
        T_CHECK(r.n_prompts == 1 && r.prompts[0].n == parts.n && !memcmp(r.prompts[0].p, parts.p, parts.n * 4));
        T_CHECK(r.n_prompts == 1 && r.prompt_text[0].n == strlen(t2) && !memcmp(r.prompt_text[0].p, t2, strlen(t2)));
        free(parts.p);
        mt_serve_req_free(&r);
    }
    if (chat_parse(tmpl, "{\"messages\": [{\"role\": \"system\", \"content\": \"be brief\"}, {\"role\": \"user\","
                         " \"content\": \"def f(x\"}], \"max_completion_tokens\": 7, \"max_tokens\": 9, \"logprobs\": true,"
                         " \"top_logprobs\": 0, \"n\": 2, \"seed\": 3, \"temperature\": 0}", &r, &f)) {
        T_FAILF("refused: %s", f.msg);
    } else {
        T_CHECK(r.n_prompts == 1 && r.prompts[0].n == want.n && !memcmp(r.prompts[0].p, want.p, want.n * 4));
        T_CHECK(r.max_tokens == 7 && r.logprobs && r.n == 2 && r.seeded && r.seed == 3 && r.sampling.greedy);
        mt_serve_req_free(&r);
    }
    free(want.p);
    static const struct {
        const char *src, *body;
        int status;
        const char *param, *says;
    } bad[] = {
        {tmpl, "{\"messages\": [{\"role\": \"tool\", \"content\": \"x\"}]}", 400, "messages", "no tools"},
        {tmpl, "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"echo\": true}", 400, "echo", "unknown field"},
        {tmpl, "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"logprobs\": 0}", 400, "logprobs", "boolean"},
        {tmpl, "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"max_completion_tokens\": 65}", 400,
         "max_completion_tokens", "limit"},
        {tmpl, "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"max_tokens\": 0}", 400, "max_tokens", "outside"},
        {tmpl, "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"top_logprobs\": 1}", 400, "top_logprobs", "needs"},
        {tmpl, "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"logprobs\": true, \"stream\": true}", 400,
         "logprobs", "stream"},
        {tmpl, "{\"messages\": {\"role\": \"user\"}}", 400, "messages", "list"},
        {tmpl, "{\"messages\": [{\"role\": 1, \"content\": \"x\"}]}", 400, "messages", "role"},
        {tmpl, "{\"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"image_url\"}]}]}", 400, "messages", "image_url"},
        {tmpl, "{\"messages\": [{\"role\": \"user\", \"content\": null}]}", 400, "messages", "content"},
        {"{{ messages[0].nope.x }}", "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}]}", 400, "messages",
         "cannot render these messages: chat template line 1: 'nope' is undefined"},
        {"{% for m in messages %}{% endfor %}", "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}]}", 400, "messages",
         "empty prompt"},
        {NULL, "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}]}", 501, "", "--chat-template"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        if (!chat_parse(bad[i].src, bad[i].body, &r, &f)) {
            mt_serve_req_free(&r);
            T_FAILF("accepted: %s", bad[i].body);
        } else if (f.status != bad[i].status || strcmp(f.param, bad[i].param) || !strstr(f.msg, bad[i].says)) {
            T_FAILF("%s: %d, param \"%s\" (%s); expected %d, \"%s\", \"%s\"", bad[i].body, f.status, f.param, f.msg,
                    bad[i].status, bad[i].param, bad[i].says);
        }
    }
}

T_MAIN_BEGIN("test_serve_request")
const char *t = getenv("MT_TOP");
if (t && *t) snprintf(top, sizeof top, "%s", t);
char v[1200], m[1200];
snprintf(v, sizeof v, "%s/share/gpt2/vocab.json", top);
snprintf(m, sizeof m, "%s/share/gpt2/merges.txt", top);
mt_err e = {{0}};
if (mt_bpe_load(&tok.bpe, v, m, &e)) {
    fprintf(stderr, "%s\n", e.msg);
    return 1;
}
tok.vocab_size = 50257;
tok.eod = 50256;
bc = mt_bpe_ctx_new(tok.bpe);
RUN(prompt_forms);
RUN(defaults_and_values);
RUN(refusals);
RUN(prompt_room);
RUN(chat);
mt_bpe_ctx_free(bc);
mt_bpe_free(tok.bpe);
T_MAIN_END
