/* optimizer.h: AdamW over the model's flat parameter buffer, with Megatron's parameter groups and
 * gradient clipping (spec 4.3).
 *
 * The exp_avg / exp_avg_sq moments live on the backend's device in the parameter buffer's layout.
 * Biases and LayerNorm parameters (tensor no_decay) get weight decay 0; the global L2 norm of all
 * gradients is computed before clipping (the logged "grad norm"), and the gradients are scaled by
 * clip / (norm + 1e-6) when that is below 1.
 */
#ifndef MT_TRAIN_OPTIMIZER_H
#define MT_TRAIN_OPTIMIZER_H

#include <stdint.h>

#include "kernels.h"
#include "model/gpt.h"

typedef struct mt_adamw {
    mtk *k;
    mt_gpt *model;
    float *exp_avg, *exp_avg_sq;   /* device, mt_adamw_count floats each: the moments of parameters lo .. hi - 1,
                                      then those of lo2 .. hi2 - 1 */
    float *main;                   /* device, mt_adamw_count floats: the fp32 master of the shard once the
                                      optimizer owns it (mt_adamw_own_master); NULL: the model's */
    size_t lo, hi;                 /* 0, num_params unless sharded (distributed optimizer) */
    size_t lo2, hi2;               /* a second range of the shard (the experts' with expert parallelism), or
                                      empty (lo2 == hi2) */
    mtk_adamw_seg *seg;            /* [lo, hi) as runs of tensors with and without weight decay, from lo */
    int nseg;
    mtk_adamw_seg *seg2;           /* [lo2, hi2) the same, from lo2 */
    int nseg2;
    int64_t step;                  /* updates taken (bias correction uses step + 1 on the next) */
    double beta1, beta2, eps, clip_grad;
} mt_adamw;

int mt_adamw_init(mt_adamw *o, mtk *k, mt_gpt *model, double beta1, double beta2, double eps, double clip_grad,
                  mt_err *e);
void mt_adamw_free(mt_adamw *o);

/* One update from the accumulated gradients with learning rate lr and weight decay wd (decay params
 * only). Returns the pre-clip global gradient norm; a non-finite norm skips the update and returns it
 * (the caller counts a nan iteration). */
double mt_adamw_step(mt_adamw *o, double lr, double wd);
/* The same with gradients that carry a loss scale: they are multiplied by unscale (1 / loss scale) first,
 * and the returned norm is that of the unscaled gradients. unscale 1.0 is mt_adamw_step exactly. */
double mt_adamw_step_unscale(mt_adamw *o, double lr, double wd, double unscale);

/* The distributed optimizer's shard: from now on the moments (zeroed) cover parameters lo .. hi - 1 only
 * and an update changes only those. 0, or -1 with e set. */
int mt_adamw_shard(mt_adamw *o, size_t lo, size_t hi, mt_err *e);
/* The same with a shard of two ranges, lo .. hi - 1 and lo2 .. hi2 - 1 (hi <= lo2): with expert parallelism
 * the shard of the dense parameters over the data-parallel ranks and that of the experts over the
 * expert-data-parallel ranks. */
int mt_adamw_shard2(mt_adamw *o, size_t lo, size_t hi, size_t lo2, size_t hi2, mt_err *e);
/* Parameters held by this optimizer: (hi - lo) + (hi2 - lo2). */
size_t mt_adamw_count(const mt_adamw *o);
/* Whether the shard is the whole buffer (no distributed optimizer). */
int mt_adamw_whole(const mt_adamw *o);
/* The distributed optimizer in bf16/fp16, as Megatron's: the optimizer takes the fp32 master of its
 * shard (copied from the model's) and the model drops its whole one (mt_gpt_drop_master); from then on
 * an update writes the shard's master and its working copy, and the 1-D tensors' fp32 values the model
 * keeps (mt_gpt_kept_from). Nothing to do in fp32 or unsharded. 0, or -1 with e set. */
int mt_adamw_own_master(mt_adamw *o, mt_err *e);
/* The update of mt_adamw_step_unscale with the global (unscaled) gradient norm given (computed over the
 * shards by the caller): clipping by it, the gradients multiplied by unscale, AdamW on parameters
 * lo .. hi - 1. Returns norm; no update when it is not finite. With a shard, the model's working copy
 * is left to the caller to refresh (mt_gpt_params_changed) once every shard is all-gathered. */
double mt_adamw_update(mt_adamw *o, double lr, double wd, double norm, double unscale);

/* The fp32 master of parameters lo .. hi - 1 (device): the optimizer's own or the model's (that of
 * lo2 .. hi2 - 1 follows at hi - lo in the optimizer's own; in the model's it is at lo2). */
float *mt_adamw_master(mt_adamw *o);

#endif
