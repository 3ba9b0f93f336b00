/* overlap.h: --overlap-grad-reduce and --overlap-param-gather, the data-parallel buckets of grad_sync.h
 * run while the model computes (Megatron's overlapped DDP), on an engine of comm/comm_async.h (a progress
 * thread on CPU ranks, a CUDA stream of its own on GPU ranks).
 *
 * Gradients: the model's layer hook (gpt.h) reports each layer's backward pass. A tensor's gradient is
 * final when the layer that holds it has run its model chunk's last backward pass of the step (how many
 * the pipeline's schedule lists for the chunk: train/pipeline.h, mt_pipeline_backward_passes); the final norm and the output layer with
 * the stage's top layer (their backward pass comes just before it). A bucket is started when every
 * element in it is final, in the order they become so; then at the end of the backward passes the
 * buckets still waiting are started in bucket order and all are waited for. Some gradients are summed
 * elsewhere first and so are final only then: the word embeddings (after their backward pass, at the
 * end), tied embeddings' two copies (the embedding group's all-reduce) and, with sequence parallelism,
 * the norms (the tensor-parallel all-reduce). Each bucket is reduced by the same collective over the
 * same range as without overlap, so the sums are the same bits.
 *
 * Parameters (with the distributed optimizer): after the update the buckets' all-gathers (and, once the
 * optimizer owns the fp32 master, the kept fp32 values of the 1-D tensors, first) are started in the
 * order the forward pass needs them (from the start of the buffer); before each layer's forward pass
 * the buckets up to the end of that layer's tensors are waited for (the embeddings' at the start of the
 * step, everything before the top layer, whose stage may also have the output layer after it). Anything
 * else that reads the parameters (evaluation, a checkpoint, the end of the run) first calls
 * mt_overlap_params_ready.
 *
 * With expert parallelism the experts' gradients and parameters (the buffers' end, from
 * mt_gpt_expert_lo) have buckets of their own over the expert-data-parallel group: a second overlap of
 * that part (base, the part's first element in the model's buffers) on an engine of its own, chained to
 * the first (mt_overlap_chain) so that the model's one layer hook drives both.
 *
 * $MT_TRACE_BUCKETS.<world rank> (.experts for the experts' part): a line per bucket started or waited
 * for, with the time since the step began (a test and measurement hook).
 */
#ifndef MT_TRAIN_OVERLAP_H
#define MT_TRAIN_OVERLAP_H

#include <stdint.h>
#include <stdio.h>

#include "comm/comm_async.h"
#include "model/gpt.h"
#include "train/grad_sync.h"
#include "util/err.h"

typedef struct mt_overlap {
    mt_comm_async *eng;
    int grads, params;       /* --overlap-grad-reduce, --overlap-param-gather */
    int sharded;             /* the distributed optimizer: reduce-scatter (else all-reduce) */
    mt_grad_sync *gs;        /* the buckets (not owned) */
    size_t base;             /* the buckets' element 0 in the model's buffers */
    struct mt_overlap *next; /* the other part's overlap, driven by this one's hook (not owned) */
    mt_gpt *model;           /* not owned */
    int *need;               /* [nl]: backward passes of each layer in a step (its model chunk's, from the
                                pipeline's schedule) */
    int nb, nl;              /* buckets, local layers */
    int *group;              /* [tensors]: the local layer whose last backward pass makes it final; -1: the end;
                                -2: not in this part */
    int *passes;             /* [nl]: backward passes of each layer so far in this step */
    size_t *left;            /* [nb]: elements not yet final */
    int *ticket;             /* [nb]: the gradient bucket's ticket this step, -1 before it starts */
    int *gticket;            /* [nb]: the parameter bucket's ticket, -1 when none is pending */
    size_t *layer_end;       /* [nl]: the end of each layer's tensors in the part (from base) */
    size_t first_layer;      /* the end of the part's tensors before the first layer (the embeddings) */
    size_t *counts;          /* scratch: a bucket's chunks */
    int gathering;           /* parameter buckets started and not all waited for */
    int64_t step;            /* steps begun (the trace's iteration) */
    double t0;               /* the step's start (the trace's times, ms from it) */
    FILE *trace;
} mt_overlap;

/* The overlap of a model whose gradients and parameters from element base of its buffers gs reduces and
 * gathers (gs->dp the device communicator of the data-parallel group, or of the expert-data-parallel one
 * for the experts' part; collective over it); chunk_passes[vp]: the backward passes each of the stage's vp
 * model chunks runs in a step, as the pipeline's schedule lists them (a layer's gradients are final after
 * its chunk's last); sp: sequence parallelism is on. The model's layer hook is set to this one. 0, or -1
 * with e set. */
int mt_overlap_init(mt_overlap *o, mt_gpt *model, mt_grad_sync *gs, size_t base, int grads, int params, int sharded,
                    const int *chunk_passes, int vp, int sp, int world_rank, mt_err *e);
/* o's layer hook drives next too (the experts' part); next's own hook setting is undone. */
void mt_overlap_chain(mt_overlap *o, mt_overlap *next);
void mt_overlap_free(mt_overlap *o);

/* At the start of a step (after the gradients are zeroed): the passes counted from zero, the embeddings'
 * parameters waited for. 0 or -1. */
int mt_overlap_step_begin(mt_overlap *o, mt_err *e);
/* After the backward passes and the gradients' other sums (the norms' over the tensor ranks, tied
 * embeddings'): the buckets not yet started, then a wait for all. 0 or -1. */
int mt_overlap_grads_finish(mt_overlap *o, mt_err *e);
/* After the sharded update: the parameter buckets' all-gathers started. 0 or -1. */
int mt_overlap_params_start(mt_overlap *o, mt_err *e);
/* Waits for every parameter bucket started (nothing when none is pending). 0 or -1. */
int mt_overlap_params_ready(mt_overlap *o, mt_err *e);
/* Bytes the engine sent, over its life. */
uint64_t mt_overlap_bytes(const mt_overlap *o);

#endif
