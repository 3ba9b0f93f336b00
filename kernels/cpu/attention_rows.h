/* attention_rows.h: the tile-row helpers of the cpu attention kernels (attention.c, attention_block.c):
 * the online softmax's max, exp and rescale, the dropout factors of a run of counters, the backward's
 * dS of a row; each compiled for AVX-512, AVX2 and the baseline (vmath.h). And the tile sizes. */
#ifndef MT_KERNELS_CPU_ATTENTION_ROWS_H
#define MT_KERNELS_CPU_ATTENTION_ROWS_H

#include <stdint.h>

#include "kernels.h"
#include "vmath.h"

enum { BQ = 64, BK = 64 };

MTK_CLONES static __attribute__((unused)) float row_max(const float *s, int n, float mx)
{
#pragma omp simd reduction(max : mx)
    for (int c = 0; c < n; c++) mx = s[c] > mx ? s[c] : mx;
    return mx;
}

/* s[c] = exp(s[c] - mx) for c < nv, 0 up to bk; returns the sum in a fixed order. */
MTK_CLONES static __attribute__((unused)) float row_exp(float *s, int nv, int bk, float mx)
{
    float acc[8] = {0};
    for (int c = 0; c < nv; c++) s[c] = vexp(s[c] - mx);
    for (int c = nv; c < bk; c++) s[c] = 0.0f;
    int c = 0;
    for (; c + 8 <= nv; c += 8)
        for (int l = 0; l < 8; l++) acc[l] += s[c + l];
    float sum = 0.0f;
    for (; c < nv; c++) sum += s[c];
    for (int l = 0; l < 8; l++) sum += acc[l];
    return sum;
}

MTK_CLONES static __attribute__((unused)) void row_scale(float *o, int n, float a)
{
    for (int d = 0; d < n; d++) o[d] *= a;
}

/* The dropout factor of counters ctr .. ctr+n-1 (mtk_dropout_keep written out so that it vectorizes):
 * mk[c] = scale if kept, else 0. */
MTK_CLONES static __attribute__((unused)) void row_mask(float *mk, int n, uint64_t seed, uint64_t ctr, float p, float scale)
{
    for (int c = 0; c < n; c++) {
        uint64_t z = mt_mix64(seed ^ ((ctr + (uint64_t)c + 1) * MT_GOLDEN64));
        mk[c] = (float)(int32_t)(uint32_t)(z >> 40) * (1.0f / 16777216.0f) >= p ? scale : 0.0f;
    }
}

/* Backward tile row: P = exp(S - lse) on the nv unmasked columns; with a dropout factor mk (may be NULL)
 * s becomes P * mk (the dropped probabilities, for dv) and dp becomes dS = P * (dp * mk - D). */
MTK_CLONES static __attribute__((unused)) void row_bwd(float *s, float *dp, const float *mk, int nv, int bk, float lse, float D)
{
    if (mk) {
        for (int c = 0; c < nv; c++) {
            float p = vexp(s[c] - lse);
            s[c] = p * mk[c];
            dp[c] = p * (dp[c] * mk[c] - D);
        }
    } else {
        for (int c = 0; c < nv; c++) {
            float p = vexp(s[c] - lse);
            s[c] = p;
            dp[c] = p * (dp[c] - D);
        }
    }
    for (int c = nv; c < bk; c++) s[c] = dp[c] = 0.0f;
}

/* Inference (cpu_attention_kv, cpu_attention_paged): a query's scores against m cached keys (rows of HS at
 * k), s[i] = (q . k_i) * scale; returns the larger of mx and the scores. Every dot product is the same
 * loop, so a score does not depend on how the cache is cut into calls (a paged cache's blocks, a
 * contiguous one): a server's row equals a lone generation's. */
MTK_CLONES static __attribute__((unused)) float kv_scores(float *s, const float *q, const float *k, int m, int HS,
                                                          float scale, float mx)
{
    for (int i = 0; i < m; i++) {
        const float *ki = k + (size_t)i * HS;
        float a = 0.0f;
#pragma omp simd reduction(+ : a)
        for (int d = 0; d < HS; d++) a += q[d] * ki[d];
        s[i] = a * scale;
        mx = s[i] > mx ? s[i] : mx;
    }
    return mx;
}

/* o[0..HS) += sum over j < m of p[j] / sum * v_j, in order of j (rows of HS at v). */
MTK_CLONES static __attribute__((unused)) void kv_values(float *o, const float *p, float sum, const float *v, int m, int HS)
{
    for (int j = 0; j < m; j++) {
        const float pj = p[j] / sum, *vj = v + (size_t)j * HS;
        for (int d = 0; d < HS; d++) o[d] += pj * vj[d];
    }
}

#endif
