/* test_comm.c: the communicator layer. Run plainly: Megatron's rank order of the parallel groups and of
 * its expert groups, the refusal of launches without PMIx, the bootstrap and communicator of a singleton.
 * Run as "test_comm --mpi" under mpirun with several ranks (tests/pipeline/comm-mpi.sh): the PMIx
 * bootstrap, every collective of the MPI communicator against values each rank can compute, in the world
 * and in split groups, and the bytes each one counts; the parallel context's expert communicators (also with
 * an expert tensor size of 1).
 * Run as "test_comm --grid" with lines "WORLD TP CP PP EP ETP" on stdin: for each, the grid's groups of each
 * kind, one line per kind as tests/oracle/megatron_grid.py prints them, or "refused", then a line "."
 * (tests/pipeline/grid-ref.sh compares the two). */
#include <stdint.h>

#include "comm/agree.h"
#include "comm/bootstrap.h"
#include "comm/comm.h"
#include "comm/comm_nccl.h"
#include "comm/grid.h"
#include "comm/parallel.h"
#include "kernels.h"
#include "t.h"

static int members_eq(const int *m, int n, const int *want, int nw)
{
    if (n != nw) return 0;
    for (int i = 0; i < n; i++)
        if (m[i] != want[i]) return 0;
    return 1;
}

/* The line of ranks that disagree: the first entry that differs, both values when short, "not given" for
 * an entry one side lacks, nothing for equal descriptions (a description: "flag\0value\0" entries). */
TEST(agree_first_difference)
{
    static const char a[] = "--lr\0" "0.003\0--seed\0" "7\0--data-path\0d.idx: 10 bytes\0";
    static const char b[] = "--lr\0" "0.003\0--seed\0" "8\0--data-path\0d.idx: 11 bytes\0";
    char out[512], big[300];
    T_EQ_INT(mt_agree_first_difference(a, sizeof a - 1, a, sizeof a - 1, out, sizeof out), -1);
    T_EQ_INT(mt_agree_first_difference(b, sizeof b - 1, a, sizeof a - 1, out, sizeof out), 0);
    T_EQ_STR(out, "--seed differs from rank 0's: 8 here, 7 on rank 0");
    /* rank 0's list is longer: the first entry this rank lacks */
    T_EQ_INT(mt_agree_first_difference(a, 20, a, sizeof a - 1, out, sizeof out), 0);
    T_EQ_STR(out, "--data-path differs from rank 0's: not given here, d.idx: 10 bytes on rank 0");
    /* a value longer than MT_AGREE_SHOW_MAX: the flag alone */
    size_t n = (size_t)snprintf(big, sizeof big, "--data-path%c", 0);
    memset(big + n, 'x', MT_AGREE_SHOW_MAX + 1);
    big[n + MT_AGREE_SHOW_MAX + 1] = 0;
    n += MT_AGREE_SHOW_MAX + 2;
    T_EQ_INT(mt_agree_first_difference(big, n, a + 20, sizeof a - 21, out, sizeof out), 0);
    T_EQ_STR(out, "--data-path differs from rank 0's");
}

/* Megatron's example: 16 ranks, tensor 2, pipeline 4 -> data 2. */
TEST(grid_megatron_example)
{
    mt_grid g;
    mt_err e;
    T_CHECK(mt_grid_make(&g, 16, 2, 1, 4, &e) == 0);
    T_EQ_INT(g.dp, 2);
    int m[16], n, color, idx;
    for (int r = 0; r < 16; r++) {
        /* data-parallel: [0,2] [1,3] [4,6] [5,7] ... */
        n = mt_grid_group(&g, r, MT_GROUP_DP, m, &color, &idx);
        int base = (r / 4) * 4 + r % 2, dp[2] = {base, base + 2};
        T_CHECK(members_eq(m, n, dp, 2));
        T_EQ_INT(idx, (r % 4) / 2);
        /* tensor: [0,1] [2,3] ... */
        n = mt_grid_group(&g, r, MT_GROUP_TP, m, &color, &idx);
        int tp[2] = {r & ~1, (r & ~1) + 1};
        T_CHECK(members_eq(m, n, tp, 2));
        T_EQ_INT(color, r & ~1);
        /* pipeline: [0,4,8,12] [1,5,9,13] [2,6,10,14] [3,7,11,15] */
        n = mt_grid_group(&g, r, MT_GROUP_PP, m, &color, &idx);
        int pp[4] = {r % 4, r % 4 + 4, r % 4 + 8, r % 4 + 12};
        T_CHECK(members_eq(m, n, pp, 4));
        T_EQ_INT(idx, r / 4);
        /* embedding: first and last stage of the pipeline group */
        n = mt_grid_group(&g, r, MT_GROUP_EMBD, m, &color, &idx);
        if (r / 4 == 0 || r / 4 == 3) {
            int em[2] = {r % 4, r % 4 + 12};
            T_CHECK(members_eq(m, n, em, 2));
        } else {
            T_EQ_INT(n, 0);
            T_EQ_INT(color, -1);
        }
        /* model-parallel: tensor x pipeline, same data rank */
        n = mt_grid_group(&g, r, MT_GROUP_MP, m, NULL, NULL);
        T_EQ_INT(n, 8);
        T_EQ_INT(mt_grid_rank(&g, mt_grid_coords(&g, r)), r);
    }
}

TEST(grid_coords_and_errors)
{
    mt_grid g;
    mt_err e;
    T_CHECK(mt_grid_make(&g, 24, 2, 3, 2, &e) == 0);
    T_EQ_INT(g.dp, 2);
    /* rank = tp + 2 (cp + 3 (dp + 2 pp)) */
    mt_grid_coord c = mt_grid_coords(&g, 1 + 2 * (2 + 3 * (1 + 2 * 1)));
    T_EQ_INT(c.tp, 1);
    T_EQ_INT(c.cp, 2);
    T_EQ_INT(c.dp, 1);
    T_EQ_INT(c.pp, 1);
    int m[24];
    /* data-parallel group of rank 0: ranks with tp 0, cp 0, pp 0 -> 0 and 6 */
    int n = mt_grid_group(&g, 0, MT_GROUP_DP, m, NULL, NULL), want[2] = {0, 6};
    T_CHECK(members_eq(m, n, want, 2));
    /* every rank is in exactly one group of each kind, and colours are equal within a group */
    for (int r = 0; r < 24; r++) {
        int col, k = mt_grid_group(&g, r, MT_GROUP_CP, m, &col, NULL);
        T_EQ_INT(k, 3);
        for (int i = 0; i < k; i++) {
            int c2, m2[24];
            mt_grid_group(&g, m[i], MT_GROUP_CP, m2, &c2, NULL);
            T_EQ_INT(c2, col);
        }
    }
    T_CHECK(mt_grid_make(&g, 10, 4, 1, 1, &e) == -1);
    T_CHECK(strstr(e.msg, "--tensor-model-parallel-size (4)") != NULL);
    /* one stage: the embedding group is the rank itself */
    T_CHECK(mt_grid_make(&g, 4, 1, 1, 1, &e) == 0);
    n = mt_grid_group(&g, 3, MT_GROUP_EMBD, m, NULL, NULL);
    T_EQ_INT(n, 1);
    T_EQ_INT(m[0], 3);
}

/* Megatron's expert groups for tp 2, pp 1, 8 ranks (dp 4), ep 2: its expert RankGenerator (order
 * tp-ep-dp-pp) gives the expert-parallel groups [0,2] [1,3] [4,6] [5,7] and the expert-data-parallel
 * groups [0,4] [1,5] [2,6] [3,7]. */
TEST(grid_expert_example)
{
    mt_grid g;
    mt_err e;
    T_CHECK(mt_grid_make_ep(&g, 8, 2, 1, 1, 2, &e) == 0);
    T_EQ_INT(g.dp, 4);
    T_EQ_INT(g.ep, 2);
    T_EQ_INT(g.edp, 2);
    static const int ep_groups[4][2] = {{0, 2}, {1, 3}, {4, 6}, {5, 7}}, edp_groups[4][2] = {{0, 4}, {1, 5}, {2, 6}, {3, 7}};
    int m[8], n, color, idx;
    for (int r = 0; r < 8; r++) {
        int d = r / 2;   /* the data-parallel rank */
        mt_grid_coord c = mt_grid_coords(&g, r);
        T_EQ_INT(c.dp, d);
        T_EQ_INT(c.ep, d % 2);
        T_EQ_INT(c.edp, d / 2);
        n = mt_grid_group(&g, r, MT_GROUP_EP, m, &color, &idx);
        const int *want = ep_groups[(r % 2) + 2 * (d / 2)];
        T_CHECK(members_eq(m, n, want, 2));
        T_EQ_INT(idx, d % 2);
        T_EQ_INT(color, want[0]);
        n = mt_grid_group(&g, r, MT_GROUP_EDP, m, &color, &idx);
        want = edp_groups[(r % 2) + 2 * (d % 2)];
        T_CHECK(members_eq(m, n, want, 2));
        T_EQ_INT(idx, d / 2);
        T_EQ_INT(color, want[0]);
    }
    /* the dense groups are untouched by ep */
    n = mt_grid_group(&g, 5, MT_GROUP_DP, m, NULL, NULL);
    int dp[4] = {1, 3, 5, 7};
    T_CHECK(members_eq(m, n, dp, 4));
    /* a grid made without ep, or zeroed ep: no expert parallelism (ep groups of one, edp = dp) */
    T_CHECK(mt_grid_make(&g, 8, 2, 1, 1, &e) == 0);
    T_CHECK(g.ep == 1 && g.edp == 4);
    n = mt_grid_group(&g, 5, MT_GROUP_EP, m, NULL, &idx);
    T_CHECK(n == 1 && m[0] == 5 && idx == 0);
    g.ep = 0;
    n = mt_grid_group(&g, 5, MT_GROUP_EDP, m, NULL, &idx);
    T_CHECK(members_eq(m, n, dp, 4) && idx == 2);
}

