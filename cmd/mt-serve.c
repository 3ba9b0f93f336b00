/* mt-serve: a trained model served over HTTP with OpenAI's completions and chat completions API (man
 * mt-serve.1): the flags, loading the model as mt-generate does and its chat template, and the signals;
 * the server itself is serve/server.h's. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt/open_gen.h"
#include "model/device.h"
#include "serve/chat_source.h"
#include "serve/server.h"
#include "util/err.h"
#include "util/flags.h"
#include "util/ompenv.h"

static const char *load_dir, *vocab_file, *merge_file, *device, *host = "127.0.0.1", *model_name, *chat_template;
static int64_t ckpt_step = -1, port = 5000, max_batch = 32, max_queue = 256, max_tokens_limit = 4096,
               max_body = 1 << 20, max_prefill = 512, kv_tokens, conn_timeout = 30, max_conns = 256;
static int threads;
static bool bf16, fp16;

static const mt_flag flags[] = {
    {"--load", MT_F_STR, &load_dir, "DIR", "checkpoint directory, or a Hugging Face GPT-2 or Llama directory (required)", 0, 0, NULL},
    {"--ckpt-step", MT_F_I64, &ckpt_step, "N", "iteration to load (default: latest_checkpointed_iteration.txt)", 0, 1e15, NULL},
    {"--host", MT_F_STR, &host, "ADDR", "address to listen on (default 127.0.0.1; 0.0.0.0 or :: for every interface)", 0, 0, NULL},
    {"--port", MT_F_I64, &port, "N", "port to listen on (default 5000; 0: any free port, printed on stderr)", 0, 65535, NULL},
    {"--served-model-name", MT_F_STR, &model_name, "NAME", "the model's name in the API (default: the last component of --load)", 0, 0, NULL},
    {"--max-batch-size", MT_F_I64, &max_batch, "N", "sequences the engine runs together at most (default 32)", 1, 4096, NULL},
    {"--max-prefill-tokens", MT_F_I64, &max_prefill, "N", "prompt tokens read in one step at most, so that a long prompt is read in chunks between the others' tokens (default 512)", 1, 1 << 20, NULL},
    {"--kv-cache-tokens", MT_F_I64, &kv_tokens, "N", "positions of the paged KV cache the running sequences share (default: the model's positions times the smaller of --max-batch-size and 8)", 1, 1e9, NULL},
    {"--max-queue", MT_F_I64, &max_queue, "N", "requests waiting for the engine at most; more are answered 429 (default 256)", 1, 1e6, NULL},
    {"--max-tokens-limit", MT_F_I64, &max_tokens_limit, "N", "largest max_tokens a request may ask for (default 4096)", 1, 1e9, NULL},
    {"--chat-template", MT_F_STR, &chat_template, "FILE", "the chat template of /v1/chat/completions: a file of its Jinja text, or a tokenizer_config.json (default: the chat_template of the tokenizer_config.json beside the model's tokenizer)", 0, 0, NULL},
    {"--max-body-bytes", MT_F_I64, &max_body, "N", "largest request body; larger ones are answered 413 (default 1 MiB)", 1, 1e12, NULL},
    {"--connection-timeout", MT_F_I64, &conn_timeout, "SECONDS", "a connection idle this long (its headers or body not coming, or no new request on a kept-alive one) is closed (default 30)", 1, 86400, NULL},
    {"--max-connections", MT_F_I64, &max_conns, "N", "open connections at most, each with its thread; more are closed at once (default 256)", 1, 65536, NULL},
    MT_FLAG_VOCAB_FILE(&vocab_file, "vocab.json (default: the checkpoint's)"),
    MT_FLAG_MERGE_FILE(&merge_file, "merges.txt (default: the checkpoint's)"),
    MT_FLAGS_DEVICE(&device, &threads, &bf16, &fp16),
    {0},
};

static const mt_cmd cmd = {
    "mt-serve",
    "--load DIR [--port N] [--host ADDR] [--chat-template FILE] [--max-batch-size N] [--max-prefill-tokens N] [--max-queue N] [--max-tokens-limit N]",
    "Serves a checkpoint written by mt-train (or a Hugging Face GPT-2 or Llama directory) over HTTP with\n"
    "OpenAI's completions API: GET /health, GET /v1/models, POST /v1/completions (and /completions) and\n"
    "POST /v1/chat/completions (and /chat/completions, messages rendered by the chat template), with\n"
    "\"stream\": true as Server-Sent Events; Megatron's PUT /api; GET /metrics for Prometheus. Greedy and\n"
    "seeded continuations are mt-generate's. SIGTERM or SIGINT stops accepting requests, lets the running\n"
    "ones finish, and exits 0.",
    flags,
};

/* SIGTERM and SIGINT: the handler, run by whichever thread the signal reaches (a library may have started
 * threads before main), only writes a byte into a pipe that the main thread waits on. */
