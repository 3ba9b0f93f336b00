/* attention_paged.c: attention over a paged key/value cache on cpu (kernels.h's mtk_attention_paged): the
 * new rows' keys and values stored into their sequences' blocks, then each (row, query head) one OpenMP work
 * item that scores its sequence's positions up to its own, block by block, softmaxes and sums the values.
 * Operands stay in the activation dtype: fp32 blocks are read in place, others converted into fp32 a block
 * at a time as a thread goes, so no pool is staged. The arithmetic of a row is that of cpu_attention_kv (dot
 * products, the max, the exponentials, the sum, the weighted values, in the same order) and does not
 * depend on where the row's blocks lie, so a row gets the same bits whatever else the call holds. */
#include <math.h>
#include <omp.h>
#include <string.h>

#include "attention_rows.h"
#include "cpu.h"
#include "vmath.h"

/* Where position p of sequence s keeps group g's key (or value) in a pool of [blocks][NG][BS][HS]. */
static size_t slot(const int32_t *table, int max_blocks, int BS, int NG, int HS, int s, int p, int g)
{
    const size_t blk = (size_t)table[(size_t)s * max_blocks + p / BS];
    return ((blk * NG + (size_t)g) * BS + (size_t)(p % BS)) * HS;
}

void cpu_attention_paged(mtk *k, void *out, const void *qkv, void *kpool, void *vpool, int N, const int32_t *seq,
                         const int32_t *pos, const int32_t *table, int max_blocks, int BS, int NH, int NG, int HS)
{
    const mtk_dtype dt = k->act;
    const size_t es = dt == MTK_F32 ? 4 : 2, S3 = (size_t)(NH + 2 * NG) * HS, C = (size_t)NH * HS;
    const size_t brow = (size_t)BS * HS;   /* a block's positions of one group */
    const int rep = NH / NG;
    const float scale = 1.0f / sqrtf((float)HS);
    /* per thread: the scores, the query, a block of keys or values in fp32 (other dtypes), the output */
    const size_t per = ((size_t)max_blocks * BS + 2 * (size_t)HS + brow + 15) / 16 * 16;
    float *ws = mtk_ws_take(k, per * (size_t)k->threads * sizeof(float));
    if (!ws) return;
    /* the keys and values of the new rows, group by group (a group's key follows its rep queries) */
    for (int r = 0; r < N; r++)
        for (int g = 0; g < NG; g++) {
            const char *src = (const char *)qkv + ((size_t)r * S3 + ((size_t)g * (rep + 2) + (size_t)rep) * HS) * es;
            const size_t at = slot(table, max_blocks, BS, NG, HS, seq[r], pos[r], g) * es;
            memcpy((char *)kpool + at, src, (size_t)HS * es);
            memcpy((char *)vpool + at, src + (size_t)HS * es, (size_t)HS * es);
        }
#pragma omp parallel num_threads(k->threads)
    {
        float *s = ws + per * (size_t)omp_get_thread_num(), *q = s + (size_t)max_blocks * BS, *o = q + HS,
              *blk = o + HS;
#pragma omp for schedule(dynamic, 1)
        for (int item = 0; item < N * NH; item++) {
            const int r = item / NH, h = item % NH, g = h / rep, n = pos[r] + 1;
            const int32_t *tb = table + (size_t)seq[r] * max_blocks;
            cpu_to_f32(q, (const char *)qkv + ((size_t)r * S3 + ((size_t)g * (rep + 2) + (size_t)(h % rep)) * HS) * es,
                       dt, (size_t)HS);
            /* the pool is far larger than the caches (the weights stream through them at every step): all
             * the keys and values this item reads are asked for at once, into L2 */
            for (int j0 = 0; j0 < n; j0 += BS) {
                const size_t at = ((size_t)tb[j0 / BS] * NG + (size_t)g) * brow * es;
                const size_t bytes = (size_t)(n - j0 < BS ? n - j0 : BS) * HS * es;
                for (size_t b = 0; b < bytes; b += 64) {
                    __builtin_prefetch((const char *)kpool + at + b, 0, 2);
                    __builtin_prefetch((const char *)vpool + at + b, 0, 2);
                }
            }
            /* the scores, a block of positions at a time: fp32 blocks are read in place */
            float mx = -INFINITY;
            for (int j0 = 0; j0 < n; j0 += BS) {
                const int m = n - j0 < BS ? n - j0 : BS;
                const char *src = (const char *)kpool + ((size_t)tb[j0 / BS] * NG + (size_t)g) * brow * es;
                const float *kb = dt == MTK_F32 ? (const float *)src : blk;
                if (j0 + BS < n) {   /* the next block's keys into L1 */
                    const char *next = (const char *)kpool + ((size_t)tb[j0 / BS + 1] * NG + (size_t)g) * brow * es;
                    const size_t nb = (size_t)(n - j0 - BS < BS ? n - j0 - BS : BS) * HS * es;
                    for (size_t b = 0; b < nb; b += 64) __builtin_prefetch(next + b);
                }
                if (dt != MTK_F32) cpu_to_f32(blk, src, dt, (size_t)m * HS);
                mx = kv_scores(s + j0, q, kb, m, HS, scale, mx);
            }
            float sum = 0.0f;
            for (int j = 0; j < n; j++) sum += s[j] = vexp(s[j] - mx);
            for (int d = 0; d < HS; d++) o[d] = 0.0f;
            for (int j0 = 0; j0 < n; j0 += BS) {
                const int m = n - j0 < BS ? n - j0 : BS;
                const char *src = (const char *)vpool + ((size_t)tb[j0 / BS] * NG + (size_t)g) * brow * es;
                const float *vb = dt == MTK_F32 ? (const float *)src : blk;
                if (dt != MTK_F32) cpu_to_f32(blk, src, dt, (size_t)m * HS);
                kv_values(o, s + j0, sum, vb, m, HS);
            }
            cpu_from_f32((char *)out + ((size_t)r * C + (size_t)h * HS) * es, dt, o, (size_t)HS);
        }
    }
}