/* Over many sizes: every rank in exactly one expert-parallel and one expert-data-parallel group (its
 * group's members all name the same group), of sizes ep and edp with ep x edp x tp x pp = world, the
 * two meeting in the rank alone; each expert group inside one data-parallel group (inside the ranks of
 * one tensor rank and stage with cp > 1); and each rank where Megatron's expert order puts it:
 * rank = tp_rank + tp (ep_rank + ep (edp_rank + edp pp_rank)) (cp folded into the data-parallel rank). */
TEST(grid_expert_groups_property)
{
    int m[256], m2[256], dpm[256], checked = 0;
    mt_err e;
    for (int tp = 1; tp <= 3; tp++)
        for (int cp = 1; cp <= 2; cp++)
            for (int pp = 1; pp <= 3; pp++)
                for (int dp = 1; dp <= 6; dp++)
                    for (int ep = 1; ep <= 6; ep++) {
                        int world = tp * cp * pp * dp;
                        mt_grid g;
                        if ((cp * dp) % ep) {
                            T_CHECK(mt_grid_make_ep(&g, world, tp, cp, pp, ep, &e) == -1);
                            T_CHECK(strstr(e.msg, "--expert-model-parallel-size") != NULL);
                            continue;
                        }
                        T_CHECK(mt_grid_make_ep(&g, world, tp, cp, pp, ep, &e) == 0);
                        int edp = cp * dp / ep;
                        T_CHECK(g.ep == ep && g.edp == edp);
                        T_EQ_INT(g.ep * g.edp * g.tp * g.pp, world);
                        for (int r = 0; r < world; r++) {
                            mt_grid_coord c = mt_grid_coords(&g, r);
                            T_EQ_INT(r, c.tp + tp * (c.ep + ep * (c.edp + edp * c.pp)));
                            for (int kind = MT_GROUP_EP; kind <= MT_GROUP_EDP; kind++) {
                                int col, idx, n = mt_grid_group(&g, r, (mt_group_kind)kind, m, &col, &idx);
                                T_EQ_INT(n, kind == MT_GROUP_EP ? ep : edp);
                                T_EQ_INT(m[idx], r);
                                T_EQ_INT(idx, kind == MT_GROUP_EP ? c.ep : c.edp);
                                for (int i = 0; i < n; i++) {
                                    int c2, i2, n2 = mt_grid_group(&g, m[i], (mt_group_kind)kind, m2, &c2, &i2);
                                    T_CHECK(c2 == col && i2 == i && members_eq(m2, n2, m, n));
                                }
                                /* inside the data-parallel group (with cp: the dp x cp ranks of the tensor rank and stage) */
                                int nd = mt_grid_group(&g, r, MT_GROUP_DP, dpm, NULL, NULL);
                                for (int i = 0; i < n; i++) {
                                    mt_grid_coord o = mt_grid_coords(&g, m[i]);
                                    int inside = o.tp == c.tp && o.pp == c.pp;
                                    if (cp == 1) {
                                        inside = 0;
                                        for (int j = 0; j < nd; j++) inside |= dpm[j] == m[i];
                                    }
                                    T_CHECK(inside);
                                }
                            }
                            /* the two groups meet in r alone */
                            int ne = mt_grid_group(&g, r, MT_GROUP_EP, m, NULL, NULL);
                            int nf = mt_grid_group(&g, r, MT_GROUP_EDP, m2, NULL, NULL), common = 0;
                            for (int i = 0; i < ne; i++)
                                for (int j = 0; j < nf; j++) common += m[i] == m2[j];
                            T_EQ_INT(common, 1);
                        }
                        /* every rank in exactly one group of each kind: each group counted once (from its lowest rank) */
                        for (int kind = MT_GROUP_EP; kind <= MT_GROUP_EDP; kind++) {
                            int seen[256] = {0};
                            for (int r = 0; r < world; r++) {
                                int n = mt_grid_group(&g, r, (mt_group_kind)kind, m, NULL, NULL);
                                if (m[0] == r)
                                    for (int i = 0; i < n; i++) seen[m[i]]++;
                            }
                            for (int r = 0; r < world; r++) T_EQ_INT(seen[r], 1);
                        }
                        checked++;
                    }
    T_CHECK(checked > 100);
}

/* grid.h's context example: tp 2, cp 2 on 8 ranks (dp 2): context groups [0,2] [1,3] [4,6] [5,7], data
 * groups [0,4] [1,5] [2,6] [3,7], data x context groups [0,2,4,6] [1,3,5,7] (the rank's index in it
 * cp_rank + cp dp_rank) */
TEST(grid_context_example)
{
    mt_grid g;
    mt_err e;
    T_CHECK(mt_grid_make(&g, 8, 2, 2, 1, &e) == 0);
    T_EQ_INT(g.dp, 2);
    static const int cpg[4][2] = {{0, 2}, {1, 3}, {4, 6}, {5, 7}}, dpg[4][2] = {{0, 4}, {1, 5}, {2, 6}, {3, 7}};
    static const int dpcp[2][4] = {{0, 2, 4, 6}, {1, 3, 5, 7}};
    for (int r = 0; r < 8; r++) {
        int m[8], n, idx;
        mt_grid_coord c = mt_grid_coords(&g, r);
        n = mt_grid_group(&g, r, MT_GROUP_CP, m, NULL, &idx);
        T_CHECK(members_eq(m, n, cpg[(r / 4) * 2 + r % 2], 2) && idx == c.cp);
        n = mt_grid_group(&g, r, MT_GROUP_DP, m, NULL, &idx);
        T_CHECK(members_eq(m, n, dpg[r % 4], 2) && idx == c.dp);
        n = mt_grid_group(&g, r, MT_GROUP_DPCP, m, NULL, &idx);
        T_CHECK(members_eq(m, n, dpcp[r % 2], 4) && idx == c.cp + 2 * c.dp);
    }
}

/* An expert tensor size other than tp (grid.h's example): tp 2, etp 1, pp 1, 8 ranks, ep 2: expert groups
 * [0,1] [2,3] [4,5] [6,7], expert-data-parallel groups [0,2,4,6] [1,3,5,7], expert-tensor groups of one
 * rank; the dense groups as without it. etp 2 (= tp) and etp 0 give today's grid; a size etp x ep does not
 * divide is refused naming both flags. */
