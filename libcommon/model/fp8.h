/* fp8.h: FP8 training of the transformer layers' linear products, emulated (Megatron's --fp8-format with
 * Transformer Engine's delayed scaling). Public part: the recipe and mt_gpt_set_fp8; the rest is the
 * model's (gpt.c calls it around its products).
 *
 * What is quantized, as TE's Linear / LayerNormLinear / LayerNormMLP do in a Megatron-Core layer: the four
 * products of each layer (QKV, the attention's dense projection, the MLP's first and second) take their
 * input and their weight through the forward format (E4M3) and their output gradient through the backward
 * format (E4M3 with --fp8-format e4m3, E5M2 with hybrid), each with its own per-tensor scale; the input
 * gradient is dout_q . w_q, the weight gradient dout_q^T . inp_q (TE's fp8 wgrad), the bias gradient the
 * sum of the unquantized output gradient (TE's fused bgrad), the bias added in high precision. Not
 * quantized: the embeddings, the attention core, the norms, the output layer (a plain ColumnParallelLinear
 * in Megatron), an MoE layer's router and its shared expert's gate (plain products in Megatron).
 *
 * An MoE layer (TE's GroupedLinear in Megatron's TEGroupedMLP): its attention's two products as above, its
 * shared expert's two in the MLP's places, and each of the rank's El experts its own input, weight and
 * output gradient of each of its two products, the rows routed to it taken as one tensor. As TE reduces the
 * amaxes of a GroupedLinear's GEMMs by their place in the module, the rank's expert j (of El) shares its
 * amaxes, hence its scales, with expert j of every rank of the amax reduction group: with expert
 * parallelism global expert e has the scales of slot e mod El.
 *
 * Delayed scaling: a tensor is quantized with the scale computed before the pass; the pass records its
 * amax in row 0 of the tensor's history; after each training forward pass the forward tensors' row 0 is
 * reduced (max) over the tensor-, context- and data-parallel ranks (Megatron's amax reduction group) and
 * the histories and scales updated (mtk_fp8_scale_update), and after each backward pass the gradients'
 * likewise. As TE with Megatron's is_first_microbatch, a weight is quantized with the scale it had at
 * the iteration's first micro-batch and its amax recorded then only. A recomputed forward (activation
 * recomputation) quantizes with the scales its pass used and records nothing; a forward that is not in
 * training mode (evaluation) uses the current scales and changes nothing, as TE under torch.no_grad. */
#ifndef MT_MODEL_FP8_H
#define MT_MODEL_FP8_H

#include "comm/comm.h"
#include "kernels.h"
#include "util/err.h"

typedef struct mt_fp8_recipe {
    int on;                 /* 0: no FP8 */
    mtk_fp8 fwd, bwd;       /* e4m3: E4M3 both; hybrid: E4M3 forward, E5M2 gradients */
    int margin;             /* --fp8-margin */
    int history_len;        /* --fp8-amax-history-len */
    mtk_amax_algo algo;     /* --fp8-amax-compute-algo */
} mt_fp8_recipe;

struct mt_gpt;
struct mt_gpt_ctx;

/* FP8 for the model's linear products (before its contexts are made); dp: the data-parallel group the
 * amaxes are reduced over besides the model's tensor and context groups (NULL: one rank). Refused with e
 * set for an ffn narrower than the hidden size per tensor rank. With model chunks (the
 * interleaved schedule) each chunk's tensors are updated after its own passes, as TE's autocast region
 * of each chunk's forward. */
int mt_gpt_set_fp8(struct mt_gpt *m, const mt_fp8_recipe *r, mt_comm *dp, mt_err *e);

/* The state a checkpoint keeps (TE's _extra_state): the forward tensors' scales [SF] and histories
 * [len][SF], the gradients' scales [SB] and histories [len][SB], in the order of mt_gpt_fp8_state_numel's
 * floats: scale_f, hist_f, scale_b, hist_b. SF and SB are the stage's layers' (all its chunks', in order)
 * forward tensors and gradients one layer after another: 8 and 4 of a layer, and in an MoE layer 4 El and
 * 2 El more (mt_gpt_fp8_local_experts). 0 floats without FP8. */
