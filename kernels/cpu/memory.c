/* memory.c: cpu backend memory: device buffers are 64-byte aligned, zero-filled host allocations. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu.h"

static size_t round64(size_t n) { return n ? (n + 63) / 64 * 64 : 64; }

void *cpu_alloc(mtk *k, size_t bytes, mt_err *e)
{
    (void)k;
    if (bytes > SIZE_MAX - 64) {
        mt_err_set(e, "cannot allocate %zu bytes", bytes);
        return NULL;
    }
    size_t n = round64(bytes);
    void *p = aligned_alloc(64, n);
    if (!p) {
        mt_err_set(e, "cannot allocate %zu bytes of kernel memory", bytes);
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

void cpu_sync(mtk *k) { (void)k; }

float *cpu_scratch(size_t nfloats)
{
    void *p = aligned_alloc(64, round64(nfloats * sizeof(float)));
    if (!p) {
        fprintf(stderr, "kernels: out of memory for %zu floats of scratch\n", nfloats);
        abort();
    }
    return p;
}
