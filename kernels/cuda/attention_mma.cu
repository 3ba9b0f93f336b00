// attention_mma.cu: the causal flash attention of attention.cu on tensor cores, for bf16 and fp16 at head
// sizes 32 and 64, in the manner of FlashAttention-2: the products Q K^T, P V, dO V^T, P^T dO, dS^T Q and
// dS K are mma.m16n8k16 (mma.h), and the softmax, its gradient and the accumulators stay in registers in
// the products' own layout; only the tiles of the other side go through shared memory.
//
// A block is 4 warps over a tile of 64 rows, 16 rows per warp: lane 4 g + t owns rows g and g + 8 of its
// warp's 16, and columns 2t, 2t+1 of every 8-column piece. Keys and values are the B operands, stored
// row-major where the product contracts over the head dimension and transposed where it contracts over
// rows. As in attention.cu, dq and dk/dv come from two kernels and nothing is summed with atomics: the
// same bits on every run (with grouped-query attention the dk/dv kernel runs per group of query heads and
// takes them in order, as attention.cu's does). P and dS are rounded to the activation dtype for their products (as flash
// attention does); the running max, the sums, lse and the accumulators are fp32.
#include "cuda.h"
#include "attention.h"
#include "mma.h"
#include <algorithm>

namespace MTK_CU_NS {

enum { MB = 64, MW = 4, MT = MW * 32 };   // tile rows, warps per block, threads per block

// Shared-memory strides (elements): +8 keeps rows on different banks and 16-byte aligned.
template <int D> struct Ld {
    static constexpr int R = D + 8;    // a row-major 64 x D tile
    static constexpr int C = MB + 8;   // a transposed D x 64 tile
};

// Rows t0 .. t0+63 of (b, h) into s (row-major, stride Ld<D>::R), zeros past tmax; 16-byte copies.
template <class T, int D>
__device__ void load_rows(T *s, Rows<T> src, int b, int h, int t0, int tmax)
{
    constexpr int V = Pack<T>::N, per = D / V;
    for (int idx = threadIdx.x; idx < MB * per; idx += MT) {
        const int r = idx / per, c = (idx % per) * V;
        Pack<T> v;
        if (t0 + r < tmax) v = *(const Pack<T> *)(src.row(b, h, t0 + r) + c);
        else
#pragma unroll
            for (int e = 0; e < V; e++) v.v[e] = stf<T>(0.0f);
        *(Pack<T> *)(s + r * Ld<D>::R + c) = v;
    }
}
// The same rows transposed: s[d * Ld<D>::C + r].
template <class T, int D>
__device__ void load_cols(T *s, Rows<T> src, int b, int h, int t0, int tmax)
{
    constexpr int V = Pack<T>::N, per = D / V;
    for (int idx = threadIdx.x; idx < MB * per; idx += MT) {
        const int r = idx % MB, c = idx / MB * V;   // consecutive threads: consecutive rows
        Pack<T> v;
        if (t0 + r < tmax) v = *(const Pack<T> *)(src.row(b, h, t0 + r) + c);
        else
#pragma unroll
            for (int e = 0; e < V; e++) v.v[e] = stf<T>(0.0f);
#pragma unroll
        for (int e = 0; e < V; e++) s[(c + e) * Ld<D>::C + r] = v.v[e];
    }
}
// A operands of a warp's 16 rows (from row r0 of a row-major tile), k = 0 .. D-1 in 16-column steps.
template <class T, int D> __device__ void a_frags(uint32_t a[D / 16][4], const T *s, int r0, int g, int t)
{
#pragma unroll
    for (int kk = 0; kk < D / 16; kk++) {
        const T *p = s + (r0 + g) * Ld<D>::R + kk * 16 + 2 * t;
        a[kk][0] = ld2(p), a[kk][1] = ld2(p + 8 * Ld<D>::R), a[kk][2] = ld2(p + 8), a[kk][3] = ld2(p + 8 * Ld<D>::R + 8);
    }
}
// The A operand for columns 16 kc .. 16 kc + 15 of a 16 x 64 product held as C fragments c[8][4].
template <class T> __device__ __forceinline__ void c_to_a(uint32_t a[4], const float c[][4], int kc)
{
    a[0] = pack2<T>(c[2 * kc][0], c[2 * kc][1]), a[1] = pack2<T>(c[2 * kc][2], c[2 * kc][3]);
    a[2] = pack2<T>(c[2 * kc + 1][0], c[2 * kc + 1][1]), a[3] = pack2<T>(c[2 * kc + 1][2], c[2 * kc + 1][3]);
}
// acc[n] += A[16 x D] B for the 8 columns n of a B stored with its columns as rows of s (stride ld):
// B[k][n] = s[(n0 + n) * ld + k]. The product over the head dimension (Q K^T, dO V^T, K Q^T, V dO^T).
template <class T, int D>
__device__ __forceinline__ void mma_rows(float acc[4], const uint32_t a[D / 16][4], const T *s, int ld, int n0, int g, int t)
{
#pragma unroll
    for (int kk = 0; kk < D / 16; kk++) {
        const T *p = s + (n0 + g) * ld + kk * 16 + 2 * t;
        const uint32_t bb[2] = {ld2(p), ld2(p + 8)};
        mma16816<T>(acc, a[kk], bb);
    }
}
// The backward's two score products over half hh of a 64-column tile, 8 columns at a time:
// s[nt] = A1 B1, dp[nt] = A2 B2 with B1, B2 row-major tiles whose rows are the columns.
template <class T, int D, int NT>
__device__ __forceinline__ void score_pair(float s[NT][4], float dp[NT][4], const uint32_t a1[D / 16][4], const T *b1,
                                           const uint32_t a2[D / 16][4], const T *b2, int hh, int g, int t)
{
#pragma unroll
    for (int nt = 0; nt < NT; nt++) {
        mma_rows<T, D>(s[nt], a1, b1, Ld<D>::R, (hh * NT + nt) * 8, g, t);
        mma_rows<T, D>(dp[nt], a2, b2, Ld<D>::R, (hh * NT + nt) * 8, g, t);
    }
}
// Writes rows (g, g+8) of a warp's 16 x D accumulator (columns 2t, 2t+1 of each 8), times mul[0], mul[1].
template <class T, int D>
__device__ void store_acc(T *row0, T *row8, const float acc[D / 8][4], const float mul[2], int t)
{
#pragma unroll
    for (int nd = 0; nd < D / 8; nd++) {
        const int c = nd * 8 + 2 * t;
        if (row0) *(uint32_t *)(row0 + c) = pack2<T>(acc[nd][0] * mul[0], acc[nd][1] * mul[0]);
        if (row8) *(uint32_t *)(row8 + c) = pack2<T>(acc[nd][2] * mul[1], acc[nd][3] * mul[1]);
    }
}

// ---- forward: query i (0 <= i < nq) attends keys 0 .. pos0 + i ----
template <class T, int D>
__global__ void __launch_bounds__(MT, 4) attn_fwd_mma_kernel(T *out, size_t o_sb, size_t o_sh, size_t o_st, float *lse,
                                                        Rows<T> q, Rows<T> kr, Rows<T> vr, int nq, int nk, int pos0,
                                                        int NH, float sc, Drop dr)
{
    typedef Ld<D> L;
    DYN_SHARED(float, sm);
    const int w = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int b = blockIdx.z, h = blockIdx.y, i0 = (gridDim.x - 1 - blockIdx.x) * MB;   // longest first
    const int ir[2] = {i0 + w * 16 + g, i0 + w * 16 + g + 8};
    T *Ks = (T *)sm, *Vt = Ks + MB * L::R;   // the query tile is read into registers through Ks's space
    load_rows<T, D>(Ks, q, b, h, i0, nq);
    __syncthreads();
    uint32_t qa[D / 16][4];
    a_frags<T, D>(qa, Ks, w * 16, g, t);
    float o[D / 8][4] = {}, m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
    const int last = pos0 + (i0 + MB < nq ? i0 + MB : nq) - 1;   // the last key any row of the block needs
    const int wi = i0 + w * 16 + 15 < nq - 1 ? i0 + w * 16 + 15 : nq - 1;
    const int wlast = pos0 + wi;                                  // ... and this warp's rows
    for (int j0 = 0; j0 <= last; j0 += MB) {
        __syncthreads();   // the previous tiles (the first time: the query tile) are no longer read
        load_rows<T, D>(Ks, kr, b, h, j0, nk);
        load_cols<T, D>(Vt, vr, b, h, j0, nk);
        __syncthreads();
        if (j0 > wlast) continue;   // warp-uniform: the whole tile is in this warp's future
        float s[MB / 8][4] = {};
#pragma unroll
        for (int nt = 0; nt < MB / 8; nt++) mma_rows<T, D>(s[nt], qa, Ks, L::R, nt * 8, g, t);
#pragma unroll
        for (int rr = 0; rr < 2; rr++) {   // online softmax of rows g, g + 8: the quad holds a row
            const int i = ir[rr];
            float mx = -INFINITY;
#pragma unroll
            for (int nt = 0; nt < MB / 8; nt++)
#pragma unroll
                for (int e = 0; e < 2; e++) {
                    const int j = j0 + nt * 8 + 2 * t + e;
                    const float v = i < nq && j <= pos0 + i && j < nk ? s[nt][2 * rr + e] * sc : -INFINITY;
                    s[nt][2 * rr + e] = v;
                    mx = fmaxf(mx, v);
                }
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
            const float mn = fmaxf(m[rr], mx), alpha = mn == -INFINITY ? 1.0f : __expf(m[rr] - mn);
            float ps = 0.0f;
#pragma unroll
            for (int nt = 0; nt < MB / 8; nt++)
#pragma unroll
                for (int e = 0; e < 2; e++) {
                    const float p = mn == -INFINITY ? 0.0f : __expf(s[nt][2 * rr + e] - mn);
                    ps += p;
                    s[nt][2 * rr + e] = p == 0.0f ? 0.0f : p * dr.factor(b, h, NH, nq, i, j0 + nt * 8 + 2 * t + e);
                }
            ps += __shfl_xor_sync(0xffffffffu, ps, 1);
            ps += __shfl_xor_sync(0xffffffffu, ps, 2);
            l[rr] = l[rr] * alpha + ps;
            m[rr] = mn;
#pragma unroll
            for (int nd = 0; nd < D / 8; nd++) o[nd][2 * rr] *= alpha, o[nd][2 * rr + 1] *= alpha;
        }
#pragma unroll
        for (int kc = 0; kc < MB / 16; kc++) {   // O += P V
            uint32_t pa[4];
            c_to_a<T>(pa, s, kc);
#pragma unroll
            for (int nd = 0; nd < D / 8; nd++) {
                const T *p = Vt + (nd * 8 + g) * L::C + kc * 16 + 2 * t;
                const uint32_t bb[2] = {ld2(p), ld2(p + 8)};
                mma16816<T>(o[nd], pa, bb);
            }
        }
    }
    const float inv[2] = {l[0] > 0.0f ? 1.0f / l[0] : 0.0f, l[1] > 0.0f ? 1.0f / l[1] : 0.0f};
    T *r0 = ir[0] < nq ? out + b * o_sb + h * o_sh + (size_t)ir[0] * o_st : NULL;
    T *r8 = ir[1] < nq ? out + b * o_sb + h * o_sh + (size_t)ir[1] * o_st : NULL;
    store_acc<T, D>(r0, r8, o, inv, t);
    if (lse && t == 0)
#pragma unroll
        for (int rr = 0; rr < 2; rr++)
            if (ir[rr] < nq) lse[((size_t)b * NH + h) * nq + ir[rr]] = m[rr] + logf(l[rr]);
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
#pragma unroll
    for (int rr = threadIdx.x; rr < MB; rr += MT) {
        const size_t i = ((size_t)b * NH + h) * T_ + t0 + rr;
        Ds[rr] = t0 + rr < T_ ? delta[i] : 0.0f;
        Ls[rr] = t0 + rr < T_ ? lse[i] : 0.0f;
    }
}

// ---- backward, dk and dv: a block per 64 keys (16 per warp) of a group; for each query head of the
// group in turn, query tiles i0 >= j0 stream through ----
// With the keys as rows: S^T = K Q^T, dP^T = V dO^T, dv += (P f)^T dO, dk += dS^T Q.
template <class T, int D>
__global__ void __launch_bounds__(MT, 3) attn_dkv_mma_kernel(T *dqkv, const T *qkv, const T *dout, const float *delta,
                                                        const float *lse, int T_, int NH, int NG, float sc, Drop dr)
{
    typedef Ld<D> L;
    DYN_SHARED(float, sm);
    const int w = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int rep = NH / NG, h0 = blockIdx.y * rep, b = blockIdx.z, j0 = blockIdx.x * MB;
    const int jr[2] = {j0 + w * 16 + g, j0 + w * 16 + g + 8};
    Rows<T> q = qkv_rows(qkv, 0, T_, NH, NG, D), kr = qkv_rows(qkv, 1, T_, NH, NG, D),
            vr = qkv_rows(qkv, 2, T_, NH, NG, D), go = head_rows(dout, T_, NH, D);
    T *Qs = (T *)sm, *Gs = Qs + MB * L::R, *Qt = Gs + MB * L::R, *Gt = Qt + D * L::C;
    float *Ls = (float *)(Gt + D * L::C), *Ds = Ls + MB;
    load_rows<T, D>(Qs, kr, b, h0, j0, T_);   // the key and value tiles, into registers through Qs, Gs
    load_rows<T, D>(Gs, vr, b, h0, j0, T_);
    __syncthreads();
    uint32_t ka[D / 16][4], va[D / 16][4];
    a_frags<T, D>(ka, Qs, w * 16, g, t);
    a_frags<T, D>(va, Gs, w * 16, g, t);
    float dk[D / 8][4] = {}, dv[D / 8][4] = {};
    const bool idle = j0 + w * 16 >= T_;   // warp-uniform: no key of this warp exists
    for (int h = h0; h < h0 + rep; h++) {
        for (int i0 = j0; i0 < T_; i0 += MB) {
            __syncthreads();   // (the first time: every warp has its key and value fragments)
            load_rows<T, D>(Qs, q, b, h, i0, T_);
            load_rows<T, D>(Gs, go, b, h, i0, T_);
            load_cols<T, D>(Qt, q, b, h, i0, T_);
            load_cols<T, D>(Gt, go, b, h, i0, T_);
            load_dl(Ds, Ls, delta, lse, b, h, NH, i0, T_);
            __syncthreads();
            if (idle) continue;
            // two halves of 32 queries, to hold fewer registers
#pragma unroll 1
            for (int hq = 0; hq < 2; hq++) {
                constexpr int NT = MB / 16;   // 8-query pieces per half
                float s[NT][4] = {}, dp[NT][4] = {};
                score_pair<T, D, NT>(s, dp, ka, Qs, va, Gs, hq, g, t);   // S^T, dP^T
#pragma unroll
                for (int rr = 0; rr < 2; rr++)
#pragma unroll
                    for (int nt = 0; nt < NT; nt++)
#pragma unroll
                        for (int e = 0; e < 2; e++) {
                            const int c = (hq * NT + nt) * 8 + 2 * t + e, i = i0 + c, j = jr[rr], x = 2 * rr + e;
                            float pf = 0.0f, ds = 0.0f;
                            if (j < T_ && i < T_ && i >= j) {
                                const float p = __expf(s[nt][x] * sc - Ls[c]), f = dr.factor(b, h, NH, T_, i, j);
                                ds = p * (dp[nt][x] * f - Ds[c]) * sc;
                                pf = p * f;
                            }
                            s[nt][x] = pf, dp[nt][x] = ds;
                        }
#pragma unroll
                for (int kc = 0; kc < NT / 2; kc++) {   // dv += (P f)^T dO, dk += dS^T Q: B from the transposed tiles
                    uint32_t pa[4], sa[4];
                    c_to_a<T>(pa, s, kc);
                    c_to_a<T>(sa, dp, kc);
#pragma unroll
                    for (int nd = 0; nd < D / 8; nd++) {
                        const int off = (nd * 8 + g) * L::C + (hq * NT / 2 + kc) * 16 + 2 * t;
                        const uint32_t gb[2] = {ld2(Gt + off), ld2(Gt + off + 8)}, qb[2] = {ld2(Qt + off), ld2(Qt + off + 8)};
                        mma16816<T>(dv[nd], pa, gb);
                        mma16816<T>(dk[nd], sa, qb);
                    }
                }
            }
        }
    }
    if (idle) return;
    const float one[2] = {1.0f, 1.0f};
    const Rows<T> dkr = qkv_rows((const T *)dqkv, 1, T_, NH, NG, D);
    T *k0 = jr[0] < T_ ? (T *)dkr.row(b, h0, jr[0]) : NULL;
    T *k8 = jr[1] < T_ ? (T *)dkr.row(b, h0, jr[1]) : NULL;
    store_acc<T, D>(k0, k8, dk, one, t);
    store_acc<T, D>(k0 ? k0 + D : NULL, k8 ? k8 + D : NULL, dv, one, t);
}

// ---- backward, dq: a block per 64 queries (16 per warp); key tiles j0 <= i stream through ----
// S = Q K^T, dP = dO V^T, dq += dS K.
template <class T, int D>
__global__ void __launch_bounds__(MT, 4) attn_dq_mma_kernel(T *dqkv, const T *qkv, const T *dout, const float *delta,
                                                       const float *lse, int T_, int NH, int NG, float sc, Drop dr)
{
    typedef Ld<D> L;
    DYN_SHARED(float, sm);
    const int w = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int b = blockIdx.z, h = blockIdx.y, i0 = (gridDim.x - 1 - blockIdx.x) * MB;   // longest first
    const int ir[2] = {i0 + w * 16 + g, i0 + w * 16 + g + 8};
    Rows<T> q = qkv_rows(qkv, 0, T_, NH, NG, D), kr = qkv_rows(qkv, 1, T_, NH, NG, D),
            vr = qkv_rows(qkv, 2, T_, NH, NG, D), go = head_rows(dout, T_, NH, D);
    T *Ks = (T *)sm, *Vs = Ks + MB * L::R, *Kt = Vs + MB * L::R;
    float *Ls = (float *)(Kt + D * L::C), *Ds = Ls + MB;
    load_rows<T, D>(Ks, q, b, h, i0, T_);   // the query and dout tiles, into registers through Ks, Vs
    load_rows<T, D>(Vs, go, b, h, i0, T_);
    load_dl(Ds, Ls, delta, lse, b, h, NH, i0, T_);
    __syncthreads();
    uint32_t qa[D / 16][4], ga[D / 16][4];
    a_frags<T, D>(qa, Ks, w * 16, g, t);
    a_frags<T, D>(ga, Vs, w * 16, g, t);
    const float Li[2] = {Ls[w * 16 + g], Ls[w * 16 + g + 8]}, Di[2] = {Ds[w * 16 + g], Ds[w * 16 + g + 8]};
    float dq[D / 8][4] = {};
    const int last = (i0 + MB < T_ ? i0 + MB : T_) - 1;
    const int wlast = i0 + w * 16 + 15 < T_ - 1 ? i0 + w * 16 + 15 : T_ - 1;
    for (int j0 = 0; j0 <= last; j0 += MB) {
        __syncthreads();
        load_rows<T, D>(Ks, kr, b, h, j0, T_);
        load_rows<T, D>(Vs, vr, b, h, j0, T_);
        load_cols<T, D>(Kt, kr, b, h, j0, T_);
        __syncthreads();
        if (j0 > wlast) continue;
#pragma unroll 1
        for (int hk = 0; hk < 2; hk++) {   // two halves of 32 keys, to hold fewer registers
            constexpr int NT = MB / 16;
            float s[NT][4] = {}, dp[NT][4] = {};
            score_pair<T, D, NT>(s, dp, qa, Ks, ga, Vs, hk, g, t);   // S, dP
#pragma unroll
            for (int rr = 0; rr < 2; rr++)
#pragma unroll
                for (int nt = 0; nt < NT; nt++)
#pragma unroll
                    for (int e = 0; e < 2; e++) {
                        const int i = ir[rr], j = j0 + (hk * NT + nt) * 8 + 2 * t + e, x = 2 * rr + e;
                        float ds = 0.0f;
                        if (i < T_ && j <= i) {
                            const float p = __expf(s[nt][x] * sc - Li[rr]), f = dr.factor(b, h, NH, T_, i, j);
                            ds = p * (dp[nt][x] * f - Di[rr]) * sc;
                        }
                        s[nt][x] = ds;
                    }
#pragma unroll
            for (int kc = 0; kc < NT / 2; kc++) {   // dq += dS K
                uint32_t sa[4];
                c_to_a<T>(sa, s, kc);
#pragma unroll
                for (int nd = 0; nd < D / 8; nd++) {
                    const T *p = Kt + (nd * 8 + g) * L::C + (hk * NT / 2 + kc) * 16 + 2 * t;
                    const uint32_t kb[2] = {ld2(p), ld2(p + 8)};
                    mma16816<T>(dq[nd], sa, kb);
                }
            }
        }
    }
    const float one[2] = {1.0f, 1.0f};
    const Rows<T> dqr = qkv_rows((const T *)dqkv, 0, T_, NH, NG, D);
    T *q0 = ir[0] < T_ ? (T *)dqr.row(b, h, ir[0]) : NULL;
    T *q8 = ir[1] < T_ ? (T *)dqr.row(b, h, ir[1]) : NULL;
    store_acc<T, D>(q0, q8, dq, one, t);
}

// ---- host side ----
template <int D> static size_t fwd_smem() { return (size_t)(MB * Ld<D>::R + D * Ld<D>::C) * 2; }
template <int D> static size_t dkv_smem() { return (size_t)(2 * MB * Ld<D>::R + 2 * D * Ld<D>::C) * 2 + 2 * MB * 4; }
template <int D> static size_t dq_smem() { return (size_t)(2 * MB * Ld<D>::R + D * Ld<D>::C) * 2 + 2 * MB * 4; }
template <class T, int D>
static void fwd_mma(mtk *k, T *out, size_t o_sb, size_t o_sh, size_t o_st, float *lse, Rows<T> q, Rows<T> kr, Rows<T> vr,
                    int B, int nq, int nk, int pos0, int NH, Drop dr)
{
    const size_t smem = fwd_smem<D>();
    cudaFuncSetAttribute((const void *)attn_fwd_mma_kernel<T, D>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    dim3 grid((nq + MB - 1) / MB, NH, B);
    LAUNCH((attn_fwd_mma_kernel<T, D>), grid, MT, smem, launch_stream(k))(out, o_sb, o_sh, o_st, lse, q, kr, vr, nq, nk, pos0,
                                                                    NH, 1.0f / sqrtf((float)D), dr);
}

template <class T, int D>
static void bwd_mma(mtk *k, T *dqkv, const T *dout, const T *qkv, const T *out, const float *lse, int B, int T_, int NH,
                    int NG, Drop dr)
{
    const size_t s1 = dkv_smem<D>(), s2 = dq_smem<D>(), rows = (size_t)B * T_ * NH;
    const float sc = 1.0f / sqrtf((float)D);
    float *delta = (float *)mtk_ws_take(k, rows * sizeof(float));
    if (!delta) return;
    LAUNCH((attn_delta_kernel<T, D>), blocks_for(rows * (D / Pack<T>::N), THREADS, 1u << 30), THREADS, 0, launch_stream(k))(
        delta, dout, out, T_, NH, rows);
    cudaFuncSetAttribute((const void *)attn_dkv_mma_kernel<T, D>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)s1);
    cudaFuncSetAttribute((const void *)attn_dq_mma_kernel<T, D>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)s2);
    dim3 gkv((T_ + MB - 1) / MB, NG, B), gq((T_ + MB - 1) / MB, NH, B);
    LAUNCH((attn_dkv_mma_kernel<T, D>), gkv, MT, s1, launch_stream(k))(dqkv, qkv, dout, delta, lse, T_, NH, NG, sc, dr);
    LAUNCH((attn_dq_mma_kernel<T, D>), gq, MT, s2, launch_stream(k))(dqkv, qkv, dout, delta, lse, T_, NH, NG, sc, dr);
}

