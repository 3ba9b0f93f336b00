/* gpt_impl.h: the GPT model's private state, shared by gpt.c (weights, contexts, forward, backward),
 * gpt_init.c (configuration checks and parameter initialization), gpt_infer.c (generation with a KV
 * cache) and tensor_parallel.c (the pieces of a model split over tensor-parallel ranks). Not part of the
 * public interface. */
#ifndef MT_MODEL_GPT_IMPL_H
#define MT_MODEL_GPT_IMPL_H

#include "comm/comm.h"
#include "model/gpt.h"

#define MT_CP_MAX 64   /* context-parallel ranks at most */

struct mt_gpt {
    mtk *k;
    mt_gpt_config c;
    size_t asz;             /* bytes of one activation-dtype element */

    mt_layout layout;       /* the tensor table (model/layout.h) of this rank's part */
    int *tix;               /* [(layer + 1) * MT_T_KINDS + kind]: the table index of a tensor, -1 if absent;
                               layer -1 (row 0) holds the embeddings and the final norm */
    /* tensor parallelism (tensor_parallel.c): this rank's share of the heads, ffn, vocabulary */
    mt_comm *tp;            /* the tensor-parallel group (NULL: one rank); not owned */
    int tp_rank, tp_size;
    int heads, ffn, vocab, v0; /* local heads, ffn columns and vocabulary rows; first vocabulary row */
    int groups, hs;         /* local key/value groups (= heads without grouped-query attention); head size */
    int qkvw, fcw;          /* local widths of QKV ((heads + 2 groups) hs) and the MLP's first product (2 ffn
                               with SwiGLU: gate and up) */
    int rot;                /* rotary channels of each head (rope), 0 with learned positions */
    int sp;                 /* sequence parallelism (tp > 1 and the config's sequence_parallel) */
    /* pipeline parallelism: this rank's stage of pp_size holds the global layers [l0, l0 + nl); the first
     * stage the embeddings, the last the final norm, the output layer and the loss */
    int pp_stage, pp_size, l0, nl, first, last;
    /* context parallelism (context_parallel.h): this rank holds chunks cp_rank and 2 cp_size - 1 - cp_rank of
     * every sequence */
    mt_comm *cp;            /* the context-parallel group (NULL: one rank); not owned */
    int cp_rank, cp_size;
    int cp_type, cp_overlap; /* ring_attention.h's mt_cp_comm, and whether its exchanges overlap the blocks */
    struct mt_ring_attention *ring; /* the attention over the group, for ring_batch sequences at most */
    int ring_batch;
    float *cp_losses;       /* [cp_size][ring_batch Tl]: every rank's per-token losses, gathered */
    size_t cp_bytes;        /* of the ring and cp_losses (counted with the activations) */
    mt_comm *ep;            /* expert parallelism: the ranks holding the other experts (NULL: one rank); not owned */
    int ep_rank, ep_size;   /* this rank holds experts [ep_rank E / ep_size, ...) of each MoE layer */
    int etp;                /* the expert tensor size: tp (the experts split as the MLP), or a divisor of it */
    int experts_grouped;    /* etp < tp: the MoE layer routes the rows of this rank's expert-tensor group (tensor
                               ranks etp (tp_rank / etp) ...: their sequence-parallel shards), its experts split
                               over the group's ranks (moe.h) */
    int experts_whole;      /* etp 1 < tp: each expert whole on its rank, routing its own rows */
    mt_comm *router_group;  /* with experts_grouped, the ranks whose rows make up the micro-batch (tensor x
                               context): the router's statistics are summed over them; not owned */
    mt_comm *etp_comm;      /* with 1 < etp < tp: the expert-tensor group, over which the experts' outputs are
                               partial sums; not owned */
    uint64_t ep_bytes;      /* bytes the MoE layers' all-to-alls have sent to the other expert ranks */
    int vp;                 /* model chunks of the interleaved schedule (1: none); chunk c of the stage holds its
                               local layers [c nl / vp, (c + 1) nl / vp) */
    int head;               /* the table index of the output layer's weight: the word embedding (tied, one
                               stage), the last stage's copy of it, or the untied output layer; -1 if none */
    size_t *tp_counts;      /* [tp_size]: scratch of the sequence-parallel collectives */
    int ntensors;
    mt_gpt_tensor *tensors; /* the layout's entries as the model's callers see them */
    size_t nparams;
    float *params, *grads;  /* device, nparams floats each (grads: training only); params NULL once the master
                               is dropped (mt_gpt_drop_master) */
    void *work;             /* working copy in the activation dtype (== params in fp32) */
    float *kept;            /* after mt_gpt_drop_master: the 1-D tensors' fp32 values, nkept floats in table
                               order, tensor t at koff[t] */
    size_t nkept, *koff;
    unsigned grads_assign;  /* bit c: the next backward of model chunk c assigns its product gradients
                               (mt_gpt_zero_grad) */
    size_t ctx_bytes;       /* activations and caches of the live contexts, and the scratch they share */
    void *shared;           /* the contexts' scratch that holds nothing between the passes (s_c2, s_c3, s_qkv,
                               s_f1, s_f2 of every context point into it: one micro-batch computes at a time,
                               on one stream); shared_bytes of it, grown as contexts need */
    size_t shared_bytes;
    struct mt_fp8_state *fp8; /* FP8 products (model/fp8.h); NULL without */
    mt_gpt_layer_hook hook; /* mt_gpt_set_layer_hook */
    void *hook_arg;
};

