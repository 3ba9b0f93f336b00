/* test_pipeline_plan.c: the contexts per model chunk the planner counts for a pipeline stage
 * (mt_pipeline_contexts, in closed form) against the same counted by replaying the training step's own
 * interleaved-schedule bookkeeping (mt_pipeline_contexts_replayed), chunk by chunk, for every stage of
 * many (stages, chunks, micro-batches) layouts; the activation memory the dry run plans is these counts
 * times each chunk's context size, so the two plans are the same to the byte. Also the 1F1B bound and the
 * refusal of micro-batches the interleaved schedule cannot group.
 */
#include "t.h"
#include "train/pipeline.h"

/* Every stage of pp stages, v chunks and M micro-batches: 0 when both counts agree, else reports it. */
static int same_counts(int pp, int v, int M)
{
    int closed[16], replayed[16];
    for (int s = 0; s < pp; s++) {
        if (mt_pipeline_contexts(pp, s, M, v, closed) || mt_pipeline_contexts_replayed(pp, s, M, v, replayed)) {
            T_FAILF("pp %d stage %d v %d M %d: refused", pp, s, v, M);
            return -1;
        }
        for (int c = 0; c < v; c++)
            if (closed[c] != replayed[c]) {
                T_FAILF("pp %d stage %d v %d M %d chunk %d: closed form %d contexts, the schedule %d", pp, s, v, M, c,
                        closed[c], replayed[c]);
                return -1;
            }
    }
    return 0;
}

TEST(interleaved_closed_form_is_the_schedule)
{
    /* all warm-up (M = pp), the warm-up capped or not, the steady state over one and many periods */
    int n = 0;
    for (int pp = 2; pp <= 12; pp++)
        for (int v = 2; v <= 6; v++)
            for (int M = pp; M <= 9 * pp; M += pp, n++)
                if (same_counts(pp, v, M)) return;
    /* a few wider layouts, where the stages' warm-ups differ most */
    static const int wide[][3] = {{32, 2, 32}, {32, 2, 96}, {24, 4, 72}, {48, 3, 192}, {64, 2, 128}, {16, 16, 64}};
    for (size_t i = 0; i < sizeof wide / sizeof wide[0]; i++, n++)
        if (same_counts(wide[i][0], wide[i][1], wide[i][2])) return;
    T_CHECK(n > 450);
}

TEST(one_chunk_and_refusals)
{
    int live[4];
    T_EQ_INT(mt_pipeline_contexts(4, 0, 8, 1, live), 0);
    T_EQ_INT(live[0], 4);
    T_EQ_INT(mt_pipeline_contexts(4, 3, 8, 1, live), 0);
    T_EQ_INT(live[0], 1);
    T_EQ_INT(mt_pipeline_contexts(8, 1, 3, 1, live), 0);   /* fewer micro-batches than stages */
    T_EQ_INT(live[0], 3);
    T_EQ_INT(mt_pipeline_contexts(4, 0, 6, 2, live), -1);   /* interleaved: 6 is no multiple of 4 */
    T_EQ_INT(mt_pipeline_contexts(4, 4, 8, 2, live), -1);   /* no stage 4 of 4 */
    /* interleaved, all warm-up (M = pp): every micro-batch of every chunk alive at once */
    T_EQ_INT(mt_pipeline_contexts(4, 1, 4, 3, live), 0);
    T_CHECK(live[0] == 4 && live[1] == 4 && live[2] == 4);
    /* at a size the replay cannot reach in a test: the closed form answers (and stays within M) */
    T_EQ_INT(mt_pipeline_contexts(4000, 17, 4000 * 1000, 2, live), 0);
    T_CHECK(live[0] > 0 && live[0] <= 4000 * 1000 && live[1] > 0);
}

T_MAIN_BEGIN("test_pipeline_plan")
RUN(interleaved_closed_form_is_the_schedule);
RUN(one_chunk_and_refusals);
T_MAIN_END