TEST(grid_expert_tensor_example)
{
    mt_grid g, h;
    mt_err e;
    T_CHECK(mt_grid_make_expert(&g, 8, 2, 1, 1, 2, 1, &e) == 0);
    T_CHECK(g.dp == 4 && g.ep == 2 && g.etp == 1 && g.edp == 4);
    int m[8], n, color, idx;
    for (int r = 0; r < 8; r++) {
        mt_grid_coord c = mt_grid_coords(&g, r);
        T_CHECK(c.tp == r % 2 && c.dp == r / 2 && c.etp == 0 && c.ep == r % 2 && c.edp == r / 2);
        int ep[2] = {r & ~1, r | 1}, edp[4] = {r % 2, r % 2 + 2, r % 2 + 4, r % 2 + 6}, tp[2] = {r & ~1, r | 1};
        n = mt_grid_group(&g, r, MT_GROUP_EP, m, &color, &idx);
        T_CHECK(members_eq(m, n, ep, 2) && idx == r % 2 && color == ep[0]);
        n = mt_grid_group(&g, r, MT_GROUP_EDP, m, &color, &idx);
        T_CHECK(members_eq(m, n, edp, 4) && idx == r / 2 && color == edp[0]);
        n = mt_grid_group(&g, r, MT_GROUP_ETP, m, &color, &idx);
        T_CHECK(n == 1 && m[0] == r && idx == 0 && color == r);
        n = mt_grid_group(&g, r, MT_GROUP_TP, m, NULL, NULL);
        T_CHECK(members_eq(m, n, tp, 2));
    }
    /* etp = tp, or 0: the grid of mt_grid_make_ep, its expert-tensor groups the tensor groups */
    for (int etp = 0; etp <= 2; etp += 2) {
        T_CHECK(mt_grid_make_expert(&g, 16, 2, 2, 2, 2, etp, &e) == 0);
        T_CHECK(mt_grid_make_ep(&h, 16, 2, 2, 2, 2, &e) == 0);
        T_CHECK(g.tp == h.tp && g.cp == h.cp && g.dp == h.dp && g.pp == h.pp && g.ep == h.ep && g.edp == h.edp && g.etp == 2);
        for (int r = 0; r < 16; r++)
            for (int kind = MT_GROUP_TP; kind <= MT_GROUP_ETP; kind++) {
                int m2[16], c1, c2, i1, i2;
                n = mt_grid_group(&g, r, (mt_group_kind)(kind == MT_GROUP_ETP ? MT_GROUP_TP : kind), m, &c1, &i1);
                int n2 = mt_grid_group(&h, r, (mt_group_kind)kind, m2, &c2, &i2);
                T_CHECK(members_eq(m, n, m2, n2) && c1 == c2 && i1 == i2);
            }
    }
    /* tp 2, etp 1, pp 1 on 6 ranks: ep 4 does not divide the 6 ranks of a stage; ep 3 does (edp 2) */
    T_CHECK(mt_grid_make_expert(&g, 6, 2, 1, 1, 4, 1, &e) == -1);
    T_EQ_STR(e.msg, "--expert-tensor-parallel-size (1) x --expert-model-parallel-size (4) does not divide the ranks of "
                    "a pipeline stage 6 (world size 6 / --pipeline-model-parallel-size 1)");
    T_CHECK(mt_grid_make_expert(&g, 6, 2, 1, 1, 3, 1, &e) == 0 && g.edp == 2);
    T_CHECK(mt_grid_make_expert(&g, 8, 2, 1, 1, 2, -1, &e) == -1);
    T_CHECK(strstr(e.msg, "--expert-tensor-parallel-size (-1)") != NULL);
    T_CHECK(mt_grid_make_expert(&g, 8, 2, 1, 1, 0, 1, &e) == -1);
    T_CHECK(strstr(e.msg, "--expert-model-parallel-size (0)") != NULL);
}

/* --grid: for each line "WORLD TP CP PP EP ETP" of stdin, each kind's groups, each once, from its lowest
 * rank, in the oracle's format, then ".". */
static void print_grid(const int *a)
{
    mt_grid g;
    mt_err e;
    if (mt_grid_make_expert(&g, a[0], a[1], a[2], a[3], a[4], a[5], &e)) {
        printf("refused\n.\n");
        fprintf(stderr, "%s\n", e.msg);
        return;
    }
    static const struct { mt_group_kind kind; const char *name; } kinds[] = {
        {MT_GROUP_TP, "TP"}, {MT_GROUP_CP, "CP"}, {MT_GROUP_DP, "DP"}, {MT_GROUP_PP, "PP"}, {MT_GROUP_MP, "MP"},
        {MT_GROUP_DPCP, "DPCP"}, {MT_GROUP_EP, "EP"}, {MT_GROUP_EDP, "EDP"}, {MT_GROUP_ETP, "ETP"}};
    int world = mt_grid_world(&g), *m = malloc((size_t)world * sizeof *m);
    if (!m) abort();
    for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
        printf("%s:", kinds[k].name);
        for (int r = 0; r < world; r++) {
            int color, n = mt_grid_group(&g, r, kinds[k].kind, m, &color, NULL);
            if (color != r) continue;
            for (int i = 0; i < n; i++) printf("%c%d", i ? ',' : ' ', m[i]);
        }
        printf("\n");
    }
    free(m);
    printf(".\n");
}

/* The parallel context on one rank: ep 1 makes a one-rank ep and edp = dp, no other communicator; an ep
 * that does not divide the data-parallel size is refused naming the flag. */
TEST(parallel_expert_single)
{
    mt_comm *w = mt_comm_single();
    mt_parallel p;
    mt_err e;
    T_CHECK(mt_parallel_init_comm(&p, w, 1, 1, &e) == 0);
    T_CHECK(p.ep_size == 1 && p.ep && p.ep->size == 1 && p.ep != p.dp && p.edp == p.dp && p.coord.ep == 0);
    T_CHECK(p.cp_size == 1 && p.cp && p.cp->size == 1 && p.cp != p.dp && p.dpcp == p.dp);   /* no context split */
    mt_parallel_free(&p);
    T_CHECK(mt_parallel_init_comm_cp(&p, w, 1, 2, 1, 1, &e) == -1);
    T_CHECK(strstr(e.msg, "--context-parallel-size (2)") != NULL);
    mt_parallel_free(&p);
    T_CHECK(mt_parallel_init_comm_ep(&p, w, 1, 1, 2, &e) == -1);
    T_CHECK(strstr(e.msg, "--expert-model-parallel-size (2) does not divide the data-parallel size 1") != NULL);
    mt_parallel_free(&p);
    T_CHECK(w->size == 1);   /* not owned */
    mt_comm_free(w);
}

static const char *const *fake_env;
static const char *fake_get(const char *name)
{
    for (int i = 0; fake_env[i]; i += 2)
        if (!strcmp(fake_env[i], name)) return fake_env[i + 1];
    return NULL;
}

TEST(refuse_launch_without_pmix)
{
    mt_err e;
    const char *srun2[] = {"SLURM_NTASKS", "2", "SLURM_STEP_NUM_TASKS", "2", NULL};
    fake_env = srun2;
    T_CHECK(mt_boot_check_env(fake_get, &e) == -1);
    T_CHECK(strstr(e.msg, "srun --mpi=pmix") != NULL);
    const char *ompi[] = {"OMPI_COMM_WORLD_SIZE", "4", NULL};
    fake_env = ompi;
    T_CHECK(mt_boot_check_env(fake_get, &e) == -1);
    const char *pmi[] = {"PMI_SIZE", "3", NULL};
    fake_env = pmi;
    T_CHECK(mt_boot_check_env(fake_get, &e) == -1);
    /* one task (an sbatch script's own shell, srun -n 1) is a singleton */
    const char *one[] = {"SLURM_NTASKS", "1", "SLURM_STEP_NUM_TASKS", "1", NULL};
    fake_env = one;
    T_CHECK(mt_boot_check_env(fake_get, &e) == 0);
    const char *none[] = {NULL};
    fake_env = none;
    T_CHECK(mt_boot_check_env(fake_get, &e) == 0);
}

TEST(single_rank_comm)
{
    mt_comm *c = mt_comm_single();
    mt_err e;
    float x[3] = {1, 2, 3};
    size_t counts[1] = {3};
    T_CHECK(mt_all_reduce(c, x, 3, MT_C_F32, &e) == 0);
    T_CHECK(mt_all_reduce_op(c, x, 3, MT_C_F32, MT_OP_MAX, &e) == 0);
    T_CHECK(mt_reduce_scatter(c, x, counts, MT_C_F32, &e) == 0);
    T_CHECK(mt_all_gather(c, x, counts, MT_C_F32, &e) == 0);
    T_CHECK(mt_broadcast(c, x, 3, MT_C_F32, 0, &e) == 0);
    T_CHECK(mt_barrier(c, &e) == 0);
    T_CHECK(x[0] == 1 && x[1] == 2 && x[2] == 3);
    T_EQ_INT(c->bytes_sent, 0);
    T_CHECK(mt_send(c, x, 1, MT_C_F32, 1, &e) == -1);
    /* a batch: sends to self matched in order with receives from self */
    float a[2] = {7, 8}, b[1] = {9}, ra[2] = {0, 0}, rb[1] = {0};
    mt_p2p ops[4] = {{0, ra, 2, MT_C_F32, 0}, {1, a, 2, MT_C_F32, 0}, {1, b, 1, MT_C_F32, 0}, {0, rb, 1, MT_C_F32, 0}};
    T_CHECK(mt_p2p_batch(c, ops, 4, &e) == 0);
    T_CHECK(ra[0] == 7 && ra[1] == 8 && rb[0] == 9);
    T_CHECK(mt_p2p_batch(c, ops + 1, 1, &e) == -1);   /* a send nobody receives */
    ops[0].peer = 1;
    T_CHECK(mt_p2p_batch(c, ops, 2, &e) == -1 && strstr(e.msg, "rank 1"));
    T_EQ_INT(c->bytes_sent, 0);
    /* all-to-all: the own block copied, nothing sent; unequal own counts refused */
    double from[3] = {1.5, -2, 7}, to[4] = {0, 0, 0, 9};
    size_t sc[1] = {3}, rc[1] = {3};
    T_CHECK(mt_all_to_all_v(c, from, sc, to, rc, MT_C_F64, &e) == 0);
    T_CHECK(to[0] == 1.5 && to[1] == -2 && to[2] == 7 && to[3] == 9);
    rc[0] = 2;
    T_CHECK(mt_all_to_all_v(c, from, sc, to, rc, MT_C_F64, &e) == -1 && strstr(e.msg, "sends 3 elements to itself"));
    T_EQ_INT(c->bytes_sent, 0);
    mt_comm *s = mt_comm_split(c, 0, 0, &e);
    T_EQ_INT(s->size, 1);
    mt_comm_free(s);
    mt_comm_free(c);
    size_t ec[4];
    mt_comm_even_counts(10, 4, ec);
    T_CHECK(ec[0] == 3 && ec[1] == 3 && ec[2] == 2 && ec[3] == 2);
}

