/* megatron_desc.h: Megatron-Core's dataset descriptions and the cache names derived from them.
 *
 * Megatron-Core names a GPTDataset's index cache files "<md5>-GPTDataset-<split>-<what>" and a
 * BlendedDataset's "<md5>-BlendedDataset-<split>-<what>", md5 being the hex MD5 of the description:
 * json.dumps(unique_identifiers, indent=4) of an ordered dict (spec 3.11). GPT keys in order: class,
 * dataset_path, num_samples (null for one epoch), index_split, random_seed, sequence_length, split,
 * split_matrix (the normalized bookends, the first an integer 0; null for a zero-width split) and
 * tokenizer ({"class": "_GPT2BPETokenizer", "tokenizer_path": [vocab, merges]} as v0.13 builds it, null
 * when no tokenizer is known). Blend keys: class, datasets (the GPT dicts), split, weights, size. Text
 * is written as Python's json writes it (ASCII only, \uXXXX escapes, floats as Python's repr), so the
 * same parameters give Megatron's bytes, hash and file names.
 */
#ifndef MT_DATA_MEGATRON_DESC_H
#define MT_DATA_MEGATRON_DESC_H

#include <stdint.h>

#include "util/vec.h"

typedef struct mt_megatron_gpt_id {
    const char *dataset_path;
    int64_t num_samples;       /* < 0: None (one epoch) */
    int split_index;           /* MT_SPLIT_* */
    uint32_t seed;
    int32_t seq_length;
    const char *split_string;
    const char *vocab_file, *merge_file; /* both set: _GPT2BPETokenizer; else the tokenizer is null */
} mt_megatron_gpt_id;

/* Python's json.dumps of a str (ensure_ascii; bytes that are not UTF-8 as the surrogates Python's
 * argv decoding gives them) and Python's repr of a float. */
void mt_pyjson_string(mt_buf *b, const char *s);
void mt_pyjson_float(mt_buf *b, double x);

/* The GPTDataset description (malloc'd, no trailing newline, as Megatron writes description.txt). */
char *mt_megatron_gpt_description(const mt_megatron_gpt_id *id);
/* The BlendedDataset description of n components with weights w (as BlendedDataset holds them) and size. */
char *mt_megatron_blend_description(const mt_megatron_gpt_id *ids, int n, int split_index, const double *w,
                                    int64_t size);
/* "<dir>/<md5 of desc>-<cls>-<split>-" (malloc'd): the common start of the cache file names. */
char *mt_megatron_cache_base(const char *dir, const char *desc, const char *cls, int split_index);

#endif
