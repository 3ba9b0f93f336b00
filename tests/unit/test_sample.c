/* test_sample.c: next-token choice (gen/sample.h): greedy and the repetition penalty's two signs, the
 * penalty forgetting one sequence's ids before the next, top-k 1, the top-p set (the token that crosses p
 * kept, the rest never drawn; Megatron's boundary: equal logits landing on p exactly keep the next one),
 * draw frequencies against the softmax at temperature 1 and 0.5, the reported log-probability, and
 * seeded repetition; greedy's first largest among many ties; top-k and top-p over thousands of ids. */
#include <math.h>
#include <string.h>

#include "gen/sample.h"
#include "t.h"


/* order[0..V): the ids by descending x, ties by the smaller id (a stable insertion sort: the reference the
 * sampler's selections are checked against). */
static void rank_desc(const float *x, int V, int *order)
{
    for (int j = 0; j < V; j++) order[j] = j;
    for (int i = 1; i < V; i++)
        for (int k = i; k > 0 && x[order[k]] > x[order[k - 1]]; k--) {
            int t = order[k];
            order[k] = order[k - 1];
            order[k - 1] = t;
        }
}

TEST(greedy_and_penalty)
{
    mt_sampler sm;
    mt_sampler_init(&sm, 3);
    mt_rs rng;
    mt_rs_seed(&rng, 1);
    float a[3] = {2.0f, 1.9f, -5.0f};
    double lp;
    T_EQ_INT(mt_sample_next(&sm, a, &(mt_sampling){1, 1, 0, 1, 1}, NULL, 0, &rng, &lp), 0);
    double lse = log(exp(2.0) + exp(1.9) + exp(-5.0));
    T_NEAR(lp, 2.0 - lse, 1e-6);
    uint32_t prev[1] = {0};
    T_EQ_INT(mt_sample_next(&sm, a, &(mt_sampling){1, 1, 0, 1, 2.0}, prev, 1, &rng, &lp), 1);   /* 2/2 = 1 < 1.9 */
    T_NEAR(lp, 1.9 - lse, 1e-6);   /* the log-probability under the model, not the penalized one */
    float b[3] = {-1.0f, -1.5f, -9.0f};
    T_EQ_INT(mt_sample_next(&sm, b, &(mt_sampling){1, 1, 0, 1, 2.0}, prev, 1, &rng, &lp), 1);   /* -1*2 = -2 < -1.5 */
    T_EQ_INT(mt_sample_next(&sm, a, &(mt_sampling){0, 0.0, 0, 1, 1}, NULL, 0, &rng, &lp), 0);    /* temperature 0 */
    mt_sampler_free(&sm);
}

TEST(topk_topp_and_frequencies)
{
    enum { V = 4, DRAWS = 20000 };
    mt_sampler sm;
    mt_sampler_init(&sm, V);
    mt_rs rng;
    mt_rs_seed(&rng, 7);
    const double pr[V] = {0.5, 0.3, 0.15, 0.05};
    float x[V];
    for (int j = 0; j < V; j++) x[j] = (float)log(pr[j]);
    int cnt[V] = {0};
    for (int i = 0; i < DRAWS; i++) cnt[mt_sample_next(&sm, x, &(mt_sampling){0, 1, 1, 1, 1}, NULL, 0, &rng, NULL)]++;
    T_EQ_INT(cnt[0], DRAWS);   /* top-k 1 */
    for (int j = 0; j < V; j++) cnt[j] = 0;
    for (int i = 0; i < DRAWS; i++) cnt[mt_sample_next(&sm, x, &(mt_sampling){0, 1, 0, 0.6, 1}, NULL, 0, &rng, NULL)]++;
    T_CHECK(cnt[2] == 0 && cnt[3] == 0);   /* 0.5 < 0.6 <= 0.8: the first two only */
    T_NEAR(cnt[0] / (double)DRAWS, 0.5 / 0.8, 0.03);
    for (int j = 0; j < V; j++) cnt[j] = 0;
    for (int i = 0; i < DRAWS; i++) cnt[mt_sample_next(&sm, x, &(mt_sampling){0, 1, 3, 1, 1}, NULL, 0, &rng, NULL)]++;
    T_CHECK(cnt[3] == 0);   /* top-k 3 */
    T_NEAR(cnt[2] / (double)DRAWS, 0.15 / 0.95, 0.1);
    for (int j = 0; j < V; j++) cnt[j] = 0;
    for (int i = 0; i < DRAWS; i++) cnt[mt_sample_next(&sm, x, &(mt_sampling){0, 1, 0, 1, 1}, NULL, 0, &rng, NULL)]++;
    for (int j = 0; j < V; j++) T_NEAR(cnt[j] / (double)DRAWS, pr[j], 0.08);   /* within 8% relative */
    for (int j = 0; j < V; j++) cnt[j] = 0;
    for (int i = 0; i < DRAWS; i++) cnt[mt_sample_next(&sm, x, &(mt_sampling){0, 0.5, 0, 1, 1}, NULL, 0, &rng, NULL)]++;
    double z = 0;
    for (int j = 0; j < V; j++) z += pr[j] * pr[j];   /* temperature 0.5 squares the probabilities */
    T_NEAR(cnt[0] / (double)DRAWS, 0.25 / z, 0.03);
    mt_sampler_free(&sm);
}

