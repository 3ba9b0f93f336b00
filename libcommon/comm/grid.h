/* grid.h: Megatron's placement of ranks on the tensor x context x data x pipeline grid, as a pure
 * function (spec 7: world = tp x cp x dp x pp, tensor-parallel rank fastest, then context, then data,
 * then pipeline: rank = tp_rank + tp (cp_rank + cp (dp_rank + dp pp_rank))).
 *
 * A group is the set of ranks that differ only in the coordinates the group spans: tensor-parallel
 * (tp consecutive ranks), context-parallel, data-parallel, pipeline (ranks with equal tensor, context
 * and data coordinates), model-parallel (tensor x pipeline) and embedding (the first and last stage of
 * a pipeline group; one rank when pp is 1). For tp 2, pp 4 on 16 ranks the data-parallel groups are
 * [0,2] [1,3] [4,6] ..., the tensor groups [0,1] [2,3] ..., the pipeline groups [0,4,8,12] [1,5,9,13] ...
 *
 * Expert groups (Megatron's parallel_state with an expert-model-parallel size ep and the expert tensor
 * size equal to tp, its default): the mixture-of-experts layers see the same world ordered tensor rank
 * fastest, then expert rank, then expert-data-parallel rank, then stage (Megatron's expert RankGenerator,
 * order "tp-ep-dp-pp" with world = tp x ep x edp x pp). For a rank whose place among the cp x dp ranks of
 * its tensor rank and stage is x = cp_rank + cp dp_rank (its data-parallel rank when cp is 1), its expert
 * rank is x % ep and its expert-data-parallel rank x / ep; ep must divide cp x dp, and edp = cp dp / ep.
 * The expert-parallel group (MT_GROUP_EP: the ep ranks that hold the other experts and exchange tokens by
 * all-to-all) is the ranks of equal tensor rank, stage and x / ep; the expert-data-parallel group
 * (MT_GROUP_EDP: the edp ranks that hold the same experts and reduce their gradients) is those of equal
 * tensor rank, stage and x % ep. Each expert group lies inside one data-parallel group (cp 1). For tp 2,
 * pp 1, 8 ranks (dp 4), ep 2: the expert-parallel groups are [0,2] [1,3] [4,6] [5,7], the
 * expert-data-parallel groups [0,4] [1,5] [2,6] [3,7] (data-parallel groups [0,2,4,6] [1,3,5,7]).
 *
 * The data x context group (MT_GROUP_DPCP, Megatron's dp-cp group: the cp x dp ranks of equal tensor rank
 * and stage) is where gradients are reduced with context parallelism: its ranks hold the same part of the
 * model, each for its own tokens. For tp 2, cp 2, pp 1 on 8 ranks (dp 2): the context groups are [0,2]
 * [1,3] [4,6] [5,7], the data groups [0,4] [1,5] [2,6] [3,7], the data x context groups [0,2,4,6] [1,3,5,7].
 *
 * An expert tensor size etp other than tp (Megatron's --expert-tensor-parallel-size; mt_grid_make_expert)
 * replaces tp in the expert order: within a stage, a rank's place s = tp_rank + tp (cp_rank + cp dp_rank)
 * is read as s = etp_rank + etp (ep_rank + ep edp_rank), world = etp x ep x edp x pp. etp x ep must divide
 * tp x cp x dp (the ranks of a stage); stages are the same in both orders (pipeline rank slowest). The
 * expert-tensor group (MT_GROUP_ETP: the etp ranks that split one expert's weights) is the ranks of equal
 * stage, expert rank and expert-data-parallel rank; the expert-parallel and expert-data-parallel groups
 * compare the expert tensor rank where the text above says tensor rank. With etp = tp (or 0, a zeroed or
 * older grid) everything is as above, and the expert-tensor group is the tensor group. For tp 2, etp 1,
 * pp 1, 8 ranks, ep 2: the expert-parallel groups are [0,1] [2,3] [4,5] [6,7] (the two tensor ranks of a
 * data-parallel rank are two expert ranks), the expert-data-parallel groups [0,2,4,6] [1,3,5,7], the
 * expert-tensor groups [0] [1] ... [7].
 *
 * ep, edp and etp are fields of the grid (mt_grid_make_ep, mt_grid_make_expert), not arguments of a group
 * query: the grid is the whole placement of a run, so one mt_grid_group serves every kind, and a rank's
 * coordinates (and the parallel context's copy of them) carry its expert rank for the model to pick its
 * local experts.
 *
 * comm/parallel.c builds its groups with mt_grid_make_expert; the model and trainer run etp 1 with tp > 1
 * (libcommon/model/README.md, "Expert tensor size other than tp", which lists what remains: checkpoints).
 */
