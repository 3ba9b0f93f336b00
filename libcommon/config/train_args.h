/* train_args.h: mt-train's command line, in Megatron's flag names and defaults (spec section 4).
 *
 * One struct holds every training argument; mt_train_args_parse fills it from argv with the flag table
 * in train_args.c (which is also the --help text and the man page's option list), then checks it: values
 * mt implements are validated with Megatron's rules, flags Megatron has but mt does not implement are
 * rejected with a message saying so, and nothing is silently ignored. The struct is saved in every
 * checkpoint's meta.json (mt_train_args_to_json) so a resumed run can check it continues the same model.
 * It is the training configuration that mt-train, the trainer and every program that opens a checkpoint
 * (ckpt/open_model.h, which reads these args back, each number checked against the range of its flag in
 * this table) share.
 */
#ifndef MT_CONFIG_TRAIN_ARGS_H
#define MT_CONFIG_TRAIN_ARGS_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "util/err.h"
#include "util/flags.h"

typedef struct mt_train_args {
    /* model (4.1) */
    int num_layers, hidden_size, num_attention_heads, ffn_hidden_size, kv_channels;
    int max_position_embeddings, seq_length, make_vocab_size_divisible_by;
    double layernorm_epsilon, init_method_std, hidden_dropout, attention_dropout;
    bool openai_gelu, no_bias_gelu_fusion;
    const char *position_embedding_type, *normalization;
    /* the LLaMA family (Megatron-Core): rotary positions, SwiGLU, grouped-query attention, untied output
     * layer, linear layers without biases */
    bool use_rotary_position_embeddings, swiglu, group_query_attention, untie_embeddings_and_output_weights;
    bool disable_bias_linear, add_qkv_bias;
    int64_t rotary_base;
    double rotary_percent;
    int num_query_groups;
    /* mixture of experts (Megatron-Core's MoE flags) */
    int num_experts;                       /* 0: a dense model */
    int moe_ffn_hidden_size, moe_router_topk, moe_shared_expert_intermediate_size;
    const char *moe_layer_freq;            /* N, or a list of 0/1 per layer */
    const char *moe_router_load_balancing_type, *moe_router_score_function, *moe_token_drop_policy, *moe_router_dtype;
    double moe_aux_loss_coeff, moe_z_loss_coeff, moe_router_topk_scaling_factor, moe_expert_capacity_factor;
    bool moe_router_pre_softmax, moe_pad_expert_input_to_capacity, moe_shared_expert_gate, moe_per_layer_logging;
    int expert_model_parallel_size;
    int context_parallel_size;         /* --context-parallel-size */
    const char *cp_comm_type;          /* --cp-comm-type: p2p or all_gather */
    int expert_tensor_parallel_size;   /* 0: not given (the tensor-parallel size, the only one implemented) */
    /* batch (4.2) */
    int micro_batch_size;
    int64_t global_batch_size, train_iters, train_samples;
    /* optimizer and schedule (4.3) */
    const char *optimizer, *lr_decay_style, *weight_decay_incr_style;
    double lr, min_lr, lr_warmup_fraction, lr_warmup_init, weight_decay, start_weight_decay, end_weight_decay;
    double adam_beta1, adam_beta2, adam_eps, clip_grad;
    int64_t lr_decay_iters, lr_decay_samples, lr_warmup_iters, lr_warmup_samples;
    bool override_opt_param_scheduler, use_checkpoint_opt_param_scheduler, no_check_for_nan_in_loss_and_grad;
    /* mixed precision (4.4) */
    bool fp16, bf16;
    /* FP8 products with Transformer Engine's delayed scaling, emulated (model/fp8.h) */
    const char *fp8_format;                /* --fp8-format e4m3|hybrid; NULL: none */
    const char *fp8_recipe;                /* --fp8-recipe: delayed (the only one) */
    const char *fp8_amax_compute_algo;     /* most_recent (default) | max */
    int fp8_margin, fp8_amax_history_len;  /* defaults 0, 1 */
    double loss_scale, initial_loss_scale, min_loss_scale, loss_scale_window;
    int hysteresis;
    /* checkpoints (4.5) */
    const char *save, *load, *ckpt_format;
    int64_t save_interval;
    bool async_save;   /* --async-save */
    bool no_save_optim, no_save_rng, no_load_optim, no_load_rng, finetune, exit_on_missing_checkpoint;
    /* data (4.6) */
    mt_strs data_path;
    const char *split, *data_cache_path, *vocab_file, *merge_file, *tokenizer_type, *dataloader_type;
    const char *tokenizer_model, *tiktoken_pattern;   /* HuggingFaceTokenizer, TikTokenizer */
    int64_t tiktoken_num_special_tokens;               /* TikTokenizer: 0 for tiktoken's own ids */
    mt_strs tiktoken_special_tokens;                   /* TikTokenizer: empty for <unk> <s> </s> */
    int64_t seed, vocab_size;
    double mid_level_dataset_surplus;
    bool eod_mask_loss;
    /* evaluation, logging, exit (4.7) */
    int64_t eval_interval, eval_iters, log_interval, tensorboard_log_interval, exit_interval;
    double exit_duration_in_mins;
    const char *tensorboard_dir, *metrics_file;
    bool exit_signal_handler, skip_train, log_validation_ppl_to_tensorboard, log_throughput, log_params_norm;
    bool no_log_loss_scale_to_tensorboard;
    /* parallelism (4.8): data parallelism over the job's ranks; tensor and pipeline sizes 1 for now */
    int tensor_model_parallel_size, pipeline_model_parallel_size;
    bool use_distributed_optimizer;
    bool overlap_grad_reduce;    /* the data-parallel buckets reduced during the backward passes (train/overlap.h) */
    bool overlap_param_gather;   /* ... and gathered during the next forward passes (distributed optimizer) */
    bool sequence_parallel;
    int num_layers_per_virtual_pipeline_stage;           /* 0: the non-interleaved schedule */
    bool recompute_activations;                          /* the legacy spelling of --recompute-granularity selective */
    const char *recompute_granularity, *recompute_method; /* NULL: none */
    int recompute_num_layers;
    int64_t ddp_bucket_size;   /* parameters per gradient bucket; 0: Megatron's max(40M, 1M x dp) */
    /* mt's own */
    const char *backend;
    int threads;
    bool dry_run;            /* --dry-run: print the memory plan of --world-size ranks and exit */
    int world_size;
} mt_train_args;

