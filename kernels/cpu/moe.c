/* moe.c: the mixture of experts' operations on cpu (kernels.h): top-k routing with its score functions
 * and their backward, the sums behind the load-balancing and z losses, the grouping of the tokens' choices
 * by expert (with capacity and padding), the gathers and weighted scatters between token order and
 * expert order, and the shared experts' sigmoid gate. Activation operands are read and written in their
 * own dtype element by element (fp32 arithmetic); the router's product and the experts' products are the
 * linear layer's (ops.c, mtk.c). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu.h"

static inline float ld(const void *p, mtk_dtype dt, size_t i)
{
    if (dt == MTK_F32) return ((const float *)p)[i];
    uint16_t h = ((const uint16_t *)p)[i];
    return dt == MTK_BF16 ? mt_bf16_to_f32(h) : mt_f16_to_f32(h);
}

static inline void st(void *p, mtk_dtype dt, size_t i, float v)
{
    if (dt == MTK_F32) ((float *)p)[i] = v;
    else ((uint16_t *)p)[i] = dt == MTK_BF16 ? mt_f32_to_bf16(v) : mt_f32_to_f16(v);
}

static inline float sigm(float x) { return 1.0f / (1.0f + expf(-x)); }

/* The softmax of row x [E] into s, and its logsumexp. */
static float softmax(float *s, const float *x, int E)
{
    float mx = x[0];
    for (int e = 1; e < E; e++) mx = x[e] > mx ? x[e] : mx;
    float sum = 0;
    for (int e = 0; e < E; e++) sum += (s[e] = expf(x[e] - mx));
    for (int e = 0; e < E; e++) s[e] /= sum;
    return mx + logf(sum);
}

/* The aux-loss scores of row x: the softmax over all E, or the sigmoids divided by their sum (+ 1e-20). */
static void aux_scores(float *s, const float *x, const mtk_moe_route *r)
{
    if (r->score == MTK_MOE_SOFTMAX) {
        softmax(s, x, r->E);
        return;
    }
    float sum = 0;
    for (int e = 0; e < r->E; e++) sum += (s[e] = sigm(x[e]));
    for (int e = 0; e < r->E; e++) s[e] /= sum + 1e-20f;
}

void cpu_moe_topk(mtk *k, int32_t *idx, float *probs, const float *logits, int N, const mtk_moe_route *r)
{
    (void)k;
    const int E = r->E, K = r->K;
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float *x = logits + (size_t)n * E;
        int32_t *id = idx + (size_t)n * K;
        float *p = probs + (size_t)n * K;
        unsigned char taken[MTK_MOE_MAX_EXPERTS];
        memset(taken, 0, (size_t)E);
        for (int j = 0; j < K; j++) {   /* the largest not yet taken, the lower expert on ties */
            int best = -1;
            for (int e = 0; e < E; e++)
                if (!taken[e] && (best < 0 || x[e] > x[best])) best = e;
            taken[best] = 1;
            id[j] = best;
        }
        if (r->score == MTK_MOE_SIGMOID) {
            float sum = 0;
            for (int j = 0; j < K; j++) sum += (p[j] = sigm(x[id[j]]));
            if (K > 1)
                for (int j = 0; j < K; j++) p[j] /= sum + 1e-20f;
        } else if (r->pre_softmax) {
            float s[MTK_MOE_MAX_EXPERTS];
            softmax(s, x, E);
            for (int j = 0; j < K; j++) p[j] = s[id[j]];
        } else {
            float v[MTK_MOE_MAX_EXPERTS];
            for (int j = 0; j < K; j++) v[j] = x[id[j]];
            softmax(p, v, K);
        }
        if (r->scaling != 0)
            for (int j = 0; j < K; j++) p[j] *= r->scaling;
    }
}

/* The z sum over fixed blocks of rows, each block's double sum added in block order: the same bits for any
 * thread count (an OpenMP reduction adds the threads' sums in the order they finish). */
enum { Z_BLOCKS = 64 };

