/* train_args.c: mt-train's flag table (Megatron names and defaults), checks, and the JSON form of the args. */
#include "config/train_args.h"
#include "model/device.h"
#include "model/layout.h"
#include "tok/bpe.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static mt_train_args A;   /* the table's destinations; copied out by mt_train_args_parse */
static bool ignored_b;    /* destinations of flags that change nothing in mt */
static const char *ignored_s;
static int64_t ignored_i;

#define NOOP_B(name, why) {name, MT_F_BOOL, &ignored_b, NULL, why, 0, 0, NULL}
#define NOOP_S(name, mv, why) {name, MT_F_STR, &ignored_s, mv, why, 0, 0, NULL}
#define NOOP_I(name, mv, why) {name, MT_F_I64, &ignored_i, mv, why, 0, 0, NULL}

static const mt_flag flags[] = {
    /* model */
    {"--num-layers", MT_F_INT, &A.num_layers, "N", "transformer layers (required)", 1, 100000, NULL},
    {"--hidden-size", MT_F_INT, &A.hidden_size, "H", "hidden size (required)", 1, 1 << 20, NULL},
    {"--num-attention-heads", MT_F_INT, &A.num_attention_heads, "NH", "attention heads (required)", 1, 1 << 16, NULL},
    {"--ffn-hidden-size", MT_F_INT, &A.ffn_hidden_size, "F", "MLP hidden size (default 4 x hidden size; see --swiglu)", 1, 1 << 24, NULL},
    {"--kv-channels", MT_F_INT, &A.kv_channels, "D", "head size; must be hidden size / heads (the default)", 1, 1 << 20, NULL},
    {"--max-position-embeddings", MT_F_INT, &A.max_position_embeddings, "P", "position table size (required)", 1, 1 << 24, NULL},
    {"--seq-length", MT_F_INT, &A.seq_length, "T", "tokens per sample (required; <= max positions)", 1, 1 << 24, NULL},
    {"--make-vocab-size-divisible-by", MT_F_INT, &A.make_vocab_size_divisible_by, "N",
     "pad the vocabulary to a multiple of N (default 128)", 1, 1 << 20, NULL},
    {"--norm-epsilon", MT_F_DOUBLE, &A.layernorm_epsilon, "EPS", "epsilon of LayerNorm and RMSNorm (default 1e-5)", 1e-30, 1, NULL},
    {"--layernorm-epsilon", MT_F_DOUBLE, &A.layernorm_epsilon, "EPS", "same as --norm-epsilon (Megatron's earlier name)", 1e-30, 1, NULL},
    {"--normalization", MT_F_CHOICE, &A.normalization, NULL, "LayerNorm (default) or RMSNorm", 0, 0, "LayerNorm|RMSNorm"},
    {"--position-embedding-type", MT_F_CHOICE, &A.position_embedding_type, NULL,
     "learned_absolute (default) or rope (rotary, rotate-half; none is not implemented)", 0, 0, "learned_absolute|rope|none"},
    {"--use-rotary-position-embeddings", MT_F_BOOL, &A.use_rotary_position_embeddings, NULL,
     "same as --position-embedding-type rope (Megatron's earlier flag)", 0, 0, NULL},
    {"--rotary-base", MT_F_I64, &A.rotary_base, "B", "rope: the base of the rotary frequencies (default 10000)", 1, 1e15, NULL},
    {"--rotary-percent", MT_F_DOUBLE, &A.rotary_percent, "X", "rope: the fraction of each head's channels that rotate (default 1.0)",
     1e-9, 1, NULL},
    {"--swiglu", MT_F_BOOL, &A.swiglu, NULL,
     "SwiGLU MLP: silu(gate) x up; --ffn-hidden-size defaults to int(8 x hidden / 3 / 64) x 64", 0, 0, NULL},
    {"--group-query-attention", MT_F_BOOL, &A.group_query_attention, NULL, "grouped-query attention (--num-query-groups)", 0, 0, NULL},
    {"--num-query-groups", MT_F_INT, &A.num_query_groups, "G",
     "with --group-query-attention: key/value heads, dividing the attention heads (default 1)", 1, 1 << 16, NULL},
    {"--untie-embeddings-and-output-weights", MT_F_BOOL, &A.untie_embeddings_and_output_weights, NULL,
     "an output layer of its own instead of the word embeddings", 0, 0, NULL},
    {"--disable-bias-linear", MT_F_BOOL, &A.disable_bias_linear, NULL, "no biases on the linear layers", 0, 0, NULL},
    {"--add-qkv-bias", MT_F_BOOL, &A.add_qkv_bias, NULL, "with --disable-bias-linear, a bias on QKV still (Qwen)", 0, 0, NULL},
    /* mixture of experts */
    {"--num-experts", MT_F_INT, &A.num_experts, "E", "MoE: experts in each MoE layer (default none: a dense model)", 1,
     MTK_MOE_MAX_EXPERTS, NULL},
    {"--moe-ffn-hidden-size", MT_F_INT, &A.moe_ffn_hidden_size, "F", "MoE: an expert's hidden size (default --ffn-hidden-size)",
     1, 1 << 24, NULL},
    {"--moe-router-topk", MT_F_INT, &A.moe_router_topk, "K", "MoE: experts per token (default 2)", 1, MTK_MOE_MAX_EXPERTS, NULL},
    {"--moe-layer-freq", MT_F_STR, &A.moe_layer_freq, "N|LIST",
     "MoE: every N-th layer from the first is MoE (default 1: all), or a list of 0/1 per layer, e.g. [0,1,1,1]", 0, 0, NULL},
    {"--moe-router-load-balancing-type", MT_F_CHOICE, &A.moe_router_load_balancing_type, NULL,
     "MoE: aux_loss (default: over the micro-batch), seq_aux_loss (per sequence) or none", 0, 0,
     "aux_loss|seq_aux_loss|none"},
    {"--moe-aux-loss-coeff", MT_F_DOUBLE, &A.moe_aux_loss_coeff, "C", "MoE: coefficient of the load-balancing loss (default 0)",
     0, 1e6, NULL},
    {"--moe-z-loss-coeff", MT_F_DOUBLE, &A.moe_z_loss_coeff, "Z", "MoE: coefficient of the router z-loss (default none)", 0,
     1e6, NULL},
    {"--moe-router-score-function", MT_F_CHOICE, &A.moe_router_score_function, NULL,
     "MoE: softmax (default) or sigmoid", 0, 0, "softmax|sigmoid"},
    {"--moe-router-pre-softmax", MT_F_BOOL, &A.moe_router_pre_softmax, NULL,
     "MoE: the softmax over all experts before the top-k (default: over the k chosen)", 0, 0, NULL},
    {"--moe-router-topk-scaling-factor", MT_F_DOUBLE, &A.moe_router_topk_scaling_factor, "S",
     "MoE: scale the routing weights by S", 1e-9, 1e9, NULL},
    {"--moe-router-dtype", MT_F_CHOICE, &A.moe_router_dtype, NULL, "MoE: the router's logits in fp32 (the only choice)",
     0, 0, "fp32"},
    {"--moe-expert-capacity-factor", MT_F_DOUBLE, &A.moe_expert_capacity_factor, "CF",
     "MoE: an expert takes at most ceil(CF tokens x topk / experts) tokens, the others dropped (default: dropless)",
     1e-9, 1e9, NULL},
    {"--moe-pad-expert-input-to-capacity", MT_F_BOOL, &A.moe_pad_expert_input_to_capacity, NULL,
     "MoE: every expert computes exactly its capacity of rows (with --moe-expert-capacity-factor)", 0, 0, NULL},
    {"--moe-token-drop-policy", MT_F_CHOICE, &A.moe_token_drop_policy, NULL,
     "MoE: over capacity, keep the tokens of the largest probs (default) or the earliest", 0, 0, "probs|position"},
    {"--moe-shared-expert-intermediate-size", MT_F_INT, &A.moe_shared_expert_intermediate_size, "FS",
     "MoE: a shared expert of hidden size FS that every token goes through", 1, 1 << 24, NULL},
    {"--moe-shared-expert-gate", MT_F_BOOL, &A.moe_shared_expert_gate, NULL,
     "MoE: the shared expert's output times sigmoid(x . gate) (Qwen2-MoE)", 0, 0, NULL},
    {"--moe-per-layer-logging", MT_F_BOOL, &A.moe_per_layer_logging, NULL,
     "MoE: each MoE layer's losses and rows per expert to TensorBoard (moe/..._layer_L)", 0, 0, NULL},
    {"--expert-model-parallel-size", MT_F_INT, &A.expert_model_parallel_size, "N",
     "MoE: ranks the experts are split over (of the data-parallel ones, or with an --expert-tensor-parallel-size below "
     "the tensor size of a stage's; default 1)", 1, 1 << 16, NULL},
    {"--expert-tensor-parallel-size", MT_F_INT, &A.expert_tensor_parallel_size, "N",
     "MoE: ranks each expert's matrices are split over: --tensor-model-parallel-size (the default), or a divisor of it "
     "with --sequence-parallel (1: each expert whole, routed on each rank's sequence shard)", 1, 1 << 16,
     NULL},
    NOOP_B("--moe-grouped-gemm", "accepted; the experts' products are always one grouped product"),
    NOOP_S("--moe-token-dispatcher-type", "TYPE", "accepted (alltoall, allgather); the tokens go to their experts one way"),
    NOOP_B("--moe-permute-fusion", "accepted; fusion does not change results"),
    NOOP_B("--moe-router-fusion", "accepted; fusion does not change results"),
    {"--init-method-std", MT_F_DOUBLE, &A.init_method_std, "S",
     "init std (default 0.02; output layers S/sqrt(2 x layers))", 0, 100, NULL},
    {"--hidden-dropout", MT_F_DOUBLE, &A.hidden_dropout, "P", "dropout on embeddings and block outputs (default 0.1)", 0, 0.999, NULL},
    {"--attention-dropout", MT_F_DOUBLE, &A.attention_dropout, "P", "dropout on attention probabilities (default 0.1)", 0, 0.999, NULL},
    {"--openai-gelu", MT_F_BOOL, &A.openai_gelu, NULL, "tanh GeLU (the default already, through the fused bias-GeLU)", 0, 0, NULL},
    {"--no-bias-gelu-fusion", MT_F_BOOL, &A.no_bias_gelu_fusion, NULL,
     "exact erf GeLU, as Megatron's unfused path (unless --openai-gelu)", 0, 0, NULL},
    NOOP_B("--no-bias-dropout-fusion", "accepted; fusion does not change results"),
    NOOP_B("--no-masked-softmax-fusion", "accepted; fusion does not change results"),
    NOOP_B("--attention-softmax-in-fp32", "accepted; softmax is always fp32"),
    NOOP_B("--apply-query-key-layer-scaling", "accepted; numerically a no-op in fp32"),
    NOOP_B("--no-query-key-layer-scaling", "accepted; numerically a no-op in fp32"),
    NOOP_B("--use-mcore-models", "accepted; one GPT implementation"),
    NOOP_B("--use-legacy-models", "accepted; one GPT implementation"),
    NOOP_B("--use-flash-attn", "accepted; attention is always computed blockwise without the T x T matrix"),
    NOOP_S("--transformer-impl", "IMPL", "accepted (local or transformer_engine); one implementation"),
    NOOP_B("--no-gradient-accumulation-fusion", "accepted; fusion does not change results"),
    NOOP_B("--no-async-tensor-model-parallel-allreduce", "accepted; one rank"),
    /* batch */
    {"--micro-batch-size", MT_F_INT, &A.micro_batch_size, "B", "sequences per forward/backward pass (required)", 1, 1 << 20, NULL},
    {"--global-batch-size", MT_F_I64, &A.global_batch_size, "G",
     "sequences per iteration; a multiple of B (default B): gradient accumulation", 1, 1e12, NULL},
    {"--train-iters", MT_F_I64, &A.train_iters, "N", "iterations to train", 0, 1e15, NULL},
    {"--train-samples", MT_F_I64, &A.train_samples, "S", "samples to train (instead of --train-iters)", 1, 1e15, NULL},
    /* optimizer */
    {"--optimizer", MT_F_CHOICE, &A.optimizer, NULL, "adam (AdamW; default; sgd is not implemented)", 0, 0, "adam|sgd"},
    {"--lr", MT_F_DOUBLE, &A.lr, "LR", "peak learning rate (required)", 0, 1e6, NULL},
    {"--min-lr", MT_F_DOUBLE, &A.min_lr, "LR", "learning rate floor after decay (default 0)", 0, 1e6, NULL},
    {"--lr-decay-style", MT_F_CHOICE, &A.lr_decay_style, NULL, "decay after warmup (default linear)", 0, 0,
     "constant|linear|cosine|inverse-square-root"},
    {"--lr-decay-iters", MT_F_I64, &A.lr_decay_iters, "N", "iterations to decay over (default --train-iters)", 1, 1e15, NULL},
    {"--lr-decay-samples", MT_F_I64, &A.lr_decay_samples, "S", "samples to decay over (with --train-samples)", 1, 1e15, NULL},
    {"--lr-warmup-iters", MT_F_I64, &A.lr_warmup_iters, "N", "linear warmup iterations (default 0)", 0, 1e15, NULL},
    {"--lr-warmup-samples", MT_F_I64, &A.lr_warmup_samples, "S", "linear warmup samples (with --train-samples)", 0, 1e15, NULL},
    {"--lr-warmup-fraction", MT_F_DOUBLE, &A.lr_warmup_fraction, "X", "warmup as a fraction of the decay steps", 0, 1, NULL},
    {"--lr-warmup-init", MT_F_DOUBLE, &A.lr_warmup_init, "LR", "learning rate at the start of warmup (default 0)", 0, 1e6, NULL},
    {"--weight-decay", MT_F_DOUBLE, &A.weight_decay, "WD", "decoupled weight decay, not on biases or LayerNorm (default 0.01)", 0, 1e6, NULL},
    {"--start-weight-decay", MT_F_DOUBLE, &A.start_weight_decay, "WD", "weight decay at the start (incr style)", 0, 1e6, NULL},
    {"--end-weight-decay", MT_F_DOUBLE, &A.end_weight_decay, "WD", "weight decay at the end (incr style)", 0, 1e6, NULL},
    {"--weight-decay-incr-style", MT_F_CHOICE, &A.weight_decay_incr_style, NULL, "weight decay schedule (default constant)", 0, 0,
     "constant|linear|cosine"},
    {"--adam-beta1", MT_F_DOUBLE, &A.adam_beta1, "B1", "Adam beta1, in [0, 1) (default 0.9)", 0, 1, NULL},
    {"--adam-beta2", MT_F_DOUBLE, &A.adam_beta2, "B2", "Adam beta2, in [0, 1) (default 0.999)", 0, 1, NULL},
    {"--adam-eps", MT_F_DOUBLE, &A.adam_eps, "EPS", "Adam epsilon, > 0 (default 1e-8)", 0, 1, NULL},
    {"--clip-grad", MT_F_DOUBLE, &A.clip_grad, "C", "clip the global gradient L2 norm to C; 0 = off (default 1.0)", 0, 1e12, NULL},
    {"--no-check-for-nan-in-loss-and-grad", MT_F_BOOL, &A.no_check_for_nan_in_loss_and_grad, NULL,
     "skip an iteration whose loss or grad norm is NaN/inf instead of stopping with an error", 0, 0, NULL},
    {"--override-opt_param-scheduler", MT_F_BOOL, &A.override_opt_param_scheduler, NULL,
     "on --load, take schedule values from the flags, not the checkpoint", 0, 0, NULL},
    {"--use-checkpoint-opt_param-scheduler", MT_F_BOOL, &A.use_checkpoint_opt_param_scheduler, NULL,
     "on --load, take schedule values from the checkpoint", 0, 0, NULL},
    /* mixed precision */
    {"--bf16", MT_F_BOOL, &A.bf16, NULL,
     "bf16 weights and activations; fp32 master weights, optimizer state, gradients and reductions", 0, 0, NULL},
    {"--fp16", MT_F_BOOL, &A.fp16, NULL,
     "fp16 weights and activations (fp32 master weights etc.) with loss scaling (dynamic unless --loss-scale)", 0, 0, NULL},
    {"--loss-scale", MT_F_DOUBLE, &A.loss_scale, "S", "static loss scale (with --fp16 or --bf16); a power of 2 keeps the scaling exact",
     0, 1e38, NULL},
    {"--fp8-format", MT_F_CHOICE, &A.fp8_format, NULL,
     "the layers' linear products in FP8: inputs and weights E4M3, output gradients E4M3 (e4m3) or E5M2 (hybrid); "
     "emulated (quantized, then fp32 or bf16 products); default none", 0, 0, "e4m3|hybrid"},
    {"--fp8-recipe", MT_F_CHOICE, &A.fp8_recipe, NULL, "FP8 scaling: delayed (Transformer Engine's; the only one)", 0, 0,
     "delayed"},
    {"--fp8-margin", MT_F_INT, &A.fp8_margin, "M", "FP8 scales leave 2^M of headroom (default 0)", 0, 64, NULL},
    {"--fp8-amax-history-len", MT_F_INT, &A.fp8_amax_history_len, "N",
     "FP8: the amaxes each tensor's scale looks back over (default 1)", 1, 1 << 16, NULL},
    {"--fp8-amax-compute-algo", MT_F_CHOICE, &A.fp8_amax_compute_algo, NULL,
     "FP8: a scale from the latest amax (most_recent, the default) or the history's largest (max)", 0, 0,
     "most_recent|max"},
    NOOP_I("--fp8-interval", "N", "accepted (deprecated in Megatron); scales update every step"),
    {"--initial-loss-scale", MT_F_DOUBLE, &A.initial_loss_scale, "S", "dynamic loss scale at the start (default 2^32)",
     0, 1e38, NULL},
    {"--min-loss-scale", MT_F_DOUBLE, &A.min_loss_scale, "S", "dynamic loss scale floor (default 1.0)", 0, 1e38, NULL},
    {"--loss-scale-window", MT_F_DOUBLE, &A.loss_scale_window, "N",
     "iterations without overflow before the dynamic scale doubles (default 1000)", 1, 1e15, NULL},
    {"--hysteresis", MT_F_INT, &A.hysteresis, "N", "overflows tolerated before the dynamic scale halves (default 2)", 1,
     1 << 30, NULL},
    /* checkpoints */
    {"--save", MT_F_STR, &A.save, "DIR", "checkpoint directory to write", 0, 0, NULL},
    {"--load", MT_F_STR, &A.load, "DIR", "checkpoint directory to resume from (nothing there: start fresh)", 0, 0, NULL},
    {"--save-interval", MT_F_I64, &A.save_interval, "N", "save every N iterations (and at the end)", 1, 1e15, NULL},
    {"--ckpt-format", MT_F_CHOICE, &A.ckpt_format, NULL,
     "torch: Megatron's iter_NNNNNNN/mp_rank_00 layout, tensors as safetensors (default)", 0, 0,
     "torch|torch_dist|zarr|torch_dcp"},
    {"--async-save", MT_F_BOOL, &A.async_save, NULL,
     "copy the state aside at a save and write it in a background thread while training goes on", 0, 0, NULL},
    {"--no-save-optim", MT_F_BOOL, &A.no_save_optim, NULL, "do not save optimizer state", 0, 0, NULL},
    {"--no-save-rng", MT_F_BOOL, &A.no_save_rng, NULL, "do not save the RNG state", 0, 0, NULL},
    {"--no-load-optim", MT_F_BOOL, &A.no_load_optim, NULL, "do not load optimizer state (moments start at zero)", 0, 0, NULL},
    {"--no-load-rng", MT_F_BOOL, &A.no_load_rng, NULL, "do not load the RNG state (use --seed)", 0, 0, NULL},
    {"--finetune", MT_F_BOOL, &A.finetune, NULL,
     "load weights only; iteration, samples, optimizer and RNG start fresh", 0, 0, NULL},
    {"--exit-on-missing-checkpoint", MT_F_BOOL, &A.exit_on_missing_checkpoint, NULL,
     "with --load: fail instead of starting fresh when there is no checkpoint", 0, 0, NULL},
    /* data */
    MT_FLAG_DATA_PATH(&A.data_path, "dataset prefix, or weight/prefix pairs to blend"),
    MT_FLAG_SPLIT(&A.split, MT_HELP_SPLIT),
    MT_FLAG_DATA_CACHE_PATH(&A.data_cache_path, "index cache (default: index-cache/ beside the data)"),
    {"--mid-level-dataset-surplus", MT_F_DOUBLE, &A.mid_level_dataset_surplus, "X", "blend surplus (default 0.005)", 0, 1e6, NULL},
    MT_FLAG_SEED(&A.seed, "seed of data order, init and dropout (default 1234)"),
    {"--tokenizer-type", MT_F_CHOICE, &A.tokenizer_type, NULL,
     "GPT2BPETokenizer (default; needs --vocab-file), HuggingFaceTokenizer (a byte-level BPE tokenizer.json) or "
     "TikTokenizer (Megatron's JSON ranks or a tiktoken file; both need --tokenizer-model), or NullTokenizer (needs "
     "--vocab-size)", 0, 0,
     "GPT2BPETokenizer|HuggingFaceTokenizer|TikTokenizer|NullTokenizer"},
    MT_FLAG_VOCAB_FILE(&A.vocab_file, "GPT-2 vocab.json"),
    MT_FLAG_MERGE_FILE(&A.merge_file, "GPT-2 merges.txt"),
    {"--tokenizer-model", MT_F_STR, &A.tokenizer_model, "PATH",
     "HuggingFaceTokenizer: directory of tokenizer.json (and tokenizer_config.json, whose eos_token is the end of "
     "document), or the file; TikTokenizer: Megatron's JSON ranks or a tiktoken file", 0, 0, NULL},
    MT_FLAG_TIKTOKEN_PATTERN(&A.tiktoken_pattern),
    MT_FLAG_TIKTOKEN_NUM_SPECIAL_TOKENS(&A.tiktoken_num_special_tokens),
    MT_FLAG_TIKTOKEN_SPECIAL_TOKENS(&A.tiktoken_special_tokens),
    {"--vocab-size", MT_F_I64, &A.vocab_size, "N",
     "NullTokenizer: ids 0..N-1, end of document N; TikTokenizer: the vocabulary, the ranks cut to N less the "
     "special tokens (default 131072, as Megatron); HuggingFaceTokenizer and TikTokenizer without special "
     "tokens: the model's vocabulary when larger than the tokenizer's (a converted model's rows)",
     1, 1 << 30, NULL},
    {"--eod-mask-loss", MT_F_BOOL, &A.eod_mask_loss, NULL, "no loss at end-of-document input tokens", 0, 0, NULL},
    {"--dataloader-type", MT_F_CHOICE, &A.dataloader_type, NULL, "single (default; cyclic is not implemented)", 0, 0,
     "single|cyclic|external"},
    NOOP_I("--num-workers", "N", "accepted; batches are read in the training process"),
    NOOP_B("--no-mmap-bin-files", "accepted; .bin files are always mapped"),
    NOOP_S("--data-impl", "IMPL", "accepted (v2); mmap is the only format"),
    /* evaluation, logging, exit */
    {"--eval-interval", MT_F_I64, &A.eval_interval, "N", "validate every N iterations (default 1000)", 1, 1e15, NULL},
    {"--eval-iters", MT_F_I64, &A.eval_iters, "N", "global batches per validation (default 100; 0 = none)", 0, 1e15, NULL},
    {"--skip-train", MT_F_BOOL, &A.skip_train, NULL, "only evaluate (validation and test) the loaded model", 0, 0, NULL},
    {"--log-interval", MT_F_I64, &A.log_interval, "N", "print the iteration line every N iterations (default 100)", 1, 1e15, NULL},
    {"--tensorboard-dir", MT_F_STR, &A.tensorboard_dir, "DIR", "write TensorBoard event files here", 0, 0, NULL},
    {"--tensorboard-log-interval", MT_F_I64, &A.tensorboard_log_interval, "N", "scalars every N iterations (default 1)", 1, 1e15, NULL},
    NOOP_I("--tensorboard-queue-size", "N", "accepted; events are written at once"),
    {"--log-validation-ppl-to-tensorboard", MT_F_BOOL, &A.log_validation_ppl_to_tensorboard, NULL,
     "also write validation perplexity", 0, 0, NULL},
    {"--log-throughput", MT_F_BOOL, &A.log_throughput, NULL, "add TFLOP/s to the iteration line", 0, 0, NULL},
    {"--log-params-norm", MT_F_BOOL, &A.log_params_norm, NULL, "add the parameters' L2 norm to the iteration line", 0, 0, NULL},
    NOOP_I("--timing-log-level", "N", "accepted; no timer breakdown"),
    NOOP_B("--log-timers-to-tensorboard", "accepted; no timer breakdown"),
    NOOP_B("--log-world-size-to-tensorboard", "accepted; the log states the world size"),
    NOOP_I("--num-dataset-builder-threads", "N", "accepted; indices are built in one thread"),
    NOOP_B("--no-create-attention-mask-in-dataloader", "accepted; the causal mask is never materialized"),
    {"--no-log-loss-scale-to-tensorboard", MT_F_BOOL, &A.no_log_loss_scale_to_tensorboard, NULL,
     "do not write loss-scale to TensorBoard", 0, 0, NULL},
    {"--metrics-file", MT_F_STR, &A.metrics_file, "FILE", "append JSON lines: one per logged iteration and validation", 0, 0, NULL},
    {"--exit-interval", MT_F_I64, &A.exit_interval, "N", "save and exit when the iteration is a multiple of N", 1, 1e15, NULL},
    {"--exit-duration-in-mins", MT_F_DOUBLE, &A.exit_duration_in_mins, "M", "save and exit after M minutes of training", 0, 1e12, NULL},
    {"--exit-signal-handler", MT_F_BOOL, &A.exit_signal_handler, NULL,
     "on SIGTERM, finish the iteration, save and exit 0", 0, 0, NULL},
    /* parallelism */
    {"--context-parallel-size", MT_F_INT, &A.context_parallel_size, "N",
     "ranks each sequence is split over (Megatron's load-balanced chunks; ring attention; default 1)", 1, 64, NULL},
    {"--cp-comm-type", MT_F_CHOICE, &A.cp_comm_type, NULL,
     "context parallelism's attention: keys and values around a ring, overlapped with the blocks (p2p, the default), "
     "or gathered at once (all_gather)", 0, 0, "p2p|all_gather"},
    {"--tensor-model-parallel-size", MT_F_INT, &A.tensor_model_parallel_size, "N",
     "ranks holding the parts of one model (default 1; the job's other ranks are data-parallel)", 1, 1 << 20, NULL},
    {"--pipeline-model-parallel-size", MT_F_INT, &A.pipeline_model_parallel_size, "N",
     "pipeline stages the layers are split over, evenly (default 1); the 1F1B schedule", 1, 1 << 20, NULL},
    {"--num-layers-per-virtual-pipeline-stage", MT_F_INT, &A.num_layers_per_virtual_pipeline_stage, "N",
     "the interleaved 1F1B schedule: each stage holds (layers / stages) / N model chunks of N layers", 1, 1 << 20, NULL},
    {"--sequence-parallel", MT_F_BOOL, &A.sequence_parallel, NULL,
     "with --tensor-model-parallel-size > 1: LayerNorm, dropout and residual activations split along the tokens "
     "(all-gather / reduce-scatter instead of all-reduce); ignored with size 1, as in Megatron", 0, 0, NULL},
    {"--use-distributed-optimizer", MT_F_BOOL, &A.use_distributed_optimizer, NULL,
     "shard AdamW's state over the data-parallel ranks (ZeRO-1): reduce-scatter gradients, all-gather parameters",
     0, 0, NULL},
    {"--ddp-bucket-size", MT_F_I64, &A.ddp_bucket_size, "N",
     "parameters per gradient reduction bucket (default max(40000000, 1000000 x data-parallel size))", 1, 1e15, NULL},
    {"--overlap-grad-reduce", MT_F_BOOL, &A.overlap_grad_reduce, NULL,
     "reduce each gradient bucket as soon as the backward passes have made it final, while they go on (a progress "
     "thread on CPU ranks, a CUDA stream of its own on GPU ranks); the same sums", 0, 0, NULL},
    {"--overlap-param-gather", MT_F_BOOL, &A.overlap_param_gather, NULL,
     "with --use-distributed-optimizer: gather each parameter bucket after the update while the next step's forward "
     "passes run, waiting for it before the first layer that reads it", 0, 0, NULL},
    NOOP_B("--accumulate-allreduce-grads-in-fp32", "accepted; gradients are fp32"),
    NOOP_S("--distributed-backend", "NAME", "accepted; CPU ranks use MPI, GPU ranks NCCL"),
    {"--recompute-granularity", MT_F_CHOICE, &A.recompute_granularity, NULL,
     "full: keep only each layer's input and run the forward pass of the layers again in the backward pass; "
     "selective: the attention core (mt's attention never keeps its probabilities: nothing to change)", 0, 0,
     "full|selective"},
    {"--recompute-method", MT_F_CHOICE, &A.recompute_method, NULL,
     "with --recompute-granularity full: uniform (every layer, in chunks of --recompute-num-layers) or block (the "
     "first --recompute-num-layers layers of each pipeline stage)", 0, 0, "uniform|block"},
    {"--recompute-num-layers", MT_F_INT, &A.recompute_num_layers, "N",
     "layers per recomputed chunk (uniform) or recomputed layers per stage (block)", 0, 1 << 20, NULL},
    {"--recompute-activations", MT_F_BOOL, &A.recompute_activations, NULL,
     "the same as --recompute-granularity selective", 0, 0, NULL},
    /* mt */
    {"--device", MT_F_CHOICE, &A.backend, NULL, "where the kernels run: cpu, or cuda (the GPU of the local rank); "
     "default cuda when a GPU is there", 0, 0, MT_DEVICE_CHOICES},
    {"--threads", MT_F_INT, &A.threads, "N", "CPU threads (default: OpenMP's, e.g. OMP_NUM_THREADS)", 0, 4096, NULL},
    {"--dry-run", MT_F_BOOL, &A.dry_run, NULL,
     "print what every (tensor rank, stage) would hold (parameters, gradients, optimizer state, peak activations) "
     "and the pipeline bubble for --world-size ranks, then exit: no data read (no --data-path needed), no rank "
     "started", 0, 0, NULL},
    {"--world-size", MT_F_INT, &A.world_size, "N",
     "with --dry-run: the ranks of the job planned (default tensor x pipeline size)", 1, 1 << 24, NULL},
    {0},
};

