/* test_layout.c: the pure tensor layout (model/layout.h): GPT-2's table on one rank against the names,
 * shapes and order written out here from Megatron's legacy state dict; every tensor's slices over the
 * tensor ranks tiling its global shape and every layer on exactly one stage, for several grids; the
 * errors for splits the model does not allow; the LLaMA-family options' tensors. */
#include <stdio.h>
#include <string.h>

#include "model/layout.h"
#include "t.h"

static mt_model_arch gpt2(int L, int h, int heads, int V)
{
    mt_model_arch a = {.num_layers = L, .hidden_size = h, .num_heads = heads, .num_query_groups = heads, .ffn_hidden_size = 4 * h,
                       .max_position_embeddings = 32, .padded_vocab_size = V, .norm = MT_NORM_LAYERNORM, .position = MT_POS_LEARNED, .mlp = MT_MLP_GELU,
                       .add_bias_linear = 1, .tied_embeddings = 1};
    return a;
}

TEST(gpt2_one_rank)
{
    mt_model_arch a = gpt2(2, 8, 2, 64);
    mt_layout l;
    mt_err e;
    T_EQ_INT(mt_layout_build(&a, &(mt_layout_part){0, 1, 0, 1, 1, 0, 1, 0, 0}, &l, &e), 0);
    static const struct {
        const char *suffix;
        int rows, cols;   /* in units of h (f = 4h: 4), 0: 1-D */
    } per[] = {{"input_layernorm.weight", 1, 0},  {"input_layernorm.bias", 1, 0},
               {"self_attention.query_key_value.weight", 3, 1}, {"self_attention.query_key_value.bias", 3, 0},
               {"self_attention.dense.weight", 1, 1}, {"self_attention.dense.bias", 1, 0},
               {"post_attention_layernorm.weight", 1, 0}, {"post_attention_layernorm.bias", 1, 0},
               {"mlp.dense_h_to_4h.weight", 4, 1}, {"mlp.dense_h_to_4h.bias", 4, 0},
               {"mlp.dense_4h_to_h.weight", 1, 4}, {"mlp.dense_4h_to_h.bias", 1, 0}};
    char want[40][128];
    long shape[40][2];
    int n = 0;
    snprintf(want[n], 128, "language_model.embedding.word_embeddings.weight"), shape[n][0] = 64, shape[n++][1] = 8;
    snprintf(want[n], 128, "language_model.embedding.position_embeddings.weight"), shape[n][0] = 32, shape[n++][1] = 8;
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 12; j++) {
            snprintf(want[n], 128, "language_model.encoder.layers.%d.%s", i, per[j].suffix);
            shape[n][0] = per[j].rows * 8, shape[n++][1] = per[j].cols * 8;
        }
    snprintf(want[n], 128, "language_model.encoder.final_layernorm.weight"), shape[n][0] = 8, shape[n++][1] = 0;
    snprintf(want[n], 128, "language_model.encoder.final_layernorm.bias"), shape[n][0] = 8, shape[n++][1] = 0;
    T_EQ_INT(l.n, n);
    size_t off = 0;
    for (int i = 0; i < n && i < l.n; i++) {
        const mt_layout_tensor *t = &l.t[i];
        T_EQ_STR(t->name, want[i]);
        T_CHECK(t->global_shape[0] == shape[i][0] && t->global_shape[1] == shape[i][1]);
        T_CHECK(t->local_shape[0] == shape[i][0] && t->local_shape[1] == shape[i][1]);
        T_EQ_INT(t->ndim, shape[i][1] ? 2 : 1);
        T_EQ_INT(t->offset, off);
        T_EQ_INT(t->no_decay, shape[i][1] == 0);
        off += t->numel;
    }
    T_EQ_INT(l.numel, off);
    T_CHECK(mt_layout_get(&l, 1, MT_T_FC2_W) == mt_layout_find(&l, "language_model.encoder.layers.1.mlp.dense_4h_to_h.weight"));
    T_CHECK(mt_layout_find(&l, "nope") == NULL && mt_layout_get(&l, 2, MT_T_QKV_W) == NULL);
    mt_layout_free(&l);
}