void cpu_moe_route_stats(mtk *k, float *stats, const float *logits, const int32_t *idx, int N, int seq,
                         const mtk_moe_route *r)
{
    (void)k;
    const int E = r->E, K = r->K, S = N / seq;
#pragma omp parallel for schedule(static)
    for (int s = 0; s < S; s++) {
        float *cnt = stats + 2 * (size_t)E * s, *sum = cnt + E;
        double acc[MTK_MOE_MAX_EXPERTS];
        float sc[MTK_MOE_MAX_EXPERTS];
        for (int e = 0; e < E; e++) cnt[e] = 0, acc[e] = 0;
        for (int n = s * seq; n < (s + 1) * seq; n++) {
            for (int j = 0; j < K; j++) cnt[idx[(size_t)n * K + j]] += 1;
            aux_scores(sc, logits + (size_t)n * E, r);
            for (int e = 0; e < E; e++) acc[e] += sc[e];
        }
        for (int e = 0; e < E; e++) sum[e] = (float)acc[e];
    }
    double part[Z_BLOCKS], z = 0;
#pragma omp parallel for schedule(static)
    for (int b = 0; b < Z_BLOCKS; b++) {
        float tmp[MTK_MOE_MAX_EXPERTS];
        double zb = 0;
        for (long long n = (long long)N * b / Z_BLOCKS; n < (long long)N * (b + 1) / Z_BLOCKS; n++) {
            float lse = softmax(tmp, logits + (size_t)n * E, E);
            zb += (double)lse * lse;
        }
        part[b] = zb;
    }
    for (int b = 0; b < Z_BLOCKS; b++) z += part[b];
    stats[2 * (size_t)E * S] = (float)z;
}

void cpu_moe_route_bwd(mtk *k, float *dlogits, const float *dprobs, const float *aux, int seq, float zcoef,
                       const float *logits, const int32_t *idx, int N, const mtk_moe_route *r)
{
    (void)k;
    const int E = r->E, K = r->K;
    const float scale = r->scaling != 0 ? r->scaling : 1.0f;
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float *x = logits + (size_t)n * E;
        const int32_t *id = idx + (size_t)n * K;
        float *d = dlogits + (size_t)n * E;
        float s[MTK_MOE_MAX_EXPERTS];
        for (int e = 0; e < E; e++) d[e] = 0;
        if (dprobs) {
            const float *g = dprobs + (size_t)n * K;
            if (r->score == MTK_MOE_SIGMOID) {
                float sk[MTK_MOE_MAX_EXPERTS], sum = 0, dot = 0;
                for (int j = 0; j < K; j++) sum += (sk[j] = sigm(x[id[j]]));
                float den = sum + 1e-20f;
                for (int j = 0; j < K; j++) dot += g[j] * scale * sk[j];
                for (int j = 0; j < K; j++) {
                    float ds = K > 1 ? g[j] * scale / den - dot / (den * den) : g[j] * scale;
                    d[id[j]] += ds * sk[j] * (1.0f - sk[j]);
                }
            } else if (r->pre_softmax) {
                softmax(s, x, E);
                float dot = 0;
                for (int j = 0; j < K; j++) dot += s[id[j]] * g[j] * scale;
                for (int e = 0; e < E; e++) d[e] -= s[e] * dot;
                for (int j = 0; j < K; j++) d[id[j]] += s[id[j]] * g[j] * scale;
            } else {
                float v[MTK_MOE_MAX_EXPERTS], p[MTK_MOE_MAX_EXPERTS], dot = 0;
                for (int j = 0; j < K; j++) v[j] = x[id[j]];
                softmax(p, v, K);
                for (int j = 0; j < K; j++) dot += p[j] * g[j] * scale;
                for (int j = 0; j < K; j++) d[id[j]] += p[j] * (g[j] * scale - dot);
            }
        }
        if (aux) {
            const float *a = aux + (size_t)(n / seq) * E;
            if (r->score == MTK_MOE_SOFTMAX) {
                softmax(s, x, E);
                float dot = 0;
                for (int e = 0; e < E; e++) dot += s[e] * a[e];
                for (int e = 0; e < E; e++) d[e] += s[e] * (a[e] - dot);
            } else {
                float sum = 0, dot = 0;
                for (int e = 0; e < E; e++) sum += (s[e] = sigm(x[e]));
                float den = sum + 1e-20f;
                for (int e = 0; e < E; e++) dot += a[e] * s[e];
                for (int e = 0; e < E; e++) d[e] += (a[e] / den - dot / (den * den)) * s[e] * (1.0f - s[e]);
            }
        }
        if (zcoef != 0) {
            float lse = softmax(s, x, E);
            for (int e = 0; e < E; e++) d[e] += zcoef * 2.0f * lse * s[e];
        }
    }
}

