/* model_config.c: the model config that mt-train's flags describe (model_config.h). */
#include "config/model_config.h"

#include <string.h>

mt_gpt_config mt_gpt_config_from_args(const mt_train_args *a, int64_t vocab_size)
{
    mt_gpt_config c = {
        .num_layers = a->num_layers,
        .hidden_size = a->hidden_size,
        .num_heads = a->num_attention_heads,
        .ffn_hidden_size = a->ffn_hidden_size,
        .seq_length = a->seq_length,
        .max_position_embeddings = a->max_position_embeddings,
        .vocab_size = (int)vocab_size,
        .padded_vocab_size = mt_gpt_padded_vocab((int)vocab_size, a->make_vocab_size_divisible_by, a->tensor_model_parallel_size),
        .layernorm_epsilon = (float)a->layernorm_epsilon,
        .init_method_std = a->init_method_std,
        .exact_gelu = a->no_bias_gelu_fusion && !a->openai_gelu,
        .hidden_dropout = (float)a->hidden_dropout,
        .attention_dropout = (float)a->attention_dropout,
        .sequence_parallel = a->sequence_parallel && a->tensor_model_parallel_size > 1,
        .recompute_granularity = !a->recompute_granularity ? MT_RECOMPUTE_NONE
                                 : !strcmp(a->recompute_granularity, "full") ? MT_RECOMPUTE_FULL : MT_RECOMPUTE_SELECTIVE,
        .recompute_method = a->recompute_method && !strcmp(a->recompute_method, "block") ? MT_RECOMPUTE_BLOCK : MT_RECOMPUTE_UNIFORM,
        .recompute_num_layers = a->recompute_num_layers,
        .norm = a->normalization && !strcmp(a->normalization, "RMSNorm") ? MT_NORM_RMSNORM : MT_NORM_LAYERNORM,
        .position = a->position_embedding_type && !strcmp(a->position_embedding_type, "rope") ? MT_POS_ROPE : MT_POS_LEARNED,
        .rotary_base = (double)a->rotary_base,
        .rotary_percent = a->rotary_percent,
        .mlp = a->swiglu ? MT_MLP_SWIGLU : MT_MLP_GELU,
        .num_query_groups = a->group_query_attention ? a->num_query_groups : a->num_attention_heads,
        .untie_embeddings_and_output_weights = a->untie_embeddings_and_output_weights,
        .disable_bias_linear = a->disable_bias_linear,
        .add_qkv_bias = a->add_qkv_bias,
    };
    if (a->num_experts > 0) {
        c.num_experts = a->num_experts;
        c.moe_topk = a->moe_router_topk;
        c.moe_ffn_hidden_size = a->moe_ffn_hidden_size > 0 ? a->moe_ffn_hidden_size : a->ffn_hidden_size;
        c.moe_shared_ffn = a->moe_shared_expert_intermediate_size;
        c.moe_shared_gate = a->moe_shared_expert_gate;
        mt_err e;   /* checked when the args were parsed (or read back) */
        if (mt_moe_layers_parse(a->moe_layer_freq ? a->moe_layer_freq : "1", a->num_layers, c.moe_layers, &e))
            memset(c.moe_layers, 0, sizeof c.moe_layers);
        c.moe_score = a->moe_router_score_function && !strcmp(a->moe_router_score_function, "sigmoid") ? MTK_MOE_SIGMOID
                                                                                                    : MTK_MOE_SOFTMAX;
        c.moe_pre_softmax = a->moe_router_pre_softmax;
        c.moe_topk_scaling = a->moe_router_topk_scaling_factor;
        c.moe_capacity_factor = a->moe_expert_capacity_factor;
        c.moe_pad_to_capacity = a->moe_pad_expert_input_to_capacity;
        c.moe_drop_position = a->moe_token_drop_policy && !strcmp(a->moe_token_drop_policy, "position");
        const char *lb = a->moe_router_load_balancing_type ? a->moe_router_load_balancing_type : "aux_loss";
        c.moe_aux_type = !strcmp(lb, "none") ? MT_MOE_AUX_NONE : !strcmp(lb, "seq_aux_loss") ? MT_MOE_AUX_SEQ : MT_MOE_AUX;
        c.moe_aux_coeff = a->moe_aux_loss_coeff;
        c.moe_z_coeff = a->moe_z_loss_coeff;
        c.expert_tensor_parallel_size = a->expert_tensor_parallel_size;
    }
    c.context_parallel_size = a->context_parallel_size > 1 ? a->context_parallel_size : 1;
    return c;
}
