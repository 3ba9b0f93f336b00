/* pp_schedule.h: one pipeline stage's training step as a list of events, a pure function of (stages,
 * stage, micro-batches, model chunks): Megatron's 1F1B schedule (forward_backward_pipelining_without_
 * interleaving: min(P - s - 1, M) warm-up forwards, then one forward and one backward in turn, then the
 * remaining backwards) and, with model chunks, its interleaved schedule (forward_backward_pipelining_with_
 * interleaving: groups of P micro-batches through chunk 0, 1, ... forward and back in reverse, the stages
 * a ring; every forward first when the micro-batches equal the stages).
 *
 * An event is the forward or the backward pass of one (micro-batch, chunk), or one batched exchange with
 * the neighbouring stages of up to four transfers, each naming the (micro-batch, chunk) of this stage it
 * carries: the output of a forward to the next stage, the gradient of an input to the previous stage,
 * an input from the previous stage, an output's gradient from the next. Transfers a stage has no
 * neighbour for (the first and last stage of 1F1B; the first and last virtual stage of the interleaved
 * ring) are not listed, and neither is an exchange left empty. With one stage and one chunk the list is
 * a forward and a backward per micro-batch.
 *
 * With the ring, stage P - 1's output of chunk c is stage 0's input of chunk c + 1 (and the gradients go
 * back the same way); elsewhere the peer's (micro-batch, chunk) is the sender's.
 */
#ifndef MT_TRAIN_PP_SCHEDULE_H
#define MT_TRAIN_PP_SCHEDULE_H

#include "util/err.h"

typedef enum { MT_PP_FORWARD, MT_PP_BACKWARD, MT_PP_EXCHANGE } mt_pp_kind;

/* A micro-batch of a model chunk; micro -1: none. */
typedef struct mt_pp_mc {
    int micro, chunk;
} mt_pp_mc;

typedef struct mt_pp_event {
    mt_pp_kind kind;
    mt_pp_mc mc;          /* forward, backward: what runs */
    mt_pp_mc send_next;   /* exchange: the output of this (micro, chunk) to the next stage */
    mt_pp_mc recv_next;   /*           the gradient of its output from the next stage */
    mt_pp_mc send_prev;   /*           the gradient of its input to the previous stage */
    mt_pp_mc recv_prev;   /*           its input from the previous stage */
} mt_pp_event;

/* The events of stage `stage` of `stages` running `micro` micro-batches of `chunks` model chunks (1: the
 * 1F1B schedule) in one training step, in order, into *out (malloc'd; the caller frees it), *n of them.
 * 0, or -1 with e set for sizes the schedules do not run (the interleaved one needs micro-batches a
 * multiple of the stages). */
int mt_pp_schedule(int stages, int stage, int micro, int chunks, mt_pp_event **out, int *n, mt_err *e);

/* One event as a line of text (tests and --dry-run traces): "F m c", "B m c", or "X" followed by the
 * transfers "sn m c", "rn m c", "sp m c", "rp m c" present, in that order. */
void mt_pp_event_format(const mt_pp_event *ev, char *buf, int cap);

#endif
