/* hf_gpt2.c: GPT-2's Hugging Face config and tensor names against Megatron's (see hf_gpt2.h). */
#include "ckpt/hf_gpt2.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/hf_llama.h"
#include "ckpt/hf_moe.h"
#include "io/atomic.h"
#include "io/jsonfile.h"
#include "util/err.h"

/* ---- config.json ---- */

/* An integer key in [lo, hi]; absent: dflt (or an error when dflt < lo). */
int mt_hf_cfg_int(const char *path, json_t *o, const char *key, int lo, int hi, int dflt, int *out, mt_err *e)
{
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) {
        if (dflt < lo) return mt_err_set(e, "%s: missing \"%s\"", path, key);
        *out = dflt;
        return 0;
    }
    if (!json_is_integer(v) || json_integer_value(v) < lo || json_integer_value(v) > hi)
        return mt_err_set(e, "%s: \"%s\" is not an integer in [%d, %d]", path, key, lo, hi);
    *out = (int)json_integer_value(v);
    return 0;
}

int mt_hf_cfg_real(const char *path, json_t *o, const char *key, double lo, double hi, double dflt, double *out,
                    mt_err *e)
{
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) {
        *out = dflt;
        return 0;
    }
    if (!json_is_number(v) || json_number_value(v) < lo || json_number_value(v) > hi)
        return mt_err_set(e, "%s: \"%s\" is not a number in [%g, %g]", path, key, lo, hi);
    *out = json_number_value(v);
    return 0;
}

/* A boolean key that must have the value want (absent: dflt). */
int mt_hf_cfg_bool_is(const char *path, json_t *o, const char *key, int dflt, int want, const char *why, mt_err *e)
{
    json_t *v = json_object_get(o, key);
    int b = v && !json_is_null(v) ? json_is_true(v) : dflt;
    if (v && !json_is_null(v) && !json_is_boolean(v)) return mt_err_set(e, "%s: \"%s\" is not a boolean", path, key);
    if (b != want) return mt_err_set(e, "%s: \"%s\" is %s; %s", path, key, b ? "true" : "false", why);
    return 0;
}

int mt_hf_config_read(const char *path, mt_hf_config *c, mt_err *e)
{
    memset(c, 0, sizeof *c);
    json_t *o = mt_json_load_regular(path, JSON_REJECT_DUPLICATES, e);
    if (!o) return -1;
    int rc = -1;
    if (!json_is_object(o)) {
        mt_err_set(e, "%s: not a JSON object", path);
        goto out;
    }
    const char *mt = json_string_value(json_object_get(o, "model_type"));
    if (mt && !strcmp(mt, "llama")) {
        rc = mt_hf_llama_config_read(path, o, c, e);
        goto out;
    }
    if (mt && (!strcmp(mt, "mixtral") || !strcmp(mt, "qwen2_moe"))) {
        rc = mt_hf_moe_config_read(path, o, mt, c, e);
        goto out;
    }
    if (!mt || strcmp(mt, "gpt2")) {
        mt_err_set(e, "%s: model_type is %s%s%s; only GPT-2 (gpt2), Llama (llama), Mixtral (mixtral) and Qwen2-MoE "
                      "(qwen2_moe) are supported", path,
                   mt ? "'" : "", mt ? mt : "missing", mt ? "'" : "");
        goto out;
    }
    json_t *arch = json_object_get(o, "architectures");
    if (json_is_array(arch)) {
        size_t i;
        json_t *a;
        json_array_foreach(arch, i, a)
        {
            const char *s = json_string_value(a);
            if (!s || (strcmp(s, "GPT2LMHeadModel") && strcmp(s, "GPT2Model"))) {
                mt_err_set(e, "%s: architectures names '%s'; only GPT2LMHeadModel is supported", path, s ? s : "?");
                goto out;
            }
        }
    }
    if (mt_hf_cfg_int(path, o, "n_layer", 1, 100000, 12, &c->n_layer, e) || mt_hf_cfg_int(path, o, "n_embd", 1, 1 << 20, 768, &c->n_embd, e) ||
        mt_hf_cfg_int(path, o, "n_head", 1, 1 << 16, 12, &c->n_head, e) ||
        mt_hf_cfg_int(path, o, "n_positions", 1, 1 << 24, 1024, &c->n_positions, e) ||
        mt_hf_cfg_int(path, o, "vocab_size", 1, 1 << 30, 50257, &c->vocab_size, e) ||
        mt_hf_cfg_int(path, o, "n_inner", 1, 1 << 24, 4 * c->n_embd, &c->n_inner, e) ||
        mt_hf_cfg_int(path, o, "bos_token_id", 0, 1 << 30, 50256, &c->bos_token_id, e) ||
        mt_hf_cfg_int(path, o, "eos_token_id", 0, 1 << 30, 50256, &c->eos_token_id, e) ||
        mt_hf_cfg_real(path, o, "layer_norm_epsilon", 1e-30, 1, 1e-5, &c->layer_norm_epsilon, e) ||
        mt_hf_cfg_real(path, o, "initializer_range", 0, 1e6, 0.02, &c->initializer_range, e) ||
        mt_hf_cfg_bool_is(path, o, "scale_attn_weights", 1, 1, "mt scales attention by 1/sqrt(head size)", e) ||
        mt_hf_cfg_bool_is(path, o, "scale_attn_by_inverse_layer_idx", 0, 0, "not supported", e) ||
        mt_hf_cfg_bool_is(path, o, "add_cross_attention", 0, 0, "not supported", e) ||
        mt_hf_cfg_bool_is(path, o, "tie_word_embeddings", 1, 1, "mt ties the output layer to the word embeddings", e))
        goto out;
    if (c->n_embd % c->n_head) {
        mt_err_set(e, "%s: n_embd %d is not divisible by n_head %d", path, c->n_embd, c->n_head);
        goto out;
    }
    const char *act = json_string_value(json_object_get(o, "activation_function"));
    if (!act) act = "gelu_new";
    if (!strcmp(act, "gelu")) c->exact_gelu = 1;
    else if (strcmp(act, "gelu_new") && strcmp(act, "gelu_fast") && strcmp(act, "gelu_pytorch_tanh")) {
        mt_err_set(e, "%s: activation_function '%s' is not supported (gelu, gelu_new, gelu_fast, gelu_pytorch_tanh)",
                   path, act);
        goto out;
    }
    rc = 0;
out:
    json_decref(o);
    return rc;
}

