/* mt-eval: loss and perplexity of a checkpoint over a dataset split, or per-document scores of JSON
 * lines (man mt-eval.1). The model's shape comes from the checkpoint's meta.json. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "data/gpt_dataset.h"
#include "data/split.h"
#include "io/jsonl.h"
#include "io/reader.h"
#include "kernels.h"
#include "model/gpt.h"
#include "tok/bpe.h"
#include "train/batch.h"
#include "train/checkpoint.h"
#include "train/evaluate.h"
#include "train/model_ckpt.h"
#include "train/report.h"
#include "util/err.h"
#include "util/ompenv.h"
#include "util/flags.h"
#include "util/vec.h"

static const char *load_dir, *eval_split = "valid", *data_cache_path, *split_arg, *vocab_file, *merge_file,
                  *backend = "cpu", *score_key = "text";
static mt_strs data_path;
static int64_t ckpt_step = -1, eval_iters = -1, mbs, seed = -1, max_line = MT_MAX_LINE_DEFAULT;
static int threads;
static bool score, json_out, eod_mask_loss;

static const mt_flag flags[] = {
    {"--load", MT_F_STR, &load_dir, "DIR", "checkpoint directory (required)", 0, 0, NULL},
    {"--ckpt-step", MT_F_I64, &ckpt_step, "N", "iteration to load (default: latest_checkpointed_iteration.txt)", 0, 1e15, NULL},
    MT_FLAG_DATA_PATH(&data_path, "dataset prefix or weight/prefix pairs (default: the checkpoint's)"),
    MT_FLAG_SPLIT(&split_arg, "train,valid,test weights (default: the checkpoint's)"),
    {"--eval-split", MT_F_CHOICE, &eval_split, "SPLIT", "split to evaluate (default valid; all: the whole dataset)", 0, 0,
     "train|valid|test|all"},
    {"--eval-iters", MT_F_I64, &eval_iters, "N", "micro-batches to evaluate (default: every whole one in the split)", 1, 1e15, NULL},
    {"--micro-batch-size", MT_F_I64, &mbs, "B", "sequences per forward pass (default: the checkpoint's)", 1, 1 << 20, NULL},
    MT_FLAG_SEED(&seed, "sample order seed (default: the checkpoint's)"),
    MT_FLAG_DATA_CACHE_PATH(&data_cache_path, "index cache (default: the checkpoint's, else index-cache/ beside the data)"),
    {"--eod-mask-loss", MT_F_BOOL, &eod_mask_loss, NULL, "no loss at end-of-document input tokens", 0, 0, NULL},
    {"--score", MT_F_BOOL, &score, NULL, "read JSON lines on stdin, print one score line per document", 0, 0, NULL},
    {"--json-key", MT_F_STR, &score_key, "KEY", "with --score: the text field (default \"text\")", 0, 0, NULL},
    {"--max-line-bytes", MT_F_I64, &max_line, "N", "with --score: longest input line in bytes (default 1 GiB, 0: no limit)",
     0, 1e18, NULL},
    MT_FLAG_VOCAB_FILE(&vocab_file, "with --score: vocab.json (default: the checkpoint's)"),
    MT_FLAG_MERGE_FILE(&merge_file, "with --score: merges.txt (default: the checkpoint's)"),
    {"--json", MT_F_BOOL, &json_out, NULL, "print the split's result as one JSON object on stdout", 0, 0, NULL},
    {"--backend", MT_F_CHOICE, &backend, NULL, "kernel backend (default cpu)", 0, 0, "cpu|cuda"},
    {"--threads", MT_F_INT, &threads, "N", "CPU threads (default: OpenMP's)", 0, 4096, NULL},
    {0},
};

static const mt_cmd cmd = {
    "mt-eval",
    "--load DIR [--eval-split valid|test|train|all] [--data-path ...] [--json]\n"
    "               --load DIR --score < docs.jsonl",
    "Evaluates a checkpoint written by mt-train: the token-weighted mean loss and perplexity over a split\n"
    "of the dataset (printed as Megatron's validation block), or with --score the summed log-probability,\n"
    "loss and perplexity of each JSON-lines document read on stdin (each scored after an <|endoftext|>).",
    flags,
};

static int arg_int(json_t *args, const char *key, const char *where)
{
    json_t *v = json_object_get(args, key);
    if (!json_is_integer(v)) mt_die("%s/meta.json: args has no integer \"%s\"", where, key);
    return (int)json_integer_value(v);
}

static double arg_num(json_t *args, const char *key, const char *where)
{
    json_t *v = json_object_get(args, key);
    if (!json_is_number(v)) mt_die("%s/meta.json: args has no number \"%s\"", where, key);
    return json_number_value(v);
}

static const char *arg_str(json_t *args, const char *key)
{
    json_t *v = json_object_get(args, key);
    return json_is_string(v) ? json_string_value(v) : NULL;
}

typedef struct ev {
    mtk *k;
    mt_gpt *model;
    mt_gpt_ctx *ctx;
    mt_gpt_config cfg;
    int64_t vocab, eod;
    const char *vocab_file, *merge_file;
} ev;

static void load_model(ev *v, json_t **args_out)
{
    mt_err e;
    mt_ckpt_reader *r = mt_ckpt_open(load_dir, ckpt_step >= 0 ? ckpt_step : MT_CKPT_LATEST, &e);
    if (!r) mt_die_err(&e);
    const char *dir = mt_ckpt_dir(r);
    json_t *args = json_object_get(mt_ckpt_meta(r), "args");
    if (!json_is_object(args)) mt_die("%s/meta.json: missing \"args\"", dir);
    args = json_deep_copy(args);   /* outlives the reader: the vocabulary paths below point into it */
    const char *tt = arg_str(args, "tokenizer-type");
    v->vocab_file = vocab_file ? vocab_file : arg_str(args, "vocab-file");
    v->merge_file = merge_file ? merge_file : arg_str(args, "merge-file");
    if (tt && !strcmp(tt, "NullTokenizer")) {
        v->vocab = arg_int(args, "vocab-size", dir) + 1;
        v->eod = v->vocab - 1;
    } else {
        if (!v->vocab_file || !v->merge_file) mt_die("%s: no vocabulary: pass --vocab-file and --merge-file", dir);
        mt_bpe *b;
        if (mt_bpe_load(&b, v->vocab_file, v->merge_file, &e)) mt_die_err(&e);
        v->vocab = mt_bpe_vocab_size(b);
        v->eod = mt_bpe_eod(b);
        mt_bpe_free(b);
    }
    v->cfg = (mt_gpt_config){
        .num_layers = arg_int(args, "num-layers", dir),
        .hidden_size = arg_int(args, "hidden-size", dir),
        .num_heads = arg_int(args, "num-attention-heads", dir),
        .ffn_hidden_size = arg_int(args, "ffn-hidden-size", dir),
        .seq_length = arg_int(args, "seq-length", dir),
        .max_position_embeddings = arg_int(args, "max-position-embeddings", dir),
        .vocab_size = (int)v->vocab,
        .padded_vocab_size = mt_gpt_padded_vocab((int)v->vocab, arg_int(args, "make-vocab-size-divisible-by", dir), 1),
        .layernorm_epsilon = (float)arg_num(args, "layernorm-epsilon", dir),
        .init_method_std = arg_num(args, "init-method-std", dir),
        .exact_gelu = json_is_true(json_object_get(args, "no-bias-gelu-fusion")) &&
                      !json_is_true(json_object_get(args, "openai-gelu")),
    };
    if (mt_gpt_config_check(&v->cfg, &e)) mt_die("%s/meta.json: %s", dir, e.msg);
    if (mbs <= 0) mbs = arg_int(args, "micro-batch-size", dir);
    v->k = mtk_open(&(mtk_config){.backend = backend, .threads = threads}, &e);
    if (!v->k) mt_die_err(&e);
    v->model = mt_gpt_create(v->k, &v->cfg, MT_GPT_INFER_ONLY, &e);
    if (!v->model) mt_die_err(&e);
    v->ctx = mt_gpt_ctx_new(v->model, (int)mbs, &e);
    if (!v->ctx) mt_die_err(&e);
    size_t np = mt_gpt_num_params(v->model);
    if (mt_gpt_load_weights(v->model, v->k, r, &e)) mt_die_err(&e);
    *args_out = args;
    if (isatty(2)) fprintf(stderr, "%s: loaded %s (%zu parameters)\n", mt_progname(), dir, np);
    mt_ckpt_close(r);
}

