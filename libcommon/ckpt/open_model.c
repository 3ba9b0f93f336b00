/* open_model.c: config, tokenizer, metadata and weights of a trained model from its checkpoint (the config
 * and tokenizer built by config/, as mt-train builds them from its flags). */
#include "ckpt/open_model.h"

#include <stdlib.h>

#include <math.h>
#include <string.h>
#include <unistd.h>

#include "ckpt/dist_optim.h"
#include "ckpt/megatron_dir.h"
#include "ckpt/meta.h"
#include "io/fsutil.h"

int mt_model_check_tokenizer(mt_model_ckpt *mc, mt_err *e)
{
    const char *type = mc->a.tokenizer_type;
    if (mc->tok.bpe || (type && !strcmp(type, "NullTokenizer"))) return 0;
    mt_train_args ta = mc->a;
    ta.vocab_file = mc->vocab_file;
    ta.merge_file = mc->merge_file;
    ta.tokenizer_model = mc->tokenizer_model;
    mt_tokenizer t;
    if (mt_tokenizer_open(&t, &ta, false, e)) return mt_err_prefix(e, "%s", mc->dir);
    mt_tokenizer_close(&t);
    return 0;
}

/* ---- the args of meta.json, each checked against the range of its mt-train flag ---- */

static const mt_flag *train_flag(const char *key)
{
    for (const mt_flag *f = mt_train_cmd()->flags; f->name; f++)
        if (!strcmp(f->name + 2, key)) return f;
    return NULL;
}

static int absent(const json_t *args, const char *key)
{
    json_t *v = json_object_get(args, key);
    return !v || json_is_null(v);
}

/* An integer arg; an absent (or null) one is the error "missing" unless optional, then dflt. */
static int arg_i64(const mt_model_ckpt *mc, const char *key, int optional, int64_t dflt, int64_t *out, mt_err *e)
{
    if (optional && absent(mc->args, key)) {
        *out = dflt;
        return 0;
    }
    const mt_flag *f = train_flag(key);
    return mt_meta_count(mc->args, "args.", key, mc->dir, (int64_t)f->min, (int64_t)f->max, out, e);
}

static int arg_int(const mt_model_ckpt *mc, const char *key, int *out, mt_err *e)
{
    int64_t x;
    if (arg_i64(mc, key, 0, 0, &x, e)) return -1;
    *out = (int)x;   /* the flags' ranges are within int */
    return 0;
}

static int arg_real(const mt_model_ckpt *mc, const char *key, int optional, double dflt, double *out, mt_err *e)
{
    if (optional && absent(mc->args, key)) {
        *out = dflt;
        return 0;
    }
    const mt_flag *f = train_flag(key);
    return mt_meta_real(mc->args, "args.", key, mc->dir, f->min, f->max, out, e);
}

/* A string arg, or NULL when absent or null; anything else is an error. */
static int arg_str(const mt_model_ckpt *mc, const char *key, const char **out, mt_err *e)
{
    json_t *v = json_object_get(mc->args, key);
    *out = json_is_string(v) ? json_string_value(v) : NULL;
    if (v && !json_is_null(v) && !json_is_string(v))
        return mt_err_set(e, "%s/meta.json: \"args.%s\" is not a string", mc->dir, key);
    return 0;
}

/* A list of strings (absent, null or []: none); the array is the caller's to free, the strings borrowed. */
static int arg_strs(const mt_model_ckpt *mc, const char *key, mt_strs *out, mt_err *e)
{
    json_t *v = json_object_get(mc->args, key), *x;
    size_t i;
    out->v = NULL;
    out->n = 0;
    if (!v || json_is_null(v)) return 0;
    if (!json_is_array(v)) return mt_err_set(e, "%s/meta.json: \"args.%s\" is not a list", mc->dir, key);
    json_array_foreach(v, i, x)
        if (!json_is_string(x)) return mt_err_set(e, "%s/meta.json: \"args.%s\"[%zu] is not a string", mc->dir, key, i);
    if (!json_array_size(v)) return 0;
    out->v = mt_xmalloc(json_array_size(v) * sizeof *out->v);
    json_array_foreach(v, i, x) out->v[out->n++] = json_string_value(x);
    return 0;
}