int mt_hf_config_write(const char *path, const mt_hf_config *c, mt_err *e)
{
    if (c->moe) return mt_hf_moe_config_write(path, c, e);
    if (c->llama) return mt_hf_llama_config_write(path, c, e);
    json_t *o = json_pack("{s:s,s:[s],s:f,s:i,s:f,s:i,s:f,s:f,s:s,s:i,s:i,s:i,s:i,s:i,s:b,s:f,s:b,s:b,"
                          "s:n,s:f,s:b,s:s,s:b,s:s,s:b,s:i}",
                          "activation_function", c->exact_gelu ? "gelu" : "gelu_new",
                          "architectures", "GPT2LMHeadModel",
                          "attn_pdrop", 0.1, "bos_token_id", c->bos_token_id, "embd_pdrop", 0.1,
                          "eos_token_id", c->eos_token_id, "initializer_range", c->initializer_range,
                          "layer_norm_epsilon", c->layer_norm_epsilon, "model_type", "gpt2",
                          "n_embd", c->n_embd, "n_head", c->n_head, "n_inner", c->n_inner, "n_layer", c->n_layer,
                          "n_positions", c->n_positions, "reorder_and_upcast_attn", 0, "resid_pdrop", 0.1,
                          "scale_attn_by_inverse_layer_idx", 0, "scale_attn_weights", 1,
                          "summary_activation", "summary_first_dropout", 0.1, "summary_proj_to_labels", 1,
                          "summary_type", "cls_index", "summary_use_proj", 1, "torch_dtype",
                          c->torch_dtype ? c->torch_dtype : "float32",
                          "use_cache", 1, "vocab_size", c->vocab_size);
    return mt_hf_config_dump(path, o, e);
}

int mt_hf_config_dump(const char *path, json_t *o, mt_err *e)
{
    if (!o) return mt_err_set(e, "%s: cannot build the config", path);
    char *s = json_dumps(o, JSON_INDENT(2) | JSON_SORT_KEYS | JSON_REAL_PRECISION(16));
    json_decref(o);
    if (!s) return mt_err_set(e, "%s: cannot format the config", path);
    mt_out f;
    int rc = mt_out_open(&f, path, e);
    if (!rc && (mt_out_write(&f, s, strlen(s), e) || mt_out_write(&f, "\n", 1, e))) {
        mt_out_abort(&f);
        rc = -1;
    } else if (!rc) rc = mt_out_commit(&f, e);
    free(s);
    return rc;
}

