/* ring_attention.h: context parallelism's attention over a ring of ranks (Megatron's --cp-comm-type p2p),
 * or over every rank's keys and values gathered at once (all_gather).
 *
 * Each of the CP ranks of the group holds Tl = Tg / CP tokens of each sequence: Megatron's load-balanced
 * split for causal attention, the sequence cut into 2 CP chunks and rank r holding chunks r and
 * 2 CP - 1 - r (mt_ring_rows). The forward pass sends this rank's keys and values around the ring (to
 * rank r + 1, from r - 1) CP - 1 times; at each step the queries attend to the block in hand and the
 * result is merged by log-sum-exp (kernels.h's attention by blocks). The backward pass sends the blocks
 * around again, each with the gradient of its keys and values accumulated by every rank it visits, and
 * one last hop brings each block's gradient home. With CP = 1 it is the attention of the whole sequence.
 * Each step's exchange is one batched point-to-point transfer. With overlap it runs on an engine of
 * comm/comm_async.h (a progress thread on CPU ranks, a stream of its own with NCCL) while the block in hand
 * is computed: the next block of keys and values is in flight during each step's attention, and in the
 * backward pass the gradient the step before sent on as well (as Megatron-Core: each step computes its
 * part of the block's gradient into a buffer of its own, then adds the partial sum that arrived meanwhile
 * and sends the sum on, so the ring holds three fp32 gradients); the results are the same bits. The
 * buffers are device memory of kernels k, and cp a communicator for them (model/device.h's mt_device_comm).
 *
 * all_gather, the simple variant: every rank's keys and values are gathered at the start of each pass,
 * the queries go over them block by block in the ring's order (the forward pass gives the ring's bits),
 * and the backward pass's gradients of every block, this rank's queries' part of each, are summed over the
 * ranks by one reduce-scatter into their owners. CP blocks of keys and values (and of their fp32
 * gradients) are held at once, against the ring's two. */
#ifndef MT_MODEL_RING_ATTENTION_H
#define MT_MODEL_RING_ATTENTION_H

#include <stdint.h>

#include "comm/comm.h"
#include "kernels.h"

typedef struct mt_ring_attention mt_ring_attention;

/* Megatron's --cp-comm-type */
typedef enum { MT_CP_P2P, MT_CP_ALL_GATHER } mt_cp_comm;

/* Rank r of CP's rows of a sequence of Tg (2 CP divides Tg). */
mtk_att_rows mt_ring_rows(int r, int CP, int Tg);

/* The attention over cp (NULL: one rank) for B sequences of Tg tokens, NH heads in NG groups of HS, by
 * type's exchanges; overlap (p2p): the exchanges on an engine (collective over cp; on MPI it needs
 * MPI_THREAD_MULTIPLE, comm/bootstrap.h). NULL + e on failure (out of device memory, Tg not a multiple of
 * 2 CP, no engine). */
mt_ring_attention *mt_ring_attention_new(mtk *k, mt_comm *cp, int B, int Tg, int NH, int NG, int HS, mt_cp_comm type,
                                         int overlap, mt_err *e);
void mt_ring_attention_free(mt_ring_attention *ra);
/* The following passes take B sequences (1 .. the B it was made for). 0, or -1 with e set. */
int mt_ring_attention_batch(mt_ring_attention *ra, int B, mt_err *e);
/* With the heads split over tensor-parallel ranks: this rank's NH heads are heads first .. of total, and
 * the attention dropout draws the counters of the global heads (the one-rank run's masks). */
void mt_ring_attention_heads(mt_ring_attention *ra, int total, int first);
/* Device bytes the ring's buffers take, and what mt_ring_attention_new's would with activations of asz
 * bytes (the planner's figure). */
size_t mt_ring_attention_plan(int B, int Tg, int CP, int NH, int NG, int HS, mt_cp_comm type, size_t asz);
size_t mt_ring_attention_bytes(const mt_ring_attention *ra);
/* Bytes this rank has sent over cp and the engine (only grows). */
uint64_t mt_ring_attention_sent(const mt_ring_attention *ra);

/* out [B,Tl,NH*HS] (activation dtype) and lse [B,NH,Tl] of this rank's queries of qkv [B,Tl,NG,NH/NG+2,HS]
 * over the whole sequence's keys. */
int mt_ring_attention_fwd(mt_ring_attention *ra, mtk_act *out, float *lse, const mtk_act *qkv, const mtk_dropout *drop,
                          mt_err *e);
/* dqkv [B,Tl,NG,NH/NG+2,HS] (assigned): the gradient of this rank's queries, keys and values, given dout
 * and the forward's out and lse. */
int mt_ring_attention_bwd(mt_ring_attention *ra, mtk_act *dqkv, const mtk_act *dout, const mtk_act *qkv,
                          const mtk_act *out, const float *lse, const mtk_dropout *drop, mt_err *e);

#endif
