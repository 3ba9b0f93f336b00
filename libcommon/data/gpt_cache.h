/* gpt_cache.h: the on-disk cache of GPT index arrays, with a description that decides staleness.
 *
 * Files are written under Megatron-Core's names (megatron_desc.h), so that Megatron given the same
 * --data-cache-path loads them and mt loads Megatron's:
 *   {md5}-GPTDataset-train-description.txt      (Megatron's description, its md5 the name)
 *   {md5}-GPTDataset-train-document_index.npy   (and -sample_index.npy, -shuffle_index.npy)
 *   {md5}-GPTDataset-train-mt_description.json  (mt's own description, which Megatron ignores)
 * mt's description (JSON) lists every parameter, the dataset fingerprint (.idx size and mtime, sequence
 * count, hash of the sizes array) and the shapes/dtypes of the arrays. A cache is used only when its
 * description.txt is byte-identical to the one this build would write, its mt description (when there is
 * one: Megatron writes none) too, and every array validates; anything else is rebuilt, except arrays
 * that match their description but do not hold together (an error). The arrays are written first, then
 * the mt description, and description.txt last, each atomically, so a crash leaves no description
 * pointing at missing or partial arrays.
 *
 * Caches under the earlier names are still loaded (never written), with mt's description deciding:
 *   corpus-train-{n}ns-{L}sl-{seed}s-{h}-description.json  (and -document_index.npy, ...)
 * {n} the requested sample count ("all" for one epoch), {h} 8 hex digits of a hash of the path, split
 * string and range, E and drop_last.
 */
#ifndef MT_DATA_GPT_CACHE_H
#define MT_DATA_GPT_CACHE_H

#include <stdbool.h>
#include <stdint.h>

#include "data/gpt_index.h"
#include "util/err.h"

typedef struct mt_dataset_fp {
    uint64_t idx_size;     /* bytes of <prefix>.idx */
    int64_t idx_mtime_ns;  /* its modification time */
    uint64_t n_seq;        /* sequences */
    uint64_t sizes_hash;   /* mt_sizes_hash of the sizes array */
} mt_dataset_fp;

uint64_t mt_sizes_hash(const int32_t *sizes, size_t n);
/* Stats idx_path (may be NULL: size/mtime 0) and hashes sizes. */
int mt_dataset_fingerprint(const char *idx_path, const int32_t *sizes, size_t n, mt_dataset_fp *fp, mt_err *e);

typedef struct mt_gpt_cache_key {
    const char *dataset_path; /* the data prefix as given */
    int split_index;          /* MT_SPLIT_TRAIN/VALID/TEST */
    const char *split_string; /* --split as given */
    int64_t lo, hi;           /* the split's sequence range */
    mt_gpt_index_params params;
    mt_dataset_fp fp;
    const char *vocab_file, *merge_file; /* the GPT2BPETokenizer's files as given; NULL: no tokenizer */
} mt_gpt_cache_key;

/* MT_CACHE_MT: mt's description beside Megatron's (NULL under the earlier names, where MT_CACHE_DESC is it). */
enum { MT_CACHE_DESC, MT_CACHE_DOC, MT_CACHE_SAMPLE, MT_CACHE_SHUFFLE, MT_CACHE_MT, MT_CACHE_NFILES };

/* Malloc'd paths of the files under dir: Megatron's names, or (legacy) the earlier ones. */
void mt_gpt_cache_paths(const char *dir, const mt_gpt_cache_key *k, char *paths[MT_CACHE_NFILES]);
void mt_gpt_cache_paths_legacy(const char *dir, const mt_gpt_cache_key *k, char *paths[MT_CACHE_NFILES]);
/* Megatron's description.txt for a key (malloc'd, no trailing newline). */
char *mt_gpt_cache_megatron_description(const mt_gpt_cache_key *k);
void mt_gpt_cache_paths_free(char *paths[MT_CACHE_NFILES]);
/* The JSON description for a key and its plan (malloc'd, ends with '\n'). */
char *mt_gpt_cache_description(const mt_gpt_cache_key *k, const mt_gpt_plan *plan);

/* Loads a valid cache into out (mapped, read-only). *hit false (and 0 returned) when absent or stale;
 * *why then says why ("no description", "description differs", "...npy: ..."). -1 only on errors
 * that rebuilding cannot fix: a bad plan, or arrays that match their description but do not hold
 * together (mt_gpt_index_check: entries outside the split, a shuffle index that is no permutation),
 * which means a damaged or edited cache; the message names the file. */
int mt_gpt_cache_load(const char *dir, const mt_gpt_cache_key *k, const int32_t *sizes, size_t n_seq,
                      mt_gpt_index *out, bool *hit, char *why, size_t why_cap, mt_err *e);
int mt_gpt_cache_save(const char *dir, const mt_gpt_cache_key *k, const mt_gpt_index *ix, mt_err *e);

/* Load if valid, else build and save (when dir is non-NULL). *cached tells which happened. */
int mt_gpt_index_get(const char *dir, const mt_gpt_cache_key *k, const int32_t *sizes, size_t n_seq,
                     mt_gpt_index *out, bool *cached, mt_err *e);

#endif
