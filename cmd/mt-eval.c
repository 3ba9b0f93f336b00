/* mt-eval: loss and perplexity of a checkpoint over a dataset split, or per-document scores of JSON
 * lines (man mt-eval.1). The model's shape comes from the checkpoint's meta.json. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ckpt/checkpoint.h"
#include "ckpt/open_model.h"
#include "data/batch.h"
#include "data/gpt_dataset.h"
#include "data/split.h"
#include "io/atomic.h"
#include "io/jsonl.h"
#include "io/reader.h"
#include "kernels.h"
#include "model/device.h"
#include "model/evaluate.h"
#include "model/gpt.h"
#include "report/report.h"
#include "tok/bpe.h"
#include "util/err.h"
#include "util/flags.h"
#include "util/ompenv.h"
#include "util/vec.h"

static const char *load_dir, *eval_split = "valid", *data_cache_path, *split_arg, *vocab_file, *merge_file,
                  *device, *score_key = "text", *logits_path;
static mt_strs data_path;
static int64_t ckpt_step = -1, eval_iters = -1, mbs, seed = -1, max_line = MT_MAX_LINE_DEFAULT;
static int threads;
static bool score, json_out, eod_mask_loss, bf16, fp16;

static const mt_flag flags[] = {
    {"--load", MT_F_STR, &load_dir, "DIR", "checkpoint directory, or a Hugging Face GPT-2 or Llama directory (required)", 0, 0, NULL},
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
    {"--score", MT_F_BOOL, &score, NULL, "read JSON lines (from FILE, or stdin when none or -), print one score line per document", 0, 0, NULL},
    {"--logits", MT_F_STR, &logits_path, "FILE",
     "with --score: write every scored token's logits (raw float32 rows of vocabulary size) to FILE", 0, 0, NULL},
    {"--json-key", MT_F_STR, &score_key, "KEY", "with --score: the text field (default \"text\")", 0, 0, NULL},
    {"--max-line-bytes", MT_F_I64, &max_line, "N", "with --score: longest input line in bytes (default 1 GiB, 0: no limit)",
     0, 1e18, NULL},
    MT_FLAG_VOCAB_FILE(&vocab_file, "with --score or a Hugging Face --load: vocab.json (default: the checkpoint's)"),
    MT_FLAG_MERGE_FILE(&merge_file, "with --score or a Hugging Face --load: merges.txt (default: the checkpoint's)"),
    {"--json", MT_F_BOOL, &json_out, NULL, "print the split's result as one JSON object on stdout", 0, 0, NULL},
    MT_FLAGS_DEVICE(&device, &threads, &bf16, &fp16),
    {0},
};

static const mt_cmd cmd = {
    "mt-eval",
    "--load DIR [--eval-split valid|test|train|all] [--data-path ...] [--json]\n"
    "               --load DIR --score [FILE | - | < docs.jsonl]",
    "Evaluates a checkpoint written by mt-train: the token-weighted mean loss and perplexity over a split\n"
    "of the dataset (printed as Megatron's validation block), or with --score the summed log-probability,\n"
    "loss and perplexity of each JSON-lines document read on stdin (each scored after an <|endoftext|>,\n"
    "or after the BOS of a tokenizer.json that puts one first).",
    flags,
};

typedef struct ev {
    mtk *k;
    mt_model_ckpt mc;   /* config, tokenizer, meta.json and model of the checkpoint */
    mt_gpt *model;
    mt_gpt_ctx *ctx;
    mt_gpt_config cfg;
    int64_t vocab, eod;
} ev;

