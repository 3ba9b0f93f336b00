/* moe.h: the mixture-of-experts layer of the GPT model (Megatron-Core's MoELayer), private to the model:
 * what the MoE layers of one micro-batch keep between the passes, their forward and backward over the
 * kernels' MoE operations, and the load-balancing and z losses they add.
 *
 * Forward, from x = the layer's second norm output (every token of the micro-batch, N = B T rows):
 * the router's fp32 logits x . W_router^T, the top-k routing (softmax after or before the top-k, or
 * sigmoid), the choices grouped by expert (dropless, or at most ceil(N K / E x capacity factor) per expert
 * with the drop policy, optionally padded), the experts' grouped products with the model's activation
 * between them, and out = for each token the sum over its kept choices of prob x expert output; plus the
 * shared expert on every token (times sigmoid(x . gate) with the gate). In training the load-balancing
 * loss (aux_loss over the micro-batch, or seq_aux_loss per sequence) and the z-loss of each layer are
 * computed for the log and their gradients added in the backward pass, scaled as Megatron's
 * MoEAuxLossAutoScaler (mt_gpt_set_moe_loss_scale). The experts' counts come back to the host each
 * forward pass (one sync per MoE layer, as Megatron's dispatcher does), for the grouped products. */
#ifndef MT_MODEL_MOE_H
#define MT_MODEL_MOE_H

#include "model/gpt_impl.h"

typedef struct mt_moe_ctx mt_moe_ctx;

/* Bytes of device memory of the MoE state for passes of up to ntok tokens in up to max_batch sequences
 * with `slots` layer slots; 0 for a model without MoE layers among its local ones. */
size_t mt_moe_ctx_bytes(const mt_gpt *m, size_t ntok, int max_batch, int slots);
/* That state, recording the losses of nl local layers; NULL without MoE layers (not an error), or NULL
 * with *failed set and e's message (nothing done when *failed is already set). */
mt_moe_ctx *mt_moe_ctx_new(mt_gpt *m, size_t ntok, int max_batch, int slots, int nl, int *failed, mt_err *e);
size_t mt_moe_bytes(const mt_moe_ctx *mc);   /* its device memory */
/* With sequence parallelism, an [N, C] buffer the backward pass gathers its input into (NULL otherwise). */
void *mt_moe_gather_buffer(mt_moe_ctx *mc);
/* The most rows the experts' side of ntok tokens takes (ntok x top-k, or the experts' capacities padded),
 * and with expert parallelism that of every expert rank's tokens: the rows this rank's experts may get. */
size_t mt_moe_rows_max(const mt_gpt *m, size_t ntok);
void mt_moe_ctx_free(mt_moe_ctx *mc);

/* Global layer l's MoE block on the micro-batch of B x T tokens: out [N, C] (assigned; may be x's buffer)
 * from x [N, C] (every row: with sequence parallelism, gathered); with tensor parallelism out is this
 * rank's partial sum, for the caller to sum over the ranks. With an expert tensor size below tp under
 * sequence parallelism (gpt_impl.h's experts_grouped; experts_whole with 1) the router, the experts and the
 * all-to-all take only the rows of this rank's expert-tensor group (this rank's own with 1), whose rows of
 * out get the routed output (split over the group, a partial sum), the other rows none: out is still a
 * partial sum over the ranks with the shared expert's part. The activations kept in slot s, local layer
 * li's losses recorded (training). fp8: the pass's context when the model has FP8 (model/fp8.h: the experts'
 * and the shared expert's products quantized), else NULL. 0, or -1 with e set. */
int mt_moe_forward(mt_moe_ctx *mc, struct mt_gpt_ctx *fp8, int s, int li, int l, const void *x, void *out, int B, int T,
                   int training, mt_err *e);
/* Whether the MoE layers read and write only this rank's rows: the experts whole and no shared expert (no
 * exchange over the tensor group in the layer, as Megatron's with an expert tensor size of 1); x and dout
 * then need only this rank's rows, and out and dx are whole on them (the other rows untouched), with no sum
 * over the ranks to follow. */
int mt_moe_rows_only(const mt_gpt *m);
/* Its backward: dx [N, C] (assigned; with tensor parallelism a partial sum for the caller to sum over the
 * ranks; with an expert tensor size below tp, the routed part on the group's rows only) from dout [N, C]
 * (every row), the weight gradients assigned or added as gm says; scale: the factor of the auxiliary
 * losses' gradients; fp8 and li as the forward's. */
int mt_moe_backward(mt_moe_ctx *mc, struct mt_gpt_ctx *fp8, int s, int li, int l, const void *x, const void *dout,
                    void *dx, int B, int T, double scale, mtk_grad_mode gm, int training, mt_err *e);
/* Local layer li's load-balancing loss / coefficient, z-loss / coefficient and rows per expert (tokens[E])
 * of the last forward pass. */
void mt_moe_layer_stats(const mt_moe_ctx *mc, int li, double *lb, double *z, double *tokens);
/* The sums over the local layers of the last forward pass's load-balancing loss / coefficient and z-loss /
 * coefficient (0 without them). */
void mt_moe_losses(const mt_moe_ctx *mc, double *lb, double *z);

#endif