const char *mt_hf_model_class(const mt_model_arch *a)
{
    mt_err e;
    if (a->num_experts) {
        int k = mt_hf_moe_kind(a, &e);
        return k == MT_HF_MIXTRAL ? "MixtralForCausalLM" : k == MT_HF_QWEN2_MOE ? "Qwen2MoeForCausalLM" : "?";
    }
    return mt_hf_llama_is(a) ? "LlamaForCausalLM" : "GPT2LMHeadModel";
}

const char *mt_hf_config_class(const mt_hf_config *c)
{
    return c->moe == MT_HF_MIXTRAL ? "MixtralForCausalLM" : c->moe == MT_HF_QWEN2_MOE ? "Qwen2MoeForCausalLM"
           : c->llama                 ? "LlamaForCausalLM"
                                      : "GPT2LMHeadModel";
}

mt_model_arch mt_hf_arch(const mt_hf_config *c, int padded_vocab)
{
    if (c->moe) return mt_hf_moe_arch(c, padded_vocab);
    if (c->llama) return mt_hf_llama_arch(c, padded_vocab);
    return (mt_model_arch){
        .num_layers = c->n_layer, .hidden_size = c->n_embd, .num_heads = c->n_head, .num_query_groups = c->n_head,
        .ffn_hidden_size = c->n_inner, .max_position_embeddings = c->n_positions, .padded_vocab_size = padded_vocab,
        .norm = MT_NORM_LAYERNORM, .position = MT_POS_LEARNED, .mlp = MT_MLP_GELU, .add_bias_linear = 1,
        .tied_embeddings = 1,
    };
}

/* ---- the tensor table ---- */

typedef struct {
    mt_tensor_kind kind;
    const char *hf;      /* layer tensors: after "h.<i>." */
    mt_hf_xform x;
} hf_name;

static const hf_name outer[] = {
    {MT_T_WORD_EMB, "wte.weight", MT_HF_COPY},
    {MT_T_POS_EMB, "wpe.weight", MT_HF_COPY},
};
static const hf_name per_layer[] = {
    {MT_T_NORM1_W, "ln_1.weight", MT_HF_COPY},           {MT_T_NORM1_B, "ln_1.bias", MT_HF_COPY},
    {MT_T_QKV_W, "attn.c_attn.weight", MT_HF_QKV_WEIGHT}, {MT_T_QKV_B, "attn.c_attn.bias", MT_HF_QKV_BIAS},
    {MT_T_PROJ_W, "attn.c_proj.weight", MT_HF_TRANSPOSE}, {MT_T_PROJ_B, "attn.c_proj.bias", MT_HF_COPY},
    {MT_T_NORM2_W, "ln_2.weight", MT_HF_COPY},           {MT_T_NORM2_B, "ln_2.bias", MT_HF_COPY},
    {MT_T_FC1_W, "mlp.c_fc.weight", MT_HF_TRANSPOSE},     {MT_T_FC1_B, "mlp.c_fc.bias", MT_HF_COPY},
    {MT_T_FC2_W, "mlp.c_proj.weight", MT_HF_TRANSPOSE},   {MT_T_FC2_B, "mlp.c_proj.bias", MT_HF_COPY},
};
static const hf_name final_norm[] = {
    {MT_T_FINAL_NORM_W, "ln_f.weight", MT_HF_COPY},
    {MT_T_FINAL_NORM_B, "ln_f.bias", MT_HF_COPY},
};

void mt_hf_entry_init(mt_hf_tensor *t, const mt_layout_tensor *lt, const char *hf, mt_hf_xform x)
{
    memset(t, 0, sizeof *t);
    snprintf(t->hf, sizeof t->hf, "%s", hf);
    snprintf(t->mt, sizeof t->mt, "%s", lt->name);
    t->kind = lt->kind;
    t->layer = lt->layer;
    t->x = x;
    t->ndim = lt->ndim;
    t->mt_shape[0] = lt->global_shape[0];
    t->mt_shape[1] = lt->global_shape[1];
}

static void fill_entry(mt_hf_tensor *t, const mt_layout_tensor *lt, const char *hf, mt_hf_xform x)
{
    mt_hf_entry_init(t, lt, hf, x);
    if (x == MT_HF_QKV_WEIGHT || x == MT_HF_TRANSPOSE) {
        t->hf_shape[0] = lt->global_shape[1];
        t->hf_shape[1] = lt->global_shape[0];
    } else {
        t->hf_shape[0] = lt->global_shape[0];
        t->hf_shape[1] = lt->global_shape[1];
    }
}

