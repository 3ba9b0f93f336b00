/* pretok.h: the pre-tokenizers, hand-written scanners equivalent to the regexes of byte-level BPE
 * tokenizers, applied leftmost-first as tiktoken and HF tokenizers do. GPT-2's
 *   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 * and the families that followed it (mt_pattern below), recognised from their regex source so that an
 * unknown pattern is refused rather than approximated. Pieces are returned one at a time so the caller
 * needs no storage. */
#ifndef MT_TOK_PRETOK_H
#define MT_TOK_PRETOK_H

#include <stddef.h>

typedef enum {
    MT_PAT_GPT2,     /* GPT-2, r50k, p50k, GPT-NeoX (HF ByteLevel with use_regex) */
    MT_PAT_CL100K,   /* tiktoken cl100k_base: (?i) contractions, [^\r\n\p{L}\p{N}]?\p{L}+, \p{N}{1,3}, \s++$ */
    MT_PAT_LLAMA3,   /* Llama 3's Split regex: cl100k's without \s++$ */
    MT_PAT_QWEN2,    /* Qwen2's Split regex: Llama 3's with single digits */
    MT_PAT_O200K,    /* tiktoken o200k_base: case-aware words with contraction suffixes, [\r\n/]* */
    MT_PAT_TIKTOKEN_V1, /* Megatron's --tiktoken-pattern v1: cl100k-like, no contractions, single digits */
    MT_PAT_TIKTOKEN_V2, /* Megatron's --tiktoken-pattern v2: o200k-like, no contractions, single digits */
    MT_PAT_COUNT
} mt_pattern;

/* Short name of a pattern family ("gpt2", "cl100k", "llama3", "qwen2", "o200k", "v1", "v2"). */
const char *mt_pattern_name(mt_pattern p);
/* The family whose regex source is exactly re (as written in tiktoken, Megatron or a tokenizer.json),
 * or -1 for a pattern mt does not know. */
int mt_pattern_from_regex(const char *re);
/* The family of a short name (mt_pattern_name), or -1. */
int mt_pattern_from_name(const char *name);

/* End (exclusive) of the piece that starts at s[pos], pos < len, under GPT-2's pattern. s should be
 * valid UTF-8; an invalid byte sequence is treated as one "other" character per maximal subpart, so the
 * scan always moves forward and never reads past len. */
size_t mt_pretok_next(const char *s, size_t len, size_t pos);
/* The same for any family. */
size_t mt_pretok_next_pat(mt_pattern p, const char *s, size_t len, size_t pos);

#endif