/* Parses and checks argv; on a bad or unsupported flag returns -1 with a one-line message. Prints
 * warnings for flags that are accepted but change nothing in mt (e.g. fusion switches). */
int mt_train_args_parse(mt_train_args *a, int argc, char **argv, mt_err *e);
/* Frees the arrays a successful parse leaves (the values of the flags that take several words). */
void mt_train_args_free(mt_train_args *a);
/* The flag table (for --help and the man page). */
const mt_cmd *mt_train_cmd(void);

/* Samples the LR schedule counts in: the global batch size per iteration. */
int64_t mt_train_total_iters(const mt_train_args *a);

/* The arguments as a JSON object (checkpoint meta.json "args"). */
json_t *mt_train_args_to_json(const mt_train_args *a);
/* Calls fn with every flag mt uses and its value in a, in the table's order, as text: a number as the
 * shortest decimal that reads back the same ("0.0001"), a switch "given" or "not given", a string as it
 * is ("not given" when absent), several words joined by spaces; a flag with two names once, under the
 * first. What the ranks of a job compare (config/train_args_desc.h). */
void mt_train_args_each(const mt_train_args *a, void (*fn)(const char *flag, const char *value, void *ctx), void *ctx);
/* Checks a checkpoint's saved args describe the same model as a: -1 naming the first differing flag. */
int mt_train_args_check_model(const mt_train_args *a, const json_t *saved, const char *where, mt_err *e);
/* Sets a to zero but for the architecture options of a saved args object (normalization,
 * position-embedding-type, rotary-base, rotary-percent, swiglu, group-query-attention, num-query-groups,
 * untie-embeddings-and-output-weights, disable-bias-linear), each checked against its flag; absent keys
 * (checkpoints written before these options) are Megatron's defaults, i.e. GPT-2. -1 naming where and
 * the key. */
int mt_train_args_arch_from_json(const json_t *saved, mt_train_args *a, const char *where, mt_err *e);

#endif
