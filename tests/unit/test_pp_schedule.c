/* test_pp_schedule.c: the pipeline schedules as event lists (train/pp_schedule.h), checked as a whole
 * pipeline for many (stages, micro-batches, chunks): every (micro-batch, chunk) of every stage runs its
 * forward once and its backward once after it; what each stage sends is, in the same order, what its
 * neighbour receives (the ring's chunk step included); the stages, each blocked in its exchange until
 * every transfer of it meets its peer's (rendezvous: the strictest transport), all reach the end; and the
 * interleaved schedule's contexts in flight per chunk are the planner's (mt_pipeline_contexts).
 * With --print P S M V it prints stage S's events one per line (tests/pipeline/pp-schedule-ref.sh
 * compares them with an independent transcription of Megatron's schedules).
 */
#include "t.h"
#include "train/pipeline.h"
#include "train/pp_schedule.h"

typedef struct stage_list {
    mt_pp_event *ev;
    int n;
} stage_list;

static int build_all(int P, int M, int v, stage_list *st)
{
    mt_err e;
    for (int s = 0; s < P; s++)
        if (mt_pp_schedule(P, s, M, v, &st[s].ev, &st[s].n, &e)) {
            T_FAILF("P %d M %d v %d stage %d: %s", P, M, v, s, e.msg);
            return -1;
        }
    return 0;
}

static void free_all(int P, stage_list *st)
{
    for (int s = 0; s < P; s++) free(st[s].ev);
}

/* Forward once, backward once after it, for every (micro-batch, chunk). */
static int runs_once(int P, int M, int v, const stage_list *st)
{
    int *fw = calloc((size_t)(M * v), sizeof *fw), *bw = calloc((size_t)(M * v), sizeof *bw), bad = 0;
    for (int s = 0; s < P && !bad; s++) {
        memset(fw, 0, (size_t)(M * v) * sizeof *fw), memset(bw, 0, (size_t)(M * v) * sizeof *bw);
        for (int i = 0; i < st[s].n && !bad; i++) {
            const mt_pp_event *x = &st[s].ev[i];
            if (x->kind == MT_PP_EXCHANGE) continue;
            int j = x->mc.micro * v + x->mc.chunk;
            if (x->mc.micro < 0 || x->mc.micro >= M || x->mc.chunk < 0 || x->mc.chunk >= v) bad = 1;
            else if (x->kind == MT_PP_FORWARD) bad = fw[j]++ != 0;
            else bad = bw[j]++ != 0 || !fw[j];
            if (bad) T_FAILF("P %d M %d v %d stage %d event %d: %s of micro-batch %d chunk %d", P, M, v, s, i,
                             x->kind == MT_PP_FORWARD ? "forward" : "backward", x->mc.micro, x->mc.chunk);
        }
        for (int j = 0; j < M * v && !bad; j++)
            if (!fw[j] || !bw[j]) {
                bad = 1;
                T_FAILF("P %d M %d v %d stage %d: micro-batch %d chunk %d never %s", P, M, v, s, j / v, j % v,
                        fw[j] ? "backward" : "forward");
            }
    }
    free(fw), free(bw);
    return bad ? -1 : 0;
}

/* The (micro-batch, chunk) on the peer of a transfer from stage s towards the next (dir 1) or previous
 * (dir -1) stage: the ring steps a chunk between the last stage and the first. */
static mt_pp_mc peer_mc(int P, int v, int s, int dir, mt_pp_mc mc)
{
    if (v > 1 && dir > 0 && s == P - 1) mc.chunk++;
    if (v > 1 && dir < 0 && s == 0) mc.chunk--;
    return mc;
}
static int peer_of(int P, int s, int dir) { return (s + dir + P) % P; }

/* The transfers of stage s's exchange x as (peer, dir, send?, mc on the peer's side). */
typedef struct xfer {
    int peer, send;
    mt_pp_mc mc;   /* as the peer names it */
    int done;
} xfer;

static int transfers(int P, int v, int s, const mt_pp_event *x, xfer *out)
{
    int k = 0;
    if (x->send_next.micro >= 0) out[k++] = (xfer){peer_of(P, s, 1), 1, peer_mc(P, v, s, 1, x->send_next), 0};
    if (x->recv_next.micro >= 0) out[k++] = (xfer){peer_of(P, s, 1), 0, x->recv_next, 0};
    if (x->send_prev.micro >= 0) out[k++] = (xfer){peer_of(P, s, -1), 1, peer_mc(P, v, s, -1, x->send_prev), 0};
    if (x->recv_prev.micro >= 0) out[k++] = (xfer){peer_of(P, s, -1), 0, x->recv_prev, 0};
    return k;
}

