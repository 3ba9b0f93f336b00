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
    if (a->num_experts > 0) {
        if (a->num_layers > MT_MOE_MAX_LAYERS)
            return mt_err_set(e, "--num-experts: at most %d layers", MT_MOE_MAX_LAYERS);
        if (a->moe_ffn_hidden_size <= 0) return mt_err_set(e, "--moe-ffn-hidden-size must be positive");
        int etp = p->etp_size > 0 ? p->etp_size : tp;
        if (a->moe_ffn_hidden_size % etp)
            return mt_err_set(e, "--%s-parallel-size (%d) must divide --moe-ffn-hidden-size (%d)",
                              p->etp_size > 0 ? "expert-tensor" : "tensor-model", etp, a->moe_ffn_hidden_size);
        if (p->etp_rank < 0 || p->etp_rank >= etp) return mt_err_set(e, "expert tensor rank %d of %d", p->etp_rank, etp);
        if (a->shared_ffn % tp)
            return mt_err_set(e, "--tensor-model-parallel-size (%d) must divide --moe-shared-expert-intermediate-size (%d)",
                              tp, a->shared_ffn);
        if (a->add_bias_linear) return mt_err_set(e, "--num-experts: the experts have no biases; add --disable-bias-linear");
        int ep = p->ep_size > 1 ? p->ep_size : 1;
        if (a->num_experts % ep)
            return mt_err_set(e, "--expert-model-parallel-size (%d) must divide --num-experts (%d)", ep, a->num_experts);
        if (p->ep_rank < 0 || p->ep_rank >= ep) return mt_err_set(e, "expert rank %d of %d", p->ep_rank, ep);
    } else if (p->ep_size > 1) {
        return mt_err_set(e, "--expert-model-parallel-size %d without --num-experts", p->ep_size);
    }
    if (a->num_layers % p->pp_stages)
        return mt_err_set(e, "--pipeline-model-parallel-size (%d) must divide --num-layers (%d)", p->pp_stages,
                          a->num_layers);
    int vp = p->vp_chunks > 1 ? p->vp_chunks : 1;
    if (a->num_layers % (p->pp_stages * vp))
        return mt_err_set(e, "--num-layers (%d) must be a multiple of --pipeline-model-parallel-size (%d) x the model "
                             "chunks of a stage (%d)", a->num_layers, p->pp_stages, vp);
    return 0;
}

/* Appends a tensor: rows x cols globally (cols 0: 1-D), split along pdim (-1: replicated) in chunks
 * stacked blocks. */
static void add_chunked(mt_layout *l, mt_tensor_kind kind, int layer, const char *name, int64_t rows, int64_t cols,
                        int pdim, int no_decay, int chunks)
{
    mt_layout_tensor *t = &l->t[l->n++];
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, "%s", name);
    /* the one-rank name: without a model chunk's "model<c>." prefix (layers are renamed by the caller) */
    const char *w = name;
    if (!strncmp(w, "model", 5) && w[5] >= '0' && w[5] <= '9') {
        const char *d = w + 5;
        while (*d >= '0' && *d <= '9') d++;
        if (*d == '.') w = d + 1;
    }
    snprintf(t->whole_name, sizeof t->whole_name, "%s", w);
    t->kind = kind;
    t->layer = layer;
    t->expert = -1;
    t->ndim = cols ? 2 : 1;
    t->global_shape[0] = t->local_shape[0] = rows;
    t->global_shape[1] = t->local_shape[1] = cols;
    t->partition_dim = pdim;
    t->partition_chunks = chunks;
    int tp = l->part.tp_size, r = l->part.tp_rank;
    if (pdim >= 0) {
        t->local_shape[pdim] = t->global_shape[pdim] / tp;
        t->partition_offset = (int64_t)r * (t->local_shape[pdim] / chunks);
    }
    t->offset = l->numel;
    t->numel = (size_t)t->local_shape[0] * (size_t)(cols ? t->local_shape[1] : 1);
    t->no_decay = no_decay;
    l->numel += t->numel;
}

static void add(mt_layout *l, mt_tensor_kind kind, int layer, const char *name, int64_t rows, int64_t cols, int pdim,
                int no_decay)
{
    add_chunked(l, kind, layer, name, rows, cols, pdim, no_decay, 1);
}

