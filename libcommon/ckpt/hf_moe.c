/* hf_moe.c: Mixtral's and Qwen2-MoE's Hugging Face config and tensor names against Megatron's (see
 * hf_moe.h). */
#include "ckpt/hf_moe.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/hf_llama.h"
#include "kernels.h"

/* ---- config.json ---- */

/* A boolean key (absent or null: dflt). */
static int cfg_bool(const char *path, json_t *o, const char *key, int dflt, int *out, mt_err *e)
{
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) *out = dflt;
    else if (json_is_boolean(v)) *out = json_is_true(v);
    else return mt_err_set(e, "%s: \"%s\" is not a boolean", path, key);
    return 0;
}

int mt_hf_moe_config_read(const char *path, json_t *o, const char *model_type, mt_hf_config *c, mt_err *e)
{
    memset(c, 0, sizeof *c);
    int mix = !strcmp(model_type, "mixtral");
    const char *want = mix ? "MixtralForCausalLM" : "Qwen2MoeForCausalLM";
    c->llama = 1;
    c->moe = mix ? MT_HF_MIXTRAL : MT_HF_QWEN2_MOE;
    json_t *arch = json_object_get(o, "architectures");
    if (json_is_array(arch)) {
        size_t i;
        json_t *a;
        json_array_foreach(arch, i, a)
        {
            const char *s = json_string_value(a);
            if (!s || strcmp(s, want))
                return mt_err_set(e, "%s: architectures names '%s'; a %s config is %s", path, s ? s : "?", model_type, want);
        }
    }
    double theta;
    int dense_inner = 0, sliding = 0, step = 1;
    if (mt_hf_cfg_int(path, o, "num_hidden_layers", 1, MT_MOE_MAX_LAYERS, 32, &c->n_layer, e) ||
        mt_hf_cfg_int(path, o, "hidden_size", 1, 1 << 20, 4096, &c->n_embd, e) ||
        mt_hf_cfg_int(path, o, "num_attention_heads", 1, 1 << 16, 32, &c->n_head, e) ||
        mt_hf_cfg_int(path, o, "num_key_value_heads", 1, 1 << 16, mix ? 8 : c->n_head, &c->n_kv_head, e) ||
        mt_hf_cfg_int(path, o, "intermediate_size", 1, 1 << 24, mix ? 14336 : 5632, &dense_inner, e) ||
        mt_hf_cfg_int(path, o, "max_position_embeddings", 1, 1 << 24, mix ? 131072 : 32768, &c->n_positions, e) ||
        mt_hf_cfg_int(path, o, "vocab_size", 1, 1 << 30, mix ? 32000 : 151936, &c->vocab_size, e) ||
        mt_hf_token_id(path, o, "bos_token_id", mix ? 1 : -1, &c->bos_token_id, e) ||
        mt_hf_token_id(path, o, "eos_token_id", mix ? 2 : -1, &c->eos_token_id, e) ||
        mt_hf_cfg_real(path, o, "rms_norm_eps", 1e-30, 1, mix ? 1e-5 : 1e-6, &c->layer_norm_epsilon, e) ||
        mt_hf_cfg_real(path, o, "initializer_range", 0, 1e6, 0.02, &c->initializer_range, e) ||
        mt_hf_cfg_real(path, o, "rope_theta", 1, 1e15, mix ? 1e6 : 10000, &theta, e) ||
        mt_hf_cfg_int(path, o, mix ? "num_local_experts" : "num_experts", 1, MTK_MOE_MAX_EXPERTS, mix ? 8 : 60,
                      &c->n_experts, e) ||
        mt_hf_cfg_int(path, o, "num_experts_per_tok", 1, MTK_MOE_MAX_EXPERTS, mix ? 2 : 4, &c->topk, e) ||
        mt_hf_cfg_real(path, o, "router_aux_loss_coef", 0, 1e6, 0.001, &c->aux_coef, e) ||
        cfg_bool(path, o, "tie_word_embeddings", 0, &c->tie_word_embeddings, e))
        return -1;
    if (c->topk > c->n_experts)
        return mt_err_set(e, "%s: \"num_experts_per_tok\" %d exceeds the experts (%d)", path, c->topk, c->n_experts);
    if (mix) {
        c->moe_inner = dense_inner;
        c->n_inner = dense_inner;
        c->norm_topk_prob = 1;
        double jitter;
        if (mt_hf_cfg_real(path, o, "router_jitter_noise", 0, 1, 0, &jitter, e)) return -1;
        if (jitter != 0) return mt_err_set(e, "%s: \"router_jitter_noise\" is %g; only 0 is supported", path, jitter);
        json_t *sw = json_object_get(o, "sliding_window");
        if (sw && !json_is_null(sw) && !(json_is_integer(sw) && json_integer_value(sw) >= c->n_positions))
            return mt_err_set(e, "%s: \"sliding_window\" is set; sliding-window attention is not supported", path);
        memset(c->moe_layers, 1, (size_t)c->n_layer);
    } else {
        c->n_inner = dense_inner;
        c->qkv_bias = 1;
        if (mt_hf_cfg_int(path, o, "moe_intermediate_size", 1, 1 << 24, 1408, &c->moe_inner, e) ||
            mt_hf_cfg_int(path, o, "shared_expert_intermediate_size", 1, 1 << 24, 5632, &c->shared_inner, e) ||
            mt_hf_cfg_int(path, o, "decoder_sparse_step", 1, 1 << 20, 1, &step, e) ||
            cfg_bool(path, o, "norm_topk_prob", 0, &c->norm_topk_prob, e) ||
            cfg_bool(path, o, "use_sliding_window", 0, &sliding, e))
            return -1;
        if (sliding) return mt_err_set(e, "%s: \"use_sliding_window\" is true; sliding-window attention is not supported", path);
        for (int l = 0; l < c->n_layer; l++) c->moe_layers[l] = (l + 1) % step == 0;
        json_t *only = json_object_get(o, "mlp_only_layers");
        if (only && !json_is_null(only) && !json_is_array(only))
            return mt_err_set(e, "%s: \"mlp_only_layers\" is not a list", path);
        size_t i;
        json_t *v;
        json_array_foreach(only, i, v)
        {
            if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) >= c->n_layer)
                return mt_err_set(e, "%s: \"mlp_only_layers\" holds %s, not a layer index", path,
                                  json_is_integer(v) ? "an index out of range" : "a non-integer");
            c->moe_layers[json_integer_value(v)] = 0;
        }
    }
    return mt_hf_llama_config_check(path, o, theta, c, e);
}