static int read_args(mt_model_ckpt *mc, mt_err *e)
{
    mt_train_args *a = &mc->a;
    char where[4200];
    snprintf(where, sizeof where, "%s/meta.json", mc->dir);
    if (mt_train_args_arch_from_json(mc->args, a, where, e)) return -1;   /* zeroes the rest */
    if (arg_int(mc, "num-layers", &a->num_layers, e) || arg_int(mc, "hidden-size", &a->hidden_size, e) ||
        arg_int(mc, "num-attention-heads", &a->num_attention_heads, e) ||
        arg_int(mc, "ffn-hidden-size", &a->ffn_hidden_size, e) || arg_int(mc, "seq-length", &a->seq_length, e) ||
        arg_int(mc, "max-position-embeddings", &a->max_position_embeddings, e) ||
        arg_int(mc, "make-vocab-size-divisible-by", &a->make_vocab_size_divisible_by, e) ||
        arg_int(mc, "micro-batch-size", &a->micro_batch_size, e) ||
        arg_real(mc, absent(mc->args, "norm-epsilon") ? "layernorm-epsilon" : "norm-epsilon", 0, 0, &a->layernorm_epsilon, e) ||
        arg_real(mc, "init-method-std", 0, 0, &a->init_method_std, e) ||
        /* dropout does nothing outside training: optional */
        arg_real(mc, "hidden-dropout", 1, 0, &a->hidden_dropout, e) ||
        arg_real(mc, "attention-dropout", 1, 0, &a->attention_dropout, e) ||
        arg_i64(mc, "seed", 1, 1234, &a->seed, e) ||
        arg_real(mc, "mid-level-dataset-surplus", 1, 0.005, &a->mid_level_dataset_surplus, e) ||
        arg_str(mc, "tokenizer-type", &a->tokenizer_type, e) || arg_str(mc, "vocab-file", &a->vocab_file, e) ||
        arg_str(mc, "merge-file", &a->merge_file, e) || arg_str(mc, "split", &a->split, e) ||
        arg_str(mc, "data-cache-path", &a->data_cache_path, e))
        return -1;
    a->no_bias_gelu_fusion = json_is_true(json_object_get(mc->args, "no-bias-gelu-fusion"));
    a->openai_gelu = json_is_true(json_object_get(mc->args, "openai-gelu"));
    int file_tok = mt_tokenizer_reads_model(a->tokenizer_type);
    if (a->tokenizer_type && !strcmp(a->tokenizer_type, "NullTokenizer") && arg_i64(mc, "vocab-size", 0, 0, &a->vocab_size, e))
        return -1;
    /* a tokenizer file's vocabulary size: its own, unless the model has more rows (a conversion records them;
     * mt-train records 0 when --vocab-size was not given) */
    json_t *vs = json_object_get(mc->args, "vocab-size");
    if (file_tok && !(json_is_integer(vs) && json_integer_value(vs) == 0) &&
        arg_i64(mc, "vocab-size", 1, 0, &a->vocab_size, e))
        return -1;
    if (file_tok && (arg_str(mc, "tokenizer-model", &a->tokenizer_model, e) ||
                     arg_str(mc, "tiktoken-pattern", &a->tiktoken_pattern, e)))
        return -1;
    /* Megatron's TikTokenizer layout; absent in checkpoints written before mt followed it, whose ids were
     * the ranks (0 special tokens) */
    if (file_tok && (arg_i64(mc, "tiktoken-num-special-tokens", 1, 0, &a->tiktoken_num_special_tokens, e) ||
                     arg_strs(mc, "tiktoken-special-tokens", &a->tiktoken_special_tokens, e)))
        return -1;
    return 0;
}

/* The tokenizer file of a checkpoint: the copy in the checkpoint's own directory first (tokenizer.json for
 * HuggingFaceTokenizer, the recorded file's name for TikTokenizer), so that a moved checkpoint keeps
 * its tokenizer; else the recorded --tokenizer-model. */
