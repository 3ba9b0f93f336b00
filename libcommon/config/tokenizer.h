/* tokenizer.h: the tokenizer factory: the tokenizer that mt-train's --tokenizer-type and files name
 * (GPT-2 BPE, a tokenizer.json, a tiktoken or Megatron ranks file, or NullTokenizer), opened the same way
 * by mt-train, its dry run and every program that opens a checkpoint (ckpt/open_model.h), and the ids it
 * gives a text as Megatron's tokenizer of the same type gives them.
 */
#ifndef MT_CONFIG_TOKENIZER_H
#define MT_CONFIG_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "config/train_args.h"
#include "tok/bpe.h"
#include "util/err.h"

/* A tokenizer as mt-train's --tokenizer-type names it: bpe is NULL for NullTokenizer (ids 0..n-1, end
 * of document n, so vocab_size n + 1). eod is -1 where the tokenizer has no end of document. */
typedef struct mt_tokenizer {
    mt_bpe *bpe;
    int64_t vocab_size, eod;
    bool hf;   /* HuggingFaceTokenizer: texts are encoded with its added tokens and post-processor */
} mt_tokenizer;

/* Whether --tokenizer-type type is read from the file of --tokenizer-model: HuggingFaceTokenizer and
 * TikTokenizer (type NULL is GPT2BPETokenizer: no). */
int mt_tokenizer_reads_model(const char *type);

/* The tokenizer of the args' --tokenizer-type (NULL: GPT2BPETokenizer) and files: GPT2BPETokenizer from
 * vocab_file and merge_file; HuggingFaceTokenizer from the tokenizer.json of tokenizer_model (its
 * directory or the file) and TikTokenizer from the ranks file tokenizer_model (with tiktoken_pattern),
 * both with every id of the tokenizer as the vocabulary (vocab_size when larger: the rows of a converted
 * model) and as eod the eos_token of tokenizer_config.json or <|endoftext|> (as Megatron's tokenizers
 * define eod; -1 without one); NullTokenizer of vocab_size. With vocab_only (the caller encodes no text),
 * a HuggingFaceTokenizer or TikTokenizer whose vocab_size is given is not read (bpe NULL, eod -1).
 * What is not supported (a SentencePiece tokenizer.json, for example) is an error naming the type and
 * the file. 0, or -1 with e set. */
int mt_tokenizer_open(mt_tokenizer *t, const mt_train_args *a, bool vocab_only, mt_err *e);
/* Appends the ids of text as Megatron's tokenizer of this type makes them for training and scoring:
 * GPT-2 and TikTokenizer the plain BPE (special tokens as text); HuggingFaceTokenizer as
 * tokenizer(text).input_ids (added tokens, and the post-processor's ids such as Llama 3's BOS). Returns
 * how many ids were put before the text's own (the BOS: 0 or 1). */
size_t mt_tokenizer_encode(const mt_tokenizer *t, mt_bpe_ctx *c, const char *text, size_t len, mt_ids *out);
void mt_tokenizer_close(mt_tokenizer *t);

#endif
