/* gpt.c: the GPT-2 model over the kernels/ operations: parameter and gradient buffers with their
 * tensor table, activation memory, forward pass with the masked mean loss, backward pass, dropout.
 *
 * Activations are kept per layer for backward (see gpt_impl.h): the residual stream before and after
 * each sublayer, every LayerNorm output with its mean and rstd, QKV, the attention output with its
 * log-sum-exp, and the fc output before GeLU. GeLU outputs and dropout masks are recomputed in backward;
 * the attention probabilities are never stored (the attention kernel recomputes them). With sequence
 * parallelism every kept buffer of the regions between the products (the residual stream, LayerNorm
 * outputs and statistics) holds this rank's 1/tp of the tokens; the LayerNorm outputs are gathered again
 * in the backward pass for the weight gradients of the products they feed (QKV, fc, the logits). With full
 * activation recomputation (the config's recompute_*), the chosen layers keep only their input and their
 * forward pass runs again when the backward pass reaches them. Forward computes per-token losses only;
 * backward runs the cross-entropy again to turn the logits into dlogits in place.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/context_parallel.h"
#include "model/fp8.h"
#include "model/ring_attention.h"
#include "model/gpt_impl.h"
#include "model/moe.h"
#include "model/tensor_parallel.h"

/* ---- tensor table ---- */

mt_model_arch mt_gpt_arch(const mt_gpt_config *c)
{
    mt_model_arch a = {
        .num_layers = c->num_layers,
        .hidden_size = c->hidden_size,
        .num_heads = c->num_heads,
        .num_query_groups = c->num_query_groups > 0 ? c->num_query_groups : c->num_heads,
        .ffn_hidden_size = c->ffn_hidden_size,
        .max_position_embeddings = c->max_position_embeddings,
        .padded_vocab_size = c->padded_vocab_size,
        .norm = c->norm,
        .position = c->position,
        .mlp = c->mlp,
        .add_bias_linear = !c->disable_bias_linear,
        .add_qkv_bias = c->disable_bias_linear && c->add_qkv_bias,
        .tied_embeddings = !c->untie_embeddings_and_output_weights,
        .num_experts = c->num_experts,
        .moe_ffn_hidden_size = c->moe_ffn_hidden_size,
        .shared_ffn = c->num_experts > 0 ? c->moe_shared_ffn : 0,
        .shared_gate = c->num_experts > 0 && c->moe_shared_ffn > 0 && c->moe_shared_gate,
    };
    if (c->num_experts > 0) memcpy(a.moe_layers, c->moe_layers, sizeof a.moe_layers);
    return a;
}

/* The table of this rank's part: the layout of its tensor rank and pipeline stage, with the index of
 * every (global layer, kind) for the forward and backward passes. */
static int build_table(mt_gpt *m, mt_err *e)
{
    mt_model_arch a = mt_gpt_arch(&m->c);
    mt_layout_part part = {m->tp_rank, m->tp_size, m->pp_stage, m->pp_size, m->vp, m->ep_rank, m->ep_size,
                           m->experts_grouped ? m->tp_rank % m->etp : 0, m->experts_grouped ? m->etp : 0};
    if (mt_layout_build(&a, &part, &m->layout, e)) return -1;
    m->l0 = m->layout.first_layer;
    m->nl = m->layout.num_layers;
    int L = m->c.num_layers;
    m->tix = mt_xmalloc((size_t)(L + 1) * MT_T_KINDS * sizeof *m->tix);
    for (size_t i = 0; i < (size_t)(L + 1) * MT_T_KINDS; i++) m->tix[i] = -1;
    m->tensors = mt_xcalloc((size_t)m->layout.n, sizeof *m->tensors);
    for (int i = 0; i < m->layout.n; i++) {
        const mt_layout_tensor *l = &m->layout.t[i];
        int *x = &m->tix[(size_t)(l->layer + 1) * MT_T_KINDS + l->kind];
        if (*x < 0) *x = i;   /* an MoE layer's experts: the first one's (the others follow it) */
        mt_gpt_tensor *t = &m->tensors[m->ntensors++];
        snprintf(t->name, sizeof t->name, "%s", l->name);
        t->offset = l->offset;
        t->numel = l->numel;
        t->ndim = l->ndim;
        t->shape[0] = l->local_shape[0];
        t->shape[1] = l->local_shape[1];
        t->no_decay = l->no_decay;
    }
    m->nparams = m->layout.numel;
    m->head = m->last ? mt_gpt_t(m, -1, MT_T_OUTPUT) : -1;
    if (m->last && m->head < 0) m->head = mt_gpt_t(m, -1, MT_T_WORD_EMB);
    return 0;
}

const mt_layout *mt_gpt_layout(const mt_gpt *m) { return &m->layout; }
size_t mt_gpt_expert_lo(const mt_gpt *m) { return m->layout.expert_lo; }
uint64_t mt_gpt_ep_bytes(const mt_gpt *m) { return m->ep_bytes; }

/* ---- weights ---- */

mt_gpt *mt_gpt_create(mtk *k, const mt_gpt_config *config, int mode, mt_err *e)
{
    return mt_gpt_create_tp(k, config, NULL, mode, e);
}

mt_gpt *mt_gpt_create_tp(mtk *k, const mt_gpt_config *config, mt_comm *tp, int mode, mt_err *e)
{
    return mt_gpt_create_chunks(k, config, tp, 0, 1, 1, mode, e);
}

/* The expert tensor size of the config: tp (or 0), or a divisor of tp with sequence parallelism
 * (experts_grouped; 1: experts_whole); the router's statistics summed over the tensor group until
 * mt_gpt_set_router_group says otherwise. */
static int expert_tensor(mt_gpt *m, const mt_gpt_config *c, mt_err *e)
{
    int etp = c->expert_tensor_parallel_size > 0 && c->num_experts > 0 ? c->expert_tensor_parallel_size : m->tp_size;
    if (m->tp_size % etp)
        return mt_err_set(e, "--expert-tensor-parallel-size (%d) must divide --tensor-model-parallel-size (%d)", etp,
                          m->tp_size);
    m->etp = etp;
    m->experts_grouped = etp < m->tp_size;
    m->experts_whole = m->experts_grouped && etp == 1;
    if (m->experts_grouped && !m->sp)
        return mt_err_set(e, "--expert-tensor-parallel-size %d with --tensor-model-parallel-size %d needs --sequence-parallel",
                          etp, m->tp_size);
    m->router_group = m->tp;
    return 0;
}

/* The shapes of the part (tensor rank tp_rank of tp_size, stage of stages) with activations of asz bytes:
 * its table and shares, no device memory (m zeroed by the caller). */
static int describe(mt_gpt *m, const mt_gpt_config *config, int tp_rank, int tp_size, int stage, int stages,
                    int vp, size_t asz, mt_err *e)
{
    if (m->ep_size < 1) m->ep_size = 1;
    if (mt_gpt_config_check(config, e)) return -1;
    m->c = *config;
    m->asz = asz;
    m->tp_rank = tp_rank;
    m->tp_size = tp_size;
    m->heads = config->num_heads / m->tp_size;
    m->ffn = config->ffn_hidden_size / m->tp_size;
    m->vocab = config->padded_vocab_size / m->tp_size;
    m->v0 = m->tp_rank * m->vocab;
    m->hs = config->hidden_size / config->num_heads;
    m->groups = (config->num_query_groups > 0 ? config->num_query_groups : config->num_heads) / m->tp_size;
    m->qkvw = (m->heads + 2 * m->groups) * m->hs;
    m->fcw = (config->mlp == MT_MLP_SWIGLU ? 2 : 1) * m->ffn;
    m->rot = config->position == MT_POS_ROPE ? (int)(m->hs * (config->rotary_percent > 0 ? config->rotary_percent : 1.0)) : 0;
    m->sp = tp_size > 1 && config->sequence_parallel;
    if (expert_tensor(m, config, e)) return -1;
    m->cp_size = config->context_parallel_size > 1 ? config->context_parallel_size : 1;
    m->pp_stage = stage, m->pp_size = stages, m->vp = vp > 1 ? vp : 1;
    if (m->vp > 16) return mt_err_set(e, "%d model chunks per stage: at most 16", m->vp);
    m->first = stage == 0, m->last = stage == stages - 1;
    m->tp_counts = mt_xcalloc((size_t)m->tp_size, sizeof *m->tp_counts);
    return build_table(m, e);
}

mt_gpt *mt_gpt_create_stage(mtk *k, const mt_gpt_config *config, mt_comm *tp, int stage, int stages, int mode,
                            mt_err *e)
{
    return mt_gpt_create_chunks(k, config, tp, stage, stages, 1, mode, e);
}

mt_gpt *mt_gpt_create_chunks(mtk *k, const mt_gpt_config *config, mt_comm *tp, int stage, int stages, int vp, int mode,
                             mt_err *e)
{
    return mt_gpt_create_ep(k, config, tp, NULL, stage, stages, vp, mode, e);
}

