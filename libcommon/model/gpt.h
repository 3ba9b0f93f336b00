/* gpt.h: the GPT-2 model as Megatron builds it (spec 6.1), over the kernels/ operations.
 *
 * Pre-LayerNorm blocks, learned absolute positions, tanh GeLU, tied input/output embeddings, biases
 * everywhere, LayerNorm eps from the config, vocabulary padded (mt_gpt_padded_vocab). The model (of one
 * rank: the whole, or its tensor-parallel part, mt_gpt_create_tp) owns one contiguous parameter buffer
 * and one gradient buffer of its layout (model/layout.h) on the backend's device (the optimizer and the
 * data-parallel reduction work on them as flat arrays); activations are in contexts (below).
 *
 * Parameter names and shapes are Megatron's legacy (v2) state-dict names (spec 5.3), weights [out, in],
 * QKV rows in the per-head [np, 3, hn] order (checkpoint version 3.0):
 *   language_model.embedding.word_embeddings.weight            [V_pad, h]
 *   language_model.embedding.position_embeddings.weight        [max_pos, h]
 *   language_model.encoder.layers.{i}.input_layernorm.{weight,bias}                  [h]
 *   language_model.encoder.layers.{i}.self_attention.query_key_value.{weight,bias}   [3h, h], [3h]
 *   language_model.encoder.layers.{i}.self_attention.dense.{weight,bias}             [h, h], [h]
 *   language_model.encoder.layers.{i}.post_attention_layernorm.{weight,bias}         [h]
 *   language_model.encoder.layers.{i}.mlp.dense_h_to_4h.{weight,bias}                [f, h], [f]
 *   language_model.encoder.layers.{i}.mlp.dense_4h_to_h.{weight,bias}                [h, f], [h]
 *   language_model.encoder.final_layernorm.{weight,bias}                              [h]
 * in this order in the flat buffer. Dropout as Megatron places it: hidden dropout after the embedding
 * sum and on the attention and MLP outputs before each residual add, attention dropout on the
 * attention probabilities; active only in training mode (mt_gpt_set_dropout).
 */
#ifndef MT_MODEL_GPT_H
#define MT_MODEL_GPT_H

#include <stddef.h>
#include <stdint.h>

#include "comm/comm.h"
#include "kernels.h"
#include "model/layout.h"
#include "util/err.h"