static const mt_cmd cmd = {
    "mt-train",
    "--num-layers N --hidden-size H --num-attention-heads NH --seq-length T\n"
    "                --max-position-embeddings P --micro-batch-size B [--global-batch-size G]\n"
    "                (--train-iters N | --train-samples S) --lr LR --data-path [W] PREFIX...\n"
    "                (--vocab-file F --merge-file F | --tokenizer-type HuggingFaceTokenizer|TikTokenizer\n"
    "                 --tokenizer-model PATH | --tokenizer-type NullTokenizer --vocab-size N)\n"
    "                [--save DIR] [--load DIR] [-n RANKS] [options]",
    "Trains a GPT-2 model with Megatron-LM's flags, schedule, data order, log lines and checkpoint\n"
    "layout, on one rank or data-parallel over the ranks of srun --mpi=pmix, mpirun, or -n RANKS (that\n"
    "many ranks on this machine; man mt-train, LAUNCHING). Checkpoints hold safetensors and JSON; --load\n"
    "resumes exactly.",
    flags,
};

const mt_cmd *mt_train_cmd(void) { return &cmd; }

/* Megatron flags mt does not implement: rejected by name, with the reason. */
static const struct {
    const char *name, *why;
} unsupported[] = {
    {"--rampup-batch-size", "batch size ramp-up is not implemented"},
    {"--rotary-interleaved", "rope rotates the two halves of each head (rotate-half), not interleaved pairs"},
    {"--use-rope-scaling", "rope frequency scaling (Llama 3.1) is not implemented"},
    {"--rotary-seq-len-interpolation-factor", "rope sequence-length interpolation is not implemented"},
    {"--apply-layernorm-1p", "zero-centered norm weights are not implemented"},
    {"--qk-layernorm", "query/key normalization is not implemented"},
    {"--squared-relu", "the MLP is GeLU or SwiGLU (--swiglu)"},
    {"--apply-residual-connection-post-layernorm", "only pre-LayerNorm residuals are implemented"},
    {"--reset-position-ids", "position ids always run 0..T-1 per sample"},
    {"--reset-attention-mask", "attention is always causal over the whole sample"},
    {"--use-checkpoint-args", "pass the model flags explicitly"},
    {"--wandb-project", "Weights & Biases logging is not implemented; use --tensorboard-dir or --metrics-file"},
    {"--train-data-path", "use --data-path with --split"},
    {"--valid-data-path", "use --data-path with --split"},
    {"--test-data-path", "use --data-path with --split"},
    {"--mock-data", "use a real dataset (mt-tokenize | mt-index)"},
    {"--calculate-per-token-loss", "not implemented"},
    {"--lr-wsd-decay-style", "the WSD schedule is not implemented"},
    {"--lr-wsd-decay-iters", "the WSD schedule is not implemented"},
    {"--lr-wsd-decay-samples", "the WSD schedule is not implemented"},
    {NULL, NULL},
};

