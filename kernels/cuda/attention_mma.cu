// attention_mma.cu: the causal flash attention of attention.cu on tensor cores, for bf16 and fp16 and
// head sizes 32, 64 and 128: the products Q K^T, P V, dO V^T, P^T dO, dS^T Q and dS K go through the
// warp matrix functions (nvcuda::wmma: 16 x 16 x 16 tiles, fp32 accumulation; kernels/sim/simt_sim.h
// has its own for the simulator), the softmax and its gradient stay in fp32 in shared memory.
//
// A block is 4 warps over a tile of 64 rows, 16 rows per warp; each warp works on its own rows with
// only __syncwarp between its steps, and __syncthreads only around the shared tiles of the other side.
// The lane pair (2r, 2r+1) owns row r of its warp's 16 in the scalar steps, half the columns each.
// As in attention.cu, dq and dk/dv come from two kernels and nothing is summed with atomics: the same
// bits on every run. P and dS are rounded to the activation dtype before their products (as flash
// attention does); the running max, the sums, lse and the accumulators are fp32.
#include "cuda.h"
#include "attention.h"
#include <algorithm>
#ifndef SIMT_SIM
#include <mma.h>
#endif

namespace MTK_CU_NS {
namespace wm = nvcuda::wmma;

enum { MB = 64, MW = 4, MT = MW * 32 };   // tile rows, warps per block, threads per block
typedef wm::fragment<wm::accumulator, 16, 16, 16, float> Acc;
template <class T> using FragA = wm::fragment<wm::matrix_a, 16, 16, 16, T, wm::row_major>;
template <class T> using FragBr = wm::fragment<wm::matrix_b, 16, 16, 16, T, wm::row_major>;
template <class T> using FragBc = wm::fragment<wm::matrix_b, 16, 16, 16, T, wm::col_major>;

// Shared-memory strides (elements): +8 (+4 for fp32) keeps rows on different banks and 16-byte aligned.
template <int D> struct Ld {
    static constexpr int T = D + 8;                        // a 64 x D tile of T
    static constexpr int P = MB + 8;                       // a warp's 16 x 64 tile of T (P, dS)
    static constexpr int F = (MB > D ? MB : D) + 4;        // a warp's 16 x max(64, D) fp32 scratch
};

// Rows t0 .. t0+63 of (b, h) into s (stride Ld<D>::T), zeros past tmax; 16-byte copies, all threads.
template <class T, int D>
__device__ void load_rows(T *s, Rows<T> src, int b, int h, int t0, int tmax)
{
    constexpr int V = Pack<T>::N, per = D / V;
    for (int idx = threadIdx.x; idx < MB * per; idx += MT) {
        const int r = idx / per, c = (idx % per) * V;
        Pack<T> v;
        if (t0 + r < tmax) v = *(const Pack<T> *)(src.row(b, h, t0 + r) + c);
        else
            for (int e = 0; e < V; e++) v.v[e] = stf<T>(0.0f);
        *(Pack<T> *)(s + r * Ld<D>::T + c) = v;
    }
}

// Writes row `row` of a warp's fp32 scratch (stride Ld<D>::F), the lane's half of the D columns.
template <class T, int D>
__device__ void store_half_row(T *dst, const float *scr, int row, int half, float mul)
{
    for (int d = half * (D / 2); d < (half + 1) * (D / 2); d++) dst[d] = stf<T>(scr[row * Ld<D>::F + d] * mul);
}

// ---- forward: query i (0 <= i < nq) attends keys 0 .. pos0 + i ----
template <class T, int D>
__global__ void __launch_bounds__(MT) attn_fwd_mma_kernel(T *out, size_t o_sb, size_t o_sh, size_t o_st, float *lse,
                                                        Rows<T> q, Rows<T> kr, Rows<T> vr, int nq, int nk, int pos0,
                                                        int NH, float sc, Drop dr)
{
    typedef Ld<D> L;
    DYN_SHARED(float, sm);
    const int w = threadIdx.x >> 5, lane = threadIdx.x & 31, r = lane >> 1, half = lane & 1;
    const int b = blockIdx.z, h = blockIdx.y, i0 = (gridDim.x - 1 - blockIdx.x) * MB, i = i0 + w * 16 + r;   // longest first
    T *Qs = (T *)sm, *Ks = Qs + MB * L::T, *Vs = Ks + MB * L::T, *Ps = Vs + MB * L::T + w * 16 * L::P;
    float *Ss = (float *)(Vs + MB * L::T + MW * 16 * L::P) + w * 2 * 16 * L::F, *Os = Ss + 16 * L::F;
    load_rows<T, D>(Qs, q, b, h, i0, nq);
    for (int d = half * (D / 2); d < (half + 1) * (D / 2); d++) Os[r * L::F + d] = 0.0f;
    __syncthreads();
    FragA<T> qa[D / 16];
    for (int kk = 0; kk < D / 16; kk++) wm::load_matrix_sync(qa[kk], Qs + w * 16 * L::T + kk * 16, L::T);
    const int last = pos0 + (i0 + MB < nq ? i0 + MB : nq) - 1;   // the last key any row of the block needs
    const int wi = i0 + w * 16 + 15 < nq - 1 ? i0 + w * 16 + 15 : nq - 1;
    const int wlast = pos0 + wi;                                  // ... and this warp's rows
    float m = -INFINITY, l = 0.0f;
    for (int j0 = 0; j0 <= last; j0 += MB) {
        __syncthreads();   // the previous tiles are no longer read
        load_rows<T, D>(Ks, kr, b, h, j0, nk);
        load_rows<T, D>(Vs, vr, b, h, j0, nk);
        __syncthreads();
        if (j0 > wlast) continue;   // warp-uniform: the whole tile is in this warp's future
        for (int n = 0; n < MB / 16; n++) {   // S = Q K^T, 16 keys at a time
            Acc s;
            wm::fill_fragment(s, 0.0f);
            for (int kk = 0; kk < D / 16; kk++) {
                FragBc<T> kb;
                wm::load_matrix_sync(kb, Ks + n * 16 * L::T + kk * 16, L::T);
                wm::mma_sync(s, qa[kk], kb, s);
            }
            wm::store_matrix_sync(Ss + n * 16, s, L::F, wm::mem_row_major);
        }
        __syncwarp();
        // online softmax over the lane's 32 keys of row r; both lanes of the pair end with the row's m, l
        float sv[32], mx = -INFINITY;
        const int c0 = half * 32;
        for (int c = 0; c < 32; c++) {
            const int j = j0 + c0 + c;
            const float s = i < nq && j <= pos0 + i && j < nk ? Ss[r * L::F + c0 + c] * sc : -INFINITY;
            sv[c] = s;
            mx = fmaxf(mx, s);
        }
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        const float mn = fmaxf(m, mx), alpha = mn == -INFINITY ? 1.0f : __expf(m - mn);
        float ps = 0.0f;
        for (int c = 0; c < 32; c++) {
            const float p = mn == -INFINITY ? 0.0f : __expf(sv[c] - mn);
            ps += p;
            const float pd = p == 0.0f ? 0.0f : p * dr.factor(b, h, NH, nq, i, j0 + c0 + c);
            Ps[r * L::P + c0 + c] = stf<T>(pd);
        }
        ps += __shfl_xor_sync(0xffffffffu, ps, 1);
        l = l * alpha + ps;
        m = mn;
        for (int d = half * (D / 2); d < (half + 1) * (D / 2); d++) Os[r * L::F + d] *= alpha;
        __syncwarp();
        FragA<T> pa[MB / 16];   // O += P V
        for (int kk = 0; kk < MB / 16; kk++) wm::load_matrix_sync(pa[kk], Ps + kk * 16, L::P);
        for (int n = 0; n < D / 16; n++) {
            Acc o;
            wm::load_matrix_sync(o, Os + n * 16, L::F, wm::mem_row_major);
            for (int kk = 0; kk < MB / 16; kk++) {
                FragBr<T> vb;
                wm::load_matrix_sync(vb, Vs + kk * 16 * L::T + n * 16, L::T);
                wm::mma_sync(o, pa[kk], vb, o);
            }
            wm::store_matrix_sync(Os + n * 16, o, L::F, wm::mem_row_major);
        }
        __syncwarp();
    }
    if (i >= nq) return;
    store_half_row<T, D>(out + b * o_sb + h * o_sh + (size_t)i * o_st, Os, r, half, 1.0f / l);
    if (lse && half == 0) lse[((size_t)b * NH + h) * nq + i] = m + logf(l);
}

// delta_i = dout_i . out_i for every row (b, h, i), once per backward: D / V lanes per row, 16-byte loads.
template <class T, int D>
__global__ void attn_delta_kernel(float *delta, const T *dout, const T *out, int T_, int NH, size_t rows)
{
    constexpr int V = Pack<T>::N, G = D / V;   // G lanes per row (a power of two, at most 32)
    const size_t row = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) / G;   // (b, t, h) order, as dout
    const int g = threadIdx.x % G;
    float s = 0.0f;
    if (row < rows) {
        const Pack<T> a = ((const Pack<T> *)(dout + row * D))[g], o = ((const Pack<T> *)(out + row * D))[g];
#pragma unroll
        for (int e = 0; e < V; e++) s += ldf(a.v[e]) * ldf(o.v[e]);
    }
#pragma unroll
    for (int x = G / 2; x > 0; x >>= 1) s += __shfl_xor_sync(0xffffffffu, s, x);
    if (row < rows && g == 0) {
        const int h = (int)(row % NH), t = (int)(row / NH % T_), b = (int)(row / NH / T_);
        delta[((size_t)b * NH + h) * T_ + t] = s;
    }
}