/* Which communicator: every branch of the choice, and the communicators it makes on one rank. */
TEST(choose_communicator)
{
    mt_comm_kind k;
    int dev;
    mt_err e;
    /* cpu: MPI whatever the GPUs */
    T_CHECK(mt_comm_choose("cpu", 1, 2, 0, 1, &k, &dev, &e) == 0 && k == MT_COMM_MPI);
    T_CHECK(mt_comm_choose(NULL, 0, 1, 8, 1, &k, &dev, &e) == 0 && k == MT_COMM_MPI);
    /* sim: staged */
    T_CHECK(mt_comm_choose("sim", 3, 4, 0, 1, &k, &dev, &e) == 0 && k == MT_COMM_STAGED);
    /* cuda, a GPU each: NCCL, local rank -> device */
    T_CHECK(mt_comm_choose("cuda", 3, 4, 4, 1, &k, &dev, &e) == 0 && k == MT_COMM_NCCL && dev == 3);
    T_CHECK(mt_comm_choose("cuda", 0, 2, 8, 1, &k, &dev, &e) == 0 && k == MT_COMM_NCCL && dev == 0);
    /* cuda, a GPU each but no NCCL in the build: staged */
    T_CHECK(mt_comm_choose("cuda", 1, 2, 2, 0, &k, &dev, &e) == 0 && k == MT_COMM_STAGED && dev == 1);
    /* cuda, ranks sharing GPUs: staged, local ranks spread over the GPUs */
    T_CHECK(mt_comm_choose("cuda", 1, 2, 1, 1, &k, &dev, &e) == 0 && k == MT_COMM_STAGED && dev == 0);
    T_CHECK(mt_comm_choose("cuda", 5, 6, 4, 1, &k, &dev, &e) == 0 && k == MT_COMM_STAGED && dev == 1);
    /* cuda, GPUs not countable (no NCCL): staged on the local rank's GPU */
    T_CHECK(mt_comm_choose("cuda", 2, 4, -1, 0, &k, &dev, &e) == 0 && k == MT_COMM_STAGED && dev == 2);
    /* refused: cuda without a GPU, an unknown backend */
    T_CHECK(mt_comm_choose("cuda", 0, 2, 0, 1, &k, &dev, &e) == -1 && strstr(e.msg, "no GPU on this node"));
    T_CHECK(mt_comm_choose("tpu", 0, 1, 1, 1, &k, &dev, &e) == -1 && strstr(e.msg, "'tpu'"));
    T_CHECK(!strcmp(mt_comm_kind_name(MT_COMM_NCCL), "nccl") && !strcmp(mt_comm_kind_name(MT_COMM_STAGED), "staged"));
    T_CHECK(mt_comm_gpu_count() >= -1);
    T_EQ_INT(mt_comm_nccl_built(), mt_comm_gpu_count() >= 0);
    /* the communicators for a kind: the host one for MPI, a staged one that does not own it */
    mt_comm *host = mt_comm_single();
    mtk *kc = mtk_open(&(mtk_config){.backend = "cpu", .threads = 1}, &e);
    T_CHECK(kc != NULL);
    T_CHECK(mt_comm_for_backend(host, kc, MT_COMM_MPI, &e) == host);
    mt_comm *st = mt_comm_for_backend(host, kc, MT_COMM_STAGED, &e);
    T_CHECK(st && !strcmp(st->ops->name, "staged") && st->size == 1);
    float *d = mtk_alloc(kc, 2 * sizeof *d, &e), x[2] = {1.5f, -2};
    mtk_to_device(kc, d, x, sizeof x);
    mt_p2p ops[2] = {{1, d, 1, MT_C_F32, 0}, {0, d + 1, 1, MT_C_F32, 0}};
    T_CHECK(mt_all_reduce(st, d, 2, MT_C_F32, &e) == 0 && mt_p2p_batch(st, ops, 2, &e) == 0);
    mtk_to_host(kc, x, d, sizeof x);
    T_CHECK(x[0] == 1.5f && x[1] == 1.5f);
    mt_comm_free(st);
    T_CHECK(host->size == 1);   /* still there */
    mtk_free(kc, d);
    mtk_close(kc);
    mt_comm_free(host);
}

/* ---- under mpirun ---- */

static mt_boot boot;
static mt_comm *world;

static float val(int rank, size_t i) { return (float)((rank + 1) * 1000 + (int)(i % 977)) * 0.5f; }

TEST(mpi_bootstrap)
{
    T_CHECK(boot.pmix);
    T_CHECK(boot.size >= 2);
    T_EQ_INT(world->rank, boot.rank);
    T_EQ_INT(world->size, boot.size);
    T_CHECK(boot.local_rank >= 0 && boot.local_rank < boot.local_size);
    /* the 128-byte blob an NCCL unique id would be */
    unsigned char blob[128];
    for (int i = 0; i < 128; i++) blob[i] = boot.rank == 0 ? (unsigned char)(i * 7 + 3) : 0;
    mt_err e;
    if (mt_boot_share(&boot, "mt.test.blob", blob, sizeof blob, 0, &e)) T_FAILF("%s", e.msg);
    for (int i = 0; i < 128; i++) T_EQ_INT(blob[i], (unsigned char)(i * 7 + 3));
}

TEST(mpi_all_reduce)
{
    int N = world->size;
    mt_err e;
    /* sizes below, at and above the rank count, odd */
    size_t sizes[] = {1, 3, (size_t)N, 1001, 100003};
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        size_t n = sizes[k];
        float *x = malloc(n * sizeof *x);
        for (size_t i = 0; i < n; i++) x[i] = val(world->rank, i);
        uint64_t before = world->bytes_sent;
        if (mt_all_reduce(world, x, n, MT_C_F32, &e)) T_FAILF("%s", e.msg);
        for (size_t i = 0; i < n; i++) {
            double want = 0;
            for (int r = 0; r < N; r++) want += val(r, i);
            if (fabs(x[i] - want) > 1e-6 * fabs(want)) {
                T_FAILF("n %zu element %zu: %g, expected %g", n, i, x[i], want);
                break;
            }
        }
        /* ring: 2 (N-1) chunks of about n/N floats */
        size_t c[64];
        mt_comm_even_counts(n, N, c);
        uint64_t sent = world->bytes_sent - before, want_sent = 0;
        for (int s = 0; s < N - 1; s++) want_sent += 4 * (c[((world->rank - s - 1) % N + N) % N] + c[((world->rank - s) % N + N) % N]);
        T_EQ_INT(sent, want_sent);
        free(x);
    }
    double d[2] = {world->rank, 1};
    if (mt_all_reduce(world, d, 2, MT_C_F64, &e)) T_FAILF("%s", e.msg);
    T_CHECK(d[0] == N * (N - 1) / 2.0 && d[1] == N);
    int64_t q = world->rank + 1;
    if (mt_all_reduce(world, &q, 1, MT_C_I64, &e)) T_FAILF("%s", e.msg);
    T_EQ_INT(q, N * (N + 1) / 2);
}

/* MAX: the largest value of any rank at each element, wherever it sits, for every element type;
 * the same bits on every rank (each rank then sums the results, which must come out N times one). */