mt_gpt *mt_gpt_create_ep(mtk *k, const mt_gpt_config *config, mt_comm *tp, mt_comm *ep, int stage, int stages, int vp,
                         int mode, mt_err *e)
{
    mt_gpt *m = mt_xcalloc(1, sizeof *m);
    m->k = k;
    m->tp = tp && tp->size > 1 ? tp : NULL;
    m->ep = ep && ep->size > 1 ? ep : NULL;
    m->ep_rank = m->ep ? ep->rank : 0;
    m->ep_size = m->ep ? ep->size : 1;
    if (describe(m, config, m->tp ? tp->rank : 0, m->tp ? tp->size : 1, stage, stages, vp, mtk_act_size(k), e)) {
        mt_gpt_free(m);
        return NULL;
    }
    size_t fl = sizeof(float);
    m->params = mtk_alloc(k, m->nparams * fl, e);
    if (m->params && mode == MT_GPT_TRAIN) m->grads = mtk_alloc(k, m->nparams * fl, e);
    if (m->params && mtk_act_dtype(k) != MTK_F32) m->work = mtk_alloc(k, m->nparams * m->asz, e);
    else m->work = m->params;
    if (!m->params || (mode == MT_GPT_TRAIN && !m->grads) || !m->work) {
        mt_err_prefix(e, "GPT model (%zu parameters)", m->nparams);
        mt_gpt_free(m);
        return NULL;
    }
    return m;
}

void mt_gpt_free(mt_gpt *m)
{
    if (!m) return;
    if (m->k && m->work && m->work != m->params) mtk_free(m->k, m->work);
    if (m->params) mtk_free(m->k, m->params);
    if (m->kept) mtk_free(m->k, m->kept);
    if (m->shared) mtk_free(m->k, m->shared);
    free(m->koff);
    if (m->grads) mtk_free(m->k, m->grads);
    free(m->tensors);
    free(m->tix);
    free(m->tp_counts);
    mt_ring_attention_free(m->ring);
    if (m->cp_losses) mtk_free(m->k, m->cp_losses);
    mt_fp8_free(m->k, m->fp8);
    mt_layout_free(&m->layout);
    free(m);
}

mtk_act *mt_gpt_work(mt_gpt *m) { return m->work != m->params ? m->work : NULL; }

void mt_gpt_params_changed(mt_gpt *m)
{
    /* once the master is dropped the optimizer writes the working copy itself */
    if (m->params && m->work != m->params)
        mtk_convert(m->k, m->work, mtk_act_dtype(m->k), m->params, MTK_F32, m->nparams);
}

int mt_gpt_drop_master(mt_gpt *m, mt_err *e)
{
    if (!m->params || m->work == m->params) return 0;
    size_t n = 0;
    m->koff = mt_xmalloc((size_t)(m->ntensors > 0 ? m->ntensors : 1) * sizeof *m->koff);
    for (int i = 0; i < m->ntensors; i++) {
        m->koff[i] = n;
        if (m->tensors[i].ndim == 1) n += m->tensors[i].numel;
    }
    float *kept = mtk_alloc(m->k, (n ? n : 1) * sizeof(float), e);
    if (!kept) {
        free(m->koff);
        m->koff = NULL;
        return mt_err_prefix(e, "fp32 copy of the biases and norm weights (%zu values)", n);
    }
    for (int i = 0; i < m->ntensors; i++)
        if (m->tensors[i].ndim == 1)
            mtk_copy(m->k, kept + m->koff[i], m->params + m->tensors[i].offset, m->tensors[i].numel * sizeof(float));
    mtk_free(m->k, m->params);
    m->params = NULL;
    m->kept = kept;
    m->nkept = n;
    return 0;
}

int mt_gpt_master_dropped(const mt_gpt *m) { return m->kept != NULL; }

float *mt_gpt_kept(mt_gpt *m, size_t *n)
{
    if (n) *n = m->nkept;
    return m->kept;
}

size_t mt_gpt_kept_before(const mt_gpt *m, size_t off)
{
    size_t n = 0;
    for (int i = 0; i < m->ntensors; i++) {
        const mt_gpt_tensor *t = &m->tensors[i];
        if (t->ndim != 1 || t->offset >= off) continue;
        n += off - t->offset < t->numel ? off - t->offset : t->numel;
    }
    return n;
}

void mt_gpt_kept_counts(const mt_gpt *m, const size_t *bounds, int n, size_t *counts)
{
    for (int r = 0; r < n; r++) counts[r] = mt_gpt_kept_before(m, bounds[r + 1]) - mt_gpt_kept_before(m, bounds[r]);
}

void mt_gpt_kept_from(mt_gpt *m, const float *shard, size_t lo, size_t hi)
{
    for (int i = 0; i < m->ntensors && m->kept; i++) {
        const mt_gpt_tensor *t = &m->tensors[i];
        size_t a = t->offset > lo ? t->offset : lo, b = t->offset + t->numel < hi ? t->offset + t->numel : hi;
        if (t->ndim != 1 || a >= b) continue;
        mtk_copy(m->k, m->kept + m->koff[i] + (a - t->offset), shard + (a - lo), (b - a) * sizeof(float));
    }
}

int mt_gpt_reserve(mt_gpt *m, size_t n, int T, mt_err *e)
{
    const mt_gpt_config *c = &m->c;
    size_t C = (size_t)c->hidden_size, V = (size_t)m->vocab, F = (size_t)m->fcw, Q = (size_t)m->qkvw;
    /* the largest activation-dtype operand of any operation, with this rank's shares of the vocabulary,
     * ffn and heads: activations [n][V|F|QKV|C], weights [V|pos|QKV|F|C][C] */
    size_t R = mt_moe_rows_max(m, n), EF = (size_t)(c->mlp == MT_MLP_SWIGLU ? 2 : 1) * (size_t)(c->moe_ffn_hidden_size / m->etp);
    size_t SF = (size_t)(c->mlp == MT_MLP_SWIGLU ? 2 : 1) * (size_t)(c->moe_shared_ffn / m->tp_size);
    size_t cand[] = {n * V, n * F, n * Q, n * C, V * C, (size_t)c->max_position_embeddings * C, Q * C, F * C, C * C,
                     R * C, R * EF, EF * C, (size_t)c->num_experts * C, n * SF, SF * C};
    size_t big = 0;
    for (size_t i = 0; i < sizeof cand / sizeof cand[0]; i++) big = cand[i] > big ? cand[i] : big;
    mtk_limits lim = {.max_act = big, .max_flat = m->nparams, .max_seq = T, .max_head_size = (int)(C / (size_t)c->num_heads)};
    return mtk_reserve(m->k, &lim, e);
}

const mt_gpt_config *mt_gpt_get_config(const mt_gpt *m) { return &m->c; }
mtk *mt_gpt_backend(const mt_gpt *m) { return m->k; }
void mt_gpt_set_layer_hook(mt_gpt *m, mt_gpt_layer_hook hook, void *arg) { m->hook = hook, m->hook_arg = arg; }
size_t mt_gpt_num_params(const mt_gpt *m) { return m->nparams; }
int mt_gpt_num_tensors(const mt_gpt *m) { return m->ntensors; }
const mt_gpt_tensor *mt_gpt_tensor_at(const mt_gpt *m, int i)
{
    return i >= 0 && i < m->ntensors ? &m->tensors[i] : NULL;
}
const mt_gpt_tensor *mt_gpt_tensor_find(const mt_gpt *m, const char *name)
{
    for (int i = 0; i < m->ntensors; i++)
        if (!strcmp(m->tensors[i].name, name)) return &m->tensors[i];
    return NULL;
}
float *mt_gpt_params(mt_gpt *m) { return m->params; }
float *mt_gpt_grads(mt_gpt *m) { return m->grads; }

/* Whether the backward's products assign tensor t's gradient on a step's first micro-batch: the matrices
 * and their biases, and the output layer's weight (the word embeddings when they are it). The rest
 * (LayerNorms, position embeddings, word embeddings the output layer does not use) are zeroed by
 * mt_gpt_zero_grad; the products then neither need a zeroed buffer nor read it. */
static int product_grad(const mt_gpt *m, int t)
{
    if (t == m->head) return 1;
    switch (m->layout.t[t].kind) {
    case MT_T_QKV_W: case MT_T_QKV_B: case MT_T_PROJ_W: case MT_T_PROJ_B:
    case MT_T_FC1_W: case MT_T_FC1_B: case MT_T_FC2_W: case MT_T_FC2_B:
    case MT_T_ROUTER_W: case MT_T_EXPERT_FC1_W: case MT_T_EXPERT_FC2_W: case MT_T_SHARED_FC1_W: case MT_T_SHARED_FC2_W:
    case MT_T_SHARED_GATE_W: return 1;
    default: return 0;
    }
}

