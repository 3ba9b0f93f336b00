// reduce.cu: the sum of squares (double, in a fixed order: a fixed grid of per-thread strided sums, a
// shared-memory tree per block, then one block over the block partials), the count of non-finite values,
// and the fused AdamW update over fp32 master weights (many tensors per launch).
#include "cuda.h"

namespace MTK_CU_NS {

enum { RB = 256, RMAX = 1024 };   // threads per block, most blocks
enum { SPANS = 64 };              // spans of one sumsq_spans launch

size_t reduce_ws_bytes(size_t n)
{
    (void)n;
    return ((size_t)SPANS * RMAX + 1) * sizeof(double) + 64;
}

template <class A> __device__ A block_tree(A v, A *sh)
{
    sh[threadIdx.x] = v;
    __syncthreads();
    for (int s = RB / 2; s > 0; s >>= 1) {
        if ((int)threadIdx.x < s) sh[threadIdx.x] += sh[threadIdx.x + s];
        __syncthreads();
    }
    return sh[0];
}

__device__ __forceinline__ double sq_of(float x) { return (double)x * x; }
__device__ __forceinline__ double nonfinite_of(float x)
{
    uint32_t u;
    memcpy(&u, &x, 4);
    return (u & 0x7f800000u) == 0x7f800000u ? 1.0 : 0.0;
}

// The last of n pieces whose first block (first[], ascending from 0) is at most this block: a launch's
// blocks numbered through its pieces in order, as the spans of sumsq_spans and the pieces of adamw are.
__device__ __forceinline__ int piece_of_block(const unsigned *first, int n)
{
    int lo = 0, hi = n - 1;
    while (lo < hi) {
        const int mid = (lo + hi + 1) / 2;
        if (first[mid] <= blockIdx.x) lo = mid;
        else hi = mid - 1;
    }
    return lo;
}

template <int COUNT> __global__ void partial_kernel(double *part, const float *x, size_t n)
{
    __shared__ double sh[RB];
    double s = 0.0;
    for (size_t i = (size_t)blockIdx.x * RB + threadIdx.x; i < n; i += (size_t)gridDim.x * RB)
        s += COUNT ? nonfinite_of(x[i]) : sq_of(x[i]);
    s = block_tree(s, sh);
    if (threadIdx.x == 0) part[blockIdx.x] = s;
}
__global__ void final_kernel(double *part, int nb)
{
    __shared__ double sh[RB];
    double s = 0.0;
    for (int i = threadIdx.x; i < nb; i += RB) s += part[i];
    s = block_tree(s, sh);
    if (threadIdx.x == 0) part[RMAX] = s;
}

template <int COUNT> static double reduce(mtk *k, const float *x, size_t n, const char *what)
{
    if (!n) return 0.0;
    double *part = (double *)mtk_ws_take(k, (RMAX + 1) * sizeof(double));
    if (!part) return NAN;
    const unsigned nb = blocks_for(n, RB, RMAX);
    LAUNCH(partial_kernel<COUNT>, nb, RB, 0, launch_stream(k))(part, x, n);
    LAUNCH(final_kernel, 1, RB, 0, launch_stream(k))(part, (int)nb);
    double r = NAN;
    if (check(k, what)) return NAN;
    to_host(k, &r, part + RMAX, sizeof r);
    return k->failed ? NAN : r;
}

double sumsq(mtk *k, const float *x, size_t n) { return reduce<0>(k, x, n, "sumsq"); }
// Up to SPANS spans of one array, passed by value: span j has the blocks first[j] .. first[j+1]-1, as many
// as sumsq gives it alone, so that each span's partials and their sum are sumsq's bits.
struct Spans {
    int n;
    unsigned first[SPANS + 1];
    size_t off[SPANS], len[SPANS];
};
__global__ void span_partial_kernel(double *part, const float *x, Spans sp)
{
    __shared__ double sh[RB];
    const int j = piece_of_block(sp.first, sp.n);
    const unsigned b = blockIdx.x - sp.first[j], nb = sp.first[j + 1] - sp.first[j];
    const float *xs = x + sp.off[j];
    double s = 0.0;
    for (size_t i = (size_t)b * RB + threadIdx.x; i < sp.len[j]; i += (size_t)nb * RB) s += sq_of(xs[i]);
    s = block_tree(s, sh);
    if (threadIdx.x == 0) part[blockIdx.x] = s;
}
// *out (= 0, or *out + with add) + each span's sum in span order
__global__ void span_final_kernel(double *out, const double *part, Spans sp, int add)
{
    __shared__ double sh[RB];
    double tot = add ? *out : 0.0;   // thread 0's
    for (int j = 0; j < sp.n; j++) {
        const int f = (int)sp.first[j], nb = (int)(sp.first[j + 1] - sp.first[j]);
        double s = 0.0;
        for (int i = threadIdx.x; i < nb; i += RB) s += part[f + i];
        s = block_tree(s, sh);
        if (threadIdx.x == 0) tot += s;
        __syncthreads();   // sh[0] read by every thread before the next span writes it
    }
    if (threadIdx.x == 0) *out = tot;
}

void sumsq_spans(mtk *k, double *out, const float *x, const mtk_span *span, int nspan)
{
    double *part = (double *)mtk_ws_take(k, (size_t)SPANS * RMAX * sizeof(double));
    if (!part) return;
    int add = 0;
    for (int s = 0; s < nspan || !add;) {
        Spans sp;
        sp.n = 0;
        unsigned nb = 0;
        for (; s < nspan && sp.n < SPANS; s++) {
            if (!span[s].n) continue;
            sp.first[sp.n] = nb;
            sp.off[sp.n] = span[s].off, sp.len[sp.n] = span[s].n;
            sp.n++;
            nb += blocks_for(span[s].n, RB, RMAX);
        }
        sp.first[sp.n] = nb;
        if (nb) LAUNCH(span_partial_kernel, nb, RB, 0, launch_stream(k))(part, x, sp);
        if (sp.n || !add) LAUNCH(span_final_kernel, 1, RB, 0, launch_stream(k))(out, part, sp, add);
        add = 1;
    }
    check(k, "sumsq_spans");
}

size_t count_nonfinite(mtk *k, const float *x, size_t n)
{
    double c = reduce<1>(k, x, n, "count_nonfinite");
    return c == c ? (size_t)c : (size_t)-1;
}

// AdamW over up to ADAMW_PIECES pieces of the same arrays per launch, passed by value: a block updates
// ADAMW_CHUNK elements of one piece, the pieces' blocks numbered in order (first[j]: piece j's first block).
enum { ADAMW_PIECES = 64, ADAMW_CHUNK = 4096 };
struct AdamwPieces {
    int n;
    unsigned first[ADAMW_PIECES + 1];
    size_t off[ADAMW_PIECES], len[ADAMW_PIECES];
    float wd[ADAMW_PIECES];
};

// W: the working copy's type (float: none)
template <class W>
__global__ void adamw_kernel(float *p, W *work, const float *g, float *m, float *v, AdamwPieces pc, float lr, float b1,
                             float b2, float eps, float bc1, float bc2, float gs)
{
    const int j = piece_of_block(pc.first, pc.n);
    const size_t beg = pc.off[j] + (size_t)(blockIdx.x - pc.first[j]) * ADAMW_CHUNK;
    const size_t end = beg + ADAMW_CHUNK < pc.off[j] + pc.len[j] ? beg + ADAMW_CHUNK : pc.off[j] + pc.len[j];
    const float ib1 = 1.0f - b1, ib2 = 1.0f - b2, wd = pc.wd[j];
    for (size_t i = beg + threadIdx.x; i < end; i += blockDim.x) {
        const float gi = g[i] * gs;
        const float mi = b1 * m[i] + ib1 * gi;
        const float vi = b2 * v[i] + ib2 * gi * gi;
        m[i] = mi;
        v[i] = vi;
        const float pi = p[i] - lr * ((mi / bc1) / (sqrtf(vi / bc2) + eps) + wd * p[i]);
        p[i] = pi;
        if (work) work[i] = stf<W>(pi);
    }
}

void adamw(mtk *k, float *p, void *work, const float *g, float *m, float *v, const mtk_adamw_seg *seg, int nseg,
           float lr, float b1, float b2, float eps, float wd, int t, float grad_scale)
{
    const float bc1 = (float)(1.0 - pow(b1, t)), bc2 = (float)(1.0 - pow(b2, t));
    for (int s = 0; s < nseg;) {
        AdamwPieces pc;
        pc.n = 0;
        unsigned nb = 0;
        for (; s < nseg && pc.n < ADAMW_PIECES; s++) {
            if (!seg[s].n) continue;
            pc.first[pc.n] = nb;
            pc.off[pc.n] = seg[s].off, pc.len[pc.n] = seg[s].n, pc.wd[pc.n] = seg[s].decay ? wd : 0.0f;
            pc.n++;
            nb += (unsigned)((seg[s].n + ADAMW_CHUNK - 1) / ADAMW_CHUNK);
        }
        if (!pc.n) break;
        pc.first[pc.n] = nb;
        if (work && k->act == MTK_BF16)
            LAUNCH(adamw_kernel<bf16>, nb, THREADS, 0, launch_stream(k))(p, (bf16 *)work, g, m, v, pc, lr, b1, b2, eps, bc1,
                                                                  bc2, grad_scale);
        else if (work && k->act == MTK_F16)
            LAUNCH(adamw_kernel<f16>, nb, THREADS, 0, launch_stream(k))(p, (f16 *)work, g, m, v, pc, lr, b1, b2, eps, bc1,
                                                                 bc2, grad_scale);
        else
            LAUNCH(adamw_kernel<float>, nb, THREADS, 0, launch_stream(k))(p, (float *)work, g, m, v, pc, lr, b1, b2, eps,
                                                                   bc1, bc2, grad_scale);
    }
    check(k, "adamw");
}

}  // namespace MTK_CU_NS