TEST(mpi_all_reduce_max)
{
    int N = world->size, r = world->rank;
    mt_err e;
    size_t sizes[] = {1, (size_t)N + 1, 10007};
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        size_t n = sizes[k];
        float *x = malloc(n * sizeof *x);
        double *d = malloc(n * sizeof *d);
        int64_t *q = malloc(n * sizeof *q);
        unsigned char *b = malloc(n);
        /* the largest at element i is on rank i % N, and negative elsewhere on odd elements */
        for (size_t i = 0; i < n; i++) {
            int top = (int)(i % (size_t)N) == r;
            x[i] = top ? val(r, i) : (i % 2 ? -val(r, i) : val(r, i) * 0.1f);
            d[i] = top ? 1e300 : -(double)(r + 1) * (double)i;
            q[i] = top ? (int64_t)i - 5 : -(int64_t)(r + 10) * 1000 - (int64_t)i;
            b[i] = top ? 250 : (unsigned char)(r * 3 + (int)(i % 7));
        }
        uint64_t before = world->bytes_sent;
        if (mt_all_reduce_op(world, x, n, MT_C_F32, MT_OP_MAX, &e) || mt_all_reduce_op(world, d, n, MT_C_F64, MT_OP_MAX, &e) ||
            mt_all_reduce_op(world, q, n, MT_C_I64, MT_OP_MAX, &e) || mt_all_reduce_op(world, b, n, MT_C_BYTE, MT_OP_MAX, &e))
            T_FAILF("%s", e.msg);
        T_CHECK(world->bytes_sent > before);
        for (size_t i = 0; i < n; i++) {
            int top = (int)(i % (size_t)N);
            if (x[i] != val(top, i) || d[i] != 1e300 || q[i] != (int64_t)i - 5 || b[i] != 250) {
                T_FAILF("n %zu element %zu: %g %g %lld %d, expected %g", n, i, x[i], d[i], (long long)q[i], b[i], val(top, i));
                break;
            }
        }
        free(x), free(d), free(q), free(b);
    }
    /* NaN on one rank wins */
    float y[2] = {r == N - 1 ? NAN : 1.0f, (float)r};
    if (mt_all_reduce_op(world, y, 2, MT_C_F32, MT_OP_MAX, &e)) T_FAILF("%s", e.msg);
    T_CHECK(isnan(y[0]) && y[1] == (float)(N - 1));
}

/* 1 when every rank holds the same n bytes (a hash of them compared by max and sum). */
static int same_on_every_rank(const void *p, size_t n)
{
    const unsigned char *b = p;
    uint64_t h = 1469598103934665603u;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 1099511628211u;
    int64_t x[2] = {(int64_t)(h >> 34), 0}, y;
    mt_err e;
    y = x[0];
    if (mt_all_reduce_op(world, x, 1, MT_C_I64, MT_OP_MAX, &e) || mt_all_reduce(world, &y, 1, MT_C_I64, &e)) return 0;
    return y == x[0] * world->size;
}

/* bf16 and fp16: each hop of the ring adds in fp32 and rounds to the type, so the result is the ring's
 * own order of rounded sums (chunk c starts on rank c+1 and ends on rank c), the same bits everywhere;
 * MAX; and broadcast, all_gather and send/recv move the bits untouched. */
TEST(mpi_16bit)
{
    int N = world->size, r = world->rank;
    mt_err e;
    size_t n = 4099, counts[64];
    mt_comm_even_counts(n, N, counts);
    for (int f16 = 0; f16 < 2; f16++) {
        mt_cdtype t = f16 ? MT_C_F16 : MT_C_BF16;
        uint16_t (*to)(float) = f16 ? mt_f32_to_f16 : mt_f32_to_bf16;
        float (*from)(uint16_t) = f16 ? mt_f16_to_f32 : mt_bf16_to_f32;
        uint16_t *x = malloc(n * sizeof *x), *m = malloc(n * sizeof *m);
        #define V16(q, i) to((float)(((int)(i) * 37 + (q) * 101) % 1000) * 0.0123f - 5.1f + (float)(q))
        for (size_t i = 0; i < n; i++) x[i] = m[i] = V16(r, i);
        if (mt_all_reduce(world, x, n, t, &e) || mt_all_reduce_op(world, m, n, t, MT_OP_MAX, &e)) T_FAILF("%s", e.msg);
        size_t chunk = 0, end = counts[0];
        for (size_t i = 0; i < n; i++) {
            while (i >= end) end += counts[++chunk];
            uint16_t want = V16(((int)chunk + 1) % N, i), top = V16(0, i);
            for (int k = 1; k < N; k++) want = to(from(want) + from(V16(((int)chunk + 1 + k) % N, i)));
            for (int q = 1; q < N; q++)
                if (from(V16(q, i)) > from(top)) top = V16(q, i);
            if (x[i] != want || m[i] != top) {
                T_FAILF("%s element %zu: sum %04x (%g), expected %04x (%g); max %04x, expected %04x", f16 ? "fp16" : "bf16", i,
                        x[i], from(x[i]), want, from(want), m[i], top);
                break;
            }
        }
        T_CHECK(same_on_every_rank(x, n * 2));
        /* bytes moved untouched, NaN patterns included */
        for (size_t i = 0; i < n; i++) x[i] = r == 0 ? (uint16_t)(i * 2654435761u >> 7) : 0;
        if (mt_broadcast(world, x, n, t, 0, &e)) T_FAILF("%s", e.msg);
        for (size_t i = 0; i < n; i++)
            if (x[i] != (uint16_t)(i * 2654435761u >> 7)) {
                T_FAILF("broadcast element %zu", i);
                break;
            }
        size_t off = 0;
        for (int q = 0; q < r; q++) off += counts[q];
        for (size_t i = off; i < off + counts[r]; i++) x[i] = (uint16_t)(0xff80u + (unsigned)r);   /* NaN bits */
        if (mt_all_gather(world, x, counts, t, &e)) T_FAILF("%s", e.msg);
        off = 0;
        for (int q = 0; q < N; q++) {
            for (size_t i = off; i < off + counts[q]; i++)
                if (x[i] != (uint16_t)(0xff80u + (unsigned)q)) {
                    T_FAILF("all_gather element %zu", i);
                    break;
                }
            off += counts[q];
        }
        #undef V16
        free(x);
        free(m);
    }
}

TEST(mpi_reduce_scatter_all_gather)
{
    int N = world->size;
    mt_err e;
    /* uneven chunks, one empty */
    size_t counts[64], n = 0;
    for (int r = 0; r < N; r++) n += counts[r] = r == 1 ? 0 : (size_t)(17 * r + 5);
    float *x = malloc(n * sizeof *x);
    for (size_t i = 0; i < n; i++) x[i] = val(world->rank, i);
    if (mt_reduce_scatter(world, x, counts, MT_C_F32, &e)) T_FAILF("%s", e.msg);
    size_t off = 0;
    for (int r = 0; r < world->rank; r++) off += counts[r];
    for (size_t i = off; i < off + counts[world->rank]; i++) {
        double want = 0;
        for (int r = 0; r < N; r++) want += val(r, i);
        if (x[i] != (float)want) {
            T_FAILF("reduce_scatter element %zu: %g, expected %g", i, x[i], want);
            break;
        }
    }
    /* all_gather: every chunk from its owner */
    for (size_t i = off; i < off + counts[world->rank]; i++) x[i] = (float)(world->rank * 100000 + (int)i);
    if (mt_all_gather(world, x, counts, MT_C_F32, &e)) T_FAILF("%s", e.msg);
    off = 0;
    for (int r = 0; r < N; r++) {
        for (size_t i = off; i < off + counts[r]; i++)
            if (x[i] != (float)(r * 100000 + (int)i)) {
                T_FAILF("all_gather element %zu of rank %d: %g", i, r, x[i]);
                break;
            }
        off += counts[r];
    }
    free(x);
}

TEST(mpi_broadcast_send_recv_barrier)
{
    int N = world->size;
    mt_err e;
    size_t n = 300001;
    unsigned char *b = malloc(n);
    int root = N - 1;
    for (size_t i = 0; i < n; i++) b[i] = world->rank == root ? (unsigned char)(i * 31) : 0;
    uint64_t before = world->bytes_sent;
    if (mt_broadcast(world, b, n, MT_C_BYTE, root, &e)) T_FAILF("%s", e.msg);
    for (size_t i = 0; i < n; i++)
        if (b[i] != (unsigned char)(i * 31)) {
            T_FAILF("broadcast byte %zu", i);
            break;
        }
    /* a chain: every rank but the last from the root sends the buffer once */
    T_EQ_INT(world->bytes_sent - before, world->rank == (root + N - 1) % N ? 0 : n);
    free(b);
    /* a ring of send/recv: even ranks send first */
    double x = world->rank * 2.5, y = -1;
    int next = (world->rank + 1) % N, prev = (world->rank + N - 1) % N;
    if (world->rank % 2 == 0) {
        if (mt_send(world, &x, 1, MT_C_F64, next, &e) || mt_recv(world, &y, 1, MT_C_F64, prev, &e)) T_FAILF("%s", e.msg);
    } else {
        if (mt_recv(world, &y, 1, MT_C_F64, prev, &e) || mt_send(world, &x, 1, MT_C_F64, next, &e)) T_FAILF("%s", e.msg);
    }
    T_CHECK(y == prev * 2.5);
    if (mt_barrier(world, &e)) T_FAILF("%s", e.msg);
}