static void find_tokenizer(mt_model_ckpt *mc)
{
    const mt_train_args *a = &mc->a;
    mc->tokenizer_model = a->tokenizer_model;
    if (!mt_tokenizer_reads_model(a->tokenizer_type) || !mc->load_dir) return;
    int hf = !strcmp(a->tokenizer_type, "HuggingFaceTokenizer");
    const char *base = NULL;
    if (!hf && a->tokenizer_model) {
        base = strrchr(a->tokenizer_model, '/');
        base = base ? base + 1 : a->tokenizer_model;
    }
    char *own = mt_path_join(mc->load_dir, hf ? "tokenizer.json" : base ? base : "");
    if ((hf || (base && *base)) && access(own, F_OK) == 0) {
        free(own);
        mc->tokenizer_found = hf ? mt_xstrdup(mc->load_dir) : mt_path_join(mc->load_dir, base);
        mc->tokenizer_model = mc->tokenizer_found;
        return;
    }
    free(own);
}

/* ---- opening ---- */

static int open_shards(mt_model_ckpt *mc, mt_err *e);

static int open_meta(mt_model_ckpt *mc, const mt_model_open_opts *o, mt_err *e)
{
    mc->args = json_object_get(mc->meta, "args");
    if (!json_is_object(mc->args)) return mt_err_set(e, "%s/meta.json: missing \"args\"", mc->dir);
    if (o->expect) return mt_train_args_check_model(o->expect, mc->args, mc->dir, e);
    if (read_args(mc, e)) return -1;
    const mt_train_args *a = &mc->a;
    mc->vocab_file = o->vocab_file ? o->vocab_file : a->vocab_file;
    mc->merge_file = o->merge_file ? o->merge_file : a->merge_file;
    int gpt2 = !a->tokenizer_type || !strcmp(a->tokenizer_type, "GPT2BPETokenizer");
    if (gpt2 && (!mc->vocab_file || !mc->merge_file))
        return mt_err_set(e, "%s: no vocabulary: pass --vocab-file and --merge-file", mc->dir);
    find_tokenizer(mc);
    mt_train_args ta = *a;
    ta.vocab_file = mc->vocab_file;
    ta.merge_file = mc->merge_file;
    ta.tokenizer_model = mc->tokenizer_model;
    if (mt_tokenizer_open(&mc->tok, &ta, o->vocab_only, e)) return mt_err_prefix(e, "%s", mc->dir);
    mc->cfg = mt_gpt_config_from_args(a, mc->tok.vocab_size);
    if (mt_gpt_config_check(&mc->cfg, e)) return mt_err_prefix(e, "%s/meta.json", mc->dir);
    mc->arch = mt_gpt_arch(&mc->cfg);
    mc->vocab_size = mc->cfg.vocab_size;
    mc->have_arch = 1;
    return 0;
}

int mt_model_open_args(mt_model_ckpt *mc, const mt_model_open_opts *o, mt_err *e)
{
    return open_meta(mc, o, e);
}

/* A Hugging Face directory: args from config.json, tokenizer files from the directory, the vocabulary
 * padded to exactly the model's rows. */
static int cmp_mt_name(const void *a, const void *b)
{
    return strcmp((*(const mt_hf_tensor *const *)a)->mt, (*(const mt_hf_tensor *const *)b)->mt);
}