static void defaults(mt_train_args *a)
{
    memset(a, 0, sizeof *a);
    a->make_vocab_size_divisible_by = 128;
    a->layernorm_epsilon = 1e-5;
    a->init_method_std = 0.02;
    a->hidden_dropout = 0.1;
    a->attention_dropout = 0.1;
    a->position_embedding_type = "learned_absolute";
    a->normalization = "LayerNorm";
    a->rotary_base = 10000;
    a->rotary_percent = 1.0;
    a->num_query_groups = 1;
    a->moe_router_topk = 2;
    a->moe_layer_freq = "1";
    a->moe_router_load_balancing_type = "aux_loss";
    a->moe_router_score_function = "softmax";
    a->moe_token_drop_policy = "probs";
    a->fp8_recipe = "delayed";
    a->fp8_amax_compute_algo = "most_recent";
    a->fp8_amax_history_len = 1;
    a->expert_model_parallel_size = 1;
    a->context_parallel_size = 1;
    a->cp_comm_type = "p2p";
    a->optimizer = "adam";
    a->lr = -1;
    a->lr_decay_style = "linear";
    a->weight_decay_incr_style = "constant";
    a->weight_decay = 0.01;
    a->start_weight_decay = a->end_weight_decay = -1;
    a->adam_beta1 = 0.9;
    a->adam_beta2 = 0.999;
    a->adam_eps = 1e-8;
    a->clip_grad = 1.0;
    a->ckpt_format = "torch";
    a->seed = 1234;
    a->tokenizer_type = "GPT2BPETokenizer";
    a->tiktoken_num_special_tokens = MT_TIKTOKEN_NUM_SPECIAL_DEFAULT;
    a->dataloader_type = "single";
    a->mid_level_dataset_surplus = 0.005;
    a->eval_interval = 1000;
    a->eval_iters = 100;
    a->log_interval = 100;
    a->tensorboard_log_interval = 1;
    a->tensor_model_parallel_size = a->pipeline_model_parallel_size = 1;
    a->backend = NULL;   /* --device: cuda when a GPU is there, else cpu */
    a->initial_loss_scale = 4294967296.0;
    a->min_loss_scale = 1.0;
    a->loss_scale_window = 1000;
    a->hysteresis = 2;
}

