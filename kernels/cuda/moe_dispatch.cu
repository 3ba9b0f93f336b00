// moe_dispatch.cu: the grouping of the tokens' choices by expert (kernels.h's mtk_moe_dispatch) and the
// moves between token order and expert order (permute, unpermute and their backward).
//
// The grouping, in the order it is stable by construction, by group: an expert's choices in one shard of
// the positions (g = e shards + shard; one group per expert without shards). The choices of each group are
// counted (integer atomics: exact in any order); one thread lays out the groups (where each one's choices
// start in a list, its kept count, its first row) and the experts' rows; a block per group lists its
// choices in Megatron's token order [s, b] (position, then sequence; a shard is a run of that order) into
// row (the choice numbers, 256 at a time, placed by a ballot prefix count); a block per group picks the
// ones it keeps (with a capacity by probs: the capacity-th largest prob found by an 8-bit radix select
// over the expert's list, then the larger ones and the earliest tokens of those equal to it) and writes
// them, in token order, as the choice numbers of its rows in src, then its padding; row is then refilled
// from src. src is never written past its R rows, and nothing depends on the order threads run.
#include "cuda.h"

namespace MTK_CU_NS {

static const unsigned FULL = 0xffffffffu;
enum { DB = 256 };   // threads of the per-expert blocks

// Exclusive count of the threads before this one (in thread order) whose f is set; *total: the block's.
// buf: DB / 32 ints of shared memory. Every thread of the block must call it.
__device__ __forceinline__ int block_prefix(bool f, int *total, int *buf)
{
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    const unsigned b = __ballot_sync(FULL, f);
    if (lane == 0) buf[w] = __popc(b);
    __syncthreads();
    int before = 0, all = 0;
    for (int i = 0; i < DB / 32; i++) {
        before += i < w ? buf[i] : 0;
        all += buf[i];
    }
    __syncthreads();   // buf is reused by the next call
    *total = all;
    return before + __popc(b & ((1u << lane) - 1u));
}

// A prob as an unsigned key of the same order (-0 as +0, as they compare equal).
__device__ __forceinline__ unsigned prob_key(float p)
{
    const unsigned u = __float_as_uint(p == 0.0f ? 0.0f : p);
    return u & 0x80000000u ? ~u : u | 0x80000000u;
}

// cnt[g] of the G = E shards groups; a shard is run positions of the sequences of seq.
__global__ void count_kernel(int *cnt, const int32_t *idx, size_t n, int E, int K, int seq, int run, int shards)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        if (idx[i] >= 0 && idx[i] < E) atomicAdd(&cnt[idx[i] * shards + (int)(i / K % seq) / run], 1);
}

// plan: cnt[G], off[G] (the group's first entry of the list), base[G + 1] (its first row; base[G] = R);
// counts[e]: the rows of the expert's groups.
__global__ void layout_kernel(int32_t *counts, int *plan, int G, int shards, int cap, int pad)
{
    int *cnt = plan, *off = plan + G, *base = plan + 2 * G, o = 0, b = 0;
    for (int g = 0; g < G; g++) {
        const int kept = cap >= 0 && cnt[g] > cap ? cap : cnt[g], n = pad ? cap : kept;
        off[g] = o, base[g] = b;
        if (g % shards == 0) counts[g / shards] = 0;
        counts[g / shards] += n;
        o += cnt[g], b += n;
    }
    base[G] = b;
}

// Block g: its choices, in the token order [s, b] (place q: the token at position q / K / B of sequence
// q / K % B, its choice q % K), into list[off[g] ...): its expert's in its shard's places, span of them.
__global__ void list_kernel(int32_t *list, const int32_t *idx, const int *plan, int G, int shards, int span, int K,
                            int seq, int B)
{
    __shared__ int buf[DB / 32];
    const int g = blockIdx.x, e = g / shards, q1 = (g % shards + 1) * span;
    int32_t *out = list + plan[G + g];
    for (int q0 = g % shards * span, got = 0; q0 < q1; q0 += DB) {
        const int q = q0 + threadIdx.x, u = q / K;
        const int c = ((u % B) * seq + u / B) * K + q % K;
        const bool mine = q < q1 && idx[c] == e;
        int total;
        const int at = block_prefix(mine, &total, buf);
        if (mine) out[got + at] = c;
        got += total;
    }
}