/* Whether choice b (token nb, prob pb) goes before choice a in an expert's order of keeping: the larger
 * prob, then the earlier token. */
static int before(float pb, int ib, float pa, int ia) { return pb > pa || (pb == pa && ib < ia); }

/* The choice at place q of Megatron's token order [s, b] (N / seq sequences of seq, b major in mt): the
 * token at position q / K / B of sequence q / K % B, its choice q % K. */
static size_t sb_choice(size_t q, int K, int seq, int B)
{
    size_t u = q / (size_t)K;
    return ((u % (size_t)B) * (size_t)seq + u / (size_t)B) * (size_t)K + q % (size_t)K;
}

/* The choices are first listed by group, an expert's shard (g = e shards + its shard), in row (N K entries,
 * as many as it has), each group's in Megatron's token order (a counting sort; the shards are runs of that
 * order); each group's kept ones go from that list into src (as choice numbers, then its padding), and row
 * is rewritten from src at the end. src is never written beyond its R rows, which with a capacity may be
 * fewer than N K. A choice of an expert outside [0, E) is dropped. */
void cpu_moe_dispatch(mtk *k, int32_t *counts, int32_t *row, int32_t *src, const int32_t *idx, const float *probs,
                      int N, int K, int E, int capacity, int drop_position, int pad, int seq, int shards)
{
    size_t NK = (size_t)N * K;
    const int B = N / seq, G = E * shards, run = seq / shards;
    int *off = calloc(3 * (size_t)G + 2, sizeof *off);   /* at most 3 x 64 Ki ints (kernels.h's bounds) */
    if (!off) {
        mtk_fail(k, "moe_dispatch: out of memory");
        return;
    }
    int *base = off + G + 1, *fill = base + G + 1;
    /* the group of choice i: its expert's, at its token's shard */
#define GROUP(i) (idx[i] * shards + (int)((i) / (size_t)K % (size_t)seq) / run)
    for (size_t i = 0; i < NK; i++)
        if (idx[i] >= 0 && idx[i] < E) off[GROUP(i) + 1]++;
    for (int g = 0; g < G; g++) off[g + 1] += off[g];
    /* each group's rows (its kept choices, or capacity when padded) start at base[g] */
    base[0] = 0;
    for (int e = 0; e < E; e++) counts[e] = 0;
    for (int g = 0; g < G; g++) {
        int len = off[g + 1] - off[g], kept = capacity >= 0 && len > capacity ? capacity : len, n = pad ? capacity : kept;
        counts[g / shards] += n;
        base[g + 1] = base[g] + n;
    }
    for (int g = 0; g < G; g++) fill[g] = off[g];
    for (size_t q = 0; q < NK; q++) {
        size_t i = sb_choice(q, K, seq, B);
        if (idx[i] >= 0 && idx[i] < E) row[fill[GROUP(i)]++] = (int32_t)i;
    }
#undef GROUP
#pragma omp parallel for schedule(dynamic, 1)
    for (int g = 0; g < G; g++) {
        const int32_t *list = row + off[g];
        int len = off[g + 1] - off[g], r = base[g];
        for (int i = 0; i < len; i++) {
            int c = list[i], keep = 1;
            if (capacity >= 0 && len > capacity) {
                if (drop_position) keep = i < capacity;
                else {   /* its rank among the group's choices by (prob, place in the token order) */
                    int rank = 0;
                    for (int j = 0; j < len && rank < capacity; j++) rank += j != i && before(probs[list[j]], j, probs[c], i);
                    keep = rank < capacity;
                }
            }
            if (keep) src[r++] = c;
        }
        while (r < base[g + 1]) src[r++] = -1;   /* padding */
    }
    for (size_t i = 0; i < NK; i++) row[i] = -1;
    for (int r = 0; r < base[G]; r++)
        if (src[r] >= 0) row[src[r]] = r, src[r] /= K;
    free(off);
}