static int check_unsupported(int argc, char **argv, mt_err *e)
{
    for (int i = 1; i < argc; i++) {
        const char *s = argv[i];
        if (!strcmp(s, "--")) break;
        if (strncmp(s, "--", 2)) continue;
        char name[128];
        size_t n = strcspn(s, "=");
        if (n >= sizeof name) continue;
        memcpy(name, s, n);
        name[n] = 0;
        for (char *p = name + 2; *p; p++)
            if (*p == '_') *p = '-';
        for (int k = 0; unsupported[k].name; k++)
            if (!strcmp(name, unsupported[k].name))
                return mt_err_set(e, "%s is not supported: %s", unsupported[k].name, unsupported[k].why);
    }
    return 0;
}

#define NFLAGS (sizeof flags / sizeof flags[0])

static bool given(const bool *seen, const char *name)
{
    for (size_t i = 0; flags[i].name; i++)
        if (!strcmp(flags[i].name, name)) return seen[i];
    return false;
}

/* --expert-tensor-parallel-size: the tensor size (its default), or a divisor of it with --sequence-parallel
 * (Megatron's MoE layer then routing each rank's sequence shard; mt each expert-tensor group's rows, the
 * experts split over the group: whole with 1); seq_aux_loss where a group's rows are whole sequences. Where etp x ep must divide the ranks of a stage is the parallel grid's check
 * (comm/grid.h), when the world size is known. */
