// moe.cu: the mixture of experts' routing (kernels.h): each row's top K experts and their weights, the
// sums behind the load-balancing and z losses, and the gradient of the logits. Rows are [E] fp32 logits
// (E <= 1024); a warp per row, lane l holding experts l, l + 32, ...: the top K by K rounds of a warp
// arg-max (larger logit, then lower expert: one total order, so every lane ends with the same choice),
// softmaxes and sums as warp reductions, every expert's gradient written by one lane. The per-run sums
// add each expert's rows in order in double, and the z sum is one block's fixed-order sum: the same
// results run to run, without atomics.
#include "cuda.h"

namespace MTK_CU_NS {

enum { ROWS = THREADS / 32 };   // rows (warps) per block of the row kernels
static const unsigned FULL = 0xffffffffu;

__device__ __forceinline__ float sigm(float x) { return 1.0f / (1.0f + expf(-x)); }

// Whether candidate (v, e) beats (bv, be): the larger logit, the lower expert on ties; an expert >= E is none.
__device__ __forceinline__ bool beats(float v, int e, float bv, int be, int E)
{
    return e < E && (be >= E || v > bv || (v == bv && e < be));
}

__global__ void topk_kernel(int32_t *idx, float *probs, const float *logits, int N, int E, int K, int sigmoid, int pre,
                            float scaling)
{
    const int lane = threadIdx.x & 31;
    const long long n = (long long)blockIdx.x * ROWS + (threadIdx.x >> 5);
    if (n >= N) return;   // whole warps
    const float *x = logits + n * E;
    int32_t *id = idx + n * K;
    float *p = probs + n * K;
    uint32_t taken = 0;   // bit s: expert lane + 32 s is chosen
    float top = 0.0f;
    for (int j = 0; j < K; j++) {
        float bv = 0.0f;
        int be = E;
        for (int s = 0, e = lane; e < E; s++, e += 32)
            if (!((taken >> s) & 1u) && beats(x[e], e, bv, be, E)) bv = x[e], be = e;
        for (int o = 16; o > 0; o >>= 1) {
            const float ov = __shfl_xor_sync(FULL, bv, o);
            const int oe = __shfl_xor_sync(FULL, be, o);
            if (beats(ov, oe, bv, be, E)) bv = ov, be = oe;
        }
        if ((be & 31) == lane) taken |= 1u << (be >> 5);
        if (lane == 0) id[j] = be;
        if (j == 0) top = bv;   // the row's largest logit
    }
    __syncwarp();   // id[] as lane 0 wrote it
    float sum = 0.0f;
    if (sigmoid) {
        for (int j = lane; j < K; j += 32) sum += sigm(x[id[j]]);
    } else if (pre) {
        for (int e = lane; e < E; e += 32) sum += expf(x[e] - top);
    } else {
        for (int j = lane; j < K; j += 32) sum += expf(x[id[j]] - top);
    }
    sum = warp_sum(sum);
    for (int j = lane; j < K; j += 32) {
        float v = sigmoid ? sigm(x[id[j]]) : expf(x[id[j]] - top) / sum;
        if (sigmoid && K > 1) v /= sum + 1e-20f;
        p[j] = scaling != 0.0f ? v * scaling : v;
    }
}

void moe_topk(mtk *k, int32_t *idx, float *probs, const float *logits, int N, const mtk_moe_route *r)
{
    if (N <= 0) return;
    LAUNCH(topk_kernel, (N + ROWS - 1) / ROWS, THREADS, 0, launch_stream(k))(
        idx, probs, logits, N, r->E, r->K, r->score == MTK_MOE_SIGMOID, r->pre_softmax, r->scaling);
    check(k, "moe_topk");
}

// Each row's largest logit, sum of exponentials from it and sum of sigmoids: rs[3 n .. 3 n + 2].
__global__ void row_sums_kernel(float *rs, const float *logits, int N, int E)
{
    const int lane = threadIdx.x & 31;
    const long long n = (long long)blockIdx.x * ROWS + (threadIdx.x >> 5);
    if (n >= N) return;
    const float *x = logits + n * E;
    float m = -INFINITY, se = 0.0f, sg = 0.0f;
    for (int e = lane; e < E; e += 32) m = fmaxf(m, x[e]);
    m = warp_max(m);
    for (int e = lane; e < E; e += 32) se += expf(x[e] - m), sg += sigm(x[e]);
    se = warp_sum(se), sg = warp_sum(sg);
    if (lane == 0) rs[3 * n] = m, rs[3 * n + 1] = se, rs[3 * n + 2] = sg;
}

// stats[s][0][e], stats[s][1][e] of run s (blockIdx.x) for experts blockIdx.y * 64 + threadIdx.x: the rows in
// order, the score sum in double.
__global__ void run_sums_kernel(float *stats, const float *logits, const int32_t *idx, const float *rs, int seq, int E,
                                int K, int sigmoid)
{
    const int e = blockIdx.y * blockDim.x + threadIdx.x, s = blockIdx.x;
    if (e >= E) return;
    double acc = 0;
    int cnt = 0;
    for (long long n = (long long)s * seq; n < (long long)(s + 1) * seq; n++) {
        for (int j = 0; j < K; j++) cnt += idx[n * K + j] == e;
        const float v = logits[n * E + e];
        acc += sigmoid ? sigm(v) / (rs[3 * n + 2] + 1e-20f) : expf(v - rs[3 * n]) / rs[3 * n + 1];
    }
    stats[2 * (size_t)E * s + e] = (float)cnt;
    stats[2 * (size_t)E * s + E + e] = (float)acc;
}

// *z = the sum over rows of logsumexp^2: one block, a strided sum per thread, then a tree, all in double.
__global__ void z_sum_kernel(float *z, const float *rs, int N)
{
    __shared__ double part[THREADS];
    double a = 0;
    for (int n = threadIdx.x; n < N; n += THREADS) {
        const double l = rs[3 * (size_t)n] + logf(rs[3 * (size_t)n + 1]);
        a += l * l;
    }
    part[threadIdx.x] = a;
    __syncthreads();
    for (int h = THREADS / 2; h > 0; h >>= 1) {
        if ((int)threadIdx.x < h) part[threadIdx.x] += part[threadIdx.x + h];
        __syncthreads();
    }
    if (threadIdx.x == 0) *z = (float)part[0];
}

void moe_route_stats(mtk *k, float *stats, const float *logits, const int32_t *idx, int N, int seq,
                     const mtk_moe_route *r)
{
    const int E = r->E, S = N / seq;
    float *rs = N > 0 ? (float *)mtk_ws_take(k, 3 * (size_t)N * sizeof(float)) : NULL;
    if (N > 0 && !rs) return;
    if (N > 0) {
        LAUNCH(row_sums_kernel, (N + ROWS - 1) / ROWS, THREADS, 0, launch_stream(k))(rs, logits, N, E);
        LAUNCH(run_sums_kernel, dim3(S, (E + 63) / 64), 64, 0, launch_stream(k))(
            stats, logits, idx, rs, seq, E, r->K, r->score == MTK_MOE_SIGMOID);
    }
    LAUNCH(z_sum_kernel, 1, THREADS, 0, launch_stream(k))(stats + 2 * (size_t)E * S, rs, N);
    check(k, "moe_route_stats");
}

// A warp per row: the sums each part needs (warp reductions), then every expert's dense terms (the
// softmax over all E of the pre-softmax weights, the aux-loss scores, the z loss) written by its lane,
// then the chosen experts' terms added by the lane of each choice.
__global__ void route_bwd_kernel(float *dlogits, const float *dprobs, const float *aux, int seq, float zcoef,
                                 const float *logits, const int32_t *idx, int N, int E, int K, int sigmoid, int pre,
                                 float scale)
{
    const int lane = threadIdx.x & 31;
    const long long n = (long long)blockIdx.x * ROWS + (threadIdx.x >> 5);
    if (n >= N) return;
    const float *x = logits + n * E, *g = dprobs ? dprobs + n * K : NULL, *a = aux ? aux + (n / seq) * E : NULL;
    const int32_t *id = idx + n * K;
    float *d = dlogits + n * E;
    // the softmax over all E (its max, sum and logsumexp), where a part needs it
    const bool sm = (g && !sigmoid && pre) || (a && !sigmoid) || zcoef != 0.0f;
    float m = -INFINITY, se = 1.0f, lse = 0.0f;
    if (sm) {
        for (int e = lane; e < E; e += 32) m = fmaxf(m, x[e]);
        m = warp_max(m);
        float t = 0.0f;
        for (int e = lane; e < E; e += 32) t += expf(x[e] - m);
        se = warp_sum(t);
        lse = m + logf(se);
    }
    // the weights' sums over the K choices: dot = sum g scale weight (and the softmax over the K, or the
    // sigmoids' sum)
    float dot = 0.0f, den = 1.0f, mk = 0.0f, sk = 1.0f;
    if (g) {
        float t = 0.0f, u = 0.0f;
        if (sigmoid) {
            for (int j = lane; j < K; j += 32) {
                const float s = sigm(x[id[j]]);
                t += s, u += g[j] * scale * s;
            }
            den = warp_sum(t) + 1e-20f;
        } else if (pre) {
            for (int j = lane; j < K; j += 32) u += expf(x[id[j]] - m) / se * (g[j] * scale);
        } else {
            mk = -INFINITY;
            for (int j = lane; j < K; j += 32) mk = fmaxf(mk, x[id[j]]);
            mk = warp_max(mk);
            for (int j = lane; j < K; j += 32) t += expf(x[id[j]] - mk);
            sk = warp_sum(t);
            for (int j = lane; j < K; j += 32) u += expf(x[id[j]] - mk) / sk * (g[j] * scale);
        }
        dot = warp_sum(u);
    }
    // the aux scores' sums: dot with aux (and the sigmoids' sum)
    float adot = 0.0f, aden = 1.0f;
    if (a) {
        float t = 0.0f, u = 0.0f;
        for (int e = lane; e < E; e += 32) {
            const float s = sigmoid ? sigm(x[e]) : expf(x[e] - m) / se;
            t += s, u += a[e] * s;
        }
        aden = warp_sum(t) + 1e-20f;
        adot = warp_sum(u);
    }
    for (int e = lane; e < E; e += 32) {
        const float s = sm ? expf(x[e] - m) / se : 0.0f;
        float v = 0.0f;
        if (g && !sigmoid && pre) v -= s * dot;
        if (a) {
            if (sigmoid) {
                const float q = sigm(x[e]);
                v += (a[e] / aden - adot / (aden * aden)) * q * (1.0f - q);
            } else
                v += s * (a[e] - adot);
        }
        if (zcoef != 0.0f) v += zcoef * 2.0f * lse * s;
        d[e] = v;
    }
    if (!g) return;
    __syncwarp();   // the dense terms before the chosen experts' are added (another lane's d[e])
    for (int j = lane; j < K; j += 32) {
        const int e = id[j];
        const float gj = g[j] * scale;
        float v;
        if (sigmoid) {
            const float s = sigm(x[e]), ds = K > 1 ? gj / den - dot / (den * den) : gj;
            v = ds * s * (1.0f - s);
        } else if (pre)
            v = expf(x[e] - m) / se * gj;
        else {
            const float p = expf(x[e] - mk) / sk;
            v = p * (gj - dot);
        }
        d[e] += v;
    }
}

void moe_route_bwd(mtk *k, float *dlogits, const float *dprobs, const float *aux, int seq, float zcoef,
                   const float *logits, const int32_t *idx, int N, const mtk_moe_route *r)
{
    if (N <= 0) return;
    LAUNCH(route_bwd_kernel, (N + ROWS - 1) / ROWS, THREADS, 0, launch_stream(k))(
        dlogits, dprobs, aux, aux ? seq : 1, zcoef, logits, idx, N, r->E, r->K, r->score == MTK_MOE_SIGMOID,
        r->pre_softmax, r->scaling != 0.0f ? r->scaling : 1.0f);
    check(k, "moe_route_bwd");
}

}  // namespace MTK_CU_NS
