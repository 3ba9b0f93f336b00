/* mt-generate: text continuation of prompts by a checkpoint written by mt-train (man mt-generate.1): the
 * flags, reading prompts and batching them, and printing; the decoding itself (KV cache, sampling, stop
 * string) is gen/engine.h's. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/open_gen.h"
#include "gen/engine.h"
#include "io/jsonl.h"
#include "io/reader.h"
#include "kernels.h"
#include "model/device.h"
#include "model/gpt.h"
#include "tok/bpe.h"
#include "util/err.h"
#include "util/flags.h"
#include "util/ompenv.h"
#include "util/utf8.h"
#include "util/vec.h"

static const char *load_dir, *vocab_file, *merge_file, *device, *json_key, *stop;
static int64_t ckpt_step = -1, max_new = 64, top_k, seed = 1234, batch_size = 8, max_line = MT_MAX_LINE_DEFAULT;
static double temperature = 1.0, top_p = 1.0, rep_penalty = 1.0;
static int threads, positions;
static bool greedy, json_out, add_bos, timing, bf16, fp16;

static const mt_flag flags[] = {
    {"--load", MT_F_STR, &load_dir, "DIR", "checkpoint directory, or a Hugging Face GPT-2 or Llama directory (required)", 0, 0, NULL},
    {"--ckpt-step", MT_F_I64, &ckpt_step, "N", "iteration to load (default: latest_checkpointed_iteration.txt)", 0, 1e15, NULL},
    {"--max-new-tokens", MT_F_I64, &max_new, "N", "tokens to generate at most per prompt (default 64)", 1, 1e9, NULL},
    {"--greedy", MT_F_BOOL, &greedy, NULL, "always the most likely token (as --temperature 0)", 0, 0, NULL},
    {"--temperature", MT_F_DOUBLE, &temperature, "T", "divide the logits by T before sampling (default 1; 0: greedy)", 0, 1e6, NULL},
    {"--top-k", MT_F_I64, &top_k, "K", "sample among the K most likely tokens (default 0: all)", 0, 1e9, NULL},
    {"--top-p", MT_F_DOUBLE, &top_p, "P", "sample among the most likely tokens up to the first whose cumulative probability exceeds P (default 1)", 1e-9, 1, NULL},
    {"--repetition-penalty", MT_F_DOUBLE, &rep_penalty, "R", "penalize tokens already in the prompt's own continuation (default 1: none)", 1e-6, 1e6, NULL},
    MT_FLAG_SEED(&seed, "sampling seed (default 1234)"),
    {"--stop", MT_F_STR, &stop, "STR", "end a continuation where STR appears (STR not printed)", 0, 0, NULL},
    {"--add-bos", MT_F_BOOL, &add_bos, NULL, "put the end-of-document token (GPT-2's <|endoftext|>) before each prompt", 0, 0, NULL},
    {"--batch-size", MT_F_I64, &batch_size, "B", "consecutive prompts of the same length generated together, at most B; fewer when no more input has come (default 8)", 1, 4096, NULL},
    {"--json-keys", MT_F_STR, &json_key, "KEY", "stdin is JSON lines, the prompt in KEY (default: one prompt per line)", 0, 0, NULL},
    {"--max-line-bytes", MT_F_I64, &max_line, "N", "longest input line in bytes (default 1 GiB, 0: no limit)", 0, 1e18, NULL},
    {"--timing", MT_F_BOOL, &timing, NULL, "per batch on stderr: time to first token, new tokens per second", 0, 0, NULL},
    {"--json", MT_F_BOOL, &json_out, NULL, "one JSON object per prompt: text, token ids, log-probabilities, stop reason", 0, 0, NULL},
    MT_FLAG_VOCAB_FILE(&vocab_file, "vocab.json (default: the checkpoint's)"),
    MT_FLAG_MERGE_FILE(&merge_file, "merges.txt (default: the checkpoint's)"),
    MT_FLAGS_DEVICE(&device, &threads, &bf16, &fp16),
    {0},
};

static const mt_cmd cmd = {
    "mt-generate",
    "--load DIR [--max-new-tokens N] [--greedy | --temperature T --top-k K --top-p P] [--json] [PROMPT...]",
    "Continues each prompt (the arguments, else one per line of standard input, or a field of JSON lines\n"
    "with --json-keys) with a checkpoint written by mt-train, keeping the attention keys and values of\n"
    "the text so far (a KV cache). The continuation goes to stdout as it is produced, one line per prompt.",
    flags,
};

typedef struct prompt {
    char *text;   /* NUL-terminated for messages; it may hold NUL bytes of its own (JSON "\u0000") */
    size_t len;   /* its bytes */
    mt_ids ids;   /* the prompt's tokens */
} prompt;