/* An expert's tensor t split over the expert tensor size instead of tp (etp_size > 0). */
static void split_expert(mt_layout *l, mt_layout_tensor *t)
{
    if (l->part.etp_size <= 0 || t->partition_dim < 0) return;
    int pd = t->partition_dim, chunks = t->partition_chunks;
    l->numel -= t->numel;
    t->local_shape[pd] = t->global_shape[pd] / l->part.etp_size;
    t->partition_offset = (int64_t)l->part.etp_rank * (t->local_shape[pd] / chunks);
    t->numel = (size_t)t->local_shape[0] * (size_t)t->local_shape[1];
    l->numel += t->numel;
}

/* An MoE layer's tensors after its second norm (local layer i, global l; pre the model chunk's prefix): the
 * router [E, h] (replicated), every expert's dense_h_to_4h [f1, F] (column-parallel, SwiGLU's [gate; up] in
 * two chunks) one after another, then their dense_4h_to_h [h, F] (row-parallel), then the shared expert's
 * two matrices and its gate [1, h] (replicated). */
static void add_moe(mt_layout *out, const mt_model_arch *a, const char *pre, int i, int l)
{
    int ep = out->part.ep_size > 1 ? out->part.ep_size : 1, El = a->num_experts / ep, x0 = out->part.ep_rank * El;
    int64_t h = a->hidden_size, F = a->moe_ffn_hidden_size, Fs = a->shared_ffn;
    int glu = a->mlp == MT_MLP_SWIGLU ? 2 : 1;
    char name[128], suffix[56];
#define ADD(kind, rows, cols, pdim, chunks)                                                                      \
    do {                                                                                                          \
        snprintf(name, sizeof name, "%slanguage_model.encoder.layers.%d.mlp.%s", pre, i, suffix);                 \
        add_chunked(out, kind, l, name, rows, cols, pdim, 0, chunks);                                             \
        snprintf(out->t[out->n - 1].whole_name, sizeof name, "language_model.encoder.layers.%d.mlp.%s", l, suffix); \
    } while (0)
    snprintf(suffix, sizeof suffix, "router.weight");
    ADD(MT_T_ROUTER_W, a->num_experts, h, -1, 1);
    for (int fc = 0; fc < 2; fc++)
        for (int j = 0; j < El; j++) {   /* named by the local index, as Megatron's expert-parallel ranks do */
            const char *w = fc ? "dense_4h_to_h.weight" : "dense_h_to_4h.weight";
            snprintf(suffix, sizeof suffix, "experts.local_experts.%d.%s", j, w);
            if (fc) ADD(MT_T_EXPERT_FC2_W, h, F, 1, 1);
            else ADD(MT_T_EXPERT_FC1_W, glu * F, h, 0, glu);
            out->t[out->n - 1].expert = x0 + j;
            split_expert(out, &out->t[out->n - 1]);
            snprintf(out->t[out->n - 1].whole_name, sizeof out->t[0].whole_name,
                     "language_model.encoder.layers.%d.mlp.experts.local_experts.%d.%s", l, x0 + j, w);
        }
    if (Fs > 0) {
        snprintf(suffix, sizeof suffix, "shared_experts.dense_h_to_4h.weight");
        ADD(MT_T_SHARED_FC1_W, glu * Fs, h, 0, glu);
        snprintf(suffix, sizeof suffix, "shared_experts.dense_4h_to_h.weight");
        ADD(MT_T_SHARED_FC2_W, h, Fs, 1, 1);
        if (a->shared_gate) {
            snprintf(suffix, sizeof suffix, "shared_experts.gate_weight");
            ADD(MT_T_SHARED_GATE_W, 1, h, -1, 1);
        }
    }
#undef ADD
}

/* ---- --moe-layer-freq's list expressions: term ('+' term)*, term = atom ('*' count)*, atom = '[' 0/1, ... ']'
 * or '(' expression ')' ---- */
typedef struct {
    const char *p;
    unsigned char *out;
    int n, cap, bad;
} pat;

