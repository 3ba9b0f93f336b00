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
#include "util/err.h"

/* Prints the plan of the args for a job of world ranks. 0, or -1 with e set (a layout that does not
 * split the model, naming the flag). */
int mt_plan_print(FILE *out, const mt_train_args *a, int world, mt_err *e);

#endif