void mt_gpt_zero_grad(mt_gpt *m)
{
    if (!m->grads) return;
    size_t run0 = 0, run1 = 0;   /* adjacent tensors to zero in one call: floats [run0, run1) */
    for (int t = 0; t < m->ntensors; t++) {
        const mt_gpt_tensor *x = &m->tensors[t];
        if (product_grad(m, t)) continue;
        if (x->offset != run1) {
            if (run1 > run0) mtk_zero(m->k, m->grads + run0, (run1 - run0) * sizeof(float));
            run0 = x->offset;
        }
        run1 = x->offset + x->numel;
    }
    if (run1 > run0) mtk_zero(m->k, m->grads + run0, (run1 - run0) * sizeof(float));
    m->grads_assign = (1u << m->vp) - 1;   /* every chunk's */
    mt_fp8_new_iteration(m);
}

void mt_gpt_memory(const mt_gpt *m, size_t *param_bytes, size_t *grad_bytes, size_t *act_bytes)
{
    size_t wb = m->work != m->params ? m->nparams * m->asz : 0;
    /* the fp32 master, or once dropped only the 1-D tensors' fp32 values */
    size_t mb = (m->params ? m->nparams : m->nkept) * sizeof(float);
    if (param_bytes) *param_bytes = mb + wb;
    if (grad_bytes) *grad_bytes = m->grads ? m->nparams * sizeof(float) : 0;
    /* with the context-parallel attention's buffers and the FP8 state */
    if (act_bytes) *act_bytes = m->ctx_bytes + m->cp_bytes + mt_fp8_bytes(m);
}

/* ---- activation contexts ---- */

static void *ctx_alloc(mt_gpt_ctx *x, size_t bytes, int *failed, mt_err *e)
{
    if (*failed) return NULL;
    void *p = mtk_alloc(x->m->k, bytes ? bytes : 1, e);
    if (!p) *failed = 1;
    x->bytes += bytes;
    return p;
}

/* The recomputation policy of the config (Megatron's transformer block): with --recompute-granularity
 * full, layers are recomputed in chunks of recompute_num_layers (uniform: every layer, chunk k holding
 * layers [k n, k n + n); block: the first n layers of the stage, each its own chunk); the others keep
 * their activations. *slots: the layer slots a context needs. */
static void recompute_plan(const mt_gpt *m, int *chunk, int *recomputed, int *slots)
{
    const mt_gpt_config *c = &m->c;
    int L = m->nl / m->vp, n = c->recompute_num_layers > 0 ? c->recompute_num_layers : 1;
    if (n > L) n = L;
    *chunk = 1, *recomputed = 0, *slots = L;
    if (c->recompute_granularity != MT_RECOMPUTE_FULL || L == 0) return;
    if (c->recompute_method == MT_RECOMPUTE_UNIFORM) {
        *chunk = n, *recomputed = L, *slots = n;
    } else {
        *chunk = 1, *recomputed = n, *slots = L - n + (n > 0);
    }
}

int mt_gpt_recomputed_layers(const mt_gpt *m)
{
    int chunk, recomputed, slots;
    recompute_plan(m, &chunk, &recomputed, &slots);
    return recomputed;
}

/* The slot of local layer li's activations, and whether they are recomputed in the backward pass. */
static int layer_slot(const mt_gpt_ctx *x, int li) { return li < x->recomputed ? li % x->chunk : x->recomputed ? li - x->recomputed + 1 : li; }

/* The buffers of a context, in allocation order: where each goes and its bytes (x's sizes and plan set). */
enum { CTX_BUFFERS = 17 };
static void ctx_buffers(mt_gpt_ctx *x, void **where[CTX_BUFFERS], size_t bytes[CTX_BUFFERS])
{
    const mt_gpt *m = x->m;
    /* per rank: the hidden size C is whole, heads (Cl = C / tp of the attention), ffn and vocabulary shared out */
    size_t L = (size_t)x->lcn, S = (size_t)x->nslots, C = (size_t)m->c.hidden_size;
    size_t Cl = C / (size_t)m->tp_size, N = x->nmax, R = x->nres, V = (size_t)m->vocab, fl = sizeof(float), a = m->asz;
    size_t last = x->last ? 1 : 0, i = 0;
#define BUF(field, n) (where[i] = (void **)&x->field, bytes[i++] = (n))
    BUF(bnd, (L + 1) * R * C * a);
    BUF(mid, S * R * C * a);
    BUF(ln, S * 2 * R * C * a);
    BUF(ln_stat, S * 4 * R * fl);
    BUF(qkv, S * N * (size_t)m->qkvw * a);
    BUF(atty, S * N * Cl * a);
    BUF(lse, S * N * (size_t)m->heads * fl);
    BUF(fch, S * N * (size_t)m->fcw * a);
    BUF(lnf, last * R * C * a);
    BUF(lnf_stat, last * 2 * R * fl);
    BUF(logits, last * N * V * a);
    BUF(xent, last * 3 * N * fl);
    BUF(s_c1, N * C * a);
    BUF(d_tok, N * sizeof(int32_t));
    BUF(d_tgt, N * sizeof(int32_t));
    BUF(d_losses, N * fl);
    BUF(d_dscale, N * fl);
#undef BUF
}

/* The scratch a context of N tokens takes from the model's shared buffer: s_c2, s_c3 [N][C], s_qkv
 * [N][3Cl], s_f1 [N][F or 2F], s_f2 [N][F], in that order. */
static size_t shared_need(const mt_gpt *m, size_t N)
{
    size_t C = (size_t)m->c.hidden_size, a = m->asz;
    return N * a * (2 * C + (size_t)m->qkvw + (size_t)m->fcw + (size_t)m->ffn);
}

/* Points x's shared scratch into the model's (every pass binds it: the buffer may have grown since). */
static void bind_shared(mt_gpt_ctx *x)
{
    const mt_gpt *m = x->m;
    size_t N = x->nmax, C = (size_t)m->c.hidden_size, a = m->asz;
    char *p = m->shared;
    x->s_c2 = p, p += N * C * a;
    x->s_c3 = p, p += N * C * a;
    x->s_qkv = p, p += N * (size_t)m->qkvw * a;
    x->s_f1 = p, p += N * (size_t)m->fcw * a;
    x->s_f2 = p;
}

/* The shared scratch large enough for a context of N tokens. 0, or -1 with e set. */
static int grow_shared(mt_gpt *m, size_t N, mt_err *e)
{
    size_t need = shared_need(m, N);
    if (need <= m->shared_bytes) return 0;
    if (m->shared) {   /* between passes: nothing queued still reads it once the stream is drained */
        if (mtk_sync(m->k, e)) return -1;
        mtk_free(m->k, m->shared);
        m->ctx_bytes -= m->shared_bytes;
        m->shared = NULL, m->shared_bytes = 0;
    }
    if (!(m->shared = mtk_alloc(m->k, need, e))) return mt_err_prefix(e, "GPT scratch (%zu bytes)", need);
    m->shared_bytes = need;
    m->ctx_bytes += need;
    return 0;
}

/* Sets the sizes and the recomputation plan of a context of max_batch sequences for model chunk `chunk`;
 * -1 if too large. */
static int ctx_shape(mt_gpt_ctx *x, mt_gpt *m, int chunk, int max_batch, mt_err *e)
{
    const mt_gpt_config *config = &m->c;
    if (max_batch <= 0) return mt_err_set(e, "--micro-batch-size (%d) must be positive", max_batch);
    if (chunk < 0 || chunk >= m->vp) return mt_err_set(e, "GPT context: model chunk %d of %d", chunk, m->vp);
    x->m = m;
    x->chunk_id = chunk;
    x->lcn = m->nl / m->vp;
    x->lc0 = chunk * x->lcn;
    x->first = m->first && chunk == 0;
    x->last = m->last && chunk == m->vp - 1;
    x->max_batch = max_batch;
    x->nmax = (size_t)max_batch * (size_t)(config->seq_length / m->cp_size);   /* this rank's tokens */
    if ((size_t)max_batch * (size_t)config->seq_length > 2147483647u / 4)
        return mt_err_set(e, "--micro-batch-size (%d) x --seq-length (%d) is too large", max_batch, config->seq_length);
    x->nres = m->sp ? x->nmax / (size_t)m->tp_size : x->nmax;
    recompute_plan(m, &x->chunk, &x->recomputed, &x->nslots);
    return 0;
}

int mt_gpt_experts_grouped(const mt_gpt *m) { return m->experts_grouped; }

void mt_gpt_set_router_group(mt_gpt *m, mt_comm *tpcp)
{
    if (tpcp && tpcp->size > 1) m->router_group = tpcp;
}

void mt_gpt_set_expert_tensor_group(mt_gpt *m, mt_comm *etp)
{
    m->etp_comm = etp && etp->size > 1 ? etp : NULL;
}