int mt_hf_moe_config_write(const char *path, const mt_hf_config *c, mt_err *e)
{
    int mix = c->moe == MT_HF_MIXTRAL;
    json_t *o = json_pack("{s:[s],s:f,s:s,s:i,s:f,s:i,s:i,s:i,s:i,s:f,s:n,s:f,s:b,s:s,s:b,s:i,s:b,s:f}",
                          "architectures", mix ? "MixtralForCausalLM" : "Qwen2MoeForCausalLM", "attention_dropout", 0.0,
                          "hidden_act", "silu", "hidden_size", c->n_embd, "initializer_range", c->initializer_range,
                          "max_position_embeddings", c->n_positions, "num_attention_heads", c->n_head,
                          "num_hidden_layers", c->n_layer, "num_key_value_heads", c->n_kv_head, "rms_norm_eps",
                          c->layer_norm_epsilon, "rope_scaling", "rope_theta", (double)c->rope_theta,
                          "tie_word_embeddings", c->tie_word_embeddings, "torch_dtype",
                          c->torch_dtype ? c->torch_dtype : "float32", "use_cache", 1, "vocab_size", c->vocab_size,
                          "output_router_logits", 0, "router_aux_loss_coef", c->aux_coef);
    if (!o) return mt_hf_config_dump(path, NULL, e);
    json_object_set_new(o, "model_type", json_string(mix ? "mixtral" : "qwen2_moe"));
    json_object_set_new(o, "num_experts_per_tok", json_integer(c->topk));
    json_object_set_new(o, "bos_token_id", c->bos_token_id >= 0 ? json_integer(c->bos_token_id) : json_null());
    json_object_set_new(o, "eos_token_id", c->eos_token_id >= 0 ? json_integer(c->eos_token_id) : json_null());
    if (mix) {
        json_object_set_new(o, "intermediate_size", json_integer(c->moe_inner));
        json_object_set_new(o, "num_local_experts", json_integer(c->n_experts));
        json_object_set_new(o, "router_jitter_noise", json_real(0.0));
        json_object_set_new(o, "sliding_window", json_null());
    } else {
        json_t *only = json_array();
        for (int l = 0; l < c->n_layer; l++)
            if (!c->moe_layers[l]) json_array_append_new(only, json_integer(l));
        json_object_set_new(o, "intermediate_size", json_integer(c->n_inner));
        json_object_set_new(o, "moe_intermediate_size", json_integer(c->moe_inner));
        json_object_set_new(o, "shared_expert_intermediate_size", json_integer(c->shared_inner));
        json_object_set_new(o, "num_experts", json_integer(c->n_experts));
        json_object_set_new(o, "decoder_sparse_step", json_integer(1));
        json_object_set_new(o, "mlp_only_layers", only);
        json_object_set_new(o, "norm_topk_prob", json_boolean(c->norm_topk_prob));
        json_object_set_new(o, "use_sliding_window", json_false());
        json_object_set_new(o, "sliding_window", json_null());
        json_object_set_new(o, "max_window_layers", json_integer(28));   /* unused without the sliding window */
    }
    return mt_hf_config_dump(path, o, e);
}

