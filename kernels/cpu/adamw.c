/* adamw.c: the AdamW update of kernels.h (decoupled weight decay, bias correction, eps after sqrt), and
 * with mtk_adamw_to the working copy in the activation dtype written block by block behind it; the pieces
 * of mtk_adamw_multi (the whole model, tensor by tensor) in one parallel region.
 * The loop runs in blocks, compiled for AVX-512, AVX2 and the baseline (MTK_CLONES): the same IEEE
 * operations in the same order either way, so the same results. */
#include <math.h>
#include <omp.h>

#include "cpu.h"
#include "vmath.h"

enum { BLOCK = 4096 };

MTK_CLONES static void adamw_block(float *p, const float *g, float *m, float *v, size_t n, float lr, float b1, float b2,
                                   float ib1, float ib2, float bc1, float bc2, float eps, float wd, float grad_scale)
{
    for (size_t i = 0; i < n; i++) {
        float gi = g[i] * grad_scale;
        float mi = b1 * m[i] + ib1 * gi;
        float vi = b2 * v[i] + ib2 * gi * gi;
        m[i] = mi;
        v[i] = vi;
        p[i] -= lr * ((mi / bc1) / (sqrtf(vi / bc2) + eps) + wd * p[i]);
    }
}

static size_t blocks_of(size_t n) { return (n + BLOCK - 1) / BLOCK; }

/* The pieces' blocks are numbered in order and the threads take contiguous shares of them (one parallel
 * region for the whole model); each block is updated as a one-piece call would update it. */
void cpu_adamw(mtk *k, float *p, void *work, const float *g, float *m, float *v, const mtk_adamw_seg *seg, int nseg,
               float lr, float b1, float b2, float eps, float wd, int t, float grad_scale)
{
    const float bc1 = (float)(1.0 - pow(b1, t)), bc2 = (float)(1.0 - pow(b2, t));
    const float ib1 = 1.0f - b1, ib2 = 1.0f - b2;
    const size_t wsize = mtk_dtype_size(k->act);
    size_t nb = 0;
    for (int s = 0; s < nseg; s++) nb += blocks_of(seg[s].n);
#pragma omp parallel if (nb > 1)
    {
        size_t nt = (size_t)omp_get_num_threads(), id = (size_t)omp_get_thread_num();
        size_t b = nb * id / nt, bend = nb * (id + 1) / nt, first = 0;   /* piece s's blocks start at first */
        int s = 0;
        for (; b < bend; b++) {
            while (b >= first + blocks_of(seg[s].n)) first += blocks_of(seg[s++].n);
            size_t i0 = seg[s].off + (b - first) * BLOCK, left = seg[s].off + seg[s].n - i0;
            size_t len = left < BLOCK ? left : BLOCK;
            adamw_block(p + i0, g + i0, m + i0, v + i0, len, lr, b1, b2, ib1, ib2, bc1, bc2, eps,
                        seg[s].decay ? wd : 0.0f, grad_scale);
            if (work)   /* the block is still in cache: the working copy costs no second pass over p */
                cpu_from_f32((char *)work + i0 * wsize, k->act, p + i0, len);
        }
    }
}