static int check_expert_tensor(const mt_train_args *a, mt_err *e)
{
    int etp = a->expert_tensor_parallel_size, tp = a->tensor_model_parallel_size;
    if (!etp || etp == tp) return 0;
    if (tp % etp)
        return mt_err_set(e, "--expert-tensor-parallel-size (%d) must divide --tensor-model-parallel-size (%d)", etp, tp);
    if (!a->sequence_parallel)
        return mt_err_set(e, "--expert-tensor-parallel-size %d with --tensor-model-parallel-size %d needs --sequence-parallel "
                             "(as Megatron's MoE layer in training)", etp, tp);
    int seq = a->moe_router_load_balancing_type && !strcmp(a->moe_router_load_balancing_type, "seq_aux_loss");
    if (seq && a->micro_batch_size % (tp / etp))
        return mt_err_set(e, "--moe-router-load-balancing-type seq_aux_loss with --expert-tensor-parallel-size %d needs "
                             "--micro-batch-size (%d) divisible by --tensor-model-parallel-size / --expert-tensor-parallel-size "
                             "(%d): each expert-tensor group's rows whole sequences", etp, a->micro_batch_size, tp / etp);
    return 0;
}

/* The mixture of experts' flags: only with --num-experts, and what mt implements of them. */
static int check_moe(mt_train_args *a, const bool *seen, mt_err *e)
{
    static const char *const moe_only[] = {"--moe-ffn-hidden-size", "--moe-router-topk", "--moe-layer-freq",
        "--moe-router-load-balancing-type", "--moe-aux-loss-coeff", "--moe-z-loss-coeff", "--moe-router-score-function",
        "--moe-router-pre-softmax", "--moe-router-topk-scaling-factor", "--moe-router-dtype", "--moe-expert-capacity-factor",
        "--moe-pad-expert-input-to-capacity", "--moe-token-drop-policy", "--moe-shared-expert-intermediate-size",
        "--moe-shared-expert-gate", "--moe-per-layer-logging", "--expert-model-parallel-size", "--expert-tensor-parallel-size",
        NULL};
    if (!a->num_experts) {
        for (int i = 0; moe_only[i]; i++)
            if (given(seen, moe_only[i])) return mt_err_set(e, "%s goes with --num-experts", moe_only[i]);
        return 0;
    }
    if (!a->disable_bias_linear)
        return mt_err_set(e, "--num-experts: the experts have no biases (Megatron's grouped experts); add --disable-bias-linear");
    if (a->moe_router_topk > a->num_experts)
        return mt_err_set(e, "--moe-router-topk (%d) must not exceed --num-experts (%d)", a->moe_router_topk, a->num_experts);
    if (!a->moe_ffn_hidden_size) a->moe_ffn_hidden_size = a->ffn_hidden_size;
    unsigned char layers[MT_MOE_MAX_LAYERS];
    if (mt_moe_layers_parse(a->moe_layer_freq, a->num_layers, layers, e)) return -1;
    if (a->moe_pad_expert_input_to_capacity && !given(seen, "--moe-expert-capacity-factor"))
        return mt_err_set(e, "--moe-pad-expert-input-to-capacity goes with --moe-expert-capacity-factor");
    if (given(seen, "--moe-router-pre-softmax") && !strcmp(a->moe_router_score_function, "sigmoid"))
        return mt_err_set(e, "--moe-router-pre-softmax applies to --moe-router-score-function softmax");
    if (a->moe_shared_expert_gate && !a->moe_shared_expert_intermediate_size)
        return mt_err_set(e, "--moe-shared-expert-gate goes with --moe-shared-expert-intermediate-size");
    if (a->num_experts % a->expert_model_parallel_size)
        return mt_err_set(e, "--expert-model-parallel-size (%d) must divide --num-experts (%d)",
                          a->expert_model_parallel_size, a->num_experts);
    return check_expert_tensor(a, e);
}

