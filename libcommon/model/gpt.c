/* gpt.c: the GPT-2 model over the kernels/ operations: parameter and gradient buffers with their
 * tensor table, activation memory, forward pass with the masked mean loss, backward pass, dropout.
 *
 * Activations are kept per layer for backward (see gpt_impl.h): the residual stream before and after
 * each sublayer, every LayerNorm output with its mean and rstd, QKV, the attention output with its
 * log-sum-exp, and the fc output before GeLU. GeLU outputs and dropout masks are recomputed in backward;
 * the attention probabilities are never stored (the attention kernel recomputes them). Forward computes
 * per-token losses only; backward runs the cross-entropy again to turn the logits into dlogits in place.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/gpt_impl.h"

/* ---- tensor table ---- */

static void add_tensor(mt_gpt *m, const char *name, int64_t rows, int64_t cols, int no_decay)
{
    mt_gpt_tensor *t = &m->tensors[m->ntensors++];
    snprintf(t->name, sizeof t->name, "%s", name);
    t->offset = m->nparams;
    t->ndim = cols ? 2 : 1;
    t->shape[0] = rows;
    t->shape[1] = cols;
    t->numel = (size_t)rows * (size_t)(cols ? cols : 1);
    t->no_decay = no_decay;
    m->nparams += t->numel;
}

static void build_table(mt_gpt *m)
{
    const mt_gpt_config *c = &m->c;
    int64_t h = c->hidden_size, f = c->ffn_hidden_size;
    m->tensors = mt_xcalloc((size_t)MT_GPT_LNF_B(c->num_layers) + 1, sizeof *m->tensors);
    add_tensor(m, "language_model.embedding.word_embeddings.weight", c->padded_vocab_size, h, 0);
    add_tensor(m, "language_model.embedding.position_embeddings.weight", c->max_position_embeddings, h, 0);
    static const struct {
        const char *suffix;
        int rows;   /* in units of h (1, 3) or f (-1) */
        int cols;   /* 0: 1-D, 1: h, -1: f */
    } per_layer[MT_GPT_PER_LAYER] = {
        {"input_layernorm.weight", 1, 0},
        {"input_layernorm.bias", 1, 0},
        {"self_attention.query_key_value.weight", 3, 1},
        {"self_attention.query_key_value.bias", 3, 0},
        {"self_attention.dense.weight", 1, 1},
        {"self_attention.dense.bias", 1, 0},
        {"post_attention_layernorm.weight", 1, 0},
        {"post_attention_layernorm.bias", 1, 0},
        {"mlp.dense_h_to_4h.weight", -1, 1},
        {"mlp.dense_h_to_4h.bias", -1, 0},
        {"mlp.dense_4h_to_h.weight", 1, -1},
        {"mlp.dense_4h_to_h.bias", 1, 0},
    };
    for (int l = 0; l < c->num_layers; l++)
        for (int j = 0; j < MT_GPT_PER_LAYER; j++) {
            char name[128];
            snprintf(name, sizeof name, "language_model.encoder.layers.%d.%s", l, per_layer[j].suffix);
            int64_t rows = per_layer[j].rows < 0 ? f : per_layer[j].rows * h;
            int64_t cols = per_layer[j].cols == 0 ? 0 : per_layer[j].cols < 0 ? f : h;
            add_tensor(m, name, rows, cols, cols == 0);
        }
    add_tensor(m, "language_model.encoder.final_layernorm.weight", h, 0, 1);
    add_tensor(m, "language_model.encoder.final_layernorm.bias", h, 0, 1);
}

/* ---- lifetime ---- */

static void *dev_alloc(mt_gpt *m, size_t bytes, int *failed, mt_err *e)
{
    if (*failed) return NULL;
    void *p = mtk_alloc(m->k, bytes ? bytes : 1, e);
    if (!p) *failed = 1;
    m->act_bytes += bytes;
    return p;
}

