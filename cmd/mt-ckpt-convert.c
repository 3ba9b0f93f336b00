/* mt-ckpt-convert: checkpoints to and from Hugging Face's GPT2LMHeadModel directories, tensor by tensor
 * (man mt-ckpt-convert.1). */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt/hf_dir.h"
#include "ckpt/hf_gpt2.h"
#include "ckpt/hf_out.h"
#include "ckpt/open_model.h"
#include "io/atomic.h"
#include "io/fsutil.h"
#include "mt_base.h"
#include "util/err.h"
#include "util/flags.h"

static const char *load_dir, *to_fmt, *from_fmt, *in_dir, *out_dir, *save_dir, *dtype_name, *vocab_file,
    *merge_file;
static int64_t iteration = -1;
static int target_tp, target_pp;

static const mt_flag flags[] = {
    {"--load", MT_F_STR, &load_dir, "DIR", "mt checkpoint to convert (with --to hf)", 0, 0, NULL},
    {"--iteration", MT_F_I64, &iteration, "N", "iteration of --load (default: latest_checkpointed_iteration.txt)", 0, 1e15, NULL},
    {"--to", MT_F_CHOICE, &to_fmt, NULL, "write a Hugging Face directory (--out)", 0, 0, "hf"},
    {"--out", MT_F_STR, &out_dir, "DIR", "with --to hf: the directory to create (absent or empty)", 0, 0, NULL},
    {"--dtype", MT_F_CHOICE, &dtype_name, NULL,
     "with --to hf: tensor dtype (default: the dtype the checkpoint was converted from, else fp32)", 0, 0, "fp32|bf16|fp16"},
    {"--from", MT_F_CHOICE, &from_fmt, NULL, "read a Hugging Face directory (--in) into a checkpoint (--save)", 0, 0, "hf"},
    {"--in", MT_F_STR, &in_dir, "DIR", "with --from hf: the Hugging Face GPT-2 directory", 0, 0, NULL},
    {"--save", MT_F_STR, &save_dir, "DIR", "the checkpoint directory to write (--from hf, or resharding --load)", 0, 0, NULL},
    {"--target-tensor-parallel-size", MT_F_INT, &target_tp, "N", "tensor-parallel size of the checkpoint written (default 1)", 1, 4096, NULL},
    {"--target-pipeline-parallel-size", MT_F_INT, &target_pp, "N", "pipeline-parallel size of the checkpoint written (default 1)", 1, 4096, NULL},
    MT_FLAG_VOCAB_FILE(&vocab_file, "vocab.json (default: the source's)"),
    MT_FLAG_MERGE_FILE(&merge_file, "merges.txt (default: the source's)"),
    {0},
};

static const mt_cmd cmd = {
    "mt-ckpt-convert",
    "--load DIR --to hf --out DIR [--dtype fp32|bf16|fp16]\n"
    "               --from hf --in DIR --save DIR [--target-tensor-parallel-size N --target-pipeline-parallel-size N]\n"
    "               --load DIR --save DIR --target-tensor-parallel-size N --target-pipeline-parallel-size N",
    "Converts a checkpoint written by mt-train into a directory that Hugging Face transformers loads as\n"
    "GPT2LMHeadModel with its tokenizer, or such a directory into a checkpoint that mt-train loads (with\n"
    "--finetune), mt-eval and mt-generate use, or reshards a checkpoint of any tensor/pipeline-parallel\n"
    "layout to another. Tensors are converted one at a time.",
    flags,
};

static int st_dtype(const char *name)
{
    return !strcmp(name, "bf16") ? MT_ST_BF16 : !strcmp(name, "fp16") ? MT_ST_F16 : MT_ST_F32;
}

static const char *dtype_of_st(mt_st_dtype d)
{
    return d == MT_ST_BF16 ? "bf16" : d == MT_ST_F16 ? "fp16" : "fp32";
}

static void progress(int i, int n)
{
    if (!isatty(2)) return;
    fprintf(stderr, "\r%s: tensor %d/%d", mt_progname(), i, n);
    if (i == n) fputc('\n', stderr);
}

/* ---- mt -> Hugging Face ---- */

typedef struct export_ctx {
    mt_model_ckpt *mc;
    mt_hf_tensor *t;
    int n, done;
    mt_st_dtype dtype;
    float *a, *b;   /* the Megatron tensor, the HF tensor */
} export_ctx;

