// attention.cu: causal flash attention of our own, forward and backward, and attention over a KV cache.
// bf16/fp16 at head sizes 32 and 64 go to the tensor-core kernels of attention_mma.cu; these are
// the kernels for fp32, other head sizes, and single-token decoding steps.
// No T x T matrix is ever stored: each block holds a tile of query rows (forward, dq) or key rows (dk,
// dv) in shared memory, one thread per row, and walks the tiles of the other side through shared memory
// with an online softmax (forward) or recomputing P = exp(S - lse) (backward). dq and dk/dv come from
// two kernels so that every gradient element is written once, by one thread, in a fixed order: no
// atomics, the same bits on every run. Attention dropout uses the counter of kernels.h,
// ((b NH + h) T + i) T + j + offset, on the probabilities after the softmax sum. With grouped-query
// attention (NG groups of rep = NH / NG query heads) a query head reads its group's keys and values (the
// Rows of attention.h), and the dk/dv kernel runs per group, summing over the group's query heads in
// order.
#include "cuda.h"
#include "attention.h"

namespace MTK_CU_NS {

// Tiles: the forward takes tq query rows per block (one thread each) and tk keys per shared tile; the
// backward tk rows both ways. Smaller tiles for large heads keep shared memory within sm_80's 163 KiB.
struct Tiles {
    int tq, tk;
};
static Tiles tiles_for(int HS) { return HS <= 128 ? Tiles{64, 32} : Tiles{16, 16}; }

// Loads rows t0 .. t0+n-1 (fewer at the end) of (b, h) into s[r * ld + d] as fp32; all threads help.
template <class T>
__device__ void load_tile(float *s, int ld, Rows<T> src, int b, int h, int t0, int n, int tmax, int HS)
{
    for (int idx = threadIdx.x; idx < n * HS; idx += blockDim.x) {
        const int r = idx / HS, d = idx % HS;
        s[r * ld + d] = t0 + r < tmax ? ldf(src.row(b, h, t0 + r)[d]) : 0.0f;
    }
}

// Forward: query i (0 <= i < nq) of (b, h) attends keys 0 .. pos0 + i; a thread per query row, the key
// and value tiles in shared memory (read by every thread of a warp at the same address: broadcasts).
// D > 0: the head size, known at compile time; the thread's query row and output accumulator live in
// registers. D = 0: any head size HS, both in shared memory.
template <class T, int D>
__global__ void __launch_bounds__(64) attn_fwd_kernel(T *out, size_t o_sb, size_t o_sh, size_t o_st, float *lse,
                                                      Rows<T> q, Rows<T> kr, Rows<T> vr, int nq, int nk, int pos0,
                                                      int NH, int HS_, float sc, Drop dr, int TK)
{
    DYN_SHARED(float, sm);
    const int HS = D > 0 ? D : HS_;
    const int TQ = blockDim.x, ld = HS + 1, b = blockIdx.z, h = blockIdx.y, i0 = blockIdx.x * TQ, r = threadIdx.x;
    const int i = i0 + r;
    float *Qs = sm, *Os = Qs + TQ * ld, *Ks = Os + (D > 0 ? 0 : TQ * ld), *Vs = Ks + TK * ld;   // Os: D = 0 only
    float *qi = Qs + r * ld, *oi = Os + r * ld, rq[D > 0 ? D : 1], ro[D > 0 ? D : 1];
    load_tile(Qs, ld, q, b, h, i0, TQ, nq, HS);
    if constexpr (D > 0) {
        __syncthreads();
#pragma unroll
        for (int d = 0; d < D; d++) rq[d] = qi[d], ro[d] = 0.0f;
    } else {
        for (int d = 0; d < HS; d++) oi[d] = 0.0f;
    }
    const bool valid = i < nq;
    const int last = pos0 + (i0 + TQ < nq ? i0 + TQ : nq) - 1;   // the last key any row of the block needs
    float m = -INFINITY, l = 0.0f;
    for (int j0 = 0; j0 <= last; j0 += TK) {
        __syncthreads();   // the previous tile is no longer read
        load_tile(Ks, ld, kr, b, h, j0, TK, nk, HS);
        load_tile(Vs, ld, vr, b, h, j0, TK, nk, HS);
        __syncthreads();
        if (!valid) continue;
        const int jend = pos0 + i < j0 + TK - 1 ? pos0 + i : j0 + TK - 1;
        for (int j = j0; j <= jend; j++) {
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
            const float pd = p * dr.factor(b, h, NH, nq, i, j);
            if constexpr (D > 0) {
#pragma unroll
                for (int d = 0; d < D; d++) ro[d] += pd * vj[d];
            } else if (pd != 0.0f) {
                for (int d = 0; d < HS; d++) oi[d] += pd * vj[d];
            }
        }
    }
    if (!valid) return;
    T *o = out + b * o_sb + h * o_sh + (size_t)i * o_st;
    const float inv = 1.0f / l;
    if constexpr (D > 0) {
#pragma unroll
        for (int d = 0; d < D; d++) o[d] = stf<T>(ro[d] * inv);
    } else {
        for (int d = 0; d < HS; d++) o[d] = stf<T>(oi[d] * inv);
    }
    if (lse) lse[((size_t)b * NH + h) * nq + i] = m + logf(l);
}

template <class T, int D>
static void fwd_tiles(mtk *k, T *out, size_t o_sb, size_t o_sh, size_t o_st, float *lse, Rows<T> q, Rows<T> kr,
                      Rows<T> vr, int B, int nq, int nk, int pos0, int NH, int HS, Drop dr)
{
    const Tiles t = tiles_for(HS);
    const size_t smem = (size_t)((D > 0 ? 1 : 2) * t.tq + 2 * t.tk) * (HS + 1) * sizeof(float);   // 33 KiB at D = 64
    cudaFuncSetAttribute((const void *)attn_fwd_kernel<T, D>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    dim3 grid((nq + t.tq - 1) / t.tq, NH, B);
    LAUNCH((attn_fwd_kernel<T, D>), grid, t.tq, smem, launch_stream(k))(out, o_sb, o_sh, o_st, lse, q, kr, vr, nq, nk, pos0,
                                                                  NH, HS, 1.0f / sqrtf((float)HS), dr, t.tk);
}

template <class T>
static void fwd_launch(mtk *k, T *out, size_t o_sb, size_t o_sh, size_t o_st, float *lse, Rows<T> q, Rows<T> kr,
                       Rows<T> vr, int B, int nq, int nk, int pos0, int NH, int HS, Drop dr)
{
    if (attention_fwd_mma<T>(k, out, o_sb, o_sh, o_st, lse, q, kr, vr, B, nq, nk, pos0, NH, HS, dr)) return;
    if (HS == 64) fwd_tiles<T, 64>(k, out, o_sb, o_sh, o_st, lse, q, kr, vr, B, nq, nk, pos0, NH, HS, dr);
    else if (HS == 32) fwd_tiles<T, 32>(k, out, o_sb, o_sh, o_st, lse, q, kr, vr, B, nq, nk, pos0, NH, HS, dr);
    else if (HS == 16) fwd_tiles<T, 16>(k, out, o_sb, o_sh, o_st, lse, q, kr, vr, B, nq, nk, pos0, NH, HS, dr);
    else fwd_tiles<T, 0>(k, out, o_sb, o_sh, o_st, lse, q, kr, vr, B, nq, nk, pos0, NH, HS, dr);
}

template <class T>
static void afwd(mtk *k, void *out, float *lse, const void *qkv, int B, int T_, int NH, int NG, int HS, Drop dr)
{
    const size_t C = (size_t)NH * HS;
    const T *x = (const T *)qkv;
    Rows<T> q = qkv_rows(x, 0, T_, NH, NG, HS), kr = qkv_rows(x, 1, T_, NH, NG, HS), vr = qkv_rows(x, 2, T_, NH, NG, HS);
    fwd_launch<T>(k, (T *)out, T_ * C, HS, C, lse, q, kr, vr, B, T_, T_, 0, NH, HS, dr);
}

void attention_fwd(mtk *k, void *out, float *lse, const void *qkv, int B, int T, int NH, int NG, int HS,
                   const mtk_dropout *drop)
{
    if (B <= 0 || T <= 0) return;
    MTK_CU_DISPATCH(k, afwd, k, out, lse, qkv, B, T, NH, NG, HS, drop_of(drop));
    check(k, "attention_fwd");
}

// ---- backward ----
// Per query row i: D_i = dout_i . out_i; P_ij = exp(S_ij - lse_i); dP_ij = dout_i . v_j;
// dS_ij = P_ij (dP_ij f_ij - D_i) with f the dropout factor; dv_j += P_ij f_ij dout_i;
// dk_j += sc dS_ij q_i; dq_i += sc dS_ij k_j.

// dk, dv: one thread per key row j of the block's tile (of group blockIdx.y); for each query head of the
// group in turn, query tiles i >= j stream through shared memory.
// D > 0: the head size, known at compile time; the thread's dk and dv accumulate in registers.
template <class T, int D>
__global__ void attn_dkv_kernel(T *dqkv, const T *qkv, const T *dout, const T *out, const float *lse, int T_, int NH,
                                int NG, int HS_, float sc, Drop dr)
{
    DYN_SHARED(float, sm);
    const int HS = D > 0 ? D : HS_;
    float rk[D > 0 ? D : 1], rv[D > 0 ? D : 1];
    if constexpr (D > 0)
        for (int d = 0; d < D; d++) rk[d] = rv[d] = 0.0f;
    const int rep = NH / NG, h0 = blockIdx.y * rep;   // the group's first query head
    const int TK = blockDim.x, ld = HS + 1, b = blockIdx.z, j0 = blockIdx.x * TK, r = threadIdx.x;
    const int j = j0 + r;
    Rows<T> q = qkv_rows(qkv, 0, T_, NH, NG, HS), kr = qkv_rows(qkv, 1, T_, NH, NG, HS),
            vr = qkv_rows(qkv, 2, T_, NH, NG, HS), go = head_rows(dout, T_, NH, HS), oo = head_rows(out, T_, NH, HS);
    float *Ks = sm, *Vs = Ks + TK * ld, *dK = Vs + TK * ld, *dV = dK + TK * ld, *Qs = dV + TK * ld, *Gs = Qs + TK * ld;
    float *Ls = Gs + TK * ld, *Ds = Ls + TK;
    load_tile(Ks, ld, kr, b, h0, j0, TK, T_, HS);
    load_tile(Vs, ld, vr, b, h0, j0, TK, T_, HS);
    for (int d = 0; d < HS; d++) dK[r * ld + d] = dV[r * ld + d] = 0.0f;
    const float *kj = Ks + r * ld, *vj = Vs + r * ld;
    float *dkj = dK + r * ld, *dvj = dV + r * ld;
    for (int h = h0; h < h0 + rep; h++) {
        for (int i0 = j0; i0 < T_; i0 += TK) {
            __syncthreads();
            load_tile(Qs, ld, q, b, h, i0, TK, T_, HS);
            load_tile(Gs, ld, go, b, h, i0, TK, T_, HS);
            if (i0 + r < T_) {
                const T *o = oo.row(b, h, i0 + r), *g = go.row(b, h, i0 + r);
                float Di = 0.0f;
                for (int d = 0; d < HS; d++) Di += ldf(g[d]) * ldf(o[d]);
                Ds[r] = Di;
                Ls[r] = lse[((size_t)b * NH + h) * T_ + i0 + r];
            }
            __syncthreads();
            if (j >= T_) continue;
            const int iend = i0 + TK < T_ ? i0 + TK : T_;
            for (int i = i0 > j ? i0 : j; i < iend; i++) {
                const float *qi = Qs + (i - i0) * ld, *gi = Gs + (i - i0) * ld;
                float s = 0.0f, dp = 0.0f;
                for (int d = 0; d < HS; d++) s += qi[d] * kj[d], dp += gi[d] * vj[d];
                const float p = expf(s * sc - Ls[i - i0]), f = dr.factor(b, h, NH, T_, i, j);
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
    if (j >= T_) return;
    T *dk = (T *)qkv_rows((const T *)dqkv, 1, T_, NH, NG, HS).row(b, h0, j), *dv = dk + HS;
    if constexpr (D > 0) {
#pragma unroll
        for (int d = 0; d < D; d++) dk[d] = stf<T>(rk[d]), dv[d] = stf<T>(rv[d]);
    } else {
        for (int d = 0; d < HS; d++) dk[d] = stf<T>(dkj[d]), dv[d] = stf<T>(dvj[d]);
    }
}

// dq: one thread per query row i; key tiles j <= i stream through shared memory.
template <class T, int D>
__global__ void attn_dq_kernel(T *dqkv, const T *qkv, const T *dout, const T *out, const float *lse, int T_, int NH,
                               int NG, int HS_, float sc, Drop dr)
{
    DYN_SHARED(float, sm);
    const int HS = D > 0 ? D : HS_;
    float rq[D > 0 ? D : 1];
    if constexpr (D > 0)
        for (int d = 0; d < D; d++) rq[d] = 0.0f;
    const int TK = blockDim.x, ld = HS + 1, b = blockIdx.z, h = blockIdx.y, i0 = blockIdx.x * TK, r = threadIdx.x;
    const int i = i0 + r;
    const size_t C = (size_t)NH * HS;
    Rows<T> q = qkv_rows(qkv, 0, T_, NH, NG, HS), kr = qkv_rows(qkv, 1, T_, NH, NG, HS),
            vr = qkv_rows(qkv, 2, T_, NH, NG, HS), go = head_rows(dout, T_, NH, HS);
    float *Qs = sm, *Gs = Qs + TK * ld, *dQ = Gs + TK * ld, *Ks = dQ + TK * ld, *Vs = Ks + TK * ld;
    load_tile(Qs, ld, q, b, h, i0, TK, T_, HS);
    load_tile(Gs, ld, go, b, h, i0, TK, T_, HS);
    for (int d = 0; d < HS; d++) dQ[r * ld + d] = 0.0f;
    const bool valid = i < T_;
    float Di = 0.0f, L = 0.0f;
    if (valid) {
        const T *o = out + b * T_ * C + (size_t)i * C + (size_t)h * HS;
        const T *g = go.row(b, h, i);
        for (int d = 0; d < HS; d++) Di += ldf(g[d]) * ldf(o[d]);
        L = lse[((size_t)b * NH + h) * T_ + i];
    }
    const float *qi = Qs + r * ld, *gi = Gs + r * ld;
    float *dqi = dQ + r * ld;
    const int last = (i0 + TK < T_ ? i0 + TK : T_) - 1;
    for (int j0 = 0; j0 <= last; j0 += TK) {
        __syncthreads();
        load_tile(Ks, ld, kr, b, h, j0, TK, T_, HS);
        load_tile(Vs, ld, vr, b, h, j0, TK, T_, HS);
        __syncthreads();
        if (!valid) continue;
        const int jend = i < j0 + TK - 1 ? i : j0 + TK - 1;
        for (int j = j0; j <= jend; j++) {
            const float *kj = Ks + (j - j0) * ld, *vj = Vs + (j - j0) * ld;
            float s = 0.0f, dp = 0.0f;
            for (int d = 0; d < HS; d++) s += qi[d] * kj[d], dp += gi[d] * vj[d];
            const float p = expf(s * sc - L), f = dr.factor(b, h, NH, T_, i, j);
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
    T *dq = (T *)qkv_rows((const T *)dqkv, 0, T_, NH, NG, HS).row(b, h, i);
    if constexpr (D > 0) {
#pragma unroll
        for (int d = 0; d < D; d++) dq[d] = stf<T>(rq[d]);
    } else {
        for (int d = 0; d < HS; d++) dq[d] = stf<T>(dqi[d]);
    }
}

template <class T, int D>
static void bwd_launch(mtk *k, void *dqkv, const void *dout, const void *qkv, const void *out, const float *lse, int B,
                       int T_, int NH, int NG, int HS, Drop dr)
{
    const int tk = tiles_for(HS).tk;
    const size_t smem = ((size_t)6 * tk * (HS + 1) + 2 * tk) * sizeof(float);
    const float sc = 1.0f / sqrtf((float)HS);
    cudaFuncSetAttribute((const void *)attn_dkv_kernel<T, D>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    cudaFuncSetAttribute((const void *)attn_dq_kernel<T, D>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    dim3 gkv((T_ + tk - 1) / tk, NG, B), gq((T_ + tk - 1) / tk, NH, B);
    LAUNCH((attn_dkv_kernel<T, D>), gkv, tk, smem, launch_stream(k))((T *)dqkv, (const T *)qkv, (const T *)dout,
                                                              (const T *)out, lse, T_, NH, NG, HS, sc, dr);
    LAUNCH((attn_dq_kernel<T, D>), gq, tk, smem, launch_stream(k))((T *)dqkv, (const T *)qkv, (const T *)dout,
                                                            (const T *)out, lse, T_, NH, NG, HS, sc, dr);
}

template <class T>
static void abwd(mtk *k, void *dqkv, const void *dout, const void *qkv, const void *out, const float *lse, int B, int T_,
                 int NH, int NG, int HS, Drop dr)
{
    if (attention_bwd_mma<T>(k, (T *)dqkv, (const T *)dout, (const T *)qkv, (const T *)out, lse, B, T_, NH, NG, HS, dr))
        return;
    if (HS == 64) bwd_launch<T, 64>(k, dqkv, dout, qkv, out, lse, B, T_, NH, NG, HS, dr);
    else if (HS == 32) bwd_launch<T, 32>(k, dqkv, dout, qkv, out, lse, B, T_, NH, NG, HS, dr);
    else if (HS == 16) bwd_launch<T, 16>(k, dqkv, dout, qkv, out, lse, B, T_, NH, NG, HS, dr);
    else bwd_launch<T, 0>(k, dqkv, dout, qkv, out, lse, B, T_, NH, NG, HS, dr);
}

void attention_bwd(mtk *k, void *dqkv, const void *dout, const void *qkv, const void *out, const float *lse, int B,
                   int T, int NH, int NG, int HS, const mtk_dropout *drop)
{
    if (B <= 0 || T <= 0) return;
    MTK_CU_DISPATCH(k, abwd, k, dqkv, dout, qkv, out, lse, B, T, NH, NG, HS, drop_of(drop));
    check(k, "attention_bwd");
}

// ---- KV cache [B][NG][Tmax][HS] ----
template <class T>
__global__ void kv_append_kernel(T *kc, T *vc, const T *qkv, int T_, int pos0, int Tmax, int NG, int rep, int HS,
                                 size_t n)
{
    for (size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x; idx < n; idx += (size_t)gridDim.x * blockDim.x) {
        const int d = (int)(idx % HS);
        const size_t row = idx / HS;   // (b, t, g)
        const int g = (int)(row % NG), t = (int)(row / NG % T_), b = (int)(row / NG / T_);
        const T *src = qkv + (((size_t)b * T_ + t) * NG + g) * (rep + 2) * HS + (size_t)rep * HS;
        const size_t dst = (((size_t)b * NG + g) * Tmax + pos0 + t) * HS + d;
        kc[dst] = src[d];
        vc[dst] = src[HS + d];
    }
}

template <class T>
static void akv(mtk *k, void *out, const void *qkv, void *kcache, void *vcache, int B, int T_, int pos0, int Tmax, int NH,
                int NG, int HS)
{
    const size_t C = (size_t)NH * HS, n = (size_t)B * T_ * NG * HS;
    const int rep = NH / NG;
    LAUNCH(kv_append_kernel<T>, blocks_for(n), THREADS, 0, launch_stream(k))((T *)kcache, (T *)vcache, (const T *)qkv, T_, pos0,
                                                                       Tmax, NG, rep, HS, n);
    const size_t cb = (size_t)NG * Tmax * HS, ch = (size_t)Tmax * HS;
    Rows<T> q = qkv_rows((const T *)qkv, 0, T_, NH, NG, HS), kr{(const T *)kcache, cb, ch, (size_t)HS, rep, 0},
        vr{(const T *)vcache, cb, ch, (size_t)HS, rep, 0};
    fwd_launch<T>(k, (T *)out, T_ * C, HS, C, NULL, q, kr, vr, B, T_, pos0 + T_, pos0, NH, HS, Drop{0, 0, 0.0f, 1.0f});
}

void attention_kv(mtk *k, void *out, const void *qkv, void *kcache, void *vcache, int B, int T, int pos0, int Tmax,
                  int NH, int NG, int HS)
{
    if (B <= 0 || T <= 0) return;
    MTK_CU_DISPATCH(k, akv, k, out, qkv, kcache, vcache, B, T, pos0, Tmax, NH, NG, HS);
    check(k, "attention_kv");
}

}  // namespace MTK_CU_NS