typedef struct mt_gpt_config {
    int num_layers;
    int hidden_size;
    int num_heads;
    int ffn_hidden_size;          /* 4 * hidden_size by default */
    int seq_length;               /* tokens per sample (<= max_position_embeddings) */
    int max_position_embeddings;
    int vocab_size;               /* the tokenizer's, e.g. 50257 */
    int padded_vocab_size;        /* mt_gpt_padded_vocab(vocab_size, divisible_by, tp) */
    float layernorm_epsilon;      /* 1e-5 */
    double init_method_std;       /* 0.02; output projections use std / sqrt(2 * num_layers) */
    int exact_gelu;               /* 0: tanh approximation (Megatron's default fused path) */
    float hidden_dropout;         /* --hidden-dropout (Megatron's default 0.1) */
    float attention_dropout;      /* --attention-dropout (Megatron's default 0.1) */
    int sequence_parallel;        /* --sequence-parallel: with tensor parallelism, the LayerNorm, dropout and
                                     residual regions hold 1/tp of the tokens (spec 7.4) */
    int recompute_granularity;    /* MT_RECOMPUTE_NONE, _SELECTIVE (the attention core: mt's attention never
                                     keeps its probabilities, so nothing changes) or _FULL (below) */
    int recompute_method;         /* with _FULL: MT_RECOMPUTE_UNIFORM (every layer, in chunks of
                                     recompute_num_layers) or MT_RECOMPUTE_BLOCK (the first
                                     recompute_num_layers layers of each stage) */
    int recompute_num_layers;
    /* The LLaMA family's options (Megatron-Core's flags). Zero is GPT-2 in every one of them, so a config
     * that does not set them is GPT-2's. */
    mt_norm_kind norm;            /* --normalization: LayerNorm or RMSNorm (both with layernorm_epsilon) */
    mt_pos_kind position;         /* --position-embedding-type: learned_absolute or rope */
    double rotary_base;           /* --rotary-base (rope; Megatron's default 10000) */
    double rotary_percent;        /* --rotary-percent (rope): the first int(hn x percent) channels of each head
                                     rotate, in the rotate-half convention */
    mt_mlp_kind mlp;              /* --swiglu: silu(gate) x up with dense_h_to_4h = [gate; up], each ffn rows */
    int num_query_groups;         /* --group-query-attention --num-query-groups; 0: num_heads (multi-head) */
    int untie_embeddings_and_output_weights;   /* an output layer of its own (language_model.output_layer) */
    int disable_bias_linear;      /* no biases on the linear layers (QKV, dense, both MLP matrices) */
    int add_qkv_bias;             /* --add-qkv-bias: with disable_bias_linear, QKV's bias still (Qwen) */
    /* Mixture of experts (Megatron-Core's MoE flags; model/moe.h). num_experts 0: a dense model. */
    int num_experts;              /* --num-experts */
    int moe_topk;                 /* --moe-router-topk */
    int moe_ffn_hidden_size;      /* --moe-ffn-hidden-size */
    int moe_shared_ffn;           /* --moe-shared-expert-intermediate-size (0: no shared expert) */
    int moe_shared_gate;          /* --moe-shared-expert-gate */
    unsigned char moe_layers[MT_MOE_MAX_LAYERS];   /* --moe-layer-freq: 1 for the MoE layers */
    int moe_score;                /* --moe-router-score-function: MTK_MOE_SOFTMAX or MTK_MOE_SIGMOID */
    int moe_pre_softmax;          /* --moe-router-pre-softmax */
    double moe_topk_scaling;      /* --moe-router-topk-scaling-factor (0: none) */
    double moe_capacity_factor;   /* --moe-expert-capacity-factor (0: dropless) */
    int moe_pad_to_capacity;      /* --moe-pad-expert-input-to-capacity */
    int moe_drop_position;        /* --moe-token-drop-policy position (else probs) */
    int moe_aux_type;             /* --moe-router-load-balancing-type: MT_MOE_AUX_NONE, _AUX or _SEQ */
    double moe_aux_coeff;         /* --moe-aux-loss-coeff */
    double moe_z_coeff;           /* --moe-z-loss-coeff (0: none) */
    int expert_tensor_parallel_size;   /* --expert-tensor-parallel-size: 0 or tp, the experts' matrices split as
                                          the MLP's; 1 with tp > 1 (and sequence parallelism): each expert whole
                                          on its rank, the MoE layer's routed part on the rank's own rows (moe.h) */
    /* Context parallelism: each sequence split over this many ranks (0 or 1: none; model/context_parallel.h);
     * the activations of a context are then of seq_length / context_parallel_size tokens per sequence. */
    int context_parallel_size;    /* --context-parallel-size */
} mt_gpt_config;

enum { MT_MOE_AUX_NONE, MT_MOE_AUX, MT_MOE_AUX_SEQ };

enum { MT_RECOMPUTE_NONE, MT_RECOMPUTE_SELECTIVE, MT_RECOMPUTE_FULL };
enum { MT_RECOMPUTE_UNIFORM, MT_RECOMPUTE_BLOCK };

/* ceil(vocab / (divisible_by * tp)) * divisible_by * tp: 50257 -> 50304 (tp 1). */
int mt_gpt_padded_vocab(int vocab_size, int divisible_by, int tp);
/* Checks sizes (heads divide hidden, query groups divide heads, seq <= max_pos, positive values, the
 * rotary dimensions); -1 with a message naming the flag. */
int mt_gpt_config_check(const mt_gpt_config *c, mt_err *e);

typedef struct mt_gpt_tensor {
    char name[128];
    size_t offset;   /* in floats, into the parameter / gradient buffers */
    size_t numel;
    int ndim;        /* 1 or 2 */
    int64_t shape[2];
    int no_decay;    /* biases and LayerNorm parameters: weight decay 0 (spec 4.3) */
} mt_gpt_tensor;

