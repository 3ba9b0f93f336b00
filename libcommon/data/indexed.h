/* indexed.h: Megatron's MMIDIDX indexed dataset (<prefix>.bin + <prefix>.idx): a validating reader, a
 * streaming writer, and merging, byte-compatible with Megatron-LM (layout in man mt-formats.5).
 *
 * The reader checks every field and array of the .idx against the file sizes before anything is used,
 * so a truncated, foreign or inconsistent dataset is an error naming the file and offset, never an
 * out-of-bounds read. The .idx arrays are not aligned in the file; read them through the accessors.
 */
#ifndef MT_DATA_INDEXED_H
#define MT_DATA_INDEXED_H

#include <stdbool.h>
#include <stdint.h>

#include "io/atomic.h"
#include "io/mapfile.h"
#include "util/err.h"

#define MT_IDX_MAGIC "MMIDIDX\0\0"
#define MT_IDX_HEADER 34
#define MT_DTYPE_UINT16 8
#define MT_DTYPE_INT32 4

typedef struct mt_indexed {
    mt_map idx, bin;
    uint8_t dtype;      /* Megatron dtype code */
    uint32_t itemsize;  /* bytes per token */
    uint64_t n_seq;     /* S: sequences */
    uint64_t n_doc_idx; /* D: documents + 1 */
    bool has_modes;     /* trailing multimodal mode array */
    uint64_t n_tokens;  /* sum of sizes */
    const unsigned char *sizes, *pointers, *doc_idx; /* into idx */
} mt_indexed;

/* Itemsize of a dtype code (1..5, 8), or 0 for codes mt does not accept (6 and 7 are ambiguous). */
uint32_t mt_dtype_itemsize(uint8_t code);
const char *mt_dtype_name(uint8_t code);

/* Opens and validates <prefix>.idx and <prefix>.bin. */
int mt_indexed_open(mt_indexed *ds, const char *prefix, mt_err *e);
void mt_indexed_close(mt_indexed *ds);

int32_t mt_indexed_size(const mt_indexed *ds, uint64_t i);     /* tokens in sequence i */
int64_t mt_indexed_pointer(const mt_indexed *ds, uint64_t i);  /* byte offset of sequence i in .bin */
int64_t mt_indexed_doc_idx(const mt_indexed *ds, uint64_t i);  /* i < n_doc_idx */
/* An aligned copy of the sizes array (caller frees), for index building over all sequences. */
int32_t *mt_indexed_sizes_copy(const mt_indexed *ds);
/* Copies tokens [from, from+n) of sequence i, widened to uint32 (negative ids of signed types wrap). */
void mt_indexed_tokens(const mt_indexed *ds, uint64_t i, uint64_t from, uint64_t n, uint32_t *out);

/* Writer: tokens go straight to a temp .bin; sizes and the document index stay in memory until
 * mt_indexed_writer_finish writes the .idx and renames both into place. */
typedef struct mt_indexed_writer {
    mt_out bin;
    char *prefix;
    uint8_t dtype;
    uint32_t itemsize;
    int32_t *sizes;
    int64_t *doc_idx;
    uint64_t n_seq, cap_seq, n_doc, cap_doc, bin_bytes;
    unsigned char *scratch;
    size_t scratch_cap;
} mt_indexed_writer;

int mt_indexed_writer_open(mt_indexed_writer *w, const char *prefix, uint8_t dtype, mt_err *e);
/* One document of one sequence (Megatron core's add_document with a single length). A document of 0
 * tokens is kept as an empty document (a repeated doc_idx value), as core does. */
int mt_indexed_writer_add(mt_indexed_writer *w, const uint32_t *ids, uint64_t n, mt_err *e);
/* Appends a whole dataset (tools/merge_datasets.py's add_index): same dtype required. */
int mt_indexed_writer_append(mt_indexed_writer *w, const mt_indexed *ds, mt_err *e);
int mt_indexed_writer_finish(mt_indexed_writer *w, mt_err *e);
void mt_indexed_writer_abort(mt_indexed_writer *w);

#endif
