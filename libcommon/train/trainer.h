/* trainer.h: the training state and step of one run (Megatron's train_step), as a library.
 *
 * mt_trainer holds what a run carries from iteration to iteration: the model, AdamW, the schedule, the
 * data and the counters that a checkpoint restores (marked ckpt; saved and loaded by train_ckpt.h).
 * mt-train is the flags, the wiring and the reporting around it (log lines, TensorBoard, metrics,
 * signals).
 *
 * One step (mt_trainer_step) is, in order:
 *   1. zero the gradients;
 *   2. for each of this rank's num_micro micro-batches (global batch / (micro batch x data-parallel
 *      size)): read it as Megatron's sampler assigns it (micro-batch m of data-parallel rank r is
 *      samples consumed_train + (m * dp_size + r) * micro_batch_size ...), set the dropout key of
 *      (iteration, m * dp_size + r) (the masks of a one-rank run), forward, backward with loss scale
 *      (mixed-precision loss scale) / (num_micro * dp_size) (gradient accumulation), in the order of
 *      the pipeline schedule (pipeline.h: with one stage, forward and backward of each in turn; with
 *      several, 1F1B, the activations sent to the next stage and their gradients received from it);
 *      then the sequence-parallel norms' gradients summed over the tensor ranks and tied embeddings'
 *      over the first and last stage; the loss sums are the last stage's, summed over the pipeline;
 *   3. with --check-for-nan-in-loss-and-grad (the default) a non-finite loss is an error;
 *      data parallelism reduces the gradients across ranks here (grad_sync.h: bucketed all-reduce, or
 *      reduce-scatter into each rank's shard with --use-distributed-optimizer; with --overlap-grad-reduce
 *      the buckets started during the backward passes as they became final, overlap.h, are waited for),
 *      and the loss sum and token count with them, before the check, so every rank sees the same loss;
 *   4. the optimizer step: the gradients are unscaled (x 1 / loss scale), global grad norm, clipping,
 *      AdamW update; a non-finite norm skips the update: with a loss scaler (--fp16, --loss-scale) that
 *      is an overflow and the scaler backs off (loss_scaler.h), otherwise an error with the check on; the distributed optimizer (ZeRO-1) updates only this rank's shard
 *      of the parameters (its AdamW moments exist only for it) and all-gathers the parameters (with
 *      --overlap-param-gather: starts their gathers, waited for bucket by bucket in the next step's forward
 *      passes, overlap.h);
 *   5. the schedule steps when the update was taken; iteration, consumed samples and FLOPs advance.
 */
#ifndef MT_TRAIN_TRAINER_H
#define MT_TRAIN_TRAINER_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "comm/comm.h"
#include "config/train_args.h"
#include "data/batch.h"
#include "data/gpt_dataset.h"
#include "kernels.h"
#include "model/evaluate.h"
#include "model/gpt.h"
#include "comm/parallel.h"
#include "train/grad_sync.h"
#include "train/loss_scaler.h"
#include "train/optimizer.h"
#include "train/overlap.h"
#include "train/schedule.h"
#include "util/err.h"