int mt_gpt_set_context_parallel(mt_gpt *m, mt_comm *cp, int type, int overlap, mt_err *e)
{
    int n = cp ? cp->size : 1;
    if (n != m->cp_size)
        return mt_err_set(e, "context parallelism over %d ranks for a model configured for %d", n, m->cp_size);
    if (m->ctx_bytes) return mt_err_set(e, "context parallelism set after the model's contexts were made");
    m->cp = n > 1 ? cp : NULL;
    m->cp_rank = n > 1 ? cp->rank : 0;
    m->cp_type = type, m->cp_overlap = overlap;
    return 0;
}

uint64_t mt_gpt_cp_bytes(const mt_gpt *m) { return m->ring ? mt_ring_attention_sent(m->ring) : 0; }

/* The ring attention and the gathered losses for micro-batches of max_batch (made, or grown, once). */
static int cp_ready(mt_gpt *m, int max_batch, mt_err *e)
{
    if (!m->cp) return mt_err_set(e, "a model of --context-parallel-size %d without its group", m->cp_size);
    if (m->ring && m->ring_batch >= max_batch) return 0;
    mt_ring_attention_free(m->ring);
    if (m->cp_losses) mtk_free(m->k, m->cp_losses);
    m->cp_losses = NULL;
    m->ring_batch = 0;
    m->ring = mt_ring_attention_new(m->k, m->cp, max_batch, m->c.seq_length, m->heads, m->groups, m->hs,
                                    (mt_cp_comm)m->cp_type, m->cp_overlap, e);
    if (!m->ring) return -1;
    mt_ring_attention_heads(m->ring, m->c.num_heads, m->tp_rank * m->heads);
    m->cp_losses = mtk_alloc(m->k, (size_t)max_batch * (size_t)m->c.seq_length * sizeof(float), e);
    if (!m->cp_losses) return -1;
    m->ring_batch = max_batch;
    m->cp_bytes = mt_ring_attention_bytes(m->ring) + (size_t)max_batch * (size_t)m->c.seq_length * sizeof(float);
    return 0;
}

mt_gpt_ctx *mt_gpt_ctx_new(mt_gpt *m, int max_batch, mt_err *e) { return mt_gpt_ctx_new_chunk(m, 0, max_batch, e); }

mt_gpt_ctx *mt_gpt_ctx_new_chunk(mt_gpt *m, int chunk, int max_batch, mt_err *e)
{
    mt_gpt_ctx *x = mt_xcalloc(1, sizeof *x);
    if (ctx_shape(x, m, chunk, max_batch, e)) {
        free(x);
        return NULL;
    }
    void **where[CTX_BUFFERS];
    size_t bytes[CTX_BUFFERS];
    ctx_buffers(x, where, bytes);
    int failed = 0;
    for (int i = 0; i < CTX_BUFFERS; i++) *where[i] = ctx_alloc(x, bytes[i], &failed, e);
    x->moe = mt_moe_ctx_new(m, x->nmax, max_batch, x->nslots, m->nl, &failed, e);
    x->bytes += mt_moe_bytes(x->moe);
    x->moe_scale = 1.0;
    if (m->fp8 && !failed && !(x->fp8_scale = mt_fp8_ctx_scales(m, e))) failed = 1;
    x->bytes += mt_fp8_ctx_scale_bytes(m);
    if (failed || grow_shared(m, x->nmax, e) || mt_gpt_reserve(m, x->nmax, m->c.seq_length, e)) {
        mt_err_prefix(e, "GPT activations (%zu bytes)", x->bytes);
        mt_gpt_ctx_free(x);
        return NULL;
    }
    if (m->cp_size > 1 && cp_ready(m, max_batch, e)) {
        mt_err_prefix(e, "GPT activations");
        mt_gpt_ctx_free(x);
        return NULL;
    }
    x->h_losses = mt_xmalloc(x->nmax * (size_t)m->cp_size * sizeof(float));   /* the whole micro-batch's */
    x->h_dscale = mt_xmalloc(x->nmax * sizeof(float));
    if (m->cp_size > 1) x->h_tok = mt_xmalloc(2 * x->nmax * sizeof(int32_t));
    m->ctx_bytes += x->bytes;
    bind_shared(x);
    return x;
}

int mt_gpt_plan_part(const mt_gpt_config *config, int tp_rank, int tp_size, int stage, int stages, int vp,
                     int max_batch, size_t act_size, size_t *params, size_t *ctx_bytes, size_t *shared_bytes, mt_err *e)
{
    return mt_gpt_plan_part_ep(config, tp_rank, tp_size, 1, stage, stages, vp, max_batch, act_size, 0, params, NULL,
                               ctx_bytes, shared_bytes, e);
}

int mt_gpt_plan_part_ep(const mt_gpt_config *config, int tp_rank, int tp_size, int ep_size, int stage, int stages,
                        int vp, int max_batch, size_t act_size, int fp8_history, size_t *params, size_t *expert_params,
                        size_t *ctx_bytes, size_t *shared_bytes, mt_err *e)
{
    mt_gpt m = {0};
    m.ep_size = ep_size > 1 ? ep_size : 1;
    int rc = describe(&m, config, tp_rank, tp_size, stage, stages, vp, act_size, e);
    size_t fp8_ctx = 0;   /* FP8: its state counted with the scratch the contexts share, each context's scales */
    if (!rc) *shared_bytes = shared_need(&m, (size_t)max_batch * (size_t)(config->seq_length / m.cp_size)) +
                             (fp8_history > 0 ? mt_fp8_plan_bytes(&m, fp8_history, &fp8_ctx) : 0);
    for (int c = 0; !rc && c < m.vp; c++) {
        mt_gpt_ctx x = {0};
        rc = ctx_shape(&x, &m, c, max_batch, e);
        if (rc) break;
        void **where[CTX_BUFFERS];
        size_t bytes[CTX_BUFFERS];
        ctx_buffers(&x, where, bytes);
        ctx_bytes[c] = mt_moe_ctx_bytes(&m, x.nmax, max_batch, x.nslots) + fp8_ctx;
        for (int i = 0; i < CTX_BUFFERS; i++) ctx_bytes[c] += bytes[i];
        *params = m.nparams;
        if (expert_params) *expert_params = m.nparams - m.layout.expert_lo;
    }
    free(m.tensors);
    free(m.tix);
    free(m.tp_counts);
    mt_layout_free(&m.layout);
    return rc;
}

void mt_gpt_ctx_free(mt_gpt_ctx *x)
{
    if (!x) return;
    void **where[CTX_BUFFERS];
    size_t bytes[CTX_BUFFERS];
    ctx_buffers(x, where, bytes);
    for (int i = 0; i < CTX_BUFFERS; i++)
        if (*where[i]) mtk_free(x->m->k, *where[i]);
    mt_moe_ctx_free(x->moe);
    if (x->fp8_scale) mtk_free(x->m->k, x->fp8_scale);
    if (x->h_losses) x->m->ctx_bytes -= x->bytes;
    free(x->h_losses);
    free(x->h_dscale);
    free(x->h_tok);
    free(x);
}

/* ---- dropout ---- */

void mt_gpt_set_dropout(mt_gpt_ctx *x, int training, uint64_t key)
{
    x->training = training != 0;
    x->dropout_key = key;
}

/* Dropout sites of one micro-batch: the embedding (0), and per layer l the attention probabilities
 * (1 + 3l), the attention output (2 + 3l) and the MLP output (3 + 3l). Each site's seed is a
 * splitmix64 hash of the key and the site, so sites and keys draw unrelated masks. */
enum { SITE_EMBED = 0, SITE_ATTN_PROBS = 1, SITE_ATTN_OUT = 2, SITE_MLP_OUT = 3 };

uint64_t mt_gpt_dropout_seed(uint64_t key, uint64_t site) { return mt_mix64(key + (site + 1) * MT_GOLDEN64); }

/* NULL when this site applies no dropout (evaluation mode or p == 0). offset: the counter of the first
 * element the call covers (with sequence parallelism, this rank's first row of the site's region). */
static const mtk_dropout *site_dropout(const mt_gpt_ctx *x, mtk_dropout *d, int layer, int kind, uint64_t offset)
{
    float p = kind == SITE_ATTN_PROBS ? x->m->c.attention_dropout : x->m->c.hidden_dropout;
    if (!x->training || !(p > 0)) return NULL;
    uint64_t site = kind == SITE_EMBED ? 0 : 1 + 3 * (uint64_t)layer + (uint64_t)(kind - 1);
    d->p = p;
    d->seed = mt_gpt_dropout_seed(x->dropout_key, site);
    d->offset = offset;
    return d;
}

/* ---- forward ---- */

/* Element i of an activation-dtype buffer. */
#define AT(buf, i) ((void *)((char *)(buf) + (size_t)(i) * m->asz))

/* Local layer li's activations in its slot (gpt_impl.h), shared by forward, recomputation and backward. */
typedef struct layer_acts {
    void *res_in, *res_mid, *res_out, *ln1, *ln2, *qkv, *atty, *fch;
    float *mean1, *rstd1, *mean2, *rstd2, *lse;
} layer_acts;