/* The penalty marks the ids of the sequence it is given for one call only: a later call for another
 * sequence (the next prompt of a batch, or of the input) does not see them. */
TEST(penalty_forgets)
{
    mt_sampler sm;
    mt_sampler_init(&sm, 3);
    mt_rs rng;
    mt_rs_seed(&rng, 1);
    float a[3] = {2.0f, 1.9f, -5.0f};
    uint32_t mine[1] = {0}, other[1] = {2};
    T_EQ_INT(mt_sample_next(&sm, a, &(mt_sampling){1, 1, 0, 1, 2.0}, mine, 1, &rng, NULL), 1);    /* 0 penalized */
    T_EQ_INT(mt_sample_next(&sm, a, &(mt_sampling){1, 1, 0, 1, 2.0}, other, 1, &rng, NULL), 0);   /* 0 is not */
    T_EQ_INT(mt_sample_next(&sm, a, &(mt_sampling){1, 1, 0, 1, 2.0}, mine, 1, &rng, NULL), 1);
    T_EQ_INT(mt_sample_next(&sm, a, &(mt_sampling){1, 1, 0, 1, 1.0}, NULL, 0, &rng, NULL), 0);    /* no penalty */
    mt_sampler_free(&sm);
}

/* Top-p at an exact boundary, as Megatron's modify_logits_for_top_p_filtering draws it: a token is kept
 * while the probability of the tokens before it does not exceed p, so equal logits whose cumulative
 * probability lands on p exactly keep the next one too (Hugging Face's TopPLogitsWarper would not). */
TEST(topp_boundary)
{
    enum { DRAWS = 4000 };
    mt_sampler sm;
    mt_sampler_init(&sm, 2);
    mt_rs rng;
    mt_rs_seed(&rng, 3);
    float two[2] = {0.0f, 0.0f};   /* 0.5 each */
    int cnt[4] = {0};
    for (int i = 0; i < DRAWS; i++) cnt[mt_sample_next(&sm, two, &(mt_sampling){0, 1, 0, 0.5, 1}, NULL, 0, &rng, NULL)]++;
    T_NEAR(cnt[1] / (double)DRAWS, 0.5, 0.1);   /* both kept: 0.5 before the second does not exceed 0.5 */
    cnt[0] = cnt[1] = 0;
    for (int i = 0; i < DRAWS; i++) cnt[mt_sample_next(&sm, two, &(mt_sampling){0, 1, 0, 0.49, 1}, NULL, 0, &rng, NULL)]++;
    T_EQ_INT(cnt[0], DRAWS);   /* 0.5 > 0.49: the first only (the smaller id of a tie) */
    mt_sampler_free(&sm);

    mt_sampler_init(&sm, 4);
    float four[4] = {1.0f, 1.0f, 1.0f, 1.0f};   /* 0.25 each: 0.25, 0.5, 0.75, 1 cumulated */
    for (int j = 0; j < 4; j++) cnt[j] = 0;
    for (int i = 0; i < DRAWS; i++) cnt[mt_sample_next(&sm, four, &(mt_sampling){0, 1, 0, 0.5, 1}, NULL, 0, &rng, NULL)]++;
    T_EQ_INT(cnt[3], 0);   /* three kept */
    for (int j = 0; j < 3; j++) T_NEAR(cnt[j] / (double)DRAWS, 1.0 / 3, 0.1);
    mt_sampler_free(&sm);
}

