/* parallel.c: a rank's place on the grid and the communicators of its tensor, data, pipeline, context and
 * expert groups (parallel.h). */
#include "comm/parallel.h"

#include <stdlib.h>
#include <string.h>

/* The communicator of this rank's group of kind: a split of world by the group's colour, ordered by the
 * rank's index in it (one rank: a communicator of its own). */
static mt_comm *group(mt_parallel *p, mt_group_kind kind, mt_err *e)
{
    int *members = mt_xmalloc((size_t)p->size * sizeof *members);
    int color = 0, idx = 0;
    mt_grid_group(&p->grid, p->rank, kind, members, &color, &idx);
    free(members);
    if (p->world->size == 1) return mt_comm_single();
    return mt_comm_split(p->world, color, idx, e);   /* collective: every rank splits */
}

/* The context groups: with cp 1 a one-rank cp and dpcp = dp, else splits. */
static int context_groups(mt_parallel *p, mt_err *e)
{
    p->cp_size = p->grid.cp;
    if (p->grid.cp == 1) {
        p->dpcp = p->dp;
        return (p->cp = mt_comm_single()) ? 0 : -1;
    }
    return !(p->cp = group(p, MT_GROUP_CP, e)) || !(p->dpcp = group(p, MT_GROUP_DPCP, e)) ? -1 : 0;
}

/* A group of the expert grid other than tp's: a one-rank communicator where it is this rank alone, else a
 * split. */
static mt_comm *expert_group(mt_parallel *p, mt_group_kind kind, int size, mt_err *e)
{
    return size == 1 ? mt_comm_single() : group(p, kind, e);
}

/* The tensor x context group: tp itself without context parallelism, else the ranks of equal data rank
 * and stage, ordered by context rank then tensor rank. */
static mt_comm *tensor_context_group(mt_parallel *p, mt_err *e)
{
    if (p->grid.cp == 1) return p->tp;
    if (p->world->size == 1) return mt_comm_single();
    int color = p->coord.dp + p->grid.dp * p->coord.pp, idx = p->coord.tp + p->grid.tp * p->coord.cp;
    return mt_comm_split(p->world, color, idx, e);
}

/* The expert groups: dpcp itself or a one-rank communicator where the group is the data x context group
 * or this rank alone (every rank takes the same branch: the sizes are the job's), else a split. With an
 * expert tensor size other than tp, splits (or one-rank) of the expert grid's groups. */
static int expert_groups(mt_parallel *p, mt_err *e)
{
    int ep = p->grid.ep, edp = p->grid.edp;
    p->ep_size = ep;
    p->etp_size = p->grid.etp;
    if (!(p->tpcp = tensor_context_group(p, e))) return -1;
    if (p->grid.etp != p->grid.tp) {
        return !(p->etp = expert_group(p, MT_GROUP_ETP, p->grid.etp, e)) || !(p->ep = expert_group(p, MT_GROUP_EP, ep, e)) ||
                       !(p->edp = expert_group(p, MT_GROUP_EDP, edp, e))
                   ? -1
                   : 0;
    }
    p->etp = p->tp;
    if (ep == 1) p->ep = mt_comm_single();
    else if (edp == 1) p->ep = p->dpcp;
    else if (!(p->ep = group(p, MT_GROUP_EP, e))) return -1;
    if (ep == 1) p->edp = p->dpcp;
    else if (edp == 1) p->edp = mt_comm_single();
    else if (!(p->edp = group(p, MT_GROUP_EDP, e))) return -1;
    return 0;
}

static int init(mt_parallel *p, mt_comm *world, int owned, int tp, int cp, int pp, int ep, int etp, mt_err *e)
{
    p->world = world;
    p->own_world = owned;
    p->rank = world->rank;
    p->size = world->size;
    if (mt_grid_make_expert(&p->grid, p->size, tp, cp, pp, ep, etp, e)) return -1;
    p->coord = mt_grid_coords(&p->grid, p->rank);
    if (!(p->tp = group(p, MT_GROUP_TP, e)) || !(p->dp = group(p, MT_GROUP_DP, e)) || !(p->pp = group(p, MT_GROUP_PP, e)) ||
        context_groups(p, e) || expert_groups(p, e))
        return mt_err_prefix(e, "parallel groups");
    return 0;
}

int mt_parallel_init_expert(mt_parallel *p, const mt_boot *boot, int tp, int cp, int pp, int ep, int etp, mt_err *e)
{
    memset(p, 0, sizeof *p);
    mt_comm *w = boot->size > 1 ? mt_comm_mpi_world(e) : mt_comm_single();
    if (!w) return -1;
    return init(p, w, 1, tp, cp, pp, ep, etp, e);
}

int mt_parallel_init_comm_expert(mt_parallel *p, mt_comm *world, int tp, int cp, int pp, int ep, int etp, mt_err *e)
{
    memset(p, 0, sizeof *p);
    return init(p, world, 0, tp, cp, pp, ep, etp, e);
}

int mt_parallel_init_cp(mt_parallel *p, const mt_boot *boot, int tp, int cp, int pp, int ep, mt_err *e)
{
    return mt_parallel_init_expert(p, boot, tp, cp, pp, ep, 0, e);
}

int mt_parallel_init_comm_cp(mt_parallel *p, mt_comm *world, int tp, int cp, int pp, int ep, mt_err *e)
{
    return mt_parallel_init_comm_expert(p, world, tp, cp, pp, ep, 0, e);
}

int mt_parallel_init_ep(mt_parallel *p, const mt_boot *boot, int tp, int pp, int ep, mt_err *e)
{
    return mt_parallel_init_cp(p, boot, tp, 1, pp, ep, e);
}

int mt_parallel_init(mt_parallel *p, const mt_boot *boot, int tp, int pp, mt_err *e)
{
    return mt_parallel_init_ep(p, boot, tp, pp, 1, e);
}

int mt_parallel_init_comm_ep(mt_parallel *p, mt_comm *world, int tp, int pp, int ep, mt_err *e)
{
    return mt_parallel_init_comm_cp(p, world, tp, 1, pp, ep, e);
}

int mt_parallel_init_comm(mt_parallel *p, mt_comm *world, int tp, int pp, mt_err *e)
{
    return mt_parallel_init_comm_ep(p, world, tp, pp, 1, e);
}

void mt_parallel_free(mt_parallel *p)
{
    if (p->ep != p->dp && p->ep != p->dpcp) mt_comm_free(p->ep);
    if (p->edp != p->dp && p->edp != p->dpcp) mt_comm_free(p->edp);
    if (p->dpcp != p->dp) mt_comm_free(p->dpcp);
    if (p->etp && p->etp != p->tp) mt_comm_free(p->etp);
    if (p->tpcp && p->tpcp != p->tp) mt_comm_free(p->tpcp);
    mt_comm_free(p->cp);
    mt_comm_free(p->tp);
    mt_comm_free(p->dp);
    mt_comm_free(p->pp);
    if (p->own_world) mt_comm_free(p->world);
    memset(p, 0, sizeof *p);
}