static void layer_views(const mt_gpt_ctx *x, int li, layer_acts *a)
{
    const mt_gpt *m = x->m;
    size_t s = (size_t)layer_slot(x, li - x->lc0);
    size_t nC = x->nmax * (size_t)m->c.hidden_size, nCl = nC / (size_t)m->tp_size;
    size_t rC = x->nres * (size_t)m->c.hidden_size;
    a->res_in = AT(x->bnd, (size_t)(li - x->lc0) * rC);
    a->res_out = AT(x->bnd, (size_t)(li - x->lc0 + 1) * rC);
    a->res_mid = AT(x->mid, s * rC);
    a->ln1 = AT(x->ln, 2 * s * rC);
    a->ln2 = AT(a->ln1, rC);
    a->mean1 = x->ln_stat + 4 * s * x->nres, a->rstd1 = a->mean1 + x->nres;
    a->mean2 = a->rstd1 + x->nres, a->rstd2 = a->mean2 + x->nres;
    a->qkv = AT(x->qkv, s * x->nmax * (size_t)m->qkvw);
    a->atty = AT(x->atty, s * nCl);
    a->lse = x->lse + s * x->nmax * (size_t)m->heads;
    a->fch = AT(x->fch, s * x->nmax * (size_t)m->fcw);
}

/* Local layer li's forward pass on x's micro-batch (B x T tokens); scratch: a free [N, C] buffer. */
static int layer_forward(mt_gpt_ctx *x, int li, void *scratch, mt_err *e)
{
    mt_gpt *m = x->m;
    const mt_gpt_config *c = &m->c;
    mtk *k = m->k;
    int B = x->B, T = x->T, N = B * T, C = c->hidden_size, Cl = C / m->tp_size, F = m->ffn, Nl = mt_tp_tokens(m, N);
    uint64_t h0 = (uint64_t)mt_tp_first(m, N) * (uint64_t)C;   /* the hidden dropout's first counter */
    int l = mt_layout_global_layer(&m->layout, li);   /* the global layer: its tensors and dropout sites */
    mtk_dropout dd;
    const mtk_dropout *drop;
#define T_(kind) mt_gpt_t(m, l, kind)
#define PO(kind) mt_gpt_popt(m, mt_gpt_t(m, l, kind))
#define W(kind) mt_gpt_w(m, mt_gpt_t(m, l, kind))
    /* a product's weight, quantized with FP8 (n elements) */
#define WQ(p, kind, n) (fp8 ? mt_fp8_weight(x, li, p, W(kind), n) : W(kind))
    const int fp8 = m->fp8 != NULL;
    layer_acts a;
    layer_views(x, li, &a);
    void *out = mt_tp_local(m, scratch, N, C);

    /* attention: QKV column-parallel (this rank's heads and key/value groups), rotary positions on q and k,
     * dense row-parallel (summed over the ranks) */
    mt_gpt_norm_fwd(m, a.ln1, a.mean1, a.rstd1, a.res_in, T_(MT_T_NORM1_W), T_(MT_T_NORM1_B), Nl, C);
    if (fp8) mt_fp8_input(x, li, MT_FP8_QKV, a.ln1, a.ln1, (size_t)Nl * C);   /* kept quantized, for the backward */
    const void *ln1 = mt_tp_gathered(m, scratch, a.ln1, N, C, e);   /* every rank's rows, in scratch */
    if (!ln1) return mt_err_prefix(e, "GPT forward, layer %d attention", l);
    mtk_matmul_fwd(k, a.qkv, ln1, WQ(MT_FP8_QKV, MT_T_QKV_W, (size_t)m->qkvw * C), PO(MT_T_QKV_B), N, C, m->qkvw);
    if (m->rot) mt_cp_rope(m, 1, a.qkv, B, T);
    if (mt_cp_attention_fwd(m, a.atty, a.lse, a.qkv, B, T, site_dropout(x, &dd, l, SITE_ATTN_PROBS, 0), e))
        return mt_err_prefix(e, "GPT forward, layer %d attention", l);
    const void *atty = a.atty;   /* FP8: quantized aside (the attention's backward reads its output) */
    if (fp8) mt_fp8_input(x, li, MT_FP8_PROJ, x->s_f2, a.atty, (size_t)N * Cl), atty = x->s_f2;
    if (mt_tp_row_linear_fwd(m, scratch, atty, WQ(MT_FP8_PROJ, MT_T_PROJ_W, (size_t)C * Cl), PO(MT_T_PROJ_B), N, Cl, C, e))
        return mt_err_prefix(e, "GPT forward, layer %d attention", l);
    /* the dense output's dropout fused into the residual add and the norm that follows it (with context
     * parallelism, by runs of global tokens first: the same bits) */
    if ((drop = site_dropout(x, &dd, l, SITE_ATTN_OUT, h0)) && m->cp_size > 1) {
        mt_cp_dropout(m, 1, out, out, B, T, drop);
        drop = NULL;
    }
    mt_gpt_add_norm_fwd(m, a.res_mid, a.ln2, a.mean2, a.rstd2, a.res_in, out, T_(MT_T_NORM2_W),
                        T_(MT_T_NORM2_B), Nl, C, drop);
    /* MLP: the first layer column-parallel (GeLU, or SwiGLU of its gate and up halves), the second row-parallel;
     * an MoE layer with whole experts and no shared expert on this rank's rows alone (moe.h) */
    int moe = mt_arch_is_moe(&m->layout.arch, l), rows_only = moe && mt_moe_rows_only(m);
    if (fp8 && !moe) mt_fp8_input(x, li, MT_FP8_FC1, a.ln2, a.ln2, (size_t)Nl * C);   /* the router reads ln2 as it is */
    const void *ln2 = rows_only ? mt_tp_placed(m, scratch, a.ln2, N, C)
                                : mt_tp_gathered(m, scratch, a.ln2, N, C, e);   /* scratch: the dense output is added */
    if (!ln2) return mt_err_prefix(e, "GPT forward, layer %d MLP", l);
    if (moe) {   /* its output (over ln2 when gathered) summed over the ranks */
        if (mt_moe_forward(x->moe, fp8 ? x : NULL, layer_slot(x, li - x->lc0), li, l, ln2, scratch, B, T, x->training, e) ||
            (!rows_only && mt_tp_input_grad(m, scratch, N, C, e)))
            return mt_err_prefix(e, "GPT forward, layer %d MoE", l);
    } else if (c->mlp == MT_MLP_SWIGLU) {
        mtk_matmul_fwd(k, a.fch, ln2, WQ(MT_FP8_FC1, MT_T_FC1_W, (size_t)m->fcw * C), PO(MT_T_FC1_B), N, C, m->fcw);
        mtk_swiglu_fwd(k, x->s_f1, a.fch, N, F);
    } else
        mtk_matmul_gelu_fwd(k, x->s_f1, a.fch, ln2, WQ(MT_FP8_FC1, MT_T_FC1_W, (size_t)m->fcw * C), PO(MT_T_FC1_B), N,
                            C, F, c->exact_gelu);
    if (fp8 && !mt_arch_is_moe(&m->layout.arch, l)) mt_fp8_input(x, li, MT_FP8_FC2, x->s_f1, x->s_f1, (size_t)N * F);
    if (!mt_arch_is_moe(&m->layout.arch, l) &&
        mt_tp_row_linear_fwd(m, scratch, x->s_f1, WQ(MT_FP8_FC2, MT_T_FC2_W, (size_t)C * F), PO(MT_T_FC2_B), N, F, C, e))
        return mt_err_prefix(e, "GPT forward, layer %d MLP", l);
    if ((drop = site_dropout(x, &dd, l, SITE_MLP_OUT, h0))) mt_cp_dropout(m, 1, out, out, B, T, drop);
    mtk_add(k, a.res_out, a.res_mid, out, (size_t)Nl * C);
#undef T_
#undef PO
#undef W
#undef WQ
    return 0;
}

double mt_gpt_loss_sum(const float *losses, const float *mask, size_t n)
{
    double sum = 0;
    for (size_t i = 0; i < n; i++) sum += (mask ? mask[i] : 1.0) * losses[i];
    return sum;
}

