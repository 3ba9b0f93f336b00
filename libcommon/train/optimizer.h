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
    float *exp_avg, *exp_avg_sq;   /* device, hi - lo floats each: the moments of parameters lo .. hi - 1 */
    float *main;                   /* device, hi - lo floats: the fp32 master of the shard once the optimizer
                                      owns it (mt_adamw_own_master); NULL: the model's */
    size_t lo, hi;                 /* 0, num_params unless sharded (distributed optimizer) */
    mtk_adamw_seg *seg;            /* [lo, hi) as runs of tensors with and without weight decay, from lo */
    int nseg;
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

/* The fp32 master of parameters lo .. hi - 1 (device): the optimizer's own or the model's. */
float *mt_adamw_master(mt_adamw *o);
/* The sum of squares of this rank's master parameters: the shard's when the optimizer owns it, else all. */
double mt_adamw_master_sumsq(mt_adamw *o);

#endif