/* The model (mt_gpt) is the *weights*: fp32 master parameters in one flat buffer in tensor-table order,
 * a working copy in the backend's activation dtype for the matrices and embeddings when that dtype is
 * not fp32, and the fp32 gradients (same layout) only when created for training. Activations live in
 * *contexts*: an mt_gpt_ctx holds what one micro-batch in flight keeps from forward to backward (several
 * may exist at once, e.g. one per micro-batch of a pipeline schedule); an mt_gpt_infer holds a KV cache
 * for generation and no gradients. Every buffer belongs to the object that allocated it. */
typedef struct mt_gpt mt_gpt;
typedef struct mt_gpt_ctx mt_gpt_ctx;
typedef struct mt_gpt_infer mt_gpt_infer;

enum { MT_GPT_INFER_ONLY = 0, MT_GPT_TRAIN = 1 };
/* Allocates the parameters (and, with MT_GPT_TRAIN, the gradients). Parameters are zero until
 * mt_gpt_init or a load. */
mt_gpt *mt_gpt_create(mtk *k, const mt_gpt_config *config, int mode, mt_err *e);
/* The part of a model split over the tensor-parallel group tp (Megatron-LM paper section 3, spec
 * 7.2-7.3) that rank tp->rank of tp->size holds: the tensors of its layout (model/layout.h, tensor rank
 * tp->rank), with whole heads, a slice of the MLP and of the (padded) vocabulary; forward and backward
 * exchange activations over tp (tensor_parallel.h), whose buffers are the backend's device memory. tp
 * must outlive the model; NULL or a one-rank group is mt_gpt_create. */
mt_gpt *mt_gpt_create_tp(mtk *k, const mt_gpt_config *config, mt_comm *tp, int mode, mt_err *e);
/* The same for pipeline stage `stage` of `stages` (spec 7.5-7.6): the global layers [stage L / stages,
 * (stage + 1) L / stages), the embeddings on the first stage, the final norm, the output layer and the
 * loss on the last, which with tied embeddings holds its own copy of the word embeddings
 * (word_embeddings_for_head, initialized to the same values). See "pipeline stages" below. */
mt_gpt *mt_gpt_create_stage(mtk *k, const mt_gpt_config *config, mt_comm *tp, int stage, int stages, int mode,
                            mt_err *e);
/* The same with vp model chunks (the interleaved schedule, Megatron's virtual pipeline: chunk c of the
 * stage holds the global layers of virtual stage c x stages + stage; model/layout.h); a context
 * (mt_gpt_ctx_new_chunk) runs one chunk. */
mt_gpt *mt_gpt_create_chunks(mtk *k, const mt_gpt_config *config, mt_comm *tp, int stage, int stages, int vp, int mode,
                             mt_err *e);
/* The same with expert parallelism: the MoE layers' experts split over ep (Megatron's expert-model-parallel
 * group; NULL or one rank: none), rank ep->rank holding experts [rank E / size, (rank + 1) E / size) named
 * local_experts.0 ..., and the tokens exchanged with the other ranks' experts by all-to-all (model/moe.h).
 * The experts' tensors are then the end of the flat buffers, from mt_gpt_expert_lo: their gradients are
 * summed over the expert-data-parallel group, the others' over the data-parallel group. */
mt_gpt *mt_gpt_create_ep(mtk *k, const mt_gpt_config *config, mt_comm *tp, mt_comm *ep, int stage, int stages, int vp,
                         int mode, mt_err *e);
size_t mt_gpt_expert_lo(const mt_gpt *m);
/* Context parallelism (config->context_parallel_size = cp->size > 1, Megatron's --context-parallel-size):
 * the model's sequences are split over cp (device memory of the model's kernels: model/device.h's
 * mt_device_comm), rank cp->rank holding Megatron's load-balanced chunks cp->rank and 2 cp->size - 1 - cp->rank
 * of each, and the attention runs over the group by type (ring_attention.h's mt_cp_comm: p2p or
 * all_gather; overlap: the ring's exchanges beside its blocks). Before any context is made; cp must outlive
 * the model. mt_gpt_forward then takes the whole micro-batch (T = seq_length, a multiple of 2 cp->size),
 * computes this rank's tokens, and reports the losses of all of them (gathered over cp): the one-rank
 * model's. The gradients are this rank's tokens' part: the caller sums them over the data x context group.
 * The MoE layers' router statistics (the load-balancing and z losses') are summed over cp, so the auxiliary
 * losses are the whole sequences'; an expert's capacity holds in each rank's tokens, as Megatron's. 0, or -1
 * with e set. */