// delta and lse of rows t0 .. t0+63 of (b, h) into Ds, Ls (0 past T_).
__device__ inline void load_dl(float *Ds, float *Ls, const float *delta, const float *lse, int b, int h, int NH, int t0,
                               int T_)
{
    for (int rr = threadIdx.x; rr < MB; rr += MT) {
        const size_t i = ((size_t)b * NH + h) * T_ + t0 + rr;
        Ds[rr] = t0 + rr < T_ ? delta[i] : 0.0f;
        Ls[rr] = t0 + rr < T_ ? lse[i] : 0.0f;
    }
}

// ---- backward, dk and dv: a block per 64 keys (16 per warp); query tiles i0 >= j0 stream through ----
// With the keys as rows: S^T = K Q^T, dP^T = V dO^T, dv += (P f)^T dO, dk += dS^T Q.
template <class T, int D>
__global__ void __launch_bounds__(MT) attn_dkv_mma_kernel(T *dqkv, const T *qkv, const T *dout, const float *delta,
                                                        const float *lse, int T_, int NH, float sc, Drop dr)
{
    typedef Ld<D> L;
    DYN_SHARED(float, sm);
    const int w = threadIdx.x >> 5, lane = threadIdx.x & 31, r = lane >> 1, half = lane & 1;
    const int b = blockIdx.z, h = blockIdx.y, j0 = blockIdx.x * MB, j = j0 + w * 16 + r;
    const size_t C = (size_t)NH * D, S3 = 3 * C;
    Rows<T> q{qkv, T_ * S3, 3 * (size_t)D, S3}, kr{qkv + D, T_ * S3, 3 * (size_t)D, S3},
        vr{qkv + 2 * D, T_ * S3, 3 * (size_t)D, S3}, go{dout, T_ * C, (size_t)D, C};
    // Qs, Gs, the warps' P and dS, Ls, Ds; then the key and value tiles, which are read only into the
    // fragments at the start, share their space with the warps' fp32 scratch.
    T *Qs = (T *)sm, *Gs = Qs + MB * L::T, *Ps = Gs + MB * L::T + w * 2 * 16 * L::P, *dSs = Ps + 16 * L::P;
    float *Ls = (float *)(Gs + MB * L::T + MW * 2 * 16 * L::P), *Ds = Ls + MB, *R = Ds + MB;
    T *Ks = (T *)R, *Vs = Ks + MB * L::T;
    float *Ss = R + w * 2 * 16 * L::F, *dPs = Ss + 16 * L::F;
    load_rows<T, D>(Ks, kr, b, h, j0, T_);
    load_rows<T, D>(Vs, vr, b, h, j0, T_);
    __syncthreads();
    FragA<T> ka[D / 16], va[D / 16];
    Acc dk[D / 16], dv[D / 16];
    for (int kk = 0; kk < D / 16; kk++) {
        wm::load_matrix_sync(ka[kk], Ks + w * 16 * L::T + kk * 16, L::T);
        wm::load_matrix_sync(va[kk], Vs + w * 16 * L::T + kk * 16, L::T);
        wm::fill_fragment(dk[kk], 0.0f);
        wm::fill_fragment(dv[kk], 0.0f);
    }
    const bool idle = j0 + w * 16 >= T_;   // warp-uniform: no key of this warp exists
    for (int i0 = j0; i0 < T_; i0 += MB) {
        __syncthreads();   // (the first time: every warp has its key and value fragments)
        load_rows<T, D>(Qs, q, b, h, i0, T_);
        load_rows<T, D>(Gs, go, b, h, i0, T_);
        load_dl(Ds, Ls, delta, lse, b, h, NH, i0, T_);
        __syncthreads();
        if (idle) continue;
        for (int n = 0; n < MB / 16; n++) {   // 16 queries at a time
            Acc s, dp;
            wm::fill_fragment(s, 0.0f);
            wm::fill_fragment(dp, 0.0f);
            for (int kk = 0; kk < D / 16; kk++) {
                FragBc<T> qb, gb;
                wm::load_matrix_sync(qb, Qs + n * 16 * L::T + kk * 16, L::T);
                wm::load_matrix_sync(gb, Gs + n * 16 * L::T + kk * 16, L::T);
                wm::mma_sync(s, ka[kk], qb, s);
                wm::mma_sync(dp, va[kk], gb, dp);
            }
            wm::store_matrix_sync(Ss + n * 16, s, L::F, wm::mem_row_major);
            wm::store_matrix_sync(dPs + n * 16, dp, L::F, wm::mem_row_major);
        }
        __syncwarp();
        for (int c = half * 32; c < half * 32 + 32; c++) {
            const int i = i0 + c;
            float pf = 0.0f, ds = 0.0f;
            if (j < T_ && i < T_ && i >= j) {
                const float p = __expf(Ss[r * L::F + c] * sc - Ls[c]), f = dr.factor(b, h, NH, T_, i, j);
                ds = p * (dPs[r * L::F + c] * f - Ds[c]) * sc;
                pf = p * f;
            }
            Ps[r * L::P + c] = stf<T>(pf);
            dSs[r * L::P + c] = stf<T>(ds);
        }
        __syncwarp();
        FragA<T> pa[MB / 16], sa[MB / 16];
        for (int kk = 0; kk < MB / 16; kk++) {
            wm::load_matrix_sync(pa[kk], Ps + kk * 16, L::P);
            wm::load_matrix_sync(sa[kk], dSs + kk * 16, L::P);
        }
        for (int n = 0; n < D / 16; n++)
            for (int kk = 0; kk < MB / 16; kk++) {
                FragBr<T> gb, qb;
                wm::load_matrix_sync(gb, Gs + kk * 16 * L::T + n * 16, L::T);
                wm::load_matrix_sync(qb, Qs + kk * 16 * L::T + n * 16, L::T);
                wm::mma_sync(dv[n], pa[kk], gb, dv[n]);
                wm::mma_sync(dk[n], sa[kk], qb, dk[n]);
            }
        __syncwarp();   // Ps and dSs are rewritten by the next tile
    }
    if (idle) return;
    for (int n = 0; n < D / 16; n++) wm::store_matrix_sync(Ss + n * 16, dk[n], L::F, wm::mem_row_major);
    __syncwarp();
    T *dkr = dqkv + b * T_ * S3 + (size_t)j * S3 + (size_t)h * 3 * D + D;
    if (j < T_) store_half_row<T, D>(dkr, Ss, r, half, 1.0f);
    __syncwarp();
    for (int n = 0; n < D / 16; n++) wm::store_matrix_sync(Ss + n * 16, dv[n], L::F, wm::mem_row_major);
    __syncwarp();
    if (j < T_) store_half_row<T, D>(dkr + D, Ss, r, half, 1.0f);
}