/* Batched point-to-point: every rank sends to and receives from both neighbours in one call, sends
 * listed first (blocking sends in that order would deadlock), a large ring shift, two messages to the
 * same peer matched in order, and the bytes of the sends counted. */
TEST(mpi_p2p)
{
    int N = world->size, r = world->rank, next = (r + 1) % N, prev = (r + N - 1) % N;
    mt_err e;
    size_t n = 300001;
    float *s = malloc(n * sizeof *s), *got = malloc(n * sizeof *got);
    for (size_t i = 0; i < n; i++) s[i] = val(r, i), got[i] = -1;
    int64_t to_prev[2] = {r, 11}, from_next[2] = {-1, -1}, second[1] = {r * 7}, from_next2[1] = {-1};
    mt_p2p ops[] = {
        {1, s, n, MT_C_F32, next},
        {1, to_prev, 2, MT_C_I64, prev},
        {1, second, 1, MT_C_I64, prev},
        {0, got, n, MT_C_F32, prev},
        {0, from_next, 2, MT_C_I64, next},
        {0, from_next2, 1, MT_C_I64, next},
    };
    uint64_t before = world->bytes_sent;
    if (mt_p2p_batch(world, ops, 6, &e)) T_FAILF("%s", e.msg);
    T_EQ_INT(world->bytes_sent - before, n * 4 + 16 + 8);
    for (size_t i = 0; i < n; i++)
        if (got[i] != val(prev, i)) {
            T_FAILF("ring shift element %zu: %g, expected %g", i, got[i], val(prev, i));
            break;
        }
    T_CHECK(from_next[0] == next && from_next[1] == 11 && from_next2[0] == next * 7);
    /* an exchange with one peer both ways, and a rank out of range refused */
    if (N >= 2) {
        int peer = r ^ 1;
        double x = r + 0.5, y = -1;
        mt_p2p ex[2] = {{1, &x, 1, MT_C_F64, peer < N ? peer : r}, {0, &y, 1, MT_C_F64, peer < N ? peer : r}};
        if (mt_p2p_batch(world, ex, 2, &e)) T_FAILF("%s", e.msg);
        T_CHECK(y == (peer < N ? peer : r) + 0.5);
    }
    mt_p2p bad = {0, &n, 1, MT_C_I64, N};
    T_CHECK(mt_p2p_batch(world, &bad, 1, &e) == -1);
    free(s);
    free(got);
}

/* The elements rank `from` sends rank `to` in the all-to-all tests: uneven, zero for some pairs (for 2 ranks
 * 0 -> 1; for 3 or 4, a pair each way among others), the own block included. */
static size_t a2a_count(int from, int to)
{
    return (from * 5 + to * 3 + 1) % 4 == 0 ? 0 : 1 + (size_t)((from * 131 + to * 71) % 97) * 29;
}
static int64_t a2a_val(int from, int to, size_t i) { return (int64_t)from * 1000000000 + (int64_t)to * 1000000 + (int64_t)i; }

/* all_to_all_v: every rank's blocks to every rank with uneven counts and empty blocks, each element
 * received where it belongs (the blocks from ranks 0, 1, ... one after another) and nothing else written;
 * the bytes sent are the blocks for the others, not the own one. In 8-byte and 2-byte elements, and again
 * with blocks and offsets beyond a small int limit (MPI's datatype path of pieces). */
TEST(mpi_all_to_all_v)
{
    int N = world->size, r = world->rank;
    mt_err e;
    size_t sc[64], rc[64], ns = 0, nr = 0, others = 0;
    for (int q = 0; q < N; q++) {
        ns += sc[q] = a2a_count(r, q);
        nr += rc[q] = a2a_count(q, r);
        if (q != r) others += sc[q];
    }
    int64_t *s = malloc((ns + 1) * sizeof *s), *g = malloc((nr + 1) * sizeof *g);
    uint16_t *s16 = malloc((ns + 1) * 2), *g16 = malloc((nr + 1) * 2);
    for (int pass = 0; pass < 2; pass++) {
        mt_comm_mpi_int_limit(world, pass ? 40 : (size_t)-1);   /* pass 1: blocks over 40 bytes as pieces */
        size_t off = 0;
        for (int q = 0; q < N; q++)
            for (size_t i = 0; i < sc[q]; i++, off++) s[off] = a2a_val(r, q, i), s16[off] = (uint16_t)(a2a_val(r, q, i) * 40503u >> 3);
        for (size_t i = 0; i <= nr; i++) g[i] = -1, g16[i] = 0xdead;
        uint64_t before = world->bytes_sent;
        if (mt_all_to_all_v(world, s, sc, g, rc, MT_C_I64, &e)) T_FAILF("%s", e.msg);
        T_EQ_INT(world->bytes_sent - before, others * 8);
        before = world->bytes_sent;
        if (mt_all_to_all_v(world, s16, sc, g16, rc, MT_C_BF16, &e)) T_FAILF("%s", e.msg);
        T_EQ_INT(world->bytes_sent - before, others * 2);
        off = 0;
        for (int q = 0; q < N; q++)
            for (size_t i = 0; i < rc[q]; i++, off++)
                if (g[off] != a2a_val(q, r, i) || g16[off] != (uint16_t)(a2a_val(q, r, i) * 40503u >> 3)) {
                    T_FAILF("pass %d: element %zu of the block from rank %d: %lld, expected %lld", pass, i, q, (long long)g[off],
                            (long long)a2a_val(q, r, i));
                    q = N;
                    break;
                }
        T_CHECK(g[nr] == -1 && g16[nr] == 0xdead);   /* nothing past the blocks */
    }
    mt_comm_mpi_int_limit(world, (size_t)-1);
    /* all blocks empty but one ring step: each rank sends 3 floats to the next only */
    size_t z[64] = {0}, zr[64] = {0};
    z[(r + 1) % N] = 3, zr[(r + N - 1) % N] = 3;
    float f[3] = {(float)r, 0.5f, -(float)r}, h[3] = {0, 0, 0};
    if (N > 1 && mt_all_to_all_v(world, f, z, h, zr, MT_C_F32, &e)) T_FAILF("%s", e.msg);
    int p = (r + N - 1) % N;
    T_CHECK(N == 1 || (h[0] == (float)p && h[1] == 0.5f && h[2] == -(float)p));
    free(s), free(g), free(s16), free(g16);
}

/* The parallel context's expert groups over the world, for every ep that divides the data-parallel size
 * (tp 1, and tp 2 on an even world): each communicator's members are its grid group's (a sum of their
 * world ranks), its rank the grid's index; ep 1 and ep = dp reuse dp instead of splitting. */
TEST(mpi_parallel_expert)
{
    int N = world->size;
    mt_err e;
    for (int tp = 1; tp <= 2; tp++) {
        if (N % tp) continue;
        int dp = N / tp;
        for (int ep = 1; ep <= dp + 1; ep++) {
            mt_parallel p;
            if (dp % ep) {
                T_CHECK(mt_parallel_init_comm_ep(&p, world, tp, 1, ep, &e) == -1 && strstr(e.msg, "--expert-model-parallel-size"));
                mt_parallel_free(&p);
                continue;
            }
            if (mt_parallel_init_comm_ep(&p, world, tp, 1, ep, &e)) {
                T_FAILF("tp %d ep %d: %s", tp, ep, e.msg);
                return;
            }
            T_EQ_INT(p.ep_size, ep);
            T_CHECK(ep != 1 || (p.edp == p.dp && p.ep->size == 1));
            T_CHECK(ep == 1 || ep != dp || (p.ep == p.dp && p.edp->size == 1));
            mt_comm *cs[2] = {p.ep, p.edp};
            for (int k = 0; k < 2; k++) {
                int m[64], idx, n = mt_grid_group(&p.grid, world->rank, k ? MT_GROUP_EDP : MT_GROUP_EP, m, NULL, &idx);
                T_EQ_INT(cs[k]->size, n);
                T_EQ_INT(cs[k]->rank, idx);
                T_EQ_INT(idx, k ? p.coord.edp : p.coord.ep);
                int64_t sum = world->rank * 1000 + 1, want = 0;
                for (int i = 0; i < n; i++) want += m[i] * 1000 + 1;
                if (mt_all_reduce(cs[k], &sum, 1, MT_C_I64, &e)) T_FAILF("%s", e.msg);
                T_EQ_INT(sum, want);
            }
            mt_parallel_free(&p);
        }
    }
    T_CHECK(world->size == N);   /* not owned by the contexts */
}

/* The parallel context's context groups over the world, for every cp that divides it (tp 1, and tp 2 on an
 * even world), with every ep that divides the data x context size: the cp and dpcp communicators' members
 * are their grid groups' (a sum of their world ranks), their ranks the grid's indices; cp 1 reuses dp as
 * dpcp; the expert groups span the data x context ranks. */
