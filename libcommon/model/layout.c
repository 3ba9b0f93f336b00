/* layout.c: the tensor table of one rank of a model (layout.h): which tensors a stage holds, their
 * Megatron names and global shapes, and each rank's slice of the partitioned ones. */
#include "model/layout.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int check(const mt_model_arch *a, const mt_layout_part *p, mt_err *e)
{
    if (a->num_layers <= 0 || a->hidden_size <= 0 || a->num_heads <= 0 || a->ffn_hidden_size <= 0 ||
        a->padded_vocab_size <= 0 || a->max_position_embeddings <= 0)
        return mt_err_set(e, "model sizes must be positive");
    int groups = a->num_query_groups > 0 ? a->num_query_groups : a->num_heads;
    if (a->hidden_size % a->num_heads)
        return mt_err_set(e, "--num-attention-heads (%d) must divide --hidden-size (%d)", a->num_heads, a->hidden_size);
    if (a->num_heads % groups)
        return mt_err_set(e, "--num-query-groups (%d) must divide --num-attention-heads (%d)", groups, a->num_heads);
    if (p->tp_size <= 0 || p->pp_stages <= 0 || p->tp_rank < 0 || p->tp_rank >= p->tp_size || p->pp_stage < 0 ||
        p->pp_stage >= p->pp_stages)
        return mt_err_set(e, "rank (tensor %d of %d, stage %d of %d) outside the grid", p->tp_rank, p->tp_size,
                          p->pp_stage, p->pp_stages);
    int tp = p->tp_size;
    if (a->num_heads % tp)
        return mt_err_set(e, "--tensor-model-parallel-size (%d) must divide --num-attention-heads (%d)", tp, a->num_heads);
    if (groups % tp)
        return mt_err_set(e, "--tensor-model-parallel-size (%d) must divide --num-query-groups (%d)", tp, groups);
    if (a->ffn_hidden_size % tp)
        return mt_err_set(e, "--tensor-model-parallel-size (%d) must divide --ffn-hidden-size (%d)", tp, a->ffn_hidden_size);
    if (a->padded_vocab_size % tp)
        return mt_err_set(e, "--tensor-model-parallel-size (%d) must divide the padded vocabulary (%d)", tp,
                          a->padded_vocab_size);
    if (a->num_layers % p->pp_stages)
        return mt_err_set(e, "--pipeline-model-parallel-size (%d) must divide --num-layers (%d)", p->pp_stages,
                          a->num_layers);
    return 0;
}

/* Appends a tensor: rows x cols globally (cols 0: 1-D), split along pdim (-1: replicated). */
static void add(mt_layout *l, mt_tensor_kind kind, int layer, const char *name, int64_t rows, int64_t cols, int pdim,
                int no_decay)
{
    mt_layout_tensor *t = &l->t[l->n++];
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, "%s", name);
    t->kind = kind;
    t->layer = layer;
    t->ndim = cols ? 2 : 1;
    t->global_shape[0] = t->local_shape[0] = rows;
    t->global_shape[1] = t->local_shape[1] = cols;
    t->partition_dim = pdim;
    int tp = l->part.tp_size, r = l->part.tp_rank;
    if (pdim >= 0) {
        t->local_shape[pdim] = t->global_shape[pdim] / tp;
        t->partition_offset = (int64_t)r * t->local_shape[pdim];
    }
    t->offset = l->numel;
    t->numel = (size_t)t->local_shape[0] * (size_t)(cols ? t->local_shape[1] : 1);
    t->no_decay = no_decay;
    l->numel += t->numel;
}

