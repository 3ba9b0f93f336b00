/* attention_block.c: attention by blocks on cpu, for context parallelism (kernels.h's mtk_attention_block_*):
 * a rank's queries, at their positions in the sequence, against one block of keys and values at theirs.
 *
 * The rows of both sides are in increasing positions, so the keys a query sees (position <= its own) are
 * a prefix of the block, of a length that grows with the query: the tiles are walked as in attention.c
 * up to the last row's prefix, each row keeping its own. Forward: per (sequence, head, block of BQ
 * queries) an online softmax over the key tiles; out is normalized over the block and lse is its
 * log-sum-exp (-inf, out 0, for a row that sees no key). Backward: per (sequence, group), for each query
 * head, P = exp(S - lse) with the lse over all the blocks, dS = P (dP - D), D_i = dout_i . out_i of the
 * whole attention; dq and dkv are accumulated. Dropout counters run over the whole sequence's positions.
 * Each work item writes only its own outputs, in a fixed order: the results do not depend on threads. */
#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <string.h>

#include "attention_rows.h"
#include "cpu.h"

/* The position of row r. */
static int pos_of(const mtk_att_rows *w, int r) { return w->start[r / w->run] + r % w->run; }

/* The keys (rows of kr, Tk of them) at positions <= p. */
static int visible(const mtk_att_rows *kr, int Tk, int p)
{
    int n = 0;
    for (int u = 0; u < Tk / kr->run; u++) {
        const int s = kr->start[u];
        if (p < s) break;
        n += p - s + 1 < kr->run ? p - s + 1 : kr->run;
    }
    return n;
}

/* The dropout factors of row counter base + the position of each of columns j0 .. j0+n-1: a run of
 * counters for each run of kr they fall in. */
static void block_mask(float *mk, int n, int j0, const mtk_att_rows *kr, const mtk_dropout *d, uint64_t base,
                       float scale)
{
    for (int c = 0; c < n;) {
        const int j = j0 + c, left = kr->run - j % kr->run, m = n - c < left ? n - c : left;
        row_mask(mk + c, m, d->seed, base + (uint64_t)pos_of(kr, j), d->p, scale);
        c += m;
    }
}

static size_t q_off(int h, int rep, int HS) { return ((size_t)(h / rep) * (rep + 2) + (size_t)(h % rep)) * HS; }

void cpu_attention_kv_pack(mtk *k, void *kv, const void *qkv, int B, int T, int NH, int NG, int HS)
{
    const size_t a = mtk_dtype_size(k->act), rep = (size_t)(NH / NG), row = (size_t)HS * a;
#pragma omp parallel for schedule(static) num_threads(k->threads)
    for (long long bt = 0; bt < (long long)B * T; bt++)
        for (int g = 0; g < NG; g++)
            memcpy((char *)kv + ((size_t)bt * NG + (size_t)g) * 2 * row,
                   (const char *)qkv + ((size_t)bt * (NH + 2 * (size_t)NG) + (size_t)g * (rep + 2) + rep) * row, 2 * row);
}