/* Activations of one micro-batch in flight (device unless noted). L below is the stage's layer count nl;
 * local layer l is global layer l0 + l. Each layer's input is kept (bnd); the rest of its activations
 * are in a slot: layer l's own without recomputation, else shared by the layers recomputed in the
 * backward pass (recompute_plan in gpt.c), S = nslots of them. On a pipeline stage that is not the last,
 * bnd[L] is the output sent to the next stage and there are no logits; on one that is not the first,
 * bnd[0] is the input received from the previous stage.
 * Widths are this rank's: Cl = C / tp (its heads' share of the attention), F = ffn / tp, V = V_pad / tp. */
struct mt_gpt_ctx {
    mt_gpt *m;
    int max_batch;
    size_t nmax;     /* max_batch * seq_length: the token stride of per-layer activations */
    size_t nres;     /* the token stride of the residual stream and norm statistics: nmax / tp with sequence
                        parallelism (this rank's rows), else nmax */
    int chunk_id;    /* the model chunk (interleaved schedule; else 0): local layers [lc0, lc0 + lcn) */
    int lc0, lcn;
    int first, last; /* the embeddings (the first stage's first chunk), the head (the last stage's last chunk) */
    int nslots;      /* S */
    int chunk, recomputed; /* layers [0, recomputed) are recomputed, in chunks of `chunk` layers */
    void *bnd;       /* [L+1][nres][C]: the residual stream at layer borders: bnd 0 = embedding after dropout
                        (or the stage's input), bnd l+1 = after layer l's MLP */
    void *mid;       /* [S][nres][C]: after the layer's attention */
    void *ln;        /* [S][2][nres][C]: the LayerNorm outputs ln1, ln2 (this rank's rows with sequence
                        parallelism: gathered again into scratch for the products, forward and backward) */
    float *ln_stat;  /* [S][4][nres]: mean1, rstd1, mean2, rstd2 */
    void *qkv;       /* [S][N][3Cl], per token [heads][3][HS] (this rank's heads) */
    void *atty;      /* [S][N][Cl]: attention output before the dense projection */
    float *lse;      /* [S][B][heads][T] */
    void *fch;       /* [S][N][F]: fc output before GeLU (GeLU is recomputed in backward) */
    void *lnf;       /* [nres][C]: the final LayerNorm's output (the last stage), gathered likewise */
    float *lnf_stat; /* [2][nres]: its mean and rstd */
    void *logits;    /* [N][V_pad / tp], overwritten in place by dlogits in backward */
    float *xent;     /* [3][N]: row max, sum of exponentials, target logit (vocabulary-parallel cross-entropy) */
    void *s_c1;               /* scratch [N][C], its own: the gradient exchanged with the next stage and the
                                 previous one lives there between the passes (mt_gpt_stage_grad) */
    void *s_c2, *s_c3;        /* scratch [N][C], the model's shared scratch (bound by each pass) */
    void *s_qkv;              /* scratch [N][3Cl], shared */
    void *s_f1, *s_f2;        /* scratch [N][F], shared */
    int32_t *d_tok, *d_tgt;   /* [N] */
    float *d_losses, *d_dscale; /* [N] */
    size_t bytes;

    /* Host state of the last forward. */
    float *h_losses, *h_dscale; /* [nmax] (h_losses: [nmax cp_size], the whole micro-batch's) */
    int32_t *h_tok;             /* context parallelism: this rank's tokens and targets [2][nmax] */
    int B, T;
    double mask_sum;
    int have_forward;           /* a valid forward is waiting for its backward */
    int training;
    uint64_t dropout_key;
    struct mt_moe_ctx *moe;     /* the MoE layers' state (model/moe.h); NULL without MoE layers */
    double moe_scale;           /* the auxiliary losses' gradient factor (mt_gpt_set_moe_loss_scale; 1) */
    float *fp8_scale;           /* FP8: the forward scales this context's pass used (model/fp8.h) */
    int fp8_replay;             /* FP8: the backward (and its recomputation) runs: the forward tensors are
                                   quantized with the scales of the forward, their amaxes not recorded */
};