static int open_hf(mt_model_ckpt *mc, const char *load_dir, const mt_model_open_opts *o, mt_err *e)
{
    if (o->expect)
        return mt_err_set(e, "%s: a Hugging Face model directory, not a checkpoint: convert it first with "
                             "mt-ckpt-convert --from hf", load_dir);
    mc->hf = mt_xcalloc(1, sizeof *mc->hf);
    if (mt_hf_dir_open(mc->hf, load_dir, e)) {
        free(mc->hf);
        mc->hf = NULL;
        return -1;
    }
    mc->dir = mc->hf->dir;
    /* the tokenizer: GPT-2's vocab.json and merges.txt (--vocab-file and --merge-file, else the directory's);
     * for Llama, unless those flags are given, the directory's tokenizer.json where there is one
     * (HuggingFaceTokenizer, whose --tokenizer-model is the directory) */
    char *tj = mt_path_join(load_dir, "tokenizer.json"), *vj = mt_path_join(load_dir, "vocab.json"),
         *mj = mt_path_join(load_dir, "merges.txt");
    int ht = access(tj, F_OK) == 0, hv = access(vj, F_OK) == 0, hm = access(mj, F_OK) == 0;
    int llama = mc->hf->cfg.llama, given = o->vocab_file || o->merge_file, hf_tok = llama && ht && !given;
    int rc = 0;
    if (llama && !hf_tok && !given && !(hv && hm))
        rc = mt_err_set(e, "%s: no tokenizer that mt reads (tokenizer.json, or GPT-2's vocab.json and merges.txt): "
                           "pass --vocab-file and --merge-file", load_dir);
    else
        mc->meta = json_pack("{s:o}", "args", mt_hf_megatron_args(&mc->hf->cfg, 1, hf_tok ? load_dir : NULL,
                                                                   hv ? vj : NULL, hm ? mj : NULL));
    free(tj);
    free(vj);
    free(mj);
    if (rc || open_meta(mc, o, e)) return -1;
    int64_t rows = mc->hf->cfg.vocab_size, V = mc->tok.vocab_size;
    if (rows < V)
        return mt_err_set(e, "%s/config.json: vocab_size %lld is below the tokenizer's %lld tokens", load_dir,
                          (long long)rows, (long long)V);
    int d = mt_hf_divisible_by(rows, V);
    json_object_set_new(mc->args, "make-vocab-size-divisible-by", json_integer(d));
    mc->a.make_vocab_size_divisible_by = d;
    mc->cfg.padded_vocab_size = mt_gpt_padded_vocab((int)V, d, 1);
    mc->arch = mt_gpt_arch(&mc->cfg);
    mt_model_arch a = mt_hf_arch(&mc->hf->cfg, mc->cfg.padded_vocab_size);
    mc->hf_map = mt_hf_tensors(&a, rows, &mc->hf_n, e);
    if (!mc->hf_map) return mt_err_prefix(e, "%s", load_dir);
    /* the sizes config.json claims, against the files, before any caller allocates for them */
    if (mt_hf_dir_check_shapes(mc->hf, mc->hf_map, mc->hf_n, e)) return -1;
    mc->hf_by_mt = mt_xmalloc((size_t)mc->hf_n * sizeof *mc->hf_by_mt);
    for (int i = 0; i < mc->hf_n; i++) mc->hf_by_mt[i] = &mc->hf_map[i];
    qsort(mc->hf_by_mt, (size_t)mc->hf_n, sizeof *mc->hf_by_mt, cmp_mt_name);
    return 0;
}

int mt_model_open(mt_model_ckpt *mc, const char *load_dir, const mt_model_open_opts *o, mt_err *e)
{
    memset(mc, 0, sizeof *mc);
    mc->own_slices = o->expect != NULL;
    int64_t it;
    mt_err probe = {0};
    if (o->iteration == MT_CKPT_LATEST && mt_ckpt_latest(load_dir, &it, &probe) == 1 && mt_hf_dir_is(load_dir)) {
        if (open_hf(mc, load_dir, o, e)) {
            mt_model_close(mc);
            return -1;
        }
        return 0;
    }
    mc->reader = mt_ckpt_open(load_dir, o->iteration, e);
    if (!mc->reader) return -1;
    mc->load_dir = mt_xstrdup(load_dir);
    mc->iteration = mt_ckpt_is_release(mc->reader) ? MT_CKPT_RELEASE : mt_ckpt_iteration(mc->reader);
    mc->dir = mt_ckpt_dir(mc->reader);
    mc->meta = mt_ckpt_meta(mc->reader);
    /* every rank's files opened and the sizes the metadata claim checked against them, before any caller
     * allocates a model of those sizes */
    if (open_meta(mc, o, e) || (mc->have_arch && open_shards(mc, e))) {
        mt_model_close(mc);
        return -1;
    }
    return 0;
}

void mt_model_parallel_sizes(const mt_model_ckpt *mc, int *tp, int *pp)
{
    json_t *t = json_object_get(mc->args, "tensor-model-parallel-size"),
           *p = json_object_get(mc->args, "pipeline-model-parallel-size");
    *tp = json_is_integer(t) ? (int)json_integer_value(t) : 1;
    *pp = json_is_integer(p) ? (int)json_integer_value(p) : 1;
}