mt_gpt *mt_gpt_create(mtk *k, const mt_gpt_config *config, int max_batch, mt_err *e)
{
    if (mt_gpt_config_check(config, e)) return NULL;
    if (max_batch <= 0) {
        mt_err_set(e, "--micro-batch-size (%d) must be positive", max_batch);
        return NULL;
    }
    mt_gpt *m = mt_xcalloc(1, sizeof *m);
    m->k = k;
    m->c = *config;
    m->max_batch = max_batch;
    m->nmax = (size_t)max_batch * (size_t)config->seq_length;
    if (m->nmax > 2147483647u / 4) {
        free(m);
        mt_err_set(e, "--micro-batch-size (%d) x --seq-length (%d) is too large", max_batch, config->seq_length);
        return NULL;
    }
    build_table(m);

    int failed = 0;
    size_t L = (size_t)config->num_layers, C = (size_t)config->hidden_size, F = (size_t)config->ffn_hidden_size;
    size_t N = m->nmax, V = (size_t)config->padded_vocab_size, fl = sizeof(float);
    m->params = mtk_alloc(k, m->nparams * fl, e);
    if (!m->params) failed = 1;
    else {
        m->grads = mtk_alloc(k, m->nparams * fl, e);
        if (!m->grads) failed = 1;
    }
    m->res = dev_alloc(m, (2 * L + 1) * N * C * fl, &failed, e);
    m->ln = dev_alloc(m, (2 * L + 1) * N * C * fl, &failed, e);
    m->ln_mean = dev_alloc(m, (2 * L + 1) * N * fl, &failed, e);
    m->ln_rstd = dev_alloc(m, (2 * L + 1) * N * fl, &failed, e);
    m->qkv = dev_alloc(m, L * N * 3 * C * fl, &failed, e);
    m->atty = dev_alloc(m, L * N * C * fl, &failed, e);
    m->lse = dev_alloc(m, L * N * (size_t)config->num_heads * fl, &failed, e);
    m->fch = dev_alloc(m, L * N * F * fl, &failed, e);
    m->logits = dev_alloc(m, N * V * fl, &failed, e);
    m->s_c1 = dev_alloc(m, N * C * fl, &failed, e);
    m->s_c2 = dev_alloc(m, N * C * fl, &failed, e);
    m->s_c3 = dev_alloc(m, N * C * fl, &failed, e);
    m->s_qkv = dev_alloc(m, N * 3 * C * fl, &failed, e);
    m->s_f1 = dev_alloc(m, N * F * fl, &failed, e);
    m->s_f2 = dev_alloc(m, N * F * fl, &failed, e);
    m->d_tok = dev_alloc(m, N * sizeof(int32_t), &failed, e);
    m->d_tgt = dev_alloc(m, N * sizeof(int32_t), &failed, e);
    m->d_losses = dev_alloc(m, N * fl, &failed, e);
    m->d_dscale = dev_alloc(m, N * fl, &failed, e);
    if (failed) {
        mt_err_prefix(e, "GPT model (%zu parameters, %zu activation bytes)", m->nparams, m->act_bytes);
        mt_gpt_free(m);
        return NULL;
    }
    size_t big = N * V > N * F ? N * V : N * F;
    mtk_limits lim = {.max_act = big > V * C ? big : V * C, .max_flat = m->nparams, .max_seq = config->seq_length,
                      .max_head_size = (int)(C / (size_t)config->num_heads)};
    if (mtk_reserve(k, &lim, e)) {
        mt_gpt_free(m);
        return NULL;
    }
    m->h_losses = mt_xmalloc(N * fl);
    m->h_dscale = mt_xmalloc(N * fl);
    return m;
}

void mt_gpt_free(mt_gpt *m)
{
    if (!m) return;
    void *dev[] = {m->params, m->grads, m->res,   m->ln,    m->ln_mean, m->ln_rstd, m->qkv,   m->atty,
                   m->lse,    m->fch,   m->logits, m->s_c1, m->s_c2,    m->s_c3,    m->s_qkv, m->s_f1,
                   m->s_f2,   m->d_tok, m->d_tgt, m->d_losses, m->d_dscale};
    for (size_t i = 0; i < sizeof dev / sizeof dev[0]; i++)
        if (dev[i]) mtk_free(m->k, dev[i]);
    free(m->tensors);
    free(m->h_losses);
    free(m->h_dscale);
    free(m);
}

const mt_gpt_config *mt_gpt_get_config(const mt_gpt *m) { return &m->c; }
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

void mt_gpt_zero_grad(mt_gpt *m) { mtk_zero(m->k, m->grads, m->nparams * sizeof(float)); }

void mt_gpt_memory(const mt_gpt *m, size_t *param_bytes, size_t *grad_bytes, size_t *act_bytes)
{
    if (param_bytes) *param_bytes = m->nparams * sizeof(float);
    if (grad_bytes) *grad_bytes = m->nparams * sizeof(float);
    if (act_bytes) *act_bytes = m->act_bytes;
}