static void eval_split_mode(ev *v, json_t *args)
{
    mt_err e;
    int k = !strcmp(eval_split, "train") ? MT_SPLIT_TRAIN : !strcmp(eval_split, "test") ? MT_SPLIT_TEST : MT_SPLIT_VALID;
    const char *split = split_arg;
    if (!strcmp(eval_split, "all")) split = "1,0,0", k = MT_SPLIT_TRAIN;
    if (!split) split = arg_str(args, "split");
    const char **words = data_path.v;
    int nw = data_path.n;
    json_t *dp = json_object_get(args, "data-path");
    if (!nw) {
        if (!json_is_array(dp) || !json_array_size(dp)) mt_die("no --data-path and none in the checkpoint");
        nw = (int)json_array_size(dp);
        words = mt_xcalloc((size_t)nw, sizeof *words);
        for (int i = 0; i < nw; i++) words[i] = json_string_value(json_array_get(dp, (size_t)i));
    }
    mt_gpt_data_args da = {0};
    da.n_args = nw;
    da.args = (char *const *)words;
    da.split = split;
    da.seq_length = v->cfg.seq_length;
    json_t *s = json_object_get(args, "seed");
    da.seed = (uint32_t)(seed >= 0 ? seed : json_is_integer(s) ? json_integer_value(s) : 1234);
    for (int i = 0; i < MT_NSPLITS; i++) da.num_samples[i] = i == k ? -1 : 1;
    /* the training run's cache directory and blend surplus unless given (same samples as mt-train) */
    const char *cache_dir = data_cache_path ? data_cache_path : data_path.n ? NULL : arg_str(args, "data-cache-path");
    char *cache = mt_default_cache_dir(cache_dir, nw, words);
    da.cache_dir = cache;
    json_t *su = json_object_get(args, "mid-level-dataset-surplus");
    da.surplus = json_is_number(su) ? json_number_value(su) : 0.005;
    mt_gpt_data d;
    if (mt_gpt_data_open(&d, &da, &e)) mt_die_err(&e);
    mt_batch b;
    mt_batch_init(&b, (int)mbs, v->cfg.seq_length, v->vocab, v->eod, eod_mask_loss);
    mt_eval_result r;
    int64_t consumed = 0;
    if (mt_evaluate(v->ctx, &b, &d, k, &consumed, eval_iters, 1, &r, &e)) mt_die_err(&e);
    if (r.samples == 0) mt_die("the %s split has fewer than --micro-batch-size (%lld) samples", mt_split_names[k], (long long)mbs);
    if (json_out) {
        json_t *o = json_object();
        json_object_set_new(o, "split", json_string(eval_split));
        json_object_set_new(o, "samples", json_integer((json_int_t)r.samples));
        json_object_set_new(o, "tokens", json_integer((json_int_t)r.tokens));
        json_object_set_new(o, "loss", mt_json_real(r.loss));
        json_object_set_new(o, "ppl", mt_json_real(isfinite(r.loss) ? mt_ppl(r.loss) : NAN));
        char *line = mt_json_line(o);
        printf("%s\n", line);
        free(line);
    } else {
        char prefix[64];
        snprintf(prefix, sizeof prefix, "%s set", !strcmp(eval_split, "all") ? "whole" : mt_split_names[k]);
        mt_loss_value lv = {"lm loss", r.loss};
        mt_print_validation(stdout, NULL, prefix, &lv, 1);
    }
    mt_batch_free(&b);
    mt_gpt_data_close(&d);
    free(cache);
    if (words != data_path.v) free(words);
}