/* The forward pass; dev_losses non-NULL: without waiting (mt_gpt_forward_async). */
static int forward(mt_gpt_ctx *x, const int32_t *tokens, const int32_t *targets, const float *loss_mask, int B, int T,
                   float *tok_losses, int async, float *dev_losses, mt_gpt_loss *loss, mt_err *e)
{
    mt_gpt *m = x->m;
    const mt_gpt_config *c = &m->c;
    x->have_forward = 0;
    loss->sum = loss->count = 0;
    bind_shared(x);
    if (B <= 0 || T <= 0 || B > x->max_batch || T > c->seq_length)
        return mt_err_set(e, "GPT forward: batch %d x %d tokens outside the context's %d x %d", B, T, x->max_batch,
                          c->seq_length);
    if (m->cp_size > 1 && T != c->seq_length)
        return mt_err_set(e, "GPT forward: %d tokens per sequence; context parallelism takes --seq-length (%d)", T,
                          c->seq_length);
    /* per rank: Tl of each sequence's tokens (all T unless context-parallel), Nl the tokens of the regions
     * between the products (all N = B Tl unless sequence-parallel) */
    const int NG = B * T;   /* the whole micro-batch's tokens */
    T /= m->cp_size;
    int N = B * T, C = c->hidden_size, V = c->padded_vocab_size, L = x->lcn;
    if (m->sp && N % m->tp_size)
        return mt_err_set(e, "GPT forward: %d tokens do not split over %d sequence-parallel ranks", N, m->tp_size);
    int Nl = mt_tp_tokens(m, N);
    uint64_t h0 = (uint64_t)mt_tp_first(m, N) * (uint64_t)C;   /* the hidden dropout's first counter */
    for (int i = 0; i < NG; i++)
        if (tokens[i] < 0 || tokens[i] >= V || targets[i] < 0 || targets[i] >= V)
            return mt_err_set(e, "GPT forward: token %d or target %d at position %d outside the vocabulary [0, %d)",
                              tokens[i], targets[i], i, V);
    mtk *k = m->k;
    mtk_dropout dd;
    const mtk_dropout *drop;
    x->B = B;
    x->T = T;

    if (m->cp_size > 1) {   /* this rank's chunks of each sequence */
        for (int i = 0; i < N; i++) {
            size_t g = mt_cp_global(m, T, (size_t)i);
            x->h_tok[i] = tokens[g], x->h_tok[x->nmax + (size_t)i] = targets[g];
        }
        tokens = x->h_tok, targets = x->h_tok + x->nmax;
    }
    mtk_to_device(k, x->d_tok, tokens, (size_t)N * sizeof(int32_t));
    mtk_to_device(k, x->d_tgt, targets, (size_t)N * sizeof(int32_t));
    if (x->first) {   /* later stages find their input in bnd[0] (mt_gpt_stage_input) */
        if (mt_tp_embed_fwd(m, x->bnd, x->s_c1, x->d_tok, B, T, e)) return mt_err_prefix(e, "GPT forward");
        if ((drop = site_dropout(x, &dd, 0, SITE_EMBED, h0))) mt_cp_dropout(m, 1, x->bnd, x->bnd, B, T, drop);
    }
    x->fp8_replay = 0;
    mt_fp8_forward_begin(x);
    for (int li = 0; li < L; li++)
        if ((m->hook && m->hook(m->hook_arg, MT_GPT_BEFORE_FORWARD, x->lc0 + li, e)) ||
            layer_forward(x, x->lc0 + li, x->s_c1, e))
            return -1;
    if (mt_fp8_forward_end(x, e)) return mt_err_prefix(e, "GPT forward");

    if (!x->last) {   /* the output bnd[L] goes to the next stage; the loss is the last stage's */
        if (async ? mtk_status(k, e) : mtk_sync(k, e)) return mt_err_prefix(e, "GPT forward");
        for (int i = 0; i < N; i++) x->h_dscale[i] = 1.0f;
        x->mask_sum = 0;
        x->have_forward = 1;
        return 0;
    }
    mt_gpt_norm_fwd(m, x->lnf, x->lnf_stat, x->lnf_stat + x->nres, AT(x->bnd, (size_t)L * x->nres * (size_t)C),
                    mt_gpt_t(m, -1, MT_T_FINAL_NORM_W), mt_gpt_t(m, -1, MT_T_FINAL_NORM_B), Nl, C);
    const void *lnf = mt_tp_gathered(m, x->s_c1, x->lnf, N, C, e);
    if (!lnf) return mt_err_prefix(e, "GPT forward, final norm");
    /* the logits of this rank's vocabulary rows (never gathered) and the vocabulary-parallel loss */
    mtk_matmul_fwd(k, x->logits, lnf, mt_gpt_w(m, m->head), NULL, N, C, m->vocab);
    if (mt_tp_xent_fwd(x, N, e)) return mt_err_prefix(e, "GPT forward, cross-entropy");
    if (async) {
        if (!dev_losses) return mt_err_set(e, "GPT forward: no device buffer for the losses");
        if (m->cp_size > 1 ? mt_cp_gather_losses(x, B, T, NULL, dev_losses, e)
                           : (mtk_copy(k, dev_losses, x->d_losses, (size_t)N * sizeof(float)), 0))
            return mt_err_prefix(e, "GPT forward");
        if (mtk_status(k, e)) return mt_err_prefix(e, "GPT forward");
    } else if (m->cp_size > 1) {   /* every rank's losses, in the micro-batch's order */
        if (mt_cp_gather_losses(x, B, T, x->h_losses, NULL, e)) return mt_err_prefix(e, "GPT forward");
    } else {
        mtk_to_host(k, x->h_losses, x->d_losses, (size_t)N * sizeof(float));
        if (mtk_sync(k, e)) return mt_err_prefix(e, "GPT forward");
    }

    double msum = 0;
    for (int i = 0; i < NG; i++) msum += loss_mask ? loss_mask[i] : 1.0;
    for (int i = 0; i < N; i++) x->h_dscale[i] = loss_mask ? loss_mask[mt_cp_global(m, T, (size_t)i)] : 1.0f;
    if (tok_losses) memcpy(tok_losses, x->h_losses, (size_t)NG * sizeof(float));
    x->mask_sum = msum;
    x->have_forward = 1;
    loss->sum = async ? 0 : mt_gpt_loss_sum(x->h_losses, loss_mask, (size_t)NG);
    loss->count = msum;
    return 0;
}

int mt_gpt_forward(mt_gpt_ctx *x, const int32_t *tokens, const int32_t *targets, const float *loss_mask, int B,
                   int T, float *tok_losses, mt_gpt_loss *loss, mt_err *e)
{
    return forward(x, tokens, targets, loss_mask, B, T, tok_losses, 0, NULL, loss, e);
}

int mt_gpt_forward_async(mt_gpt_ctx *x, const int32_t *tokens, const int32_t *targets, const float *loss_mask, int B,
                         int T, float *dev_losses, mt_gpt_loss *loss, mt_err *e)
{
    return forward(x, tokens, targets, loss_mask, B, T, NULL, 1, dev_losses, loss, e);
}

/* ---- backward ---- */

int mt_gpt_logits(mt_gpt_ctx *x, float *host, mt_err *e)
{
    if (!x->have_forward) return mt_err_set(e, "GPT logits: no forward pass (or a backward consumed it)");
    if (x->m->tp) return mt_err_set(e, "GPT logits: the model is split over %d tensor-parallel ranks", x->m->tp_size);
    if (x->m->cp) return mt_err_set(e, "GPT logits: the sequences are split over %d context-parallel ranks", x->m->cp_size);
    if (!x->last) return mt_err_set(e, "GPT logits: this pipeline stage has no output layer");
    mtk *k = x->m->k;
    size_t n = (size_t)x->B * (size_t)x->T * (size_t)x->m->c.padded_vocab_size;
    mtk_dtype dt = mtk_act_dtype(k);
    if (dt == MTK_F32) {
        mtk_to_host(k, host, x->logits, n * sizeof(float));
    } else {
        uint16_t *h = mt_xmalloc(n * sizeof *h);
        mtk_to_host(k, h, x->logits, n * sizeof *h);
        for (size_t i = 0; i < n; i++) host[i] = dt == MTK_BF16 ? mt_bf16_to_f32(h[i]) : mt_f16_to_f32(h[i]);
        free(h);
    }
    return mtk_sync(k, e) ? mt_err_prefix(e, "GPT logits") : 0;
}

/* FP8: a product's output gradient dout [N rows, OC] quantized into buf (may be dout itself), its bias
 * gradient (NULL: none) taken first from the unquantized values; returns buf. */
static const void *fp8_dout(mt_gpt_ctx *x, int li, int p, const void *dout, void *buf, int n, float *dbias, int OC,
                            mtk_grad_mode gm)
{
    if (dbias) mtk_matmul_bwd(x->m->k, NULL, NULL, dbias, dout, NULL, NULL, n / OC, 1, OC, gm);
    mt_fp8_grad(x, li, p, buf, dout, (size_t)n);
    return buf;
}

/* Local layer li's backward pass: dres (this rank's rows of the residual stream's gradient, x->s_c1)
 * from the layer's output to its input. The input gradients of column-parallel products (QKV, the MLP's
 * first layer) are partial sums over this rank's columns until summed over the tensor-parallel group
 * (dln, all rows); the output gradients of row-parallel ones are all rows (dout, gathered from dtmp's). */
