/* hf_gpt2.h: Hugging Face's GPT2LMHeadModel in Megatron's terms: its config.json, the name, shape and
 * transform of each of its tensors against the Megatron (legacy) tensor of mt's checkpoints, and the
 * transforms themselves. Pure functions over host buffers; reading and writing files is the caller's.
 *
 * Mapping (spec 6.3, 6.4): wte <-> word_embeddings (rows: HF has the tokenizer's vocabulary, Megatron the
 * padded one; padding rows are zero on import and dropped on export), wpe <-> position_embeddings, ln_1 /
 * ln_2 / ln_f <-> input_layernorm / post_attention_layernorm / final_layernorm, c_attn <-> query_key_value
 * (HF Conv1D [h, 3h] with columns [q | k | v], each head-major; Megatron [3h, h] with rows per head
 * [np][3][hn]), c_proj / c_fc / mlp.c_proj <-> dense / dense_h_to_4h / dense_4h_to_h transposed (Conv1D
 * is [in, out]); biases copied (c_attn's reordered like its columns). lm_head is wte (tied).
 */
#ifndef MT_CKPT_HF_GPT2_H
#define MT_CKPT_HF_GPT2_H

#include <jansson.h>
#include <stdint.h>

#include "model/layout.h"
#include "util/err.h"

/* The fields of a GPT-2 config.json that shape the model, and those of a Llama one (llama set; its
 * names in hf_llama.h: num_hidden_layers is n_layer, hidden_size n_embd, num_attention_heads n_head,
 * intermediate_size n_inner, max_position_embeddings n_positions, rms_norm_eps layer_norm_epsilon). */
typedef struct mt_hf_config {
    int n_layer, n_embd, n_head, n_inner, n_positions, vocab_size;
    double layer_norm_epsilon, initializer_range;
    int exact_gelu;                 /* activation_function "gelu" (erf); else a tanh approximation */
    int bos_token_id, eos_token_id; /* -1: null (Llama) */
    const char *torch_dtype;        /* written to config.json ("float32" when NULL) */
    /* LlamaForCausalLM */
    int llama;
    int n_kv_head;                  /* num_key_value_heads */
    int64_t rope_theta;             /* an integer, as Megatron's --rotary-base */
    int tie_word_embeddings;
    /* MixtralForCausalLM, Qwen2MoeForCausalLM (llama set too: the rest is Llama's; hf_moe.h) */
    int moe;                        /* MT_HF_DENSE, MT_HF_MIXTRAL or MT_HF_QWEN2_MOE */
    int n_experts, topk, moe_inner, shared_inner; /* num_local_experts / num_experts, num_experts_per_tok,
                                       moe_intermediate_size (Mixtral: intermediate_size),
                                       shared_expert_intermediate_size */
    int norm_topk_prob;             /* Qwen2-MoE's (Mixtral's weights are always renormalized: 1) */
    int qkv_bias;                   /* Qwen2-MoE's q, k, v projections have biases */
    double aux_coef;                /* router_aux_loss_coef */
    unsigned char moe_layers[MT_MOE_MAX_LAYERS];   /* 1: an MoE layer (Qwen2-MoE's decoder_sparse_step, mlp_only_layers) */
} mt_hf_config;

enum { MT_HF_DENSE, MT_HF_MIXTRAL, MT_HF_QWEN2_MOE };

/* Reads and checks path (a config.json): model_type gpt2 (a supported activation, attention scaled by
 * 1/sqrt(head size) only, tied embeddings) or llama (hf_llama.h), sizes in range. One-line errors naming
 * the file and key, e.g. "x/config.json: model_type is 'bert'; only GPT-2 (gpt2) and Llama (llama) are
 * supported". */
int mt_hf_config_read(const char *path, mt_hf_config *c, mt_err *e);
/* Writes config.json as transformers' save_pretrained does (sorted keys, indent 2), atomically; a Llama
 * config as hf_llama.h's writer does. */
int mt_hf_config_write(const char *path, const mt_hf_config *c, mt_err *e);

/* MT_HF_QKV_PART and MT_HF_FC1_PART (Llama): the HF tensor is part `part` of the rows of the Megatron
 * one (hf_llama.h). */
typedef enum { MT_HF_COPY, MT_HF_TRANSPOSE, MT_HF_QKV_WEIGHT, MT_HF_QKV_BIAS, MT_HF_QKV_PART, MT_HF_FC1_PART } mt_hf_xform;

/* One HF tensor and the Megatron tensor it comes from. Shapes: HF's and Megatron's global ones; for the
 * word embeddings hf_shape[0] (the HF rows) may be below mt_shape[0] (padded). */