TEST(mpi_parallel_context)
{
    int N = world->size;
    mt_err e;
    for (int tp = 1; tp <= 2; tp++)
        for (int cp = 1; cp <= N; cp++) {
            if (N % (tp * cp)) continue;
            int x = N / tp;   /* the data x context size */
            for (int ep = 1; ep <= x; ep++) {
                if (x % ep) continue;
                mt_parallel p;
                if (mt_parallel_init_comm_cp(&p, world, tp, cp, 1, ep, &e)) {
                    T_FAILF("tp %d cp %d ep %d: %s", tp, cp, ep, e.msg);
                    return;
                }
                T_CHECK(p.cp_size == cp && p.cp->size == cp && p.dpcp->size == x && p.dp->size == x / cp);
                T_CHECK(cp != 1 || p.dpcp == p.dp);
                T_CHECK(ep != 1 || p.edp == p.dpcp);
                mt_comm *cs[4] = {p.cp, p.dpcp, p.ep, p.edp};
                const mt_group_kind kinds[4] = {MT_GROUP_CP, MT_GROUP_DPCP, MT_GROUP_EP, MT_GROUP_EDP};
                for (int k = 0; k < 4; k++) {
                    int m[64], idx, n = mt_grid_group(&p.grid, world->rank, kinds[k], m, NULL, &idx);
                    T_EQ_INT(cs[k]->size, n);
                    T_EQ_INT(cs[k]->rank, idx);
                    int64_t sum = world->rank * 1000 + 1, want = 0;
                    for (int i = 0; i < n; i++) want += m[i] * 1000 + 1;
                    if (mt_all_reduce(cs[k], &sum, 1, MT_C_I64, &e)) T_FAILF("%s", e.msg);
                    T_EQ_INT(sum, want);
                }
                mt_parallel_free(&p);
            }
        }
    T_CHECK(world->size == N);
}

/* The parallel context with an expert tensor size of 1 under tp 2 (an even world), for every ep with ep
 * dividing the world: the ep, edp and etp communicators' members are the expert grid's groups (a sum of
 * their world ranks), their ranks the grid's indices (the expert-parallel group mixes tensor ranks); tpcp
 * is tp itself with cp 1 and the tensor x context ranks with cp 2; etp 2 (= tp) keeps etp = tp. */
static void check_comm_group(mt_parallel *p, mt_comm *c, const int *m, int n, int idx)
{
    mt_err e;
    T_EQ_INT(c->size, n);
    T_EQ_INT(c->rank, idx);
    int64_t sum = world->rank * 1000 + 1, want = 0;
    for (int i = 0; i < n; i++) want += m[i] * 1000 + 1;
    if (mt_all_reduce(c, &sum, 1, MT_C_I64, &e)) T_FAILF("%s", e.msg);
    T_EQ_INT(sum, want);
    (void)p;
}

TEST(mpi_parallel_expert_tensor)
{
    int N = world->size, r = world->rank;
    mt_err e;
    if (N % 2) return;
    for (int cp = 1; cp <= 2; cp++)
        for (int ep = 1; ep <= N; ep++) {
            if (N % (2 * cp) || N % ep) continue;
            mt_parallel p;
            if (mt_parallel_init_comm_expert(&p, world, 2, cp, 1, ep, 1, &e)) {
                T_FAILF("tp 2 cp %d etp 1 ep %d: %s", cp, ep, e.msg);
                return;
            }
            T_CHECK(p.etp_size == 1 && p.etp->size == 1 && p.ep_size == ep && p.ep->size == ep && p.edp->size == N / ep);
            T_CHECK(p.coord.ep == r / 1 % ep && p.coord.edp == r / ep);   /* the place in the stage, read as etp 1 */
            mt_comm *cs[3] = {p.ep, p.edp, p.etp};
            const mt_group_kind kinds[3] = {MT_GROUP_EP, MT_GROUP_EDP, MT_GROUP_ETP};
            for (int k = 0; k < 3; k++) {
                int m[64], idx, n = mt_grid_group(&p.grid, r, kinds[k], m, NULL, &idx);
                check_comm_group(&p, cs[k], m, n, idx);
            }
            /* tensor x context: equal data rank (and stage), ordered tensor rank fastest */
            int m[64], n = 0;
            for (int q = 0; q < N; q++)
                if (q / (2 * cp) == r / (2 * cp)) m[n++] = q;
            T_CHECK(cp != 1 || p.tpcp == p.tp);
            check_comm_group(&p, p.tpcp, m, n, r % (2 * cp));
            mt_parallel_free(&p);
        }
    mt_parallel p;   /* etp = tp: the tensor group is the expert-tensor one */
    if (mt_parallel_init_comm_expert(&p, world, 2, 1, 1, 1, 2, &e)) T_FAILF("etp 2: %s", e.msg);
    else T_CHECK(p.etp == p.tp && p.etp_size == 2 && p.tpcp == p.tp);
    mt_parallel_free(&p);
    T_CHECK(world->size == N);
}

/* The host-staged communicator over the world, on device buffers of the backend MT_TEST_BACKEND (default
 * cpu; sim: the simulator's memory): every operation gives the bits and the byte counts of the MPI
 * communicator on host buffers of the same values, also in a split group. */
static int same_bits(mtk *k, const void *dev, const void *host, size_t bytes)
{
    unsigned char *h = malloc(bytes ? bytes : 1);
    mtk_to_host(k, h, dev, bytes);
    int same = !memcmp(h, host, bytes);
    free(h);
    return same;
}