int mt_gpt_set_context_parallel(mt_gpt *m, mt_comm *cp, int type, int overlap, mt_err *e);
/* With config->expert_tensor_parallel_size below the tensor size (the MoE layers' routing on the rows of the
 * rank's expert-tensor group, its experts split over that group: whole with 1): the tensor x context group
 * (comm/parallel.h's tpcp, as a device communicator), over which the router's statistics are summed; the
 * tensor group until it is set, which is that group without context parallelism. tpcp must outlive the
 * model. */
void mt_gpt_set_router_group(mt_gpt *m, mt_comm *tpcp);
/* With an expert tensor size between 1 and the tensor size: the expert-tensor group (comm/parallel.h's etp,
 * as a device communicator), over which the experts' outputs are partial sums. It must outlive the model. */
void mt_gpt_set_expert_tensor_group(mt_gpt *m, mt_comm *etp);
/* Whether the expert tensor size is below the tensor size: the routers' gradients are then each expert-tensor
 * group's rows' part, summed over the tensor group by mt_gpt_reduce_grads. */
int mt_gpt_experts_grouped(const mt_gpt *m);
/* The bytes the context-parallel attention has sent to the other ranks of the group so far. */
uint64_t mt_gpt_cp_bytes(const mt_gpt *m);
/* The bytes the MoE layers' all-to-alls have sent to the other expert ranks so far (their blocks for the
 * other ranks: the tokens' rows and their counts). */
uint64_t mt_gpt_ep_bytes(const mt_gpt *m);
void mt_gpt_free(mt_gpt *m);
const mt_gpt_config *mt_gpt_get_config(const mt_gpt *m);
mtk *mt_gpt_backend(const mt_gpt *m);

size_t mt_gpt_num_params(const mt_gpt *m);          /* floats in the flat buffer */
int mt_gpt_num_tensors(const mt_gpt *m);
const mt_gpt_tensor *mt_gpt_tensor_at(const mt_gpt *m, int i);
const mt_gpt_tensor *mt_gpt_tensor_find(const mt_gpt *m, const char *name);   /* NULL if absent */
/* The layout behind the table (model/layout.h), and the config's architecture in the layout's terms. */
const mt_layout *mt_gpt_layout(const mt_gpt *m);
mt_model_arch mt_gpt_arch(const mt_gpt_config *c);
float *mt_gpt_params(mt_gpt *m);                     /* device pointers, fp32 */
float *mt_gpt_grads(mt_gpt *m);                      /* NULL unless created with MT_GPT_TRAIN */
mtk_act *mt_gpt_work(mt_gpt *m);                     /* the working copy; NULL when it is the fp32 master */
/* After the master parameters change (init, load, optimizer step): refresh the working copy in the
 * activation dtype (nothing to do in fp32). */
void mt_gpt_params_changed(mt_gpt *m);

/* The distributed optimizer in bf16/fp16 keeps the fp32 master of its own shard (train/optimizer.h), as
 * Megatron's does: the model then frees its whole fp32 master. From then on mt_gpt_params is NULL, the
 * working copy holds every tensor (the optimizer writes its shard, the trainer all-gathers the rest),
 * and the 1-D tensors (biases, norm weights, which the kernels read in fp32) keep their fp32 values in a
 * small buffer of their own, mt_gpt_kept. Nothing to do in fp32 (the master is the working copy): 0
 * without a change. 0, or -1 with e set. */
int mt_gpt_drop_master(mt_gpt *m, mt_err *e);
int mt_gpt_master_dropped(const mt_gpt *m);
/* After mt_gpt_drop_master: the kept fp32 buffer (*n floats; the 1-D tensors in table order). */
float *mt_gpt_kept(mt_gpt *m, size_t *n);
/* Elements of the kept buffer that come before flat offset off (the 1-D tensors' elements below it):
 * the kept values of flat range [lo, hi) are kept[before(lo) .. before(hi)). */