static int export_fill(void *ctx, int index, void *buf, size_t nbytes, mt_err *e)
{
    export_ctx *x = ctx;
    const mt_hf_tensor *t = &x->t[index];
    (void)nbytes;
    if (mt_model_read_tensor(x->mc, t->mt, t->ndim, t->mt_shape, x->a, e)) return -1;
    size_t n = (size_t)t->hf_shape[0] * (size_t)(t->ndim == 2 ? t->hf_shape[1] : 1);
    float *dst = x->dtype == MT_ST_F32 ? buf : x->b;
    mt_hf_export(t, x->mc->cfg.num_heads, x->a, dst);
    uint16_t *h = buf;
    if (x->dtype == MT_ST_BF16)
        for (size_t i = 0; i < n; i++) h[i] = mt_f32_to_bf16(dst[i]);
    else if (x->dtype == MT_ST_F16)
        for (size_t i = 0; i < n; i++) h[i] = mt_f32_to_f16(dst[i]);
    progress(++x->done, x->n);
    return 0;
}

static void to_hf(void)
{
    mt_err e;
    if (!load_dir || !out_dir) mt_die("--to hf needs --load and --out (try --help)");
    mt_model_ckpt mc;
    mt_model_open_opts o = {.iteration = iteration >= 0 ? iteration : MT_CKPT_LATEST, .vocab_file = vocab_file,
                            .merge_file = merge_file};
    if (mt_model_open(&mc, load_dir, &o, &e)) mt_die_err(&e);
    if (!mc.tok.bpe) mt_die("%s: the checkpoint has no GPT-2 vocabulary (NullTokenizer): pass --vocab-file and --merge-file", mc.dir);
    /* defaults for a checkpoint converted from Hugging Face: back to its dtype and vocabulary rows */
    json_t *from = json_object_get(mc.meta, "converted_from");
    const char *dn = dtype_name;
    if (!dn) {
        const char *src = json_string_value(json_object_get(from, "dtype"));
        dn = src && (!strcmp(src, "bf16") || !strcmp(src, "fp16")) ? src : "fp32";
    }
    int64_t rows = mc.tok.vocab_size;
    json_t *fr = json_object_get(from, "vocab_size");
    if (json_is_integer(fr) && json_integer_value(fr) > rows && json_integer_value(fr) <= mc.cfg.padded_vocab_size)
        rows = json_integer_value(fr);
    const mt_gpt_config *c = &mc.cfg;
    mt_hf_config hc = {
        .n_layer = c->num_layers, .n_embd = c->hidden_size, .n_head = c->num_heads, .n_inner = c->ffn_hidden_size,
        .n_positions = c->max_position_embeddings, .vocab_size = (int)rows,
        .layer_norm_epsilon = mc.a.layernorm_epsilon, .initializer_range = mc.a.init_method_std,
        .exact_gelu = c->exact_gelu, .bos_token_id = (int)mc.tok.eod, .eos_token_id = (int)mc.tok.eod,
        .torch_dtype = !strcmp(dn, "bf16") ? "bfloat16" : !strcmp(dn, "fp16") ? "float16" : "float32",
    };
    mt_model_arch arch = mt_gpt_arch(c);
    int n;
    mt_hf_tensor *t = mt_hf_tensors(&arch, hc.vocab_size, &n, &e);
    if (!t) mt_die("%s: %s", mc.dir, e.msg);

    mt_hf_out out;
    if (mt_hf_out_begin(&out, out_dir, &e)) mt_die_err(&e);
    size_t most = 1;
    for (int i = 0; i < n; i++) {
        size_t m = (size_t)t[i].mt_shape[0] * (size_t)(t[i].ndim == 2 ? t[i].mt_shape[1] : 1);
        if (m > most) most = m;
    }
    mt_st_dtype dt = (mt_st_dtype)st_dtype(dn);
    export_ctx x = {&mc, t, n, 0, dt, mt_xmalloc(most * sizeof(float)),
                    dt == MT_ST_F32 ? NULL : mt_xmalloc(most * sizeof(float))};
    mt_st_tensor *st = mt_xcalloc((size_t)n, sizeof *st);
    char (*names)[128] = mt_xcalloc((size_t)n, sizeof *names);
    for (int i = 0; i < n; i++) {
        snprintf(names[i], sizeof *names, "transformer.%s", t[i].hf);
        st[i] = (mt_st_tensor){.name = names[i], .dtype = x.dtype, .ndim = t[i].ndim,
                               .shape = {t[i].hf_shape[0], t[i].hf_shape[1]}};
    }
    static const mt_st_kv meta[] = {{"format", "pt"}};
    int rc = mt_st_write_fill(out.model_path, st, n, meta, 1, export_fill, &x, &e);
    if (!rc) rc = mt_model_check_all_read(&mc, &e);
    if (!rc) rc = mt_hf_out_files(&out, &hc, mc.vocab_file, mc.merge_file, &e);
    if (!rc) rc = mt_hf_out_commit(&out, &e);
    if (rc) {
        mt_hf_out_abort(&out);
        mt_die_err(&e);
    }
    fprintf(stderr, "%s: wrote %s (GPT2LMHeadModel, %d tensors, %s) from %s\n", mt_progname(), out_dir, n, dn, mc.dir);
    free(st);
    free(names);
    free(x.a);
    free(x.b);
    free(t);
    mt_model_close(&mc);
}

