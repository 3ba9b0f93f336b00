/* hf_out.h: writing a Hugging Face model directory so that it appears complete or not at all: files go
 * into a hidden temporary directory beside the target (".<name>.tmp.<tag>.<pid>.0" of io/tmpname, swept
 * by later runs on the same host when its process is dead), which is renamed onto the target (absent, or an empty directory) at the end.
 */
#ifndef MT_CKPT_HF_OUT_H
#define MT_CKPT_HF_OUT_H

#include "ckpt/hf_gpt2.h"
#include "util/err.h"

typedef struct mt_hf_out {
    char *dir, *tmp;
    char *model_path;   /* <tmp>/model.safetensors, for the caller to write */
} mt_hf_out;

/* Checks that dir is absent or an empty directory (its parent is created if missing) and creates the
 * temporary directory. 0, or -1 with e set. */
int mt_hf_out_begin(mt_hf_out *o, const char *dir, mt_err *e);
/* Writes config.json, generation_config.json, tokenizer_config.json, special_tokens_map.json and copies
 * of the GPT-2 vocab.json and merges.txt. */
int mt_hf_out_files(mt_hf_out *o, const mt_hf_config *c, const char *vocab_file, const char *merge_file, mt_err *e);
/* The tokenizer.json of a HuggingFaceTokenizer's --tokenizer-model (a directory holding it, or the file)
 * and the directory of the files beside it (both the caller's to free). 0, or -1 with e set naming the
 * path when there is no such file. */
int mt_hf_out_llama_tokenizer_json(const char *tokenizer_model, char **json_path, char **dir, mt_err *e);
/* Llama's: config.json, generation_config.json (bos and eos ids), and the tokenizer: with tokenizer_model
 * (HuggingFaceTokenizer), copies of its tokenizer.json and of the tokenizer_config.json and
 * special_tokens_map.json beside it where there are; else (GPT2BPETokenizer) GPT-2's files as
 * mt_hf_out_files writes them. */
int mt_hf_out_llama_files(mt_hf_out *o, const mt_hf_config *c, const char *tokenizer_model, const char *vocab_file,
                          const char *merge_file, mt_err *e);
/* Renames the temporary directory onto dir. */
int mt_hf_out_commit(mt_hf_out *o, mt_err *e);
/* Removes the temporary directory (after an error). */
void mt_hf_out_abort(mt_hf_out *o);

#endif