/* Over all ranks of a tp x pp grid: each (kind, global layer) lives on exactly one stage, its tensor
 * ranks' slices tile the global shape along the partition dimension in rank order (replicated tensors:
 * the whole shape on every rank), and every rank's buffer offsets are contiguous. */
static void check_grid(const mt_model_arch *a, int tp, int pp)
{
    mt_err e;
    int seen[MT_T_KINDS][16] = {{0}};   /* [kind][layer + 1]: stages holding it */
    for (int s = 0; s < pp; s++) {
        mt_layout r[8];
        for (int t = 0; t < tp; t++) T_EQ_INT(mt_layout_build(a, &(mt_layout_part){t, tp, s, pp, 1, 0, 1, 0, 0}, &r[t], &e), 0);
        T_EQ_INT(r[0].first_layer, s * a->num_layers / pp);
        for (int i = 0; i < r[0].n; i++) {
            const mt_layout_tensor *g = &r[0].t[i];
            if (g->kind != MT_T_OUTPUT) seen[g->kind][g->layer + 1]++;
            if (g->layer >= 0) T_CHECK(g->layer >= r[0].first_layer && g->layer < r[0].first_layer + r[0].num_layers);
            int64_t covered = 0;
            for (int t = 0; t < tp; t++) {
                const mt_layout_tensor *x = &r[t].t[i];
                T_EQ_STR(x->name, g->name);
                T_CHECK(x->global_shape[0] == g->global_shape[0] && x->global_shape[1] == g->global_shape[1]);
                if (g->partition_dim < 0) {
                    T_CHECK(x->local_shape[0] == g->global_shape[0] && x->local_shape[1] == g->global_shape[1]);
                    continue;
                }
                int d = g->partition_dim, o = 1 - d, chunks = g->partition_chunks;
                /* SwiGLU's fc1 (weight and bias) in two stacked halves, each split over the ranks */
                T_EQ_INT(chunks, (g->kind == MT_T_FC1_W || g->kind == MT_T_FC1_B) && a->mlp == MT_MLP_SWIGLU ? 2 : 1);
                T_EQ_INT(x->partition_offset * chunks, covered);   /* no gap, no overlap, rank order */
                covered += x->local_shape[d];
                if (g->ndim == 2) T_EQ_INT(x->local_shape[o], g->global_shape[o]);
            }
            if (g->partition_dim >= 0) T_EQ_INT(covered, g->global_shape[g->partition_dim]);
        }
        for (int t = 0; t < tp; t++) {
            size_t off = 0;
            for (int i = 0; i < r[t].n; i++) {
                T_EQ_INT(r[t].t[i].offset, off);
                off += r[t].t[i].numel;
            }
            T_EQ_INT(r[t].numel, off);
            mt_layout_free(&r[t]);
        }
    }
    for (int k = 0; k < MT_T_KINDS; k++)
        for (int l = 0; l <= a->num_layers; l++) T_CHECK(seen[k][l] <= 1);
    for (int l = 0; l < a->num_layers; l++) T_EQ_INT(seen[MT_T_QKV_W][l + 1], 1);
    T_EQ_INT(seen[MT_T_WORD_EMB][0], 1);
    T_EQ_INT(seen[MT_T_FINAL_NORM_W][0], 1);
}

/* SwiGLU's dense_h_to_4h [gate; up] at TP=2: rank r holds [gate rows of r; up rows of r] (Megatron's
 * per-rank chunks), and placing each rank's slice back rebuilds the whole tensor. */
