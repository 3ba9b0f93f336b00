/* context_parallel.h: the pieces of the GPT model that differ when its sequences are split over
 * context-parallel ranks (Megatron's --context-parallel-size), private to libcommon/model. With one rank
 * each is the plain operation, so the model without context parallelism runs exactly the kernels it ran.
 *
 * Rank r of CP holds, of every sequence of Tg tokens, Megatron's load-balanced chunks r and 2 CP - 1 - r
 * (ring_attention.h's mt_ring_rows), Tl = Tg / CP tokens, in that order: local token i of a micro-batch
 * of B is sequence i / Tl, position start[(i % Tl) / h] + i % h with h = Tl / 2. Everything token-wise
 * (the products, norms, MLP, loss) runs on these Tl tokens as it would on any; what depends on the
 * position takes it from the chunks: the learned positions and the rotary angles (one call per chunk),
 * the hidden dropout's counters (those of the global token, so the masks are the one-rank run's, one
 * call per run of consecutive global tokens), and the attention (ring_attention.h, over the group). The
 * per-token losses are gathered over the group into the whole micro-batch's order, so the caller sees
 * the one-rank run's losses, mask sum and loss.
 *
 * Every function returns 0, or -1 with e set when a collective fails. */
#ifndef MT_MODEL_CONTEXT_PARALLEL_H
#define MT_MODEL_CONTEXT_PARALLEL_H

#include "model/gpt_impl.h"

/* The position in its sequence of local token t (0 .. Tl - 1), and the global index b Tg + position of
 * local token i of the micro-batch. */
int mt_cp_position(const mt_gpt *m, int Tl, int t);
size_t mt_cp_global(const mt_gpt *m, int Tl, size_t i);
/* The hidden dropout of this rank's region rows (mt_tp_tokens of N = B Tl, from mt_tp_first) of
 * buf: forward (dropout of src into dst) or backward (of the gradient src into dst), drop's counters
 * those of the global elements (its offset is used as given without context parallelism). */
void mt_cp_dropout(mt_gpt *m, int forward, void *dst, const void *src, int B, int Tl, const mtk_dropout *drop);
/* mtk_embed_fwd / _bwd of tok [B, Tl] (device) at the chunks' positions. */
void mt_cp_embed_fwd(mt_gpt *m, void *out, const int32_t *tok, const void *wte, const void *wpe, int B, int Tl);
void mt_cp_embed_bwd(mt_gpt *m, float *dwte, float *dwpe, const void *dout, const int32_t *tok, int B, int Tl);
/* mtk_rope_fwd / _bwd of qkv [B, Tl, ...] at the chunks' positions. */
void mt_cp_rope(mt_gpt *m, int forward, void *qkv, int B, int Tl);
/* The causal attention of this rank's heads and tokens: the ring over the group (mt_tp_attention_* with
 * one rank). */
int mt_cp_attention_fwd(mt_gpt *m, void *out, float *lse, const void *qkv, int B, int Tl, const mtk_dropout *drop,
                        mt_err *e);
int mt_cp_attention_bwd(mt_gpt *m, void *dqkv, const void *dout, const void *qkv, const void *out, const float *lse,
                        int B, int Tl, const mtk_dropout *drop, mt_err *e);
/* Every rank's per-token losses (x->d_losses, B Tl of them) gathered into the micro-batch's order: to
 * host [B, Tg] (host non-NULL), else to device [B, Tg] (dev). */
int mt_cp_gather_losses(mt_gpt_ctx *x, int B, int Tl, float *host, float *dev, mt_err *e);

#endif