/* ---- writing a checkpoint of any layout ---- */

/* One tensor of one target rank: a slice of a whole tensor of the source. */
typedef struct slice_src {
    mt_model_ckpt *mc;
    const mt_layout_tensor *lt;   /* the target rank's tensor */
    const mt_layout_tensor *w;    /* the whole tensor (one-rank layout of the target's padding) */
    const char *moment;           /* NULL: the weights; ".exp_avg" or ".exp_avg_sq" */
    float *whole;                 /* shared buffer of the largest whole tensor */
    int *done, total;
} slice_src;

static int slice_fill(void *ctx, const mt_ckpt_tensor *t, float *dst, mt_err *e)
{
    slice_src *x = ctx;
    const mt_layout_tensor *lt = x->lt, *w = x->w;
    (void)t;
    int rc = x->moment ? mt_model_read_optim(x->mc, w->name, x->moment, w->ndim, w->global_shape, x->whole, e)
                       : mt_model_read_tensor(x->mc, w->name, w->ndim, w->global_shape, x->whole, e);
    if (rc) return -1;
    int64_t rows = lt->local_shape[0], cols = lt->ndim == 2 ? lt->local_shape[1] : 1;
    int64_t C = lt->ndim == 2 ? lt->global_shape[1] : 1;
    if (lt->partition_dim == 1)
        for (int64_t r = 0; r < rows; r++)
            memcpy(dst + r * cols, x->whole + r * C + lt->partition_offset, sizeof(float) * (size_t)cols);
    else
        memcpy(dst, x->whole + (lt->partition_dim == 0 ? lt->partition_offset * C : 0),
               sizeof(float) * (size_t)(rows * cols));
    progress(++*x->done, x->total);
    return 0;
}

/* Writes the model of mc (and its AdamW moments when with_optim) as a checkpoint of tensor size tp and
 * pipeline size pp: every rank's meta.json is meta with those sizes in its args. */
