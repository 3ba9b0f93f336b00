/* fuzz_tokstream.c: mt-index's input, the binary token stream (man mt-formats.5), read as a file through
 * the reader that also takes zstd: the header, then every record up to the trailer or the first error. */
#include "fuzz.h"

#include "data/tokstream.h"
#include "io/reader.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *path = fz_write("stream", data, size);
    mt_reader *r;
    mt_err e;
    if (mt_reader_open(&r, path, &e)) abort(); /* a regular file just written opens */
    mt_toks_header h;
    memset(&h, 0, sizeof h);
    if (!mt_toks_read_header(r, &h, &e)) {
        mt_toks_state st = {0};
        mt_ids ids = {0};
        uint32_t key;
        int rc;
        while ((rc = mt_toks_next(r, &h, &st, &key, &ids, &e)) == 1) {
            if (key >= h.n_keys) abort();
            for (size_t i = 0; i < ids.n; i++)
                if (ids.p[i] >= h.vocab_size && h.vocab_size) abort();
        }
        if (rc < 0) fz_refused(&e);
        mt_ids_free(&ids);
        mt_toks_header_free(&h);
    } else {
        fz_refused(&e);
    }
    mt_reader_close(r);
    return 0;
}
