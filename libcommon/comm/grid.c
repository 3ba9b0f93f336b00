/* grid.c: Megatron's rank order for the parallel groups (see grid.h). */
#include "comm/grid.h"

int mt_grid_make(mt_grid *g, int world, int tp, int cp, int pp, mt_err *e)
{
    if (tp < 1 || cp < 1 || pp < 1 || world < 1 || world % (tp * cp * pp))
        return mt_err_set(e,
                          "world size %d is not a multiple of --tensor-model-parallel-size (%d) x "
                          "--context-parallel-size (%d) x --pipeline-model-parallel-size (%d)",
                          world, tp, cp, pp);
    g->tp = tp, g->cp = cp, g->pp = pp, g->dp = world / (tp * cp * pp);
    g->ep = 1, g->etp = tp, g->edp = g->cp * g->dp;
    return 0;
}

int mt_grid_make_ep(mt_grid *g, int world, int tp, int cp, int pp, int ep, mt_err *e)
{
    return mt_grid_make_expert(g, world, tp, cp, pp, ep, 0, e);
}

int mt_grid_make_expert(mt_grid *g, int world, int tp, int cp, int pp, int ep, int etp, mt_err *e)
{
    if (mt_grid_make(g, world, tp, cp, pp, e)) return -1;
    if (etp < 0) return mt_err_set(e, "--expert-tensor-parallel-size (%d) is negative", etp);
    if (etp == 0) etp = tp;
    int x = g->cp * g->dp, stage = tp * x;
    if (ep >= 1 && etp != tp && stage % (etp * ep))
        return mt_err_set(e,
                          "--expert-tensor-parallel-size (%d) x --expert-model-parallel-size (%d) does not divide the "
                          "ranks of a pipeline stage %d (world size %d / --pipeline-model-parallel-size %d)",
                          etp, ep, stage, world, pp);
    if (ep < 1 || (etp == tp && x % ep)) {
        if (cp == 1)
            return mt_err_set(e,
                              "--expert-model-parallel-size (%d) does not divide the data-parallel size %d (world size "
                              "%d / (--tensor-model-parallel-size %d x --pipeline-model-parallel-size %d))",
                              ep, g->dp, world, tp, pp);
        return mt_err_set(e,
                          "--expert-model-parallel-size (%d) does not divide the data-parallel x context-parallel "
                          "size %d (world size %d / (--tensor-model-parallel-size %d x --pipeline-model-parallel-size %d))",
                          ep, x, world, tp, pp);
    }
    g->ep = ep, g->etp = etp, g->edp = stage / (etp * ep);
    return 0;
}

int mt_grid_world(const mt_grid *g) { return g->tp * g->cp * g->dp * g->pp; }

mt_grid_coord mt_grid_coords(const mt_grid *g, int rank)
{
    mt_grid_coord c;
    c.tp = rank % g->tp;
    rank /= g->tp;
    c.cp = rank % g->cp;
    rank /= g->cp;
    c.dp = rank % g->dp;
    c.pp = rank / g->dp;
    /* the expert view: the place in the stage s = tp_rank + tp (cp_rank + cp dp_rank) split as expert tensor
     * rank + etp (expert rank + ep x expert-data-parallel rank) */
    int ep = g->ep > 0 ? g->ep : 1, etp = g->etp > 0 ? g->etp : g->tp;
    int s = c.tp + g->tp * (c.cp + g->cp * c.dp);
    c.etp = s % etp;
    c.ep = s / etp % ep;
    c.edp = s / etp / ep;
    return c;
}

int mt_grid_rank(const mt_grid *g, mt_grid_coord c) { return c.tp + g->tp * (c.cp + g->cp * (c.dp + g->dp * c.pp)); }

int mt_grid_group(const mt_grid *g, int rank, mt_group_kind kind, int *members, int *color, int *index)
{
    mt_grid_coord me = mt_grid_coords(g, rank);
    int n = 0, world = mt_grid_world(g), col = -1;
    if (kind == MT_GROUP_EMBD && me.pp != 0 && me.pp != g->pp - 1) {
        if (color) *color = -1;
        if (index) *index = -1;
        return 0;
    }
    for (int r = 0; r < world; r++) {
        mt_grid_coord c = mt_grid_coords(g, r);
        int same = 0;
        switch (kind) {
        case MT_GROUP_TP: same = c.cp == me.cp && c.dp == me.dp && c.pp == me.pp; break;
        case MT_GROUP_CP: same = c.tp == me.tp && c.dp == me.dp && c.pp == me.pp; break;
        case MT_GROUP_DP: same = c.tp == me.tp && c.cp == me.cp && c.pp == me.pp; break;
        case MT_GROUP_PP: same = c.tp == me.tp && c.cp == me.cp && c.dp == me.dp; break;
        case MT_GROUP_MP: same = c.cp == me.cp && c.dp == me.dp; break;
        case MT_GROUP_EP: same = c.etp == me.etp && c.pp == me.pp && c.edp == me.edp; break;
        case MT_GROUP_EDP: same = c.etp == me.etp && c.pp == me.pp && c.ep == me.ep; break;
        case MT_GROUP_ETP: same = c.pp == me.pp && c.ep == me.ep && c.edp == me.edp; break;
        case MT_GROUP_DPCP: same = c.tp == me.tp && c.pp == me.pp; break;
        case MT_GROUP_EMBD:
            same = c.tp == me.tp && c.cp == me.cp && c.dp == me.dp && (c.pp == 0 || c.pp == g->pp - 1);
            break;
        }
        if (!same) continue;
        if (r == rank && index) *index = n;
        if (n == 0) col = r;   /* the group's lowest rank names it */
        members[n++] = r;
    }
    if (color) *color = col;
    return n;
}