typedef struct mt_hf_tensor {
    char hf[96];                 /* without the "transformer." prefix: "wte.weight", "h.0.attn.c_attn.weight";
                                    Llama's whole names: "model.layers.0.self_attn.q_proj.weight" */
    char mt[128];                /* the Megatron name */
    mt_tensor_kind kind;
    int layer;
    mt_hf_xform x;
    int ndim;
    int64_t hf_shape[2], mt_shape[2];
    int part;                    /* MT_HF_QKV_PART: 0 q, 1 k, 2 v; MT_HF_FC1_PART: 0 gate, 1 up */
    int heads, groups;           /* attention heads and query groups (MT_HF_QKV_PART) */
    int64_t head_size;           /* MT_HF_QKV_PART: the rows of a head (of QKV's bias too) */
} mt_hf_tensor;

/* config.json helpers for the readers of each model type: an integer / number key in [lo, hi] (absent
 * or null: dflt, an error naming the key when dflt < lo for integers), a boolean that must be want
 * (absent: dflt; else the error "<path>: \"key\" is true; why"). And the writer: o (consumed) as
 * save_pretrained formats it, written atomically. */
int mt_hf_cfg_int(const char *path, json_t *o, const char *key, int lo, int hi, int dflt, int *out, mt_err *e);
int mt_hf_cfg_real(const char *path, json_t *o, const char *key, double lo, double hi, double dflt, double *out,
                   mt_err *e);
int mt_hf_cfg_bool_is(const char *path, json_t *o, const char *key, int dflt, int want, const char *why, mt_err *e);
int mt_hf_config_dump(const char *path, json_t *o, mt_err *e);

/* The tensors of GPT2LMHeadModel with hf_rows rows of word embeddings, for the Megatron architecture a
 * (one tensor rank, one stage; GPT-2 features only), in transformers' state-dict order. *n set; the
 * array is the caller's to free. NULL with e set when a is not GPT-2 or hf_rows exceeds the padded
 * vocabulary. */
mt_hf_tensor *mt_hf_tensors(const mt_model_arch *a, int64_t hf_rows, int *n, mt_err *e);
/* An entry of the table for layout tensor lt and HF name hf: names, kind, layer, transform and mt's shape
 * (the HF shape and the rest are the caller's). */
void mt_hf_entry_init(mt_hf_tensor *t, const mt_layout_tensor *lt, const char *hf, mt_hf_xform x);
/* 0 when an HF model's hf_rows vocabulary rows fit a's padded vocabulary (1 .. padded), else -1 with e set. */
int mt_hf_check_rows(const mt_model_arch *a, int64_t hf_rows, mt_err *e);

/* Megatron -> HF: src in mt_shape, dst in hf_shape. num_heads for the QKV reorder. */
void mt_hf_export(const mt_hf_tensor *t, int num_heads, const float *src, float *dst);
/* HF -> Megatron: src in hf_shape, dst in mt_shape (rows beyond the HF ones set to 0). The parts of a
 * Megatron tensor (MT_HF_*_PART) each write their rows of dst. */
void mt_hf_import(const mt_hf_tensor *t, int num_heads, const float *src, float *dst);

/* The (first) entry whose Megatron name is mt_name, or NULL. */
const mt_hf_tensor *mt_hf_by_mt_name(const mt_hf_tensor *t, int n, const char *mt_name);

/* The args object of mt-train (Megatron flag names without "--") describing the model of c with the given
 * tokenizer files (NULL: null): what a checkpoint converted from c records in its meta.json. The tokenizer
 * is GPT2BPETokenizer of vocab_file and merge_file, except for a Llama model given tokenizer_dir: then
 * HuggingFaceTokenizer with that directory as --tokenizer-model (tokenizer_dir is unused for GPT-2). */
json_t *mt_hf_megatron_args(const mt_hf_config *c, int divisible_by, const char *tokenizer_dir, const char *vocab_file,
                            const char *merge_file);

/* The --make-vocab-size-divisible-by that pads a tokenizer of vocab tokens to exactly the model's rows
 * (rows >= vocab): 1 when they are equal, so that no padding row joins the softmax (an HF model has none:
 * zero rows would each add exp(0) to the normalizer of logits that are mostly far below 0). */
int mt_hf_divisible_by(int64_t rows, int64_t vocab);

/* The transformers class a Megatron architecture converts to ("GPT2LMHeadModel", "LlamaForCausalLM",
 * "MixtralForCausalLM", "Qwen2MoeForCausalLM"; "?" for none). */
const char *mt_hf_model_class(const mt_model_arch *a);
/* The class of an HF config. */
const char *mt_hf_config_class(const mt_hf_config *c);

/* The architecture of an HF config with the given padded vocabulary. */
mt_model_arch mt_hf_arch(const mt_hf_config *c, int padded_vocab);

#endif