int mt_hf_check_rows(const mt_model_arch *a, int64_t hf_rows, mt_err *e)
{
    if (hf_rows >= 1 && hf_rows <= a->padded_vocab_size) return 0;
    return mt_err_set(e, "%lld vocabulary rows do not fit the model's %d (padded) rows", (long long)hf_rows,
                      a->padded_vocab_size);
}

mt_hf_tensor *mt_hf_tensors(const mt_model_arch *a, int64_t hf_rows, int *n, mt_err *e)
{
    if (a->num_experts) return mt_hf_moe_tensors(a, hf_rows, n, e);
    if (mt_hf_llama_is(a)) return mt_hf_llama_tensors(a, hf_rows, n, e);
    if (a->norm != MT_NORM_LAYERNORM || a->position != MT_POS_LEARNED || a->mlp != MT_MLP_GELU || !a->add_bias_linear ||
        !a->tied_embeddings || a->num_query_groups != a->num_heads) {
        mt_err_set(e, "only GPT-2 models (LayerNorm, learned positions, GeLU, biases, tied embeddings) convert to "
                      "GPT2LMHeadModel, and Llama ones (RMSNorm, rope, SwiGLU, no biases) to LlamaForCausalLM");
        return NULL;
    }
    if (mt_hf_check_rows(a, hf_rows, e)) return NULL;
    mt_layout l;
    mt_layout_part one = {0, 1, 0, 1, 1, 0, 1, 0, 0};
    if (mt_layout_build(a, &one, &l, e)) return NULL;
    int cap = 4 + 12 * a->num_layers, k = 0;
    mt_hf_tensor *t = mt_xcalloc((size_t)cap, sizeof *t);
    for (size_t i = 0; i < sizeof outer / sizeof *outer; i++)
        fill_entry(&t[k++], mt_layout_get(&l, -1, outer[i].kind), outer[i].hf, outer[i].x);
    t[0].hf_shape[0] = hf_rows;
    for (int layer = 0; layer < a->num_layers; layer++)
        for (size_t i = 0; i < sizeof per_layer / sizeof *per_layer; i++) {
            char name[96];
            snprintf(name, sizeof name, "h.%d.%s", layer, per_layer[i].hf);
            fill_entry(&t[k++], mt_layout_get(&l, layer, per_layer[i].kind), name, per_layer[i].x);
        }
    for (size_t i = 0; i < sizeof final_norm / sizeof *final_norm; i++)
        fill_entry(&t[k++], mt_layout_get(&l, -1, final_norm[i].kind), final_norm[i].hf, final_norm[i].x);
    mt_layout_free(&l);
    *n = k;
    return t;
}

/* ---- transforms ---- */

/* HF's QKV column (or bias index) for Megatron's row r = head*3hn + s*hn + d: s*h + head*hn + d. */
static inline int64_t qkv_hf_index(int64_t r, int64_t h, int64_t hn)
{
    int64_t head = r / (3 * hn), s = (r / hn) % 3, d = r % hn;
    return s * h + head * hn + d;
}

void mt_hf_export(const mt_hf_tensor *t, int num_heads, const float *src, float *dst)
{
    int64_t rows = t->mt_shape[0], cols = t->ndim == 2 ? t->mt_shape[1] : 1;
    switch (t->x) {
    case MT_HF_COPY:
        memcpy(dst, src, sizeof(float) * (size_t)(t->hf_shape[0] * cols));   /* hf rows <= mt rows */
        break;
    case MT_HF_TRANSPOSE:      /* [rows, cols] -> [cols, rows] */
        for (int64_t r = 0; r < rows; r++)
            for (int64_t c = 0; c < cols; c++) dst[c * rows + r] = src[r * cols + c];
        break;
    case MT_HF_QKV_WEIGHT: {   /* Megatron [3h, h] -> HF [h, 3h] */
        int64_t h = cols, hn = h / num_heads;
        for (int64_t r = 0; r < rows; r++) {
            int64_t j = qkv_hf_index(r, h, hn);
            for (int64_t c = 0; c < cols; c++) dst[c * rows + j] = src[r * cols + c];
        }
        break;
    }
    case MT_HF_QKV_BIAS: {
        int64_t h = rows / 3, hn = h / num_heads;
        for (int64_t r = 0; r < rows; r++) dst[qkv_hf_index(r, h, hn)] = src[r];
        break;
    }
    case MT_HF_QKV_PART:
    case MT_HF_FC1_PART:
        for (int64_t r = 0; r < t->hf_shape[0]; r++)
            memcpy(dst + r * cols, src + mt_hf_llama_row(t, r) * cols, sizeof(float) * (size_t)cols);
        break;
    }
}

