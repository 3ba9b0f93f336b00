// attention.h: what attention.cu and attention_mma.cu share: the row view of one (sequence, head) (with
// grouped-query attention, query head h reads the key and value rows of its group h / rep), the
// attention-dropout counter, and the tensor-core entry points (which return false for shapes and types
// they do not take, leaving them to attention.cu's kernels).
#pragma once
#include "cuda.h"

namespace MTK_CU_NS {

// Rows of one (sequence, head): p + b sb + (h / rep) sh + (h % rep) sq + t st.
template <class T> struct Rows {
    const T *p;
    size_t sb, sh, st;
    int rep;     // query heads per group (1: one row set per head)
    size_t sq;   // the step between the query heads of a group (0: they share the group's rows)
    __device__ const T *row(int b, int h, int t) const
    {
        return p + b * sb + (size_t)(h / rep) * sh + (size_t)(h % rep) * sq + (size_t)t * st;
    }
};
// Part part (0: q, 1: k, 2: v) of a packed qkv [B][T][NG][NH/NG + 2][HS], by query head.
template <class T> __host__ __device__ inline Rows<T> qkv_rows(const T *qkv, int part, int T_, int NH, int NG, int HS)
{
    const int rep = NH / NG;
    const size_t W = (size_t)(NH + 2 * NG) * HS;
    return Rows<T>{qkv + (part ? (size_t)(rep + part - 1) * HS : 0), T_ * W, (size_t)(rep + 2) * HS, W, rep,
                   part ? 0 : (size_t)HS};
}
// A tensor of [B][T][NH][HS] (the attention output and its gradient).
template <class T> __host__ __device__ inline Rows<T> head_rows(const T *x, int T_, int NH, int HS)
{
    const size_t C = (size_t)NH * HS;
    return Rows<T>{x, T_ * C, (size_t)HS, C, 1, 0};
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
                       int NH, int NG, int HS, Drop dr);

}  // namespace MTK_CU_NS
