// attention_block.cu: attention by blocks, for context parallelism (kernels.h's mtk_attention_kv_pack,
// _block_fwd, _merge, _block_bwd, _dqkv_pack): a rank's queries, at their positions in the sequence,
// against one block of keys and values at theirs.
//
// The rows of both sides are in increasing positions, so the keys query i sees (position <= its own) are
// the first vis(i) rows of the block, vis growing with i. The kernels are attention.cu's on the CUDA cores
// with that prefix in place of the causal bound. Forward: a thread per query row of a 64-row tile, 32-key
// tiles of K and V streaming through shared memory with an online softmax; out (fp32) is normalized over
// the block and lse is its log-sum-exp (-inf and out 0 for a row that sees no key). Backward: a dk/dv
// kernel (a thread per key row, the group's query heads in order, query tiles streaming) adding to dkv,
// and a dq kernel (a thread per query row, key tiles streaming) adding to dq, P = exp(S - lse) with the
// lse over all the blocks: every gradient element has one writer, no atomics. The merge: a warp per (row,
// head). Dropout counters run over the whole sequence: ((b NH + h) Tg + pos(i)) Tg + pos(j) + offset.
#include "cuda.h"
#include "attention.h"

namespace MTK_CU_NS {

// The positions of n rows (mtk_att_rows), passed to the kernels by value.
struct Pos {
    mtk_att_rows r;
    int n;
    __device__ int of(int i) const { return r.start[i / r.run] + i % r.run; }
    // The rows at positions < p (a prefix, the positions increasing).
    __device__ int before(int p) const
    {
        int c = 0;
        for (int u = 0; u < n / r.run; u++) {
            const int s = r.start[u];
            if (p <= s) break;
            c += p - s < r.run ? p - s : r.run;
        }
        return c;
    }
};
static Pos pos_of(const mtk_att_rows *r, int n) { return Pos{*r, n}; }

// Part part (0: keys, 1: values) of kv [B][Tk][NG][2][HS], by query head (rep query heads per group).
template <class T> __host__ __device__ inline Rows<T> kv_rows(const T *kv, int part, int Tk, int NG, int rep, int HS)
{
    const size_t st = (size_t)NG * 2 * HS;
    return Rows<T>{kv + (size_t)part * HS, Tk * st, (size_t)2 * HS, st, rep, 0};
}

// Rows t0 .. t0+n-1 (zeros past tmax) of (b, h) into s[r * ld + d] as fp32; all threads help.
template <class T>
__device__ void stage_rows(float *s, int ld, Rows<T> src, int b, int h, int t0, int n, int tmax, int HS)
{
    for (int idx = threadIdx.x; idx < n * HS; idx += blockDim.x) {
        const int r = idx / HS, d = idx % HS;
        s[r * ld + d] = t0 + r < tmax ? ldf(src.row(b, h, t0 + r)[d]) : 0.0f;
    }
}

// Tiles as attention.cu's: tq query rows per forward block, tk rows both ways in the backward.
struct BlkTiles {
    int tq, tk;
};
static BlkTiles blk_tiles(int HS) { return HS <= 128 ? BlkTiles{64, 32} : BlkTiles{16, 16}; }

// ---- kv_pack and dqkv_pack: a thread per element ----
template <class T>
__global__ void kv_pack_kernel(T *kv, const T *qkv, int NH, int NG, int HS, size_t n)
{
    const int rep = NH / NG;
    for (size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x; idx < n; idx += (size_t)gridDim.x * blockDim.x) {
        const size_t row = idx / (2 * HS), bt = row / NG;   // row: (b, t, g)
        const int e = (int)(idx % (2 * HS)), g = (int)(row % NG);
        kv[idx] = qkv[(bt * (NH + 2 * NG) + (size_t)g * (rep + 2) + rep) * HS + e];
    }
}

template <class T>
__global__ void dqkv_pack_kernel(T *dqkv, const float *dq, const float *dkv, int NH, int NG, int HS, size_t n)
{
    const int rep = NH / NG, per = (rep + 2) * HS;   // a group's part of a row of dqkv
    const size_t W = (size_t)(NH + 2 * NG) * HS, C = (size_t)NH * HS;
    for (size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x; idx < n; idx += (size_t)gridDim.x * blockDim.x) {
        const size_t bt = idx / W;
        const int c = (int)(idx % W), g = c / per, e = c % per;
        const float v = e < rep * HS ? dq[bt * C + (size_t)g * rep * HS + e]
                                     : dkv[(bt * NG + g) * 2 * HS + (e - rep * HS)];
        dqkv[idx] = stf<T>(v);
    }
}

// ---- forward: a thread per query row ----
// D > 0: the head size, known at compile time (the query row and output accumulator in registers); D = 0:
// any head size HS, both in shared memory.
template <class T, int D>
__global__ void __launch_bounds__(64) blk_fwd_kernel(float *out, float *lse, Rows<T> q, Rows<T> kr, Rows<T> vr,
                                                     Pos qp, Pos kp, int Tg, int NH, int HS_, float sc, Drop dr,
                                                     int TK)
{
    DYN_SHARED(float, sm);
    const int HS = D > 0 ? D : HS_;
    const int TQ = blockDim.x, ld = HS + 1, b = blockIdx.z, h = blockIdx.y, i0 = blockIdx.x * TQ, r = threadIdx.x;
    const int i = i0 + r, Tq = qp.n;
    float *Qs = sm, *Os = Qs + TQ * ld, *Ks = Os + (D > 0 ? 0 : TQ * ld), *Vs = Ks + TK * ld;   // Os: D = 0 only
    float *qi = Qs + r * ld, *oi = Os + r * ld, rq[D > 0 ? D : 1], ro[D > 0 ? D : 1];
    stage_rows(Qs, ld, q, b, h, i0, TQ, Tq, HS);
    if constexpr (D > 0) {
        __syncthreads();
#pragma unroll
        for (int d = 0; d < D; d++) rq[d] = qi[d], ro[d] = 0.0f;
    } else {
        for (int d = 0; d < HS; d++) oi[d] = 0.0f;
    }
    const bool valid = i < Tq;
    const int pi = valid ? qp.of(i) : 0, vis = valid ? kp.before(pi + 1) : 0;
    const int nvis = kp.before(qp.of(i0 + TQ < Tq ? i0 + TQ - 1 : Tq - 1) + 1);   // the keys the tile's last row sees
    float m = -INFINITY, l = 0.0f;
    for (int j0 = 0; j0 < nvis; j0 += TK) {
        __syncthreads();   // the previous tile is no longer read
        stage_rows(Ks, ld, kr, b, h, j0, TK, kp.n, HS);
        stage_rows(Vs, ld, vr, b, h, j0, TK, kp.n, HS);
        __syncthreads();
        const int jend = vis < j0 + TK ? vis : j0 + TK;
        for (int j = j0; j < jend; j++) {
            const float *kj = Ks + (j - j0) * ld, *vj = Vs + (j - j0) * ld;
            float s = 0.0f;
            if constexpr (D > 0) {
#pragma unroll
                for (int d = 0; d < D; d++) s += rq[d] * kj[d];
            } else {
                for (int d = 0; d < HS; d++) s += qi[d] * kj[d];
            }
            s *= sc;
            if (s > m) {
                const float corr = expf(m - s);
                l *= corr;
                if constexpr (D > 0) {
#pragma unroll
                    for (int d = 0; d < D; d++) ro[d] *= corr;
                } else {
                    for (int d = 0; d < HS; d++) oi[d] *= corr;
                }
                m = s;
            }
            const float p = expf(s - m);
            l += p;
            const float pd = dr.p == 0.0f ? p : p * dr.factor(b, h, NH, Tg, pi, kp.of(j));
            if constexpr (D > 0) {
#pragma unroll
                for (int d = 0; d < D; d++) ro[d] += pd * vj[d];
            } else if (pd != 0.0f) {
                for (int d = 0; d < HS; d++) oi[d] += pd * vj[d];
            }
        }
    }
    if (!valid) return;
    float *o = out + ((size_t)b * Tq + i) * NH * HS + (size_t)h * HS;
    const float inv = l > 0.0f ? 1.0f / l : 0.0f;
    if constexpr (D > 0) {
#pragma unroll
        for (int d = 0; d < D; d++) o[d] = ro[d] * inv;
    } else {
        for (int d = 0; d < HS; d++) o[d] = oi[d] * inv;
    }
    lse[((size_t)b * NH + h) * Tq + i] = l > 0.0f ? m + logf(l) : -INFINITY;
}

template <class T, int D>
static void fwd_blk(mtk *k, float *out, float *lse, const T *qkv, const T *kv, int B, int Tg, Pos qp, Pos kp, int NH,
                    int NG, int HS, Drop dr)
{
    const BlkTiles t = blk_tiles(HS);
    const size_t smem = (size_t)((D > 0 ? 1 : 2) * t.tq + 2 * t.tk) * (HS + 1) * sizeof(float);
    cudaFuncSetAttribute((const void *)blk_fwd_kernel<T, D>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    const int rep = NH / NG;
    Rows<T> q = qkv_rows(qkv, 0, qp.n, NH, NG, HS), kr = kv_rows(kv, 0, kp.n, NG, rep, HS),
            vr = kv_rows(kv, 1, kp.n, NG, rep, HS);
    dim3 grid((qp.n + t.tq - 1) / t.tq, NH, B);
    LAUNCH((blk_fwd_kernel<T, D>), grid, t.tq, smem, launch_stream(k))(out, lse, q, kr, vr, qp, kp, Tg, NH, HS,
                                                                     1.0f / sqrtf((float)HS), dr, t.tk);
}

template <class T>
static void bfwd(mtk *k, float *out, float *lse, const void *qkv, const void *kv, int B, int Tg, Pos qp, Pos kp, int NH,
                 int NG, int HS, Drop dr)
{
    const T *x = (const T *)qkv, *y = (const T *)kv;
    if (HS == 64) fwd_blk<T, 64>(k, out, lse, x, y, B, Tg, qp, kp, NH, NG, HS, dr);
    else if (HS == 32) fwd_blk<T, 32>(k, out, lse, x, y, B, Tg, qp, kp, NH, NG, HS, dr);
    else if (HS == 16) fwd_blk<T, 16>(k, out, lse, x, y, B, Tg, qp, kp, NH, NG, HS, dr);
    else fwd_blk<T, 0>(k, out, lse, x, y, B, Tg, qp, kp, NH, NG, HS, dr);
}

// ---- merge: a warp per (sequence, row, head), lanes over the head's dimensions ----
__global__ void merge_kernel(float *out, float *lse, const float *out_b, const float *lse_b, int T_, int NH, int HS,
                             size_t rows)
{
    const int lane = threadIdx.x & 31;
    const size_t warps = (size_t)gridDim.x * (blockDim.x >> 5);
    for (size_t w = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5; w < rows; w += warps) {
        const size_t bt = w / NH, li = ((bt / T_) * NH + w % NH) * T_ + bt % T_;   // w = (b T + t) NH + h
        const float La = lse[li], Lb = lse_b[li], mx = La > Lb ? La : Lb;
        if (mx == -INFINITY) continue;   // the whole warp: no key seen on either side
        const float wa = expf(La - mx), wb = expf(Lb - mx), inv = 1.0f / (wa + wb);
        float *o = out + w * HS;
        const float *ob = out_b + w * HS;
        for (int d = lane; d < HS; d += 32) o[d] = (o[d] * wa + ob[d] * wb) * inv;
        __syncwarp();   // every lane has read lse[li]
        if (lane == 0) lse[li] = mx + logf(wa + wb);
    }
}

// ---- backward ----
// Per query row i: D_i = dout_i . out_i (the whole attention's); P_ij = exp(S_ij - lse_i); dP_ij = dout_i . v_j;
// dS_ij = P_ij (dP_ij f_ij - D_i) with f the dropout factor; dv_j += P_ij f_ij dout_i; dk_j += sc dS_ij q_i;
// dq_i += sc dS_ij k_j.

// dk, dv: a thread per key row j of the tile (of group blockIdx.y); for each query head of the group in turn,
// the query tiles from the first query that sees the tile's first key stream through shared memory.
template <class T, int D>
__global__ void blk_dkv_kernel(float *dkv, const T *qkv, const T *kv, const T *dout, const T *out, const float *lse,
                               Pos qp, Pos kp, int Tg, int NH, int NG, int HS_, float sc, Drop dr)
{
    DYN_SHARED(float, sm);
    const int HS = D > 0 ? D : HS_;
    float rk[D > 0 ? D : 1], rv[D > 0 ? D : 1];
    if constexpr (D > 0)
        for (int d = 0; d < D; d++) rk[d] = rv[d] = 0.0f;
    const int rep = NH / NG, g = blockIdx.y, h0 = g * rep, Tq = qp.n, Tk = kp.n;
    const int TK = blockDim.x, ld = HS + 1, b = blockIdx.z, j0 = blockIdx.x * TK, r = threadIdx.x, j = j0 + r;
    Rows<T> q = qkv_rows(qkv, 0, Tq, NH, NG, HS), kr = kv_rows(kv, 0, Tk, NG, rep, HS),
            vr = kv_rows(kv, 1, Tk, NG, rep, HS), go = head_rows(dout, Tq, NH, HS), oo = head_rows(out, Tq, NH, HS);
    float *Ks = sm, *Vs = Ks + TK * ld, *dK = Vs + TK * ld, *dV = dK + TK * ld, *Qs = dV + TK * ld, *Gs = Qs + TK * ld;
    float *Ls = Gs + TK * ld, *Ds = Ls + TK;
    stage_rows(Ks, ld, kr, b, h0, j0, TK, Tk, HS);
    stage_rows(Vs, ld, vr, b, h0, j0, TK, Tk, HS);
    for (int d = 0; d < HS; d++) dK[r * ld + d] = dV[r * ld + d] = 0.0f;
    const float *kj = Ks + r * ld, *vj = Vs + r * ld;
    float *dkj = dK + r * ld, *dvj = dV + r * ld;
    const bool valid = j < Tk;
    const int pj = valid ? kp.of(j) : 0, first = valid ? qp.before(pj) : Tq;   // the first query that sees key j
    const int start = qp.before(kp.of(j0));
    for (int h = h0; h < h0 + rep; h++) {
        for (int i0 = start; i0 < Tq; i0 += TK) {
            __syncthreads();
            stage_rows(Qs, ld, q, b, h, i0, TK, Tq, HS);
            stage_rows(Gs, ld, go, b, h, i0, TK, Tq, HS);
            if (i0 + r < Tq) {
                const T *o = oo.row(b, h, i0 + r), *gr = go.row(b, h, i0 + r);
                float Di = 0.0f;
                for (int d = 0; d < HS; d++) Di += ldf(gr[d]) * ldf(o[d]);
                Ds[r] = Di;
                Ls[r] = lse[((size_t)b * NH + h) * Tq + i0 + r];
            }
            __syncthreads();
            if (!valid) continue;
            const int iend = i0 + TK < Tq ? i0 + TK : Tq;
            for (int i = i0 > first ? i0 : first; i < iend; i++) {
                const float *qi = Qs + (i - i0) * ld, *gi = Gs + (i - i0) * ld;
                float s = 0.0f, dp = 0.0f;
                for (int d = 0; d < HS; d++) s += qi[d] * kj[d], dp += gi[d] * vj[d];
                const float p = expf(s * sc - Ls[i - i0]);
                const float f = dr.p == 0.0f ? 1.0f : dr.factor(b, h, NH, Tg, qp.of(i), pj);
                const float ds = p * (dp * f - Ds[i - i0]) * sc, pf = p * f;
                if constexpr (D > 0) {
#pragma unroll
                    for (int d = 0; d < D; d++) rv[d] += pf * gi[d], rk[d] += ds * qi[d];
                } else {
                    for (int d = 0; d < HS; d++) dvj[d] += pf * gi[d], dkj[d] += ds * qi[d];
                }
            }
        }
    }
    if (!valid) return;
    float *dk = dkv + (((size_t)b * Tk + j) * NG + g) * 2 * HS, *dv = dk + HS;
    if constexpr (D > 0) {
#pragma unroll
        for (int d = 0; d < D; d++) dk[d] += rk[d], dv[d] += rv[d];
    } else {
        for (int d = 0; d < HS; d++) dk[d] += dkj[d], dv[d] += dvj[d];
    }
}

// dq: a thread per query row i of head blockIdx.y; the key tiles it sees stream through shared memory.
template <class T, int D>
__global__ void blk_dq_kernel(float *dq, const T *qkv, const T *kv, const T *dout, const T *out, const float *lse,
                              Pos qp, Pos kp, int Tg, int NH, int NG, int HS_, float sc, Drop dr)
{
    DYN_SHARED(float, sm);
    const int HS = D > 0 ? D : HS_;
    float rq[D > 0 ? D : 1];
    if constexpr (D > 0)
        for (int d = 0; d < D; d++) rq[d] = 0.0f;
    const int rep = NH / NG, Tq = qp.n, Tk = kp.n;
    const int TK = blockDim.x, ld = HS + 1, b = blockIdx.z, h = blockIdx.y, i0 = blockIdx.x * TK, r = threadIdx.x;
    const int i = i0 + r;
    Rows<T> q = qkv_rows(qkv, 0, Tq, NH, NG, HS), kr = kv_rows(kv, 0, Tk, NG, rep, HS),
            vr = kv_rows(kv, 1, Tk, NG, rep, HS), go = head_rows(dout, Tq, NH, HS), oo = head_rows(out, Tq, NH, HS);
    float *Qs = sm, *Gs = Qs + TK * ld, *dQ = Gs + TK * ld, *Ks = dQ + TK * ld, *Vs = Ks + TK * ld;
    stage_rows(Qs, ld, q, b, h, i0, TK, Tq, HS);
    stage_rows(Gs, ld, go, b, h, i0, TK, Tq, HS);
    for (int d = 0; d < HS; d++) dQ[r * ld + d] = 0.0f;
    const bool valid = i < Tq;
    float Di = 0.0f, L = 0.0f;
    int pi = 0, vis = 0;
    if (valid) {
        const T *o = oo.row(b, h, i), *gr = go.row(b, h, i);
        for (int d = 0; d < HS; d++) Di += ldf(gr[d]) * ldf(o[d]);
        L = lse[((size_t)b * NH + h) * Tq + i];
        pi = qp.of(i), vis = kp.before(pi + 1);
    }
    const float *qi = Qs + r * ld, *gi = Gs + r * ld;
    float *dqi = dQ + r * ld;
    const int nvis = kp.before(qp.of(i0 + TK < Tq ? i0 + TK - 1 : Tq - 1) + 1);
    for (int j0 = 0; j0 < nvis; j0 += TK) {
        __syncthreads();
        stage_rows(Ks, ld, kr, b, h, j0, TK, Tk, HS);
        stage_rows(Vs, ld, vr, b, h, j0, TK, Tk, HS);
        __syncthreads();
        const int jend = vis < j0 + TK ? vis : j0 + TK;
        for (int j = j0; j < jend; j++) {
            const float *kj = Ks + (j - j0) * ld, *vj = Vs + (j - j0) * ld;
            float s = 0.0f, dp = 0.0f;
            for (int d = 0; d < HS; d++) s += qi[d] * kj[d], dp += gi[d] * vj[d];
            const float p = expf(s * sc - L);
            const float f = dr.p == 0.0f ? 1.0f : dr.factor(b, h, NH, Tg, pi, kp.of(j));
            const float ds = p * (dp * f - Di) * sc;
            if constexpr (D > 0) {
#pragma unroll
                for (int d = 0; d < D; d++) rq[d] += ds * kj[d];
            } else {
                for (int d = 0; d < HS; d++) dqi[d] += ds * kj[d];
            }
        }
    }
    if (!valid) return;
    float *o = dq + ((size_t)b * Tq + i) * NH * HS + (size_t)h * HS;
    if constexpr (D > 0) {
#pragma unroll
        for (int d = 0; d < D; d++) o[d] += rq[d];
    } else {
        for (int d = 0; d < HS; d++) o[d] += dqi[d];
    }
}

template <class T, int D>
static void bwd_blk(mtk *k, float *dq, float *dkv, const T *dout, const T *qkv, const T *kv, const T *out,
                    const float *lse, int B, int Tg, Pos qp, Pos kp, int NH, int NG, int HS, Drop dr)
{
    const int tk = blk_tiles(HS).tk;
    const size_t smem = ((size_t)6 * tk * (HS + 1) + 2 * tk) * sizeof(float);
    const float sc = 1.0f / sqrtf((float)HS);
    cudaFuncSetAttribute((const void *)blk_dkv_kernel<T, D>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    cudaFuncSetAttribute((const void *)blk_dq_kernel<T, D>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    dim3 gkv((kp.n + tk - 1) / tk, NG, B), gq((qp.n + tk - 1) / tk, NH, B);
    LAUNCH((blk_dkv_kernel<T, D>), gkv, tk, smem, launch_stream(k))(dkv, qkv, kv, dout, out, lse, qp, kp, Tg, NH, NG,
                                                                  HS, sc, dr);
    LAUNCH((blk_dq_kernel<T, D>), gq, tk, smem, launch_stream(k))(dq, qkv, kv, dout, out, lse, qp, kp, Tg, NH, NG, HS,
                                                                sc, dr);
}

template <class T>
static void bbwd(mtk *k, float *dq, float *dkv, const void *dout, const void *qkv, const void *kv, const void *out,
                 const float *lse, int B, int Tg, Pos qp, Pos kp, int NH, int NG, int HS, Drop dr)
{
    const T *g = (const T *)dout, *x = (const T *)qkv, *y = (const T *)kv, *o = (const T *)out;
    if (HS == 64) bwd_blk<T, 64>(k, dq, dkv, g, x, y, o, lse, B, Tg, qp, kp, NH, NG, HS, dr);
    else if (HS == 32) bwd_blk<T, 32>(k, dq, dkv, g, x, y, o, lse, B, Tg, qp, kp, NH, NG, HS, dr);
    else if (HS == 16) bwd_blk<T, 16>(k, dq, dkv, g, x, y, o, lse, B, Tg, qp, kp, NH, NG, HS, dr);
    else bwd_blk<T, 0>(k, dq, dkv, g, x, y, o, lse, B, Tg, qp, kp, NH, NG, HS, dr);
}

// ---- host entry points ----
template <class T> static void kvp(mtk *k, void *kv, const void *qkv, int NH, int NG, int HS, size_t n)
{
    LAUNCH(kv_pack_kernel<T>, blocks_for(n), THREADS, 0, launch_stream(k))((T *)kv, (const T *)qkv, NH, NG, HS, n);
}
void attention_kv_pack(mtk *k, void *kv, const void *qkv, int B, int T, int NH, int NG, int HS)
{
    const size_t n = (size_t)B * T * NG * 2 * HS;
    if (n == 0) return;
    MTK_CU_DISPATCH(k, kvp, k, kv, qkv, NH, NG, HS, n);
    check(k, "attention_kv_pack");
}

void attention_block_fwd(mtk *k, float *out, float *lse, const void *qkv, const void *kv, int B, int Tq, int Tk, int Tg,
                         const mtk_att_rows *qr, const mtk_att_rows *kr, int NH, int NG, int HS,
                         const mtk_dropout *drop)
{
    if (B <= 0 || Tq <= 0 || Tk <= 0) return;
    MTK_CU_DISPATCH(k, bfwd, k, out, lse, qkv, kv, B, Tg, pos_of(qr, Tq), pos_of(kr, Tk), NH, NG, HS, drop_of(drop));
    check(k, "attention_block_fwd");
}

void attention_merge(mtk *k, float *out, float *lse, const float *out_b, const float *lse_b, int B, int T, int NH,
                     int HS)
{
    const size_t rows = (size_t)B * T * NH;
    if (rows == 0) return;
    LAUNCH(merge_kernel, blocks_for(rows * 32), THREADS, 0, launch_stream(k))(out, lse, out_b, lse_b, T, NH, HS, rows);
    check(k, "attention_merge");
}

void attention_block_bwd(mtk *k, float *dq, float *dkv, const void *dout, const void *qkv, const void *kv,
                         const void *out, const float *lse, int B, int Tq, int Tk, int Tg, const mtk_att_rows *qr,
                         const mtk_att_rows *kr, int NH, int NG, int HS, const mtk_dropout *drop)
{
    if (B <= 0 || Tq <= 0 || Tk <= 0) return;
    MTK_CU_DISPATCH(k, bbwd, k, dq, dkv, dout, qkv, kv, out, lse, B, Tg, pos_of(qr, Tq), pos_of(kr, Tk), NH, NG, HS,
                    drop_of(drop));
    check(k, "attention_block_bwd");
}

template <class T>
static void dqkvp(mtk *k, void *dqkv, const float *dq, const float *dkv, int NH, int NG, int HS, size_t n)
{
    LAUNCH(dqkv_pack_kernel<T>, blocks_for(n), THREADS, 0, launch_stream(k))((T *)dqkv, dq, dkv, NH, NG, HS, n);
}
void attention_dqkv_pack(mtk *k, void *dqkv, const float *dq, const float *dkv, int B, int T, int NH, int NG, int HS)
{
    const size_t n = (size_t)B * T * (NH + 2 * NG) * HS;
    if (n == 0) return;
    MTK_CU_DISPATCH(k, dqkvp, k, dqkv, dq, dkv, NH, NG, HS, n);
    check(k, "attention_dqkv_pack");
}

}  // namespace MTK_CU_NS
