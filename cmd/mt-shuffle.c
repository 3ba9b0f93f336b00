/* mt-shuffle: precompute Megatron's GPT sample indices and blends for every split; inspect samples
 * (man mt-shuffle.1). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/gpt_dataset.h"
#include "data/split.h"
#include "io/atomic.h"
#include "io/jsonl.h"
#include "tok/bpe.h"
#include "util/err.h"
#include "util/flags.h"
#include "util/vec.h"

static mt_strs data_path;
static const char *split_arg, *cache_dir, *show_split = "train", *vocab_file, *merge_file;
static int seq_length;
static int64_t train_iters, train_samples, gbs, eval_interval = 1000, eval_iters = 100, seed = 1234, show_sample = -1,
               show_count = 1;
static double surplus = 0.005;
static bool inspect, decode, quiet;

static const mt_flag flags[] = {
    MT_FLAG_DATA_PATH(&data_path, "dataset prefix, or weight/prefix pairs to blend"),
    MT_FLAG_SPLIT(&split_arg, MT_HELP_SPLIT),
    {"--seq-length", MT_F_INT, &seq_length, "L", "tokens per sample (plus one label token)", 1, 2147483647, NULL},
    {"--train-iters", MT_F_I64, &train_iters, "N", "training iterations: N x global batch train samples", 1, 1e15, NULL},
    {"--train-samples", MT_F_I64, &train_samples, "S", "training samples (instead of --train-iters)", 1, 1e15, NULL},
    {"--global-batch-size", MT_F_I64, &gbs, "G", "samples per iteration", 1, 1e12, NULL},
    {"--eval-interval", MT_F_I64, &eval_interval, "I", "iterations between evaluations (default 1000)", 1, 1e15, NULL},
    {"--eval-iters", MT_F_I64, &eval_iters, "K", "iterations per evaluation (default 100)", 0, 1e15, NULL},
    MT_FLAG_SEED(&seed, "RandomState seed, 0..4294967295 (default 1234)"),
    MT_FLAG_DATA_CACHE_PATH(&cache_dir, "where the .npy index files go (default: index-cache/ beside the first dataset)"),
    {"--mid-level-dataset-surplus", MT_F_DOUBLE, &surplus, "X",
     "extra fraction each blended dataset is built with (default 0.005)", 0, 1e6, NULL},
    {"--inspect", MT_F_BOOL, &inspect, NULL, "describe every split's indices; write nothing", 0, 0, NULL},
    {"--show-sample", MT_F_I64, &show_sample, "I", "print sample I of --show-split as token ids (L+1 per line)", 0, 1e18, NULL},
    {"--show-count", MT_F_I64, &show_count, "N", "with --show-sample: samples I..I+N-1 (default 1)", 1, 1e9, NULL},
    {"--show-split", MT_F_CHOICE, &show_split, "SPLIT", "with --show-sample: train (default), valid or test", 0, 0,
     "train|valid|test"},
    {"--decode", MT_F_BOOL, &decode, NULL, "with --show-sample: {\"text\": ...} JSON lines instead of ids", 0, 0, NULL},
    MT_FLAG_VOCAB_FILE(&vocab_file, "GPT-2 vocab.json, as mt-train is given it (names the caches as Megatron does; "
                                    "with --decode: decodes)"),
    MT_FLAG_MERGE_FILE(&merge_file, "GPT-2 merges.txt, as mt-train is given it"),
    MT_FLAG_QUIET(&quiet, "no report on stderr"),
    {0},
};

static const mt_cmd cmd = {
    "mt-shuffle",
    "--data-path [W] PREFIX... --seq-length L (--train-iters N | --train-samples S)\n"
    "                  --global-batch-size G [--split STR] [--eval-interval I] [--eval-iters K] [--seed SEED]\n"
    "                  [--data-cache-path DIR] [--vocab-file F --merge-file F]\n"
    "                  [--inspect | --show-sample I [--decode]]",
    "Builds the document, sample and shuffle indices of Megatron-Core's GPTDataset for the train,\n"
    "validation and test splits, and the blending indices of weighted datasets, exactly as Megatron\n"
    "computes them, and stores them as .npy files in the cache directory, where mt-train finds them.\n"
    "Files are named as Megatron-Core names them (the MD5 of its dataset description, which holds the\n"
    "--vocab-file and --merge-file paths as given), so Megatron given the same --data-cache-path loads\n"
    "them and mt loads Megatron's.\n"
    "Sample counts per split follow from the training flags as in Megatron. Only the .idx files are read.",
    flags,
};

static void note(void *ctx, const char *prefix, int split, bool cached, const mt_gpt_plan *p)
{
    (void)ctx;
    if (quiet || inspect || show_sample >= 0) return;
    fprintf(stderr, "%s: %s %s: %lld samples, %lld epoch%s%s, %s\n", mt_progname(), prefix, mt_split_names[split],
            (long long)p->num_samples, (long long)p->num_epochs, p->num_epochs == 1 ? "" : "s",
            p->separate_final_epoch ? " (last shuffled separately)" : "", cached ? "cached" : "built");
}

static void print_inspect(const mt_gpt_data *d)
{
    printf("datasets: %d%s\n", d->n, d->blended ? " (blended)" : "");
    for (int i = 0; i < d->n; i++) {
        const mt_gpt_source *s = &d->src[i];
        printf("  %s: %llu sequences, %llu tokens", s->prefix, (unsigned long long)s->ds.n_seqs,
               (unsigned long long)s->ds.n_tokens);
        if (d->weights) printf(", weight %.6g", d->weights[i]);
        printf("\n");
    }
    for (int k = 0; k < MT_NSPLITS; k++) {
        const mt_gpt_split_data *sp = &d->split[k];
        if (!sp->present) {
            printf("%s: absent (%s)\n", mt_split_names[k],
                   d->src[0].range[k].present ? "no tokens, and no samples asked of it" : "zero weight in --split");
            continue;
        }
        printf("%s: %lld samples (requested %lld)\n", mt_split_names[k], (long long)sp->length, (long long)sp->requested);
        for (int i = 0; i < d->n; i++) {
            const mt_gpt_source *s = &d->src[i];
            if (!s->built[k]) continue;
            const mt_gpt_plan *p = &s->ix[k].plan;
            printf("  %s: sequences [%lld, %lld), %lld tokens per epoch, %lld epoch%s%s, %lld samples; "
                   "document_index <i4[%lld], sample_index %s[%lld, 2], shuffle_index %s[%lld]\n",
                   s->prefix, (long long)s->range[k].lo, (long long)s->range[k].hi, (long long)p->tokens_per_epoch,
                   (long long)p->num_epochs, p->num_epochs == 1 ? "" : "s",
                   p->separate_final_epoch ? " (last shuffled separately)" : "", (long long)p->num_samples,
                   (long long)p->doc_index_len, p->sample_idx_64 ? "<i8" : "<i4", (long long)p->num_samples + 1,
                   p->shuffle_idx_64 ? "<i8" : "<u4", (long long)p->num_samples);
        }
        int64_t show = sp->length < 3 ? sp->length : 3;
        for (int64_t i = 0; i < show; i++) {
            int c;
            int64_t j, d0, o0;
            mt_gpt_data_locate(d, k, i, &c, &j);
            const mt_gpt_index *ix = &d->src[c].ix[k];
            int64_t sh = mt_gpt_shuffle_at(ix, j);
            mt_gpt_sample_row(ix, sh, &d0, &o0);
            printf("  sample %lld: dataset %d sample %lld -> shuffled %lld, starts in sequence %d at token %lld\n",
                   (long long)i, c, (long long)j, (long long)sh, ix->doc_idx[d0], (long long)o0);
        }
    }
}

static void print_samples(const mt_gpt_data *d)
{
    int k = !strcmp(show_split, "valid") ? MT_SPLIT_VALID : !strcmp(show_split, "test") ? MT_SPLIT_TEST : MT_SPLIT_TRAIN;
    mt_err e;
    mt_bpe *bpe = NULL;
    if (decode) {
        if (!vocab_file || !merge_file) mt_die("--decode needs --vocab-file and --merge-file");
        if (mt_bpe_load(&bpe, vocab_file, merge_file, &e)) mt_die_err(&e);
    }
    int64_t *tok = mt_xmalloc(((size_t)d->seq_length + 1) * sizeof *tok);
    uint32_t *ids = mt_xmalloc(((size_t)d->seq_length + 1) * sizeof *ids);
    mt_buf line = {0}, text = {0};
    for (int64_t i = show_sample; i < show_sample + show_count; i++) {
        int64_t n = mt_gpt_data_sample(d, k, i, tok, &e);
        if (n < 0) mt_die_err(&e);
        line.n = 0;
        if (bpe) {
            for (int64_t t = 0; t < n; t++) {
                if (tok[t] < 0 || tok[t] > UINT32_MAX) mt_die("sample %lld: token %lld is not a vocabulary id", (long long)i, (long long)tok[t]);
                ids[t] = (uint32_t)tok[t];
            }
            text.n = 0;
            if (mt_bpe_decode(bpe, ids, (size_t)n, &text, &e)) mt_die_err(&e);
            mt_buf_append(&line, "{\"text\": ", 9);
            mt_json_quote(&line, text.p, text.n);
            mt_buf_append(&line, "}", 1);
        } else {
            char t[24];
            for (int64_t j = 0; j <= d->seq_length; j++) {
                int m = snprintf(t, sizeof t, "%s%lld", j ? " " : "", (long long)tok[j]);
                mt_buf_append(&line, t, (size_t)m);
            }
        }
        mt_buf_putc(&line, '\n');
        if (mt_write_fd(1, line.p, line.n, "standard output", &e)) mt_die_err(&e);
    }
    mt_buf_free(&line);
    mt_buf_free(&text);
    free(tok);
    free(ids);
    if (bpe) mt_bpe_free(bpe);
}

int main(int argc, char **argv)
{
    mt_set_progname(argv[0]);
    mt_out_install_signal_cleanup();
    mt_err e;
    if (mt_flags_parse(&cmd, argc, argv, NULL, NULL, &e)) mt_die_err(&e);
    if (!data_path.n) mt_die("--data-path is required (try --help)");
    if (!seq_length) mt_die("--seq-length is required");
    if (!gbs) mt_die("--global-batch-size is required");
    if (!train_iters == !train_samples) mt_die("give exactly one of --train-iters and --train-samples");
    if (inspect && show_sample >= 0) mt_die("--inspect and --show-sample exclude each other");
    if (decode && show_sample < 0) mt_die("--decode goes with --show-sample");
    if (!vocab_file != !merge_file) mt_die("--vocab-file and --merge-file go together");

    int64_t ns[MT_NSPLITS];
    if (mt_split_num_samples(train_iters, train_samples, gbs, eval_interval, eval_iters, ns, &e)) mt_die_err(&e);

    char *dflt = mt_default_cache_dir(cache_dir, data_path.n, data_path.v);
    cache_dir = dflt;
    mt_gpt_data_args a = {0};
    a.n_args = data_path.n;
    a.args = (char *const *)data_path.v;
    a.split = split_arg;
    a.seq_length = seq_length;
    a.seed = (uint32_t)seed;
    memcpy(a.num_samples, ns, sizeof ns);
    a.cache_dir = inspect ? NULL : cache_dir;
    a.surplus = surplus;
    a.vocab_file = vocab_file;
    a.merge_file = merge_file;
    a.note = note;
    mt_gpt_data d;
    if (mt_gpt_data_open(&d, &a, &e)) mt_die_err(&e);
    if (inspect)
        print_inspect(&d);
    else if (show_sample >= 0)
        print_samples(&d);
    else if (!quiet)
        for (int k = 0; k < MT_NSPLITS; k++)
            if (d.blended && d.split[k].present)
                fprintf(stderr, "%s: blend %s: %lld samples from %d datasets, %s\n", mt_progname(), mt_split_names[k],
                        (long long)d.split[k].length, d.n, d.split[k].blend_cached ? "cached" : "built");
    if (!quiet && !inspect && show_sample < 0) fprintf(stderr, "%s: indices in %s\n", mt_progname(), cache_dir);
    mt_gpt_data_close(&d);
    free(dflt);
    return 0;
}
