/* attention.c: causal self-attention on cpu, flash-style, multi-head or grouped-query (NG groups of
 * NH/NG query heads sharing a key and a value head; qkv rows [NG][NH/NG + 2][HS], kernels.h).
 *
 * Forward: each (sequence, head, block of BQ queries) is one OpenMP work item; it walks the key blocks
 * up to the diagonal with an online softmax (running max m, running sum l, output accumulator O), the
 * tile products going through cblas_sgemm on strided views of qkv. Only lse = m + log l is saved.
 * Backward: each (sequence, group) is one work item; for each query head of the group in turn it
 * recomputes P = exp(S - lse) tile by tile, with D_i = dout_i . out_i, dS = P * (dP - D), and accumulates
 * dq of the head and dk, dv of the group in place.
 * Attention dropout multiplies the probabilities by mask / (1 - p) after the softmax sum (lse is that of
 * the undropped softmax); the backward applies the same mask to dP. Every work item writes only its own
 * outputs in a fixed order, so results do not depend on the number of threads.
 */
#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "attention_rows.h"
#include "cpu.h"

/* Floats of workspace one thread uses (forward, backward or the KV-cache path), 64-byte multiples. */
size_t cpu_attention_ws_floats(int T, int HS)
{
    size_t n = 2 * (size_t)BQ * BK + (size_t)BQ * HS + (size_t)T + 2 * BK;
    return (n + 15) / 16 * 16;
}

/* Offsets in a token's qkv row of query head h's query and of its group's key (the value follows). */
static size_t q_off(int h, int rep, int HS) { return ((size_t)(h / rep) * (rep + 2) + (size_t)(h % rep)) * HS; }
static size_t k_off(int h, int rep, int HS) { return ((size_t)(h / rep) * (rep + 2) + (size_t)rep) * HS; }

void cpu_attention_fwd(mtk *k, float *out, float *lse, const float *qkv, int B, int T, int NH, int NG, int HS,
                       const mtk_dropout *drop)
{
    const size_t per = cpu_attention_ws_floats(T, HS);
    float *ws = mtk_ws_take(k, per * (size_t)k->threads * sizeof(float));
    if (!ws) return;
    const int C = NH * HS, rep = NH / NG;
    const size_t S3 = (size_t)(NH + 2 * NG) * HS;   /* a token's qkv row */
    const float scale = 1.0f / sqrtf((float)HS);
    const int dropping = drop && drop->p > 0.0f;
    const float dscale = dropping ? 1.0f / (1.0f - drop->p) : 1.0f;
    const int nqb = (T + BQ - 1) / BQ;

#pragma omp parallel num_threads(k->threads)
    {
        float *S = ws + per * (size_t)omp_get_thread_num(), *O = S + BQ * BK, *mk = O + (size_t)BQ * HS;
        float m[BQ], l[BQ];
#pragma omp for schedule(dynamic, 1)
        for (int item = 0; item < B * NH * nqb; item++) {
            const int qb = nqb - 1 - item % nqb;   /* longest rows first */
            const int bh = item / nqb, b = bh / NH, h = bh % NH;
            const int i0 = qb * BQ, bq = T - i0 < BQ ? T - i0 : BQ;
            const float *base = qkv + (size_t)b * T * S3 + q_off(h, rep, HS);
            const float *kbase = qkv + (size_t)b * T * S3 + k_off(h, rep, HS);
            const float *q = base + (size_t)i0 * S3;
            memset(O, 0, sizeof(float) * bq * HS);
            for (int r = 0; r < bq; r++) m[r] = -INFINITY, l[r] = 0.0f;

            for (int j0 = 0; j0 < i0 + bq; j0 += BK) {
                const int bk = i0 + bq - j0 < BK ? i0 + bq - j0 : BK;
                const float *kj = kbase + (size_t)j0 * S3, *vj = kbase + (size_t)j0 * S3 + HS;
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, bq, bk, HS, scale, q, (int)S3, kj, (int)S3,
                            0.0f, S, BK);
                for (int r = 0; r < bq; r++) {
                    const int i = i0 + r;
                    const int nv = i - j0 + 1 < bk ? i - j0 + 1 : bk;   /* unmasked columns of this row */
                    float *s = S + (size_t)r * BK;
                    if (nv <= 0) {
                        for (int c = 0; c < bk; c++) s[c] = 0.0f;
                        continue;
                    }
                    const float mx = row_max(s, nv, m[r]);
                    const float corr = vexp(m[r] - mx);
                    const float sum = row_exp(s, nv, bk, mx);
                    l[r] = l[r] * corr + sum;
                    m[r] = mx;
                    if (corr != 1.0f) row_scale(O + (size_t)r * HS, HS, corr);
                    if (dropping) {
                        const uint64_t ctr = drop->offset + ((((uint64_t)b * NH + h) * T + i) * T + j0);
                        row_mask(mk, nv, drop->seed, ctr, drop->p, dscale);
                        for (int c = 0; c < nv; c++) s[c] *= mk[c];
                    }
                }
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, bq, HS, bk, 1.0f, S, BK, vj, (int)S3, 1.0f, O,
                            HS);
            }
            for (int r = 0; r < bq; r++) {
                const int i = i0 + r;
                float *o = out + ((size_t)b * T + i) * C + (size_t)h * HS;
                const float inv = 1.0f / l[r];
                for (int d = 0; d < HS; d++) o[d] = O[(size_t)r * HS + d] * inv;
                lse[((size_t)b * NH + h) * T + i] = m[r] + logf(l[r]);
            }
        }
    }
}