TEST(seeded)
{
    enum { V = 50 };
    mt_sampler sm;
    mt_sampler_init(&sm, V);
    float x[V];
    for (int j = 0; j < V; j++) x[j] = (float)sin(j * 1.3);
    int a[100], b[100], c[100];
    mt_rs r1, r2, r3;
    mt_rs_seed(&r1, 42), mt_rs_seed(&r2, 42), mt_rs_seed(&r3, 43);
    for (int i = 0; i < 100; i++) {
        a[i] = mt_sample_next(&sm, x, &(mt_sampling){0, 1.0, 0, 0.9, 1}, NULL, 0, &r1, NULL);
        b[i] = mt_sample_next(&sm, x, &(mt_sampling){0, 1.0, 0, 0.9, 1}, NULL, 0, &r2, NULL);
        c[i] = mt_sample_next(&sm, x, &(mt_sampling){0, 1.0, 0, 0.9, 1}, NULL, 0, &r3, NULL);
    }
    T_CHECK(!memcmp(a, b, sizeof a));
    T_CHECK(memcmp(a, c, sizeof a) != 0);
    mt_sampler_free(&sm);
}

/* Top-k and top-p over a vocabulary of thousands with many ties, against a full stable sort: every draw is
 * among the kept ids, and the draws of each kept rank follow the renormalized probabilities, pooled in
 * five bins of ranks, to 5 standard deviations of the count. Top-p 0.95 over near-uniform logits keeps
 * most of them, and a draw without either filter walks most of them: both rank growing prefixes. */
TEST(large_vocab_filters)
{
    enum { V = 2000, DRAWS = 12000 };
    static float x[V];
    static int order[V], rank_of[V], cnt[V];
    uint64_t r = 5;
    for (int j = 0; j < V; j++) {
        r = r * 6364136223846793005ull + 1442695040888963407ull;
        x[j] = (float)((r >> 40) % 97) / 200.0f;   /* 97 values from 0 to 0.48 */
    }
    rank_desc(x, V, order);
    for (int i = 0; i < V; i++) rank_of[order[i]] = i;
    mt_sampler sm;
    mt_sampler_init(&sm, V);
    mt_rs rng;
    mt_rs_seed(&rng, 11);
    const mt_sampling cases[] = {{0, 1, 37, 1, 1}, {0, 1, 0, 0.95, 1}, {0, 0.7, 400, 0.5, 1}, {0, 1.3, 0, 1, 1}};
    for (size_t cs = 0; cs < sizeof cases / sizeof *cases; cs++) {
        const mt_sampling *p = &cases[cs];
        int n = p->top_k ? p->top_k : V;
        double z = 0, cum = 0, pr[V];
        for (int i = 0; i < n; i++) z += pr[i] = exp((x[order[i]] - x[order[0]]) / p->temperature);
        int keep = n;
        for (int i = 0; i < n && p->top_p < 1; i++)
            if ((cum += pr[i] / z) > p->top_p) {
                keep = i + 1;
                break;
            }
        double zk = 0;
        for (int i = 0; i < keep; i++) zk += pr[i];
        memset(cnt, 0, sizeof cnt);
        int outside = 0;
        for (int d = 0; d < DRAWS; d++) {
            int id = mt_sample_next(&sm, x, p, NULL, 0, &rng, NULL);
            if (rank_of[id] >= keep) outside++;
            cnt[rank_of[id]]++;
        }
        T_EQ_INT(outside, 0);
        const int bin = (keep + 4) / 5;
        for (int b0 = 0; b0 < keep; b0 += bin) {
            double want = 0, got = 0;
            for (int i = b0; i < b0 + bin && i < keep; i++) want += pr[i] / zk * DRAWS, got += cnt[i];
            if (fabs(got - want) > 5 * sqrt(want))
                T_FAILF("case %zu: kept %d, ranks %d..: %.0f draws, %.0f expected", cs, keep, b0, got, want);
        }
        if (cs == 1) T_CHECK(keep > 1500);   /* beyond the first prefix the sampler ranks */
    }
    mt_sampler_free(&sm);
}