TEST(mpi_staged)
{
    const char *backend = getenv("MT_TEST_BACKEND") ? getenv("MT_TEST_BACKEND") : "cpu";
    mt_err e;
    mtk *k = mtk_open(&(mtk_config){.backend = backend, .threads = 1, .act_dtype = MTK_F32}, &e);
    if (!k) {
        T_FAILF("backend %s: %s", backend, e.msg);
        return;
    }
    mt_comm *st = mt_comm_staged(world, k, &e);
    T_CHECK(st && st->rank == world->rank && st->size == world->size);
    int N = world->size, r = world->rank;
    size_t n = 30011, counts[64], off = 0;
    mt_comm_even_counts(n, N, counts);
    for (int q = 0; q < r; q++) off += counts[q];
    float *h = malloc(n * sizeof *h), *d = mtk_alloc(k, n * sizeof *h, &e);
    uint16_t *h16 = malloc(n * 2), *d16 = mtk_alloc(k, n * 2, &e);
    #define FILL(v) do { for (size_t i = 0; i < n; i++) h[i] = (v); mtk_to_device(k, d, h, n * sizeof *h); } while (0)
    #define SAME(what, from, bytes) do { \
        T_CHECK(st->bytes_sent - sb == world->bytes_sent - wb); \
        if (!same_bits(k, (char *)d + (from), (char *)h + (from), bytes)) T_FAILF("%s: other bits than on the host", what); \
    } while (0)
    uint64_t sb, wb;
    /* all-reduce, sum and max */
    for (int op = 0; op < 2; op++) {
        FILL(val(r, i) * (i % 3 ? 0.37f : -1.1f));
        sb = st->bytes_sent;
        if (mt_all_reduce_op(st, d, n, MT_C_F32, (mt_redop)op, &e)) T_FAILF("%s", e.msg);
        wb = world->bytes_sent;
        if (mt_all_reduce_op(world, h, n, MT_C_F32, (mt_redop)op, &e)) T_FAILF("%s", e.msg);
        SAME(op ? "all_reduce max" : "all_reduce", 0, n * sizeof *h);
    }
    /* bf16 all-reduce */
    for (size_t i = 0; i < n; i++) h16[i] = mt_f32_to_bf16(val(r, i) * 0.013f);
    mtk_to_device(k, d16, h16, n * 2);
    if (mt_all_reduce(st, d16, n, MT_C_BF16, &e) || mt_all_reduce(world, h16, n, MT_C_BF16, &e)) T_FAILF("%s", e.msg);
    if (!same_bits(k, d16, h16, n * 2)) T_FAILF("bf16 all_reduce: other bits than on the host");
    /* reduce-scatter: this rank's chunk */
    FILL(val(r, i) * 0.77f);
    sb = st->bytes_sent;
    if (mt_reduce_scatter(st, d, counts, MT_C_F32, &e)) T_FAILF("%s", e.msg);
    wb = world->bytes_sent;
    if (mt_reduce_scatter(world, h, counts, MT_C_F32, &e)) T_FAILF("%s", e.msg);
    SAME("reduce_scatter", off * sizeof *h, counts[r] * sizeof *h);
    /* all-gather: only this rank's chunk is defined before it */
    FILL(i >= off && i < off + counts[r] ? val(r, i) : -7.0f);
    mtk_to_device(k, d, h, n * sizeof *h);
    for (size_t i = 0; i < n; i++)
        if (i < off || i >= off + counts[r]) h[i] = 0;
    mtk_to_device(k, d + off, h + off, counts[r] * sizeof *h);
    sb = st->bytes_sent;
    if (mt_all_gather(st, d, counts, MT_C_F32, &e)) T_FAILF("%s", e.msg);
    wb = world->bytes_sent;
    if (mt_all_gather(world, h, counts, MT_C_F32, &e)) T_FAILF("%s", e.msg);
    SAME("all_gather", 0, n * sizeof *h);
    /* broadcast from the last rank */
    FILL(r == N - 1 ? val(r, i) : 0.0f);
    sb = st->bytes_sent;
    if (mt_broadcast(st, d, n, MT_C_F32, N - 1, &e)) T_FAILF("%s", e.msg);
    wb = world->bytes_sent;
    if (mt_broadcast(world, h, n, MT_C_F32, N - 1, &e)) T_FAILF("%s", e.msg);
    SAME("broadcast", 0, n * sizeof *h);
    /* a ring shift of a batch, both ways */
    float *d2 = mtk_alloc(k, n * sizeof *h, &e), *h2 = malloc(n * sizeof *h);
    FILL(val(r, i));
    mt_p2p dops[2] = {{1, d, n, MT_C_F32, (r + 1) % N}, {0, d2, n, MT_C_F32, (r + N - 1) % N}};
    mt_p2p hops[2] = {{1, h, n, MT_C_F32, (r + 1) % N}, {0, h2, n, MT_C_F32, (r + N - 1) % N}};
    sb = st->bytes_sent;
    if (mt_p2p_batch(st, dops, 2, &e)) T_FAILF("%s", e.msg);
    wb = world->bytes_sent;
    if (mt_p2p_batch(world, hops, 2, &e)) T_FAILF("%s", e.msg);
    T_CHECK(st->bytes_sent - sb == world->bytes_sent - wb && st->bytes_sent - sb == n * sizeof *h);
    if (!same_bits(k, d2, h2, n * sizeof *h)) T_FAILF("p2p: other bits than on the host");
    /* send / recv between ranks 0 and 1 */
    if (r < 2) {
        FILL(val(0, i));
        if (r == 0 ? mt_send(st, d, n, MT_C_F32, 1, &e) : mt_recv(st, d2, n, MT_C_F32, 0, &e)) T_FAILF("%s", e.msg);
        if (r == 1 && !same_bits(k, d2, h, n * sizeof *h)) T_FAILF("send/recv: other bits");
    }
    /* all-to-all of uneven blocks: the MPI communicator's bits and bytes */
    {
        size_t sc[64], rc[64], ns = 0, nr = 0;
        for (int q = 0; q < N; q++) ns += sc[q] = a2a_count(r, q), nr += rc[q] = a2a_count(q, r);
        int64_t *hs = malloc((ns + 1) * 8), *hr = malloc((nr + 1) * 8), *ds = mtk_alloc(k, (ns + 1) * 8, &e);
        int64_t *dr = mtk_alloc(k, (nr + 1) * 8, &e);
        for (size_t i = 0; i < ns; i++) hs[i] = a2a_val(r, (int)(i % 7), i);
        for (size_t i = 0; i <= nr; i++) hr[i] = -5;
        mtk_to_device(k, ds, hs, ns * 8);
        mtk_to_device(k, dr, hr, (nr + 1) * 8);
        sb = st->bytes_sent;
        if (mt_all_to_all_v(st, ds, sc, dr, rc, MT_C_I64, &e)) T_FAILF("%s", e.msg);
        wb = world->bytes_sent;
        if (mt_all_to_all_v(world, hs, sc, hr, rc, MT_C_I64, &e)) T_FAILF("%s", e.msg);
        T_CHECK(st->bytes_sent - sb == world->bytes_sent - wb && st->bytes_sent - sb == 8 * (ns - sc[r]));
        T_CHECK(hr[nr] == -5);
        if (!same_bits(k, dr, hr, (nr + 1) * 8)) T_FAILF("all_to_all_v: other bits than on the host");
        mtk_free(k, ds), mtk_free(k, dr);
        free(hs), free(hr);
    }
    /* a split group: halves of the world */
    mt_comm *sp = mt_comm_split(st, r % 2, r, &e);
    if (!sp) T_FAILF("split: %s", e.msg);
    else {
        T_CHECK(sp->size == (N + 1 - r % 2) / 2 && sp->rank == r / 2 && !strcmp(sp->ops->name, "staged"));
        int64_t x = r, *dx = mtk_alloc(k, sizeof x, &e);
        mtk_to_device(k, dx, &x, sizeof x);
        if (mt_all_reduce(sp, dx, 1, MT_C_I64, &e)) T_FAILF("%s", e.msg);
        mtk_to_host(k, &x, dx, sizeof x);
        int64_t want = 0;
        for (int q = r % 2; q < N; q += 2) want += q;
        T_EQ_INT(x, want);
        mtk_free(k, dx);
        mt_comm_free(sp);
    }
    if (mt_barrier(st, &e)) T_FAILF("%s", e.msg);
    #undef FILL
    #undef SAME
    mt_comm_free(st);
    mtk_free(k, d), mtk_free(k, d2), mtk_free(k, d16);
    free(h), free(h2), free(h16);
    mtk_close(k);
}

TEST(mpi_split_groups)
{
    mt_err e;
    int N = world->size;
    if (N % 2) T_SKIP("an odd number of ranks");
    /* a grid of tensor size 2: the data-parallel group of each rank by Megatron's order */
    mt_grid g;
    T_CHECK(mt_grid_make(&g, N, 2, 1, 1, &e) == 0);
    int m[64], color, idx, n = mt_grid_group(&g, world->rank, MT_GROUP_DP, m, &color, &idx);
    mt_comm *dp = mt_comm_split(world, color, idx, &e);
    if (!dp) {
        T_FAILF("%s", e.msg);
        return;
    }
    T_EQ_INT(dp->size, n);
    T_EQ_INT(dp->rank, idx);
    int64_t r = world->rank;
    if (mt_all_reduce(dp, &r, 1, MT_C_I64, &e)) T_FAILF("%s", e.msg);
    int64_t want = 0;
    for (int i = 0; i < n; i++) want += m[i];
    T_EQ_INT(r, want);
    mt_comm_free(dp);
}

int main(int argc, char **argv)
{
    t_bin = "test_comm";
    if (argc == 2 && !strcmp(argv[1], "--grid")) {
        int a[6];
        while (scanf("%d %d %d %d %d %d", &a[0], &a[1], &a[2], &a[3], &a[4], &a[5]) == 6) print_grid(a);
        return 0;
    }
    if (argc > 1 && !strcmp(argv[1], "--mpi")) {
        mt_err e;
        if (mt_boot_init(&boot, &e) || mt_boot_mpi(&boot, &e) || !(world = mt_comm_mpi_world(&e))) {
            printf("not ok - test_comm: bootstrap: %s\n", e.msg);
            return 1;
        }
        char name[64];
        snprintf(name, sizeof name, "test_comm[rank %d/%d]", boot.rank, boot.size);
        t_bin = name;
        RUN(mpi_bootstrap);
        RUN(mpi_all_reduce);
        RUN(mpi_all_reduce_max);
        RUN(mpi_16bit);
        RUN(mpi_reduce_scatter_all_gather);
        RUN(mpi_broadcast_send_recv_barrier);
        RUN(mpi_p2p);
        RUN(mpi_all_to_all_v);
        RUN(mpi_parallel_expert);
        RUN(mpi_parallel_context);
        RUN(mpi_parallel_expert_tensor);
        RUN(mpi_staged);
        RUN(mpi_split_groups);
        mt_comm_free(world);
        mt_boot_finalize(&boot);
        return t_total_failed ? 1 : 0;
    }
    RUN(agree_first_difference);
    RUN(grid_megatron_example);
    RUN(grid_coords_and_errors);
    RUN(grid_expert_example);
    RUN(grid_context_example);
    RUN(grid_expert_groups_property);
    RUN(grid_expert_tensor_example);
    RUN(parallel_expert_single);
    RUN(refuse_launch_without_pmix);
    RUN(single_rank_comm);
    RUN(choose_communicator);
    mt_boot b;
    mt_err e;
    /* not under a launcher here (tests/run starts this binary directly) */
    if (!getenv("PMIX_RANK") && !getenv("SLURM_NTASKS")) {
        int rc = mt_boot_init(&b, &e);
        printf("%s - test_comm: singleton bootstrap%s%s\n", rc == 0 && b.rank == 0 && b.size == 1 && !b.pmix ? "ok" : "not ok",
               rc ? ": " : "", rc ? e.msg : "");
        if (rc) t_total_failed++;
    }
    return t_total_failed ? 1 : 0;
}
