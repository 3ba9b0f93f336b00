/* tensor_parallel.h: the pieces of the GPT model that differ when it is split over tensor-parallel ranks
 * (Megatron-LM paper, section 3; spec 7.1-7.4), private to libcommon/model. With one rank each is the
 * plain operation, so the one-rank model runs exactly the kernels it always ran.
 *
 *   - column-parallel products (QKV, the MLP's first layer, the logits) take the whole input and give
 *     this rank's columns; their input gradient is a partial sum that mt_tp_input_grad completes (the
 *     backward of Megatron's copy_to_tensor_model_parallel_region);
 *   - row-parallel products (the attention's dense layer, the MLP's second layer) multiply this rank's
 *     columns of the input, sum over the ranks, then add the bias once (reduce_from_..._region);
 *   - the attention runs over this rank's whole heads; its dropout counters are those of the global head
 *     index, so that a split run draws the masks of the one-rank run;
 *   - the word embedding holds this rank's vocabulary rows: a lookup gives zero for other rows and the
 *     ranks' results are summed, the position embedding added by one rank (x + 0 is exact, so the sum
 *     equals the one-rank lookup bit for bit);
 *   - the cross-entropy over vocabulary shards: the row maximum (MAX over the ranks), the sum of
 *     exponentials and the target's logit (SUM), then the loss and this rank's part of dlogits. The
 *     logits are never gathered.
 *
 * Sequence parallelism (--sequence-parallel): the regions between the products (LayerNorms, dropout,
 * residual adds, the embedding's output) hold this rank's 1/tp of the micro-batch's N = B x T tokens,
 * rows [r N/tp, (r+1) N/tp) of the [N, C] activations (mt's activations are token-major, so this is
 * Megatron's sequence split of [s, b, h] with the batch folded in). Each sum over the ranks becomes a
 * reduce-scatter of the rows, and each product's input an all-gather of them (and the reverse in the
 * backward). A context keeps only this rank's rows of every region, the LayerNorm outputs included: the
 * column-parallel products gather them again in the backward pass for their weight gradients
 * (mt_tp_gathered), into a scratch buffer the backward pass has free at that point. The hidden dropout of a region draws the counters of its global elements. The gradients of
 * the replicated tensors used on a rank's rows only (the LayerNorms) are summed over the group once per
 * step (mt_gpt_reduce_grads).
 *
 * Buffers called "full" hold [N, C]; this rank's rows of one are mt_tp_local(full). Every function
 * returns 0, or -1 with e set when a collective fails (kernel errors stay sticky in the backend).
 */
#ifndef MT_MODEL_TENSOR_PARALLEL_H
#define MT_MODEL_TENSOR_PARALLEL_H

#include "model/gpt_impl.h"

/* The tokens of a micro-batch of N that this rank's regions hold, and the first of them. */
int mt_tp_tokens(const mt_gpt *m, int N);
size_t mt_tp_first(const mt_gpt *m, int N);
/* This rank's rows of a full [N, C] activation buffer (full itself without sequence parallelism). */
void *mt_tp_local(const mt_gpt *m, void *full, int N, int C);
/* A product's input: with sequence parallelism every rank's rows of full (this rank's written at
 * mt_tp_local) gathered in place; otherwise nothing to do. */
int mt_tp_gather(mt_gpt *m, void *full, int N, int C, mt_err *e);
/* A column-parallel product's input from this rank's rows `local` [mt_tp_tokens, C]: with sequence
 * parallelism they are copied to their place in full (a free [N, C] buffer) and every rank's gathered
 * around them, and full is returned; without it local holds every row and is returned as it is. NULL
 * (e set) when the gather fails. The forward pass gathers a LayerNorm's output this way for its product,
 * and the backward pass again for the product's weight gradient: a context keeps this rank's rows only. */
const void *mt_tp_gathered(mt_gpt *m, void *full, const void *local, int N, int C, mt_err *e);
/* local [mt_tp_tokens, C] copied to this rank's rows of full (a free [N, C] buffer; nothing to copy where it is
 * already there), and full returned: the input of an operation that reads only this rank's rows of a full
 * buffer (an MoE layer whose experts are whole, without a shared expert: moe.h). */
void *mt_tp_placed(mt_gpt *m, void *full, const void *local, int N, int C);
/* A row-parallel product: full [N, OC] = inp [N, Cl] . w [OC, Cl]^T summed over the ranks, then + bias on
 * this rank's rows (mt_tp_local(full); the whole of it without sequence parallelism). */
int mt_tp_row_linear_fwd(mt_gpt *m, void *full, const void *inp, const void *w, const float *bias, int N, int Cl,
                         int OC, mt_err *e);
/* The partial input gradient full [N, C] of a column-parallel product summed over the ranks; with sequence
 * parallelism only this rank's rows are (reduce-scatter). */
int mt_tp_input_grad(mt_gpt *m, void *full, int N, int C, mt_err *e);
/* The gradient of a row-parallel product's output from this rank's rows dlocal: *dout = dlocal without
 * sequence parallelism, else the rows of every rank gathered into full. */
int mt_tp_output_grad(mt_gpt *m, const void *dlocal, void *full, int N, int C, const void **dout, mt_err *e);
/* local [mt_tp_tokens, C] = the embedding sum of the tokens tok (device; B x T of them); scratch: a full
 * [N, C] buffer (unused without sequence parallelism). */
int mt_tp_embed_fwd(mt_gpt *m, void *local, void *scratch, const int32_t *tok, int B, int T, mt_err *e);
/* The embeddings' gradients from this rank's rows dlocal; scratch as above. */
int mt_tp_embed_bwd(mt_gpt *m, const void *dlocal, void *scratch, const int32_t *tok, int B, int T, mt_err *e);
/* Causal attention over this rank's heads of qkv [B, T, groups, heads / groups + 2, HS] (multi-head:
 * [B, T, heads, 3, HS]) -> out [B, T, heads * HS]. */
void mt_tp_attention_fwd(mt_gpt *m, void *out, float *lse, const void *qkv, int B, int T, const mtk_dropout *drop);
void mt_tp_attention_bwd(mt_gpt *m, void *dqkv, const void *dout, const void *qkv, const void *out, const float *lse,
                         int B, int T, const mtk_dropout *drop);
/* The losses of x's logits [N, vocab / tp] against x's targets into x->d_losses (row statistics kept in
 * x->xent for the backward). */
int mt_tp_xent_fwd(mt_gpt_ctx *x, int N, mt_err *e);
/* x's logits become this rank's dlogits in place, scaled per row by x->d_dscale. */
int mt_tp_xent_bwd(mt_gpt_ctx *x, int N, mt_err *e);

#endif