static int parse(mt_train_args *out, int argc, char **argv, mt_err *e)
{
    defaults(&A);
    if (check_unsupported(argc, argv, e)) return -1;
    bool seen[NFLAGS] = {0};
    if (mt_flags_parse(&cmd, argc, argv, NULL, seen, e)) return -1;
    mt_train_args *a = &A;
    static const char *const required[] = {"--num-layers", "--hidden-size", "--num-attention-heads",
                                           "--max-position-embeddings", "--seq-length", "--micro-batch-size", NULL};
    for (int i = 0; required[i]; i++)
        if (!given(seen, required[i])) return mt_err_set(e, "%s is required (try --help)", required[i]);
    if (!a->skip_train && a->lr < 0) return mt_err_set(e, "--lr is required (try --help)");
    if (a->lr < 0) a->lr = 0;
    if (!a->data_path.n && !a->dry_run) return mt_err_set(e, "--data-path is required (try --help)");
    /* Megatron: SwiGLU's two input matrices keep the parameters near those of 4h, a multiple of 64 */
    if (a->ffn_hidden_size == 0) a->ffn_hidden_size = a->swiglu ? a->hidden_size / 24 * 64 : 4 * a->hidden_size;
    if (a->ffn_hidden_size == 0)
        return mt_err_set(e, "--swiglu: the default --ffn-hidden-size int(8 x %d / 3 / 64) x 64 is 0; give --ffn-hidden-size",
                          a->hidden_size);
    if (a->hidden_size % a->num_attention_heads)
        return mt_err_set(e, "--num-attention-heads (%d) must divide --hidden-size (%d)", a->num_attention_heads,
                          a->hidden_size);
    if (a->kv_channels && a->kv_channels != a->hidden_size / a->num_attention_heads)
        return mt_err_set(e, "--kv-channels %d: only hidden size / heads (%d) is implemented", a->kv_channels,
                          a->hidden_size / a->num_attention_heads);
    a->kv_channels = a->hidden_size / a->num_attention_heads;
    if (a->seq_length > a->max_position_embeddings)
        return mt_err_set(e, "--seq-length (%d) must not exceed --max-position-embeddings (%d)", a->seq_length,
                          a->max_position_embeddings);
    if (a->use_rotary_position_embeddings) a->position_embedding_type = "rope";
    if (!strcmp(a->position_embedding_type, "none"))
        return mt_err_set(e, "--position-embedding-type none is not implemented (learned_absolute or rope)");
    if (!a->group_query_attention && given(seen, "--num-query-groups"))
        return mt_err_set(e, "--num-query-groups goes with --group-query-attention");
    if (a->group_query_attention) {
        if (a->num_attention_heads % a->num_query_groups)
            return mt_err_set(e, "--num-query-groups (%d) must divide --num-attention-heads (%d)", a->num_query_groups,
                              a->num_attention_heads);
        if (a->num_query_groups % a->tensor_model_parallel_size)
            return mt_err_set(e, "--tensor-model-parallel-size (%d) must divide --num-query-groups (%d): each rank holds "
                                 "whole query groups", a->tensor_model_parallel_size, a->num_query_groups);
    }
    if (strcmp(a->position_embedding_type, "rope")) {
        static const char *const rope_only[] = {"--rotary-base", "--rotary-percent", NULL};
        for (int i = 0; rope_only[i]; i++)
            if (given(seen, rope_only[i])) return mt_err_set(e, "%s goes with --position-embedding-type rope", rope_only[i]);
    } else {
        int hn = a->hidden_size / a->num_attention_heads, rot = (int)(hn * a->rotary_percent);
        if (rot < 2 || rot % 2)
            return mt_err_set(e, "--rotary-percent %g: the rotary dimension int(%d x %g) = %d must be even and at least 2",
                              a->rotary_percent, hn, a->rotary_percent, rot);
    }
    if (a->add_qkv_bias && !a->disable_bias_linear)
        return mt_err_set(e, "--add-qkv-bias goes with --disable-bias-linear (without it every linear layer has a bias)");
    if (check_moe(a, seen, e)) return -1;
    if (strcmp(a->optimizer, "adam")) return mt_err_set(e, "--optimizer %s is not implemented (adam only)", a->optimizer);
    if (strcmp(a->dataloader_type, "single"))
        return mt_err_set(e, "--dataloader-type %s is not implemented (single only)", a->dataloader_type);
    if (strcmp(a->ckpt_format, "torch"))
        return mt_err_set(e, "--ckpt-format %s is not supported: mt writes and reads Megatron's iter_NNNNNNN/mp_rank_00 "
                             "layout (--ckpt-format torch)", a->ckpt_format);
    if (a->sequence_parallel && a->tensor_model_parallel_size > 1 && a->seq_length % a->tensor_model_parallel_size)
        return mt_err_set(e, "--sequence-parallel: --tensor-model-parallel-size (%d) must divide --seq-length (%d)",
                          a->tensor_model_parallel_size, a->seq_length);
    if (given(seen, "--world-size") && !a->dry_run) return mt_err_set(e, "--world-size applies with --dry-run only");
    if (a->recompute_activations && !a->recompute_granularity) a->recompute_granularity = "selective";
    int full = a->recompute_granularity && !strcmp(a->recompute_granularity, "full");
    if (a->recompute_granularity && !full && a->recompute_method)
        return mt_err_set(e, "--recompute-method applies to --recompute-granularity full only");
    if (full && !a->recompute_method)
        return mt_err_set(e, "--recompute-granularity full needs --recompute-method uniform or block");
    if (!full && given(seen, "--recompute-num-layers"))
        return mt_err_set(e, "--recompute-num-layers applies to --recompute-granularity full only");
    if (full && (a->recompute_num_layers < 1 || a->recompute_num_layers > a->num_layers / a->pipeline_model_parallel_size))
        return mt_err_set(e, "--recompute-num-layers (%d) must be between 1 and the layers of a pipeline stage (%d) with "
                             "--recompute-granularity full", a->recompute_num_layers,
                          a->num_layers / a->pipeline_model_parallel_size);
    if (a->num_layers_per_virtual_pipeline_stage) {
        int per_stage = a->num_layers / a->pipeline_model_parallel_size;
        if (a->pipeline_model_parallel_size < 2)
            return mt_err_set(e, "--num-layers-per-virtual-pipeline-stage needs --pipeline-model-parallel-size 2 or more");
        if (a->num_layers % a->pipeline_model_parallel_size == 0 && per_stage % a->num_layers_per_virtual_pipeline_stage)
            return mt_err_set(e, "--num-layers-per-virtual-pipeline-stage (%d) must divide the layers of a stage (%d)",
                              a->num_layers_per_virtual_pipeline_stage, per_stage);
    }
    if (a->num_layers % a->pipeline_model_parallel_size)
        return mt_err_set(e, "--pipeline-model-parallel-size (%d) must divide --num-layers (%d): stages hold equal layers",
                          a->pipeline_model_parallel_size, a->num_layers);
    /* mixed precision (4.4) */
    if (a->fp16 && a->bf16) return mt_err_set(e, "--fp16 and --bf16 are mutually exclusive");
    if (given(seen, "--loss-scale") && !(a->loss_scale > 0))
        return mt_err_set(e, "--loss-scale %g: must be positive", a->loss_scale);
    if (given(seen, "--loss-scale") && !a->fp16 && !a->bf16)
        return mt_err_set(e, "--loss-scale applies with --fp16 or --bf16 only");
    static const char *const fp8_only[] = {"--fp8-margin", "--fp8-amax-history-len", "--fp8-amax-compute-algo",
                                           "--fp8-recipe", NULL};
    for (int i = 0; fp8_only[i]; i++)
        if (given(seen, fp8_only[i]) && !a->fp8_format) return mt_err_set(e, "%s applies with --fp8-format only", fp8_only[i]);
    static const char *const dyn[] = {"--initial-loss-scale", "--min-loss-scale", "--loss-scale-window", "--hysteresis", NULL};
    for (int i = 0; dyn[i]; i++)
        if (given(seen, dyn[i]) && !a->fp16) return mt_err_set(e, "%s applies to the dynamic loss scaler of --fp16 only", dyn[i]);
    if (!(a->initial_loss_scale > 0) || !(a->min_loss_scale > 0))
        return mt_err_set(e, "--initial-loss-scale and --min-loss-scale must be positive");
    if (a->loss_scale_window != floor(a->loss_scale_window))
        return mt_err_set(e, "--loss-scale-window %g: must be a whole number of steps", a->loss_scale_window);
    /* batch (4.2): one data-parallel rank */
    if (!given(seen, "--global-batch-size")) a->global_batch_size = a->micro_batch_size;
    if (a->global_batch_size % a->micro_batch_size)
        return mt_err_set(e, "--global-batch-size (%lld) must be a multiple of --micro-batch-size (%d) x data-parallel size (1)",
                          (long long)a->global_batch_size, a->micro_batch_size);
    bool iters = given(seen, "--train-iters"), samples = given(seen, "--train-samples");
    if (iters && samples) return mt_err_set(e, "--train-iters and --train-samples are mutually exclusive");
    if (!iters && !samples && !a->skip_train) return mt_err_set(e, "one of --train-iters or --train-samples is required");
    /* schedule (4.3) */
    if (iters) {
        if (given(seen, "--lr-decay-samples") || given(seen, "--lr-warmup-samples"))
            return mt_err_set(e, "--lr-decay-samples/--lr-warmup-samples go with --train-samples, not --train-iters");
    } else if (samples) {
        if (given(seen, "--lr-decay-iters") || given(seen, "--lr-warmup-iters"))
            return mt_err_set(e, "--lr-decay-iters/--lr-warmup-iters go with --train-iters, not --train-samples");
    }
    if (given(seen, "--lr-warmup-fraction") && (given(seen, "--lr-warmup-iters") || given(seen, "--lr-warmup-samples")))
        return mt_err_set(e, "--lr-warmup-fraction and --lr-warmup-iters/--lr-warmup-samples are mutually exclusive");
    /* PyTorch's Adam: betas in [0, 1), eps >= 0; eps 0 divides 0 by 0 where a gradient is 0 */
    if (!(a->adam_beta1 < 1.0)) return mt_err_set(e, "--adam-beta1 %g: must be in [0, 1)", a->adam_beta1);
    if (!(a->adam_beta2 < 1.0)) return mt_err_set(e, "--adam-beta2 %g: must be in [0, 1)", a->adam_beta2);
    if (!(a->adam_eps > 0.0)) return mt_err_set(e, "--adam-eps %g: must be positive", a->adam_eps);
    if (a->min_lr > a->lr && !a->skip_train)
        return mt_err_set(e, "--min-lr (%g) must not exceed --lr (%g)", a->min_lr, a->lr);
    if (!strcmp(a->weight_decay_incr_style, "constant")) {
        if (a->start_weight_decay >= 0 || a->end_weight_decay >= 0) {
            if (a->start_weight_decay != a->end_weight_decay && a->start_weight_decay >= 0 && a->end_weight_decay >= 0)
                return mt_err_set(e, "--weight-decay-incr-style constant needs --start-weight-decay == --end-weight-decay");
        }
        a->start_weight_decay = a->end_weight_decay = a->weight_decay;
    } else if (a->start_weight_decay < 0 || a->end_weight_decay < 0) {
        return mt_err_set(e, "--weight-decay-incr-style %s needs --start-weight-decay and --end-weight-decay",
                          a->weight_decay_incr_style);
    }
    if (a->override_opt_param_scheduler && a->use_checkpoint_opt_param_scheduler)
        return mt_err_set(e, "--override-opt_param-scheduler and --use-checkpoint-opt_param-scheduler are mutually exclusive");
    /* tokenizer */
    int file_tok = !strcmp(a->tokenizer_type, "HuggingFaceTokenizer") || !strcmp(a->tokenizer_type, "TikTokenizer");
    if (!strcmp(a->tokenizer_type, "GPT2BPETokenizer")) {
        if (!a->vocab_file || !a->merge_file)
            return mt_err_set(e, "--tokenizer-type GPT2BPETokenizer needs --vocab-file and --merge-file");
        if (a->vocab_size) return mt_err_set(e, "--vocab-size goes with --tokenizer-type NullTokenizer");
    } else if (file_tok && !a->tokenizer_model) {
        return mt_err_set(e, "--tokenizer-type %s needs --tokenizer-model", a->tokenizer_type);
    } else if (!file_tok && !a->vocab_size) {
        return mt_err_set(e, "--tokenizer-type NullTokenizer needs --vocab-size");
    }
    if (!file_tok && a->tokenizer_model)
        return mt_err_set(e, "--tokenizer-model: not used by --tokenizer-type %s", a->tokenizer_type);
    if (a->tiktoken_pattern && strcmp(a->tokenizer_type, "TikTokenizer"))
        return mt_err_set(e, "--tiktoken-pattern only applies to --tokenizer-type TikTokenizer");
    if (a->tiktoken_special_tokens.n && strcmp(a->tokenizer_type, "TikTokenizer"))
        return mt_err_set(e, "--tiktoken-special-tokens only applies to --tokenizer-type TikTokenizer");
    if (a->overlap_param_gather && !a->use_distributed_optimizer)
        return mt_err_set(e, "--overlap-param-gather needs --use-distributed-optimizer (as in Megatron)");
    if (a->finetune && !a->load) return mt_err_set(e, "--finetune needs --load");
    if (a->exit_on_missing_checkpoint && !a->load) return mt_err_set(e, "--exit-on-missing-checkpoint needs --load");
    *out = A;
    return 0;
}