// Block g: the choices it keeps, in list (token) order, into src[base[g] ...) as choice numbers, then its
// padding rows (-1) up to base[g + 1].
__global__ void keep_kernel(int32_t *src, const int32_t *list_all, const int *plan, const float *probs, int G, int cap,
                            int dpos)
{
    __shared__ int buf[DB / 32];
    __shared__ unsigned hist[256], sel[2];
    const int g = blockIdx.x, len = plan[g], base = plan[2 * G + g], end = plan[2 * G + g + 1];
    const int32_t *list = list_all + plan[G + g];
    const bool over = cap >= 0 && len > cap, byprob = over && !dpos;
    // by probs: keep key > thr, and of the keys equal to thr the first `ties`
    unsigned thr = 0, ties = 0;
    if (byprob) {
        unsigned prefix = 0, mask = 0, want = (unsigned)cap;   // the want-th largest of the keys under prefix
        for (int shift = 24; shift >= 0; shift -= 8) {
            for (int i = threadIdx.x; i < 256; i += DB) hist[i] = 0;
            __syncthreads();
            for (int i = threadIdx.x; i < len; i += DB) {
                const unsigned u = prob_key(probs[list[i]]);
                if ((u & mask) == prefix) atomicAdd(&hist[(u >> shift) & 255u], 1u);
            }
            __syncthreads();
            if (threadIdx.x == 0) {
                unsigned d = 255, w = want;
                while (hist[d] < w) w -= hist[d--];
                sel[0] = prefix | d << shift, sel[1] = w;
            }
            __syncthreads();
            prefix = sel[0], want = sel[1], mask |= 255u << shift;
            __syncthreads();   // sel and hist are rewritten in the next round
        }
        thr = prefix, ties = want;
    }
    int kept = 0, tied = 0;
    for (int i0 = 0; i0 < len; i0 += DB) {
        const int i = i0 + threadIdx.x;
        const bool in = i < len;
        const int c = in ? list[i] : -1;
        bool keep = in && (!over || (dpos && i < cap));
        if (byprob) {
            const unsigned u = in ? prob_key(probs[c]) : 0;
            const bool tie = in && u == thr;
            int total;
            const int at = block_prefix(tie, &total, buf);
            keep = in && (u > thr || (tie && (unsigned)(tied + at) < ties));
            tied += total;
        }
        int total;
        const int at = block_prefix(keep, &total, buf);
        if (keep) src[base + kept + at] = c;
        kept += total;
    }
    for (int r = base + kept + threadIdx.x; r < end; r += DB) src[r] = -1;
}

// row[src[r]] = r, src[r] = its token, for the R = base[G] rows.
__global__ void rows_kernel(int32_t *row, int32_t *src, const int *plan, int G, int K)
{
    const int R = plan[2 * G + G];
    for (int r = blockIdx.x * blockDim.x + threadIdx.x; r < R; r += gridDim.x * blockDim.x) {
        const int c = src[r];
        if (c >= 0) row[c] = r, src[r] = c / K;
    }
}

void moe_dispatch(mtk *k, int32_t *counts, int32_t *row, int32_t *src, const int32_t *idx, const float *probs, int N,
                  int K, int E, int capacity, int drop_position, int pad, int seq, int shards)
{
    const size_t NK = (size_t)N * K;
    const int G = E * shards, run = seq / shards;
    int *plan = (int *)mtk_ws_take(k, (3 * (size_t)G + 1) * sizeof(int));
    if (!plan) return;
    cudaMemsetAsync(plan, 0, (size_t)G * sizeof(int), stream(k));
    if (NK) LAUNCH(count_kernel, blocks_for(NK), THREADS, 0, launch_stream(k))(plan, idx, NK, E, K, seq, run, shards);
    LAUNCH(layout_kernel, 1, 1, 0, launch_stream(k))(counts, plan, G, shards, capacity, pad);
    LAUNCH(list_kernel, G, DB, 0, launch_stream(k))(row, idx, plan, G, shards, (int)(NK / shards), K, seq, N / seq);
    LAUNCH(keep_kernel, G, DB, 0, launch_stream(k))(src, row, plan, probs, G, capacity, drop_position);
    if (NK) cudaMemsetAsync(row, 0xff, NK * sizeof(int32_t), stream(k));   // -1: dropped
    const size_t Rmax = pad ? (size_t)G * capacity : NK;
    if (Rmax) LAUNCH(rows_kernel, blocks_for(Rmax), THREADS, 0, launch_stream(k))(row, src, plan, G, K);
    check(k, "moe_dispatch");
}

// ---- token order <-> expert order ----

// out row i = inp row src[i] (zeros for src[i] < 0), in units U of a row of `units` of them.
template <class U> __global__ void permute_kernel(U *out, const U *inp, const int32_t *src, size_t units, size_t n)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        const size_t r = i / units, u = i % units;
        const int s = src[r];
        out[i] = s >= 0 ? inp[(size_t)s * units + u] : U{};
    }
}