static int layer_backward(mt_gpt_ctx *x, int li, mtk_grad_mode gm, mt_err *e)
{
    mt_gpt *m = x->m;
    const mt_gpt_config *c = &m->c;
    mtk *k = m->k;
    int B = x->B, T = x->T, N = B * T, C = c->hidden_size, Cl = C / m->tp_size, F = m->ffn, Nl = mt_tp_tokens(m, N);
    uint64_t h0 = (uint64_t)mt_tp_first(m, N) * (uint64_t)C;
    int l = mt_layout_global_layer(&m->layout, li);
    mtk_dropout dd;
    const mtk_dropout *drop;
    void *dres = x->s_c1, *dtmp = x->s_c2, *dln = x->s_c3;
    void *dtmp_l = mt_tp_local(m, dtmp, N, C), *dln_l = mt_tp_local(m, dln, N, C);
#define T_(kind) mt_gpt_t(m, l, kind)
#define W(kind) mt_gpt_w(m, mt_gpt_t(m, l, kind))
#define G(kind) mt_gpt_g(m, mt_gpt_t(m, l, kind))
#define GO(kind) mt_gpt_gopt(m, mt_gpt_t(m, l, kind))
#define WQ(p, kind, n) (fp8 ? mt_fp8_weight(x, li, p, W(kind), n) : W(kind))
    const int fp8 = m->fp8 != NULL;
    layer_acts a;
    layer_views(x, li, &a);

    /* MLP: res_out = res_mid + drop(fc2(gelu(fc(ln2(res_mid))))) */
    const void *dout = dres;
    if ((drop = site_dropout(x, &dd, l, SITE_MLP_OUT, h0))) {
        mt_cp_dropout(m, 0, dtmp_l, dres, B, T, drop);
        dout = dtmp_l;
    }
    int moe = mt_arch_is_moe(&m->layout.arch, l), rows_only = moe && mt_moe_rows_only(m);
    if (rows_only) dout = mt_tp_placed(m, dtmp, dout, N, C);
    else if (mt_tp_output_grad(m, dout, dtmp, N, C, &dout, e)) return mt_err_prefix(e, "GPT backward, layer %d MLP", l);
    int swiglu = c->mlp == MT_MLP_SWIGLU;   /* the activation is recomputed from the first product's output */
    if (moe) {   /* ln2 gathered beside the output gradient (in dtmp) */
        void *xg = mt_moe_gather_buffer(x->moe);
        const void *ln2 = rows_only ? mt_tp_placed(m, xg, a.ln2, N, C) : mt_tp_gathered(m, xg, a.ln2, N, C, e);
        if (!ln2 || mt_moe_backward(x->moe, fp8 ? x : NULL, layer_slot(x, li - x->lc0), li, l, ln2, dout, dln, B, T,
                                    x->moe_scale, gm, x->training, e))
            return mt_err_prefix(e, "GPT backward, layer %d MLP", l);
    } else {
        if (swiglu) mtk_swiglu_fwd(k, x->s_f1, a.fch, N, F);
        else mtk_gelu_fwd(k, x->s_f1, a.fch, (size_t)N * F, c->exact_gelu);
        if (fp8) {   /* the input as the forward quantized it; the bias gradient from the unquantized dout */
            mt_fp8_input(x, li, MT_FP8_FC2, x->s_f1, x->s_f1, (size_t)N * F);
            dout = fp8_dout(x, li, MT_FP8_FC2, dout, dtmp, N * C, GO(MT_T_FC2_B), C, gm);
        }
        mtk_matmul_bwd(k, x->s_f2, G(MT_T_FC2_W), fp8 ? NULL : GO(MT_T_FC2_B), dout, x->s_f1,
                       WQ(MT_FP8_FC2, MT_T_FC2_W, (size_t)C * F), N, F, C, gm);
        if (swiglu) mtk_swiglu_bwd(k, x->s_f1, a.fch, x->s_f2, N, F);
        else mtk_gelu_bwd(k, x->s_f1, a.fch, x->s_f2, (size_t)N * F, c->exact_gelu);
        /* the product's input gathered again for its weight gradient, into dtmp (done with the output gradient) */
        const void *ln2 = mt_tp_gathered(m, dtmp, a.ln2, N, C, e);
        if (!ln2) return mt_err_prefix(e, "GPT backward, layer %d MLP", l);
        const void *dfc = x->s_f1;
        if (fp8) dfc = fp8_dout(x, li, MT_FP8_FC1, x->s_f1, x->s_f1, N * m->fcw, GO(MT_T_FC1_B), m->fcw, gm);
        mtk_matmul_bwd(k, dln, G(MT_T_FC1_W), fp8 ? NULL : GO(MT_T_FC1_B), dfc, ln2,
                       WQ(MT_FP8_FC1, MT_T_FC1_W, (size_t)m->fcw * C), N, C, m->fcw, gm);
    }
    if (!rows_only && mt_tp_input_grad(m, dln, N, C, e)) return mt_err_prefix(e, "GPT backward, layer %d MLP", l);
    /* the attention output's dropout backward fused into the norm's, on the residual gradient it leaves */
    drop = site_dropout(x, &dd, l, SITE_ATTN_OUT, h0);
    mt_gpt_norm_bwd(m, dres, T_(MT_T_NORM2_W), T_(MT_T_NORM2_B), dln_l, a.res_mid, a.mean2, a.rstd2, Nl, C,
                    drop ? dtmp_l : NULL, m->cp_size > 1 ? NULL : drop);
    if (drop && m->cp_size > 1) mt_cp_dropout(m, 0, dtmp_l, dtmp_l, B, T, drop);   /* by runs of global tokens */

    /* Attention: res_mid = res_in + drop(dense(attn(qkv(ln1(res_in))))) */
    dout = drop ? dtmp_l : dres;
    if (mt_tp_output_grad(m, dout, dtmp, N, C, &dout, e)) return mt_err_prefix(e, "GPT backward, layer %d attention", l);
    const void *atty = a.atty;
    if (fp8) {   /* quantized aside, as the forward did */
        mt_fp8_input(x, li, MT_FP8_PROJ, x->s_f2, a.atty, (size_t)N * Cl), atty = x->s_f2;
        dout = fp8_dout(x, li, MT_FP8_PROJ, dout, dtmp, N * C, GO(MT_T_PROJ_B), C, gm);
    }
    mtk_matmul_bwd(k, dln, G(MT_T_PROJ_W), fp8 ? NULL : GO(MT_T_PROJ_B), dout, atty,
                   WQ(MT_FP8_PROJ, MT_T_PROJ_W, (size_t)C * Cl), N, Cl, C, gm);
    if (mt_cp_attention_bwd(m, x->s_qkv, dln, a.qkv, a.atty, a.lse, B, T, site_dropout(x, &dd, l, SITE_ATTN_PROBS, 0),
                            e))
        return mt_err_prefix(e, "GPT backward, layer %d attention", l);
    if (m->rot) mt_cp_rope(m, 0, x->s_qkv, B, T);
    const void *ln1 = mt_tp_gathered(m, dtmp, a.ln1, N, C, e);   /* likewise */
    if (!ln1) return mt_err_prefix(e, "GPT backward, layer %d attention", l);
    if (fp8) fp8_dout(x, li, MT_FP8_QKV, x->s_qkv, x->s_qkv, N * m->qkvw, GO(MT_T_QKV_B), m->qkvw, gm);
    mtk_matmul_bwd(k, dln, G(MT_T_QKV_W), fp8 ? NULL : GO(MT_T_QKV_B), x->s_qkv, ln1,
                   WQ(MT_FP8_QKV, MT_T_QKV_W, (size_t)m->qkvw * C), N, C, m->qkvw, gm);
    if (mt_tp_input_grad(m, dln, N, C, e)) return mt_err_prefix(e, "GPT backward, layer %d attention", l);
    mt_gpt_norm_bwd(m, dres, T_(MT_T_NORM1_W), T_(MT_T_NORM1_B), dln_l, a.res_in, a.mean1, a.rstd1, Nl, C, NULL, NULL);
#undef T_
#undef W
#undef G
#undef GO
#undef WQ
    return 0;
}