static int write_ranks(mt_model_ckpt *mc, const char *save, int64_t it, int tp, int pp, json_t *meta, int with_optim,
                       mt_err *e)
{
    mt_model_arch a = mc->arch;
    int d = mc->a.make_vocab_size_divisible_by;
    a.padded_vocab_size = mt_gpt_padded_vocab(mc->vocab_size, d, tp);
    int n = tp * pp, rc = 0, done = 0, total = 0;
    mt_layout whole, *l = mt_xcalloc((size_t)n, sizeof *l);
    mt_layout_part one = {0, 1, 0, 1};
    if (mt_layout_build(&a, &one, &whole, e)) {
        free(l);
        return -1;
    }
    size_t most = 1;
    for (int i = 0; i < whole.n; i++)
        if (whole.t[i].numel > most) most = whole.t[i].numel;
    for (int i = 0; i < n && !rc; i++) {
        mt_layout_part part = {i % tp, tp, i / tp, pp};
        if (mt_layout_build(&a, &part, &l[i], e)) rc = -1;
        else total += l[i].n * (with_optim ? 3 : 1);
    }
    mt_ckpt_rank *ranks = mt_xcalloc((size_t)n, sizeof *ranks);
    char (*names)[32] = mt_xcalloc((size_t)n, sizeof *names);
    slice_src **srcs = mt_xcalloc((size_t)n, sizeof *srcs);
    char (**ons)[200] = mt_xcalloc((size_t)n, sizeof *ons);
    float *buf = mt_xmalloc(most * sizeof(float));
    for (int i = 0; i < n && !rc; i++) {
        int nt = l[i].n, per = with_optim ? 3 : 1;
        mt_ckpt_tensor *ct = mt_xcalloc((size_t)nt * (size_t)per, sizeof *ct);
        slice_src *src = mt_xcalloc((size_t)nt * (size_t)per, sizeof *src);
        char (*on)[200] = mt_xcalloc((size_t)nt * 2 + 1, sizeof *on);
        for (int j = 0; j < nt; j++) {
            const mt_layout_tensor *lt = &l[i].t[j];
            /* the head copy of tied embeddings is a slice of the word embeddings */
            mt_tensor_kind k = lt->kind == MT_T_OUTPUT && a.tied_embeddings ? MT_T_WORD_EMB : lt->kind;
            const mt_layout_tensor *w = mt_layout_get(&whole, lt->layer, k);
            for (int m = 0; m < per; m++) {
                int q = m * nt + j;
                const char *moment = m == 0 ? NULL : m == 1 ? ".exp_avg" : ".exp_avg_sq";
                src[q] = (slice_src){mc, lt, w, moment, buf, &done, total};
                if (m) snprintf(on[(m - 1) * nt + j], sizeof *on, "%s%s", lt->name, moment);
                ct[q] = (mt_ckpt_tensor){.name = m ? on[(m - 1) * nt + j] : lt->name, .ndim = lt->ndim,
                                         .shape = {lt->local_shape[0], lt->local_shape[1]}, .fill = slice_fill,
                                         .fill_ctx = &src[q]};
            }
        }
        mt_ckpt_rank_name(names[i], sizeof *names, i % tp, i / tp, pp);
        json_t *m = json_deep_copy(meta), *args = json_object_get(m, "args");
        json_object_set_new(args, "tensor-model-parallel-size", json_integer(tp));
        json_object_set_new(args, "pipeline-model-parallel-size", json_integer(pp));
        ranks[i] = (mt_ckpt_rank){names[i], ct, nt, with_optim ? ct + nt : NULL, with_optim ? 2 * nt : 0, m};
        srcs[i] = src;
        ons[i] = on;
    }
    if (!rc) rc = mt_ckpt_save_ranks(save, it, ranks, n, e);
    for (int i = 0; i < n; i++) {
        free((void *)ranks[i].model);
        free(srcs[i]);
        free(ons[i]);
        json_decref(ranks[i].meta);
        mt_layout_free(&l[i]);
    }
    free(srcs);
    free(ons);
    free(ranks);
    free(names);
    free(buf);
    free(l);
    mt_layout_free(&whole);
    return rc;
}

/* Copies the tokenizer file src to <save>/<name> (atomically) and returns the copy's absolute path. */
static char *copy_into(const char *src, const char *save, const char *name, mt_err *e)
{
    size_t n = strlen(save) + strlen(name) + 2;
    char *dst = mt_xmalloc(n);
    snprintf(dst, n, "%s/%s", save, name);
    if (mt_copy_file(src, dst, e)) {
        free(dst);
        return NULL;
    }
    char *abs = realpath(dst, NULL);
    free(dst);
    if (!abs) mt_err_sys(e, "%s/%s", save, name);
    return abs;
}