// ---- backward, dq: a block per 64 queries (16 per warp); key tiles j0 <= i stream through ----
// S = Q K^T, dP = dO V^T, dq += dS K.
template <class T, int D>
__global__ void __launch_bounds__(MT) attn_dq_mma_kernel(T *dqkv, const T *qkv, const T *dout, const float *delta,
                                                       const float *lse, int T_, int NH, float sc, Drop dr)
{
    typedef Ld<D> L;
    DYN_SHARED(float, sm);
    const int w = threadIdx.x >> 5, lane = threadIdx.x & 31, r = lane >> 1, half = lane & 1;
    const int b = blockIdx.z, h = blockIdx.y, i0 = (gridDim.x - 1 - blockIdx.x) * MB, i = i0 + w * 16 + r;   // longest first
    const size_t C = (size_t)NH * D, S3 = 3 * C;
    Rows<T> q{qkv, T_ * S3, 3 * (size_t)D, S3}, kr{qkv + D, T_ * S3, 3 * (size_t)D, S3},
        vr{qkv + 2 * D, T_ * S3, 3 * (size_t)D, S3}, go{dout, T_ * C, (size_t)D, C};
    // Ks, Vs, the warps' dS, Ls, Ds; then the query and dout tiles, read only into the fragments at the
    // start, share their space with the warps' fp32 scratch.
    T *Ks = (T *)sm, *Vs = Ks + MB * L::T, *dSs = Vs + MB * L::T + w * 16 * L::P;
    float *Ls = (float *)(Vs + MB * L::T + MW * 16 * L::P), *Ds = Ls + MB, *R = Ds + MB;
    T *Qs = (T *)R, *Gs = Qs + MB * L::T;
    float *Ss = R + w * 2 * 16 * L::F, *dPs = Ss + 16 * L::F;
    load_rows<T, D>(Qs, q, b, h, i0, T_);
    load_rows<T, D>(Gs, go, b, h, i0, T_);
    load_dl(Ds, Ls, delta, lse, b, h, NH, i0, T_);
    __syncthreads();
    FragA<T> qa[D / 16], ga[D / 16];
    Acc dq[D / 16];
    for (int kk = 0; kk < D / 16; kk++) {
        wm::load_matrix_sync(qa[kk], Qs + w * 16 * L::T + kk * 16, L::T);
        wm::load_matrix_sync(ga[kk], Gs + w * 16 * L::T + kk * 16, L::T);
        wm::fill_fragment(dq[kk], 0.0f);
    }
    const float Li = Ls[w * 16 + r], Di = Ds[w * 16 + r];
    const int last = (i0 + MB < T_ ? i0 + MB : T_) - 1;
    const int wlast = i0 + w * 16 + 15 < T_ - 1 ? i0 + w * 16 + 15 : T_ - 1;
    for (int j0 = 0; j0 <= last; j0 += MB) {
        __syncthreads();
        load_rows<T, D>(Ks, kr, b, h, j0, T_);
        load_rows<T, D>(Vs, vr, b, h, j0, T_);
        __syncthreads();
        if (j0 > wlast) continue;
        for (int n = 0; n < MB / 16; n++) {   // 16 keys at a time
            Acc s, dp;
            wm::fill_fragment(s, 0.0f);
            wm::fill_fragment(dp, 0.0f);
            for (int kk = 0; kk < D / 16; kk++) {
                FragBc<T> kb, vb;
                wm::load_matrix_sync(kb, Ks + n * 16 * L::T + kk * 16, L::T);
                wm::load_matrix_sync(vb, Vs + n * 16 * L::T + kk * 16, L::T);
                wm::mma_sync(s, qa[kk], kb, s);
                wm::mma_sync(dp, ga[kk], vb, dp);
            }
            wm::store_matrix_sync(Ss + n * 16, s, L::F, wm::mem_row_major);
            wm::store_matrix_sync(dPs + n * 16, dp, L::F, wm::mem_row_major);
        }
        __syncwarp();
        for (int c = half * 32; c < half * 32 + 32; c++) {
            const int jj = j0 + c;
            float ds = 0.0f;
            if (i < T_ && jj <= i) {
                const float p = __expf(Ss[r * L::F + c] * sc - Li), f = dr.factor(b, h, NH, T_, i, jj);
                ds = p * (dPs[r * L::F + c] * f - Di) * sc;
            }
            dSs[r * L::P + c] = stf<T>(ds);
        }
        __syncwarp();
        FragA<T> sa[MB / 16];
        for (int kk = 0; kk < MB / 16; kk++) wm::load_matrix_sync(sa[kk], dSs + kk * 16, L::P);
        for (int n = 0; n < D / 16; n++)
            for (int kk = 0; kk < MB / 16; kk++) {
                FragBr<T> kb;
                wm::load_matrix_sync(kb, Ks + kk * 16 * L::T + n * 16, L::T);
                wm::mma_sync(dq[n], sa[kk], kb, dq[n]);
            }
        __syncwarp();
    }
    for (int n = 0; n < D / 16; n++) wm::store_matrix_sync(Ss + n * 16, dq[n], L::F, wm::mem_row_major);
    __syncwarp();
    if (i < T_) store_half_row<T, D>(dqkv + b * T_ * S3 + (size_t)i * S3 + (size_t)h * 3 * D, Ss, r, half, 1.0f);
}