size_t mt_gpt_kept_before(const mt_gpt *m, size_t off);
/* counts[r]: the kept values of flat range [bounds[r], bounds[r + 1]) for r < n (the shards of an
 * all-gather of the kept buffer). */
void mt_gpt_kept_counts(const mt_gpt *m, const size_t *bounds, int n, size_t *counts);
/* Copies the 1-D tensors' values of flat range [lo, hi) from shard (device, shard[0] is element lo)
 * into the kept buffer. */
void mt_gpt_kept_from(mt_gpt *m, const float *shard, size_t lo, size_t hi);

/* Megatron's initialization (spec 6.1) from a deterministic generator seeded with seed: the weight
 * elements, in the order of the whole model's buffer, are std * numpy.random.RandomState(seed mod
 * 2^32).normal() draws rounded to float (std / sqrt(2L) for the output projections); biases 0, LayerNorm
 * weights 1. A tensor-parallel rank draws every element of each tensor and keeps its slice, so its
 * weights are those of the one-rank model with the same padded vocabulary. */
void mt_gpt_init(mt_gpt *m, uint64_t seed);

/* ---- training and evaluation: one context per micro-batch in flight ---- */

/* Activations for micro-batches of up to max_batch sequences of config->seq_length tokens. */
mt_gpt_ctx *mt_gpt_ctx_new(mt_gpt *m, int max_batch, mt_err *e);
/* The same for model chunk `chunk` (0 .. vp - 1): its forward runs that chunk's layers, from the
 * embeddings when it is the first stage's chunk 0 (else from mt_gpt_stage_input), to the loss when it is
 * the last stage's last chunk (else to mt_gpt_stage_output). */
mt_gpt_ctx *mt_gpt_ctx_new_chunk(mt_gpt *m, int chunk, int max_batch, mt_err *e);
void mt_gpt_ctx_free(mt_gpt_ctx *x);

/* The loss of a forward pass: sum over tokens of mask * per-token loss, and sum of the mask. */
typedef struct mt_gpt_loss {
    double sum;
    double count;
} mt_gpt_loss;

/* Forward pass of one micro-batch: tokens and targets are host arrays [B, T] (T <= seq_length,
 * B <= max_batch), loss_mask [B, T] or NULL (all ones). Fills *loss; writes per-token losses to
 * tok_losses (host [B, T]) when non-NULL. The activations are kept in x for mt_gpt_backward. A token
 * or target outside [0, padded_vocab_size), a bad B/T or a kernel error: -1 with a message, and the
 * following backward fails. */
int mt_gpt_forward(mt_gpt_ctx *x, const int32_t *tokens, const int32_t *targets, const float *loss_mask, int B,
                   int T, float *tok_losses, mt_gpt_loss *loss, mt_err *e);
/* mt_gpt_forward without waiting for the device: on the last stage the per-token losses stay in device
 * memory, copied to dev_losses ([B, T] floats from mtk_alloc), and loss->sum is left 0 (loss->count, the
 * mask's sum, is known at once); on the others (dev_losses unused, may be NULL) the output is not waited
 * for either (the pipeline's exchange syncs before it sends). The caller copies the losses of many micro-batches back at once and
 * adds each one's with mt_gpt_loss_sum: the bits of mt_gpt_forward's loss->sum. Errors as there (a
 * kernel error may show only at the caller's copy). */
int mt_gpt_forward_async(mt_gpt_ctx *x, const int32_t *tokens, const int32_t *targets, const float *loss_mask, int B,
                         int T, float *dev_losses, mt_gpt_loss *loss, mt_err *e);
/* sum of mask[i] * losses[i] over n host values, in double in order (mask NULL: all ones). */
double mt_gpt_loss_sum(const float *losses, const float *mask, size_t n);
/* The logits of x's last forward pass (before its backward), host [B, T, padded_vocab_size] fp32 (a
 * model of one tensor rank only). */