/* What stage a sends to stage b, in order, is what b receives from a (identities on b's side). */
static int sends_are_receives(int P, int M, int v, const stage_list *st)
{
    size_t cap = (size_t)(4 * M * v + 8);
    mt_pp_mc *sent = malloc(cap * sizeof *sent), *got = malloc(cap * sizeof *got);
    int bad = 0;
    for (int a = 0; a < P && !bad; a++)
        for (int dir = -1; dir <= 1 && !bad; dir += 2) {
            int b = peer_of(P, a, dir), ns = 0, ng = 0;
            if (P == 1 || (v == 1 && (a + dir < 0 || a + dir >= P))) continue;
            /* a's sends towards b in direction dir; b's receives from the opposite side */
            for (int i = 0; i < st[a].n; i++) {
                const mt_pp_event *x = &st[a].ev[i];
                mt_pp_mc m = dir > 0 ? x->send_next : x->send_prev;
                if (x->kind == MT_PP_EXCHANGE && m.micro >= 0) sent[ns++] = peer_mc(P, v, a, dir, m);
            }
            for (int i = 0; i < st[b].n; i++) {
                const mt_pp_event *x = &st[b].ev[i];
                mt_pp_mc m = dir > 0 ? x->recv_prev : x->recv_next;
                if (x->kind == MT_PP_EXCHANGE && m.micro >= 0) got[ng++] = m;
            }
            bad = ns != ng;
            for (int i = 0; i < ns && !bad; i++) bad = sent[i].micro != got[i].micro || sent[i].chunk != got[i].chunk;
            if (bad)
                T_FAILF("P %d M %d v %d: stage %d sends %d to stage %d, which receives %d (or another order)", P, M, v,
                        a, ns, b, ng);
        }
    free(sent), free(got);
    return bad ? -1 : 0;
}

/* Every stage runs its events; an exchange ends when each of its transfers has met its counterpart in the
 * peer's exchange of the moment. All stages must reach their end. */
static int no_deadlock(int P, int M, int v, const stage_list *st)
{
    int *at = calloc((size_t)P, sizeof *at), *nx = calloc((size_t)P, sizeof *nx), bad = 0;
    xfer(*x)[4] = calloc((size_t)P, sizeof *x);
    for (int progress = 1; progress;) {
        progress = 0;
        for (int s = 0; s < P; s++) {   /* computation and new exchanges */
            while (at[s] < st[s].n && st[s].ev[at[s]].kind != MT_PP_EXCHANGE) at[s]++, progress = 1;
            if (at[s] < st[s].n && !nx[s]) nx[s] = transfers(P, v, s, &st[s].ev[at[s]], x[s]), progress = 1;
        }
        for (int s = 0; s < P; s++)   /* matching */
            for (int i = 0; i < nx[s]; i++) {
                xfer *a = &x[s][i];
                if (a->done || !a->send) continue;
                int p = a->peer;
                for (int j = 0; j < nx[p]; j++) {
                    xfer *c = &x[p][j];
                    if (!c->done && !c->send && c->peer == s && c->mc.micro == a->mc.micro && c->mc.chunk == a->mc.chunk) {
                        a->done = c->done = 1, progress = 1;
                        break;
                    }
                }
            }
        for (int s = 0; s < P; s++) {   /* exchanges complete */
            int all = nx[s] > 0;
            for (int i = 0; i < nx[s]; i++) all &= x[s][i].done;
            if (all) at[s]++, nx[s] = 0, progress = 1;
        }
    }
    for (int s = 0; s < P && !bad; s++)
        if (at[s] < st[s].n) {
            bad = 1;
            char buf[128];
            mt_pp_event_format(&st[s].ev[at[s]], buf, sizeof buf);
            T_FAILF("P %d M %d v %d: stage %d blocked at event %d of %d (%s)", P, M, v, s, at[s], st[s].n, buf);
        }
    free(at), free(nx), free(x);
    return bad ? -1 : 0;
}

/* The interleaved schedule's contexts per chunk, as the trainer takes and frees them: one taken for each
 * input received (or forward on the first virtual stage), freed after the exchange that follows its
 * backward; the most held at once per chunk is the planner's count. */
