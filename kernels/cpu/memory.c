/* memory.c: cpu backend memory: device buffers are 64-byte aligned, zero-filled host allocations;
 * dtype conversion. */
#include <stdlib.h>
#include <string.h>

#include "cpu.h"

static size_t round64(size_t n) { return n ? (n + 63) / 64 * 64 : 64; }

void *cpu_alloc(mtk *k, size_t bytes, mt_err *e)
{
    (void)k;
    if (bytes > SIZE_MAX - 64) {
        mtk_err_set(e, "cannot allocate %zu bytes", bytes);
        return NULL;
    }
    size_t n = round64(bytes);
    void *p = aligned_alloc(64, n);
    if (!p) {
        mtk_err_set(e, "cannot allocate %zu bytes of kernel memory", bytes);
        return NULL;
    }
    memset(p, 0, n);
    return p;
}

void cpu_free(mtk *k, void *p)
{
    (void)k;
    free(p);
}

void cpu_zero(mtk *k, void *p, size_t bytes)
{
    (void)k;
    if (bytes) memset(p, 0, bytes);
}

void cpu_copy(mtk *k, void *dst, const void *src, size_t bytes)
{
    (void)k;
    if (bytes && dst != src) memmove(dst, src, bytes);
}

int cpu_sync(mtk *k)
{
    (void)k;
    return 0;
}

/* Element conversions between the storage dtypes (mt_base.h: round to nearest even). */
static float load(const void *p, mtk_dtype t, size_t i)
{
    return t == MTK_F32 ? ((const float *)p)[i]
         : t == MTK_BF16 ? mt_bf16_to_f32(((const uint16_t *)p)[i]) : mt_f16_to_f32(((const uint16_t *)p)[i]);
}

void cpu_convert(mtk *k, void *dst, mtk_dtype dt, const void *src, mtk_dtype st, size_t n)
{
    (void)k;
    if (dt == st) {
        if (dst != src && n) memmove(dst, src, n * mtk_dtype_size(dt));
        return;
    }
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) {
        float v = load(src, st, i);
        if (dt == MTK_F32) ((float *)dst)[i] = v;
        else if (dt == MTK_BF16) ((uint16_t *)dst)[i] = mt_f32_to_bf16(v);
        else ((uint16_t *)dst)[i] = mt_f32_to_f16(v);
    }
}