size_t mt_gpt_fp8_state_numel(const struct mt_gpt *m);
/* A layer's forward tensors (*f) and gradients (*b): 8 and 4, and in an MoE layer (moe) with El experts a
 * rank 4 El and 2 El more. */
void mt_fp8_layer_tensors(int moe, int El, int *f, int *b);
/* El: the experts of an MoE layer on this rank (--num-experts / --expert-model-parallel-size), whose FP8
 * tensors an MoE layer has; 0 without FP8 or MoE. */
int mt_gpt_fp8_local_experts(const struct mt_gpt *m);
/* The global layers the state covers: [*first, *first + *n) (the model's stage). */
void mt_gpt_fp8_layers(const struct mt_gpt *m, int *first, int *n);
void mt_gpt_fp8_state_get(struct mt_gpt *m, float *host);
void mt_gpt_fp8_state_set(struct mt_gpt *m, const float *host);

/* ---- the model's side (gpt.c) ---- */

/* A layer's products, in the order of its state's entries: forward tensors 2 p (input) and 2 p + 1
 * (weight), gradient p; an MoE layer's expert e then has forward tensors 8 + 4 e + 2 q (+ 1) and gradients
 * 4 + 2 e + q of its products q (0 the first, 1 the second). The shared expert's are the MLP's. */
enum { MT_FP8_QKV, MT_FP8_PROJ, MT_FP8_FC1, MT_FP8_FC2 };

typedef struct mt_fp8_state mt_fp8_state;
void mt_fp8_free(mtk *k, mt_fp8_state *s);

/* The next training forward pass starts an iteration (mt_gpt_zero_grad). */
void mt_fp8_new_iteration(struct mt_gpt *m);
/* A context's copy of the forward scales its pass used (its chunk's forward tensors: device floats, NULL
 * without FP8), and its bytes (0 without FP8). */
float *mt_fp8_ctx_scales(struct mt_gpt *m, mt_err *e);
size_t mt_fp8_ctx_scale_bytes(const struct mt_gpt *m);
/* The device memory the FP8 state holds (its scales and histories, and the buffer of a quantized weight);
 * 0 without FP8. The same for a model described but not made (the dry run: m's layout and sizes) with
 * amax histories of history_len, and in *ctx_bytes each context's copy of the scales. */
size_t mt_fp8_bytes(const struct mt_gpt *m);
size_t mt_fp8_plan_bytes(const struct mt_gpt *m, int history_len, size_t *ctx_bytes);
/* Before a forward pass: the scales it uses (and at an iteration's first training pass, the weights'). */
void mt_fp8_forward_begin(struct mt_gpt_ctx *x);
/* After a training forward / a backward pass: the amaxes reduced, the histories and scales updated. */
int mt_fp8_forward_end(struct mt_gpt_ctx *x, mt_err *e);
int mt_fp8_backward_end(struct mt_gpt_ctx *x, mt_err *e);
/* Product p of local layer li: its input (n elements) quantized from in into out (may alias); its weight
 * (n elements) into the model's weight buffer (returned; its amax recorded by the iteration's first
 * training forward); its output gradient into out (may alias). */
void mt_fp8_input(struct mt_gpt_ctx *x, int li, int p, void *out, const void *in, size_t n);
const void *mt_fp8_weight(struct mt_gpt_ctx *x, int li, int p, const void *w, size_t n);
void mt_fp8_grad(struct mt_gpt_ctx *x, int li, int p, void *out, const void *in, size_t n);
/* The same for expert e (of the rank's El) of MoE layer li, its product q: its rows' input (n elements; none:
 * nothing recorded), its output gradient; and the El experts' weights of product q (w: El matrices of n
 * elements one after another) quantized into the model's weight buffer, returned. */
void mt_fp8_expert_input(struct mt_gpt_ctx *x, int li, int e, int q, void *out, const void *in, size_t n);
void mt_fp8_expert_grad(struct mt_gpt_ctx *x, int li, int e, int q, void *out, const void *in, size_t n);
const void *mt_fp8_expert_weights(struct mt_gpt_ctx *x, int li, int q, const void *w, size_t n);

#endif