void cpu_attention_block_fwd(mtk *k, float *out, float *lse, const float *qkv, const float *kv, int B, int Tq, int Tk,
                             int Tg, const mtk_att_rows *qr, const mtk_att_rows *kr, int NH, int NG, int HS,
                             const mtk_dropout *drop)
{
    const size_t per = cpu_attention_ws_floats(Tq > Tk ? Tq : Tk, HS);
    float *ws = mtk_ws_take(k, per * (size_t)k->threads * sizeof(float));
    if (!ws) return;
    const int C = NH * HS, rep = NH / NG;
    const size_t S3 = (size_t)(NH + 2 * NG) * HS, S2 = (size_t)2 * NG * HS;
    const float scale = 1.0f / sqrtf((float)HS);
    const int dropping = drop && drop->p > 0.0f;
    const float dscale = dropping ? 1.0f / (1.0f - drop->p) : 1.0f;
    const int nqb = (Tq + BQ - 1) / BQ;

#pragma omp parallel num_threads(k->threads)
    {
        float *S = ws + per * (size_t)omp_get_thread_num(), *O = S + BQ * BK, *mk = O + (size_t)BQ * HS;
        float m[BQ], l[BQ];
        int vis[BQ];
#pragma omp for schedule(dynamic, 1)
        for (int item = 0; item < B * NH * nqb; item++) {
            const int qb = nqb - 1 - item % nqb;
            const int bh = item / nqb, b = bh / NH, h = bh % NH;
            const int i0 = qb * BQ, bq = Tq - i0 < BQ ? Tq - i0 : BQ;
            const float *q = qkv + ((size_t)b * Tq + i0) * S3 + q_off(h, rep, HS);
            const float *kbase = kv + (size_t)b * Tk * S2 + (size_t)(h / rep) * 2 * HS;
            memset(O, 0, sizeof(float) * bq * HS);
            for (int r = 0; r < bq; r++) m[r] = -INFINITY, l[r] = 0.0f, vis[r] = visible(kr, Tk, pos_of(qr, i0 + r));

            for (int j0 = 0; j0 < vis[bq - 1]; j0 += BK) {
                const int bk = vis[bq - 1] - j0 < BK ? vis[bq - 1] - j0 : BK;
                const float *kj = kbase + (size_t)j0 * S2, *vj = kj + HS;
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, bq, bk, HS, scale, q, (int)S3, kj, (int)S2, 0.0f,
                            S, BK);
                for (int r = 0; r < bq; r++) {
                    const int nv = vis[r] - j0 < bk ? vis[r] - j0 : bk;
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
                        const uint64_t base = drop->offset + (((uint64_t)b * NH + h) * Tg + pos_of(qr, i0 + r)) * Tg;
                        block_mask(mk, nv, j0, kr, drop, base, dscale);
                        for (int c = 0; c < nv; c++) s[c] *= mk[c];
                    }
                }
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, bq, HS, bk, 1.0f, S, BK, vj, (int)S2, 1.0f, O,
                            HS);
            }
            for (int r = 0; r < bq; r++) {
                const int i = i0 + r;
                float *o = out + ((size_t)b * Tq + i) * C + (size_t)h * HS;
                const float inv = l[r] > 0.0f ? 1.0f / l[r] : 0.0f;
                for (int d = 0; d < HS; d++) o[d] = O[(size_t)r * HS + d] * inv;
                lse[((size_t)b * NH + h) * Tq + i] = l[r] > 0.0f ? m[r] + logf(l[r]) : -INFINITY;
            }
        }
    }
}

void cpu_attention_merge(mtk *k, float *out, float *lse, const float *out_b, const float *lse_b, int B, int T, int NH,
                         int HS)
{
    const size_t C = (size_t)NH * HS;
#pragma omp parallel for schedule(static) num_threads(k->threads)
    for (long long bt = 0; bt < (long long)B * T; bt++) {
        const size_t b = (size_t)bt / (size_t)T, t = (size_t)bt % (size_t)T;
        for (int h = 0; h < NH; h++) {
            float *L = lse + (b * NH + (size_t)h) * T + t;
            const float Lb = lse_b[(b * NH + (size_t)h) * T + t], mx = *L > Lb ? *L : Lb;
            if (mx == -INFINITY) continue;
            const float wa = expf(*L - mx), wb = expf(Lb - mx), inv = 1.0f / (wa + wb);
            float *o = out + (size_t)bt * C + (size_t)h * HS;
            const float *ob = out_b + (size_t)bt * C + (size_t)h * HS;
            for (int d = 0; d < HS; d++) o[d] = (o[d] * wa + ob[d] * wb) * inv;
            *L = mx + logf(wa + wb);
        }
    }
}

