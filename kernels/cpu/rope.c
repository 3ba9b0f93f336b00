/* rope.c: rotary position embeddings on the queries and keys of a packed qkv, in place (kernels.h,
 * mtk_rope_fwd). Each token row holds NG groups of NH/NG query heads, a key head and a value head; the
 * first NH/NG + 1 heads of each group are rotated. inv_freq[i] is the float nearest 1 / base^(2i/rot_dim)
 * (computed in double), the angle pos * inv_freq is an fp32 product, and its cos and sin are fp32: the
 * cuda backend computes the same three things. */
#include <math.h>

#include "cpu.h"

void cpu_rope(float *qkv, size_t n0, size_t n, int T, int NH, int NG, int HS, int rot_dim, float base, int pos0,
              int inverse)
{
    const int rep = NH / NG, half = rot_dim / 2;
    const size_t row = (size_t)(NH + 2 * NG) * HS;
#pragma omp parallel for schedule(static)
    for (size_t r = 0; r < n; r++) {
        float *x = qkv + r * row;
        const float pos = (float)(pos0 + (int)((n0 + r) % (size_t)T));
        for (int i = 0; i < half; i++) {
            const float f = (float)(1.0 / pow((double)base, (double)(2 * i) / rot_dim)), a = pos * f;
            const float c = cosf(a), s = inverse ? -sinf(a) : sinf(a);
            for (int g = 0; g < NG; g++)
                for (int j = 0; j <= rep; j++) {   /* the group's query heads, then its key head */
                    float *h = x + ((size_t)g * (rep + 2) + j) * HS;
                    const float x1 = h[i], x2 = h[i + half];
                    h[i] = x1 * c - x2 * s;
                    h[i + half] = x2 * c + x1 * s;
                }
        }
    }
}
