/* parallel.h: the parallel context of one rank of a job: where it sits on Megatron's grid (grid.h:
 * tensor rank fastest, then data, then pipeline) and the communicators of its groups, built from the
 * bootstrap (bootstrap.h) and the parallel sizes of the run.
 *
 * world spans the job; tp the ranks holding the other parts of this rank's layers (the model's
 * tensor-parallel group); dp the ranks holding the same part and reading other micro-batches (the
 * gradient reduction and the distributed optimizer's shards); pp the ranks of the other pipeline
 * stages of the same tensor rank. Each is a one-rank communicator where the group is this rank alone.
 * The model's part of the layout (model/layout.h) is (coord.tp of grid.tp, coord.pp of grid.pp).
 *
 * Context parallelism (cp_size = grid.cp): cp the ranks holding the other parts of this rank's sequences
 * (the ring of the attention), dpcp the data x context ranks (grid.h's MT_GROUP_DPCP: the gradient
 * reduction), dp itself when cp_size is 1.
 *
 * Expert parallelism (grid.h's expert groups, ep_size = grid.ep): ep the ranks holding the other experts
 * of this rank's mixture-of-experts layers (the token all-to-all; this rank's expert rank is coord.ep),
 * edp the ranks holding the same experts (their gradient reduction). Where an expert group is the same
 * set as another, no second communicator is made: with ep_size 1, ep is a one-rank communicator and edp
 * is dpcp itself; with ep_size = the data x context size, ep is dpcp itself and edp a one-rank
 * communicator. So ep, edp or dpcp may be the same pointer as dp or dpcp: never free them apart from the
 * context (mt_parallel_free frees each once).
 *
 * An expert tensor size etp_size other than tp (grid.h's mt_grid_make_expert, Megatron's
 * --expert-tensor-parallel-size): ep and edp are the groups of that grid (with etp 1 an expert-parallel
 * group mixes tensor ranks: tp 2, ep 2 on 8 ranks gives [0,1] [2,3] ...), always made by a split (or
 * one-rank) then; etp the expert-tensor group (MT_GROUP_ETP: tp itself when etp_size = tp, a one-rank
 * communicator when it is 1); tpcp the tensor x context ranks (equal data rank and stage: the router's
 * statistics of the sequence shards, Megatron's tp-cp group), tp itself when cp_size is 1. etp and tpcp
 * may be the same pointer as tp.
 */
#ifndef MT_COMM_PARALLEL_H
#define MT_COMM_PARALLEL_H

#include "comm/bootstrap.h"
#include "comm/comm.h"
#include "comm/grid.h"
#include "util/err.h"

typedef struct mt_parallel {
    mt_grid grid;
    mt_grid_coord coord;   /* this rank's place */
    int rank, size;        /* in the job */
    mt_comm *world, *tp, *dp, *pp;
    int ep_size;           /* expert-model-parallel size (1: none) */
    mt_comm *ep, *edp;     /* expert-model-parallel and expert-data-parallel groups (may alias dpcp: above) */
    int cp_size;           /* context-parallel size (1: none) */
    mt_comm *cp, *dpcp;    /* context-parallel and data x context groups (dpcp may alias dp: above) */
    int etp_size;          /* expert tensor size (tp unless given otherwise) */
    mt_comm *etp, *tpcp;   /* expert-tensor and tensor x context groups (may alias tp: above) */
    int own_world;         /* world was made here (mt_parallel_init) and is freed with the context */
} mt_parallel;

/* The context of the rank boot describes (MPI started by mt_boot_mpi when the job has several ranks)
 * for tensor size tp and pipeline size pp; the data-parallel size is what remains. -1 with e set,
 * naming the flag, when the job's size is not a multiple of tp x pp. No expert parallelism (ep 1). */
int mt_parallel_init(mt_parallel *p, const mt_boot *boot, int tp, int pp, mt_err *e);
/* The same with expert-model-parallel size ep: -1 naming --expert-model-parallel-size when ep does not
 * divide the data-parallel size. */
int mt_parallel_init_ep(mt_parallel *p, const mt_boot *boot, int tp, int pp, int ep, mt_err *e);
/* The same over an existing world communicator (not owned: it must outlive the context). */
int mt_parallel_init_comm(mt_parallel *p, mt_comm *world, int tp, int pp, mt_err *e);
int mt_parallel_init_comm_ep(mt_parallel *p, mt_comm *world, int tp, int pp, int ep, mt_err *e);
/* The same with context-parallel size cp: -1 naming --context-parallel-size when tp x cp x pp does not
 * divide the job's size. */
int mt_parallel_init_cp(mt_parallel *p, const mt_boot *boot, int tp, int cp, int pp, int ep, mt_err *e);
int mt_parallel_init_comm_cp(mt_parallel *p, mt_comm *world, int tp, int cp, int pp, int ep, mt_err *e);
/* The same with expert tensor size etp (0: tp): -1 naming --expert-tensor-parallel-size as
 * mt_grid_make_expert does. */
int mt_parallel_init_expert(mt_parallel *p, const mt_boot *boot, int tp, int cp, int pp, int ep, int etp, mt_err *e);
int mt_parallel_init_comm_expert(mt_parallel *p, mt_comm *world, int tp, int cp, int pp, int ep, int etp, mt_err *e);
void mt_parallel_free(mt_parallel *p);

#endif
