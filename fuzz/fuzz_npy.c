/* fuzz_npy.c: a .npy file (mt-shuffle's and mt-train's index caches, Megatron's): opened and validated,
 * checked against the shapes the caches use, and every data byte it vouches for read. */
#include "fuzz.h"

#include "io/npy.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *path = fz_write("a.npy", data, size);
    mt_npy v;
    mt_err e;
    if (mt_npy_open(&v, path, &e)) return fz_refused(&e);
    const int64_t any[2] = {-1, -1}, pairs[2] = {-1, 2};
    mt_npy_expect(&v, path, "<i4", 1, any, &e);
    mt_npy_expect(&v, path, "<i8", 2, pairs, &e);
    unsigned sum = 0;
    const unsigned char *b = v.data;
    for (int64_t i = 0; b && i < v.count * v.itemsize; i++) sum += b[i];
    if (v.data_offset + (size_t)(v.count * v.itemsize) != v.map.size) abort(); /* the data fill the file */
    mt_npy_close(&v);
    return (int)(sum & 0);
}