void cpu_attention_bwd(mtk *k, float *dqkv, const float *dout, const float *qkv, const float *out, const float *lse,
                       int B, int T, int NH, int NG, int HS, const mtk_dropout *drop)
{
    const size_t per = cpu_attention_ws_floats(T, HS);
    float *ws = mtk_ws_take(k, per * (size_t)k->threads * sizeof(float));
    if (!ws) return;
    const int C = NH * HS, rep = NH / NG;
    const size_t S3 = (size_t)(NH + 2 * NG) * HS;
    const float scale = 1.0f / sqrtf((float)HS);
    const int dropping = drop && drop->p > 0.0f;
    const float dscale = dropping ? 1.0f / (1.0f - drop->p) : 1.0f;

#pragma omp parallel num_threads(k->threads)
    {
        float *S = ws + per * (size_t)omp_get_thread_num(), *dP = S + BQ * BK, *D = dP + BQ * BK, *mk = D + T;
#pragma omp for schedule(dynamic, 1)
        for (int bg = 0; bg < B * NG; bg++) {
            const int b = bg / NG, grp = bg % NG;
            for (int t = 0; t < T; t++)   /* the group's rows of dqkv: queries, key, value */
                memset(dqkv + ((size_t)b * T + t) * S3 + (size_t)grp * (rep + 2) * HS, 0,
                       sizeof(float) * (size_t)(rep + 2) * HS);
            for (int h = grp * rep; h < (grp + 1) * rep; h++) {
                const float *base = qkv + (size_t)b * T * S3 + q_off(h, rep, HS);
                const float *kbase = qkv + (size_t)b * T * S3 + k_off(h, rep, HS);
                float *dbase = dqkv + (size_t)b * T * S3 + q_off(h, rep, HS);
                float *dkbase = dqkv + (size_t)b * T * S3 + k_off(h, rep, HS);
                const float *dob = dout + (size_t)b * T * C + (size_t)h * HS;
                const float *ob = out + (size_t)b * T * C + (size_t)h * HS;
                const float *L = lse + ((size_t)b * NH + h) * T;
                for (int t = 0; t < T; t++) {
                    const float *a = dob + (size_t)t * C, *o = ob + (size_t)t * C;
                    float s = 0.0f;
                    for (int d = 0; d < HS; d++) s += a[d] * o[d];
                    D[t] = s;
                }
                for (int j0 = 0; j0 < T; j0 += BK) {
                    const int bk = T - j0 < BK ? T - j0 : BK;
                    const float *kj = kbase + (size_t)j0 * S3, *vj = kbase + (size_t)j0 * S3 + HS;
                    float *dkj = dkbase + (size_t)j0 * S3, *dvj = dkbase + (size_t)j0 * S3 + HS;
                    for (int i0 = j0 / BQ * BQ; i0 < T; i0 += BQ) {
                        const int bq = T - i0 < BQ ? T - i0 : BQ;
                        const float *qi = base + (size_t)i0 * S3, *doi = dob + (size_t)i0 * C;
                        float *dqi = dbase + (size_t)i0 * S3;
                        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, bq, bk, HS, scale, qi, (int)S3, kj,
                                    (int)S3, 0.0f, S, BK);
                        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, bq, bk, HS, 1.0f, doi, C, vj, (int)S3,
                                    0.0f, dP, BK);
                        for (int r = 0; r < bq; r++) {
                            const int i = i0 + r;
                            const int nv = i - j0 + 1 < bk ? (i - j0 + 1 > 0 ? i - j0 + 1 : 0) : bk;
                            float *s = S + (size_t)r * BK, *dp = dP + (size_t)r * BK;
                            if (dropping) {
                                const uint64_t ctr = drop->offset + ((((uint64_t)b * NH + h) * T + i) * T + j0);
                                row_mask(mk, nv, drop->seed, ctr, drop->p, dscale);
                            }
                            row_bwd(s, dp, dropping ? mk : NULL, nv, bk, L[i], D[i]);
                        }
                        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, bk, HS, bq, 1.0f, S, BK, doi, C, 1.0f,
                                    dvj, (int)S3);
                        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, bq, HS, bk, scale, dP, BK, kj, (int)S3,
                                    1.0f, dqi, (int)S3);
                        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, bk, HS, bq, scale, dP, BK, qi, (int)S3,
                                    1.0f, dkj, (int)S3);
                    }
                }
            }
        }
    }
}

