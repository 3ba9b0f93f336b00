// attention.h: what attention.cu and attention_mma.cu share: the row view of one (sequence, head), the
// attention-dropout counter, and the tensor-core entry points (which return false for shapes and types
// they do not take, leaving them to attention.cu's kernels).
#pragma once
#include "cuda.h"

namespace MTK_CU_NS {

template <class T> struct Rows {   // rows of one (sequence, head): p + b sb + h sh + t st
    const T *p;
    size_t sb, sh, st;
    __device__ const T *row(int b, int h, int t) const { return p + b * sb + h * sh + (size_t)t * st; }
};
// Part part (0: q, 1: k, 2: v) of a packed qkv [B][T][NH][3][HS].
template <class T> __host__ __device__ inline Rows<T> qkv_rows(const T *qkv, int part, int T_, int NH, int HS)
{
    const size_t S3 = 3 * (size_t)NH * HS;
    return Rows<T>{qkv + (size_t)part * HS, T_ * S3, 3 * (size_t)HS, S3};
}
// A tensor of [B][T][NH][HS] (the attention output and its gradient).
template <class T> __host__ __device__ inline Rows<T> head_rows(const T *x, int T_, int NH, int HS)
{
    const size_t C = (size_t)NH * HS;
    return Rows<T>{x, T_ * C, (size_t)HS, C};
}
struct Drop {
    uint64_t seed, offset;
    float p, scale;   // p == 0: none
    __device__ float factor(int b, int h, int NH, int T, int i, int j) const
    {
        if (p == 0.0f) return 1.0f;
        const uint64_t ctr = offset + ((((uint64_t)b * NH + h) * T + i) * T + j);
        return drop_keep(seed, ctr, p) ? scale : 0.0f;
    }
};
static inline Drop drop_of(const mtk_dropout *d)
{
    if (!d || d->p == 0.0f) return Drop{0, 0, 0.0f, 1.0f};
    return Drop{d->seed, d->offset, d->p, 1.0f / (1.0f - d->p)};
}

template <class T>
bool attention_fwd_mma(mtk *k, T *out, size_t o_sb, size_t o_sh, size_t o_st, float *lse, Rows<T> q, Rows<T> kr,
                       Rows<T> vr, int B, int nq, int nk, int pos0, int NH, int HS, Drop dr);
template <class T>
bool attention_bwd_mma(mtk *k, T *dqkv, const T *dout, const T *qkv, const T *out, const float *lse, int B, int T_,
                       int NH, int HS, Drop dr);

}  // namespace MTK_CU_NS