#ifndef MT_COMM_GRID_H
#define MT_COMM_GRID_H

#include "util/err.h"

typedef struct mt_grid {
    int tp, cp, dp, pp;
    int ep, edp;   /* expert-model-parallel and expert-data-parallel sizes; ep 0 (a zeroed grid) reads as 1 */
    int etp;       /* expert tensor size; 0 (a zeroed grid) reads as tp */
} mt_grid;

typedef struct mt_grid_coord {
    int tp, cp, dp, pp;
    int ep, edp;   /* the expert rank and the expert-data-parallel rank */
    int etp;       /* the expert tensor rank (the tensor rank when etp = tp) */
} mt_grid_coord;

typedef enum {
    MT_GROUP_TP,
    MT_GROUP_CP,
    MT_GROUP_DP,
    MT_GROUP_PP,
    MT_GROUP_MP,
    MT_GROUP_EMBD,
    MT_GROUP_EP,    /* expert-model-parallel */
    MT_GROUP_EDP,   /* expert-data-parallel */
    MT_GROUP_DPCP,  /* data x context parallel: equal tensor rank and stage (Megatron's dp-cp group) */
    MT_GROUP_ETP    /* expert tensor: equal stage, expert rank and expert-data-parallel rank */
} mt_group_kind;

/* The grid of a world of `world` ranks with these tensor, context and pipeline sizes: dp is what is
 * left; no expert parallelism (ep 1, edp = cp x dp). -1 naming the flags when world is not a multiple of
 * tp x cp x pp. */
int mt_grid_make(mt_grid *g, int world, int tp, int cp, int pp, mt_err *e);
/* The same with expert-model-parallel size ep: -1 naming --expert-model-parallel-size when ep is not
 * positive or does not divide the data-parallel size (times cp). */
int mt_grid_make_ep(mt_grid *g, int world, int tp, int cp, int pp, int ep, mt_err *e);
/* The same with expert tensor size etp (0: tp, mt_grid_make_ep): -1 naming --expert-tensor-parallel-size
 * when etp is negative or etp x ep does not divide the ranks of a stage (tp x cp x dp). */
int mt_grid_make_expert(mt_grid *g, int world, int tp, int cp, int pp, int ep, int etp, mt_err *e);
int mt_grid_world(const mt_grid *g);
/* All coordinates of rank, the expert ones included. */
mt_grid_coord mt_grid_coords(const mt_grid *g, int rank);
/* The rank at c's tensor, context, data and pipeline coordinates (its expert ones follow from them). */
int mt_grid_rank(const mt_grid *g, mt_grid_coord c);

/* The group of kind that rank belongs to: its members in increasing rank order (up to world of them)
 * written to members, their count returned; *color (may be NULL) is a number that names the group
 * among the groups of that kind, *index (may be NULL) is rank's position in it (in an expert-parallel
 * group its expert rank, in an expert-data-parallel group its expert-data-parallel rank, in an expert-tensor
 * group its expert tensor rank). A rank outside
 * every embedding group (a middle pipeline stage) gets 0 members and color -1. */
int mt_grid_group(const mt_grid *g, int rank, mt_group_kind kind, int *members, int *color, int *index);

#endif