/* Every rank of the checkpoint, opened at the first read. */
static int open_shards(mt_model_ckpt *mc, mt_err *e)
{
    if (mc->g) return 0;
    if (!mc->have_arch) return mt_err_set(e, "%s: the model's architecture is not known yet", mc->dir);
    static const char *const sizes[] = {"tensor-model-parallel-size", "pipeline-model-parallel-size",
                                        "expert-model-parallel-size", "expert-tensor-parallel-size"};
    for (int i = 0; i < 4; i++) {   /* absent: 1; present: an integer */
        json_t *v = json_object_get(mc->args, sizes[i]);
        if (v && !json_is_integer(v)) return mt_err_set(e, "%s/meta.json: \"args.%s\" is not an integer", mc->dir, sizes[i]);
    }
    int tp, pp;
    mt_model_parallel_sizes(mc, &tp, &pp);
    if (tp < 1 || pp < 1 || tp > 4096 || pp > 4096)
        return mt_err_set(e, "%s/meta.json: tensor/pipeline-model-parallel-size %d/%d out of range", mc->dir, tp, pp);
    /* the checkpoint's vocabulary was padded for its tensor-parallel size */
    mt_model_arch a = mc->arch;
    json_t *d = json_object_get(mc->args, "make-vocab-size-divisible-by");
    if (tp > 1 && json_is_integer(d) && json_integer_value(d) > 0 && json_integer_value(d) < (1 << 20))
        a.padded_vocab_size = mt_gpt_padded_vocab(mc->vocab_size, (int)json_integer_value(d), tp);
    mt_ckpt_global *g = mt_xcalloc(1, sizeof *g);
    /* the interleaved schedule's model chunks (each rank's state dict holds model0, model1, ...) */
    json_t *lv = json_object_get(mc->args, "num-layers-per-virtual-pipeline-stage");
    int vp = 1;
    if (json_is_integer(lv) && json_integer_value(lv) > 0 && a.num_layers % pp == 0 &&
        (a.num_layers / pp) % json_integer_value(lv) == 0)
        vp = (int)((a.num_layers / pp) / json_integer_value(lv));
    json_t *ej = json_object_get(mc->args, "expert-model-parallel-size");
    int ep = json_is_integer(ej) && a.num_experts ? (int)json_integer_value(ej) : 1;
    if (ep < 1 || ep > a.num_experts + (a.num_experts == 0)) {
        free(g);
        return mt_err_set(e, "%s/meta.json: expert-model-parallel-size %d out of range", mc->dir, ep);
    }
    /* the experts' tensor size: absent or 0, the tensor size */
    json_t *xj = json_object_get(mc->args, "expert-tensor-parallel-size");
    int etp = json_is_integer(xj) && a.num_experts ? (int)json_integer_value(xj) : 0;
    if (etp < 0 || etp > tp || (etp > 0 && tp % etp)) {
        free(g);
        return mt_err_set(e, "%s/meta.json: expert-tensor-parallel-size %d out of range", mc->dir, etp);
    }
    if (mt_ckpt_global_open(g, mc->reader, mc->load_dir, mc->iteration, &a, tp, pp, vp, ep, etp, e)) {
        free(g);
        return mt_err_prefix(e, "%s", mc->load_dir);
    }
    mc->g = g;
    return 0;
}