static void from_hf(void)
{
    mt_err e;
    if (!in_dir || !save_dir) mt_die("--from hf needs --in and --save (try --help)");
    if (!mt_hf_dir_is(in_dir)) mt_die("%s: not a Hugging Face model directory (config.json and model.safetensors)", in_dir);
    mt_model_ckpt mc;
    mt_model_open_opts o = {.iteration = MT_CKPT_LATEST, .vocab_file = vocab_file, .merge_file = merge_file};
    if (mt_model_open(&mc, in_dir, &o, &e)) mt_die_err(&e);
    if (mt_ckpt_check_save_dir(save_dir, &e)) mt_die_err(&e);
    char *vocab = copy_into(mc.vocab_file, save_dir, "vocab.json", &e);
    char *merges = vocab ? copy_into(mc.merge_file, save_dir, "merges.txt", &e) : NULL;
    if (!merges) mt_die_err(&e);

    /* the tensors are read while saving; what the source has besides them is checked first */
    json_t *args = mt_hf_megatron_args(&mc.hf->cfg, mc.a.make_vocab_size_divisible_by, vocab, merges);
    json_t *meta = json_pack("{s:f,s:o,s:i,s:i,s:{s:s,s:s,s:s,s:i}}", "checkpoint_version", 3.0, "args", args,
                             "consumed_train_samples", 0, "consumed_valid_samples", 0, "converted_from", "format",
                             "huggingface", "dir", in_dir, "dtype", dtype_of_st(mc.hf->dtype), "vocab_size",
                             mc.hf->cfg.vocab_size);
    int rc = mt_model_check_all_read(&mc, &e);   /* names only: the data are read while saving */
    if (!rc) rc = write_ranks(&mc, save_dir, MT_CKPT_RELEASE, target_tp ? target_tp : 1, target_pp ? target_pp : 1,
                              meta, 0, &e);
    if (rc) mt_die_err(&e);
    fprintf(stderr, "%s: wrote %s (release, from %s, %s)\n", mt_progname(), save_dir, in_dir,
            dtype_of_st(mc.hf->dtype));
    json_decref(meta);
    free(vocab);
    free(merges);
    mt_model_close(&mc);
}

/* ---- mt -> mt: another tensor/pipeline layout ---- */

static void reshard(void)
{
    mt_err e;
    mt_model_ckpt mc;
    mt_model_open_opts o = {.iteration = iteration >= 0 ? iteration : MT_CKPT_LATEST, .vocab_file = vocab_file,
                            .merge_file = merge_file};
    if (mt_model_open(&mc, load_dir, &o, &e)) mt_die_err(&e);
    if (mc.hf) mt_die("%s: a Hugging Face directory: use --from hf --in %s --save DIR", load_dir, load_dir);
    if (mt_ckpt_check_save_dir(save_dir, &e)) mt_die_err(&e);
    int tp = target_tp ? target_tp : 1, pp = target_pp ? target_pp : 1, stp, spp;
    mt_model_parallel_sizes(&mc, &stp, &spp);
    int with_optim = mt_model_has_optim(&mc);
    json_t *meta = json_deep_copy(mc.meta);
    /* distributed-optimizer shards become each rank's optim.safetensors */
    json_object_del(json_object_get(meta, "optimizer"), "distributed");
    if (write_ranks(&mc, save_dir, mc.iteration, tp, pp, meta, with_optim, &e) ||
        mt_model_check_all_read(&mc, &e) || (with_optim && mt_model_check_all_read_optim(&mc, &e)))
        mt_die_err(&e);
    fprintf(stderr, "%s: wrote %s: tensor-parallel %d -> %d, pipeline %d -> %d%s\n", mt_progname(), save_dir, stp, tp,
            spp, pp, with_optim ? ", with optimizer state" : "");
    json_decref(meta);
    mt_model_close(&mc);
}

int main(int argc, char **argv)
{
    mt_set_progname(argv[0]);
    mt_out_install_signal_cleanup();
    mt_err e;
    if (mt_flags_parse(&cmd, argc, argv, NULL, NULL, &e)) mt_die_err(&e);
    if (to_fmt && from_fmt) mt_die("--to and --from are exclusive (try --help)");
    if (to_fmt) {
        if (in_dir || save_dir) mt_die("--to hf reads --load and writes --out (--in and --save go with --from hf)");
        if (target_tp || target_pp) mt_die("--to hf writes one directory: --target-*-parallel-size go with --save");
        to_hf();
    } else if (from_fmt) {
        if (load_dir || out_dir || dtype_name || iteration >= 0)
            mt_die("--from hf reads --in and writes --save (--load, --out, --dtype and --iteration go with --to hf)");
        from_hf();
    } else if (load_dir && save_dir) {
        if (in_dir || out_dir || dtype_name) mt_die("resharding reads --load and writes --save (--in, --out, --dtype go with --from/--to hf)");
        reshard();
    } else {
        mt_die("nothing to do: give --to hf, --from hf, or --load and --save with target sizes (try --help)");
    }
    return 0;
}