static int contexts_are_planned(int P, int M, int v, const stage_list *st)
{
    for (int s = 0; s < P; s++) {
        int held[64] = {0}, most[64] = {0}, planned[64], to_free = -1;
        if (mt_pipeline_contexts(P, s, M, v, planned)) {
            T_FAILF("P %d M %d v %d stage %d: the planner refuses", P, M, v, s);
            return -1;
        }
        for (int i = 0; i < st[s].n; i++) {
            const mt_pp_event *x = &st[s].ev[i];
            int c = -1;
            if (x->kind == MT_PP_FORWARD && s == 0 && x->mc.chunk == 0) c = 0;
            if (x->kind == MT_PP_EXCHANGE && x->recv_prev.micro >= 0) c = x->recv_prev.chunk;
            if (c >= 0 && ++held[c] > most[c]) most[c] = held[c];
            if (x->kind == MT_PP_BACKWARD) to_free = x->mc.chunk;
            if (x->kind == MT_PP_EXCHANGE && to_free >= 0) held[to_free]--, to_free = -1;
        }
        for (int c = 0; c < v; c++)
            if (most[c] != planned[c]) {
                T_FAILF("P %d M %d v %d stage %d chunk %d: %d contexts at once, the planner %d", P, M, v, s, c, most[c],
                        planned[c]);
                return -1;
            }
    }
    return 0;
}

static int check_layout(int P, int M, int v)
{
    stage_list st[64];
    if (build_all(P, M, v, st)) return -1;
    int rc = runs_once(P, M, v, st) || sends_are_receives(P, M, v, st) || no_deadlock(P, M, v, st) ||
             (v > 1 && contexts_are_planned(P, M, v, st));
    free_all(P, st);
    return rc ? -1 : 0;
}

TEST(one_f_one_b_runs_every_micro_batch_without_deadlock)
{
    int n = 0;
    for (int P = 1; P <= 12; P++)
        for (int M = 1; M <= 20; M++, n++)
            if (check_layout(P, M, 1)) return;
    T_CHECK(n == 240);
}

TEST(interleaved_runs_every_micro_batch_without_deadlock)
{
    int n = 0;
    for (int P = 2; P <= 8; P++)
        for (int v = 2; v <= 5; v++)
            for (int M = P; M <= 6 * P; M += P, n++)
                if (check_layout(P, M, v)) return;
    T_CHECK(n == 168);
}

TEST(one_stage_is_forward_then_backward)
{
    mt_pp_event *ev;
    int n;
    mt_err e;
    T_CHECK(mt_pp_schedule(1, 0, 3, 1, &ev, &n, &e) == 0);
    T_EQ_INT(n, 6);
    char buf[64], all[256] = "";
    for (int i = 0; i < n; i++) {
        mt_pp_event_format(&ev[i], buf, sizeof buf);
        strcat(all, buf), strcat(all, ";");
    }
    T_EQ_STR(all, "F 0 0;B 0 0;F 1 0;B 1 0;F 2 0;B 2 0;");
    free(ev);
}

TEST(refuses_what_the_schedules_do_not_run)
{
    mt_pp_event *ev;
    int n;
    mt_err e;
    T_CHECK(mt_pp_schedule(4, 0, 6, 2, &ev, &n, &e) == -1 && strstr(e.msg, "multiple of the stages"));
    T_CHECK(mt_pp_schedule(4, 4, 8, 1, &ev, &n, &e) == -1);
    T_CHECK(mt_pp_schedule(4, 0, 0, 1, &ev, &n, &e) == -1);
}

int main(int argc, char **argv)
{
    if (argc == 6 && !strcmp(argv[1], "--print")) {
        mt_pp_event *ev;
        int n;
        mt_err e;
        if (mt_pp_schedule(atoi(argv[2]), atoi(argv[3]), atoi(argv[4]), atoi(argv[5]), &ev, &n, &e)) {
            fprintf(stderr, "%s\n", e.msg);
            return 1;
        }
        char buf[128];
        for (int i = 0; i < n; i++) mt_pp_event_format(&ev[i], buf, sizeof buf), puts(buf);
        free(ev);
        return 0;
    }
    t_bin = "test_pp_schedule";
    RUN(one_f_one_b_runs_every_micro_batch_without_deadlock);
    RUN(interleaved_runs_every_micro_batch_without_deadlock);
    RUN(one_stage_is_forward_then_backward);
    RUN(refuses_what_the_schedules_do_not_run);
    return t_total_failed ? 1 : 0;
}
