/* fuzz_indexed.c: Megatron's .idx/.bin pair ("idx" FZ_SEP "bin"): validated in memory (each part in a
 * buffer of its own size, so that a read past either shows) and from files, then every document's tokens
 * read through the accessors the validation vouches for. */
#include "fuzz.h"

#include "data/indexed.h"

static void walk(const mt_indexed *d)
{
    mt_ids ids = {0};
    mt_err e;
    for (uint64_t j = 0; j < d->n_docs; j++) mt_indexed_doc_ids(d, j, &ids, &e);
    for (uint64_t i = 0; i < d->n_seqs; i++) (void)mt_indexed_mode(d, i);
    mt_ids_free(&ids);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fz_part p[2];
    fz_split(data, size, p, 2);
    void *idx = malloc(p[0].n ? p[0].n : 1), *bin = malloc(p[1].n ? p[1].n : 1);
    memcpy(idx, p[0].p, p[0].n);
    memcpy(bin, p[1].p, p[1].n);
    mt_indexed d;
    mt_err e;
    if (!mt_indexed_parse(&d, "x", idx, p[0].n, p[1].n ? bin : NULL, p[1].n, &e)) {
        if (p[1].n) walk(&d);
        mt_indexed_close(&d);
    } else {
        fz_refused(&e);
    }
    free(idx);
    free(bin);
    fz_write("d.idx", p[0].p, p[0].n);
    fz_write("d.bin", p[1].p, p[1].n);
    char prefix[4200];
    snprintf(prefix, sizeof prefix, "%s", fz_path("d"));
    if (!mt_indexed_open(&d, prefix, &e)) {
        walk(&d);
        mt_indexed_close(&d);
    }
    return 0;
}