static void pat_ws(pat *s) { while (*s->p == ' ') s->p++; }
static void pat_expr(pat *s);
static void pat_atom(pat *s)
{
    pat_ws(s);
    if (*s->p == '(') {
        s->p++;
        pat_expr(s);
        pat_ws(s);
        if (*s->p++ != ')') s->bad = 1;
        return;
    }
    if (*s->p++ != '[') {
        s->bad = 1;
        return;
    }
    for (pat_ws(s); !s->bad && *s->p != ']'; pat_ws(s)) {
        if ((*s->p != '0' && *s->p != '1') || s->n >= s->cap) {
            s->bad = 1;
            return;
        }
        s->out[s->n++] = (unsigned char)(*s->p++ - '0');
        pat_ws(s);
        if (*s->p == ',') s->p++;
        else if (*s->p != ']') s->bad = 1;
    }
    if (!s->bad) s->p++;
}
static void pat_term(pat *s)
{
    int start = s->n;
    pat_atom(s);
    for (pat_ws(s); !s->bad && *s->p == '*'; pat_ws(s)) {
        char *end;
        long k = strtol(++s->p, &end, 10);
        if (end == s->p || k < 0 || (long)(s->n - start) * k > s->cap - start) {
            s->bad = 1;
            return;
        }
        s->p = end;
        int len = s->n - start;
        if (k == 0) s->n = start;
        for (long r = 1; r < k; r++) memcpy(s->out + start + r * len, s->out + start, (size_t)len), s->n += len;
    }
}
static void pat_expr(pat *s)
{
    pat_term(s);
    for (pat_ws(s); !s->bad && *s->p == '+'; pat_ws(s)) {
        s->p++;
        pat_term(s);
    }
}

int mt_moe_layers_parse(const char *spec, int num_layers, unsigned char *out, mt_err *e)
{
    if (num_layers < 1 || num_layers > MT_MOE_MAX_LAYERS)
        return mt_err_set(e, "--num-experts: %d layers (at most %d)", num_layers, MT_MOE_MAX_LAYERS);
    memset(out, 0, MT_MOE_MAX_LAYERS);
    char *end;
    long n = strtol(spec, &end, 10);
    if (end != spec && *end == 0) {
        if (n < 1) return mt_err_set(e, "--moe-layer-freq %s: must be positive", spec);
        for (int l = 0; l < num_layers; l++) out[l] = l % n == 0;
        return 0;
    }
    pat s = {spec, out, 0, MT_MOE_MAX_LAYERS, 0};
    pat_expr(&s);
    pat_ws(&s);
    if (s.bad || *s.p)
        return mt_err_set(e, "--moe-layer-freq '%s': not N or a list of 0 and 1 (at offset %d)", spec, (int)(s.p - spec));
    if (s.n != num_layers)
        return mt_err_set(e, "--moe-layer-freq '%s': %d entries for %d layers", spec, s.n, num_layers);
    return 0;
}