// ---- host side ----
template <int D> static size_t fwd_smem() { return (3 * MB * Ld<D>::T + MW * 16 * Ld<D>::P) * 2 + MW * 2 * 16 * Ld<D>::F * 4; }
template <int D> static size_t scratch() { return (size_t)MW * 2 * 16 * Ld<D>::F * 4; }
template <int D> static size_t two_tiles() { return (size_t)2 * MB * Ld<D>::T * 2; }
template <int D> static size_t dkv_smem()
{
    return two_tiles<D>() + (size_t)MW * 2 * 16 * Ld<D>::P * 2 + 2 * MB * 4 + std::max(two_tiles<D>(), scratch<D>());
}
template <int D> static size_t dq_smem()
{
    return two_tiles<D>() + (size_t)MW * 16 * Ld<D>::P * 2 + 2 * MB * 4 + std::max(two_tiles<D>(), scratch<D>());
}

template <class T, int D>
static void fwd_mma(mtk *k, T *out, size_t o_sb, size_t o_sh, size_t o_st, float *lse, Rows<T> q, Rows<T> kr, Rows<T> vr,
                    int B, int nq, int nk, int pos0, int NH, Drop dr)
{
    const size_t smem = fwd_smem<D>();
    cudaFuncSetAttribute((const void *)attn_fwd_mma_kernel<T, D>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    dim3 grid((nq + MB - 1) / MB, NH, B);
    LAUNCH((attn_fwd_mma_kernel<T, D>), grid, MT, smem, stream(k))(out, o_sb, o_sh, o_st, lse, q, kr, vr, nq, nk, pos0,
                                                                    NH, 1.0f / sqrtf((float)D), dr);
}

template <class T, int D>
static void bwd_mma(mtk *k, T *dqkv, const T *dout, const T *qkv, const T *out, const float *lse, int B, int T_, int NH,
                    Drop dr)
{
    const size_t s1 = dkv_smem<D>(), s2 = dq_smem<D>(), rows = (size_t)B * T_ * NH;
    const float sc = 1.0f / sqrtf((float)D);
    float *delta = (float *)mtk_ws_take(k, rows * sizeof(float));
    if (!delta) return;
    LAUNCH((attn_delta_kernel<T, D>), blocks_for(rows * (D / Pack<T>::N), THREADS, 1u << 30), THREADS, 0, stream(k))(
        delta, dout, out, T_, NH, rows);
    cudaFuncSetAttribute((const void *)attn_dkv_mma_kernel<T, D>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)s1);
    cudaFuncSetAttribute((const void *)attn_dq_mma_kernel<T, D>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)s2);
    dim3 grid((T_ + MB - 1) / MB, NH, B);
    LAUNCH((attn_dkv_mma_kernel<T, D>), grid, MT, s1, stream(k))(dqkv, qkv, dout, delta, lse, T_, NH, sc, dr);
    LAUNCH((attn_dq_mma_kernel<T, D>), grid, MT, s2, stream(k))(dqkv, qkv, dout, delta, lse, T_, NH, sc, dr);
}