int mt_model_read_tensor(mt_model_ckpt *mc, const char *name, int ndim, const int64_t *shape, float *dst, mt_err *e)
{
    if (mc->meg) return mt_meg_read(mc->meg, name, ndim, shape, dst, e);
    if (!mc->hf) {
        if (open_shards(mc, e)) return -1;
        return mt_ckpt_global_read(mc->g, MT_CKPT_MODEL, name, NULL, ndim, shape, dst, e);
    }
    mt_hf_tensor key;
    snprintf(key.mt, sizeof key.mt, "%s", name);
    const mt_hf_tensor *kp = &key, **found = bsearch(&kp, mc->hf_by_mt, (size_t)mc->hf_n, sizeof *mc->hf_by_mt, cmp_mt_name);
    const mt_hf_tensor *t = found ? *found : NULL;
    if (!t)
        return mt_err_set(e, "%s: %s has no tensor for '%s'", mc->dir, mt_hf_model_class(&mc->arch),
                          name);
    /* several HF tensors may make this one (Llama's q, k, v; gate, up): start at the first in table order */
    for (const mt_hf_tensor **f = found; f > mc->hf_by_mt && !strcmp(f[-1]->mt, name); f--)
        if (f[-1] < t) t = f[-1];
    for (const mt_hf_tensor **f = found; f + 1 < mc->hf_by_mt + mc->hf_n && !strcmp(f[1]->mt, name); f++)
        if (f[1] < t) t = f[1];
    /* the word embeddings may be asked for with more rows: the vocabulary padded for a tensor-parallel
     * layout (the added rows are zero, as Megatron pads them) */
    int vocab = t->kind == MT_T_WORD_EMB || t->kind == MT_T_OUTPUT;
    int more_rows = vocab && ndim == 2 && shape[0] > t->mt_shape[0] && shape[1] == t->mt_shape[1];
    for (int i = 0; i < ndim; i++)
        if (ndim != t->ndim || (shape[i] != t->mt_shape[i] && !(i == 0 && more_rows)))
            return mt_err_set(e, "%s: tensor '%s' does not have the shape of this model", mc->dir, t->hf);
    const mt_hf_tensor *first = t;
    /* every HF tensor that holds a part of it (Llama's q, k, v and gate, up), in table order */
    int rc = 0;
    for (; !rc && t < mc->hf_map + mc->hf_n; t++) {
        if (strcmp(t->mt, name)) continue;
        size_t n = (size_t)t->hf_shape[0] * (size_t)(t->ndim == 2 ? t->hf_shape[1] : 1);
        float *tmp = mt_xmalloc((n ? n : 1) * sizeof(float));
        rc = mt_hf_dir_read(mc->hf, t, tmp, e);
        if (!rc) mt_hf_import(t, mc->hf->cfg.n_head, tmp, dst);
        free(tmp);
    }
    if (!rc && more_rows)
        memset(dst + first->mt_shape[0] * first->mt_shape[1], 0,
               sizeof(float) * (size_t)((shape[0] - first->mt_shape[0]) * shape[1]));
    return rc;
}

int mt_model_check_all_read(mt_model_ckpt *mc, mt_err *e)
{
    if (mc->hf) return mt_hf_dir_check_names(mc->hf, mc->hf_map, mc->hf_n, e);
    if (mc->meg) return mt_meg_check_all_read(mc->meg, e);
    if (open_shards(mc, e)) return -1;
    return mt_ckpt_global_check_all_read(mc->g, MT_CKPT_MODEL, NULL, e);
}

/* The distributed optimizer's moments ("optimizer.distributed" in meta.json, no optim.safetensors). */
static json_t *distributed(const mt_model_ckpt *mc)
{
    if (mc->hf || mc->meg || mt_ckpt_has_optim(mc->reader)) return NULL;
    return json_object_get(json_object_get(mc->meta, "optimizer"), "distributed");
}

int mt_model_has_optim(const mt_model_ckpt *mc)
{
    if (mc->meg) return mc->meg->has_optim;
    return !mc->hf && (mt_ckpt_has_optim(mc->reader) || distributed(mc));
}

int mt_model_read_optim(mt_model_ckpt *mc, const char *name, const char *suffix, int ndim, const int64_t *shape,
                        float *dst, mt_err *e)
{
    if (mc->hf) return mt_err_set(e, "%s: a Hugging Face directory has no optimizer state", mc->dir);
    if (mc->meg) return mt_meg_read_optim(mc->meg, name, suffix, ndim, shape, dst, e);
    if (open_shards(mc, e)) return -1;
    return mt_ckpt_global_read(mc->g, MT_CKPT_OPTIM, name, suffix, ndim, shape, dst, e);
}

int mt_model_check_all_read_optim(mt_model_ckpt *mc, mt_err *e)
{
    if (mc->hf || mc->meg || distributed(mc)) return 0;   /* Megatron's: attached to the model's tensors */
    if (open_shards(mc, e)) return -1;
    static const char *const moments[] = {".exp_avg", ".exp_avg_sq", NULL};
    return mt_ckpt_global_check_all_read(mc->g, MT_CKPT_OPTIM, moments, e);
}

int mt_model_read_range(mt_model_ckpt *mc, const mt_layout_tensor *t, int which, const char *suffix, size_t first,
                        size_t count, float *dst, mt_err *e)
{
    if (mc->hf) return mt_err_set(e, "%s: a Hugging Face directory is read whole", mc->dir);
    if (open_shards(mc, e)) return -1;
    return mt_ckpt_global_read_part(mc->g, which, t, suffix, first, count, dst, e);
}

uint64_t mt_model_bytes_read(const mt_model_ckpt *mc) { return mc->g ? mc->g->bytes_read : 0; }

