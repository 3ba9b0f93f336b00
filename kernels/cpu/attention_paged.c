/* attention_paged.c: attention over a paged key/value cache on cpu (kernels.h's mtk_attention_paged): the
 * new rows' keys and values stored into their sequences' blocks, then each (row, query head) one OpenMP work
 * item that scores its sequence's positions up to its own, softmaxes and sums the values. Operands stay in the
 * activation dtype; a thread converts the vectors it reads into fp32 as it goes, so no pool is staged. The
 * arithmetic of a row is that of cpu_attention_kv (dot products, the max, the exponentials, the sum, the
 * weighted values, in the same order), so a row gets the same bits whatever else the call holds. */
#include <math.h>
#include <omp.h>
#include <string.h>

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
    const int rep = NH / NG;
    const float scale = 1.0f / sqrtf((float)HS);
    const size_t per = cpu_attention_ws_floats(max_blocks * BS, HS);
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
        float *s = ws + per * (size_t)omp_get_thread_num(), *q = s + (size_t)max_blocks * BS, *kv = q + HS,
              *o = kv + HS;
#pragma omp for schedule(dynamic, 1)
        for (int item = 0; item < N * NH; item++) {
            const int r = item / NH, h = item % NH, g = h / rep, n = pos[r] + 1;
            cpu_to_f32(q, (const char *)qkv + ((size_t)r * S3 + ((size_t)g * (rep + 2) + (size_t)(h % rep)) * HS) * es,
                       dt, (size_t)HS);
            float mx = -INFINITY;
            for (int j = 0; j < n; j++) {
                cpu_to_f32(kv, (const char *)kpool + slot(table, max_blocks, BS, NG, HS, seq[r], j, g) * es, dt,
                           (size_t)HS);
                float a = 0.0f;
#pragma omp simd reduction(+ : a)
                for (int d = 0; d < HS; d++) a += q[d] * kv[d];
                s[j] = a * scale;
                mx = s[j] > mx ? s[j] : mx;
            }
            float sum = 0.0f;
            for (int j = 0; j < n; j++) sum += s[j] = vexp(s[j] - mx);
            for (int d = 0; d < HS; d++) o[d] = 0.0f;
            for (int j = 0; j < n; j++) {
                const float p = s[j] / sum;
                cpu_to_f32(kv, (const char *)vpool + slot(table, max_blocks, BS, NG, HS, seq[r], j, g) * es, dt,
                           (size_t)HS);
                for (int d = 0; d < HS; d++) o[d] += p * kv[d];
            }
            cpu_from_f32((char *)out + ((size_t)r * C + (size_t)h * HS) * es, dt, o, (size_t)HS);
        }
    }
}