void cpu_attention_block_bwd(mtk *k, float *dq, float *dkv, const float *dout, const float *qkv, const float *kv,
                             const float *out, const float *lse, int B, int Tq, int Tk, int Tg, const mtk_att_rows *qr,
                             const mtk_att_rows *kr, int NH, int NG, int HS, const mtk_dropout *drop)
{
    const size_t per = cpu_attention_ws_floats(Tq > Tk ? Tq : Tk, HS);
    float *ws = mtk_ws_take(k, per * (size_t)k->threads * sizeof(float));
    if (!ws) return;
    const int C = NH * HS, rep = NH / NG;
    const size_t S3 = (size_t)(NH + 2 * NG) * HS, S2 = (size_t)2 * NG * HS;
    const float scale = 1.0f / sqrtf((float)HS);
    const int dropping = drop && drop->p > 0.0f;
    const float dscale = dropping ? 1.0f / (1.0f - drop->p) : 1.0f;

#pragma omp parallel num_threads(k->threads)
    {
        float *S = ws + per * (size_t)omp_get_thread_num(), *dP = S + BQ * BK, *D = dP + BQ * BK, *mk = D + Tq;
#pragma omp for schedule(dynamic, 1)
        for (int bg = 0; bg < B * NG; bg++) {
            const int b = bg / NG, grp = bg % NG;
            const float *kbase = kv + (size_t)b * Tk * S2 + (size_t)grp * 2 * HS;
            float *dkbase = dkv + (size_t)b * Tk * S2 + (size_t)grp * 2 * HS;
            for (int h = grp * rep; h < (grp + 1) * rep; h++) {
                const float *qb = qkv + (size_t)b * Tq * S3 + q_off(h, rep, HS);
                float *dqb = dq + (size_t)b * Tq * C + (size_t)h * HS;
                const float *dob = dout + (size_t)b * Tq * C + (size_t)h * HS;
                const float *ob = out + (size_t)b * Tq * C + (size_t)h * HS;
                const float *L = lse + ((size_t)b * NH + h) * Tq;
                for (int t = 0; t < Tq; t++) {
                    const float *a = dob + (size_t)t * C, *o = ob + (size_t)t * C;
                    float s = 0.0f;
                    for (int d = 0; d < HS; d++) s += a[d] * o[d];
                    D[t] = s;
                }
                int first = 0;   /* the first query that sees key j0 (only grows with j0) */
                for (int j0 = 0; j0 < Tk; j0 += BK) {
                    const int bk = Tk - j0 < BK ? Tk - j0 : BK;
                    const float *kj = kbase + (size_t)j0 * S2, *vj = kj + HS;
                    float *dkj = dkbase + (size_t)j0 * S2, *dvj = dkj + HS;
                    /* the rows before it see none of this tile */
                    while (first < Tq && visible(kr, Tk, pos_of(qr, first)) <= j0) first++;
                    for (int i0 = first / BQ * BQ; i0 < Tq; i0 += BQ) {
                        const int bq = Tq - i0 < BQ ? Tq - i0 : BQ;
                        const float *qi = qb + (size_t)i0 * S3, *doi = dob + (size_t)i0 * C;
                        float *dqi = dqb + (size_t)i0 * C;
                        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, bq, bk, HS, scale, qi, (int)S3, kj,
                                    (int)S2, 0.0f, S, BK);
                        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, bq, bk, HS, 1.0f, doi, C, vj, (int)S2,
                                    0.0f, dP, BK);
                        for (int r = 0; r < bq; r++) {
                            const int i = i0 + r, v = visible(kr, Tk, pos_of(qr, i)) - j0;
                            const int nv = v < bk ? (v > 0 ? v : 0) : bk;
                            float *s = S + (size_t)r * BK, *dp = dP + (size_t)r * BK;
                            if (dropping && nv > 0) {
                                const uint64_t base = drop->offset + (((uint64_t)b * NH + h) * Tg + pos_of(qr, i)) * Tg;
                                block_mask(mk, nv, j0, kr, drop, base, dscale);
                            }
                            row_bwd(s, dp, dropping ? mk : NULL, nv, bk, L[i], D[i]);
                        }
                        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, bk, HS, bq, 1.0f, S, BK, doi, C, 1.0f,
                                    dvj, (int)S2);
                        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, bq, HS, bk, scale, dP, BK, kj, (int)S2,
                                    1.0f, dqi, C);
                        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, bk, HS, bq, scale, dP, BK, qi, (int)S3,
                                    1.0f, dkj, (int)S2);
                    }
                }
            }
        }
    }
}

void cpu_attention_dqkv_pack(mtk *k, float *dqkv, const float *dq, const float *dkv, int B, int T, int NH, int NG,
                             int HS)
{
    const size_t rep = (size_t)(NH / NG), S3 = (size_t)(NH + 2 * NG) * HS, C = (size_t)NH * HS, hs = (size_t)HS;
#pragma omp parallel for schedule(static) num_threads(k->threads)
    for (long long bt = 0; bt < (long long)B * T; bt++)
        for (int g = 0; g < NG; g++) {
            float *d = dqkv + (size_t)bt * S3 + (size_t)g * (rep + 2) * hs;
            memcpy(d, dq + (size_t)bt * C + (size_t)g * rep * hs, sizeof(float) * rep * hs);
            memcpy(d + rep * hs, dkv + ((size_t)bt * NG + (size_t)g) * 2 * hs, sizeof(float) * 2 * hs);
        }
}
