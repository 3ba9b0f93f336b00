/* gpt_init.c: the GPT model's configuration checks, padded vocabulary size and Megatron's parameter
 * initialization (spec 6.1) drawn from MT19937 normals.
 *
 * Initialization fills the flat buffer in order. Weights (word and position embeddings, QKV, fc, and
 * an untied output layer, drawn last as Megatron constructs it after the final norm) are N(0, std) and
 * the output projections (self_attention.dense, mlp.dense_4h_to_h) N(0, std / sqrt(2L)), padded
 * vocabulary rows included; biases are 0, LayerNorm and RMSNorm weights 1. The normals are numpy's legacy
 * RandomState(seed).normal draws (polar method, one cached value carried between tensors), taken one
 * per weight element in buffer order, so a numpy reference can rebuild the initial parameters exactly.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "model/gpt_impl.h"
#include "util/mt19937.h"

int mt_gpt_padded_vocab(int vocab_size, int divisible_by, int tp)
{
    if (vocab_size <= 0) return vocab_size;
    long long mult = (long long)(divisible_by > 0 ? divisible_by : 1) * (tp > 0 ? tp : 1);
    long long p = (vocab_size + mult - 1) / mult * mult;
    return p > 2147483647LL ? -1 : (int)p;
}

int mt_gpt_config_check(const mt_gpt_config *c, mt_err *e)
{
    if (c->num_layers <= 0) return mt_err_set(e, "--num-layers (%d) must be positive", c->num_layers);
    if (c->hidden_size <= 0) return mt_err_set(e, "--hidden-size (%d) must be positive", c->hidden_size);
    if (c->num_heads <= 0) return mt_err_set(e, "--num-attention-heads (%d) must be positive", c->num_heads);
    if (c->hidden_size % c->num_heads)
        return mt_err_set(e, "--num-attention-heads (%d) must divide --hidden-size (%d)", c->num_heads,
                          c->hidden_size);
    if (c->ffn_hidden_size <= 0) return mt_err_set(e, "--ffn-hidden-size (%d) must be positive", c->ffn_hidden_size);
    if (c->max_position_embeddings <= 0)
        return mt_err_set(e, "--max-position-embeddings (%d) must be positive", c->max_position_embeddings);
    if (c->seq_length <= 0) return mt_err_set(e, "--seq-length (%d) must be positive", c->seq_length);
    if (c->seq_length > c->max_position_embeddings)
        return mt_err_set(e, "--seq-length (%d) must not exceed --max-position-embeddings (%d)", c->seq_length,
                          c->max_position_embeddings);
    if (c->vocab_size <= 0) return mt_err_set(e, "vocabulary size (%d) must be positive", c->vocab_size);
    if (c->padded_vocab_size < c->vocab_size)
        return mt_err_set(e, "padded vocabulary size (%d) is smaller than the vocabulary (%d): check "
                          "--make-vocab-size-divisible-by", c->padded_vocab_size, c->vocab_size);
    if (!(c->layernorm_epsilon > 0))
        return mt_err_set(e, "--norm-epsilon (%g) must be positive", (double)c->layernorm_epsilon);
    if (c->norm != MT_NORM_LAYERNORM && c->norm != MT_NORM_RMSNORM) return mt_err_set(e, "--normalization: unknown kind");
    if (c->mlp != MT_MLP_GELU && c->mlp != MT_MLP_SWIGLU) return mt_err_set(e, "unknown MLP kind");
    if (c->num_query_groups < 0 || (c->num_query_groups && c->num_heads % c->num_query_groups))
        return mt_err_set(e, "--num-query-groups (%d) must divide --num-attention-heads (%d)", c->num_query_groups,
                          c->num_heads);
    if (c->position == MT_POS_ROPE) {
        if (!(c->rotary_base > 0) || !isfinite(c->rotary_base))
            return mt_err_set(e, "--rotary-base (%g) must be positive", c->rotary_base);
        if (!(c->rotary_percent > 0 && c->rotary_percent <= 1))
            return mt_err_set(e, "--rotary-percent (%g) must be in (0, 1]", c->rotary_percent);
        int hn = c->hidden_size / c->num_heads, rot = (int)(hn * c->rotary_percent);
        if (rot < 2 || rot % 2)
            return mt_err_set(e, "--rotary-percent %g: the rotary dimension int(%d x %g) = %d must be even and at least 2",
                              c->rotary_percent, hn, c->rotary_percent, rot);
    } else if (c->position != MT_POS_LEARNED) {
        return mt_err_set(e, "--position-embedding-type: unknown kind");
    }
    if (!(c->init_method_std >= 0) || !isfinite(c->init_method_std))
        return mt_err_set(e, "--init-method-std (%g) must be a non-negative number", c->init_method_std);
    if (!(c->hidden_dropout >= 0 && c->hidden_dropout < 1))
        return mt_err_set(e, "--hidden-dropout (%g) must be in [0, 1)", (double)c->hidden_dropout);
    if (!(c->attention_dropout >= 0 && c->attention_dropout < 1))
        return mt_err_set(e, "--attention-dropout (%g) must be in [0, 1)", (double)c->attention_dropout);
    if (c->context_parallel_size < 0 || c->context_parallel_size > MT_CP_MAX)
        return mt_err_set(e, "--context-parallel-size (%d) must be in [1, %d]", c->context_parallel_size, MT_CP_MAX);
    if (c->context_parallel_size > 1) {
        if (c->seq_length % (2 * c->context_parallel_size))
            return mt_err_set(e, "--seq-length (%d) must be a multiple of 2 x --context-parallel-size (%d)",
                              c->seq_length, c->context_parallel_size);
    }
    /* Every kernel takes element counts of one activation as int. */
    long long c3 = 3LL * c->hidden_size, fc1 = (c->mlp == MT_MLP_SWIGLU ? 2LL : 1LL) * c->ffn_hidden_size;
    long long widest = fc1 > c3 ? fc1 : c3;
    if (widest > 2147483647LL / 4) return mt_err_set(e, "--hidden-size/--ffn-hidden-size too large");
    return 0;
}

