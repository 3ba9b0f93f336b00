/* bpe.h: byte-level BPE tokenizer (GPT-2 and any vocab.json + merges.txt of the same format; a Hugging
 * Face tokenizer.json of the byte-level BPE kind; a tiktoken ranks file).
 *
 * Semantics are those of tiktoken's encode_ordinary and HF tokenizers' ByteLevel BPE
 * (add_prefix_space=False): pre-tokenization by the GPT-2 pattern
 *   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 * with Unicode 16 General_Category and White_Space tables, then byte-level BPE merges by merge rank
 * inside each piece. Token ids come from vocab.json (not assumed to be 256 + merge rank).
 *
 * An mt_bpe is immutable after loading and shared by all threads; each thread encodes through its own
 * mt_bpe_ctx (piece cache and scratch space).
 */
#ifndef MT_TOK_BPE_H
#define MT_TOK_BPE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util/err.h"
#include "util/vec.h"

typedef struct mt_bpe mt_bpe;
typedef struct mt_bpe_ctx mt_bpe_ctx;

/* Loads vocab.json (a JSON object string -> id) and merges.txt ("#version" header line optional, then
 * one "a b" pair per line; merge i has rank i, a pair repeated later keeps its first rank). Errors name
 * the file and line: a malformed line, a merge whose parts or result are not in the vocabulary, a
 * vocabulary without all 256 byte symbols, duplicate ids, ids >= 2^28. */
int mt_bpe_load(mt_bpe **out, const char *vocab_path, const char *merges_path, mt_err *e);
/* Loads a tokenizer.json (path is the file or its directory) of the byte-level BPE kind: model BPE
 * (vocab, merges as "a b" or [a, b], ignore_merges), normalizer none or NFC (nfc.h), pre-tokenizer
 * ByteLevel or Split(known regex) + ByteLevel (see pretok.h), added tokens (with the ids HF tokenizers
 * gives them, which need not be those written in the file: see bpe_load_hf.c), TemplateProcessing; eod is
 * the eos_token of the tokenizer_config.json beside it (-1 without one). Anything else (other models,
 * other normalizers, byte_fallback, unknown regexes) is an error naming the file. */
int mt_bpe_load_hf(mt_bpe **out, const char *path, mt_err *e);
/* Loads a tiktoken ranks file ("base64 rank" lines; a token or a rank listed twice is an error naming
 * both lines, where tiktoken would keep the token's later rank). pattern is a pattern name (mt_pattern_name:
 * "cl100k", "o200k", "v1", "v2", "llama3", ...) or NULL to recognise cl100k_base and o200k_base by their
 * rank count; their special tokens come with them, and eod is <|endoftext|> when there is one. */
int mt_bpe_load_tiktoken(mt_bpe **out, const char *path, const char *pattern, mt_err *e);
/* Megatron's --tokenizer-type TikTokenizer (Megatron-LM's CustomTikTokenizer). path is Megatron's JSON
 * list of ranks ([{"rank": r, "token_bytes": base64, "token_str": ...}, ...]: entry r has rank r, the first
 * 256 are the single bytes in byte order; read with the checks Megatron asserts, errors naming the file
 * and entry) or a tiktoken file of "base64 rank" lines. With num_special > 0 (Megatron; its default
 * 1000), ids 0..num_special-1 are special tokens: the n_special given (NULL: <unk> <s> </s>; they must
 * include those three) then <SPECIAL_i> fillers; the ranks below vocab_size - num_special follow, rank r
 * as id num_special + r, and the ids fill exactly 0..vocab_size-1 (vocab_size 0: Megatron's default
 * 131072; fewer ranks is an error saying which --vocab-size fits the file); eod is </s>. With
 * num_special 0 (not a Megatron value: its minimum is 3), the ids are the ranks as tiktoken's own
 * Encoding numbers them, as mt_bpe_load_tiktoken, and vocab_size is not used here. pattern as for
 * mt_bpe_load_tiktoken. */