void moe_permute(mtk *k, void *out, const void *inp, const int32_t *src, int R, int C)
{
    const size_t bytes = (size_t)C * mtk_dtype_size(k->act), n16 = (size_t)R * (bytes / 16);
    if (!R || !C) return;
    if (bytes % 16 == 0 && aligned16(out) && aligned16(inp))
        LAUNCH(permute_kernel<uint4>, blocks_for(n16), THREADS, 0, launch_stream(k))(
            (uint4 *)out, (const uint4 *)inp, src, bytes / 16, n16);
    else if (k->act == MTK_F32)
        LAUNCH(permute_kernel<uint32_t>, blocks_for((size_t)R * C), THREADS, 0, launch_stream(k))(
            (uint32_t *)out, (const uint32_t *)inp, src, (size_t)C, (size_t)R * C);
    else
        LAUNCH(permute_kernel<uint16_t>, blocks_for((size_t)R * C), THREADS, 0, launch_stream(k))(
            (uint16_t *)out, (const uint16_t *)inp, src, (size_t)C, (size_t)R * C);
    check(k, "moe_permute");
}

// dinp[n][c] = the sum over k of dout[row[n][k]][c] (rows >= 0), or with probs of probs[n][k] times it
// (unpermute): a thread per element, fp32 sums in k order.
template <class T>
__global__ void gather_sum_kernel(T *out, const T *in, const int32_t *row, const float *probs, int K, int C, size_t n)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        const size_t t = i / C, c = i % C;
        float s = 0.0f;
        for (int j = 0; j < K; j++) {
            const int r = row[t * K + j];
            if (r >= 0) s += probs ? probs[t * K + j] * ldf(in[(size_t)r * C + c]) : ldf(in[(size_t)r * C + c]);
        }
        out[i] = stf<T>(s);
    }
}

template <class T>
static void gsum(mtk *k, void *out, const void *in, const int32_t *row, const float *probs, int N, int K, int C)
{
    const size_t n = (size_t)N * C;
    LAUNCH(gather_sum_kernel<T>, blocks_for(n), THREADS, 0, launch_stream(k))((T *)out, (const T *)in, row, probs, K, C, n);
}

void moe_permute_bwd(mtk *k, void *dinp, const void *dout, const int32_t *row, int N, int K, int C)
{
    if (!N || !C) return;
    MTK_CU_DISPATCH(k, gsum, k, dinp, dout, row, NULL, N, K, C);
    check(k, "moe_permute_bwd");
}

void moe_unpermute(mtk *k, void *out, const void *y, const int32_t *row, const float *probs, int N, int K, int C)
{
    if (!N || !C) return;
    MTK_CU_DISPATCH(k, gsum, k, out, y, row, probs, N, K, C);
    check(k, "moe_unpermute");
}

// A block per token: for each of its choices kept, dy's row = probs dout[n] and dprobs = dout[n] . y's row
// (a block sum); a dropped choice's dprobs is 0.
template <class T>
__global__ void unpermute_bwd_kernel(T *dy, float *dprobs, const T *dout, const T *y, const int32_t *row,
                                     const float *probs, int K, int C)
{
    __shared__ float buf[32];
    const size_t t = blockIdx.x;
    const T *g = dout + t * C;
    for (int j = 0; j < K; j++) {
        const int r = row[t * K + j];   // the same for the whole block
        if (r < 0) {
            if (threadIdx.x == 0) dprobs[t * K + j] = 0.0f;
            continue;
        }
        const float p = probs[t * K + j];
        float dot = 0.0f;
        for (int c = threadIdx.x; c < C; c += blockDim.x) {
            const float v = ldf(g[c]);
            dot += v * ldf(y[(size_t)r * C + c]);
            dy[(size_t)r * C + c] = stf<T>(p * v);
        }
        dot = block_sum(dot, buf);
        if (threadIdx.x == 0) dprobs[t * K + j] = dot;
    }
}

template <class T>
static void ubwd(mtk *k, void *dy, float *dprobs, const void *dout, const void *y, const int32_t *row,
                 const float *probs, int N, int K, int C)
{
    LAUNCH(unpermute_bwd_kernel<T>, N, THREADS, 0, launch_stream(k))(
        (T *)dy, dprobs, (const T *)dout, (const T *)y, row, probs, K, C);
}

void moe_unpermute_bwd(mtk *k, void *dy, float *dprobs, const void *dout, const void *y, const int32_t *row,
                       const float *probs, int N, int K, int C, int R)
{
    if (R && C) cudaMemsetAsync(dy, 0, (size_t)R * C * mtk_dtype_size(k->act), stream(k));   // rows no choice points at
    if (N) MTK_CU_DISPATCH(k, ubwd, k, dy, dprobs, dout, y, row, probs, N, K, C);
    check(k, "moe_unpermute_bwd");
}

}  // namespace MTK_CU_NS