void cpu_moe_permute(mtk *k, void *out, const void *inp, const int32_t *src, int R, int C)
{
    size_t a = mtk_dtype_size(k->act), rb = (size_t)C * a;
#pragma omp parallel for schedule(static)
    for (int i = 0; i < R; i++) {
        if (src[i] >= 0) memcpy((char *)out + i * rb, (const char *)inp + (size_t)src[i] * rb, rb);
        else memset((char *)out + i * rb, 0, rb);
    }
}

void cpu_moe_permute_bwd(mtk *k, void *dinp, const void *dout, const int32_t *row, int N, int K, int C)
{
    mtk_dtype dt = k->act;
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const int32_t *rw = row + (size_t)n * K;
        for (int c = 0; c < C; c++) {
            float s = 0;
            for (int j = 0; j < K; j++)
                if (rw[j] >= 0) s += ld(dout, dt, (size_t)rw[j] * C + c);
            st(dinp, dt, (size_t)n * C + c, s);
        }
    }
}

void cpu_moe_unpermute(mtk *k, void *out, const void *y, const int32_t *row, const float *probs, int N, int K, int C)
{
    mtk_dtype dt = k->act;
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const int32_t *rw = row + (size_t)n * K;
        const float *p = probs + (size_t)n * K;
        for (int c = 0; c < C; c++) {
            float s = 0;
            for (int j = 0; j < K; j++)
                if (rw[j] >= 0) s += p[j] * ld(y, dt, (size_t)rw[j] * C + c);
            st(out, dt, (size_t)n * C + c, s);
        }
    }
}

void cpu_moe_unpermute_bwd(mtk *k, void *dy, float *dprobs, const void *dout, const void *y, const int32_t *row,
                           const float *probs, int N, int K, int C, int R)
{
    mtk_dtype dt = k->act;
    size_t a = mtk_dtype_size(dt);
    memset(dy, 0, (size_t)R * C * a);
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        for (int j = 0; j < K; j++) {
            int r = row[(size_t)n * K + j];
            float p = probs[(size_t)n * K + j], dot = 0;
            if (r < 0) {
                dprobs[(size_t)n * K + j] = 0;
                continue;
            }
            for (int c = 0; c < C; c++) {
                float g = ld(dout, dt, (size_t)n * C + c);
                dot += g * ld(y, dt, (size_t)r * C + c);
                st(dy, dt, (size_t)r * C + c, p * g);
            }
            dprobs[(size_t)n * K + j] = dot;
        }
    }
}

void cpu_sigmoid_gate_fwd(mtk *k, void *out, const void *x, const float *logit, int N, int C)
{
    mtk_dtype dt = k->act;
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        float s = sigm(logit[n]);
        for (size_t i = (size_t)n * C; i < (size_t)(n + 1) * C; i++) st(out, dt, i, ld(out, dt, i) + ld(x, dt, i) * s);
    }
}

void cpu_sigmoid_gate_bwd(mtk *k, void *dx, float *dlogit, const void *dout, const void *x, const float *logit, int N,
                          int C)
{
    mtk_dtype dt = k->act;
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        float s = sigm(logit[n]), dot = 0;
        for (size_t i = (size_t)n * C; i < (size_t)(n + 1) * C; i++) {
            float g = ld(dout, dt, i);
            dot += g * ld(x, dt, i);
            st(dx, dt, i, g * s);
        }
        dlogit[n] = dot * s * (1.0f - s);
    }
}