/* ---- dropout ---- */

void mt_gpt_set_dropout(mt_gpt *m, int training, uint64_t key)
{
    m->training = training != 0;
    m->dropout_key = key;
}

/* Dropout sites of one micro-batch: the embedding (0), and per layer l the attention probabilities
 * (1 + 3l), the attention output (2 + 3l) and the MLP output (3 + 3l). Each site's seed is a
 * splitmix64 hash of the key and the site, so sites and keys draw unrelated masks. */
enum { SITE_EMBED = 0, SITE_ATTN_PROBS = 1, SITE_ATTN_OUT = 2, SITE_MLP_OUT = 3 };

uint64_t mt_gpt_dropout_seed(uint64_t key, uint64_t site) { return mt_mix64(key + (site + 1) * MT_GOLDEN64); }

/* NULL when this site applies no dropout (evaluation mode or p == 0). */
static const mtk_dropout *site_dropout(const mt_gpt *m, mtk_dropout *d, int layer, int kind)
{
    float p = kind == SITE_ATTN_PROBS ? m->c.attention_dropout : m->c.hidden_dropout;
    if (!m->training || !(p > 0)) return NULL;
    uint64_t site = kind == SITE_EMBED ? 0 : 1 + 3 * (uint64_t)layer + (uint64_t)(kind - 1);
    d->p = p;
    d->seed = mt_gpt_dropout_seed(m->dropout_key, site);
    d->offset = 0;
    return d;
}

/* ---- forward ---- */

