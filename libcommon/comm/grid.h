/* grid.h: Megatron's placement of ranks on the tensor x context x data x pipeline grid, as a pure
 * function (spec 7: world = tp x cp x dp x pp, tensor-parallel rank fastest, then context, then data,
 * then pipeline: rank = tp_rank + tp (cp_rank + cp (dp_rank + dp pp_rank))).
 *
 * A group is the set of ranks that differ only in the coordinates the group spans: tensor-parallel
 * (tp consecutive ranks), context-parallel, data-parallel, pipeline (ranks with equal tensor, context
 * and data coordinates), model-parallel (tensor x pipeline) and embedding (the first and last stage of
 * a pipeline group; one rank when pp is 1). For tp 2, pp 4 on 16 ranks the data-parallel groups are
 * [0,2] [1,3] [4,6] ..., the tensor groups [0,1] [2,3] ..., the pipeline groups [0,4,8,12] [1,5,9,13] ...
 */
#ifndef MT_COMM_GRID_H
#define MT_COMM_GRID_H

#include "util/err.h"

typedef struct mt_grid {
    int tp, cp, dp, pp;
} mt_grid;

typedef struct mt_grid_coord {
    int tp, cp, dp, pp;
} mt_grid_coord;

typedef enum { MT_GROUP_TP, MT_GROUP_CP, MT_GROUP_DP, MT_GROUP_PP, MT_GROUP_MP, MT_GROUP_EMBD } mt_group_kind;

/* The grid of a world of `world` ranks with these tensor, context and pipeline sizes: dp is what is
 * left. -1 naming the flags when world is not a multiple of tp x cp x pp. */
int mt_grid_make(mt_grid *g, int world, int tp, int cp, int pp, mt_err *e);
int mt_grid_world(const mt_grid *g);
mt_grid_coord mt_grid_coords(const mt_grid *g, int rank);
int mt_grid_rank(const mt_grid *g, mt_grid_coord c);

/* The group of kind that rank belongs to: its members in increasing rank order (up to world of them)
 * written to members, their count returned; *color (may be NULL) is a number that names the group
 * among the groups of that kind, *index (may be NULL) is rank's position in it. A rank outside every
 * embedding group (a middle pipeline stage) gets 0 members and color -1. */
int mt_grid_group(const mt_grid *g, int rank, mt_group_kind kind, int *members, int *color, int *index);

#endif