void mt_hf_import(const mt_hf_tensor *t, int num_heads, const float *src, float *dst)
{
    int64_t rows = t->mt_shape[0], cols = t->ndim == 2 ? t->mt_shape[1] : 1;
    switch (t->x) {
    case MT_HF_COPY: {
        size_t have = (size_t)(t->hf_shape[0] * cols), all = (size_t)(rows * cols);
        memcpy(dst, src, sizeof(float) * have);
        memset(dst + have, 0, sizeof(float) * (all - have));
        break;
    }
    case MT_HF_TRANSPOSE:
        for (int64_t r = 0; r < rows; r++)
            for (int64_t c = 0; c < cols; c++) dst[r * cols + c] = src[c * rows + r];
        break;
    case MT_HF_QKV_WEIGHT: {
        int64_t h = cols, hn = h / num_heads;
        for (int64_t r = 0; r < rows; r++) {
            int64_t j = qkv_hf_index(r, h, hn);
            for (int64_t c = 0; c < cols; c++) dst[r * cols + c] = src[c * rows + j];
        }
        break;
    }
    case MT_HF_QKV_BIAS: {
        int64_t h = rows / 3, hn = h / num_heads;
        for (int64_t r = 0; r < rows; r++) dst[r] = src[qkv_hf_index(r, h, hn)];
        break;
    }
    case MT_HF_QKV_PART:
    case MT_HF_FC1_PART:
        for (int64_t r = 0; r < t->hf_shape[0]; r++)
            memcpy(dst + mt_hf_llama_row(t, r) * cols, src + r * cols, sizeof(float) * (size_t)cols);
        break;
    }
}

json_t *mt_hf_megatron_args(const mt_hf_config *c, int divisible_by, const char *tokenizer_dir, const char *vocab_file,
                            const char *merge_file)
{
    if (c->llama) {
        json_t *a = mt_hf_llama_megatron_args(c, divisible_by, tokenizer_dir);
        if (a && c->moe) {
            json_object_set_new(a, "ffn-hidden-size", json_integer(c->n_inner));
            mt_hf_moe_megatron_args(c, a);
        }
        if (!a || tokenizer_dir) return a;
        /* GPT-2's BPE: its own vocabulary size, no tokenizer model */
        json_object_del(a, "vocab-size");
        json_object_del(a, "tokenizer-model");
        json_object_set_new(a, "tokenizer-type", json_string("GPT2BPETokenizer"));
        json_object_set_new(a, "vocab-file", vocab_file ? json_string(vocab_file) : json_null());
        json_object_set_new(a, "merge-file", merge_file ? json_string(merge_file) : json_null());
        return a;
    }
    json_t *a = json_pack("{s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:f,s:f,s:f,s:f,s:b,s:b,s:s,s:i,s:i}",
                          "num-layers", c->n_layer, "hidden-size", c->n_embd, "num-attention-heads", c->n_head,
                          "ffn-hidden-size", c->n_inner, "kv-channels", c->n_embd / c->n_head, "seq-length",
                          c->n_positions, "max-position-embeddings", c->n_positions, "make-vocab-size-divisible-by",
                          divisible_by, "micro-batch-size", 1, "layernorm-epsilon", c->layer_norm_epsilon, "init-method-std",
                          c->initializer_range, "hidden-dropout", 0.1, "attention-dropout", 0.1,
                          "no-bias-gelu-fusion", c->exact_gelu, "openai-gelu", 0, "tokenizer-type",
                          "GPT2BPETokenizer", "tensor-model-parallel-size", 1, "pipeline-model-parallel-size", 1);
    json_object_set_new(a, "vocab-file", vocab_file ? json_string(vocab_file) : json_null());
    json_object_set_new(a, "merge-file", merge_file ? json_string(merge_file) : json_null());
    return a;
}

const mt_hf_tensor *mt_hf_by_mt_name(const mt_hf_tensor *t, int n, const char *mt_name)
{
    for (int i = 0; i < n; i++)
        if (!strcmp(t[i].mt, mt_name)) return &t[i];
    return NULL;
}

int mt_hf_divisible_by(int64_t rows, int64_t vocab)
{
    if (rows == vocab) return 1;
    if ((vocab + 127) / 128 * 128 == rows) return 128;
    return (int)rows;
}
