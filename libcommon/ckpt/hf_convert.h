/* hf_convert.h: whole conversions between checkpoints and Hugging Face GPT2LMHeadModel or
 * LlamaForCausalLM (hf_llama.h) directories, one
 * tensor at a time: an opened checkpoint (ckpt/open_model.h) written as a Hugging Face directory, and a
 * Hugging Face directory opened the same way written as a checkpoint of any tensor/pipeline layout.
 */
#ifndef MT_CKPT_HF_CONVERT_H
#define MT_CKPT_HF_CONVERT_H

#include "ckpt/open_model.h"
#include "ckpt/reshard.h"
#include "io/safetensors.h"
#include "util/err.h"

/* mt's name of a tensor dtype: "bf16", "fp16", else "fp32". */
const char *mt_hf_dtype_name(mt_st_dtype d);

/* Writes the model of mc (a checkpoint with a GPT-2 vocabulary, or of Llama's options) as the Hugging
 * Face directory out (absent or empty): model.safetensors in dtype ("fp32", "bf16" or "fp16"; NULL: the
 * dtype the checkpoint was converted from, else fp32), config.json and the tokenizer files (GPT-2's, or a
 * Llama checkpoint's tokenizer.json; a Llama checkpoint of another tokenizer type, or of partial rotary,
 * is refused). The vocabulary has the tokenizer's rows, or those of the Hugging Face model the checkpoint
 * was converted from. *n_tensors and *dtype_out: what was written. Nothing is left under out on failure.
 * 0, or -1 with e set. */
int mt_hf_export_ckpt(mt_model_ckpt *mc, const char *out, const char *dtype, mt_ckpt_progress *progress,
                      int *n_tensors, const char **dtype_out, mt_err *e);

/* Writes the Hugging Face directory opened as mc from in as a release checkpoint of tensor size tp,
 * pipeline size pp and expert sizes ep and etp (reshard.h) under save (a directory that mt_ckpt_check_save_dir accepts), with copies of the
 * tokenizer files in save (a tokenizer mt cannot read is refused before anything is written); meta.json
 * records where it came from ("converted_from": directory, dtype, vocabulary rows, and Llama's beginning
 * and end ids). 0, or -1 with e set. */
int mt_hf_import_ckpt(mt_model_ckpt *mc, const char *in, const char *save, int tp, int pp, int ep, int etp,
                      mt_ckpt_progress *progress, mt_err *e);

#endif