mt_model_arch mt_hf_moe_arch(const mt_hf_config *c, int padded_vocab)
{
    mt_model_arch a = mt_hf_llama_arch(c, padded_vocab);
    a.num_experts = c->n_experts;
    a.moe_ffn_hidden_size = c->moe_inner;
    a.add_qkv_bias = c->qkv_bias;
    a.shared_ffn = c->moe == MT_HF_QWEN2_MOE ? c->shared_inner : 0;
    a.shared_gate = c->moe == MT_HF_QWEN2_MOE;
    memcpy(a.moe_layers, c->moe_layers, sizeof a.moe_layers);
    return a;
}

int mt_hf_moe_kind(const mt_model_arch *a, mt_err *e)
{
    if (!a->num_experts || !mt_hf_llama_is(a))
        return mt_err_set(e, "not a mixture of experts of the Llama kind (RMSNorm, rope, SwiGLU, no linear biases)");
    int all = 1;
    for (int l = 0; l < a->num_layers; l++) all &= a->moe_layers[l] != 0;
    if (!a->shared_ffn && !a->add_qkv_bias && all) return MT_HF_MIXTRAL;
    if (a->shared_ffn && a->shared_gate && a->add_qkv_bias) return MT_HF_QWEN2_MOE;
    return mt_err_set(e, "MixtralForCausalLM has experts in every layer and neither a shared expert nor QKV biases; "
                         "Qwen2MoeForCausalLM has a shared expert with its gate (--moe-shared-expert-gate) and QKV "
                         "biases (--add-qkv-bias): this model is neither");
}

/* ---- the tensor table ---- */