int mt_model_read_part(mt_model_ckpt *mc, const mt_layout_tensor *t, const char *suffix, float *dst, mt_err *e)
{
    if (mc->own_slices) return mt_model_read_range(mc, t, suffix ? MT_CKPT_OPTIM : MT_CKPT_MODEL, suffix, 0, t->numel, dst, e);
    if (t->partition_dim < 0)
        return suffix ? mt_model_read_optim(mc, t->whole_name, suffix, t->ndim, t->global_shape, dst, e)
                      : mt_model_read_tensor(mc, t->whole_name, t->ndim, t->global_shape, dst, e);
    size_t n = (size_t)t->global_shape[0] * (size_t)(t->ndim == 2 ? t->global_shape[1] : 1);
    float *whole = mt_xmalloc((n ? n : 1) * sizeof(float));
    int rc = suffix ? mt_model_read_optim(mc, t->whole_name, suffix, t->ndim, t->global_shape, whole, e)
                    : mt_model_read_tensor(mc, t->whole_name, t->ndim, t->global_shape, whole, e);
    if (!rc) mt_layout_slice(t, whole, dst);
    free(whole);
    return rc;
}

/* Reads the model's slice of every tensor from the checkpoint (a checkpoint of any layout: names and global
 * shapes must match): for mt-train (own_slices) only the bytes of the slices, the fp32 master from the
 * distributed optimizer's shards when they hold it, else the model files; for the other programs the
 * whole tensors of the model files, the replicated copies compared. Fails on tensors the model does not
 * have; copies the weights to the device and refreshes the working copy. */
static int load_weights(mt_gpt *m, mtk *k, mt_model_ckpt *mc, mt_err *e)
{
    size_t np = mt_gpt_num_params(m);
    const mt_layout *l = mt_gpt_layout(m);
    float *host = mt_xmalloc(np * sizeof(float));
    int rc = 0, which = MT_CKPT_MODEL;
    if (mc->own_slices) {
        int master = open_shards(mc, e) ? -1 : mt_ckpt_global_has_master(mc->g, e);
        if (master < 0) rc = -1;
        else if (master) which = MT_CKPT_MASTER;
    }
    for (int i = 0; i < l->n && !rc; i++)
        rc = mc->own_slices ? mt_model_read_range(mc, &l->t[i], which, NULL, 0, l->t[i].numel, host + l->t[i].offset, e)
                            : mt_model_read_part(mc, &l->t[i], NULL, host + l->t[i].offset, e);
    /* a pipeline stage reads its own layers only: the others' are not unexpected */
    if (!rc && l->part.pp_stages == 1)
        rc = mc->own_slices ? mt_ckpt_global_check_names(mc->g, MT_CKPT_MODEL, NULL, e) : mt_model_check_all_read(mc, e);
    if (!rc) {
        mtk_to_device(k, mt_gpt_params(m), host, np * sizeof(float));
        mt_gpt_params_changed(m);
    }
    free(host);
    return rc;
}

int mt_model_load_weights(mt_model_ckpt *mc, mtk *k, mt_gpt *model, mt_err *e)
{
    if (!model) {
        mc->model = model = mt_gpt_create(k, &mc->cfg, MT_GPT_INFER_ONLY, e);
        if (!model) return -1;
    }
    if (!mc->have_arch) {   /* opened for mt-train --load: the model of its flags */
        mc->arch = mt_gpt_arch(mt_gpt_get_config(model));
        mc->vocab_size = mt_gpt_get_config(model)->vocab_size;
        mc->have_arch = 1;
    }
    return load_weights(model, k, mc, e);
}

void mt_model_close(mt_model_ckpt *mc)
{
    mt_gpt_free(mc->model);
    mt_tokenizer_close(&mc->tok);
    if (mc->g) {
        mt_ckpt_global_close(mc->g);
        free(mc->g);
    }
    free(mc->load_dir);
    free(mc->tokenizer_found);
    free(mc->a.tiktoken_special_tokens.v);
    if (mc->reader) mt_ckpt_close(mc->reader);
    if (mc->hf) {
        json_decref(mc->meta);
        mt_hf_dir_close(mc->hf);
        free(mc->hf);
        free(mc->hf_map);
        free(mc->hf_by_mt);
    }
    memset(mc, 0, sizeof *mc);
}
