/* flags.h: one table per program drives flag parsing, --help text and error messages.
 *
 * Flags are GNU long options in Megatron's spelling: "--name value" or "--name=value"; MT_F_STRS takes
 * one or more values up to the next "--flag" (argparse nargs='+'). Arguments not starting with "--"
 * (and everything after a bare "--") are positional. "-" alone is positional (stdin). "-h"/"--help"
 * prints the usage and exits 0; "--version" prints the version and exits 0.
 */
#ifndef MT_UTIL_FLAGS_H
#define MT_UTIL_FLAGS_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "util/err.h"

#define MT_VERSION "0.1.0"

typedef enum {
    MT_F_BOOL,   /* bool*: set to true; takes no value */
    MT_F_INT,    /* int*: decimal integer within [min, max] */
    MT_F_I64,    /* int64_t*: decimal integer within [min, max] */
    MT_F_DOUBLE, /* double*: finite number within [min, max] */
    MT_F_STR,    /* const char**: one value */
    MT_F_STRS,   /* mt_strs*: one or more values */
    MT_F_CHOICE, /* const char**: one of the '|'-separated words in .choices */
} mt_flag_type;

typedef struct mt_strs {
    const char **v;
    int n;
} mt_strs;

typedef struct mt_flag {
    const char *name;    /* "--json-keys" */
    mt_flag_type type;
    void *dst;
    const char *metavar; /* "KEY" in "--json-keys KEY..." */
    const char *help;    /* one line; defaults are spelled out in it */
    double min, max;     /* numeric range when min < max; ignored otherwise */
    const char *choices; /* MT_F_CHOICE: "constant|linear|cosine" */
} mt_flag;

typedef struct mt_cmd {
    const char *name;     /* "mt-tokenize" */
    const char *synopsis; /* "[options] [FILE...]" */
    const char *summary;  /* one paragraph shown under the usage line */
    const mt_flag *flags; /* terminated by an entry with name == NULL */
} mt_cmd;

/* Rows of the flags that several programs take: name, type, metavar and range are spelled once here,
 * the help (which states each program's own default) is the program's. */
#define MT_FLAG_DATA_PATH(dst, help) {"--data-path", MT_F_STRS, (dst), "[W] PREFIX", (help), 0, 0, NULL}
#define MT_FLAG_SPLIT(dst, help) {"--split", MT_F_STR, (dst), "STR", (help), 0, 0, NULL}
#define MT_FLAG_DATA_CACHE_PATH(dst, help) {"--data-cache-path", MT_F_STR, (dst), "DIR", (help), 0, 0, NULL}
#define MT_FLAG_SEED(dst, help) {"--seed", MT_F_I64, (dst), "SEED", (help), 0, 4294967295.0, NULL}
#define MT_FLAG_VOCAB_FILE(dst, help) {"--vocab-file", MT_F_STR, (dst), "FILE", (help), 0, 0, NULL}
#define MT_FLAG_MERGE_FILE(dst, help) {"--merge-file", MT_F_STR, (dst), "FILE", (help), 0, 0, NULL}
#define MT_FLAG_QUIET(dst, help) {"--quiet", MT_F_BOOL, (dst), NULL, (help), 0, 0, NULL}
/* TikTokenizer's options, in mt-tokenize and mt-train alike: the rows in full, help included. */
#define MT_FLAG_TIKTOKEN_PATTERN(dst)                                                                        \
    {"--tiktoken-pattern", MT_F_CHOICE, (dst), NULL,                                                         \
     "TikTokenizer's pre-tokenizer: Megatron's v1 or v2, or tiktoken's cl100k or o200k, or llama3, qwen2, "  \
     "gpt2 (default: recognised by the rank count of cl100k_base and o200k_base)", 0, 0,                     \
     "v1|v2|cl100k|o200k|llama3|qwen2|gpt2"}
#define MT_FLAG_TIKTOKEN_NUM_SPECIAL_TOKENS(dst)                                                             \
    {"--tiktoken-num-special-tokens", MT_F_I64, (dst), "N",                                                  \
     "TikTokenizer: ids 0..N-1 are special tokens and rank r is id N + r, as Megatron (default 1000); 0: "   \
     "the ranks are the ids, as tiktoken's own cl100k_base and o200k_base", 0, 1 << 28, NULL}
#define MT_FLAG_TIKTOKEN_SPECIAL_TOKENS(dst)                                                                 \
    {"--tiktoken-special-tokens", MT_F_STRS, (dst), "TOK",                                                   \
     "TikTokenizer: the first special tokens, including <unk> <s> </s> (default those three; </s> is the "   \
     "end of document), then <SPECIAL_i> up to N", 0, 0, NULL}
/* (The --device, --threads, --bf16 and --fp16 rows of mt-eval and mt-generate are model/device.h's
 * MT_FLAGS_DEVICE, beside the device choices.) */
/* Megatron's default --split, as the help of the programs that build splits states it. */
#define MT_HELP_SPLIT "train,valid,test weights (default \"969, 30, 1\")"
/* --decode and the tokenizer files it needs, in programs that print token ids (mt-index, mt-shuffle). */
#define MT_FLAGS_DECODE(decode, help, vocab, merges)                                                         \
    {"--decode", MT_F_BOOL, (decode), NULL, (help), 0, 0, NULL},                                             \
        MT_FLAG_VOCAB_FILE((vocab), "with --decode: vocab.json"),                                            \
        MT_FLAG_MERGE_FILE((merges), "with --decode: merges.txt")

/* Parses argv[1..argc-1]. Positional arguments go to pos (may be NULL: then any is an error). Records
 * in *seen (if non-NULL, indexed like flags) whether each flag was given. Returns 0 or -1 with e set. */
int mt_flags_parse(const mt_cmd *cmd, int argc, char **argv, mt_strs *pos, bool *seen, mt_err *e);
void mt_flags_usage(const mt_cmd *cmd, FILE *f);

/* Strict number parsing shared with other parsers: whole string, no overflow. 0 or -1. */
int mt_parse_i64(const char *s, int64_t *out);
int mt_parse_double(const char *s, double *out);

#endif