/* On success the arrays of the flags with several words are the caller's (in out, mt_train_args_free); on an
 * error they are freed here. */
int mt_train_args_parse(mt_train_args *out, int argc, char **argv, mt_err *e)
{
    if (!parse(out, argc, argv, e)) return 0;
    mt_train_args_free(&A);
    return -1;
}

void mt_train_args_free(mt_train_args *a)
{
    free(a->data_path.v);
    free(a->tiktoken_special_tokens.v);
    a->data_path.v = NULL;
    a->tiktoken_special_tokens.v = NULL;
    a->data_path.n = a->tiktoken_special_tokens.n = 0;
}

int64_t mt_train_total_iters(const mt_train_args *a)
{
    if (a->train_iters || !a->train_samples) return a->train_iters;
    return a->train_samples / a->global_batch_size;
}

json_t *mt_train_args_to_json(const mt_train_args *a)
{
    json_t *o = json_object();
    for (const mt_flag *f = flags; f->name; f++) {
        if (f->dst == &ignored_b || f->dst == &ignored_s || f->dst == &ignored_i) continue;
        /* the table points into A; the same offset in *a */
        const char *base = (const char *)&A;
        const void *p = (const char *)a + ((const char *)f->dst - base);
        const char *key = f->name + 2;
        json_t *v = NULL;
        switch (f->type) {
        case MT_F_BOOL: v = json_boolean(*(const bool *)p); break;
        case MT_F_INT: v = json_integer(*(const int *)p); break;
        case MT_F_I64: v = json_integer(*(const int64_t *)p); break;
        case MT_F_DOUBLE: v = json_real(*(const double *)p); break;
        case MT_F_STR:
        case MT_F_CHOICE: {
            const char *s = *(const char *const *)p;
            v = s ? json_string(s) : json_null();
            break;
        }
        case MT_F_STRS: {
            const mt_strs *s = p;
            v = json_array();
            for (int i = 0; i < s->n; i++) json_array_append_new(v, json_string(s->v[i]));
            break;
        }
        }
        if (v && !json_object_get(o, key)) json_object_set_new(o, key, v);
        else if (v) json_decref(v);
    }
    return o;
}

/* The shortest %g that reads back as x, so that 1e-4 shows as 0.0001 and 0.1 as 0.1. */
static void shortest_double(double x, char *out, size_t cap)
{
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(out, cap, "%.*g", prec, x);
        if (strtod(out, NULL) == x) return;
    }
}

void mt_train_args_each(const mt_train_args *a, void (*fn)(const char *flag, const char *value, void *ctx), void *ctx)
{
    char num[40];
    for (const mt_flag *f = flags; f->name; f++) {
        if (f->dst == &ignored_b || f->dst == &ignored_s || f->dst == &ignored_i) continue;
        bool alias = false;   /* a second name of a value (--layernorm-epsilon): once, under the first */
        for (const mt_flag *g = flags; g < f && !alias; g++) alias = g->dst == f->dst;
        if (alias) continue;
        const void *p = (const char *)a + ((const char *)f->dst - (const char *)&A);
        const char *v = num;
        char *joined = NULL;
        switch (f->type) {
        case MT_F_BOOL: v = *(const bool *)p ? "given" : "not given"; break;
        case MT_F_INT: snprintf(num, sizeof num, "%d", *(const int *)p); break;
        case MT_F_I64: snprintf(num, sizeof num, "%lld", (long long)*(const int64_t *)p); break;
        case MT_F_DOUBLE: shortest_double(*(const double *)p, num, sizeof num); break;
        case MT_F_STR:
        case MT_F_CHOICE: v = *(const char *const *)p ? *(const char *const *)p : "not given"; break;
        case MT_F_STRS: {
            const mt_strs *s = p;
            size_t n = 1;
            for (int i = 0; i < s->n; i++) n += strlen(s->v[i]) + 1;
            joined = mt_xcalloc(n, 1);
            for (int i = 0; i < s->n; i++) strcat(strcat(joined, i ? " " : ""), s->v[i]);
            v = s->n ? joined : "not given";
            break;
        }
        }
        fn(f->name, v, ctx);
        free(joined);
    }
}

