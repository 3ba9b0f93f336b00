/* train_args_desc.h: what the ranks of an mt-train job compare before they train together: every flag's
 * value and the identity of the dataset and tokenizer files the flags name (comm/agree.h compares it). */
#ifndef MT_CONFIG_TRAIN_ARGS_DESC_H
#define MT_CONFIG_TRAIN_ARGS_DESC_H

#include <stddef.h>

#include "config/train_args.h"

/* The description of a as a list of entries, each two NUL-terminated strings, a flag as the user writes
 * it and a value: first every flag (mt_train_args_each), then, under the flag that names it, each file's
 * path and identity (io/fileid.h): the .idx and .bin of every --data-path prefix, --vocab-file,
 * --merge-file and --tokenizer-model (its tokenizer.json when a directory). malloc'd; its size in *n. */
char *mt_train_args_describe(const mt_train_args *a, size_t *n);

#endif
