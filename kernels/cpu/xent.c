/* xent.c: softmax cross-entropy over vocabulary rows, loss and (optionally in place) logit gradient. */
#include <math.h>

#include "cpu.h"

void cpu_xent_fwd_bwd(mtk *k, float *losses, float *dlogits, const float *logits, const int32_t *target,
                      const float *dscale, int N, int V)
{
    (void)k;
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float *x = logits + (size_t)n * V;
        float mx = -INFINITY;
        for (int j = 0; j < V; j++) mx = x[j] > mx ? x[j] : mx;
        double s = 0;
        for (int j = 0; j < V; j++) s += expf(x[j] - mx);
        const float lse = mx + (float)log(s);
        const int tg = target[n];
        losses[n] = lse - x[tg];
        if (!dlogits) continue;
        float *d = dlogits + (size_t)n * V;   /* may be x itself: x[j] is read before d[j] is written */
        const float sc = dscale ? dscale[n] : 1.0f;
        for (int j = 0; j < V; j++) d[j] = expf(x[j] - lse) * sc;
        d[tg] -= sc;
    }
}