int mt_gpt_backward(mt_gpt_ctx *x, double scale, mt_err *e)
{
    mt_gpt *m = x->m;
    if (!m->grads) return mt_err_set(e, "GPT backward: the model was created without gradients");
    if (!x->have_forward) return mt_err_set(e, "GPT backward: no forward pass to go back through");
    x->have_forward = 0;   /* the logits become dlogits below */
    bind_shared(x);
    const mt_gpt_config *c = &m->c;
    int B = x->B, T = x->T, N = B * T, C = c->hidden_size, L = x->lcn;
    int Nl = mt_tp_tokens(m, N);
    uint64_t h0 = (uint64_t)mt_tp_first(m, N) * (uint64_t)C;
    mtk *k = m->k;
    mtk_dropout dd;
    const mtk_dropout *drop;
    int lnf_w = mt_gpt_t(m, -1, MT_T_FINAL_NORM_W), lnf_b = mt_gpt_t(m, -1, MT_T_FINAL_NORM_B);

    /* Logits and the final LayerNorm; dres (this rank's rows) is the residual stream's gradient from here
     * down (the logits' input gradient is a partial sum over this rank's vocabulary until summed). */
    void *dres = x->s_c1, *dtmp = x->s_c2, *dln = x->s_c3;
    void *dln_l = mt_tp_local(m, dln, N, C);
    unsigned bit = 1u << x->chunk_id;
    mtk_grad_mode gm = m->grads_assign & bit ? MTK_GRAD_ASSIGN : MTK_GRAD_ACCUMULATE;
    m->grads_assign &= ~bit;
    if (x->last) {
        for (int i = 0; i < N; i++) x->h_dscale[i] = (float)(x->h_dscale[i] * scale);
        mtk_to_device(k, x->d_dscale, x->h_dscale, (size_t)N * sizeof(float));
        if (mt_tp_xent_bwd(x, N, e)) return mt_err_prefix(e, "GPT backward, cross-entropy");
        const void *lnf = mt_tp_gathered(m, dtmp, x->lnf, N, C, e);   /* gathered again, as in the layers */
        if (!lnf) return mt_err_prefix(e, "GPT backward, logits");
        mtk_matmul_bwd(k, dln, mt_gpt_g(m, m->head), NULL, x->logits, lnf, mt_gpt_w(m, m->head), N, C, m->vocab, gm);
        if (mt_tp_input_grad(m, dln, N, C, e)) return mt_err_prefix(e, "GPT backward, logits");
        mtk_zero(k, dres, (size_t)Nl * C * m->asz);
        mt_gpt_norm_bwd(m, dres, lnf_w, lnf_b, dln_l, AT(x->bnd, (size_t)L * x->nres * (size_t)C), x->lnf_stat,
                        x->lnf_stat + x->nres, Nl, C, NULL, NULL);
    }   /* else dres holds the gradient of the output, from the next stage (mt_gpt_stage_grad) */

    x->fp8_replay = 1;   /* FP8: quantized as the forward did, nothing recorded but the gradients' amaxes */
    for (int li = L - 1; li >= 0; li--) {
        /* a recomputed chunk's forward runs again from its input when the backward reaches its last layer
         * (the same kernels on the same inputs with the same dropout masks: the same activations) */
        if (li < x->recomputed && (li + 1) % x->chunk == 0) {
            for (int r = li + 1 - x->chunk; r <= li; r++)
                if (layer_forward(x, x->lc0 + r, x->s_c2, e)) return mt_err_prefix(e, "GPT backward, recomputation");
        } else if (li < x->recomputed && li == x->recomputed - 1) {   /* a last, shorter chunk */
            for (int r = li - li % x->chunk; r <= li; r++)
                if (layer_forward(x, x->lc0 + r, x->s_c2, e)) return mt_err_prefix(e, "GPT backward, recomputation");
        }
        if (layer_backward(x, x->lc0 + li, gm, e) ||
            (m->hook && m->hook(m->hook_arg, MT_GPT_AFTER_BACKWARD, x->lc0 + li, e)))
            return -1;
    }

    x->fp8_replay = 0;
    if (x->first) {   /* else dres is the gradient of the input, for the previous stage */
        if ((drop = site_dropout(x, &dd, 0, SITE_EMBED, h0))) mt_cp_dropout(m, 0, dres, dres, B, T, drop);
        if (mt_tp_embed_bwd(m, dres, dtmp, x->d_tok, B, T, e)) return mt_err_prefix(e, "GPT backward, embedding");
    }
    if (mt_fp8_backward_end(x, e) || mtk_status(k, e)) return mt_err_prefix(e, "GPT backward");
    return 0;
}

void mt_gpt_set_moe_loss_scale(mt_gpt_ctx *x, double scale) { x->moe_scale = scale; }
void mt_gpt_moe_losses(const mt_gpt_ctx *x, double *load_balancing, double *z)
{
    mt_moe_losses(x->moe, load_balancing, z);
}
int mt_gpt_moe_layer_stats(const mt_gpt_ctx *x, int li, double *load_balancing, double *z, double *tokens)
{
    const mt_gpt *m = x->m;
    if (!x->moe || li < x->lc0 || li >= x->lc0 + x->lcn || !mt_arch_is_moe(&m->layout.arch, mt_layout_global_layer(&m->layout, li)))
        return 0;
    mt_moe_layer_stats(x->moe, li, load_balancing, z, tokens);
    return 1;
}

int mt_gpt_moe_layers(const mt_gpt_config *c)
{
    int n = 0;
    for (int l = 0; c->num_experts > 0 && l < c->num_layers && l < MT_MOE_MAX_LAYERS; l++) n += c->moe_layers[l] != 0;
    return n;
}

/* The last stage's copy of tied word embeddings (Megatron flags it shared: the norm counts the first
 * stage's). */
static int mt_gpt_is_shared(const mt_gpt *m, int t)
{
    return m->layout.t[t].kind == MT_T_OUTPUT && m->layout.arch.tied_embeddings;
}

/* The runs of adjacent counted tensors clipped to [lo, hi), in order, into span (ntensors + 1 of them at
 * most); their number. */
static int counted_runs(const mt_gpt *m, size_t lo, size_t hi, mtk_span *span)
{
    int n = 0;
    size_t run0 = 0, run1 = 0;   /* floats [run0, run1) */
    for (int t = 0; t <= m->ntensors; t++) {
        const mt_gpt_tensor *x = t < m->ntensors ? &m->tensors[t] : NULL;
        int counted = x && (m->tp_rank == 0 || m->layout.t[t].partition_dim >= 0) && !mt_gpt_is_shared(m, t);
        size_t a = x ? (x->offset > lo ? x->offset : lo) : 0, b = x ? (x->offset + x->numel < hi ? x->offset + x->numel : hi) : 0;
        if (counted && a < b && a == run1 && run1 > run0) {
            run1 = b;
            continue;
        }
        if (run1 > run0) span[n++] = (mtk_span){.off = run0, .n = run1 - run0};
        run0 = run1 = 0;
        if (counted && a < b) run0 = a, run1 = b;
    }
    return n;
}

double mt_gpt_grad_sumsq(mt_gpt *m, size_t lo, size_t hi) { return mt_gpt_sumsq_counted(m, m->grads, 0, lo, hi); }

double mt_gpt_sumsq_counted(mt_gpt *m, const float *buf, size_t base, size_t lo, size_t hi)
{
    mtk_span *span = mt_xmalloc((size_t)(m->ntensors + 1) * sizeof *span);
    int n = counted_runs(m, lo, hi, span);
    double ss = 0;
    for (int i = 0; i < n; i++) ss += mtk_sumsq(m->k, buf + (span[i].off - base), span[i].n);
    free(span);
    return ss;
}

void mt_gpt_grad_sumsq_to(mt_gpt *m, size_t lo, size_t hi, double *out)
{
    size_t n = mt_gpt_num_params(m);
    mt_gpt_grad_sumsq2_to(m, lo, hi, n, n, out);
}

void mt_gpt_grad_sumsq2_to(mt_gpt *m, size_t lo, size_t hi, size_t lo2, size_t hi2, double *out)
{
    mtk_span *span = mt_xmalloc((size_t)(2 * m->ntensors + 2) * sizeof *span);
    int n = counted_runs(m, lo, hi, span);
    n += counted_runs(m, lo2, hi2, span + n);
    mtk_sumsq_spans(m->k, out, m->grads, span, n);
    free(span);
}

/* ---- pipeline stages ---- */

size_t mt_gpt_stage_numel(const mt_gpt *m, int B, int T)
{
    return (size_t)mt_tp_tokens(m, B * (T / m->cp_size)) * (size_t)m->c.hidden_size;
}

void *mt_gpt_stage_input(mt_gpt_ctx *x) { return x->bnd; }
void *mt_gpt_stage_output(mt_gpt_ctx *x)
{
    const mt_gpt *m = x->m;
    return AT(x->bnd, (size_t)x->lcn * x->nres * (size_t)m->c.hidden_size);
}
void *mt_gpt_stage_grad(mt_gpt_ctx *x) { return x->s_c1; }

void mt_gpt_stage(const mt_gpt *m, int *stage, int *stages, int *first_layer, int *num_layers)
{
    if (stage) *stage = m->pp_stage;
    if (stages) *stages = m->pp_size;
    if (first_layer) *first_layer = m->l0;
    if (num_layers) *num_layers = m->nl;
}

int mt_gpt_tied_copy(mt_gpt *m)
{
    if (m->pp_size == 1 || !m->layout.arch.tied_embeddings) return -1;
    if (m->first) return mt_gpt_t(m, -1, MT_T_WORD_EMB);
    return m->last ? mt_gpt_t(m, -1, MT_T_OUTPUT) : -1;
}
