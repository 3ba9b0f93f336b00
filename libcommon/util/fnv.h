/* fnv.h: the 64-bit FNV-1a hash, for names and tags that must not change between runs or hosts (cache file
 * names, temporary-name host tags, the messages ranks compare); not for hash tables on hot paths. */
#ifndef MT_UTIL_FNV_H
#define MT_UTIL_FNV_H

#include <stddef.h>
#include <stdint.h>

#define MT_FNV1A_INIT 0xcbf29ce484222325ull

/* h continued over the n bytes at p (start with MT_FNV1A_INIT) */
static inline uint64_t mt_fnv1a(uint64_t h, const void *p, size_t n)
{
    const unsigned char *c = p;
    for (size_t i = 0; i < n; i++) h = (h ^ c[i]) * 0x100000001b3ull;
    return h;
}

/* the hash of a NUL-terminated string (without its NUL) */
static inline uint64_t mt_fnv1a_str(const char *s)
{
    uint64_t h = MT_FNV1A_INIT;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 0x100000001b3ull;
    return h;
}

#endif
