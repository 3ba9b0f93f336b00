/* test_chat_template: serve/chat_template.h on templates in the styles of ChatML, Llama 2, Llama 3,
 * Mistral, Zephyr and Gemma (tests/golden/chat/), on whitespace control, expressions and filters, and on
 * the refusals of what the subset lacks, with their line numbers. With --render TEMPLATE MESSAGES.json BOS
 * EOS [--gen] it prints "OK\n" and the rendering, or "RAISED\n" and raise_exception's message, or "ERROR\n"
 * and the error (chat-template-oracle.sh compares that with jinja2's). */
#include "serve/chat_template.h"

#include "t.h"

static char top[1024] = ".";

static char *slurp(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    mt_buf b = {0};
    char chunk[4096];
    size_t k;
    while ((k = fread(chunk, 1, sizeof chunk, f)) > 0) mt_buf_append(&b, chunk, k);
    fclose(f);
    mt_buf_putc(&b, 0);
    *n = b.n - 1;
    return b.p;
}

/* The rendering of template src for messages (JSON), or "ERROR: msg" / "RAISED: msg"; to free. */
static char *render_with(const char *src, const char *messages, bool gen)
{
    mt_err e = {{0}};
    mt_chat_template *t = mt_chat_template_parse(src, strlen(src), &e);
    if (!t) {
        char *r = mt_xmalloc(strlen(e.msg) + 16);
        sprintf(r, "ERROR: %s", e.msg);
        return r;
    }
    json_error_t je;
    json_t *m = json_loads(messages, 0, &je);
    if (!m) {
        mt_chat_template_free(t);
        return mt_xstrdup("bad messages JSON");
    }
    mt_chat_vars v = {m, gen, "<s>", "</s>"};
    mt_buf out = {0};
    bool raised;
    int rc = mt_chat_template_render(t, &v, &out, &raised, &e);
    json_decref(m);
    mt_chat_template_free(t);
    if (rc) {
        free(out.p);
        char *r = mt_xmalloc(strlen(e.msg) + 16);
        sprintf(r, "%s: %s", raised ? "RAISED" : "ERROR", e.msg);
        return r;
    }
    mt_buf_putc(&out, 0);
    return out.p;
}

static char *golden(const char *name)
{
    char path[1200];
    size_t n;
    snprintf(path, sizeof path, "%s/tests/golden/chat/%s.jinja", top, name);
    char *s = slurp(path, &n);
    if (!s) {
        fprintf(stderr, "cannot read %s\n", path);
        exit(1);
    }
    return s;
}

#define RENDERS(src, messages, gen, want)                                                                    \
    do {                                                                                                     \
        char *t_got = render_with(src, messages, gen);                                                      \
        T_EQ_STR(t_got, want);                                                                               \
        free(t_got);                                                                                         \
    } while (0)

static const char *const conv = "[{\"role\": \"system\", \"content\": \" Be brief. \"},"
                                " {\"role\": \"user\", \"content\": \"Hi\"},"
                                " {\"role\": \"assistant\", \"content\": \"Hello.\"},"
                                " {\"role\": \"user\", \"content\": \"2+2?\"}]";
static const char *const noSys = "[{\"role\": \"user\", \"content\": \"Hi\"},"
                                 " {\"role\": \"assistant\", \"content\": \"Hello.\"},"
                                 " {\"role\": \"user\", \"content\": \"2+2?\"}]";

TEST(chatml)
{
    char *t = golden("chatml");
    RENDERS(t, conv, true,
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello.<|im_end|>\n"
            "<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\n");
    RENDERS(t, "[{\"role\": \"user\", \"content\": \"x\"}]", false, "<|im_start|>user\nx<|im_end|>\n");
    free(t);
}

TEST(llama2)
{
    char *t = golden("llama2");
    RENDERS(t, conv, true,
            "<s>[INST] <<SYS>>\nBe brief.\n<</SYS>>\n\nHi [/INST] Hello. </s><s>[INST] 2+2? [/INST]");
    RENDERS(t, noSys, false, "<s>[INST] Hi [/INST] Hello. </s><s>[INST] 2+2? [/INST]");
    RENDERS(t, "[{\"role\": \"assistant\", \"content\": \"x\"}]", true,
            "RAISED: Turns must go user, assistant, user, ... (turn 1 is assistant)");
    free(t);
}

TEST(llama3)
{
    char *t = golden("llama3");
    RENDERS(t, noSys, true,
            "<s><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"
            "Hello.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\n2+2?<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n");
    free(t);
}

