/* layout.h: every tensor of a model as a pure function of its architecture and of one rank's place in
 * the tensor/pipeline grid: name, global shape, this rank's slice (partition dimension and offset) and
 * its offset in the rank's flat parameter buffer. No device memory and no kernels: the model allocates
 * from it, and checkpoint conversion and resharding use it on its own.
 *
 * Partitioning is Megatron's (spec 7.2-7.6): the word embeddings and the output layer split by
 * vocabulary rows; QKV and the first MLP matrix column-parallel (rows of [out, in] split, with their
 * biases), each rank holding whole heads (query groups) in the per-head [np, 3, hn] order; the attention
 * and MLP output matrices row-parallel (columns split, biases replicated); norms and position
 * embeddings replicated. Layers split evenly over pipeline stages; the first stage holds the
 * embeddings, the last the final norm and, with tied embeddings and more than one stage, its own copy
 * of the word embeddings for the output layer (word_embeddings_for_head). With the interleaved schedule
 * (vp_chunks model chunks per stage, Megatron's virtual pipeline) stage s holds chunks c = 0 .. vp - 1 of
 * L / (pp vp) layers each, global layers (c pp + s) L / (pp vp) + i; the embeddings are chunk 0's of stage
 * 0 and the head chunk vp - 1's of the last stage; names get chunk c's prefix "model<c>." (Megatron's
 * state dict holds the chunks as model0, model1, ...).
 *
 * Names are the keys of Megatron's legacy (v2/v3) state dict of that rank, layer indices local to the
 * stage (spec 5.3); `layer` gives the global index. With one stage and one tensor rank, GPT-2's table
 * is exactly the one mt's checkpoints have always had.
 */
#ifndef MT_MODEL_LAYOUT_H
#define MT_MODEL_LAYOUT_H

#include <stddef.h>
#include <stdint.h>

#include "util/err.h"

typedef enum { MT_NORM_LAYERNORM, MT_NORM_RMSNORM } mt_norm_kind;
typedef enum { MT_POS_LEARNED, MT_POS_ROPE } mt_pos_kind;
typedef enum { MT_MLP_GELU, MT_MLP_SWIGLU } mt_mlp_kind;

enum { MT_MOE_MAX_LAYERS = 1024 };   /* the layers a model with MoE layers may have */

/* The architecture: GPT-2 today (LayerNorm, learned positions, GeLU, biases, tied embeddings); the
 * LLaMA family (RMSNorm, rotary positions, SwiGLU, grouped-query attention, no biases, untied) is
 * described too, for conversion and the model options to come. */
typedef struct mt_model_arch {
    int num_layers, hidden_size, num_heads;
    int num_query_groups;   /* = num_heads: multi-head attention; fewer: grouped-query */
    int ffn_hidden_size, max_position_embeddings, padded_vocab_size;
    mt_norm_kind norm;
    mt_pos_kind position;
    mt_mlp_kind mlp;
    int add_bias_linear;    /* biases on the linear layers (GPT-2: 1) */
    int tied_embeddings;    /* the output layer is the word embedding (GPT-2: 1) */
    int add_qkv_bias;       /* without linear biases, a bias on QKV still (Megatron's --add-qkv-bias: Qwen) */
    /* mixture of experts: the MoE layers have a router and num_experts experts (MLPs of moe_ffn_hidden_size
     * with the model's activation) in place of the MLP, and with shared_ffn > 0 a shared expert (with
     * shared_gate its sigmoid gate); 0 experts: dense */
    int num_experts, moe_ffn_hidden_size, shared_ffn, shared_gate;
    unsigned char moe_layers[MT_MOE_MAX_LAYERS];   /* 1: layer l is an MoE layer */
} mt_model_arch;

/* Layer l's MLP is an MoE layer. */
static inline int mt_arch_is_moe(const mt_model_arch *a, int l)
{
    return a->num_experts > 0 && l >= 0 && l < MT_MOE_MAX_LAYERS && a->moe_layers[l];
}
/* Which of num_layers layers are MoE layers (Megatron's --moe-layer-freq): "N" every N-th from the first
 * (layer l when l % N == 0), or a Python list expression of 0/1 per layer as Megatron takes it, e.g.
 * "[0,1,1,1]" or "([1]*3+[0])*2" (lists, + to join, * a count, parentheses). 0, or -1 with a message. */
int mt_moe_layers_parse(const char *spec, int num_layers, unsigned char *out, mt_err *e);

typedef struct mt_layout_part {
    int tp_rank, tp_size, pp_stage, pp_stages;
    int vp_chunks;   /* the interleaved schedule's model chunks per stage (0 or 1: one) */
    int ep_rank, ep_size;   /* expert parallelism (0 or 1: none): this rank holds experts [ep_rank E / ep_size,
                               (ep_rank + 1) E / ep_size) of each MoE layer, named local_experts.0 ... */
    int etp_rank, etp_size; /* the experts' matrices split over etp_size ranks (Megatron's expert tensor size;
                               0: over the tensor ranks, as the MLP's), this rank's slice etp_rank */
} mt_layout_part;