/* mt_top_logprobs: the n likeliest ids, the likeliest first and ties by the smaller id, as a full sort
 * gives them, with their log-softmax; n from 1 to all of V. */
/* Greedy over a vocabulary of many ties: the first largest logit, whether the penalty path (which ranks a
 * copy) or the plain one (two vectorized passes over the logits) chooses; NaNs never win except at 0;
 * without a logprob pointer the same id. */
TEST(greedy_first_largest)
{
    enum { V = 1037 };
    float x[V];
    mt_sampler sm;
    mt_sampler_init(&sm, V);
    mt_rs rng;
    mt_rs_seed(&rng, 1);
    uint32_t none[1] = {V - 1};   /* a penalized id that is never the largest: the penalty path, same answer */
    uint64_t r = 99;
    for (int round = 0; round < 200; round++) {
        for (int j = 0; j < V; j++) {
            r = r * 6364136223846793005ull + 1442695040888963407ull;
            x[j] = (float)((r >> 40) % 23) - 30.0f;   /* 23 values over 1037 ids */
        }
        x[V - 1] = -100.0f;
        if (round % 3 == 1) x[(r >> 20) % V] = NAN;
        int want = 0;   /* the scan the contract states: the first strictly larger (NaN compares false) */
        for (int j = 1; j < V; j++)
            if (x[j] > x[want]) want = j;
        double lp;
        T_EQ_INT(mt_sample_next(&sm, x, &(mt_sampling){1, 1, 0, 1, 1}, NULL, 0, &rng, &lp), want);
        T_EQ_INT(mt_sample_next(&sm, x, &(mt_sampling){1, 1, 0, 1, 1}, NULL, 0, &rng, NULL), want);
        T_EQ_INT(mt_sample_next(&sm, x, &(mt_sampling){1, 1, 0, 1, 2.0}, none, 1, &rng, NULL), want);
    }
    x[0] = NAN;   /* the scan never leaves a NaN at 0 */
    T_EQ_INT(mt_sample_next(&sm, x, &(mt_sampling){1, 1, 0, 1, 1}, NULL, 0, &rng, NULL), 0);
    mt_sampler_free(&sm);
}

TEST(top_logprobs)
{
    enum { V = 300 };
    float x[V];
    uint64_t r = 12345;
    for (int j = 0; j < V; j++) {
        r = r * 6364136223846793005ull + 1442695040888963407ull;
        x[j] = (float)((r >> 40) % 50) / 7.0f - 3;   /* 50 values over 300 ids: many ties */
    }
    double se = 0;
    for (int j = 0; j < V; j++) se += exp((double)x[j]);
    int order[V];
    rank_desc(x, V, order);
    int ns[] = {1, 2, 5, 17, V};
    for (size_t c = 0; c < sizeof ns / sizeof *ns; c++) {
        int32_t ids[V];
        double lps[V];
        mt_top_logprobs(x, V, ns[c], ids, lps);
        for (int i = 0; i < ns[c]; i++) {
            T_EQ_INT(ids[i], order[i]);
            T_NEAR(lps[i], (double)x[order[i]] - log(se), 1e-12);
        }
    }
    T_CHECK(fabs(mt_logprob(x, V, 7) - ((double)x[7] - log(se))) < 1e-12);
}

T_MAIN_BEGIN("test_sample")
RUN(greedy_and_penalty);
RUN(greedy_first_largest);
RUN(large_vocab_filters);
RUN(top_logprobs);
RUN(topk_topp_and_frequencies);
RUN(penalty_forgets);
RUN(topp_boundary);
RUN(seeded);
T_MAIN_END