int mt_gpt_logits(mt_gpt_ctx *x, float *host, mt_err *e);
/* Backward pass of x's last forward: ACCUMULATES d(scale * loss.sum)/d(params) into the gradients
 * (a trainer averaging over M micro-batches passes scale = 1 / (M * loss.count)). One backward per
 * forward: it turns the kept logits into their gradient in place. */
int mt_gpt_backward(mt_gpt_ctx *x, double scale, mt_err *e);
/* The trainer's hook for overlapping communication with the passes (train/overlap.h): called before local
 * layer `layer`'s forward pass in mt_gpt_forward (phase MT_GPT_BEFORE_FORWARD; not its recomputation in
 * the backward pass) and after its backward pass in mt_gpt_backward (MT_GPT_AFTER_BACKWARD), with the
 * layer's local index over the model's chunks (model/layout.h's layer_start). A non-zero return fails
 * the pass with e. NULL: none (the default). */
enum { MT_GPT_BEFORE_FORWARD, MT_GPT_AFTER_BACKWARD };
typedef int (*mt_gpt_layer_hook)(void *arg, int phase, int layer, mt_err *e);
void mt_gpt_set_layer_hook(mt_gpt *m, mt_gpt_layer_hook hook, void *arg);
/* Starts a step's gradients at zero: the first backward after it stores rather than adds (the product
 * gradients are then not zeroed here at all, only the others). The gradients read as zero only after
 * that backward; mt_gpt_zero_grad is meant to be followed by one. */
void mt_gpt_zero_grad(mt_gpt *m);

/* Training mode (training = 1) applies the config's dropout to x's following forward/backward pairs
 * with masks drawn from key (the trainer derives one key per iteration and micro-batch from --seed, so
 * a resumed run draws the same masks); evaluation mode (0, the default) applies none. */
void mt_gpt_set_dropout(mt_gpt_ctx *x, int training, uint64_t key);

/* ---- mixture of experts (model/moe.h) ---- */

/* The factor of the auxiliary losses' gradients in x's following backward passes, Megatron's
 * MoEAuxLossAutoScaler scale: the loss scale / the micro-batches of the step over all data-parallel ranks
 * (the trainer sets it); 1 until set. */
void mt_gpt_set_moe_loss_scale(mt_gpt_ctx *x, double scale);
/* The sums over the context's MoE layers of its last training forward pass's load-balancing loss and z-loss,
 * each divided by its coefficient (Megatron logs them so); 0 without them. */
void mt_gpt_moe_losses(const mt_gpt_ctx *x, double *load_balancing, double *z);
/* Of x's last training forward pass and its local layer li (model/layout.h's local index), when an MoE
 * layer: its load-balancing loss and z-loss over their coefficients, and the rows each of the E experts got
 * (tokens[E]; with padding, the capacity); 1, or 0 for a dense layer or one of another model chunk. */
int mt_gpt_moe_layer_stats(const mt_gpt_ctx *x, int li, double *load_balancing, double *z, double *tokens);
/* The MoE layers of the whole model (0: dense). */
int mt_gpt_moe_layers(const mt_gpt_config *c);

/* ---- generation: a KV cache, no gradients ---- */

/* A cache for batch sequences of up to max_len tokens (<= max_position_embeddings). */
mt_gpt_infer *mt_gpt_infer_new(mt_gpt *m, int batch, int max_len, mt_err *e);
void mt_gpt_infer_free(mt_gpt_infer *s);
void mt_gpt_infer_reset(mt_gpt_infer *s);   /* empties the cache */
int mt_gpt_infer_len(const mt_gpt_infer *s);  /* tokens in the cache */
/* Appends T tokens to every sequence (tokens host [batch, T]) and writes the logits of the last one,
 * host [batch, padded_vocab_size] (columns from vocab_size on are padding: a sampler ignores them).
 * -1 + message when the cache would overflow, a token is out of range, or a kernel failed. */
int mt_gpt_infer_step(mt_gpt_infer *s, const int32_t *tokens, int T, float *logits, mt_err *e);
/* The same for greedy decoding without logits on the host: each sequence's first largest logit among the
 * first V (the tokenizer's vocabulary; V <= the padded one) and its log-probability over them, chosen on
 * the device (mtk_greedy): ids[batch], lp[batch]. */