TEST(mistral)
{
    char *t = golden("mistral");
    RENDERS(t, conv, true, "<s>[INST]  Be brief. \n\nHi [/INST]Hello.</s>[INST] 2+2? [/INST]");
    RENDERS(t, noSys, true, "<s>[INST] Hi [/INST]Hello.</s>[INST] 2+2? [/INST]");
    RENDERS(t, "[{\"role\": \"user\", \"content\": \"x\"}, {\"role\": \"tool\", \"content\": \"y\"}]", true,
            "RAISED: after the system message only user and assistant turns, not tool");
    free(t);
}

TEST(zephyr)
{
    char *t = golden("zephyr");
    RENDERS(t, conv, true,
            "<|system|>\n Be brief. </s>\n<|user|>\nHi</s>\n<|assistant|>\nHello.</s>\n<|user|>\n2+2?</s>\n<|assistant|>\n");
    RENDERS(t, noSys, false, "<|user|>\nHi</s>\n<|assistant|>\nHello.</s>\n<|user|>\n2+2?</s>\n");
    free(t);
}

TEST(gemma)
{
    char *t = golden("gemma");
    RENDERS(t, noSys, true,
            "<s><start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\nHello.<end_of_turn>\n"
            "<start_of_turn>user\n2+2?<end_of_turn>\n<start_of_turn>model\n");
    RENDERS(t, conv, true, "RAISED: this template has no system turn");
    RENDERS(t, "[{\"role\": \"user\", \"content\": \"a\"}, {\"role\": \"user\", \"content\": \"b\"}]", true,
            "RAISED: turns must alternate between user and assistant");
    free(t);
}

/* trim_blocks, lstrip_blocks, '-' and '+', the trailing newline */
TEST(whitespace)
{
    const char *m = "[]";
    RENDERS("a\n  {% if true %}\n  b\n  {% endif %}\nc\n", m, false, "a\n  b\nc");
    RENDERS("a  {%- if true -%}  b  {%- endif %}", m, false, "ab");
    RENDERS("a\n  {%+ if true %}b{% endif %}", m, false, "a\n  b");
    RENDERS("{% if true +%}\nb{% endif %}", m, false, "\nb");
    RENDERS("x {% if true %}y{% endif %}", m, false, "x y");   /* not alone on its line: kept */
    RENDERS("  {{ 'v' }}\n", m, false, "  v");                 /* a variable is not stripped */
    RENDERS("a\n  {# note #}\nb", m, false, "a\nb");
    RENDERS("a {#- note -#} b", m, false, "ab");
    RENDERS("a\r\nb\r\n\n", m, false, "a\nb\n");
    RENDERS("{{- ' x ' -}}\n", m, false, " x ");
}

TEST(expressions)
{
    const char *m = "[{\"role\": \"user\", \"content\": \"hello world\"}, {\"role\": \"assistant\", \"content\": \"ok\"}]";
    RENDERS("{{ messages[1:] | length }} {{ messages[-1]['role'] }} {{ messages[0].content[6:] }}", m, false, "1 assistant world");
    RENDERS("{% for m in messages %}{{ loop.index }}{{ loop.index0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }};{% endfor %}",
            m, false, "10TrueFalse2;21FalseTrue2;");
    RENDERS("{% for m in messages if m.role == 'assistant' %}{{ loop.index }}{{ m.content }}{% endfor %}", m, false, "1ok");
    RENDERS("{% set ns = namespace(k=0) %}{% for m in messages %}{% set ns.k = ns.k + 1 %}{% set local = 1 %}{% endfor %}"
            "{{ ns.k }}{{ local is defined }}", m, false, "2False");
    RENDERS("{{ 1 + 2 * 3 }} {{ 'a' ~ 1 ~ none }} {{ not 0 and 'y' or 'n' }} {{ 3 >= 3 }} {{ 2 < 1 }}", m, false, "7 a1None y True False");
    RENDERS("{{ 'x' if messages | length > 5 else 'y' }}{{ 'z' if false }}", m, false, "y");
    RENDERS("{{ messages[0].missing }}|{{ messages[9] }}|{{ undefined_name | default('d') }}|{{ none }}|{{ true }}", m, false,
            "||d|None|True");
    RENDERS("{{ '\\u00e9\\x41\\n' | tojson }} {{ {'a': [1, 2.5, none]} | tojson }}", m, false, "\"\xc3\xa9" "A\\n\" {\"a\": [1, 2.5, null]}");
    RENDERS("{{ ' a ' | trim }}{{ 'AbC' | upper }}{{ 'AbC' | lower }}{{ 'ab'.startswith('a') }}{{ 'ab'.endswith('a') }}"
            "{{ ' x '.rstrip() }}|{{ 'a b'.split() }}", m, false, "aABCabcTrueFalse x|['a', 'b']");
    RENDERS("{{ 'a' in 'cat' }}{{ 'user' not in messages | map }}", m, false,
            "ERROR: chat template line 1: filter 'map' is not supported");
    RENDERS("{{ messages[0].role is string }}{{ messages[0].x is none }}{{ messages[0].x is not defined }}{{ none is none }}",
            m, false, "TrueFalseTrueTrue");
}