int mt_train_args_check_model(const mt_train_args *a, const json_t *saved, const char *where, mt_err *e)
{
    static const char *const keys[] = {"num-layers", "hidden-size", "num-attention-heads", "ffn-hidden-size",
                                       "max-position-embeddings", "make-vocab-size-divisible-by", NULL};
    const int vals[] = {a->num_layers, a->hidden_size, a->num_attention_heads, a->ffn_hidden_size,
                        a->max_position_embeddings, a->make_vocab_size_divisible_by};
    for (int i = 0; keys[i]; i++) {
        json_t *v = json_object_get(saved, keys[i]);
        if (!json_is_integer(v)) return mt_err_set(e, "%s: args has no integer \"%s\"", where, keys[i]);
        if (json_integer_value(v) != vals[i])
            return mt_err_set(e, "%s: checkpoint was saved with --%s %lld, this run has --%s %d", where, keys[i],
                              (long long)json_integer_value(v), keys[i], vals[i]);
    }
    /* the architecture: absent in checkpoints written before these options, which are GPT-2 */
    mt_train_args s;
    if (mt_train_args_arch_from_json(saved, &s, where, e)) return -1;
    struct {
        const char *flag;
        int differ;
    } arch[] = {
        {"--normalization", strcmp(s.normalization, a->normalization) != 0},
        {"--position-embedding-type", strcmp(s.position_embedding_type, a->position_embedding_type) != 0},
        {"--swiglu", s.swiglu != a->swiglu},
        {"--group-query-attention", s.group_query_attention != a->group_query_attention},
        {"--num-query-groups", a->group_query_attention && s.num_query_groups != a->num_query_groups},
        {"--untie-embeddings-and-output-weights", s.untie_embeddings_and_output_weights != a->untie_embeddings_and_output_weights},
        {"--disable-bias-linear", s.disable_bias_linear != a->disable_bias_linear},
        {"--add-qkv-bias", s.add_qkv_bias != a->add_qkv_bias},
        {"--num-experts", s.num_experts != a->num_experts},
        {"--moe-ffn-hidden-size", a->num_experts && s.moe_ffn_hidden_size != a->moe_ffn_hidden_size},
        {"--moe-layer-freq", a->num_experts && strcmp(s.moe_layer_freq, a->moe_layer_freq)},
        {"--moe-shared-expert-intermediate-size",
         a->num_experts && s.moe_shared_expert_intermediate_size != a->moe_shared_expert_intermediate_size},
        {"--moe-shared-expert-gate", a->num_experts && s.moe_shared_expert_gate != a->moe_shared_expert_gate},
    };
    for (size_t i = 0; i < sizeof arch / sizeof arch[0]; i++)
        if (arch[i].differ) return mt_err_set(e, "%s: checkpoint was saved with another %s", where, arch[i].flag);
    return 0;
}

/* A string arg of saved that must be one of the choices of its flag; absent or null: dflt. */
static int json_choice(const json_t *saved, const char *key, const char *dflt, const char *where, const char **out,
                       mt_err *e)
{
    json_t *v = json_object_get(saved, key);
    *out = dflt;
    if (!v || json_is_null(v)) return 0;
    const char *s = json_string_value(v);
    for (const mt_flag *f = flags; s && f->name; f++)
        if (!strcmp(f->name + 2, key)) {
            size_t n = strlen(s);
            for (const char *c = f->choices; c && *c; c += strcspn(c, "|"), c += *c == '|')
                if (strcspn(c, "|") == n && !strncmp(c, s, n)) {
                    *out = s;
                    return 0;
                }
        }
    return mt_err_set(e, "%s: \"args.%s\" is not one of the choices of --%s", where, key, key);
}

/* A boolean arg of saved; absent or null: false. */
static int json_flag(const json_t *saved, const char *key, const char *where, bool *out, mt_err *e)
{
    json_t *v = json_object_get(saved, key);
    *out = json_is_true(v);
    if (v && !json_is_null(v) && !json_is_boolean(v)) return mt_err_set(e, "%s: \"args.%s\" is not a boolean", where, key);
    return 0;
}

int mt_train_args_arch_from_json(const json_t *saved, mt_train_args *a, const char *where, mt_err *e)
{
    memset(a, 0, sizeof *a);
    a->rotary_base = 10000;
    a->rotary_percent = 1.0;
    a->num_query_groups = 1;
    if (json_choice(saved, "normalization", "LayerNorm", where, &a->normalization, e) ||
        json_choice(saved, "position-embedding-type", "learned_absolute", where, &a->position_embedding_type, e) ||
        json_flag(saved, "swiglu", where, &a->swiglu, e) ||
        json_flag(saved, "group-query-attention", where, &a->group_query_attention, e) ||
        json_flag(saved, "untie-embeddings-and-output-weights", where, &a->untie_embeddings_and_output_weights, e) ||
        json_flag(saved, "disable-bias-linear", where, &a->disable_bias_linear, e) ||
        json_flag(saved, "add-qkv-bias", where, &a->add_qkv_bias, e) ||
        json_choice(saved, "moe-router-load-balancing-type", "aux_loss", where, &a->moe_router_load_balancing_type, e) ||
        json_choice(saved, "moe-router-score-function", "softmax", where, &a->moe_router_score_function, e) ||
        json_choice(saved, "moe-token-drop-policy", "probs", where, &a->moe_token_drop_policy, e) ||
        json_flag(saved, "moe-router-pre-softmax", where, &a->moe_router_pre_softmax, e) ||
        json_flag(saved, "moe-pad-expert-input-to-capacity", where, &a->moe_pad_expert_input_to_capacity, e) ||
        json_flag(saved, "moe-shared-expert-gate", where, &a->moe_shared_expert_gate, e))
        return -1;
    if (!strcmp(a->position_embedding_type, "none"))
        return mt_err_set(e, "%s: \"args.position-embedding-type\" none is not implemented", where);
    static const struct {
        const char *key;
        int is_int;   /* 0 double, 1 int, 2 int64_t; 3 double, 4 int whose 0 is "not given" */
    } nums[] = {{"rotary-base", 2}, {"rotary-percent", 0}, {"num-query-groups", 1}, {"num-experts", 4},
                {"moe-router-topk", 1}, {"moe-ffn-hidden-size", 4}, {"moe-shared-expert-intermediate-size", 4},
                {"moe-router-topk-scaling-factor", 3}, {"moe-expert-capacity-factor", 3}, {"moe-aux-loss-coeff", 0},
                {"moe-z-loss-coeff", 0}};
    void *dst[] = {&a->rotary_base, &a->rotary_percent, &a->num_query_groups, &a->num_experts, &a->moe_router_topk,
                   &a->moe_ffn_hidden_size, &a->moe_shared_expert_intermediate_size, &a->moe_router_topk_scaling_factor,
                   &a->moe_expert_capacity_factor, &a->moe_aux_loss_coeff, &a->moe_z_loss_coeff};
    for (size_t i = 0; i < sizeof nums / sizeof nums[0]; i++) {
        json_t *v = json_object_get(saved, nums[i].key);
        if (!v || json_is_null(v)) continue;
        const mt_flag *f = NULL;
        for (const mt_flag *g = flags; g->name && !f; g++)
            if (!strcmp(g->name + 2, nums[i].key)) f = g;
        double x = json_is_number(v) ? json_number_value(v) : NAN;
        int zero_unset = nums[i].is_int >= 3, is_int = nums[i].is_int == 1 || nums[i].is_int == 2 || nums[i].is_int == 4;
        if (zero_unset && x == 0) continue;
        if (!(x >= f->min && x <= f->max) || (is_int && !json_is_integer(v)))
            return mt_err_set(e, "%s: \"args.%s\" is not %s in [%g, %g]", where, nums[i].key,
                              is_int ? "an integer" : "a number", f->min, f->max);
        if (nums[i].is_int == 2) *(int64_t *)dst[i] = json_integer_value(v);
        else if (is_int) *(int *)dst[i] = (int)json_integer_value(v);
        else *(double *)dst[i] = x;
    }
    if (a->num_experts) {   /* the MoE layers, checked against the layers saved */
        json_t *f = json_object_get(saved, "moe-layer-freq");
        a->moe_layer_freq = json_is_string(f) ? json_string_value(f) : "1";
        unsigned char layers[MT_MOE_MAX_LAYERS];
        if (mt_moe_layers_parse(a->moe_layer_freq, (int)json_integer_value(json_object_get(saved, "num-layers")), layers, e))
            return mt_err_prefix(e, "%s: \"args.moe-layer-freq\"", where);
        if (a->moe_router_topk < 1 || a->moe_router_topk > a->num_experts)
            return mt_err_set(e, "%s: \"args.moe-router-topk\" %d is not between 1 and the experts (%d)", where,
                              a->moe_router_topk, a->num_experts);
    }
    if (a->group_query_attention && json_integer_value(json_object_get(saved, "num-attention-heads")) % a->num_query_groups)
        return mt_err_set(e, "%s: \"args.num-query-groups\" %d does not divide the attention heads", where,
                          a->num_query_groups);
    return 0;
}
