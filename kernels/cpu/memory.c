/* memory.c: cpu backend memory: device buffers are 64-byte aligned and zero-filled; dtype conversion.
 * Buffers of a megabyte or more are fresh anonymous mappings, which the kernel fills with zeros when a
 * page is first touched: memory that is reserved but never used (most of a bf16 run's staging
 * workspace, say) costs neither start-up time nor resident memory. A 64-byte header before each buffer
 * holds its mapped length (0: from the heap) and its size. With a capacity (MT_CPU_MEMORY, as a GPU's
 * memory) an allocation that would take the live buffers past it fails, as cudaMalloc would. */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "cpu.h"
#include "vmath.h"

enum { HEADER = 64, MAP_MIN = 1 << 20 };

static size_t round64(size_t n) { return n ? (n + 63) / 64 * 64 : 64; }

void *cpu_alloc(mtk *k, size_t bytes, mt_err *e)
{
    if (bytes > SIZE_MAX - 2 * HEADER - 4096) {
        mtk_err_set(e, "cannot allocate %zu bytes", bytes);
        return NULL;
    }
    size_t n = round64(bytes) + HEADER;
    cpu_state *s = k->impl;
    if (s && s->capacity) {
        size_t was = atomic_fetch_add(&s->used, n);
        if (was + n > s->capacity) {
            atomic_fetch_sub(&s->used, n);
            mtk_err_set(e, "cannot allocate %zu bytes of kernel memory: %zu of the device's %zu (MT_CPU_MEMORY) in use",
                        bytes, was, s->capacity);
            return NULL;
        }
    } else if (s) atomic_fetch_add(&s->used, n);
    unsigned char *h;
    if (n >= MAP_MIN) {
        void *m = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        h = m == MAP_FAILED ? NULL : m;
        if (h) memcpy(h, &n, sizeof n);
    } else {
        h = aligned_alloc(64, n);
        if (h) memset(h, 0, n);
    }
    if (!h) {
        if (s) atomic_fetch_sub(&s->used, n);
        mtk_err_set(e, "cannot allocate %zu bytes of kernel memory", bytes);
        return NULL;
    }
    size_t counted = s ? n : 0;   /* what cpu_free gives back to the count */
    memcpy(h + sizeof n, &counted, sizeof counted);
    return h + HEADER;
}

void cpu_free(mtk *k, void *p)
{
    if (!p) return;
    unsigned char *h = (unsigned char *)p - HEADER;
    size_t len, n;
    memcpy(&len, h, sizeof len);
    memcpy(&n, h + sizeof n, sizeof n);
    cpu_state *s = k->impl;
    if (s && n) atomic_fetch_sub(&s->used, n);
    if (len) munmap(h, len);
    else free(h);
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

/* Element conversions between the storage dtypes (mt_base.h: round to nearest even). The bf16 loops
 * are branch-free so that they vectorize; fp16 goes element by element. */
MTK_CLONES void cpu_to_f32(float *dst, const void *src, mtk_dtype st, size_t n)
{
    if (st == MTK_F32) {
        if ((const void *)dst != src && n) memmove(dst, src, n * sizeof(float));
    } else if (st == MTK_BF16) {
        const uint16_t *h = src;
        for (size_t i = 0; i < n; i++) dst[i] = mt_bits_f32((uint32_t)h[i] << 16);
    } else {
        const uint16_t *h = src;
        for (size_t i = 0; i < n; i++) dst[i] = mt_f16_to_f32(h[i]);
    }
}

MTK_CLONES void cpu_from_f32(void *dst, mtk_dtype dt, const float *src, size_t n)
{
    if (dt == MTK_F32) {
        if (dst != (const void *)src && n) memmove(dst, src, n * sizeof(float));
    } else if (dt == MTK_BF16) {
        uint16_t *h = dst;
        for (size_t i = 0; i < n; i++) {
            uint32_t u = mt_f32_bits(src[i]);
            uint32_t r = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16, q = (u >> 16) | 0x40u;
            h[i] = (uint16_t)((u & 0x7fffffffu) > 0x7f800000u ? q : r);   /* NaN stays a quiet NaN */
        }
    } else {
        uint16_t *h = dst;
        for (size_t i = 0; i < n; i++) h[i] = mt_f32_to_f16(src[i]);
    }
}

enum { CONVERT_BLOCK = 1 << 15 };

void cpu_convert(mtk *k, void *dst, mtk_dtype dt, const void *src, mtk_dtype st, size_t n)
{
    (void)k;
    if (dt == st) {
        if (dst != src && n) memmove(dst, src, n * mtk_dtype_size(dt));
        return;
    }
    size_t nb = (n + CONVERT_BLOCK - 1) / CONVERT_BLOCK;
#pragma omp parallel for schedule(static) if (nb > 1)
    for (size_t b = 0; b < nb; b++) {
        size_t i0 = b * CONVERT_BLOCK, len = n - i0 < CONVERT_BLOCK ? n - i0 : CONVERT_BLOCK;
        if (dt == MTK_F32) {
            cpu_to_f32((float *)dst + i0, (const char *)src + i0 * 2, st, len);
        } else if (st == MTK_F32) {
            cpu_from_f32((char *)dst + i0 * 2, dt, (const float *)src + i0, len);
        } else {   /* bf16 <-> fp16 through fp32, a block at a time */
            float tmp[256];
            for (size_t j = 0; j < len; j += 256) {
                size_t m = len - j < 256 ? len - j : 256;
                cpu_to_f32(tmp, (const char *)src + (i0 + j) * 2, st, m);
                cpu_from_f32((char *)dst + (i0 + j) * 2, dt, tmp, m);
            }
        }
    }
}