/* What the subset lacks: refused at parse time with the line */
TEST(refusals)
{
    const char *m = "[]";
    RENDERS("a\n\n{{ x | xyz }}", m, false, "ERROR: chat template line 3: filter 'xyz' is not supported");
    RENDERS("{% macro f() %}{% endmacro %}", m, false, "ERROR: chat template line 1: tag 'macro' is not supported");
    RENDERS("\n{% if x is divisibleby %}{% endif %}", m, false, "ERROR: chat template line 2: test 'divisibleby' is not supported");
    RENDERS("{{ cycler(1) }}", m, false, "ERROR: chat template line 1: function 'cycler' is not supported");
    RENDERS("\n\n\n{{ 'a'.format(1) }}", m, false, "ERROR: chat template line 4: method 'format' is not supported");
    RENDERS("{% for x in y %}\n{% if x %}\n", m, false, "ERROR: chat template line 2: the 'if' of this line has no 'endif'");
    RENDERS("{% include 'x' %}", m, false, "ERROR: chat template line 1: tag 'include' is not supported");
    RENDERS("{{ 2 ** 3 }}", m, false, "ERROR: chat template line 1: the operator '**' is not supported");
    RENDERS("x\n{% endfor %}", m, false, "ERROR: chat template line 2: unexpected 'endfor'");
    RENDERS("{% break %}", m, false, "ERROR: chat template line 1: 'break' outside a for loop");
    RENDERS("{{ 'abc }}", m, false, "ERROR: chat template line 1: a string that never ends");
    RENDERS("a\n{# open", m, false, "ERROR: chat template line 2: a {# comment that never ends");
    RENDERS("{% if true %}x{% endif", m, false, "ERROR: chat template line 1: a {% tag that never ends");
    /* at render time: the line of the expression */
    RENDERS("\n{{ messages.nothing.deeper }}", m, false,
            "ERROR: chat template line 2: 'nothing' is undefined, so it has no attribute 'deeper'");
    RENDERS("{{ 1 + 'a' }}", m, false, "ERROR: chat template line 1: '+' is not supported between int and str");
    RENDERS("{% set x = 1 %}{% set x.y = 2 %}", m, false, "ERROR: chat template line 1: cannot set 'x.y': 'x' is not a namespace()");
    RENDERS("{{ raise_exception('no ' ~ 'way') }}", m, false, "RAISED: no way");
}

T_MAIN_BEGIN("test_chat_template")
const char *t = getenv("MT_TOP");
if (t && *t) snprintf(top, sizeof top, "%s", t);
if (argc >= 6 && !strcmp(argv[1], "--render")) {   /* the oracle's helper */
    size_t n;
    char *src = slurp(argv[2], &n), *msgs = slurp(argv[3], &n);
    if (!src || !msgs) return 2;
    mt_err e = {{0}};
    mt_chat_template *tp = mt_chat_template_parse(src, strlen(src), &e);
    if (!tp) {
        printf("ERROR\n%s", e.msg);
        free(src);
        free(msgs);
        return 0;
    }
    json_error_t je;
    json_t *m = json_loads(msgs, 0, &je);
    mt_chat_vars v = {m, argc > 6 && !strcmp(argv[6], "--gen"), argv[4], argv[5]};
    mt_buf out = {0};
    bool raised;
    if (mt_chat_template_render(tp, &v, &out, &raised, &e)) printf("%s\n%s", raised ? "RAISED" : "ERROR", e.msg);
    else printf("OK\n%.*s", (int)out.n, out.p ? out.p : "");
    free(out.p);
    json_decref(m);
    mt_chat_template_free(tp);
    free(src);
    free(msgs);
    return 0;
}
RUN(chatml);
RUN(llama2);
RUN(llama3);
RUN(mistral);
RUN(zephyr);
RUN(gemma);
RUN(whitespace);
RUN(expressions);
RUN(refusals);
T_MAIN_END