/* What the printing keeps of a batch: bytes of each continuation already written. */
typedef struct shown {
    size_t *n;
    int stream;   /* a batch of one prompt, printed as it is produced */
} shown;

/* Prints s->text[*done .. upto) up to the last complete UTF-8 character. */
static void show(const mt_gen_seq *s, size_t *done, size_t upto)
{
    size_t end = mt_utf8_whole(s->text.p, *done, upto);   /* without an incomplete last character */
    if (end > *done) {
        mt_buf clean = {0};
        mt_utf8_sanitize(s->text.p + *done, end - *done, &clean);
        fwrite(clean.p, 1, clean.n, stdout);
        fflush(stdout);
        free(clean.p);
        *done = end;
    }
}

/* The engine's report of a new token: a single prompt's continuation is written as it comes. */
static int on_token(void *arg, int b, const mt_gen_seq *s)
{
    shown *sh = arg;
    if (sh->stream) show(s, &sh->n[b], s->safe);
    return 0;
}

static void put(mt_buf *o, const char *s) { mt_buf_append(o, s, strlen(s)); }

static void print_json(const prompt *p, const mt_gen_seq *s)
{
    mt_buf o = {0};
    mt_buf clean = {0};
    /* valid JSON whatever the bytes: invalid UTF-8 becomes U+FFFD, a non-finite log-probability null */
    put(&o, "{\"prompt\": ");
    mt_utf8_sanitize(p->text, p->len, &clean);
    mt_json_quote(&o, clean.p ? clean.p : "", clean.n);
    clean.n = 0;
    mt_utf8_sanitize(s->text.p ? s->text.p : "", s->text.n, &clean);
    put(&o, ", \"text\": ");
    mt_json_quote(&o, clean.p ? clean.p : "", clean.n);
    put(&o, ", \"prompt_ids\": [");
    char t[64];
    for (size_t i = 0; i < p->ids.n; i++) {
        snprintf(t, sizeof t, "%s%u", i ? ", " : "", (unsigned)p->ids.p[i]);
        put(&o, t);
    }
    put(&o, "], \"tokens\": [");
    for (size_t i = 0; i < s->out.n; i++) {
        snprintf(t, sizeof t, "%s%u", i ? ", " : "", (unsigned)s->out.p[i]);
        put(&o, t);
    }
    put(&o, "], \"logprobs\": [");
    for (size_t i = 0; i < s->out.n; i++) {
        if (isfinite(s->logprob[i])) snprintf(t, sizeof t, "%s%.9g", i ? ", " : "", s->logprob[i]);
        else snprintf(t, sizeof t, "%snull", i ? ", " : "");
        put(&o, t);
    }
    put(&o, "], \"stop\": \"");
    put(&o, s->why);
    put(&o, "\"}\n");
    fwrite(o.p, 1, o.n, stdout);
    fflush(stdout);
    free(o.p);
    free(clean.p);
}

/* Generates for prompts p[0..B), all of the same length, the input's first..first+B-1, and prints their
 * continuations in input order. */
