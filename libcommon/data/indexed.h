/* indexed.h: Megatron's mmap indexed dataset, <prefix>.bin + <prefix>.idx (man mt-formats.5).
 *
 * .idx layout, little-endian, no padding, arrays unaligned:
 *   0   9 bytes  magic "MMIDIDX\0\0"
 *   9   u64      version (1)
 *   17  u8       dtype code of the token ids in .bin (mt_dtype_*)
 *   18  u64      S = number of sequences
 *   26  u64      D = number of doc_idx entries = documents + 1
 *   34  i32[S]   sizes (tokens per sequence)
 *       i64[S]   pointers (byte offset of each sequence in .bin)
 *       i64[D]   doc_idx (doc_idx[0] = 0, non-decreasing, doc_idx[D-1] = S)
 *       i8[S]    modes, optional (multimodal datasets only)
 * .bin is the raw concatenation of all sequences in the dtype.
 *
 * The reader validates everything before anything is read through it (any byte string is safe to
 * open); errors name the file and the byte offset or index of the first problem. The builder writes
 * both files through io/atomic.h: nothing appears under the final names until both are complete.
 */
#ifndef MT_DATA_INDEXED_H
#define MT_DATA_INDEXED_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "io/atomic.h"
#include "io/mapfile.h"
#include "util/err.h"
#include "util/vec.h"

#define MT_IDX_MAGIC "MMIDIDX\0\0"
#define MT_IDX_MAGIC_LEN 9
#define MT_IDX_HEADER 34

enum {
    MT_DTYPE_UINT8 = 1,
    MT_DTYPE_INT8 = 2,
    MT_DTYPE_INT16 = 3,
    MT_DTYPE_INT32 = 4,
    MT_DTYPE_INT64 = 5,
    MT_DTYPE_UINT16 = 8,
};

/* Bytes per item for a supported dtype code, 0 for any other code (including the ambiguous 6/7). */
size_t mt_dtype_size(int code);
/* "uint16", ...; "float64/float32 (ambiguous)" for 6/7; "unknown" otherwise. */
const char *mt_dtype_name(int code);
/* Megatron's DType.optimal_dtype: uint16 when vocab_size < 65500, else int32. */
int mt_dtype_for_vocab(uint64_t vocab_size);
/* Item i of an array of the given dtype, little-endian, sign-extended. */
int64_t mt_dtype_get(int code, const unsigned char *p, uint64_t i);

/* ---------------------------------------------------------------------------------------------- */
/* Reader. */

typedef struct mt_indexed {
    char *name;                /* prefix, used in messages */
    mt_map idx_map, bin_map;   /* when opened from files */
    const unsigned char *idx;  /* the whole .idx */
    size_t idx_size;
    const unsigned char *bin;  /* the whole .bin (NULL when empty or parsed without data) */
    uint64_t bin_size;
    int dtype;
    size_t itemsize;
    uint64_t n_seqs;   /* S */
    uint64_t n_docs;   /* D - 1 */
    uint64_t n_tokens; /* sum of sizes */
    bool has_modes;
    int32_t min_len, max_len; /* over sequences; 0/0 when S == 0 */
} mt_indexed;

/* Maps <prefix>.idx and <prefix>.bin and validates them. */
int mt_indexed_open(mt_indexed *d, const char *prefix, mt_err *e);
/* Validates an index held in memory; bin may be NULL (then only bin_size is checked, and sequence
 * data must not be read). name is used in messages as "<name>.idx". The buffers must outlive d. */
int mt_indexed_parse(mt_indexed *d, const char *name, const void *idx, size_t idx_size, const void *bin,
                     uint64_t bin_size, mt_err *e);
void mt_indexed_close(mt_indexed *d);

/* Accessors; indices must be in range (i < n_seqs, j <= n_docs). */
int32_t mt_indexed_seq_len(const mt_indexed *d, uint64_t i);
uint64_t mt_indexed_seq_offset(const mt_indexed *d, uint64_t i); /* byte offset in .bin */
uint64_t mt_indexed_doc_idx(const mt_indexed *d, uint64_t j);    /* doc_idx[j] */
int mt_indexed_mode(const mt_indexed *d, uint64_t i);            /* 0 without modes */
/* Token k of sequence i. */
int64_t mt_indexed_token(const mt_indexed *d, uint64_t i, uint64_t k);
/* All tokens of document j (its sequences concatenated), replacing out. -1 when a value does not fit
 * an unsigned 32-bit id (negative, or too large). */
int mt_indexed_doc_ids(const mt_indexed *d, uint64_t j, mt_ids *out, mt_err *e);

/* ---------------------------------------------------------------------------------------------- */
/* Builder (Megatron's IndexedDatasetBuilder). */

typedef struct mt_idx_builder {
    char *prefix;
    char *dtype_from; /* dataset whose dtype the output took (merge), for messages; may be NULL */
    int dtype;
    size_t itemsize;
    bool multimodal;
    mt_out bin, idx;
    bool active;    /* temp files exist */
    bool prepared;  /* .idx written, waiting for commit */
    int32_t *sizes;
    size_t n_sizes, cap_sizes;
    int64_t *doc_idx;
    size_t n_doc_idx, cap_doc_idx;
    int8_t *modes;
    size_t cap_modes;
    uint64_t bin_bytes;
    mt_buf scratch;
} mt_idx_builder;

/* Creates the temporary <prefix>.bin. dtype: a code with mt_dtype_size() != 0. multimodal: also
 * record a modes array (written after doc_idx). */
int mt_idxb_open(mt_idx_builder *b, const char *prefix, int dtype, bool multimodal, mt_err *e);
/* One document made of one sequence (Megatron add_document(tokens, [len(tokens)])). A document with
 * no tokens adds no sequence, only a doc_idx entry (as core does for an empty document). Ids that do
 * not fit the dtype are an error. */
int mt_idxb_add_doc(mt_idx_builder *b, const uint32_t *ids, size_t n, mt_err *e);
/* add_document(tokens, lengths): one sequence per length; the lengths must sum to n. */
int mt_idxb_add_seqs(mt_idx_builder *b, const uint32_t *ids, size_t n, const int32_t *lengths, size_t n_lengths,
                     mt_err *e);
/* add_index(other): same dtype required; sizes concatenated, doc_idx offset, .bin bytes appended
 * verbatim (tools/merge_datasets.py). A multimodal builder requires other to have modes; otherwise
 * other's modes are dropped. */
int mt_idxb_append(mt_idx_builder *b, const mt_indexed *other, mt_err *e);
/* Writes the temporary .idx and flushes both (errors such as a full disk show up here). */
int mt_idxb_prepare(mt_idx_builder *b, mt_err *e);
/* Renames .bin then .idx onto their final names. If the .idx rename fails the new .bin is removed. */
int mt_idxb_commit(mt_idx_builder *b, mt_err *e);
/* prepare + commit. */
int mt_idxb_finalize(mt_idx_builder *b, mt_err *e);
/* Removes the temporary files (if any) and frees b. Safe after a failed call and after commit. */
void mt_idxb_abort(mt_idx_builder *b);

uint64_t mt_idxb_sequences(const mt_idx_builder *b);
uint64_t mt_idxb_documents(const mt_idx_builder *b);
uint64_t mt_idxb_tokens(const mt_idx_builder *b);

#endif
