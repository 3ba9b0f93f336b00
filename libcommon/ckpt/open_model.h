/* open_model.h: the one way to open a trained model: from a checkpoint directory (and iteration), the
 * model config built from the checkpoint's args exactly as mt-train builds it from its flags
 * (config/model_config.h), the tokenizer the args name (config/tokenizer.h: GPT-2 BPE from the
 * recorded vocab/merge files, a tokenizer.json or tiktoken file from the checkpoint directory or
 * --tokenizer-model, or NullTokenizer), the checkpoint's meta.json and the weights in an mt_gpt on a
 * given backend. Used by mt-eval and mt-train --load (and by the programs that generate from or convert
 * checkpoints).
 *
 * Opening is two calls so that a caller can report between them: mt_model_open reads and checks the
 * metadata, mt_model_load_weights reads the weights. Numbers in meta.json's args are checked for type
 * and against the range of the mt-train flag they come from, naming the file and the field
 * ("<dir>/meta.json: \"args.num-layers\" is 0, outside [1, 100000]").
 */
#ifndef MT_CKPT_OPEN_MODEL_H
#define MT_CKPT_OPEN_MODEL_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "ckpt/checkpoint.h"
#include "ckpt/global.h"
#include "ckpt/hf_dir.h"
#include "config/model_config.h"
#include "config/tokenizer.h"
#include "config/train_args.h"
#include "kernels.h"
#include "model/gpt.h"
#include "tok/bpe.h"
#include "util/err.h"

typedef struct mt_model_open_opts {
    int64_t iteration;                    /* >= 0, MT_CKPT_LATEST or MT_CKPT_RELEASE */
    const char *vocab_file, *merge_file;  /* override the checkpoint's (NULL: its own) */
    /* mt-train --load: the checkpoint's args must describe the model of these flags (the first
     * differing flag is the error); the config and tokenizer are then the caller's and not built. */
    const mt_train_args *expect;
    /* the caller encodes no text (conversion): a tokenizer file is read only for its vocabulary size */
    bool vocab_only;
} mt_model_open_opts;

typedef struct mt_model_ckpt {
    mt_ckpt_reader *reader;  /* open until mt_model_close (optimizer state is read from it); NULL for HF */
    const char *dir;         /* "<load>/iter_%07d/mp_rank_00", or the Hugging Face directory */
    json_t *meta;            /* meta.json, borrowed from the reader; for HF, {"args": ...} made from config.json */
    /* a Hugging Face directory (config.json, model.safetensors) opened in place of a checkpoint: */
    mt_hf_dir *hf;
    mt_hf_tensor *hf_map;    /* its tensors against the Megatron ones */
    struct mt_meg_dir *meg;  /* a Megatron-LM torch checkpoint opened in place of one (ckpt/megatron_convert.h);
                                its caller's, read through mt_model_read_tensor */
    const mt_hf_tensor **hf_by_mt; /* the same, sorted by Megatron name (found in log time) */
    int hf_n;
    /* a checkpoint: its directory and iteration, and (once the architecture is known) every rank of a
     * tensor/pipeline-parallel one */
    char *load_dir;
    int64_t iteration;
    mt_model_arch arch;      /* padded for one tensor rank */
    int own_slices;          /* opened for mt-train (expect): the load reads its own slices only and checks the
                                other ranks' files by their headers; else the replicated copies are compared */
    int vocab_size, have_arch;
    mt_ckpt_global *g;
    json_t *args;            /* meta.json's "args" object, borrowed */
    /* without expect: */
    mt_train_args a;         /* the model, tokenizer and data fields of the args, checked; the rest 0 */
    const char *vocab_file, *merge_file;   /* the tokenizer's files (an override or the args'), or NULL */
    /* HuggingFaceTokenizer: the directory (or file) of tokenizer.json; TikTokenizer: the ranks file; the
     * copy in the checkpoint directory when there is one, else the args'; NULL when none is recorded */
    const char *tokenizer_model;
    char *tokenizer_found;                 /* owned: the copy in the checkpoint directory */
    mt_tokenizer tok;
    mt_gpt_config cfg;       /* checked */
    mt_gpt *model;           /* created by mt_model_load_weights when it was given none; freed by close */
} mt_model_ckpt;