double mt_gpt_forward(mt_gpt *m, const int32_t *tokens, const int32_t *targets, const float *loss_mask,
                      int B, int T, float *tok_losses)
{
    const mt_gpt_config *c = &m->c;
    m->have_forward = 0;
    if (B <= 0 || T <= 0 || B > m->max_batch || T > c->seq_length) return NAN;
    int N = B * T, C = c->hidden_size, F = c->ffn_hidden_size, NH = c->num_heads, V = c->padded_vocab_size;
    int L = c->num_layers;
    size_t nC = m->nmax * (size_t)C;
    for (int i = 0; i < N; i++)
        if (tokens[i] < 0 || tokens[i] >= V || targets[i] < 0 || targets[i] >= V) return NAN;
    mtk *k = m->k;
    mtk_dropout dd;
    const mtk_dropout *drop;

    mtk_to_device(k, m->d_tok, tokens, (size_t)N * sizeof(int32_t));
    mtk_to_device(k, m->d_tgt, targets, (size_t)N * sizeof(int32_t));
    mtk_embed_fwd(k, m->res, m->d_tok, mt_gpt_p(m, MT_GPT_WTE), mt_gpt_p(m, MT_GPT_WPE), B, T, C, 0, 0, V);
    if ((drop = site_dropout(m, &dd, 0, SITE_EMBED))) mtk_dropout_fwd(k, m->res, m->res, (size_t)N * C, drop);

    for (int l = 0; l < L; l++) {
#define P(j) mt_gpt_p(m, MT_GPT_LAYER_T(l, j))
        float *res_in = m->res + (size_t)(2 * l) * nC, *res_mid = res_in + nC, *res_out = res_mid + nC;
        float *ln1 = m->ln + (size_t)(2 * l) * nC, *ln2 = ln1 + nC;
        float *mean1 = m->ln_mean + (size_t)(2 * l) * m->nmax, *rstd1 = m->ln_rstd + (size_t)(2 * l) * m->nmax;
        float *mean2 = mean1 + m->nmax, *rstd2 = rstd1 + m->nmax;
        float *qkv = m->qkv + (size_t)l * 3 * nC, *atty = m->atty + (size_t)l * nC;
        float *lse = m->lse + (size_t)l * m->nmax * NH, *fch = m->fch + (size_t)l * m->nmax * F;

        mtk_layernorm_fwd(k, ln1, mean1, rstd1, res_in, P(MT_GPT_LN1_W), P(MT_GPT_LN1_B), N, C, c->layernorm_epsilon);
        mtk_matmul_fwd(k, qkv, ln1, P(MT_GPT_QKV_W), P(MT_GPT_QKV_B), N, C, 3 * C);
        mtk_attention_fwd(k, atty, lse, qkv, B, T, NH, C / NH, site_dropout(m, &dd, l, SITE_ATTN_PROBS));
        mtk_matmul_fwd(k, m->s_c1, atty, P(MT_GPT_PROJ_W), P(MT_GPT_PROJ_B), N, C, C);
        if ((drop = site_dropout(m, &dd, l, SITE_ATTN_OUT))) mtk_dropout_fwd(k, m->s_c1, m->s_c1, (size_t)N * C, drop);
        mtk_add(k, res_mid, res_in, m->s_c1, (size_t)N * C);

        mtk_layernorm_fwd(k, ln2, mean2, rstd2, res_mid, P(MT_GPT_LN2_W), P(MT_GPT_LN2_B), N, C, c->layernorm_epsilon);
        mtk_matmul_fwd(k, fch, ln2, P(MT_GPT_FC_W), P(MT_GPT_FC_B), N, C, F);
        mtk_gelu_fwd(k, m->s_f1, fch, (size_t)N * F, c->exact_gelu);
        mtk_matmul_fwd(k, m->s_c1, m->s_f1, P(MT_GPT_FC2_W), P(MT_GPT_FC2_B), N, F, C);
        if ((drop = site_dropout(m, &dd, l, SITE_MLP_OUT))) mtk_dropout_fwd(k, m->s_c1, m->s_c1, (size_t)N * C, drop);
        mtk_add(k, res_out, res_mid, m->s_c1, (size_t)N * C);
#undef P
    }

    float *lnf = m->ln + (size_t)(2 * L) * nC;
    mtk_layernorm_fwd(k, lnf, m->ln_mean + (size_t)(2 * L) * m->nmax, m->ln_rstd + (size_t)(2 * L) * m->nmax,
                      m->res + (size_t)(2 * L) * nC, mt_gpt_p(m, MT_GPT_LNF_W(L)), mt_gpt_p(m, MT_GPT_LNF_B(L)), N, C,
                      c->layernorm_epsilon);
    mtk_matmul_fwd(k, m->logits, lnf, mt_gpt_p(m, MT_GPT_WTE), NULL, N, C, V);
    mtk_xent_fwd_bwd(k, m->d_losses, NULL, m->logits, m->d_tgt, NULL, N, V);
    mtk_to_host(k, m->h_losses, m->d_losses, (size_t)N * sizeof(float));

    double sum = 0, msum = 0;
    for (int i = 0; i < N; i++) {
        double w = loss_mask ? loss_mask[i] : 1.0;
        sum += w * m->h_losses[i];
        msum += w;
        m->h_dscale[i] = (float)w;
    }
    if (tok_losses) memcpy(tok_losses, m->h_losses, (size_t)N * sizeof(float));
    m->B = B;
    m->T = T;
    m->mask_sum = msum;
    m->have_forward = 1;
    return msum != 0 ? sum / msum : 0.0;
}

/* ---- backward ---- */