/* Inference with a KV cache [B, NG, Tmax, HS]: append the new keys and values, then each (sequence, query
 * head, new token) attends to its group's cache up to its own position with a plain two-pass softmax in
 * fp32. */
void cpu_attention_kv(mtk *k, float *out, const float *qkv, float *kc, float *vc, int B, int T, int pos0, int Tmax,
                      int NH, int NG, int HS)
{
    const int C = NH * HS, rep = NH / NG;
    const size_t S3 = (size_t)(NH + 2 * NG) * HS;
    const float scale = 1.0f / sqrtf((float)HS);
    const size_t per = cpu_attention_ws_floats(Tmax, HS);
    float *ws = mtk_ws_take(k, per * (size_t)k->threads * sizeof(float));
    if (!ws) return;
#pragma omp parallel for schedule(static) num_threads(k->threads)
    for (int bg = 0; bg < B * NG; bg++) {
        const int b = bg / NG, g = bg % NG;
        for (int t = 0; t < T; t++) {
            const float *src = qkv + ((size_t)b * T + t) * S3 + k_off(g * rep, rep, HS);
            memcpy(kc + ((size_t)bg * Tmax + pos0 + t) * HS, src, sizeof(float) * (size_t)HS);
            memcpy(vc + ((size_t)bg * Tmax + pos0 + t) * HS, src + HS, sizeof(float) * (size_t)HS);
        }
    }
#pragma omp parallel num_threads(k->threads)
    {
        float *s = ws + per * (size_t)omp_get_thread_num();
#pragma omp for schedule(dynamic, 1)
        for (int item = 0; item < B * NH * T; item++) {
            const int t = item % T, bh = item / T, b = bh / NH, h = bh % NH, n = pos0 + t + 1;
            const size_t bg = (size_t)b * NG + (size_t)(h / rep);
            const float *q = qkv + ((size_t)b * T + t) * S3 + q_off(h, rep, HS);
            const float *kb = kc + bg * Tmax * HS, *vb = vc + bg * Tmax * HS;
            const float mx = kv_scores(s, q, kb, n, HS, scale, -INFINITY);
            float sum = 0.0f;
            for (int j = 0; j < n; j++) sum += s[j] = vexp(s[j] - mx);
            float *o = out + ((size_t)b * T + t) * C + (size_t)h * HS;
            for (int d = 0; d < HS; d++) o[d] = 0.0f;
            kv_values(o, s, sum, vb, n, HS);
        }
    }
}