typedef enum {
    MT_T_WORD_EMB, MT_T_POS_EMB,
    MT_T_NORM1_W, MT_T_NORM1_B, MT_T_QKV_W, MT_T_QKV_B, MT_T_PROJ_W, MT_T_PROJ_B,
    MT_T_NORM2_W, MT_T_NORM2_B, MT_T_FC1_W, MT_T_FC1_B, MT_T_FC2_W, MT_T_FC2_B,
    MT_T_FINAL_NORM_W, MT_T_FINAL_NORM_B,
    MT_T_OUTPUT,            /* the output layer: untied, or the last stage's copy of tied embeddings */
    /* an MoE layer's, in place of FC1/FC2: the router, every expert's two matrices (one tensor per expert, the
     * experts' FC1 one after another, then their FC2), the shared expert's and its gate */
    MT_T_ROUTER_W, MT_T_EXPERT_FC1_W, MT_T_EXPERT_FC2_W, MT_T_SHARED_FC1_W, MT_T_SHARED_FC2_W, MT_T_SHARED_GATE_W,
    MT_T_KINDS
} mt_tensor_kind;

typedef struct mt_layout_tensor {
    char name[128];
    char whole_name[128];      /* its name in the one-rank model (global layer index; the last stage's copy of
                                  tied embeddings is the word embeddings) */
    mt_tensor_kind kind;
    int layer;                 /* global layer index, -1 outside the transformer layers */
    int expert;                /* an expert's tensor: the expert's index (global), else -1 */
    int ndim;                  /* 1 or 2 */
    int64_t global_shape[2];   /* [out, in] for matrices */
    int64_t local_shape[2];    /* this rank's slice */
    int partition_dim;         /* -1 replicated; 0 rows split (column-parallel, vocabulary); 1 columns split */
    int64_t partition_offset;  /* first global row/column of the slice along partition_dim (within each chunk) */
    int partition_chunks;      /* 1; 2 for SwiGLU's first MLP matrix [gate; up]: the partitioned dimension is that
                                  many stacked blocks and a rank holds its slice of each, stacked (Megatron's
                                  [gate_r; up_r]), not one contiguous slice of the whole */
    size_t offset, numel;      /* in elements, in the rank's flat buffer */
    int no_decay;              /* biases and norm weights: no weight decay */
} mt_layout_tensor;

typedef struct mt_layout {
    mt_model_arch arch;
    mt_layout_part part;
    int first_layer, num_layers;   /* the stage's global layers [first_layer, first_layer + num_layers); with
                                      model chunks, num_layers in all and the first chunk's first */
    int chunks, chunk_layers;      /* model chunks (1 without the interleaved schedule) of chunk_layers each:
                                      chunk c holds global layers (c pp_stages + pp_stage) chunk_layers + i */
    int n;
    mt_layout_tensor *t;           /* in buffer order */
    int *layer_start;              /* [num_layers + 1]: index in t of each local layer's first tensor, and the end */
    size_t numel;                  /* the rank's flat buffer */
    size_t expert_lo;              /* with expert parallelism (or an expert tensor size other than tp) the experts'
                                      tensors are the buffer's [expert_lo, numel) (their gradients are reduced over
                                      other ranks than the rest's); numel without */
} mt_layout;

/* The global index of local layer li (0 .. num_layers - 1) of layout l. */
int mt_layout_global_layer(const mt_layout *l, int li);

/* Builds the layout of one rank. -1 with a message naming the flag when the architecture cannot be
 * split this way (heads, query groups, ffn, vocabulary not divisible by the tensor size; layers by the
 * stages; out-of-range ranks). */
int mt_layout_build(const mt_model_arch *a, const mt_layout_part *p, mt_layout *out, mt_err *e);
void mt_layout_free(mt_layout *l);
/* This rank's slice of tensor t (local_shape floats, row-major) from the whole tensor (global_shape
 * floats): rows from partition_offset (partition_dim 0; in each chunk), columns from it in every row (1),
 * or all of it (replicated). mt_layout_place is the inverse: the slice written into the whole. */
void mt_layout_slice(const mt_layout_tensor *t, const float *whole, float *slice);
void mt_layout_place(const mt_layout_tensor *t, const float *slice, float *whole);
/* Whether this rank holds global index i along t's partition dimension (always for a replicated t). */
int mt_layout_holds(const mt_layout_tensor *t, int64_t i);
const mt_layout_tensor *mt_layout_find(const mt_layout *l, const char *name);      /* NULL if absent */
const mt_layout_tensor *mt_layout_get(const mt_layout *l, int layer, mt_tensor_kind kind); /* NULL if absent */
/* The same for an MoE layer's expert tensors: expert `expert`'s (-1: the first of the kind). */
const mt_layout_tensor *mt_layout_get_expert(const mt_layout *l, int layer, mt_tensor_kind kind, int expert);

#endif
