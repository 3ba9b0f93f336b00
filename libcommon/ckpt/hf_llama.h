/* hf_llama.h: Hugging Face's LlamaForCausalLM in Megatron's terms: its config.json, and the name, shape
 * and place of each of its tensors in the Megatron (legacy) tensors of mt's checkpoints. Pure functions
 * over host buffers, as hf_gpt2.h (whose mt_hf_config, mt_hf_tensor and transforms these fill).
 *
 * Mapping (spec 9; Megatron's tools/checkpoint Llama loader): embed_tokens <-> word_embeddings,
 * input_layernorm / post_attention_layernorm / norm <-> input_layernorm / post_attention_layernorm /
 * final_layernorm (RMSNorm weights), o_proj <-> dense, down_proj <-> dense_4h_to_h, lm_head <->
 * output_layer (untied; absent when tied). q_proj, k_proj and v_proj are the rows of query_key_value in
 * Megatron's grouped order: for each query group g, its heads/groups query heads, then its key head,
 * then its value head ([ng, np/ng + 2, hn]); HF's rows are head-major within each of q, k, v. Both use
 * rotate-half rotary embeddings, so no row is permuted within a head. gate_proj and up_proj are the two
 * halves of dense_h_to_4h ([gate; up], silu of the first times the second). All are [out, in] in both.
 */
#ifndef MT_CKPT_HF_LLAMA_H
#define MT_CKPT_HF_LLAMA_H

#include <jansson.h>
#include <stdint.h>

#include "ckpt/hf_gpt2.h"
#include "model/layout.h"
#include "util/err.h"

/* Reads the Llama config.json object o (model_type "llama") of path into c. Refused, naming the key:
 * architectures other than LlamaForCausalLM, rope_scaling, head_dim other than hidden_size /
 * num_attention_heads, attention_bias, mlp_bias, hidden_act other than silu, pretraining_tp other than
 * 1, a rope_theta that is not an integer (Megatron's --rotary-base is one), num_key_value_heads not
 * dividing num_attention_heads. */
int mt_hf_llama_config_read(const char *path, json_t *o, mt_hf_config *c, mt_err *e);
/* The checks Llama's config and the configs built on it (hf_moe.h) share: rope_theta (read as theta) an
 * integer, no rope_scaling, silu, head_dim hidden / heads, the key/value heads dividing the heads; sets
 * c->rope_theta. 0, or -1 with e naming the key. */
int mt_hf_llama_config_check(const char *path, json_t *o, double theta, mt_hf_config *c, mt_err *e);
/* Writes c as LlamaConfig.save_pretrained does (sorted keys, indent 2), atomically. */
int mt_hf_llama_config_write(const char *path, const mt_hf_config *c, mt_err *e);

/* Whether a is the architecture LlamaForCausalLM has: RMSNorm, rope, SwiGLU, no biases. */
int mt_hf_llama_is(const mt_model_arch *a);
mt_model_arch mt_hf_llama_arch(const mt_hf_config *c, int padded_vocab);

/* The tensors of LlamaForCausalLM with hf_rows rows of embeddings (and of lm_head), for the Megatron
 * architecture a (one tensor rank, one stage), in transformers' state-dict order. *n set; the caller
 * frees the array. NULL with e set when a is not Llama's or hf_rows exceeds the padded vocabulary. */
mt_hf_tensor *mt_hf_llama_tensors(const mt_model_arch *a, int64_t hf_rows, int *n, mt_err *e);

/* An entry of a Llama-like table: lt's tensor as HF's hf with hf_rows rows (hf_moe.c's tables too). */
void mt_hf_llama_entry(mt_hf_tensor *t, const mt_model_arch *a, const mt_layout_tensor *lt, const char *hf,
                       mt_hf_xform x, int part, int64_t hf_rows);
/* A token id key of config.json o: an integer, null (-1), or a list whose first id is kept; absent: dflt. */
int mt_hf_token_id(const char *path, json_t *o, const char *key, int dflt, int *out, mt_err *e);

/* The Megatron row of HF row r of part t (MT_HF_QKV_PART or MT_HF_FC1_PART). */
int64_t mt_hf_llama_row(const mt_hf_tensor *t, int64_t r);

/* The args of mt-train describing the model of c (hf_gpt2.h's mt_hf_megatron_args for Llama): the
 * tokenizer is HuggingFaceTokenizer with --tokenizer-model tokenizer_dir (NULL: null) and "vocab-size"
 * the model's rows. */
json_t *mt_hf_llama_megatron_args(const mt_hf_config *c, int divisible_by, const char *tokenizer_dir);

#endif
