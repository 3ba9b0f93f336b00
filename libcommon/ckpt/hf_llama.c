/* hf_llama.c: Llama's Hugging Face config and tensor names against Megatron's (see hf_llama.h). */
#include "ckpt/hf_llama.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- config.json ---- */

/* A token id key: an integer, null (-1), or a list whose first id is kept; absent: dflt. */
int mt_hf_token_id(const char *path, json_t *o, const char *key, int dflt, int *out, mt_err *e)
{
    json_t *v = json_object_get(o, key);
    if (json_is_array(v)) v = json_array_get(v, 0);
    if (!json_object_get(o, key)) *out = dflt;
    else if (!v || json_is_null(v)) *out = -1;
    else if (json_is_integer(v) && json_integer_value(v) >= 0 && json_integer_value(v) < (1 << 30))
        *out = (int)json_integer_value(v);
    else return mt_err_set(e, "%s: \"%s\" is not a token id", path, key);
    return 0;
}

int mt_hf_llama_config_read(const char *path, json_t *o, mt_hf_config *c, mt_err *e)
{
    memset(c, 0, sizeof *c);
    c->llama = 1;
    json_t *arch = json_object_get(o, "architectures");
    if (json_is_array(arch)) {
        size_t i;
        json_t *a;
        json_array_foreach(arch, i, a)
        {
            const char *s = json_string_value(a);
            if (!s || strcmp(s, "LlamaForCausalLM"))
                return mt_err_set(e, "%s: architectures names '%s'; only LlamaForCausalLM is supported", path, s ? s : "?");
        }
    }
    double theta, tp;
    if (mt_hf_cfg_int(path, o, "num_hidden_layers", 1, 100000, 32, &c->n_layer, e) ||
        mt_hf_cfg_int(path, o, "hidden_size", 1, 1 << 20, 4096, &c->n_embd, e) ||
        mt_hf_cfg_int(path, o, "num_attention_heads", 1, 1 << 16, 32, &c->n_head, e) ||
        mt_hf_cfg_int(path, o, "num_key_value_heads", 1, 1 << 16, c->n_head, &c->n_kv_head, e) ||
        mt_hf_cfg_int(path, o, "intermediate_size", 1, 1 << 24, 11008, &c->n_inner, e) ||
        mt_hf_cfg_int(path, o, "max_position_embeddings", 1, 1 << 24, 2048, &c->n_positions, e) ||
        mt_hf_cfg_int(path, o, "vocab_size", 1, 1 << 30, 32000, &c->vocab_size, e) ||
        mt_hf_token_id(path, o, "bos_token_id", 1, &c->bos_token_id, e) || mt_hf_token_id(path, o, "eos_token_id", 2, &c->eos_token_id, e) ||
        mt_hf_cfg_real(path, o, "rms_norm_eps", 1e-30, 1, 1e-6, &c->layer_norm_epsilon, e) ||
        mt_hf_cfg_real(path, o, "initializer_range", 0, 1e6, 0.02, &c->initializer_range, e) ||
        mt_hf_cfg_real(path, o, "rope_theta", 1, 1e15, 10000, &theta, e) ||
        mt_hf_cfg_real(path, o, "pretraining_tp", 1, 1, 1, &tp, e) ||
        mt_hf_cfg_bool_is(path, o, "attention_bias", 0, 0, "mt's Llama has no biases (--disable-bias-linear)", e) ||
        mt_hf_cfg_bool_is(path, o, "mlp_bias", 0, 0, "mt's Llama has no biases (--disable-bias-linear)", e))
        return -1;
    json_t *tie = json_object_get(o, "tie_word_embeddings");
    if (tie && !json_is_null(tie) && !json_is_boolean(tie))
        return mt_err_set(e, "%s: \"tie_word_embeddings\" is not a boolean", path);
    c->tie_word_embeddings = json_is_true(tie);   /* LlamaConfig's default: false */
    return mt_hf_llama_config_check(path, o, theta, c, e);
}

int mt_hf_llama_config_check(const char *path, json_t *o, double theta, mt_hf_config *c, mt_err *e)
{
    if (theta != floor(theta))
        return mt_err_set(e, "%s: \"rope_theta\" %g is not an integer (Megatron's --rotary-base is one)", path, theta);
    c->rope_theta = (int64_t)theta;
    json_t *scaling = json_object_get(o, "rope_scaling");
    if (scaling && !json_is_null(scaling))
        return mt_err_set(e, "%s: \"rope_scaling\" is set; rope frequency scaling is not supported", path);
    const char *act = json_string_value(json_object_get(o, "hidden_act"));
    if (json_object_get(o, "hidden_act") && (!act || strcmp(act, "silu")))
        return mt_err_set(e, "%s: \"hidden_act\" is %s%s%s; only silu (SwiGLU) is supported", path, act ? "'" : "",
                          act ? act : "not a string", act ? "'" : "");
    if (c->n_embd % c->n_head)
        return mt_err_set(e, "%s: \"hidden_size\" %d is not divisible by \"num_attention_heads\" %d", path, c->n_embd,
                          c->n_head);
    json_t *hd = json_object_get(o, "head_dim");
    if (hd && !json_is_null(hd) && (!json_is_integer(hd) || json_integer_value(hd) != c->n_embd / c->n_head))
        return mt_err_set(e, "%s: \"head_dim\" is not hidden_size / num_attention_heads (%d); only that is supported",
                          path, c->n_embd / c->n_head);
    if (c->n_head % c->n_kv_head)
        return mt_err_set(e, "%s: \"num_key_value_heads\" %d does not divide \"num_attention_heads\" %d", path,
                          c->n_kv_head, c->n_head);
    return 0;
}

