/* pipeline.h: the micro-batches of one training step or evaluation on this rank's pipeline stage, with the
 * activations and their gradients exchanged with the neighbouring stages by batched non-blocking
 * send/recv, and the tied word embeddings' gradients summed between the first and the last stage (spec
 * 7.6). The pipeline owns its state (mt_pipeline): the step's schedule, a list of events built once by
 * train/pp_schedule.h (Megatron's 1F1B, or its interleaved schedule with model chunks), which the step
 * runs in order, and the contexts of the micro-batches in flight.
 *
 * With one stage the schedule is a forward and a backward per micro-batch, in order (no warm-up, no
 * exchange). With P stages, stage r of M micro-batches runs min(P - r - 1, M) forwards (warm-up), then
 * alternates one forward and one backward, then runs the remaining backwards (cool-down); at most
 * min(P - r, M) micro-batches' activations are alive, micro-batch m in context m mod that many. Every
 * stage reads each micro-batch (the tokens for the first stage's embedding, the targets and loss mask for
 * the last stage's loss) and sets its dropout key, so a stage draws the masks of the one-stage run for
 * its layers.
 *
 * With model chunks (--num-layers-per-virtual-pipeline-stage): M x vp virtual micro-batches, groups of pp
 * micro-batches going through chunk 0, 1, ... and back in reverse; the stages form a ring (the last
 * stage's chunk c sends to the first stage's chunk c + 1). A context of the chunk is taken when a
 * micro-batch's input arrives (or the first stage starts it) and is free again after the exchange that
 * follows its backward pass; contexts are made per chunk as the schedule first needs them
 * (mt_pipeline_contexts counts them without running the model).
 */
#ifndef MT_TRAIN_PIPELINE_H
#define MT_TRAIN_PIPELINE_H

#include "train/trainer.h"

/* The pipeline's own state (pipeline.c): this stage's schedule as events (train/pp_schedule.h) and the
 * contexts of its micro-batches in flight. */
typedef struct mt_pipeline mt_pipeline;
/* After t's model, micro-batch count and parallel layout are set: the schedule, and 1F1B's contexts
 * (min(pp - stage, num_micro) of them; with model chunks they are made as the schedule first needs them).
 * NULL with e set. */
mt_pipeline *mt_pipeline_open(mt_trainer *t, mt_err *e);
void mt_pipeline_close(mt_pipeline *p);
/* The backward passes of model chunk c in one step, counted from the schedule's events (what makes the
 * chunk's gradients final: the overlapped reductions of train/overlap.h wait for the last of them). */
int mt_pipeline_backward_passes(const mt_pipeline *p, int c);

/* Forward and backward of this rank's num_micro micro-batches of the step starting at sample
 * t->consumed_train, the gradients accumulated with each micro-batch's loss scaled by
 * loss_scale / (num_micro x dp) / its tokens; r->loss_sum and r->tokens get the losses the last stage
 * computed (zero on the others). 0, or -1 with e set. */
int mt_pipeline_train(mt_trainer *t, mt_step_result *r, mt_err *e);

/* Forward only (every micro-batch as warm-up) of this rank's micro-batches of the global batch of split
 * starting at sample first; adds the last stage's loss sums and token counts to *loss_sum, *tokens. */
int mt_pipeline_eval(mt_trainer *t, int split, int64_t first, double *loss_sum, double *tokens, mt_err *e);

/* The contexts (micro-batches' activations) stage `stage` of pp keeps per model chunk (per_chunk[vp])
 * over a step of num_micro micro-batches: the 1F1B bound min(pp - stage, M), or the most the interleaved
 * schedule has in flight (and received) at once, in closed form (pipeline_contexts.c), in O(vp) whatever
 * pp and num_micro. 0, or -1 for sizes the schedule does not run (interleaved: num_micro not a multiple
 * of pp). */
int mt_pipeline_contexts(int pp, int stage, int num_micro, int vp, int *per_chunk);

/* The same counted by replaying the interleaved schedule's bookkeeping (the training step's own code,
 * without the model), in time growing with pp, num_micro and vp: the reference of the closed form in
 * tests. */
int mt_pipeline_contexts_replayed(int pp, int stage, int num_micro, int vp, int *per_chunk);

/* After the backward passes: the gradients of tied word embeddings summed between the first and last
 * stage (Megatron's embedding-group all-reduce). Nothing with one stage. */
int mt_pipeline_tied_grads(mt_trainer *t, mt_err *e);

#endif