mt_hf_tensor *mt_hf_moe_tensors(const mt_model_arch *a, int64_t hf_rows, int *n, mt_err *e)
{
    int kind = mt_hf_moe_kind(a, e);
    if (kind < 0 || mt_hf_check_rows(a, hf_rows, e)) return NULL;
    mt_layout l;
    mt_layout_part one = {0, 1, 0, 1, 1, 0, 1, 0, 0};
    if (mt_layout_build(a, &one, &l, e)) return NULL;
    int64_t h = a->hidden_size, hn = h / a->num_heads, E = a->num_experts;
    int64_t q = a->num_heads * hn, kv = a->num_query_groups * hn;
    int cap = 3 + a->num_layers * (int)(16 + 3 * E), k = 0;
    mt_hf_tensor *t = mt_xcalloc((size_t)cap, sizeof *t);
    char name[96];
#define ENTRY(lt, x, part, rows, ...) \
    (snprintf(name, sizeof name, __VA_ARGS__), mt_hf_llama_entry(&t[k++], a, lt, name, x, part, rows))
    ENTRY(mt_layout_get(&l, -1, MT_T_WORD_EMB), MT_HF_COPY, 0, hf_rows, "model.embed_tokens.weight");
    const char *mlp = kind == MT_HF_MIXTRAL ? "block_sparse_moe" : "mlp";
    for (int i = 0; i < a->num_layers; i++) {
        const mt_layout_tensor *qkv = mt_layout_get(&l, i, MT_T_QKV_W), *qb = mt_layout_get(&l, i, MT_T_QKV_B);
        static const char *const part[3] = {"q", "k", "v"};
        for (int p = 0; p < 3; p++) {
            ENTRY(qkv, MT_HF_QKV_PART, p, p ? kv : q, "model.layers.%d.self_attn.%s_proj.weight", i, part[p]);
            if (qb) ENTRY(qb, MT_HF_QKV_PART, p, p ? kv : q, "model.layers.%d.self_attn.%s_proj.bias", i, part[p]);
        }
        ENTRY(mt_layout_get(&l, i, MT_T_PROJ_W), MT_HF_COPY, 0, h, "model.layers.%d.self_attn.o_proj.weight", i);
        if (!mt_arch_is_moe(a, i)) {   /* a dense layer of Qwen2-MoE */
            const mt_layout_tensor *f1 = mt_layout_get(&l, i, MT_T_FC1_W);
            int64_t f = a->ffn_hidden_size;
            ENTRY(f1, MT_HF_FC1_PART, 0, f, "model.layers.%d.mlp.gate_proj.weight", i);
            ENTRY(f1, MT_HF_FC1_PART, 1, f, "model.layers.%d.mlp.up_proj.weight", i);
            ENTRY(mt_layout_get(&l, i, MT_T_FC2_W), MT_HF_COPY, 0, h, "model.layers.%d.mlp.down_proj.weight", i);
        } else {
            int64_t f = a->moe_ffn_hidden_size;
            ENTRY(mt_layout_get(&l, i, MT_T_ROUTER_W), MT_HF_COPY, 0, E, "model.layers.%d.%s.gate.weight", i, mlp);
            for (int j = 0; j < E; j++) {
                const mt_layout_tensor *f1 = mt_layout_get_expert(&l, i, MT_T_EXPERT_FC1_W, j);
                const mt_layout_tensor *f2 = mt_layout_get_expert(&l, i, MT_T_EXPERT_FC2_W, j);
                if (kind == MT_HF_MIXTRAL) {
                    ENTRY(f1, MT_HF_FC1_PART, 0, f, "model.layers.%d.block_sparse_moe.experts.%d.w1.weight", i, j);
                    ENTRY(f2, MT_HF_COPY, 0, h, "model.layers.%d.block_sparse_moe.experts.%d.w2.weight", i, j);
                    ENTRY(f1, MT_HF_FC1_PART, 1, f, "model.layers.%d.block_sparse_moe.experts.%d.w3.weight", i, j);
                } else {
                    ENTRY(f1, MT_HF_FC1_PART, 0, f, "model.layers.%d.mlp.experts.%d.gate_proj.weight", i, j);
                    ENTRY(f1, MT_HF_FC1_PART, 1, f, "model.layers.%d.mlp.experts.%d.up_proj.weight", i, j);
                    ENTRY(f2, MT_HF_COPY, 0, h, "model.layers.%d.mlp.experts.%d.down_proj.weight", i, j);
                }
            }
            if (kind == MT_HF_QWEN2_MOE) {
                const mt_layout_tensor *s1 = mt_layout_get(&l, i, MT_T_SHARED_FC1_W);
                int64_t fs = a->shared_ffn;
                ENTRY(s1, MT_HF_FC1_PART, 0, fs, "model.layers.%d.mlp.shared_expert.gate_proj.weight", i);
                ENTRY(s1, MT_HF_FC1_PART, 1, fs, "model.layers.%d.mlp.shared_expert.up_proj.weight", i);
                ENTRY(mt_layout_get(&l, i, MT_T_SHARED_FC2_W), MT_HF_COPY, 0, h,
                      "model.layers.%d.mlp.shared_expert.down_proj.weight", i);
                ENTRY(mt_layout_get(&l, i, MT_T_SHARED_GATE_W), MT_HF_COPY, 0, 1,
                      "model.layers.%d.mlp.shared_expert_gate.weight", i);
            }
        }
        ENTRY(mt_layout_get(&l, i, MT_T_NORM1_W), MT_HF_COPY, 0, h, "model.layers.%d.input_layernorm.weight", i);
        ENTRY(mt_layout_get(&l, i, MT_T_NORM2_W), MT_HF_COPY, 0, h, "model.layers.%d.post_attention_layernorm.weight", i);
    }
    ENTRY(mt_layout_get(&l, -1, MT_T_FINAL_NORM_W), MT_HF_COPY, 0, h, "model.norm.weight");
    if (!a->tied_embeddings) ENTRY(mt_layout_get(&l, -1, MT_T_OUTPUT), MT_HF_COPY, 0, hf_rows, "lm_head.weight");
#undef ENTRY
    mt_layout_free(&l);
    *n = k;
    return t;
}

void mt_hf_moe_megatron_args(const mt_hf_config *c, json_t *a)
{
    char list[2 * MT_MOE_MAX_LAYERS + 4], *p = list;
    *p++ = '[';
    for (int l = 0; l < c->n_layer; l++) p += sprintf(p, "%s%d", l ? "," : "", c->moe_layers[l] ? 1 : 0);
    *p++ = ']', *p = 0;
    json_object_set_new(a, "num-experts", json_integer(c->n_experts));
    json_object_set_new(a, "moe-router-topk", json_integer(c->topk));
    json_object_set_new(a, "moe-ffn-hidden-size", json_integer(c->moe_inner));
    json_object_set_new(a, "moe-layer-freq", json_string(list));
    json_object_set_new(a, "moe-router-pre-softmax", json_boolean(!c->norm_topk_prob));
    json_object_set_new(a, "moe-aux-loss-coeff", json_real(c->aux_coef));
    json_object_set_new(a, "add-qkv-bias", json_boolean(c->qkv_bias));
    if (c->moe == MT_HF_QWEN2_MOE) {
        json_object_set_new(a, "moe-shared-expert-intermediate-size", json_integer(c->shared_inner));
        json_object_set_new(a, "moe-shared-expert-gate", json_true());
    }
}
