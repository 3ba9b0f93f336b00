/* embed.c: token + position embedding and its backward (fixed summation order, no atomics), with a
 * position offset and a vocabulary shard [v0, v0 + nv). */
#include <string.h>

#include "cpu.h"

void cpu_embed_fwd(mtk *k, float *out, const int32_t *tok, const float *wte, const float *wpe, int B, int T, int C,
                   int pos0, int v0, int nv)
{
    (void)k;
#pragma omp parallel for schedule(static)
    for (int n = 0; n < B * T; n++) {
        float *o = out + (size_t)n * C;
        const int64_t r = (int64_t)tok[n] - v0;
        if (r >= 0 && r < nv) {
            const float *e = wte + (size_t)r * C;
            if (wpe) {
                const float *p = wpe + (size_t)(pos0 + n % T) * C;
                for (int c = 0; c < C; c++) o[c] = e[c] + p[c];
            } else
                memcpy(o, e, sizeof(float) * (size_t)C);
        } else if (wpe)
            memcpy(o, wpe + (size_t)(pos0 + n % T) * C, sizeof(float) * (size_t)C);
        else
            memset(o, 0, sizeof(float) * (size_t)C);
    }
}

void cpu_embed_bwd(mtk *k, float *dwte, float *dwpe, const float *dout, const int32_t *tok, int B, int T, int C,
                   int pos0, int v0, int nv)
{
    (void)k;
    /* Each thread owns a band of channels and walks the tokens in order, so repeated tokens add up in the
     * same order whatever the thread count. */
    enum { BAND = 64 };
    int nband = (C + BAND - 1) / BAND;
#pragma omp parallel for schedule(static)
    for (int bnd = 0; bnd < nband; bnd++) {
        int c0 = bnd * BAND, c1 = c0 + BAND < C ? c0 + BAND : C;
        for (int n = 0; n < B * T; n++) {
            const float *d = dout + (size_t)n * C;
            const int64_t r = (int64_t)tok[n] - v0;
            if (r >= 0 && r < nv) {
                float *w = dwte + (size_t)r * C;
                for (int c = c0; c < c1; c++) w[c] += d[c];
            }
            if (dwpe) {
                float *p = dwpe + (size_t)(pos0 + n % T) * C;
                for (int c = c0; c < c1; c++) p[c] += d[c];
            }
        }
    }
}