int mt_layout_build(const mt_model_arch *a, const mt_layout_part *p, mt_layout *out, mt_err *e)
{
    memset(out, 0, sizeof *out);
    if (check(a, p, e)) return -1;
    out->arch = *a;
    out->part = *p;
    int groups = a->num_query_groups > 0 ? a->num_query_groups : a->num_heads;
    out->arch.num_query_groups = groups;
    int L = a->num_layers / p->pp_stages;
    out->first_layer = p->pp_stage * L;
    out->num_layers = L;
    int first = p->pp_stage == 0, last = p->pp_stage == p->pp_stages - 1;
    out->t = calloc((size_t)L * 12 + 8, sizeof *out->t);
    out->layer_start = calloc((size_t)L + 1, sizeof *out->layer_start);
    if (!out->t || !out->layer_start) {
        mt_layout_free(out);
        return mt_err_set(e, "out of memory");
    }

    int64_t h = a->hidden_size, f = a->ffn_hidden_size, hn = h / a->num_heads, V = a->padded_vocab_size;
    int64_t qkv_rows = (a->num_heads + 2 * (int64_t)groups) * hn;   /* 3h for multi-head attention */
    int64_t fc1_rows = a->mlp == MT_MLP_SWIGLU ? 2 * f : f;          /* gate and up, per rank in halves */
    int bias = a->add_bias_linear, ln = a->norm == MT_NORM_LAYERNORM;
    if (first) {
        add(out, MT_T_WORD_EMB, -1, "language_model.embedding.word_embeddings.weight", V, h, 0, 0);
        if (a->position == MT_POS_LEARNED)
            add(out, MT_T_POS_EMB, -1, "language_model.embedding.position_embeddings.weight", a->max_position_embeddings,
                h, -1, 0);
    }
    static const struct {
        mt_tensor_kind kind;
        const char *suffix;
    } per_layer[] = {
        {MT_T_NORM1_W, "input_layernorm.weight"},         {MT_T_NORM1_B, "input_layernorm.bias"},
        {MT_T_QKV_W, "self_attention.query_key_value.weight"}, {MT_T_QKV_B, "self_attention.query_key_value.bias"},
        {MT_T_PROJ_W, "self_attention.dense.weight"},     {MT_T_PROJ_B, "self_attention.dense.bias"},
        {MT_T_NORM2_W, "post_attention_layernorm.weight"}, {MT_T_NORM2_B, "post_attention_layernorm.bias"},
        {MT_T_FC1_W, "mlp.dense_h_to_4h.weight"},         {MT_T_FC1_B, "mlp.dense_h_to_4h.bias"},
        {MT_T_FC2_W, "mlp.dense_4h_to_h.weight"},         {MT_T_FC2_B, "mlp.dense_4h_to_h.bias"},
    };
    for (int i = 0; i < L; i++) {
        out->layer_start[i] = out->n;
        for (size_t j = 0; j < sizeof per_layer / sizeof per_layer[0]; j++) {
            mt_tensor_kind k = per_layer[j].kind;
            if ((k == MT_T_NORM1_B || k == MT_T_NORM2_B) && !ln) continue;
            if ((k == MT_T_QKV_B || k == MT_T_PROJ_B || k == MT_T_FC1_B || k == MT_T_FC2_B) && !bias) continue;
            char name[128];
            snprintf(name, sizeof name, "language_model.encoder.layers.%d.%s", i, per_layer[j].suffix);
            int64_t rows = h, cols = 0;
            int pdim = -1;
            switch (k) {
            case MT_T_QKV_W: rows = qkv_rows, cols = h, pdim = 0; break;
            case MT_T_QKV_B: rows = qkv_rows, pdim = 0; break;
            case MT_T_PROJ_W: cols = h, pdim = 1; break;
            case MT_T_FC1_W: rows = fc1_rows, cols = h, pdim = 0; break;
            case MT_T_FC1_B: rows = fc1_rows, pdim = 0; break;
            case MT_T_FC2_W: cols = f, pdim = 1; break;
            default: break;   /* norms and the row-parallel biases: [h], replicated */
            }
            add(out, k, out->first_layer + i, name, rows, cols, pdim, cols == 0);
        }
    }
    out->layer_start[L] = out->n;
    if (last) {
        add(out, MT_T_FINAL_NORM_W, -1, "language_model.encoder.final_layernorm.weight", h, 0, -1, 1);
        if (ln) add(out, MT_T_FINAL_NORM_B, -1, "language_model.encoder.final_layernorm.bias", h, 0, -1, 1);
        if (!a->tied_embeddings)
            add(out, MT_T_OUTPUT, -1, "language_model.output_layer.weight", V, h, 0, 0);
        else if (p->pp_stages > 1)
            add(out, MT_T_OUTPUT, -1, "word_embeddings_for_head.weight", V, h, 0, 0);
    }
    return 0;
}

void mt_layout_slice(const mt_layout_tensor *t, const float *whole, float *slice)
{
    int64_t rows = t->local_shape[0], cols = t->ndim == 2 ? t->local_shape[1] : 1;
    int64_t C = t->ndim == 2 ? t->global_shape[1] : 1;
    if (t->partition_dim == 1)
        for (int64_t r = 0; r < rows; r++)
            memcpy(slice + r * cols, whole + r * C + t->partition_offset, sizeof(float) * (size_t)cols);
    else
        memcpy(slice, whole + (t->partition_dim == 0 ? t->partition_offset * C : 0), sizeof(float) * (size_t)(rows * cols));
}

void mt_layout_free(mt_layout *l)
{
    free(l->t);
    free(l->layer_start);
    memset(l, 0, sizeof *l);
}

/* The tensors of one layer come one after another in buffer order (layer_start): a lookup scans only the
 * tensors of its layer (layer -1: those before and after the layers), so that looking up every tensor of
 * a model of many layers takes linear time. name NULL: by layer and kind. */
static const mt_layout_tensor *search(const mt_layout *l, int layer, const char *name, mt_tensor_kind kind)
{
    int lo[2] = {0, 0}, hi[2] = {l->n, 0};
    const int *ls = l->layer_start;
    if (ls && layer < 0) {
        hi[0] = ls[0];
        lo[1] = ls[l->num_layers], hi[1] = l->n;
    } else if (ls) {
        int k = layer - l->first_layer;
        if (k < 0 || k >= l->num_layers) return NULL;
        lo[0] = ls[k], hi[0] = ls[k + 1];
    }
    for (int r = 0; r < 2; r++)
        for (int i = lo[r]; i < hi[r]; i++)
            if (name ? !strcmp(l->t[i].name, name) : l->t[i].kind == kind && l->t[i].layer == layer) return &l->t[i];
    return NULL;
}

const mt_layout_tensor *mt_layout_find(const mt_layout *l, const char *name)
{
    const char *p = strstr(name, ".layers.");
    int layer = -1;
    if (p) {
        char *stop;
        long v = strtol(p + 8, &stop, 10);
        if (stop == p + 8 || *stop != '.' || v < 0 || v >= (1L << 30)) return NULL;
        layer = l->first_layer + (int)v;   /* names number the stage's layers from 0 */
    }
    return search(l, layer, name, 0);
}

const mt_layout_tensor *mt_layout_get(const mt_layout *l, int layer, mt_tensor_kind kind)
{
    return search(l, layer, NULL, kind);
}