typedef struct mt_trainer {
    mt_train_args a;
    mtk *k;
    mt_gpt *model;
    struct mt_pipeline *pipe; /* the step's schedule and the micro-batches' contexts (train/pipeline.h) */
    int vp;                 /* model chunks per stage (--num-layers-per-virtual-pipeline-stage; else 1) */
    mt_gpt_config cfg;
    mt_adamw opt;            /* (ckpt) moments, step */
    mt_sched sched;          /* (ckpt) num_steps */
    mt_loss_scaler scaler;   /* (ckpt, dynamic) --fp16 / --loss-scale; a constant 1.0 otherwise */
    mt_gpt_data data;
    mt_batch batch;
    int64_t vocab_size, eod;
    int num_micro;           /* this rank's micro-batches: global batch / (micro batch x dp_size) */
    /* the parallel context (comm/parallel.h), whose groups the trainer reads: par->dp the data-parallel
     * group, par->tp the tensor-parallel one (the model's other parts), par->pp the pipeline (rank =
     * stage), par->world every rank of the job; mt_trainer_open_par's, or own (one rank) */
    const mt_parallel *par;
    mt_parallel own;         /* the one-rank context when the trainer made it (mt_trainer_open) */
    mt_comm *emb;            /* the embedding group: the first and the last stage (NULL on one stage) */
    /* dp and tp for buffers on the device (the gradients and parameters, the model's activations): NCCL
     * or host-staged on a GPU or the simulator (model/device.h), the group itself on cpu; NULL on one
     * rank. dp and tp themselves carry host values (loss sums, the grad norm). */
    mt_comm *dev_dp, *dev_tp, *dev_pp, *dev_emb;   /* dev_dp: the gradients' group, data x context parallel */
    mt_comm *dev_cp;         /* the context-parallel group (NULL without context parallelism) */
    mt_comm *dev_ep, *dev_edp;  /* expert parallelism (NULL without): the experts' all-to-all, their gradients' sum */
    int ep_size;
    int experts_apart;       /* expert parallelism, or an expert tensor size other than tp: the experts' gradients
                                (the buffer's end) over the expert-data-parallel group, gs_exp */
    int experts_whole;       /* expert tensor size 1 under tp > 1: each expert whole on its tensor rank */
    int experts_grouped;     /* expert tensor size below tp: the MoE layers route each expert-tensor group's rows */
    mt_comm *dev_tpcp;       /* with experts_grouped and context parallelism: the router's tensor x context group */
    mt_comm *dev_etp;        /* with 1 < expert tensor size < tp: the expert-tensor group (the experts' partial sums) */
    int dp_rank, dp_size, tp_rank, tp_size, pp_rank, pp_size;   /* par's groups' ranks and sizes */
    int cp_size;             /* context-parallel ranks (1: none) */
    int gdp_rank, gdp_size;  /* in the data x context group (dp's without context parallelism): the gradients'
                                reduction, the distributed optimizer's shards */
    mt_grad_sync gs;         /* gradient buckets over dp (with expert parallelism: the buffer before the experts') */
    mt_grad_sync gs_exp;     /* with expert parallelism: the experts' gradients, over the expert-data-parallel group */
    uint64_t ep_step_bytes;  /* the last step's bytes sent to the expert-parallel group */
    uint64_t cp_step_bytes;  /* ... and to the context-parallel group (keys, values, their gradients, losses) */
    uint64_t ep_norm_bytes;  /* so far, by the grad norm's sums over it */
    double *moe_layer;       /* --moe-per-layer-logging: the step's sums (mt_step_result's moe_layer) */
    mt_overlap *ov;          /* --overlap-grad-reduce / --overlap-param-gather with dp > 1; else NULL */
    mt_overlap *ov_exp;      /* the same for the experts' buckets (expert parallelism, edp > 1; chained to ov) */
    FILE *trace;             /* $MT_TRACE_SAMPLES.<dp rank>: the train samples this rank reads (a test hook) */
    int64_t train_iters;
    int64_t iteration;       /* (ckpt) */
    int64_t consumed_train;  /* (ckpt) */
    int64_t consumed_valid;  /* (ckpt) */
    double flops_so_far;     /* (ckpt) num_floating_point_operations_so_far */
    double flops_per_iter;   /* model FLOPs of one iteration (forward + backward) */
    int64_t last_saved;      /* the iteration last saved or loaded */
    struct mt_ckpt_job *save_job;   /* an --async-save write in progress (ckpt_write.h), or NULL */
    uint64_t step_bytes;     /* bytes this rank sent to the data-parallel group in the last step */
    uint64_t tp_step_bytes;  /* ... and to the tensor-parallel group (activations, loss statistics, norms) */
    uint64_t pp_step_bytes;  /* ... and to the other stages (activations, their gradients, tied embeddings) */
    /* What a step leaves on the device for the host, copied back once at its end (one sync, however many
     * micro-batches and tensors): the grad norm's sum of squares (a double), then the per-token losses of
     * the forward passes that have them (the last stage's), in the order they ran, nslot slots of
     * micro_batch_size x seq_length floats. */
    void *d_step;
    double *h_step;          /* its host copy */
    float *h_mask;           /* [nslot][mbs x seq]: each used slot's loss mask */
    int *slot_n;             /* [nslot]: each used slot's tokens */
    int nslot, used_slots;
} mt_trainer;

/* The device buffer for the per-token losses of the next forward pass with a loss (its n tokens, loss
 * mask NULL: all ones), added to the step's loss sum when the step copies them back; NULL + e when the
 * step has more of them than its micro-batches. */
float *mt_trainer_loss_slot(mt_trainer *t, const float *mask, int n, mt_err *e);

/* The first sample of this rank's micro-batch m of the global batch that starts at sample first
 * (MegatronPretrainingSampler: each step of mbs x dp samples gives rank r the r-th mbs of them). */
int64_t mt_trainer_micro_first(const mt_trainer *t, int64_t first, int m);
/* The dropout key of micro-batch m (over all data-parallel ranks) of the iteration that starts at
 * iteration it (so a resumed run redraws the same masks). */
uint64_t mt_trainer_dropout_key(const mt_trainer *t, int64_t it, int m);

/* Builds the run of the (parsed and checked) args: tokenizer, config, backend, data, model initialised
 * from --seed, AdamW and the schedule. 0, or -1 with e set (mt_trainer_close frees what was built). */
int mt_trainer_open(mt_trainer *t, const mt_train_args *a, mt_err *e);
/* The same as one rank of a job (par: not owned; must outlive the trainer): the model is the part of
 * par's tensor rank (--tensor-model-parallel-size) and pipeline stage (--pipeline-model-parallel-size),
 * built from --seed as the one-rank model would be and split; the micro-batches are those of par's
 * data-parallel rank. The global batch must be a multiple of
 * micro batch x data-parallel size. */
int mt_trainer_open_par(mt_trainer *t, const mt_train_args *a, const mt_parallel *par, mt_err *e);
void mt_trainer_close(mt_trainer *t);