#define MT_TIKTOKEN_NUM_SPECIAL_DEFAULT 1000
#define MT_TIKTOKEN_VOCAB_DEFAULT 131072
typedef struct mt_tiktoken_opts {
    const char *pattern;         /* --tiktoken-pattern, or NULL */
    int64_t num_special;         /* --tiktoken-num-special-tokens */
    const char *const *special;  /* --tiktoken-special-tokens, or NULL */
    int n_special;
    int64_t vocab_size;          /* --vocab-size, or 0 */
} mt_tiktoken_opts;
int mt_bpe_load_tiktoken_megatron(mt_bpe **out, const char *path, const mt_tiktoken_opts *o, mt_err *e);
void mt_bpe_free(mt_bpe *b);
/* Name of the pre-tokenizer pattern ("gpt2", "cl100k", "llama3", ...). */
const char *mt_bpe_pattern_name(const mt_bpe *b);

/* Number of entries in vocab.json (GPT-2: 50257); ids are < mt_bpe_id_limit(). */
uint32_t mt_bpe_vocab_size(const mt_bpe *b);
uint32_t mt_bpe_id_limit(const mt_bpe *b); /* 1 + largest id */
/* Id of a vocabulary entry given by its vocab.json spelling (e.g. "<|endoftext|>"), or -1. A linear
 * search: look up once, not per token. */
int64_t mt_bpe_lookup(const mt_bpe *b, const char *token);
/* The end-of-document id: "<|endoftext|>" if present, else -1. */
int64_t mt_bpe_eod(const mt_bpe *b);

mt_bpe_ctx *mt_bpe_ctx_new(const mt_bpe *b);
void mt_bpe_ctx_free(mt_bpe_ctx *c);

/* Appends the ids of text[0..len) to out. text should be valid UTF-8 (see mt_utf8_sanitize); invalid
 * bytes are still encoded (as "other" characters, one per maximal invalid subpart) and decode back to
 * themselves. Special tokens are plain text (tiktoken encode_ordinary, Megatron). */
void mt_bpe_encode(mt_bpe_ctx *c, const char *text, size_t len, mt_ids *out);
/* As mt_bpe_encode, but literal special tokens (vocab entries that are neither a byte nor a merge
 * result, e.g. "<|endoftext|>") map to their ids, as HF GPT2TokenizerFast does. */
void mt_bpe_encode_special(mt_bpe_ctx *c, const char *text, size_t len, mt_ids *out);

/* tokenizer.json's own encoding of a text: added tokens split the text first (leftmost, longest; those
 * not normalized, then, in each piece between them once the normalizer has run on it, the normalized
 * ones), the rest is encoded as mt_bpe_encode does. */
void mt_bpe_encode_added(mt_bpe_ctx *c, const char *text, size_t len, mt_ids *out);
/* As mt_bpe_encode_added, between the ids the post-processor puts around a single sequence (Llama 3's
 * <|begin_of_text|>): what transformers' tokenizer(text).input_ids gives, and so Megatron's
 * HuggingFaceTokenizer. */
void mt_bpe_encode_full(mt_bpe_ctx *c, const char *text, size_t len, mt_ids *out);
/* How many ids mt_bpe_encode_full puts before the text (1 for Llama 3's <|begin_of_text|>, else 0). */
size_t mt_bpe_prefix_len(const mt_bpe *b);

/* Appends the bytes of ids to out (the exact inverse of encoding on valid UTF-8; the output may be
 * invalid UTF-8 when ids cut a character). Returns -1 with e set on an id outside the vocabulary. */
int mt_bpe_decode(const mt_bpe *b, const uint32_t *ids, size_t n, mt_buf *out, mt_err *e);
/* Bytes of one token; NULL for an id outside the vocabulary. A spelling made of byte symbols stands
 * for those bytes; any other spelling (possible for special tokens) for its own UTF-8. */
const char *mt_bpe_token_bytes(const mt_bpe *b, uint32_t id, size_t *len);

/* UTF-8 validation. Returns the byte offset of the first invalid sequence, or len if all valid. */
size_t mt_utf8_check(const char *s, size_t len);
/* Copies s to out replacing each maximal invalid subpart by U+FFFD (Python errors='replace').
 * Returns the number of replacements. */
size_t mt_utf8_sanitize(const char *s, size_t len, mt_buf *out);

#endif