static int stop_pipe[2];
static volatile sig_atomic_t stop_sig;

static void on_stop(int sig)
{
    stop_sig = sig;
    int saved = errno;
    char c = 0;
    ssize_t r = write(stop_pipe[1], &c, 1);
    (void)r;
    errno = saved;
}

/* The directory of path (a directory itself when it is one), to free. */
static char *dir_of(const char *path)
{
    if (!path) return NULL;
    struct stat st;
    if (!stat(path, &st) && S_ISDIR(st.st_mode)) return mt_xstrdup(path);
    char *d = mt_xstrdup(path), *slash = strrchr(d, '/');
    if (slash) *slash = 0;
    else strcpy(d, ".");
    return d;
}

/* The chat template: --chat-template, else the tokenizer_config.json of --load or beside the tokenizer's
 * files; one whose template mt cannot parse leaves chat off, with a warning. */
static void open_chat(mt_serve_chat *chat, const mt_gen_model *gm)
{
    char *dirs[3] = {mt_xstrdup(load_dir), dir_of(gm->mc.tokenizer_model), dir_of(gm->mc.vocab_file)};
    const mt_tokenizer *t = &gm->mc.tok;
    size_t n = 0;
    const char *eod = t->eod >= 0 ? mt_bpe_token_bytes(t->bpe, (uint32_t)t->eod, &n) : NULL;
    char *eod_text = mt_xmalloc(n + 1);
    memcpy(eod_text, eod ? eod : "", n);
    eod_text[n] = 0;
    mt_err e;
    if (mt_serve_chat_open(chat, chat_template, (const char *const *)dirs, 3, eod_text, &e)) mt_die_err(&e);
    if (chat->unusable) mt_warn("chat completions are off: %s", chat->why);
    for (int i = 0; i < 3; i++) free(dirs[i]);
    free(eod_text);
}

/* The default served name: the last component of --load. */
static const char *base_name(const char *dir, char *buf, size_t cap)
{
    snprintf(buf, cap, "%s", dir);
    size_t n = strlen(buf);
    while (n > 1 && buf[n - 1] == '/') buf[--n] = 0;
    char *slash = strrchr(buf, '/');
    return slash && slash[1] ? slash + 1 : buf;
}

int main(int argc, char **argv)
{
    mt_omp_env_spin(argv, 10000);
    mt_set_progname(argv[0]);
    mt_err e;
    mt_strs pos = {0};
    if (mt_flags_parse(&cmd, argc, argv, &pos, NULL, &e)) mt_die_err(&e);
    if (pos.n) mt_die("unexpected argument '%s' (try --help)", pos.v[0]);
    if (!load_dir) mt_die("--load is required (try --help)");
    if (bf16 && fp16) mt_die("--bf16 and --fp16 are mutually exclusive");

    /* A signal during the loading drains the server as soon as it has started. A client gone is a failed
     * write, not a signal. */
    if (pipe(stop_pipe)) mt_die("pipe: %s", strerror(errno));
    struct sigaction sa = {0};
    sa.sa_handler = on_stop;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);

    mt_gen_model gm;
    mt_gen_open_opts o = {load_dir, ckpt_step >= 0 ? ckpt_step : MT_CKPT_LATEST, vocab_file, merge_file, device,
                          threads, bf16 ? MTK_BF16 : fp16 ? MTK_F16 : MTK_F32};
    if (mt_gen_model_open(&gm, &o, &e)) mt_die_err(&e);
    mt_serve_chat chat;
    open_chat(&chat, &gm);
    char namebuf[4096];
    mt_serve_opts so = {host, (int)port, model_name ? model_name : base_name(load_dir, namebuf, sizeof namebuf),
                        (int)max_batch, (int)max_prefill, kv_tokens, (int)max_queue, max_tokens_limit, (size_t)max_body,
                        (int)conn_timeout, (int)max_conns, &chat};
    mt_server *s = mt_server_start(gm.mc.model, &gm.mc.tok, &so, &e);
    if (!s) mt_die_err(&e);
    fprintf(stderr, "%s: serving %s (%d positions) on http://%s%s%s:%d\n", mt_progname(), so.model_name,
            mt_gpt_get_config(gm.mc.model)->max_position_embeddings, strchr(host, ':') ? "[" : "", host,
            strchr(host, ':') ? "]" : "", mt_server_port(s));
    char c;
    while (read(stop_pipe[0], &c, 1) < 0 && errno == EINTR) continue;
    fprintf(stderr, "%s: %s: draining\n", mt_progname(), stop_sig == SIGINT ? "SIGINT" : "SIGTERM");
    int was = mt_server_drain(s);
    fprintf(stderr, "%s: stopped (%d requests were in flight)\n", mt_progname(), was);
    mt_gen_model_close(&gm);
    mt_serve_chat_close(&chat);
    free(pos.v);
    return 0;
}