typedef struct mt_step_result {
    double loss_sum, tokens;  /* masked token losses and their count over the micro-batches */
    double loss;              /* loss_sum / tokens (0 without tokens) */
    double grad_norm;         /* before clipping */
    bool skipped;             /* non-finite gradients: no update (fp16 overflow, or the NaN check off) */
    double loss_scale;        /* the loss scale after the step (what Megatron logs) */
    /* MoE: the load-balancing loss and z-loss over their coefficients, averaged as Megatron logs them (over the
     * MoE layers, the micro-batches and the data-parallel ranks); during the step, this rank's sums */
    double moe_lb, moe_z;
    /* with --moe-per-layer-logging: [num_layers][2 + experts] of every global layer (0 for a dense one): its
     * load-balancing loss and z-loss over their coefficients, averaged as the totals above, then the rows each
     * expert computed in the step, summed over the micro-batches and the data-parallel ranks; NULL without */
    const double *moe_layer;
    mtk_stats stats;          /* what the step cost this rank's kernel backend (mtk_stats differences): host
                                 syncs, upload waits, kernel launches, operations */
} mt_step_result;

/* One iteration (see above). -1 with e set on a read error or, with the NaN check on, a non-finite loss
 * or grad norm (then nothing advanced and the weights are those before the step). */
int mt_trainer_step(mt_trainer *t, mt_step_result *r, mt_err *e);

/* The bytes a rank must send to its tensor-parallel group in one step, by ring collectives of the
 * volumes the model exchanges (tensor_parallel.h), about 2(t-1)/t of the bytes each (exactly this rank's
 * share of mt's ring, whose chunks of an array split unevenly over t ranks differ by one): per micro-batch of N
 * tokens, 4L + 2R (+1 on the first stage, +1 on the last) all-reduces of N x hidden activations (L the
 * stage's layers, R those recomputed: two per layer forward and backward, two more per recomputed
 * forward, the embedding's, the logits' input gradient; with sequence parallelism each is an all-gather
 * and a reduce-scatter of the same total, plus an all-gather in the backward pass of each LayerNorm output
 * the products' weight gradients need, 2L + 1 on the last stage) and, on the last stage, the
 * cross-entropy's row statistics (3 N floats); per step the grad norm (a double) and, with sequence
 * parallelism, the norms' gradients; the MoE layers' exchanges (trainer.c). 0 with one tensor rank. */
double mt_trainer_tp_volume(const mt_trainer *t);

/* The bytes a rank must send to the other stages in one step: per micro-batch (and model chunk) its output
 * activations (to the next stage) unless it is the last (virtual) stage and its input gradients (to the
 * previous) unless it is the first, mt_gpt_stage_numel elements each; on the
 * first and the last stage the tied word embeddings' gradients (a two-rank ring all-reduce sends all of
 * them); the loss sums and the grad norm (three doubles) by ring. 0 with one stage. */
double mt_trainer_pp_volume(const mt_trainer *t);

/* The bytes a rank must send to its context-parallel group in one step: per micro-batch and layer of its
 * stage, its block of keys and values (this rank's tokens, its tensor rank's query groups) CP - 1 hops in
 * the forward pass (again in a recomputed one) and in the backward pass, and the blocks' fp32 gradients CP
 * hops (CP - 1 with --cp-comm-type all_gather: a reduce-scatter); on the last stage the per-token losses
 * gathered (CP - 1 parts). 0 without context parallelism. */
double mt_trainer_cp_volume(const mt_trainer *t);

/* Bytes of optimizer state this rank holds: AdamW's two moments over its parameters and, with the
 * distributed optimizer in bf16/fp16, the fp32 master of its shard (mt_trainer_own_master). */
size_t mt_trainer_optimizer_bytes(const mt_trainer *t);

/* With the distributed optimizer in bf16/fp16: the optimizer takes the fp32 master of this rank's shard
 * and the model drops its whole one (optimizer.h's mt_adamw_own_master), Megatron's 6 + 12/DP bytes per
 * parameter. Called after the weights are loaded (mt_trainer_step does it otherwise); nothing to do in
 * other runs or when done. 0, or -1 with e set. */
int mt_trainer_own_master(mt_trainer *t, mt_err *e);

/* With --overlap-param-gather: waits for the parameters a step's update left to gather (overlap.h), for
 * whatever reads them outside the step (a checkpoint, the end of the run). 0, or -1 with e set. */
int mt_trainer_params_ready(mt_trainer *t, mt_err *e);

/* --log-params-norm: the L2 norm of this rank's parameters (with the optimizer's own master, summed over
 * the data-parallel shards: a collective of the data-parallel group). 0, or -1 with e set. */
int mt_trainer_params_norm(mt_trainer *t, double *norm, mt_err *e);

/* Megatron's evaluate() over the data-parallel group: iters global batches of split from *consumed
 * (which advances by the global batch per iteration), each rank forwarding its micro-batches as the
 * training sampler assigns them; the loss sums and token counts are summed over the ranks. */
int mt_trainer_evaluate(mt_trainer *t, int split, int64_t *consumed, int64_t iters, mt_eval_result *r, mt_err *e);

#endif