static void generate(mt_gen *g, prompt *p, int B, size_t first)
{
    mt_err e;
    if (mt_gen_room(g, p[0].ids.n) <= 0)
        mt_die("prompt %.40s%s: %d tokens leave no room in the model's %d positions", p[0].text,
               strlen(p[0].text) > 40 ? "..." : "", (int)p[0].ids.n, positions);
    mt_ids *ids = mt_xmalloc((size_t)B * sizeof *ids);
    for (int b = 0; b < B; b++) ids[b] = p[b].ids;
    mt_gen_seq *q = mt_xcalloc((size_t)B, sizeof *q);
    shown sh = {mt_xcalloc((size_t)B, sizeof(size_t)), B == 1 && !json_out};
    mt_gen_stats st;
    if (mt_gen_run(g, ids, B, first, q, on_token, &sh, &st, &e)) mt_die_err(&e);
    if (timing) {
        double rest = st.total_s - st.first_s;
        fprintf(stderr, "%s: batch of %d x %d prompt tokens: first token after %.1f ms; %zu new tokens in %.1f ms, "
                "%.1f tokens/s (after the first: %.1f tokens/s)\n", mt_progname(), B, (int)p[0].ids.n, st.first_s * 1e3,
                st.made, st.total_s * 1e3, (double)st.made / st.total_s,
                rest > 0 ? (double)(st.made - (size_t)B) / rest : 0.0);
    }
    for (int b = 0; b < B; b++) {
        if (json_out)
            print_json(&p[b], &q[b]);
        else {
            show(&q[b], &sh.n[b], q[b].text.n);
            if (sh.n[b] < q[b].text.n) {   /* an incomplete character at the very end */
                mt_buf clean = {0};
                mt_utf8_sanitize(q[b].text.p + sh.n[b], q[b].text.n - sh.n[b], &clean);
                fwrite(clean.p, 1, clean.n, stdout);
                free(clean.p);
            }
            fputc('\n', stdout);
            fflush(stdout);
        }
        mt_gen_seq_free(&q[b]);
    }
    free(sh.n);
    free(q);
    free(ids);
}

/* Where prompts come from: the arguments, or standard input (lines, or a JSON-lines field), one at a time,
 * so that mt-generate works as a line filter and holds no more than a batch of the input. */
typedef struct source {
    const mt_strs *pos;
    int next_arg;
    mt_reader *rd;   /* standard input; NULL with arguments */
    mt_jsonl js;
} source;

static void source_open(source *src, const mt_strs *pos)
{
    mt_err e;
    memset(src, 0, sizeof *src);
    src->pos = pos;
    if (pos->n) return;
    if (mt_reader_open(&src->rd, "-", &e)) mt_die_err(&e);
    mt_reader_set_max_line(src->rd, (size_t)max_line);
}

static void source_close(source *src)
{
    mt_jsonl_free(&src->js);
    if (src->rd) mt_reader_close(src->rd);
    src->rd = NULL;
}

/* The next prompt's text into *p: 1, or 0 at the end of the input; without wait, 2 when no whole line has
 * arrived yet (nothing is consumed then). A bad line or a read error: -1 with e set, the source closed. */
static int next_prompt(source *src, prompt *p, bool wait, mt_err *e)
{
    *p = (prompt){0};
    if (!src->rd) {
        if (src->next_arg >= src->pos->n) return 0;
        const char *a = src->pos->v[src->next_arg++];
        *p = (prompt){mt_xstrdup(a), strlen(a), {0}};
        return 1;
    }
    const char *line;
    size_t len;
    int rc;
    for (;;) {
        if (!wait && (rc = mt_reader_line_ready(src->rd, e)) <= 0) {
            if (rc == 0) return 2;
            break;
        }
        if ((rc = mt_reader_getline(src->rd, &line, &len, e)) <= 0) break;
        const char *text = line;
        size_t tl = len;
        if (len && line[len - 1] == '\r') tl--;
        if (json_key) {
            if (mt_jsonl_blank(line, len)) continue;
            mt_jsonl_field f;
            const char *keys[1] = {json_key};
            if (mt_jsonl_extract(&src->js, line, len, keys, 1, &f, e)) {
                mt_err_prefix(e, "%s: line %llu", mt_reader_name(src->rd), (unsigned long long)mt_reader_lineno(src->rd));
                source_close(src);
                return -1;
            }
            text = f.text, tl = f.len;
        }
        char *t = mt_xmalloc(tl + 1);
        memcpy(t, text, tl);
        t[tl] = 0;
        *p = (prompt){t, tl, {0}};
        return 1;
    }
    if (rc < 0) {
        source_close(src);
        return -1;
    }
    return 0;
}