TEST(swiglu_fc1_slices)
{
    mt_model_arch a = {.num_layers = 1, .hidden_size = 4, .num_heads = 2, .num_query_groups = 2, .ffn_hidden_size = 6,
                       .max_position_embeddings = 8, .padded_vocab_size = 16, .norm = MT_NORM_RMSNORM, .position = MT_POS_ROPE, .mlp = MT_MLP_SWIGLU,
                       .add_bias_linear = 0, .tied_embeddings = 0};
    float whole[12 * 4], back[12 * 4], slice[6 * 4];
    for (int i = 0; i < 12 * 4; i++) whole[i] = (float)i, back[i] = -1;
    for (int r = 0; r < 2; r++) {
        mt_layout l;
        mt_err e;
        T_EQ_INT(mt_layout_build(&a, &(mt_layout_part){r, 2, 0, 1, 1, 0, 1, 0, 0}, &l, &e), 0);
        const mt_layout_tensor *t = mt_layout_get(&l, 0, MT_T_FC1_W);
        T_CHECK(t && t->local_shape[0] == 6 && t->global_shape[0] == 12);
        mt_layout_slice(t, whole, slice);
        for (int i = 0; i < 6; i++) {   /* gate rows 3r..3r+2, then up rows 6+3r.. */
            int want = i < 3 ? 3 * r + i : 6 + 3 * r + (i - 3);
            T_CHECK(slice[i * 4] == (float)(want * 4) && slice[i * 4 + 3] == (float)(want * 4 + 3));
            T_EQ_INT(mt_layout_holds(t, want), 1);
            T_EQ_INT(mt_layout_holds(t, i < 3 ? 3 * (1 - r) + i : 6 + 3 * (1 - r) + (i - 3)), 0);
        }
        mt_layout_place(t, slice, back);
        mt_layout_free(&l);
    }
    T_CHECK(!memcmp(whole, back, sizeof whole));
}

TEST(grids_tile)
{
    mt_model_arch a = gpt2(6, 16, 4, 64);
    for (int tp = 1; tp <= 4; tp *= 2)
        for (int pp = 1; pp <= 3; pp++) check_grid(&a, tp, pp);
    mt_model_arch q = a;   /* the LLaMA-family options split the same way */
    q.num_heads = 8, q.num_query_groups = 4, q.hidden_size = 32, q.norm = MT_NORM_RMSNORM, q.position = MT_POS_ROPE;
    q.mlp = MT_MLP_SWIGLU, q.add_bias_linear = 0, q.tied_embeddings = 0;
    for (int tp = 1; tp <= 4; tp *= 2)
        for (int pp = 1; pp <= 3; pp++) check_grid(&q, tp, pp);
}

TEST(stages_and_tied_copy)
{
    mt_model_arch a = gpt2(4, 8, 2, 64);
    mt_layout l;
    mt_err e;
    T_EQ_INT(mt_layout_build(&a, &(mt_layout_part){1, 2, 1, 2, 1, 0, 1, 0, 0}, &l, &e), 0);
    T_EQ_INT(l.first_layer, 2);
    const mt_layout_tensor *t = mt_layout_find(&l, "language_model.encoder.layers.0.self_attention.dense.weight");
    T_CHECK(t && t->layer == 2 && t->partition_dim == 1 && t->local_shape[1] == 4 && t->partition_offset == 4);
    T_CHECK(mt_layout_find(&l, "language_model.embedding.word_embeddings.weight") == NULL);
    t = mt_layout_find(&l, "word_embeddings_for_head.weight");   /* the last stage's copy (spec 7.6) */
    T_CHECK(t && t->kind == MT_T_OUTPUT && t->local_shape[0] == 32 && t->partition_offset == 32);
    t = mt_layout_get(&l, 3, MT_T_QKV_B);
    T_CHECK(t && t->local_shape[0] == 12 && t->partition_offset == 12);   /* whole heads: 3h/tp rows */
    mt_layout_free(&l);
    T_EQ_INT(mt_layout_build(&a, &(mt_layout_part){0, 2, 0, 2, 1, 0, 1, 0, 0}, &l, &e), 0);
    T_CHECK(mt_layout_find(&l, "word_embeddings_for_head.weight") == NULL);
    T_CHECK(mt_layout_find(&l, "language_model.encoder.final_layernorm.weight") == NULL);
    mt_layout_free(&l);
}

