/* embed.c: token + position embedding and its backward (fixed summation order, no atomics). */
#include "cpu.h"

void cpu_embed_fwd(mtk *k, float *out, const int32_t *tok, const float *wte, const float *wpe, int B, int T, int C)
{
    (void)k;
#pragma omp parallel for schedule(static)
    for (int n = 0; n < B * T; n++) {
        const float *e = wte + (size_t)tok[n] * C, *p = wpe + (size_t)(n % T) * C;
        float *o = out + (size_t)n * C;
        for (int c = 0; c < C; c++) o[c] = e[c] + p[c];
    }
}

void cpu_embed_bwd(mtk *k, float *dwte, float *dwpe, const float *dout, const int32_t *tok, int B, int T, int C)
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
            float *w = dwte + (size_t)tok[n] * C, *p = dwpe + (size_t)(n % T) * C;
            for (int c = c0; c < c1; c++) {
                w[c] += d[c];
                p[c] += d[c];
            }
        }
    }
}