int mt_hf_llama_config_write(const char *path, const mt_hf_config *c, mt_err *e)
{
    json_t *o = json_pack("{s:[s],s:b,s:f,s:s,s:i,s:f,s:i,s:i,s:b,s:s,s:i,s:i,s:i,s:i,s:f,s:n,s:f,s:b,s:s,s:b,s:i}",
                          "architectures", "LlamaForCausalLM", "attention_bias", 0, "attention_dropout", 0.0,
                          "hidden_act", "silu", "hidden_size", c->n_embd, "initializer_range", c->initializer_range,
                          "intermediate_size", c->n_inner, "max_position_embeddings", c->n_positions, "mlp_bias", 0,
                          "model_type", "llama", "num_attention_heads", c->n_head, "num_hidden_layers", c->n_layer,
                          "num_key_value_heads", c->n_kv_head, "pretraining_tp", 1, "rms_norm_eps",
                          c->layer_norm_epsilon, "rope_scaling", "rope_theta", (double)c->rope_theta,
                          "tie_word_embeddings", c->tie_word_embeddings, "torch_dtype",
                          c->torch_dtype ? c->torch_dtype : "float32", "use_cache", 1, "vocab_size", c->vocab_size);
    if (o) {
        json_object_set_new(o, "bos_token_id", c->bos_token_id >= 0 ? json_integer(c->bos_token_id) : json_null());
        json_object_set_new(o, "eos_token_id", c->eos_token_id >= 0 ? json_integer(c->eos_token_id) : json_null());
    }
    return mt_hf_config_dump(path, o, e);
}

int mt_hf_llama_is(const mt_model_arch *a)
{
    return a->norm == MT_NORM_RMSNORM && a->position == MT_POS_ROPE && a->mlp == MT_MLP_SWIGLU && !a->add_bias_linear;
}

mt_model_arch mt_hf_llama_arch(const mt_hf_config *c, int padded_vocab)
{
    return (mt_model_arch){
        .num_layers = c->n_layer, .hidden_size = c->n_embd, .num_heads = c->n_head, .num_query_groups = c->n_kv_head,
        .ffn_hidden_size = c->n_inner, .max_position_embeddings = c->n_positions, .padded_vocab_size = padded_vocab,
        .norm = MT_NORM_RMSNORM, .position = MT_POS_ROPE, .mlp = MT_MLP_SWIGLU, .add_bias_linear = 0,
        .tied_embeddings = c->tie_word_embeddings,
    };
}

/* ---- the tensor table ---- */

void mt_hf_llama_entry(mt_hf_tensor *t, const mt_model_arch *a, const mt_layout_tensor *lt, const char *hf,
                       mt_hf_xform x, int part, int64_t hf_rows)
{
    mt_hf_entry_init(t, lt, hf, x);
    t->hf_shape[0] = hf_rows;
    t->hf_shape[1] = lt->global_shape[1];
    t->part = part;
    t->heads = a->num_heads;
    t->groups = a->num_query_groups;
    t->head_size = a->hidden_size / a->num_heads;
}
#define entry mt_hf_llama_entry

