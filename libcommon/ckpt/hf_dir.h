/* hf_dir.h: reading a Hugging Face GPT-2 or Llama model directory: config.json, and model.safetensors
 * or the shards that model.safetensors.index.json lists (each file mapped and validated by
 * io/safetensors). GPT-2 tensor names are accepted with or without the "transformer." prefix (GPT2Model
 * saves have none), but a directory holding both spellings of one tensor, or an index whose weight_map
 * disagrees with what the shards hold, is refused at open naming the file and tensor; Llama's are whole
 * ("model.layers.0...", "lm_head.weight").
 * Tensors are read as float32 (F16 and BF16 widened exactly, F32 copied).
 */
#ifndef MT_CKPT_HF_DIR_H
#define MT_CKPT_HF_DIR_H

#include <stdbool.h>

#include "ckpt/hf_gpt2.h"
#include "io/safetensors.h"
#include "util/err.h"

typedef struct mt_hf_dir {
    char *dir;
    mt_hf_config cfg;
    mt_st_file *files;
    int nfiles;
    mt_st_dtype dtype; /* the dtype of the word embeddings (the model's storage dtype) */
} mt_hf_dir;

/* Whether dir looks like a Hugging Face model directory (config.json plus model.safetensors or its
 * index), as opposed to an mt checkpoint directory. */
bool mt_hf_dir_is(const char *dir);

/* Opens dir: config.json (checked), the safetensors file(s). A directory holding only
 * pytorch_model.bin is an error saying so. 0, or -1 with e set (nothing left open). */
int mt_hf_dir_open(mt_hf_dir *d, const char *dir, mt_err *e);
void mt_hf_dir_close(mt_hf_dir *d);

/* Reads tensor t (its hf name, without prefix) in t->hf_shape into dst as float32: a missing tensor, or
 * one of another shape or of a non-float dtype, is an error naming the file. */
int mt_hf_dir_read(mt_hf_dir *d, const mt_hf_tensor *t, float *dst, mt_err *e);

/* Before anything is allocated for them: every tensor of map is in the files with its hf_shape and a float
 * dtype (the sizes config.json claims checked against the files). 0, or -1 naming the file and tensor. */
int mt_hf_dir_check_shapes(const mt_hf_dir *d, const mt_hf_tensor *map, int n, mt_err *e);

/* Every tensor of the files is one of map's (by HF name), an attention mask buffer (GPT-2's h.N.attn.bias,
 * h.N.attn.masked_bias; Llama's model.layers.N.self_attn.rotary_emb.inv_freq: ignored), or lm_head.weight
 * equal to the word embeddings (tied); anything else is an error ("unexpected tensor 'x'"). */
int mt_hf_dir_check_names(const mt_hf_dir *d, const mt_hf_tensor *map, int n, mt_err *e);

#endif