int mt_layout_build(const mt_model_arch *a, const mt_layout_part *p, mt_layout *out, mt_err *e)
{
    memset(out, 0, sizeof *out);
    if (check(a, p, e)) return -1;
    out->arch = *a;
    out->part = *p;
    int groups = a->num_query_groups > 0 ? a->num_query_groups : a->num_heads;
    out->arch.num_query_groups = groups;
    int vp = p->vp_chunks > 1 ? p->vp_chunks : 1;
    int L = a->num_layers / (p->pp_stages * vp);   /* per chunk */
    out->chunks = vp;
    out->chunk_layers = L;
    out->first_layer = p->pp_stage * L;
    out->num_layers = L * vp;
    int first = p->pp_stage == 0, last = p->pp_stage == p->pp_stages - 1;
    size_t per = 12 + (a->num_experts > 0 ? 4 + 2 * (size_t)a->num_experts : 0);   /* tensors of a layer, at most */
    out->t = calloc((size_t)L * vp * per + 8, sizeof *out->t);
    out->layer_start = calloc((size_t)L * vp + 1, sizeof *out->layer_start);
    if (!out->t || !out->layer_start) {
        mt_layout_free(out);
        return mt_err_set(e, "out of memory");
    }

    int64_t h = a->hidden_size, f = a->ffn_hidden_size, hn = h / a->num_heads, V = a->padded_vocab_size;
    int64_t qkv_rows = (a->num_heads + 2 * (int64_t)groups) * hn;   /* 3h for multi-head attention */
    int64_t fc1_rows = a->mlp == MT_MLP_SWIGLU ? 2 * f : f;          /* gate and up, per rank in halves */
    int bias = a->add_bias_linear, ln = a->norm == MT_NORM_LAYERNORM;
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
    for (int c = 0; c < vp; c++) {
        char pre[24] = "";   /* the chunk's prefix in the state dict */
        if (vp > 1) snprintf(pre, sizeof pre, "model%d.", c);
        char name[128];
#define NAMED(s) (snprintf(name, sizeof name, "%s%s", pre, s), name)
        if (first && c == 0) {
            add(out, MT_T_WORD_EMB, -1, NAMED("language_model.embedding.word_embeddings.weight"), V, h, 0, 0);
            if (a->position == MT_POS_LEARNED)
                add(out, MT_T_POS_EMB, -1, NAMED("language_model.embedding.position_embeddings.weight"),
                    a->max_position_embeddings, h, -1, 0);
        }
        int l0 = (c * p->pp_stages + p->pp_stage) * L;   /* the chunk's first global layer */
        for (int i = 0; i < L; i++) {
            out->layer_start[c * L + i] = out->n;
            int moe = mt_arch_is_moe(a, l0 + i);
            for (size_t j = 0; j < sizeof per_layer / sizeof per_layer[0]; j++) {
                mt_tensor_kind k = per_layer[j].kind;
                if (moe && (k == MT_T_FC1_W || k == MT_T_FC1_B || k == MT_T_FC2_W || k == MT_T_FC2_B)) continue;
                if ((k == MT_T_NORM1_B || k == MT_T_NORM2_B) && !ln) continue;
                if ((k == MT_T_PROJ_B || k == MT_T_FC1_B || k == MT_T_FC2_B) && !bias) continue;
                if (k == MT_T_QKV_B && !bias && !a->add_qkv_bias) continue;
                snprintf(name, sizeof name, "%slanguage_model.encoder.layers.%d.%s", pre, i, per_layer[j].suffix);
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
                int chunks = (k == MT_T_FC1_W || k == MT_T_FC1_B) && a->mlp == MT_MLP_SWIGLU ? 2 : 1;
                add_chunked(out, k, l0 + i, name, rows, cols, pdim, cols == 0, chunks);
                snprintf(out->t[out->n - 1].whole_name, sizeof name, "language_model.encoder.layers.%d.%s", l0 + i,
                         per_layer[j].suffix);
            }
            if (moe) add_moe(out, a, pre, i, l0 + i);
        }
        out->layer_start[(c + 1) * L] = out->n;
        if (last && c == vp - 1) {
            add(out, MT_T_FINAL_NORM_W, -1, NAMED("language_model.encoder.final_layernorm.weight"), h, 0, -1, 1);
            if (ln) add(out, MT_T_FINAL_NORM_B, -1, NAMED("language_model.encoder.final_layernorm.bias"), h, 0, -1, 1);
            if (!a->tied_embeddings)
                add(out, MT_T_OUTPUT, -1, NAMED("language_model.output_layer.weight"), V, h, 0, 0);
            else if (p->pp_stages > 1) {
                add(out, MT_T_OUTPUT, -1, NAMED("word_embeddings_for_head.weight"), V, h, 0, 0);
                snprintf(out->t[out->n - 1].whole_name, sizeof out->t[0].whole_name, "%s",
                         "language_model.embedding.word_embeddings.weight");
            }
        }
#undef NAMED
    }
    out->expert_lo = out->numel;
    int etp = p->etp_size > 0 ? p->etp_size : p->tp_size;
    if (p->ep_size > 1 || etp != p->tp_size) {   /* the experts' tensors after all the others in the buffer, each
                                                    part in table order */
        size_t off[2] = {0, 0};
        for (int i = 0; i < out->n; i++)
            if (out->t[i].expert < 0) off[1] += out->t[i].numel;
        out->expert_lo = off[1];
        for (int i = 0; i < out->n; i++) {
            mt_layout_tensor *t = &out->t[i];
            size_t *o = &off[t->expert >= 0];
            t->offset = *o;
            *o += t->numel;
        }
    }
    return 0;
}

int mt_layout_global_layer(const mt_layout *l, int li)
{
    int L = l->chunk_layers, c = li / L;
    return (c * l->part.pp_stages + l->part.pp_stage) * L + li % L;
}