// The tensor-core path takes 16-bit types, head sizes 32 and 64, 16-byte aligned rows, and at least
// 16 query rows (a decoding step of one token stays on attention.cu's kernels).
static bool mma_shape(int HS, int nq) { return (HS == 32 || HS == 64) && nq >= 16; }

template <class T>
bool attention_fwd_mma(mtk *k, T *out, size_t o_sb, size_t o_sh, size_t o_st, float *lse, Rows<T> q, Rows<T> kr,
                       Rows<T> vr, int B, int nq, int nk, int pos0, int NH, int HS, Drop dr)
{
    if constexpr (sizeof(T) != 2) return false;
    else {
        if (!mma_shape(HS, nq) || !aligned16(out) || !aligned16(q.p) || !aligned16(kr.p) || !aligned16(vr.p)) return false;
        if (((q.st | kr.st | vr.st | o_st) * sizeof(T)) % 16) return false;
        if (HS == 64) fwd_mma<T, 64>(k, out, o_sb, o_sh, o_st, lse, q, kr, vr, B, nq, nk, pos0, NH, dr);
        else fwd_mma<T, 32>(k, out, o_sb, o_sh, o_st, lse, q, kr, vr, B, nq, nk, pos0, NH, dr);
        return true;
    }
}

template <class T>
bool attention_bwd_mma(mtk *k, T *dqkv, const T *dout, const T *qkv, const T *out, const float *lse, int B, int T_,
                       int NH, int NG, int HS, Drop dr)
{
    if constexpr (sizeof(T) != 2) return false;
    else {
        if (!mma_shape(HS, T_) || !aligned16(dqkv) || !aligned16(dout) || !aligned16(qkv) || !aligned16(out)) return false;
        if (HS == 64) bwd_mma<T, 64>(k, dqkv, dout, qkv, out, lse, B, T_, NH, NG, dr);
        else bwd_mma<T, 32>(k, dqkv, dout, qkv, out, lse, B, T_, NH, NG, dr);
        return true;
    }
}

#define MTK_ATT_MMA(T)                                                                                                \
    template bool attention_fwd_mma<T>(mtk *, T *, size_t, size_t, size_t, float *, Rows<T>, Rows<T>, Rows<T>, int,   \
                                       int, int, int, int, int, Drop);                                                \
    template bool attention_bwd_mma<T>(mtk *, T *, const T *, const T *, const T *, const float *, int, int, int, int, \
                                       int, Drop);
MTK_ATT_MMA(float)
MTK_ATT_MMA(bf16)
MTK_ATT_MMA(f16)

}  // namespace MTK_CU_NS