TEST(llama_options)
{
    mt_model_arch a = {.num_layers = 2, .hidden_size = 32, .num_heads = 8, .num_query_groups = 2, .ffn_hidden_size = 48,
                       .max_position_embeddings = 16, .padded_vocab_size = 64, .norm = MT_NORM_RMSNORM, .position = MT_POS_ROPE, .mlp = MT_MLP_SWIGLU,
                       .add_bias_linear = 0, .tied_embeddings = 0};
    mt_layout l;
    mt_err e;
    T_EQ_INT(mt_layout_build(&a, &(mt_layout_part){0, 1, 0, 1, 1, 0, 1, 0, 0}, &l, &e), 0);
    T_CHECK(mt_layout_get(&l, -1, MT_T_POS_EMB) == NULL);                 /* rotary: no position table */
    T_CHECK(mt_layout_get(&l, 0, MT_T_NORM1_B) == NULL && mt_layout_get(&l, 0, MT_T_QKV_B) == NULL);
    const mt_layout_tensor *q = mt_layout_get(&l, 1, MT_T_QKV_W);
    T_CHECK(q && q->global_shape[0] == (8 + 2 * 2) * 4 && q->global_shape[1] == 32);   /* GQA: (np + 2 ng) hn */
    const mt_layout_tensor *f = mt_layout_get(&l, 0, MT_T_FC1_W);
    T_CHECK(f && f->global_shape[0] == 96);                                 /* SwiGLU: gate and up */
    const mt_layout_tensor *o = mt_layout_get(&l, -1, MT_T_OUTPUT);
    T_CHECK(o && !strcmp(o->name, "language_model.output_layer.weight") && o->global_shape[0] == 64);
    T_EQ_INT(l.n, 1 + 2 * 6 + 1 + 1);   /* word embeddings, 6 per layer, final norm, output layer */
    mt_layout_free(&l);
}

TEST(errors)
{
    mt_model_arch a = gpt2(6, 16, 4, 64);
    mt_layout l;
    mt_err e;
    T_EQ_INT(mt_layout_build(&a, &(mt_layout_part){0, 8, 0, 1, 1, 0, 1, 0, 0}, &l, &e), -1);
    T_CHECK(strstr(e.msg, "--num-attention-heads"));
    T_EQ_INT(mt_layout_build(&a, &(mt_layout_part){0, 1, 0, 4, 1, 0, 1, 0, 0}, &l, &e), -1);
    T_CHECK(strstr(e.msg, "--num-layers (6)"));
    mt_model_arch v = a;
    v.padded_vocab_size = 66;
    T_EQ_INT(mt_layout_build(&v, &(mt_layout_part){0, 4, 0, 1, 1, 0, 1, 0, 0}, &l, &e), -1);
    T_CHECK(strstr(e.msg, "padded vocabulary (66)"));
    mt_model_arch g = a;
    g.num_query_groups = 2;
    T_EQ_INT(mt_layout_build(&g, &(mt_layout_part){0, 4, 0, 1, 1, 0, 1, 0, 0}, &l, &e), -1);
    T_CHECK(strstr(e.msg, "--num-query-groups (2)"));
    T_EQ_INT(mt_layout_build(&a, &(mt_layout_part){2, 2, 0, 1, 1, 0, 1, 0, 0}, &l, &e), -1);
    T_CHECK(strstr(e.msg, "outside the grid"));
}

T_MAIN_BEGIN("test_layout")
RUN(gpt2_one_rank);
RUN(grids_tile);
RUN(swiglu_fc1_slices);
RUN(stages_and_tied_copy);
RUN(llama_options);
RUN(errors);
T_MAIN_END