/* Scores one document: tokens after an end-of-document token, in windows of seq_length predictions
 * (each window's context restarts; a long document is scored in consecutive chunks). */
static void score_doc(ev *v, const uint32_t *ids, size_t n, double *logprob)
{
    mt_err e;
    int T = v->cfg.seq_length;
    int32_t *tok = mt_xmalloc((size_t)T * sizeof *tok), *tgt = mt_xmalloc((size_t)T * sizeof *tgt);
    float *mask = mt_xmalloc((size_t)T * sizeof *mask), *tl = mt_xmalloc((size_t)T * sizeof *tl);
    *logprob = 0;
    for (size_t pos = 0; pos < n; pos += (size_t)T) {
        size_t m = n - pos < (size_t)T ? n - pos : (size_t)T;
        for (int t = 0; t < T; t++) {
            size_t i = pos + (size_t)t;   /* predicts ids[i] from ids[i-1] (or eod for i = 0) */
            if ((size_t)t < m) {
                tok[t] = i == 0 ? (int32_t)v->eod : (int32_t)ids[i - 1];
                tgt[t] = (int32_t)ids[i];
                mask[t] = 1;
            } else {
                tok[t] = tgt[t] = 0;
                mask[t] = 0;
            }
        }
        mt_gpt_loss l;
        if (mt_gpt_forward(v->ctx, tok, tgt, mask, 1, (int)m, tl, &l, &e)) mt_die_err(&e);
        for (size_t t = 0; t < m; t++) *logprob -= tl[t];
    }
    free(tok);
    free(tgt);
    free(mask);
    free(tl);
}