/* Copies between a slice and the whole tensor: to_slice 1 slices, 0 places. */
static void copy_slice(const mt_layout_tensor *t, float *whole, float *slice, int to_slice)
{
    int64_t rows = t->local_shape[0], cols = t->ndim == 2 ? t->local_shape[1] : 1;
    int64_t C = t->ndim == 2 ? t->global_shape[1] : 1;
    if (t->partition_dim == 1) {
        for (int64_t r = 0; r < rows; r++) {
            float *w = whole + r * C + t->partition_offset, *s = slice + r * cols;
            memcpy(to_slice ? s : w, to_slice ? w : s, sizeof(float) * (size_t)cols);
        }
        return;
    }
    if (t->partition_dim < 0) {
        memcpy(to_slice ? slice : whole, to_slice ? whole : slice, sizeof(float) * (size_t)(rows * cols));
        return;
    }
    /* rows: in each chunk of the whole, the rank's block */
    int chunks = t->partition_chunks > 1 ? t->partition_chunks : 1;
    int64_t per = rows / chunks, chunk_rows = t->global_shape[0] / chunks;
    for (int c = 0; c < chunks; c++) {
        float *w = whole + (c * chunk_rows + t->partition_offset) * C, *s = slice + c * per * cols;
        memcpy(to_slice ? s : w, to_slice ? w : s, sizeof(float) * (size_t)(per * cols));
    }
}

void mt_layout_slice(const mt_layout_tensor *t, const float *whole, float *slice)
{
    copy_slice(t, (float *)whole, slice, 1);
}

void mt_layout_place(const mt_layout_tensor *t, const float *slice, float *whole)
{
    copy_slice(t, whole, (float *)slice, 0);
}

int mt_layout_holds(const mt_layout_tensor *t, int64_t i)
{
    if (t->partition_dim < 0) return 1;
    int chunks = t->partition_chunks > 1 ? t->partition_chunks : 1;
    int64_t chunk = t->global_shape[t->partition_dim] / chunks, in = i % chunk;
    return in >= t->partition_offset && in < t->partition_offset + t->local_shape[t->partition_dim] / chunks;
}

void mt_layout_free(mt_layout *l)
{
    free(l->t);
    free(l->layer_start);
    memset(l, 0, sizeof *l);
}

/* The local index of global layer g (its chunk's layers after the previous chunks'), -1 if not here. */
static int local_layer(const mt_layout *l, int g)
{
    int L = l->chunk_layers, P = l->part.pp_stages;
    if (g < 0 || L <= 0) return -1;
    int v = g / L;   /* the virtual stage */
    if (v % P != l->part.pp_stage || v / P >= l->chunks) return -1;
    return v / P * L + g % L;
}

/* The tensors of one layer come one after another in buffer order (layer_start): a lookup scans only the
 * tensors of its layer (layer -1: those before and after the layers), so that looking up every tensor of
 * a model of many layers takes linear time. name NULL: by layer and kind. */
static const mt_layout_tensor *search(const mt_layout *l, int layer, const char *name, mt_tensor_kind kind, int expert)
{
    int lo[2] = {0, 0}, hi[2] = {l->n, 0};
    const int *ls = l->layer_start;
    if (ls && layer < 0) {
        hi[0] = ls[0];
        lo[1] = ls[l->num_layers], hi[1] = l->n;
    } else if (ls) {
        int k = local_layer(l, layer);
        if (k < 0) return NULL;
        lo[0] = ls[k], hi[0] = ls[k + 1];
    }
    for (int r = 0; r < 2; r++)
        for (int i = lo[r]; i < hi[r]; i++)
            if (name ? !strcmp(l->t[i].name, name)
                     : l->t[i].kind == kind && l->t[i].layer == layer && (expert < 0 || l->t[i].expert == expert))
                return &l->t[i];
    return NULL;
}

const mt_layout_tensor *mt_layout_find(const mt_layout *l, const char *name)
{
    const char *p = strstr(name, ".layers.");
    int layer = -1, chunk = 0;
    if (!strncmp(name, "model", 5) && name[5] >= '0' && name[5] <= '9') chunk = atoi(name + 5);   /* model<c>. */
    if (p) {
        char *stop;
        long v = strtol(p + 8, &stop, 10);
        if (stop == p + 8 || *stop != '.' || v < 0 || v >= l->chunk_layers || chunk >= l->chunks) return NULL;
        layer = mt_layout_global_layer(l, chunk * l->chunk_layers + (int)v);   /* names number a chunk's layers from 0 */
    }
    return search(l, layer, name, 0, -1);
}

const mt_layout_tensor *mt_layout_get(const mt_layout *l, int layer, mt_tensor_kind kind)
{
    return search(l, layer, NULL, kind, -1);
}

const mt_layout_tensor *mt_layout_get_expert(const mt_layout *l, int layer, mt_tensor_kind kind, int expert)
{
    return search(l, layer, NULL, kind, expert);
}