int mt_gpt_infer_step_greedy(mt_gpt_infer *s, const int32_t *tokens, int T, int V, int32_t *ids, double *lp, mt_err *e);

/* ---- generation over a paged KV cache: sequences at different positions stepped together ----
 * A pool of blocks of block_size positions each (every layer's keys and values) shared by up to max_seqs
 * sequence slots; a slot takes blocks as it grows (mt_gpt_paged_reserve) and gives them back when it ends
 * (mt_gpt_paged_release). A step runs any mix of runs: a run is new tokens of one slot at consecutive
 * positions, a prompt's chunk or one decoded token; their rows go through every layer together, and each
 * run's last row gives logits. A slot's results do not depend on the other runs of a step beyond the
 * rounding of the products over all the step's rows. */
typedef struct mt_gpt_paged mt_gpt_paged;
typedef struct mt_gpt_run {
    int seq;       /* the slot, 0 .. max_seqs - 1 */
    int pos;       /* the position of its first new token (the slot holds pos tokens already) */
    int count;     /* new tokens (>= 1) */
} mt_gpt_run;
/* A pool of nblocks blocks of block_size positions for max_seqs slots of up to max_len positions each
 * (<= max_position_embeddings), and steps of up to max_tokens new tokens. NULL with e set. */
mt_gpt_paged *mt_gpt_paged_new(mt_gpt *m, int max_seqs, int max_tokens, int max_len, int block_size, int nblocks,
                               mt_err *e);
void mt_gpt_paged_free(mt_gpt_paged *p);
/* Gives slot seq blocks for its positions below len: 0, or -1 (nothing taken) when the pool has too few free
 * blocks or len exceeds max_len. */
int mt_gpt_paged_reserve(mt_gpt_paged *p, int seq, int len);
/* Returns slot seq's blocks to the pool. */
void mt_gpt_paged_release(mt_gpt_paged *p, int seq);
int mt_gpt_paged_free_blocks(const mt_gpt_paged *p);
/* Runs runs[0..n) (distinct slots, each reserved past pos + count, tokens host [sum of counts] in run order)
 * and writes each run's last row's logits, host [n, padded_vocab_size]. -1 + message on a token out of
 * range, a run past its slot's blocks or the step's size, or a kernel failure. */
int mt_gpt_paged_step(mt_gpt_paged *p, const mt_gpt_run *runs, int n, const int32_t *tokens, float *logits, mt_err *e);

/* The mtk_dropout seed of one dropout site under key (counters start at offset 0 at every site):
 * site 0 is the embedding, and layer l has 1 + 3l (attention probabilities), 2 + 3l (attention output)
 * and 3 + 3l (MLP output). seed = splitmix64 finaliser of key + (site + 1) * 0x9E3779B97F4A7C15. */
uint64_t mt_gpt_dropout_seed(uint64_t key, uint64_t site);

/* After a step's backward passes: with sequence parallelism, the gradients of the norms (computed by each
 * rank from its own tokens; with the experts whole, the routers' too) summed over the tensor-parallel group,
 * as Megatron's finalize_model_grads does; nothing otherwise. 0, or -1 with e set. */
int mt_gpt_reduce_grads(mt_gpt *m, mt_err *e);

/* The sum of squares of the gradients in [lo, hi) of the flat buffer that this rank counts in the
 * model-parallel gradient norm: every tensor on tensor rank 0, the split tensors only on the others (a
 * replicated tensor is counted once over the group, as Megatron's clip_grad_norm does), and not the last
 * stage's copy of tied embeddings. The caller sums
 * it over the tensor-parallel (and, with a sharded optimizer, the data-parallel) group. */
double mt_gpt_grad_sumsq(mt_gpt *m, size_t lo, size_t hi);
/* The same into *out (one double of device memory) without a host sync: one mtk_sumsq_spans over the
 * counted runs (the same bits as mt_gpt_grad_sumsq). */
