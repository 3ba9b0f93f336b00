/* gpt_impl.h: the GPT model's private state, shared by gpt.c (weights, contexts, forward, backward),
 * gpt_init.c (configuration checks and parameter initialization) and gpt_infer.c (generation with a
 * KV cache). Not part of the public interface. */
#ifndef MT_MODEL_GPT_IMPL_H
#define MT_MODEL_GPT_IMPL_H

#include "model/gpt.h"

/* Tensors of one transformer layer, in buffer order. */
enum {
    MT_GPT_LN1_W,
    MT_GPT_LN1_B,
    MT_GPT_QKV_W,
    MT_GPT_QKV_B,
    MT_GPT_PROJ_W,
    MT_GPT_PROJ_B,
    MT_GPT_LN2_W,
    MT_GPT_LN2_B,
    MT_GPT_FC_W,
    MT_GPT_FC_B,
    MT_GPT_FC2_W,
    MT_GPT_FC2_B,
    MT_GPT_PER_LAYER
};
/* Table index of tensor j of layer l; the two embeddings come first, the final LayerNorm last. */
#define MT_GPT_WTE 0
#define MT_GPT_WPE 1
#define MT_GPT_LAYER_T(l, j) (2 + (l) * MT_GPT_PER_LAYER + (j))
#define MT_GPT_LNF_W(L) (2 + (L) * MT_GPT_PER_LAYER)
#define MT_GPT_LNF_B(L) (3 + (L) * MT_GPT_PER_LAYER)

struct mt_gpt {
    mtk *k;
    mt_gpt_config c;
    size_t asz;             /* bytes of one activation-dtype element */

    mt_layout layout;       /* the tensor table (model/layout.h): one rank holding the whole model */
    int ntensors;
    mt_gpt_tensor *tensors; /* the layout's entries as the model's callers see them */
    size_t nparams;
    float *params, *grads;  /* device, nparams floats each (grads: training only) */
    void *work;             /* working copy in the activation dtype (== params in fp32) */
    int grads_assign;       /* the next backward assigns the product gradients (mt_gpt_zero_grad) */
    size_t ctx_bytes;       /* activations and caches of the live contexts */
};

/* Activations of one micro-batch in flight (device unless noted). Layer l's slices are at l * nmax * width. */
struct mt_gpt_ctx {
    mt_gpt *m;
    int max_batch;
    size_t nmax;     /* max_batch * seq_length: the token stride of per-layer activations */
    void *res;       /* [2L+1][N][C]: res 0 = embedding after dropout; 2l+1 = after layer l's attention; 2l+2 = after its MLP */
    void *ln;        /* [2L+1][N][C]: LayerNorm outputs, ln1 (2l), ln2 (2l+1), final (2L) */
    float *ln_mean;  /* [2L+1][N] */
    float *ln_rstd;  /* [2L+1][N] */
    void *qkv;       /* [L][N][3C], per token [NH][3][HS] */
    void *atty;      /* [L][N][C]: attention output before the dense projection */
    float *lse;      /* [L][B][NH][T] */
    void *fch;       /* [L][N][F]: fc output before GeLU (GeLU is recomputed in backward) */
    void *logits;    /* [N][V_pad], overwritten in place by dlogits in backward */
    void *s_c1, *s_c2, *s_c3; /* scratch [N][C] */
    void *s_qkv;              /* scratch [N][3C] */
    void *s_f1, *s_f2;        /* scratch [N][F] */
    int32_t *d_tok, *d_tgt;   /* [N] */
    float *d_losses, *d_dscale; /* [N] */
    size_t bytes;

    /* Host state of the last forward. */
    float *h_losses, *h_dscale; /* [nmax] */
    int B, T;
    double mask_sum;
    int have_forward;           /* a valid forward is waiting for its backward */
    int training;
    uint64_t dropout_key;
};

/* Master (fp32) and working (activation dtype) pointers of tensor t. */
static inline float *mt_gpt_p(mt_gpt *m, int t) { return m->params + m->tensors[t].offset; }
static inline void *mt_gpt_w(mt_gpt *m, int t) { return (char *)m->work + m->tensors[t].offset * m->asz; }
static inline float *mt_gpt_g(mt_gpt *m, int t) { return m->grads + m->tensors[t].offset; }

/* Reserves the backend workspace for n tokens of T at most (contexts and caches call it). */
int mt_gpt_reserve(mt_gpt *m, size_t n, int T, mt_err *e);

#endif