/* Generates for the n waiting prompts (the input's first..first+n-1), prints and frees them. */
static void flush_batch(mt_gen *g, prompt *q, size_t n, size_t first)
{
    if (!n) return;
    generate(g, q, (int)n, first);
    for (size_t i = 0; i < n; i++) free(q[i].text), free(q[i].ids.p);
}

int main(int argc, char **argv)
{
    mt_omp_env_spin(argv, 10000);
    mt_set_progname(argv[0]);
    mt_err e;
    mt_strs pos = {0};
    if (mt_flags_parse(&cmd, argc, argv, &pos, NULL, &e)) mt_die_err(&e);
    if (!load_dir) mt_die("--load is required (try --help)");
    if (bf16 && fp16) mt_die("--bf16 and --fp16 are mutually exclusive");
    if (seed < 0 || seed > 4294967295LL) mt_die("--seed %lld: expected 0 .. 4294967295", (long long)seed);

    mt_gen_model gm;
    mt_gen_open_opts o = {load_dir, ckpt_step >= 0 ? ckpt_step : MT_CKPT_LATEST, vocab_file, merge_file, device,
                          threads, bf16 ? MTK_BF16 : fp16 ? MTK_F16 : MTK_F32};
    if (mt_gen_model_open(&gm, &o, &e)) mt_die_err(&e);

    /* Prompts are read one at a time; consecutive prompts of one length share a batch, which is generated
     * (and printed) as soon as it is full, the next prompt has another length, or no whole line of input
     * is there to add to it (a prompt typed on a terminal or written into a pipe is answered without
     * waiting for more), before more is read. */
    mt_bpe_ctx *bc = mt_bpe_ctx_new(gm.mc.tok.bpe);
    positions = mt_gpt_get_config(gm.mc.model)->max_position_embeddings;
    mt_gen_opts go = {max_new, {greedy, temperature, (int)top_k, top_p, rep_penalty}, (uint64_t)seed, stop, NULL, 0, 0, 0, 1};
    mt_gen *g = mt_gen_new(gm.mc.model, gm.mc.tok.bpe, gm.mc.tok.vocab_size, gm.mc.tok.eod, &go);
    source src;
    source_open(&src, &pos);
    prompt *q = mt_xcalloc((size_t)batch_size, sizeof *q), cur;
    size_t nq = 0, first = 0;   /* waiting prompts, the input's first..first+nq-1 */
    int got;
    while ((got = next_prompt(&src, &cur, nq == 0, &e)) > 0) {
        if (got == 2) {   /* the input has nothing more yet: answer the prompts read so far first */
            flush_batch(g, q, nq, first);
            first += nq, nq = 0;
            continue;
        }
        if (add_bos && gm.mc.tok.eod >= 0) mt_ids_push(&cur.ids, (uint32_t)gm.mc.tok.eod);
        mt_tokenizer_encode(&gm.mc.tok, bc, cur.text, cur.len, &cur.ids);   /* a tokenizer.json's BOS included */
        if (!cur.ids.n) {
            got = mt_err_set(&e, "prompt %zu is empty (give --add-bos to generate from the end-of-document token)",
                             first + nq + 1);
            free(cur.text);
            free(cur.ids.p);
            break;
        }
        if (nq && cur.ids.n != q[0].ids.n) {
            flush_batch(g, q, nq, first);
            first += nq, nq = 0;
        }
        q[nq++] = cur;
        if (nq == (size_t)batch_size) {
            flush_batch(g, q, nq, first);
            first += nq, nq = 0;
        }
    }
    /* the prompts before the end of the input, or before a bad line, which ends the run after them with
     * everything freed */
    flush_batch(g, q, nq, first);
    source_close(&src);
    free(q);
    free(pos.v);
    mt_gen_free(g);
    mt_bpe_ctx_free(bc);
    mt_gen_model_close(&gm);
    if (got < 0) mt_die_err(&e);
    return 0;
}