/* numpy legacy random_sample and gauss (polar method) over MT19937. */
typedef struct {
    mt_rs rs;
    int has_gauss;
    double gauss;
} normal_rng;

static double rng_double(mt_rs *rs)
{
    uint32_t a = mt_rs_next32(rs) >> 5, b = mt_rs_next32(rs) >> 6;
    return (a * 67108864.0 + b) / 9007199254740992.0;
}

static double rng_gauss(normal_rng *g)
{
    if (g->has_gauss) {
        g->has_gauss = 0;
        return g->gauss;
    }
    double x1, x2, r2;
    do {
        x1 = 2.0 * rng_double(&g->rs) - 1.0;
        x2 = 2.0 * rng_double(&g->rs) - 1.0;
        r2 = x1 * x1 + x2 * x2;
    } while (r2 >= 1.0 || r2 == 0.0);
    double f = sqrt(-2.0 * log(r2) / r2);
    g->gauss = f * x1;
    g->has_gauss = 1;
    return f * x2;
}

/* Draws the whole of tensor t (rows x cols in the one-rank model, one normal per element in row-major
 * order, or the constant fill) and writes this rank's slice to the device at each of the ndst offsets
 * (none: a tensor of another stage, drawn only to keep the stream), a chunk of rows at a time. */
static void init_tensor(mt_gpt *m, const mt_layout_tensor *t, const size_t *dst, int ndst, normal_rng *g,
                        int is_random, float fill, double s, float *row, float *buf, size_t chunk)
{
    int64_t rows = t->global_shape[0], cols = t->ndim == 2 ? t->global_shape[1] : 1;
    if (!ndst && !is_random) return;
    int pd = t->partition_dim;
    int64_t c0 = pd == 1 ? t->partition_offset : 0, lc = pd == 1 ? t->local_shape[1] : cols;
    if (t->ndim == 1) {   /* a vector: its elements are the "rows" */
        cols = 1, lc = 1, c0 = 0;
    }
    if (!ndst) {   /* drawn, not kept */
        for (int64_t i = 0; i < rows * cols; i++) (void)rng_gauss(g);
        return;
    }
    size_t used = 0, done = 0;   /* floats staged in buf; floats of the slice written so far */
    for (int64_t r = 0; r < rows; r++) {
        int keep = pd != 0 || mt_layout_holds(t, r);
        if (!is_random) {
            if (!keep) continue;
            for (int64_t c = 0; c < lc; c++) row[c] = fill;
        } else {
            for (int64_t c = 0; c < cols; c++) {
                float v = (float)(s * rng_gauss(g));
                if (keep && c >= c0 && c < c0 + lc) row[c - c0] = v;
            }
            if (!keep) continue;
        }
        if (used + (size_t)lc > chunk) {
            for (int d = 0; d < ndst; d++) mtk_to_device(m->k, m->params + dst[d] + done, buf, used * sizeof *buf);
            done += used, used = 0;
        }
        memcpy(buf + used, row, (size_t)lc * sizeof *buf);
        used += (size_t)lc;
    }
    if (used)
        for (int d = 0; d < ndst; d++) mtk_to_device(m->k, m->params + dst[d] + done, buf, used * sizeof *buf);
}

