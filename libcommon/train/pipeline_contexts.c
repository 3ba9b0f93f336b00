/* pipeline_contexts.c: the contexts (micro-batches' activations) a pipeline stage keeps per model chunk
 * over a step, in closed form, for the planner (mt_pipeline_contexts, pipeline.h): the 1F1B bound, and the
 * interleaved schedule's peak per chunk from its slot structure, in O(1) per chunk whatever the number of
 * stages and micro-batches.
 *
 * The interleaved schedule of stage st (pipeline.c, Megatron's forward_backward_pipelining_with_interleaving)
 * runs its n = M v virtual micro-batches in slots: forward k in slot k, backward j in slot W + j, W its
 * warm-up (every forward when M = pp, else 2 (pp - st - 1) + (v - 1) pp, at most n). Forward k's chunk is
 * (k mod pp v) / pp, backward j's v - 1 - (j mod pp v) / pp; each chunk goes forward and backward through
 * its micro-batches in the same order, so the j-th backward of a chunk frees the context of its j-th
 * forward. A context is taken by the exchange of slot k - 1 that receives forward k's input, or by forward
 * k itself on the first virtual stage (stage 0, chunk 0); the context of backward j is free after the
 * exchange of its slot, whose receive still finds it busy. So when forward f of chunk c takes its context,
 * c has forwards 0..f taken and backwards 0..f - d freed, d = W + 2 (W + 1 on the first virtual stage):
 *     live(f) = Fc(f) - Bc(f - d),
 * Fc(x) and Bc(x) counting the indices <= x in c's forward and backward blocks of pp in each period of
 * pp v. Contexts are reused once free, so the chunk has as many as the most live(f) reaches. Up to
 * f = d - 1 nothing is freed and live grows; from f = d on live(f + pp v) = live(f) until n - 1, so one
 * period holds its maximum, which lies at its ends, at the last forward of a forward block (then live
 * stops rising) or just before a backward block starts freeing.
 */
#include "train/pipeline.h"

/* The indices <= x of [0, n) whose residue modulo P v lies in the block [o, o + P): x >= 0. */
static long long block_count(long long x, long long o, long long P, long long v)
{
    if (x < 0) return 0;
    long long r = x % (P * v) - o + 1;
    return x / (P * v) * P + (r < 0 ? 0 : r > P ? P : r);
}

/* The first f >= lo with f = res modulo per. */
static long long first_at(long long lo, long long res, long long per)
{
    long long r = ((res - lo) % per + per) % per;
    return lo + r;
}

int mt_pipeline_contexts(int pp, int stage, int num_micro, int vp, int *per_chunk)
{
    if (pp < 1 || stage < 0 || stage >= pp || num_micro < 1 || vp < 1) return -1;
    for (int c = 0; c < vp; c++) per_chunk[c] = 0;
    if (vp == 1) {   /* 1F1B: min(pp - stage, M) of the one chunk */
        per_chunk[0] = pp - stage < num_micro ? pp - stage : num_micro;
        return 0;
    }
    if (num_micro % pp) return -1;   /* the interleaved schedule takes micro-batches in groups of pp */
    long long P = pp, v = vp, n = (long long)num_micro * vp, per = P * v;
    long long W = num_micro == pp ? n : 2 * (P - stage - 1) + (v - 1) * P;
    if (W > n) W = n;
    for (int c = 0; c < vp; c++) {
        long long a = c * P, b = (v - 1 - c) * P, d = W + (stage == 0 && c == 0 ? 1 : 2);
        long long cand[5], nc = 0, best = 0;
        cand[nc++] = d - 1 < n - 1 ? d - 1 : n - 1;   /* the last forward before anything is freed */
        if (d <= n - 1) {
            long long hi = d + per - 1 < n - 1 ? d + per - 1 : n - 1;
            cand[nc++] = d, cand[nc++] = hi;
            long long f = first_at(d, a + P - 1, per);   /* the end of a forward block */
            if (f <= hi) cand[nc++] = f;
            f = first_at(d, b + d - 1, per);   /* the slot before a backward block */
            if (f <= hi) cand[nc++] = f;
        }
        for (long long i = 0; i < nc; i++) {
            long long f = cand[i], live = block_count(f, a, P, v) - block_count(f - d, b, P, v);
            if (f >= 0 && live > best) best = live;
        }
        per_chunk[c] = (int)best;
    }
    return 0;
}