/* Opens the checkpoint of load_dir and reads its metadata. A Hugging Face GPT-2 or Llama directory
 * (mt_hf_dir_is, and no checkpoint tracker) opens as a release checkpoint whose args come from its
 * config.json and whose tokenizer is GPT-2's vocab_file and merge_file of o or the directory's
 * vocab.json and merges.txt, or (Llama, neither of o's given) the directory's tokenizer.json first; a
 * Llama directory with none of them is an error. 0, or -1 with e set (nothing left open). */
int mt_model_open(mt_model_ckpt *mc, const char *load_dir, const mt_model_open_opts *o, mt_err *e);
/* For a source opened by its caller (mc->meta holding {"args": ...}, mc->dir set): the config and the
 * tokenizer from the args as mt_model_open builds them. 0, or -1 with e set. */
int mt_model_open_args(mt_model_ckpt *mc, const mt_model_open_opts *o, mt_err *e);
/* Whether the tokenizer of mc reads text (mt-eval --score and mt-generate need it): one opened with
 * vocab_only is read once to see. NullTokenizer passes. 0, or -1 with e set naming the directory and why. */
int mt_model_check_tokenizer(mt_model_ckpt *mc, mt_err *e);
/* Reads the weights into model, or (model NULL) into a model of mc->cfg created on k without gradients
 * (mc->model; the caller makes the activation or inference contexts it needs). 0, or -1 with e set. */
int mt_model_load_weights(mt_model_ckpt *mc, mtk *k, mt_gpt *model, mt_err *e);
void mt_model_close(mt_model_ckpt *mc);

/* Reads one Megatron tensor of the whole model (name and global shape as in the one-rank layout) as
 * float32 into dst, from either kind of source. 0, or -1 with e set. */
int mt_model_read_tensor(mt_model_ckpt *mc, const char *name, int ndim, const int64_t *shape, float *dst, mt_err *e);
/* After every tensor was read: the source holds nothing else (a checkpoint of another model). */
int mt_model_check_all_read(mt_model_ckpt *mc, mt_err *e);
/* Whether the checkpoint has AdamW moments: optim.safetensors, or the distributed optimizer's shards. */
int mt_model_has_optim(const mt_model_ckpt *mc);
/* The same for the AdamW moments of a checkpoint (suffix ".exp_avg" or ".exp_avg_sq"), from either. */
/* mt_model_read_tensor / mt_model_read_optim (suffix NULL: the weights) of tensor t of a rank's layout:
 * t's slice written to dst (local_shape floats): opened for mt-train (own_slices), only its bytes read
 * (mt_model_read_range); otherwise the whole tensor read and sliced. */
int mt_model_read_part(mt_model_ckpt *mc, const mt_layout_tensor *t, const char *suffix, float *dst, mt_err *e);
int mt_model_read_optim(mt_model_ckpt *mc, const char *name, const char *suffix, int ndim, const int64_t *shape,
                        float *dst, mt_err *e);
int mt_model_check_all_read_optim(mt_model_ckpt *mc, mt_err *e);
/* Elements first .. first + count - 1 of tensor t's slice (t of a rank of any layout) of a checkpoint
 * (not Hugging Face) with mt_ckpt_global_read_part: which MT_CKPT_MODEL, MT_CKPT_OPTIM (suffix ".exp_avg"
 * or ".exp_avg_sq") or MT_CKPT_MASTER; only those bytes are read. */
int mt_model_read_range(mt_model_ckpt *mc, const mt_layout_tensor *t, int which, const char *suffix, size_t first,
                        size_t count, float *dst, mt_err *e);
/* The data bytes read so far by mt_model_read_range (and so mt_model_read_part, mt_model_load_weights). */
uint64_t mt_model_bytes_read(const mt_model_ckpt *mc);
/* The tensor-parallel and pipeline-parallel sizes the checkpoint was saved with (1 and 1 for HF). */
void mt_model_parallel_sizes(const mt_model_ckpt *mc, int *tp, int *pp);

#endif
