/* pipeline.h: the micro-batches of one training step or evaluation on this rank's pipeline stage: the
 * non-interleaved 1F1B schedule of Megatron (spec 7.5), with the activations and their gradients
 * exchanged with the neighbouring stages by batched non-blocking send/recv, and the tied word
 * embeddings' gradients summed between the first and the last stage (spec 7.6).
 *
 * With one stage the schedule is a forward and a backward per micro-batch, in order (no warm-up, no
 * exchange): the loop the trainer always ran. With P stages, stage r of M micro-batches runs
 * min(P - r - 1, M) forwards (warm-up), then alternates one forward and one backward, then runs the
 * remaining backwards (cool-down); at most min(P - r, M) micro-batches' activations are alive, one
 * context each (t->ctxs). Every stage reads each micro-batch (the tokens for the first stage's
 * embedding, the targets and loss mask for the last stage's loss) and sets its dropout key, so a stage
 * draws the masks of the one-stage run for its layers.
 *
 * With model chunks (--num-layers-per-virtual-pipeline-stage) the step is Megatron's interleaved schedule
 * (forward_backward_pipelining_with_interleaving): M x vp virtual micro-batches, groups of pp micro-batches
 * going through chunk 0, 1, ... and back in reverse; the stages form a ring (the last stage's chunk c
 * sends to the first stage's chunk c + 1). Contexts are made per chunk as the schedule first needs them and
 * reused after their backward pass (mt_pipeline_contexts counts them without running the model).
 */
#ifndef MT_TRAIN_PIPELINE_H
#define MT_TRAIN_PIPELINE_H

#include "train/trainer.h"

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