void mt_gpt_grad_sumsq_to(mt_gpt *m, size_t lo, size_t hi, double *out);
/* The same rule for any fp32 device buffer of elements base .. of the flat layout (the parameters, or a
 * shard of their fp32 master): the sum of squares of its counted elements in [lo, hi). */
double mt_gpt_sumsq_counted(mt_gpt *m, const float *buf, size_t base, size_t lo, size_t hi);
/* The same over two ranges, lo .. hi - 1 and lo2 .. hi2 - 1 (a distributed-optimizer shard with experts). */
void mt_gpt_grad_sumsq2_to(mt_gpt *m, size_t lo, size_t hi, size_t lo2, size_t hi2, double *out);

/* ---- pipeline stages ----
 * On a stage that is not the first, mt_gpt_forward takes its input from mt_gpt_stage_input(x) (the
 * previous stage's output, received there before the call) instead of embedding the tokens; on one that
 * is not the last it leaves its output in mt_gpt_stage_output(x) and reports a zero loss (tokens and
 * targets are still checked). Before mt_gpt_backward on a stage that is not the last,
 * mt_gpt_stage_grad(x) must hold the gradient of the output (from the next stage; the scale argument is
 * then unused: the last stage applied it); after it, on a stage that is not the first, it holds the
 * gradient of the input, for the previous stage. Each buffer holds mt_gpt_stage_numel(B, T) elements of
 * the activation dtype (this rank's rows with sequence parallelism: the p2p tensors of Megatron). */
size_t mt_gpt_stage_numel(const mt_gpt *m, int B, int T);
void *mt_gpt_stage_input(mt_gpt_ctx *x);
void *mt_gpt_stage_output(mt_gpt_ctx *x);
void *mt_gpt_stage_grad(mt_gpt_ctx *x);
/* The stage's layers whose forward pass runs again in the backward pass (--recompute-granularity full). */
int mt_gpt_recomputed_layers(const mt_gpt *m);
/* This model's stage, the number of stages, and its global layers [first_layer, first_layer + num_layers). */
void mt_gpt_stage(const mt_gpt *m, int *stage, int *stages, int *first_layer, int *num_layers);
/* The table index of the word embeddings that tied embeddings keep on two stages: the first stage's, or
 * the last stage's copy; -1 elsewhere (and with one stage). Their gradients are summed over the two
 * stages after a step's backward passes (the embedding group's all-reduce), so both copies take the same
 * update; the gradient norm counts the first stage's only. */
int mt_gpt_tied_copy(mt_gpt *m);

/* Without building it: the parameters of the part (tensor rank tp_rank of tp_size, stage of stages, vp
 * model chunks), the bytes of one activation context of each chunk (ctx_bytes[vp]) of max_batch
 * sequences with activations of act_size bytes, and the scratch all the contexts share (*shared_bytes,
 * once), as mt_gpt_create_stage and mt_gpt_ctx_new would allocate them (a memory planner). 0, or -1 with
 * e set. */
int mt_gpt_plan_part(const mt_gpt_config *config, int tp_rank, int tp_size, int stage, int stages, int vp,
                     int max_batch, size_t act_size, size_t *params, size_t *ctx_bytes, size_t *shared_bytes, mt_err *e);
/* The same for expert rank 0 of ep_size (the experts split over ep_size ranks, every one holding as many),
 * with FP8 when fp8_history > 0 (its amax histories' length: model/fp8.h's state and buffers counted in
 * *shared_bytes and ctx_bytes); *expert_params (unless NULL): how many of *params are its experts' (the flat
 * buffer's end). */
int mt_gpt_plan_part_ep(const mt_gpt_config *config, int tp_rank, int tp_size, int ep_size, int stage, int stages,
                        int vp, int max_batch, size_t act_size, int fp8_history, size_t *params, size_t *expert_params,
                        size_t *ctx_bytes, size_t *shared_bytes, mt_err *e);

/* Bytes of device memory held for parameters (with the working copy), gradients, and the activations
 * and KV caches of the live contexts (memory reports). */
void mt_gpt_memory(const mt_gpt *m, size_t *param_bytes, size_t *grad_bytes, size_t *act_bytes);

#endif