static void load_model(ev *v)
{
    mt_err e;
    mt_model_open_opts o = {.iteration = ckpt_step >= 0 ? ckpt_step : MT_CKPT_LATEST, .vocab_file = vocab_file,
                            .merge_file = merge_file};
    if (mt_model_open(&v->mc, load_dir, &o, &e)) mt_die_err(&e);
    v->cfg = v->mc.cfg;
    v->vocab = v->mc.tok.vocab_size;
    v->eod = v->mc.tok.eod;
    if (mbs <= 0) mbs = v->mc.a.micro_batch_size;
    v->k = mt_device_open(device, threads, bf16 ? MTK_BF16 : fp16 ? MTK_F16 : MTK_F32, &e);
    if (!v->k) mt_die_err(&e);
    if (mt_model_load_weights(&v->mc, v->k, NULL, &e)) mt_die_err(&e);
    v->model = v->mc.model;
    v->ctx = mt_gpt_ctx_new(v->model, (int)mbs, &e);
    if (!v->ctx) mt_die_err(&e);
    if (isatty(2)) fprintf(stderr, "%s: loaded %s (%zu parameters)\n", mt_progname(), v->mc.dir, mt_gpt_num_params(v->model));
}

static void eval_split_mode(ev *v)
{
    mt_err e;
    int k = !strcmp(eval_split, "train") ? MT_SPLIT_TRAIN : !strcmp(eval_split, "test") ? MT_SPLIT_TEST : MT_SPLIT_VALID;
    const char *split = split_arg;
    if (!strcmp(eval_split, "all")) split = "1,0,0", k = MT_SPLIT_TRAIN;
    if (!split) split = v->mc.a.split;
    const char **words = data_path.v;
    int nw = data_path.n;
    json_t *dp = json_object_get(v->mc.args, "data-path");
    if (!nw) {
        if (!json_is_array(dp) || !json_array_size(dp)) mt_die("no --data-path and none in the checkpoint");
        nw = (int)json_array_size(dp);
        words = mt_xcalloc((size_t)nw, sizeof *words);
        for (int i = 0; i < nw; i++) {
            words[i] = json_string_value(json_array_get(dp, (size_t)i));
            if (!words[i]) mt_die("%s/meta.json: \"args.data-path\" holds a non-string", v->mc.dir);
        }
    }
    mt_gpt_data_args da = {0};
    da.n_args = nw;
    da.args = (char *const *)words;
    da.split = split;
    da.seq_length = v->cfg.seq_length;
    da.seed = (uint32_t)(seed >= 0 ? seed : v->mc.a.seed);
    for (int i = 0; i < MT_NSPLITS; i++) da.num_samples[i] = i == k ? -1 : 1;
    /* the training run's cache directory and blend surplus unless given (same samples as mt-train) */
    const char *cache_dir = data_cache_path ? data_cache_path : data_path.n ? NULL : v->mc.a.data_cache_path;
    char *cache = mt_default_cache_dir(cache_dir, nw, words);
    da.cache_dir = cache;
    da.surplus = v->mc.a.mid_level_dataset_surplus;
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

/* Scores one document: ids[0..n) after the token before (the tokenizer's BOS, else an end of document),
 * in windows of seq_length predictions (each window's context restarts; a long document is scored in
 * consecutive chunks). With logits, lg is room for a window's logits ([seq_length][padded vocabulary])
 * and each scored token's row goes to logits. */
static void score_doc(ev *v, int64_t before, const uint32_t *ids, size_t n, double *logprob, mt_out *logits, float *lg)
{
    mt_err e;
    int T = v->cfg.seq_length;
    int32_t *tok = mt_xmalloc((size_t)T * sizeof *tok), *tgt = mt_xmalloc((size_t)T * sizeof *tgt);
    float *mask = mt_xmalloc((size_t)T * sizeof *mask), *tl = mt_xmalloc((size_t)T * sizeof *tl);
    *logprob = 0;
    for (size_t pos = 0; pos < n; pos += (size_t)T) {
        size_t m = n - pos < (size_t)T ? n - pos : (size_t)T;
        for (int t = 0; t < T; t++) {
            size_t i = pos + (size_t)t;   /* predicts ids[i] from ids[i-1] (or before for i = 0) */
            if ((size_t)t < m) {
                tok[t] = i == 0 ? (int32_t)before : (int32_t)ids[i - 1];
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
        if (logits) {
            if (mt_gpt_logits(v->ctx, lg, &e)) mt_die_err(&e);
            for (size_t t = 0; t < m; t++)
                if (mt_out_write(logits, lg + t * (size_t)v->cfg.padded_vocab_size, (size_t)v->vocab * sizeof *lg, &e)) {
                    mt_out_abort(logits);
                    mt_die_err(&e);
                }
        }
    }
    free(tok);
    free(tgt);
    free(mask);
    free(tl);
}

static void score_mode(ev *v, const char *input)
{
    mt_err e;
    mt_bpe *bpe = v->mc.tok.bpe;   /* the checkpoint's BPE; with NullTokenizer, the one given */
    if (!bpe) {
        if (!v->mc.vocab_file || !v->mc.merge_file)
            mt_die("--score needs --vocab-file and --merge-file (the checkpoint has none)");
        if (mt_bpe_load(&bpe, v->mc.vocab_file, v->mc.merge_file, &e)) mt_die_err(&e);
    }
    mt_bpe_ctx *ctx = mt_bpe_ctx_new(bpe);
    mt_reader *rd;
    if (mt_reader_open(&rd, input, &e)) mt_die_err(&e);
    mt_reader_set_max_line(rd, (size_t)max_line);
    mt_gpt_set_dropout(v->ctx, 0, 0);
    mt_out lo;
    float *lg = NULL;
    if (logits_path) {
        if (mt_out_open(&lo, logits_path, &e)) mt_die_err(&e);
        lg = mt_xmalloc((size_t)v->cfg.seq_length * (size_t)v->cfg.padded_vocab_size * sizeof *lg);
    }
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
        /* as Megatron's tokenizer encodes it; a BOS it puts first is the context of the first token */
        size_t bos = v->mc.tok.bpe ? mt_tokenizer_encode(&v->mc.tok, ctx, text.text, text.len, &ids)
                                   : (mt_bpe_encode(ctx, text.text, text.len, &ids), 0);
        int64_t before = bos ? ids.p[bos - 1] : v->eod;
        size_t n = ids.n - bos;
        if (n && before < 0) mt_die("--score: the tokenizer has neither a BOS nor an end of document to score after");
        double lp = 0;
        if (n) score_doc(v, before, ids.p + bos, n, &lp, logits_path ? &lo : NULL, lg);
        double loss = n ? -lp / (double)n : 0;
        json_t *o = json_object();
        json_object_set_new(o, "tokens", json_integer((json_int_t)n));
        json_object_set_new(o, "logprob", mt_json_real(lp));
        json_object_set_new(o, "loss", mt_json_real(loss));
        json_object_set_new(o, "ppl", mt_json_real(exp(loss)));
        char *out = mt_json_line(o);
        printf("%s\n", out);
        free(out);
    }
    if (rc < 0) mt_die_err(&e);
    if (logits_path && mt_out_commit(&lo, &e)) mt_die_err(&e);
    free(lg);
    mt_jsonl_free(&js);
    free(ids.p);
    mt_reader_close(rd);
    mt_bpe_ctx_free(ctx);
    if (bpe != v->mc.tok.bpe) mt_bpe_free(bpe);
}

int main(int argc, char **argv)
{
    mt_omp_env_default(argv);
    mt_set_progname(argv[0]);
    mt_err e;
    mt_strs pos = {0};
    if (mt_flags_parse(&cmd, argc, argv, &pos, NULL, &e)) mt_die_err(&e);
    if (!load_dir) mt_die("--load is required (try --help)");
    if (pos.n && !score) mt_die("unexpected argument '%s' (a FILE goes with --score; try --help)", pos.v[0]);
    if (pos.n > 1) mt_die("--score reads one FILE, got %d (try --help)", pos.n);
    if (logits_path && !score) mt_die("--logits goes with --score");
    if (bf16 && fp16) mt_die("--bf16 and --fp16 are mutually exclusive");
    ev v = {0};
    load_model(&v);
    if (score)
        score_mode(&v, pos.n ? pos.v[0] : "-");
    else
        eval_split_mode(&v);
    mt_gpt_ctx_free(v.ctx);
    mt_model_close(&v.mc);
    mtk_close(v.k);
    free(pos.v);
    return 0;
}
