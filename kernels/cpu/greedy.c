/* greedy.c: greedy decoding's choice on the cpu backend (kernels.h, mtk_greedy): each row's first largest
 * logit and its log-probability, in the order of gen/sample.c's host loops, so that the results are theirs
 * bit for bit. */
#include <math.h>

#include "cpu.h"

static inline float ld1(const void *x, mtk_dtype t, size_t i)
{
    if (t == MTK_BF16) return mt_bf16_to_f32(((const uint16_t *)x)[i]);
    if (t == MTK_F16) return mt_f16_to_f32(((const uint16_t *)x)[i]);
    return ((const float *)x)[i];
}

void cpu_greedy(mtk *k, int32_t *ids, double *lp, const void *logits, int N, int V, int ld)
{
    const mtk_dtype t = k->act;
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        size_t r = (size_t)n * (size_t)ld;
        float mx = ld1(logits, t, r);
        int id = 0;
        if (!isnan(mx)) {
            for (int j = 1; j < V; j++) {
                float v = ld1(logits, t, r + (size_t)j);
                if (v > mx) mx = v, id = j;
            }
        } else {   /* the max of the rest, id 0 */
            mx = -INFINITY;
            for (int j = 1; j < V; j++) {
                float v = ld1(logits, t, r + (size_t)j);
                mx = v > mx ? v : mx;
            }
        }
        double m = mx, se = 0;
        for (int j = 0; j < V; j++) se += exp((double)ld1(logits, t, r + (size_t)j) - m);
        ids[n] = id;
        lp[n] = (double)ld1(logits, t, r + (size_t)id) - (m + log(se));
    }
}
