/* megatron_export.h: an mt checkpoint written as a Megatron-LM `--ckpt-format torch` checkpoint directory
 * (mt-ckpt-convert --to megatron): the tracker, then one model_optim_rng.pt per tensor/pipeline rank and,
 * with expert parallelism, expert rank (iter_NNNNNNN/mp_rank_TT[_PPP][_EEE], torch_ckpt.h) holding the args Namespace (mt's args under
 * Megatron's attribute names, with the sizes of the layout written, padded_vocab_size and params_dtype),
 * checkpoint_version 3.0, the iteration, the rank's model state dict, the learning-rate schedule
 * (opt_param_scheduler) and the floating-point operations so far. The model's keys are the legacy GPT
 * model's (language_model.embedding / .encoder, word_embeddings_for_head) or Megatron-Core's GPTModel's
 * with Transformer Engine's fused layer norms (decoder.layers.N.self_attention.linear_qkv.layer_norm_weight,
 * `_extra_state` entries None), and the optimizer's state where the checkpoint has it, as Megatron-Core's
 * non-distributed optimizer saves it (see mt_meg_dir_optim). No RNG state is written: Megatron continues
 * from it with --no-load-rng.
 */
#ifndef MT_CKPT_MEGATRON_EXPORT_H
#define MT_CKPT_MEGATRON_EXPORT_H

#include "ckpt/megatron_dir.h"
#include "ckpt/open_model.h"
#include "ckpt/reshard.h"
#include "util/err.h"

typedef enum { MT_MEG_KEYS_LEGACY, MT_MEG_KEYS_MCORE } mt_meg_keys;

/* Writes the opened checkpoint mc as the Megatron-LM checkpoint directory out (absent or empty; it
 * appears complete or not at all) at tensor size tp and pipeline size pp, a model with experts over ep expert
 * ranks (1: none; directories mp_rank_TT[_PPP]_EEE above 1) with each expert split over etp ranks (0: tp; 1: whole
 * in the directory of every tensor rank; then the optimizer's state is a ChainedOptimizer's, the dense
 * parameters' and the experts', as it is for ep > 1) (chunk_layers > 0: the interleaved
 * schedule's model chunks of that many layers, model0 ... per rank), with the model's keys of
 * family keys and tensors of dtype ("fp32", "bf16", "fp16"; NULL: the run's, as Megatron saves its
 * parameters), and the optimizer's state unless no_optim (or the checkpoint has none). *dtype_out: the
 * dtype's name; *with_optim: whether the optimizer's state was written. 0, or -1 with e set. */
int mt_meg_export_ckpt(mt_model_ckpt *mc, const char *out, int tp, int pp, int ep, int etp, int chunk_layers,
                       mt_meg_keys keys, const char *dtype, int no_optim, mt_ckpt_progress *progress, const char **dtype_out,
                       int *with_optim, mt_err *e);

/* The seed whose RNG state --to megatron writes (*seed: the run's --seed, default 1234): 1 when Megatron
 * seeds every stage with it (0 < seed + 100 x the last stage < 2^32), 0 when it writes none. */
int mt_meg_export_rng_seed(const mt_model_ckpt *mc, int pp, int64_t *seed);

/* The Megatron-Core GPTModel name of a legacy layout name (layer indices as given; moe_layer: the layer is a
 * mixture of experts), or NULL for a name that has none. */
const char *mt_meg_core_name(const char *legacy, int moe_layer, char *out, size_t cap);

#endif
