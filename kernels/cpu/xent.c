/* xent.c: softmax cross-entropy over vocabulary rows, loss and (optionally in place) logit gradient.
 * One row per work item: max, then e = exp(x - max) summed in 16 fixed lanes (vectorizable, same order
 * on every machine), stored in dlogits when there is one, then scaled to the probabilities. */
#include <math.h>

#include "cpu.h"
#include "vmath.h"

enum { LANES = 16 };

MTK_CLONES static float row_max(const float *x, int V)
{
    float mx = -INFINITY;
#pragma omp simd reduction(max : mx)
    for (int j = 0; j < V; j++) mx = x[j] > mx ? x[j] : mx;
    return mx;
}

/* sum_j exp(x[j] - mx) in double; e[j] receives the terms unless e is NULL (e may be x). */
MTK_CLONES static double row_expsum(float *e, const float *x, int V, float mx)
{
    float acc[LANES] = {0};
    int j = 0;
    for (; j + LANES <= V; j += LANES)
#pragma omp simd   /* e == x is fine: each element is read before it is written */
        for (int l = 0; l < LANES; l++) {
            float t = vexp(x[j + l] - mx);
            if (e) e[j + l] = t;
            acc[l] += t;
        }
    double s = 0;
    for (; j < V; j++) {
        float t = vexp(x[j] - mx);
        if (e) e[j] = t;
        s += t;
    }
    for (int l = 0; l < LANES; l++) s += acc[l];
    return s;
}

MTK_CLONES static void row_scale(float *d, int V, float s)
{
    for (int j = 0; j < V; j++) d[j] *= s;
}

void cpu_xent_fwd_bwd(mtk *k, float *losses, float *dlogits, const float *logits, const int32_t *target,
                      const float *dscale, int N, int V)
{
    (void)k;
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float *x = logits + (size_t)n * V;
        float *d = dlogits ? dlogits + (size_t)n * V : NULL;   /* may be x itself */
        const int tg = target[n];
        const float xt = x[tg];
        const float mx = row_max(x, V);
        const double s = row_expsum(d, x, V, mx);
        losses[n] = (float)(mx + log(s) - xt);
        if (!d) continue;
        const float sc = dscale ? dscale[n] : 1.0f;
        row_scale(d, V, (float)(sc / s));
        d[tg] -= sc;
    }
}

/* ---- the pieces of a vocabulary-parallel cross-entropy (kernels.h) ---- */

void cpu_xent_rowmax(mtk *k, float *rowmax, const float *logits, int N, int V)
{
    (void)k;
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) rowmax[n] = row_max(logits + (size_t)n * V, V);
}

void cpu_xent_sumexp(mtk *k, float *sumexp, float *tlogit, const float *logits, const float *rowmax,
                     const int32_t *target, int N, int V, int v0)
{
    (void)k;
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float *x = logits + (size_t)n * V;
        sumexp[n] = (float)row_expsum(NULL, x, V, rowmax[n]);
        const int64_t t = (int64_t)target[n] - v0;
        tlogit[n] = t >= 0 && t < V ? x[t] : 0.0f;
    }
}

void cpu_xent_loss(mtk *k, float *losses, const float *rowmax, const float *sumexp, const float *tlogit, int N)
{
    (void)k;
    for (int n = 0; n < N; n++) losses[n] = (float)(rowmax[n] + log((double)sumexp[n]) - tlogit[n]);
}

MTK_CLONES static void row_softmax_grad(float *d, const float *x, int V, float mx, float inv)
{
    for (int j = 0; j < V; j++) d[j] = vexp(x[j] - mx) * inv;
}

void cpu_xent_bwd(mtk *k, float *dlogits, const float *logits, const float *rowmax, const float *sumexp,
                  const int32_t *target, const float *dscale, int N, int V, int v0)
{
    (void)k;
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float sc = dscale ? dscale[n] : 1.0f;
        float *d = dlogits + (size_t)n * V;
        row_softmax_grad(d, logits + (size_t)n * V, V, rowmax[n], (float)(sc / (double)sumexp[n]));
        const int64_t t = (int64_t)target[n] - v0;
        if (t >= 0 && t < V) d[t] -= sc;
    }
}