mt_hf_tensor *mt_hf_llama_tensors(const mt_model_arch *a, int64_t hf_rows, int *n, mt_err *e)
{
    if (!mt_hf_llama_is(a) || a->num_experts || a->add_qkv_bias) {
        mt_err_set(e, "only Llama models (RMSNorm, rope, SwiGLU, no biases, no experts) convert to LlamaForCausalLM");
        return NULL;
    }
    if (mt_hf_check_rows(a, hf_rows, e)) return NULL;
    mt_layout l;
    mt_layout_part one = {0, 1, 0, 1, 1, 0, 1, 0, 0};
    if (mt_layout_build(a, &one, &l, e)) return NULL;
    int64_t h = a->hidden_size, hn = h / a->num_heads, f = a->ffn_hidden_size;
    int64_t q = a->num_heads * hn, kv = a->num_query_groups * hn;
    int cap = 3 + 9 * a->num_layers, k = 0;
    mt_hf_tensor *t = mt_xcalloc((size_t)cap, sizeof *t);
    entry(&t[k++], a, mt_layout_get(&l, -1, MT_T_WORD_EMB), "model.embed_tokens.weight", MT_HF_COPY, 0, hf_rows);
    static const struct {
        const char *hf;
        mt_tensor_kind kind;
        mt_hf_xform x;
        int part;
    } per_layer[] = {
        {"self_attn.q_proj.weight", MT_T_QKV_W, MT_HF_QKV_PART, 0},
        {"self_attn.k_proj.weight", MT_T_QKV_W, MT_HF_QKV_PART, 1},
        {"self_attn.v_proj.weight", MT_T_QKV_W, MT_HF_QKV_PART, 2},
        {"self_attn.o_proj.weight", MT_T_PROJ_W, MT_HF_COPY, 0},
        {"mlp.gate_proj.weight", MT_T_FC1_W, MT_HF_FC1_PART, 0},
        {"mlp.up_proj.weight", MT_T_FC1_W, MT_HF_FC1_PART, 1},
        {"mlp.down_proj.weight", MT_T_FC2_W, MT_HF_COPY, 0},
        {"input_layernorm.weight", MT_T_NORM1_W, MT_HF_COPY, 0},
        {"post_attention_layernorm.weight", MT_T_NORM2_W, MT_HF_COPY, 0},
    };
    for (int layer = 0; layer < a->num_layers; layer++)
        for (size_t i = 0; i < sizeof per_layer / sizeof *per_layer; i++) {
            const mt_layout_tensor *lt = mt_layout_get(&l, layer, per_layer[i].kind);
            int64_t rows = lt->global_shape[0];
            if (per_layer[i].x == MT_HF_QKV_PART) rows = per_layer[i].part == 0 ? q : kv;
            if (per_layer[i].x == MT_HF_FC1_PART) rows = f;
            char name[96];
            snprintf(name, sizeof name, "model.layers.%d.%s", layer, per_layer[i].hf);
            entry(&t[k++], a, lt, name, per_layer[i].x, per_layer[i].part, rows);
        }
    entry(&t[k++], a, mt_layout_get(&l, -1, MT_T_FINAL_NORM_W), "model.norm.weight", MT_HF_COPY, 0, h);
    if (!a->tied_embeddings)
        entry(&t[k++], a, mt_layout_get(&l, -1, MT_T_OUTPUT), "lm_head.weight", MT_HF_COPY, 0, hf_rows);
    mt_layout_free(&l);
    *n = k;
    return t;
}

int64_t mt_hf_llama_row(const mt_hf_tensor *t, int64_t r)
{
    if (t->x == MT_HF_FC1_PART) return t->part * t->hf_shape[0] + r;   /* [gate; up] */
    int64_t hn = t->head_size, per = t->heads / t->groups;   /* query heads per group */
    int64_t head = r / hn, d = r % hn;
    if (t->part == 0) return ((head / per) * (per + 2) + head % per) * hn + d;   /* query head of group head/per */
    return (head * (per + 2) + per + (t->part - 1)) * hn + d;                    /* the group's key or value head */
}

json_t *mt_hf_llama_megatron_args(const mt_hf_config *c, int divisible_by, const char *tokenizer_dir)
{
    json_t *a = json_pack("{s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:f,s:f,s:f,s:f,s:f,s:s,s:s,s:I,s:f,s:b,s:b,s:i,s:b,s:b,"
                          "s:s,s:i,s:i,s:i}",
                          "num-layers", c->n_layer, "hidden-size", c->n_embd, "num-attention-heads", c->n_head,
                          "ffn-hidden-size", c->n_inner, "kv-channels", c->n_embd / c->n_head, "seq-length",
                          c->n_positions, "max-position-embeddings", c->n_positions, "make-vocab-size-divisible-by",
                          divisible_by, "micro-batch-size", 1, "norm-epsilon", c->layer_norm_epsilon,
                          "layernorm-epsilon", c->layer_norm_epsilon, "init-method-std", c->initializer_range,
                          "hidden-dropout", 0.0, "attention-dropout", 0.0, "normalization", "RMSNorm",
                          "position-embedding-type", "rope", "rotary-base", (json_int_t)c->rope_theta, "rotary-percent",
                          1.0, "swiglu", 1, "group-query-attention", c->n_kv_head != c->n_head, "num-query-groups",
                          c->n_kv_head, "untie-embeddings-and-output-weights", !c->tie_word_embeddings,
                          "disable-bias-linear", 1, "tokenizer-type", "HuggingFaceTokenizer", "vocab-size",
                          c->vocab_size, "tensor-model-parallel-size", 1, "pipeline-model-parallel-size", 1);
    if (a) json_object_set_new(a, "tokenizer-model", tokenizer_dir ? json_string(tokenizer_dir) : json_null());
    return a;
}
