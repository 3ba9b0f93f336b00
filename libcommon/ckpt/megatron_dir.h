/* megatron_dir.h: a Megatron-LM `--ckpt-format torch` checkpoint directory read as whole tensors: the
 * tracker, one model_optim_rng.pt per tensor/pipeline rank and, with expert parallelism, expert rank
 * (mp_rank_TT[_PPP][_EEE], torch_ckpt.h; with an expert tensor size below tp only the held pairs),
 * the first rank's args Namespace, iteration and counters, and each tensor of the GPT model assembled
 * from the ranks' slices as model/layout.h partitions it (Megatron's own partitioning). The model's
 * state dict may be the legacy nested one (spec 5.3) or Megatron-Core's flat names (spec 5.4), which are
 * read under the legacy names; `_extra_state` entries are skipped. The optimizer's state (Adam's moments, the
 * fp32 main parameters, the step and the loss scaler) is read where Megatron saved it.
 */
#ifndef MT_CKPT_MEGATRON_DIR_H
#define MT_CKPT_MEGATRON_DIR_H

#include <stdint.h>

#include "ckpt/torch_ckpt.h"
#include "model/layout.h"
#include "util/err.h"

#define MT_MEG_MAX_VP 64   /* model chunks per stage read */

typedef struct mt_meg_rank {
    char *path;                 /* its model_optim_rng.pt */
    mt_tckpt ck;
    int core;                   /* the model's keys are Megatron-Core's */
    int grouped_experts;        /* its experts are TEGroupedMLP's (experts.linear_fc1.weightJ), not SequentialMLP's */
    double version;             /* checkpoint_version: below 2.0 query_key_value rows are in an older order */
    int n;                      /* its model's tensors, under legacy names */
    char **names;
    const mt_pk_tensor **t;
    unsigned char *used;
    /* the optimizer's state of each model tensor (mt_meg_dir_optim): Adam's moments and, from a mixed-precision
     * run, the fp32 main parameter; NULL where there is none */
    const mt_pk_tensor **exp_avg, **exp_avg_sq, **master;
    mt_tckpt dopt;              /* the distributed optimizer's distrib_optim.pt, whose tensors those are (has_dopt) */
    int has_dopt;
    int absent;                 /* a (tensor rank, expert rank) pair no rank of the run held: no file */
    unsigned char *copy;        /* per layout tensor: a slice an earlier rank of the stage holds too (compared) */
} mt_meg_rank;

typedef struct mt_meg_dir {
    char *dir;                  /* the --save directory of Megatron */
    int64_t iteration;          /* MT_CKPT_RELEASE for release/ */
    int tp, pp, n;              /* n = tp pp ep ranks, rank (p ep + x) tp + t */
    int ep, etp;                /* expert-parallel size, expert tensor size (a divisor of tp) */
    int vp;                     /* model chunks per stage (the interleaved schedule: model0 ...), else 1 */
    mt_meg_rank *r;
    const mt_pk *root;          /* the first rank's dict */
    const mt_pk *args;          /* its argparse.Namespace */
    mt_layout *l;               /* each rank's layout (mt_meg_dir_layout) */
    /* the optimizer's state (mt_meg_dir_optim): every rank has Adam's moments of every parameter */
    int has_optim;
    int64_t step;               /* Adam's step */
    double beta1, beta2, eps;
    int has_scaler;             /* a dynamic loss scaler's state (an fp16 run) */
    double scale;
    int64_t growth_tracker, hysteresis_tracker;
} mt_meg_dir;

/* Whether dir has a tracker and a first rank's model_optim_rng.pt. */
int mt_meg_dir_is(const char *dir);
/* Opens every rank of the latest checkpoint of dir (the sizes from the first rank's args; a missing rank
 * names its file). 0, or -1 with e set (nothing left open). */
int mt_meg_dir_open(mt_meg_dir *m, const char *dir, mt_err *e);
/* The ranks' layouts for the model a (padded_vocab_size: the checkpoint's rows), every rank's tensors
 * checked to be there with their slice's shape. 0, or -1 with e set naming the file and key. */
int mt_meg_dir_layout(mt_meg_dir *m, const mt_model_arch *a, mt_err *e);
/* The optimizer's state of every rank, once the layouts are known: Megatron-Core's optimizer state dict
 * (FP32Optimizer: torch's Adam state dict; Float16OptimizerWithFloat16Params: that under 'optimizer' with
 * 'fp32_from_fp16_params' and 'grad_scaler'), whose parameter indices follow the param groups Megatron
 * builds (the weight-decayed parameters, then the biases and 1-D ones, each in the order the model
 * registers them: the legacy model's is the layout's, Megatron-Core's layers register linear_proj before
 * linear_qkv). The distributed optimizer's (DistributedOptimizer.state_dict(): the param groups without their
 * parameters) takes the parameters' state from distrib_optim.pt beside each rank's file
 * (ckpt/megatron_distopt.h); with the experts' optimizer apart (a ChainedOptimizer's list of two states) the
 * file is the list of the dense and the expert buffers' states, None where another directory saved that one
 * (its parameters' state is read from there). No 'optimizer', or one without per-parameter state (transformers' converters
 * write such a dummy): has_optim 0. A state that does not match the model is an error naming the file. 0, or
 * -1. */
int mt_meg_dir_optim(mt_meg_dir *m, mt_err *e);
/* A rank's parameters (l's tensors, into out; their count returned) in the order Megatron's model registers
 * them (named_parameters), which orders the optimizer's state: the legacy model's is the layout's; in
 * Megatron-Core's TransformerLayer (core nonzero) Attention builds linear_proj before SelfAttention builds
 * linear_qkv (whose fused norm comes first), so a layer's output projection leads, and SequentialMLP
 * registers each expert's linear_fc1 then its linear_fc2, expert after expert (TEGroupedMLP, grouped nonzero:
 * every expert's linear_fc1, then every linear_fc2, as the layout holds them). */
int mt_meg_param_order(const mt_layout *l, int core, int grouped, const mt_layout_tensor **out);
/* The whole tensor name (a one-rank legacy name) of global shape into dst: the weights (the fp32 main
 * parameters where the optimizer holds them), or with suffix ".exp_avg" / ".exp_avg_sq" Adam's moments. */
int mt_meg_read(mt_meg_dir *m, const char *name, int ndim, const int64_t *shape, float *dst, mt_err *e);
int mt_meg_read_optim(mt_meg_dir *m, const char *name, const char *suffix, int ndim, const int64_t *shape, float *dst,
                      mt_err *e);
/* Every rank's model held nothing that was not read. */
int mt_meg_check_all_read(mt_meg_dir *m, mt_err *e);
void mt_meg_dir_close(mt_meg_dir *m);

#endif