void mt_gpt_init(mt_gpt *m, uint64_t seed)
{
    normal_rng *g = mt_xcalloc(1, sizeof *g);
    mt_rs_seed(&g->rs, (uint32_t)seed);
    int L = m->c.num_layers;
    double std = m->c.init_method_std, out_std = std / sqrt(2.0 * L);
    /* the draws follow the whole model's table (one stage, this tensor rank); a pipeline stage keeps the
     * tensors it holds, and the last stage's copy of tied embeddings takes the word embeddings' values */
    mt_model_arch arch = m->layout.arch;
    mt_layout_part part = {m->tp_rank, m->tp_size, 0, 1, 1, 0, 1, m->experts_grouped ? m->tp_rank % m->etp : 0,
                           m->experts_grouped ? m->etp : 0};   /* every expert */
    mt_layout whole;
    mt_err e;
    if (mt_layout_build(&arch, &part, &whole, &e)) mt_die("GPT init: %s", e.msg);   /* built once already */
    size_t widest = 1;   /* the longest row of any tensor */
    for (int i = 0; i < whole.n; i++)
        if (whole.t[i].ndim == 2 && (size_t)whole.t[i].global_shape[1] > widest)
            widest = (size_t)whole.t[i].global_shape[1];
    const size_t chunk = ((size_t)1 << 20) > widest ? (size_t)1 << 20 : widest;
    float *buf = mt_xmalloc(chunk * sizeof *buf), *row = mt_xmalloc(widest * sizeof *row);
    int copy = mt_gpt_tied_copy(m);
    for (int i = 0; i < whole.n; i++) {
        const mt_layout_tensor *t = &whole.t[i];
        mt_tensor_kind kd = t->kind;
        size_t dst[2];
        int ndst = 0, here = mt_gpt_t(m, t->layer, kd);
        if (here >= 0 && t->expert >= 0) {   /* this rank's experts' tensors follow its first one's */
            int El = m->c.num_experts / m->ep_size, j = t->expert - m->ep_rank * El;
            here = j >= 0 && j < El ? here + j : -1;
        }
        if (here >= 0) dst[ndst++] = m->tensors[here].offset;
        if (kd == MT_T_WORD_EMB && copy >= 0 && copy != here) dst[ndst++] = m->tensors[copy].offset;
        int is_norm_weight = kd == MT_T_NORM1_W || kd == MT_T_NORM2_W || kd == MT_T_FINAL_NORM_W;
        double s = (kd == MT_T_PROJ_W || kd == MT_T_FC2_W || kd == MT_T_EXPERT_FC2_W || kd == MT_T_SHARED_FC2_W) ? out_std : std;
        init_tensor(m, t, dst, ndst, g, t->ndim == 2, is_norm_weight ? 1.0f : 0.0f, s, row, buf, chunk);
    }
    mt_layout_free(&whole);
    free(row);
    free(buf);
    free(g);
    mt_gpt_params_changed(m);
}