// The tensor-core path takes 16-bit types, head sizes 32, 64 and 128, 16-byte aligned rows, and at least
// 16 query rows (a decoding step of one token stays on attention.cu's kernels).
static bool mma_shape(int HS, int nq) { return (HS == 32 || HS == 64 || HS == 128) && nq >= 16; }

template <class T>
bool attention_fwd_mma(mtk *k, T *out, size_t o_sb, size_t o_sh, size_t o_st, float *lse, Rows<T> q, Rows<T> kr,
                       Rows<T> vr, int B, int nq, int nk, int pos0, int NH, int HS, Drop dr)
{
    if constexpr (sizeof(T) != 2) return false;
    else {
        if (!mma_shape(HS, nq) || !aligned16(out) || !aligned16(q.p) || !aligned16(kr.p) || !aligned16(vr.p)) return false;
        if (((q.st | kr.st | vr.st | o_st) * sizeof(T)) % 16) return false;
        if (HS == 64) fwd_mma<T, 64>(k, out, o_sb, o_sh, o_st, lse, q, kr, vr, B, nq, nk, pos0, NH, dr);
        else if (HS == 32) fwd_mma<T, 32>(k, out, o_sb, o_sh, o_st, lse, q, kr, vr, B, nq, nk, pos0, NH, dr);
        else fwd_mma<T, 128>(k, out, o_sb, o_sh, o_st, lse, q, kr, vr, B, nq, nk, pos0, NH, dr);
        return true;
    }
}

