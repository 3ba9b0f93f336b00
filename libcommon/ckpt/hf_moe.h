/* hf_moe.h: Hugging Face's mixtures of experts in Megatron's terms: MixtralForCausalLM and
 * Qwen2MoeForCausalLM, their config.json and the name and place of each tensor in mt's checkpoints. Both
 * are Llama models (hf_llama.h: its attention, norms, embeddings and mapping of q/k/v and gate/up) whose
 * MLP is an MoE layer:
 *   Mixtral:   block_sparse_moe.gate <-> mlp.router, block_sparse_moe.experts.j.w1 / w3 <-> the gate / up
 *              halves of mlp.experts.local_experts.j.dense_h_to_4h, w2 <-> its dense_4h_to_h; every layer;
 *              the routing weights are the softmax over the top-k logits (Megatron's default).
 *   Qwen2-MoE: mlp.gate <-> mlp.router, mlp.experts.j.{gate,up,down}_proj <-> the experts as above,
 *              mlp.shared_expert.{gate,up,down}_proj <-> mlp.shared_experts, mlp.shared_expert_gate <->
 *              mlp.shared_experts.gate_weight; q/k/v biases <-> query_key_value's bias (--add-qkv-bias);
 *              the layers of mlp_only_layers, or not a multiple of decoder_sparse_step, are dense
 *              (--moe-layer-freq as a list); norm_topk_prob false is --moe-router-pre-softmax (the softmax
 *              over all experts taken at the top k), true Megatron's default.
 * Pure functions over host buffers, as hf_gpt2.h. */
#ifndef MT_CKPT_HF_MOE_H
#define MT_CKPT_HF_MOE_H

#include <jansson.h>

#include "ckpt/hf_gpt2.h"
#include "model/layout.h"
#include "util/err.h"

/* Reads the config.json object o of path, model_type "mixtral" or "qwen2_moe", into c (c->llama and
 * c->moe set). Refused, naming the key: another architecture, rope_scaling, a sliding window in use,
 * router jitter, hidden_act other than silu, head_dim other than hidden / heads, sizes out of range. */
int mt_hf_moe_config_read(const char *path, json_t *o, const char *model_type, mt_hf_config *c, mt_err *e);
/* Writes c as transformers' save_pretrained does (sorted keys, indent 2), atomically. */
int mt_hf_moe_config_write(const char *path, const mt_hf_config *c, mt_err *e);
mt_model_arch mt_hf_moe_arch(const mt_hf_config *c, int padded_vocab);
/* Which of the two a Megatron architecture converts to (MT_HF_MIXTRAL or MT_HF_QWEN2_MOE), or -1 with e
 * set when it is neither: Mixtral has no shared expert, no QKV bias and experts in every layer; Qwen2-MoE
 * a shared expert with its gate and QKV biases. */
int mt_hf_moe_kind(const mt_model_arch *a, mt_err *e);
/* The tensors of the model, in transformers' state-dict order (hf_llama.h's conventions). */
mt_hf_tensor *mt_hf_moe_tensors(const mt_model_arch *a, int64_t hf_rows, int *n, mt_err *e);
/* The MoE flags of c added to args (hf_llama.h's Megatron args of the Llama part). */
void mt_hf_moe_megatron_args(const mt_hf_config *c, json_t *args);

#endif