/* The table index of the tensor of kind in layer (-1: the embeddings and final norm); -1 if absent. */
static inline int mt_gpt_t(const mt_gpt *m, int layer, mt_tensor_kind kind)
{
    return m->tix[(size_t)(layer + 1) * MT_T_KINDS + kind];
}

/* Master (fp32) and working (activation dtype) pointers of tensor t. */
static inline float *mt_gpt_p(mt_gpt *m, int t)
{
    return m->kept ? m->kept + m->koff[t] : m->params + m->tensors[t].offset;
}
static inline void *mt_gpt_w(mt_gpt *m, int t) { return (char *)m->work + m->tensors[t].offset * m->asz; }
static inline float *mt_gpt_g(mt_gpt *m, int t) { return m->grads + m->tensors[t].offset; }

/* A tensor's master / gradient pointer, NULL for an absent one (t = -1: a bias or norm bias the config has
 * not). */
static inline float *mt_gpt_popt(mt_gpt *m, int t) { return t < 0 ? NULL : mt_gpt_p(m, t); }
static inline float *mt_gpt_gopt(mt_gpt *m, int t) { return t < 0 || !m->grads ? NULL : mt_gpt_g(m, t); }

/* The config's normalization with weight w and bias b (-1 for RMSNorm): LayerNorm, or RMSNorm (mean unused). */
static inline void mt_gpt_norm_fwd(mt_gpt *m, void *out, float *mean, float *rstd, const void *inp, int w, int b, int N,
                                   int C)
{
    if (m->c.norm == MT_NORM_RMSNORM) mtk_rmsnorm_fwd(m->k, out, rstd, inp, mt_gpt_p(m, w), N, C, m->c.layernorm_epsilon);
    else mtk_layernorm_fwd(m->k, out, mean, rstd, inp, mt_gpt_p(m, w), mt_gpt_popt(m, b), N, C, m->c.layernorm_epsilon);
}
/* res = x + dropout(y) (drop NULL: none), out = norm(res). */
static inline void mt_gpt_add_norm_fwd(mt_gpt *m, void *res, void *out, float *mean, float *rstd, const void *x,
                                       const void *y, int w, int b, int N, int C, const mtk_dropout *drop)
{
    if (m->c.norm == MT_NORM_RMSNORM)
        mtk_add_rmsnorm_fwd(m->k, res, out, rstd, x, y, mt_gpt_p(m, w), N, C, m->c.layernorm_epsilon, drop);
    else
        mtk_add_layernorm_fwd(m->k, res, out, mean, rstd, x, y, mt_gpt_p(m, w), mt_gpt_popt(m, b), N, C,
                              m->c.layernorm_epsilon, drop);
}
/* dinp += the input gradient; the weight's (and bias's) gradients accumulate. ddrop (NULL: none) gets the
 * dropout backward of the new dinp with drop's mask. */
static inline void mt_gpt_norm_bwd(mt_gpt *m, void *dinp, int w, int b, const void *dout, const void *inp,
                                   const float *mean, const float *rstd, int N, int C, void *ddrop,
                                   const mtk_dropout *drop)
{
    if (m->c.norm == MT_NORM_RMSNORM)
        mtk_rmsnorm_bwd(m->k, dinp, mt_gpt_g(m, w), dout, inp, mt_gpt_p(m, w), rstd, N, C, ddrop, drop);
    else
        mtk_layernorm_bwd(m->k, dinp, mt_gpt_g(m, w), mt_gpt_gopt(m, b), dout, inp, mt_gpt_p(m, w), mean, rstd, N, C,
                          ddrop, drop);
}

/* Reserves the backend workspace for n tokens of T at most (contexts and caches call it). */
int mt_gpt_reserve(mt_gpt *m, size_t n, int T, mt_err *e);

/* ---- generation's steps (gpt_infer.c), shared by mt_gpt_infer and mt_gpt_paged ---- */
struct mt_moe_ctx;
/* Layer l after its attention output att: the output projection added to x, the second norm into h, the MLP
 * (through f, act, tmp) or the MoE block (moe, over B sequences of T) added to x; N = B T rows. 0, or -1 with
 * e set. */
int mt_gpt_infer_mlp(mt_gpt *m, struct mt_moe_ctx *moe, int l, void *x, void *h, const void *att, void *f, void *act,
                     void *tmp, float *mean, float *rstd, int B, int T, mt_err *e);
/* The logits of n rows last [n][C]: the final norm (into tmp), the head into dlogits, fp32 in logits32 when
 * the activations are not, copied back into h_logits (the step's one wait for the device), then into the
 * caller's logits [n][V_pad]. 0, or -1 with e set. */
int mt_gpt_infer_logits(mt_gpt *m, const void *last, void *tmp, float *mean, float *rstd, void *dlogits, float *logits32,
                        float *h_logits, int n, float *logits, mt_err *e);

#endif
