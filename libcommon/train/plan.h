/* plan.h: mt-train --dry-run, the memory and time planner: for a layout (world size, tensor and
 * pipeline sizes), schedule, micro-batching and recomputation, what every (tensor rank, stage) of the
 * first data-parallel rank holds, computed from the model's shapes without building it, reading data or
 * starting ranks: its parameters, gradients, optimizer state and peak activations (the contexts of the
 * micro-batches the 1F1B or the interleaved schedule keeps alive on its stage, counted in closed form by
 * mt_pipeline_contexts), in the units and order of mt-train's own memory lines, and the pipeline bubble
 * fraction (pp - 1) / m of the schedule.
 */
#ifndef MT_TRAIN_PLAN_H
#define MT_TRAIN_PLAN_H

#include <stdio.h>

#include "config/train_args.h"
#include "model/gpt.h"
#include "util/err.h"

/* Prints the plan of the args for a job of world ranks. 0, or -1 with e set (a layout that does not
 * split the model, naming the flag). */
int mt_plan_print(FILE *out, const mt_train_args *a, int world, mt_err *e);

/* The bytes a rank sends to its context-parallel group in one step (model config c with
 * context_parallel_size > 1; 0 without): per micro-batch and layer of its stage (layers of them, recomputed
 * of those recomputed), its block of keys and values (its tokens, its tensor rank's query groups) CP - 1
 * hops in the forward pass (again in a recomputed one) and in the backward pass, and the blocks' fp32
 * gradients CP hops (p2p) or CP - 1 parts of a reduce-scatter (all_gather); on the last stage the
 * per-token losses gathered (CP - 1 parts). mt_trainer_cp_volume is this for a running trainer. */
double mt_plan_cp_bytes(const mt_gpt_config *c, int micro_batch, int tp, int layers, int recomputed, int last,
                        int p2p, size_t asz, int num_micro);

#endif