void mt_gpt_backward(mt_gpt *m, float loss_scale)
{
    if (!m->have_forward) return;
    m->have_forward = 0;   /* the logits become dlogits below */
    const mt_gpt_config *c = &m->c;
    int B = m->B, T = m->T, N = B * T, C = c->hidden_size, F = c->ffn_hidden_size, NH = c->num_heads;
    int V = c->padded_vocab_size, L = c->num_layers;
    size_t nC = m->nmax * (size_t)C;
    mtk *k = m->k;
    mtk_dropout dd;
    const mtk_dropout *drop;

    double per = m->mask_sum != 0 ? (double)loss_scale / m->mask_sum : 0.0;
    for (int i = 0; i < N; i++) m->h_dscale[i] = (float)(m->h_dscale[i] * per);
    mtk_to_device(k, m->d_dscale, m->h_dscale, (size_t)N * sizeof(float));

    /* Logits and the final LayerNorm; dres is the residual stream's gradient from here down. */
    float *dres = m->s_c1, *dtmp = m->s_c2, *dln = m->s_c3;
    float *lnf = m->ln + (size_t)(2 * L) * nC;
    mtk_xent_fwd_bwd(k, m->d_losses, m->logits, m->logits, m->d_tgt, m->d_dscale, N, V);
    mtk_matmul_bwd(k, dln, mt_gpt_g(m, MT_GPT_WTE), NULL, m->logits, lnf, mt_gpt_p(m, MT_GPT_WTE), N, C, V);
    mtk_zero(k, dres, (size_t)N * C * sizeof(float));
    mtk_layernorm_bwd(k, dres, mt_gpt_g(m, MT_GPT_LNF_W(L)), mt_gpt_g(m, MT_GPT_LNF_B(L)), dln,
                      m->res + (size_t)(2 * L) * nC, mt_gpt_p(m, MT_GPT_LNF_W(L)),
                      m->ln_mean + (size_t)(2 * L) * m->nmax, m->ln_rstd + (size_t)(2 * L) * m->nmax, N, C);

    for (int l = L - 1; l >= 0; l--) {
#define P(j) mt_gpt_p(m, MT_GPT_LAYER_T(l, j))
#define G(j) mt_gpt_g(m, MT_GPT_LAYER_T(l, j))
        float *res_in = m->res + (size_t)(2 * l) * nC, *res_mid = res_in + nC;
        float *ln1 = m->ln + (size_t)(2 * l) * nC, *ln2 = ln1 + nC;
        float *mean1 = m->ln_mean + (size_t)(2 * l) * m->nmax, *rstd1 = m->ln_rstd + (size_t)(2 * l) * m->nmax;
        float *mean2 = mean1 + m->nmax, *rstd2 = rstd1 + m->nmax;
        float *qkv = m->qkv + (size_t)l * 3 * nC, *atty = m->atty + (size_t)l * nC;
        float *lse = m->lse + (size_t)l * m->nmax * NH, *fch = m->fch + (size_t)l * m->nmax * F;

        /* MLP: res_out = res_mid + drop(fc2(gelu(fc(ln2(res_mid))))) */
        const float *dout = dres;
        if ((drop = site_dropout(m, &dd, l, SITE_MLP_OUT))) {
            mtk_dropout_bwd(k, dtmp, dres, (size_t)N * C, drop);
            dout = dtmp;
        }
        mtk_gelu_fwd(k, m->s_f1, fch, (size_t)N * F, c->exact_gelu);
        mtk_matmul_bwd(k, m->s_f2, G(MT_GPT_FC2_W), G(MT_GPT_FC2_B), dout, m->s_f1, P(MT_GPT_FC2_W), N, F, C);
        mtk_gelu_bwd(k, m->s_f1, fch, m->s_f2, (size_t)N * F, c->exact_gelu);
        mtk_matmul_bwd(k, dln, G(MT_GPT_FC_W), G(MT_GPT_FC_B), m->s_f1, ln2, P(MT_GPT_FC_W), N, C, F);
        mtk_layernorm_bwd(k, dres, G(MT_GPT_LN2_W), G(MT_GPT_LN2_B), dln, res_mid, P(MT_GPT_LN2_W), mean2, rstd2, N, C);

        /* Attention: res_mid = res_in + drop(dense(attn(qkv(ln1(res_in))))) */
        dout = dres;
        if ((drop = site_dropout(m, &dd, l, SITE_ATTN_OUT))) {
            mtk_dropout_bwd(k, dtmp, dres, (size_t)N * C, drop);
            dout = dtmp;
        }
        mtk_matmul_bwd(k, dln, G(MT_GPT_PROJ_W), G(MT_GPT_PROJ_B), dout, atty, P(MT_GPT_PROJ_W), N, C, C);
        mtk_attention_bwd(k, m->s_qkv, dln, qkv, atty, lse, B, T, NH, C / NH, site_dropout(m, &dd, l, SITE_ATTN_PROBS));
        mtk_matmul_bwd(k, dln, G(MT_GPT_QKV_W), G(MT_GPT_QKV_B), m->s_qkv, ln1, P(MT_GPT_QKV_W), N, C, 3 * C);
        mtk_layernorm_bwd(k, dres, G(MT_GPT_LN1_W), G(MT_GPT_LN1_B), dln, res_in, P(MT_GPT_LN1_W), mean1, rstd1, N, C);
#undef P
#undef G
    }

    if ((drop = site_dropout(m, &dd, 0, SITE_EMBED))) mtk_dropout_bwd(k, dres, dres, (size_t)N * C, drop);
    mtk_embed_bwd(k, mt_gpt_g(m, MT_GPT_WTE), mt_gpt_g(m, MT_GPT_WPE), dres, m->d_tok, B, T, C, 0, 0, V);
}
