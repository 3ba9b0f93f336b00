/* open_gen.h: a trained model opened for generation, the one way mt-generate and mt-serve load one: the
 * checkpoint of any layout, or a Hugging Face GPT-2 or Llama directory (ckpt/open_model.h), a tokenizer
 * that turns text into ids (a BPE vocabulary is required), and the weights on the backend of --device. */
#ifndef MT_CKPT_OPEN_GEN_H
#define MT_CKPT_OPEN_GEN_H

#include <stdint.h>

#include "ckpt/open_model.h"
#include "kernels.h"
#include "util/err.h"

typedef struct mt_gen_open_opts {
    const char *load_dir;                 /* --load */
    int64_t iteration;                    /* >= 0, or MT_CKPT_LATEST */
    const char *vocab_file, *merge_file;  /* override the checkpoint's tokenizer files (NULL: its own) */
    const char *device;                   /* "cpu", "cuda", NULL: cuda when a GPU is there (model/device.h) */
    int threads;                          /* CPU threads, 0: OpenMP's */
    mtk_dtype act;                        /* MTK_F32, MTK_BF16 or MTK_F16 */
} mt_gen_open_opts;

typedef struct mt_gen_model {
    mt_model_ckpt mc;   /* mc.model: the weights; mc.tok: the tokenizer (mc.tok.bpe set) */
    mtk *k;             /* the backend the model runs on */
} mt_gen_model;

/* Opens the checkpoint, checks that its tokenizer reads text, opens the backend and reads the weights.
 * 0, or -1 with e set (nothing left open). */
int mt_gen_model_open(mt_gen_model *m, const mt_gen_open_opts *o, mt_err *e);
void mt_gen_model_close(mt_gen_model *m);

#endif