template <class T>
bool attention_bwd_mma(mtk *k, T *dqkv, const T *dout, const T *qkv, const T *out, const float *lse, int B, int T_,
                       int NH, int HS, Drop dr)
{
    if constexpr (sizeof(T) != 2) return false;
    else {
        if (!mma_shape(HS, T_) || !aligned16(dqkv) || !aligned16(dout) || !aligned16(qkv) || !aligned16(out)) return false;
        if (HS == 64) bwd_mma<T, 64>(k, dqkv, dout, qkv, out, lse, B, T_, NH, dr);
        else if (HS == 32) bwd_mma<T, 32>(k, dqkv, dout, qkv, out, lse, B, T_, NH, dr);
        else bwd_mma<T, 128>(k, dqkv, dout, qkv, out, lse, B, T_, NH, dr);
        return true;
    }
}

#define MTK_ATT_MMA(T)                                                                                                \
    template bool attention_fwd_mma<T>(mtk *, T *, size_t, size_t, size_t, float *, Rows<T>, Rows<T>, Rows<T>, int,   \
                                       int, int, int, int, int, Drop);                                                \
    template bool attention_bwd_mma<T>(mtk *, T *, const T *, const T *, const T *, const float *, int, int, int, int, \
                                       Drop);
MTK_ATT_MMA(float)
MTK_ATT_MMA(bf16)
MTK_ATT_MMA(f16)

}  // namespace MTK_CU_NS