static void score_mode(ev *v)
{
    mt_err e;
    if (!v->vocab_file || !v->merge_file) mt_die("--score needs --vocab-file and --merge-file (the checkpoint has none)");
    mt_bpe *bpe;
    if (mt_bpe_load(&bpe, v->vocab_file, v->merge_file, &e)) mt_die_err(&e);
    mt_bpe_ctx *ctx = mt_bpe_ctx_new(bpe);
    mt_reader *rd;
    if (mt_reader_open(&rd, "-", &e)) mt_die_err(&e);
    mt_reader_set_max_line(rd, (size_t)max_line);
    mt_gpt_set_dropout(v->ctx, 0, 0);
    /* the input rules of mt-tokenize: blank lines skipped, lone surrogate escapes as U+FFFD, the same
     * messages for bad lines */
    mt_jsonl js = {0};
    const char *keys[1] = {score_key};
    mt_jsonl_field text;
    const char *line;
    size_t len;
    mt_ids ids = {0};
    int rc;
    while ((rc = mt_reader_getline(rd, &line, &len, &e)) > 0) {
        if (mt_jsonl_blank(line, len)) continue;
        if (mt_jsonl_extract(&js, line, len, keys, 1, &text, &e))
            mt_die("%s: line %llu: %s", mt_reader_name(rd), (unsigned long long)mt_reader_lineno(rd), e.msg);
        ids.n = 0;
        mt_bpe_encode(ctx, text.text, text.len, &ids);
        double lp = 0;
        if (ids.n) score_doc(v, ids.p, ids.n, &lp);
        double loss = ids.n ? -lp / (double)ids.n : 0;
        json_t *o = json_object();
        json_object_set_new(o, "tokens", json_integer((json_int_t)ids.n));
        json_object_set_new(o, "logprob", mt_json_real(lp));
        json_object_set_new(o, "loss", mt_json_real(loss));
        json_object_set_new(o, "ppl", mt_json_real(exp(loss)));
        char *out = mt_json_line(o);
        printf("%s\n", out);
        free(out);
    }
    if (rc < 0) mt_die_err(&e);
    mt_jsonl_free(&js);
    free(ids.p);
    mt_reader_close(rd);
    mt_bpe_ctx_free(ctx);
    mt_bpe_free(bpe);
}

int main(int argc, char **argv)
{
    mt_omp_env_default(argv);
    mt_set_progname(argv[0]);
    mt_err e;
    if (mt_flags_parse(&cmd, argc, argv, NULL, NULL, &e)) mt_die_err(&e);
    if (!load_dir) mt_die("--load is required (try --help)");
    if (!strcmp(backend, "cuda")) mt_die("--backend cuda: this build has no CUDA backend");
    ev v = {0};
    json_t *args;
    load_model(&v, &args);
    if (score)
        score_mode(&v);
    else
        eval_split_mode(&v, args);
    json_decref(args);
    mt_gpt_ctx_free(v.ctx);
    mt_gpt_free(v.model);
    mtk_close(v.k);
    return 0;
}
