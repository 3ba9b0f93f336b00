/* fuzz_safetensors.c: a safetensors file (checkpoints, Hugging Face models): opened and validated, then
 * every tensor found by name and every float tensor widened to float32 in a buffer of exactly its size. */
#include "fuzz.h"

#include "io/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *path = fz_write("m.safetensors", data, size);
    mt_st_file f;
    mt_err e;
    if (mt_st_open(&f, path, &e)) return fz_refused(&e);
    for (int i = 0; i < f.n; i++) {
        const mt_st_info *t = &f.t[i];
        if (mt_st_find(&f, t->name) != t) abort();
        if (t->begin + t->nbytes > f.map.size - 8 - f.header_len) abort(); /* inside the buffer */
        float *dst = malloc((size_t)(t->numel ? t->numel : 1) * sizeof(float));
        if (t->dtype == MT_ST_F32 && mt_st_to_f32(t, dst)) abort();
        mt_st_to_f32(t, dst);
        free(dst);
    }
    mt_st_meta(&f, "format");
    mt_st_close(&f);
    return 0;
}
