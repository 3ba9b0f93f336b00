/* gpt_infer.c: generation with a KV cache. Each step embeds the new tokens at the cache's length,
 * runs every layer with mtk_attention_kv (appending their keys and values to that layer's cache) and
 * returns the logits of the last new token; nothing is kept for a backward pass and no dropout applies. */
#include <stdlib.h>
#include <string.h>

#include "model/gpt_impl.h"
#include "model/moe.h"

struct mt_gpt_infer {
    mt_gpt *m;
    int batch, max_len, len;
    size_t tmax;               /* batch * max_len: token capacity of the scratch */
    void *kc, *vc;             /* [L][batch][NG][max_len][HS]: the key/value groups' (the heads' without
                                  grouped-query attention) */
    void *x, *h, *qkv, *att, *f, *act, *tmp;   /* scratch: [tokens][C], [C], [QKV], [C], [fc1], [F], [C] */
    void *logits;              /* [batch][V_pad] */
    float *logits32;           /* [batch][V_pad], fp32 (bf16/fp16 activations) */
    float *mean, *rstd;        /* [tokens] */
    int32_t *d_tok;
    int32_t *d_ids;            /* [batch]: mt_gpt_infer_step_greedy's choices */
    double *d_lp;              /* [batch]: their log-probabilities */
    float *h_logits;           /* host [batch][V_pad] */
    mt_moe_ctx *moe;           /* the MoE layers' (NULL: none) */
    size_t bytes;
};

mt_gpt_infer *mt_gpt_infer_new(mt_gpt *m, int batch, int max_len, mt_err *e)
{
    const mt_gpt_config *c = &m->c;
    if (batch <= 0 || max_len <= 0 || max_len > c->max_position_embeddings) {
        mt_err_set(e, "generation: %d sequences of up to %d tokens (the model has %d positions)", batch, max_len,
                   c->max_position_embeddings);
        return NULL;
    }
    if (m->tp || m->pp_size > 1) {
        mt_err_set(e, "generation: the model is split over %d tensor-parallel ranks and %d stages (open the checkpoint as one)",
                   m->tp_size, m->pp_size);
        return NULL;
    }
    mt_gpt_infer *s = mt_xcalloc(1, sizeof *s);
    s->m = m;
    s->batch = batch;
    s->max_len = max_len;
    s->tmax = (size_t)batch * (size_t)max_len;
    size_t L = (size_t)c->num_layers, C = (size_t)c->hidden_size, F = (size_t)c->ffn_hidden_size;
    size_t V = (size_t)c->padded_vocab_size, a = m->asz, n = s->tmax, KV = (size_t)m->groups * (size_t)m->hs;
    void **bufs[] = {&s->kc, &s->vc, &s->x, &s->h, &s->qkv, &s->att, &s->f, &s->act, &s->tmp, &s->logits,
                     (void **)&s->logits32, (void **)&s->mean, (void **)&s->rstd, (void **)&s->d_tok,
                     (void **)&s->d_ids, (void **)&s->d_lp};
    size_t sizes[] = {L * n * KV * a, L * n * KV * a, n * C * a, n * C * a, n * (size_t)m->qkvw * a, n * C * a,
                      n * (size_t)m->fcw * a, n * F * a, n * C * a, (size_t)batch * V * a, (size_t)batch * V * 4,
                      n * 4, n * 4, n * 4, (size_t)batch * 4, (size_t)batch * 8};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        if (!(*bufs[i] = mtk_alloc(m->k, sizes[i], e)) ) {
            mt_err_prefix(e, "generation cache");
            mt_gpt_infer_free(s);
            return NULL;
        }
        s->bytes += sizes[i];
    }
    int failed = 0;
    s->moe = mt_moe_ctx_new(m, n, batch, 1, L, &failed, e);
    s->bytes += mt_moe_bytes(s->moe);
    if (failed || mt_gpt_reserve(m, n, max_len, e)) {
        if (failed) mt_err_prefix(e, "generation cache");
        mt_gpt_infer_free(s);
        return NULL;
    }
    s->h_logits = mt_xmalloc((size_t)batch * V * sizeof(float));
    m->ctx_bytes += s->bytes;
    return s;
}

void mt_gpt_infer_free(mt_gpt_infer *s)
{
    if (!s) return;
    void *dev[] = {s->kc,     s->vc,       s->x,    s->h,    s->qkv,  s->att,  s->f,   s->act,
                   s->tmp,    s->logits,   s->logits32, s->mean, s->rstd, s->d_tok, s->d_ids, s->d_lp};
    for (size_t i = 0; i < sizeof dev / sizeof dev[0]; i++)
        if (dev[i]) mtk_free(s->m->k, dev[i]);
    mt_moe_ctx_free(s->moe);
    if (s->h_logits) s->m->ctx_bytes -= s->bytes;
    free(s->h_logits);
    free(s);
}

void mt_gpt_infer_reset(mt_gpt_infer *s) { s->len = 0; }
int mt_gpt_infer_len(const mt_gpt_infer *s) { return s->len; }

#define AT(buf, i) ((void *)((char *)(buf) + (size_t)(i) * m->asz))

/* The logits (device, activation dtype, [n][V_pad]) of n last rows: the final norm into tmp, the output layer. */
static void final_logits(mt_gpt *m, const void *last, void *tmp, float *mean, float *rstd, void *dlogits, int n)
{
    int C = m->c.hidden_size;
    mt_gpt_norm_fwd(m, tmp, mean, rstd, last, mt_gpt_t(m, -1, MT_T_FINAL_NORM_W), mt_gpt_t(m, -1, MT_T_FINAL_NORM_B), n, C);
    mtk_matmul_fwd(m->k, dlogits, tmp, mt_gpt_w(m, m->head), NULL, n, C, m->c.padded_vocab_size);
}

/* The layers over T new tokens of each sequence, and each sequence's last row through the final norm
 * into s->tmp (device); the cache grows by T. */
static int step_rows(mt_gpt_infer *s, const int32_t *tokens, int T, mt_err *e)
{
    mt_gpt *m = s->m;
    const mt_gpt_config *c = &m->c;
    int B = s->batch, N = B * T, C = c->hidden_size, NH = c->num_heads;
    int V = c->padded_vocab_size, L = c->num_layers, HS = C / NH;
    if (T <= 0 || s->len + T > s->max_len)
        return mt_err_set(e, "generation: %d more tokens after %d exceed the context of %d", T, s->len, s->max_len);
    for (int i = 0; i < N; i++)
        if (tokens[i] < 0 || tokens[i] >= c->vocab_size)
            return mt_err_set(e, "generation: token %d outside the vocabulary [0, %d)", tokens[i], c->vocab_size);
    mtk *k = m->k;
    size_t cache = (size_t)B * (size_t)m->groups * s->max_len * HS;   /* elements of one layer's cache */
    int pos = mt_gpt_t(m, -1, MT_T_POS_EMB);   /* none with rotary positions */
    mtk_to_device(k, s->d_tok, tokens, (size_t)N * sizeof(int32_t));
    mtk_embed_fwd(k, s->x, s->d_tok, mt_gpt_w(m, mt_gpt_t(m, -1, MT_T_WORD_EMB)), pos >= 0 ? mt_gpt_w(m, pos) : NULL, B,
                  T, C, s->len, 0, V);
    for (int l = 0; l < L; l++) {
#define T_(kind) mt_gpt_t(m, l, kind)
#define PO(kind) mt_gpt_popt(m, mt_gpt_t(m, l, kind))
#define W(kind) mt_gpt_w(m, mt_gpt_t(m, l, kind))
        mt_gpt_norm_fwd(m, s->h, s->mean, s->rstd, s->x, T_(MT_T_NORM1_W), T_(MT_T_NORM1_B), N, C);
        mtk_matmul_fwd(k, s->qkv, s->h, W(MT_T_QKV_W), PO(MT_T_QKV_B), N, C, m->qkvw);
        if (m->rot) mtk_rope_fwd(k, s->qkv, B, T, NH, m->groups, HS, m->rot, (float)c->rotary_base, s->len);
        mtk_attention_gqa_kv(k, s->att, s->qkv, AT(s->kc, (size_t)l * cache), AT(s->vc, (size_t)l * cache), B, T,
                             s->len, s->max_len, NH, m->groups, HS);
        if (mt_gpt_infer_mlp(m, s->moe, l, s->x, s->h, s->att, s->f, s->act, s->tmp, s->mean, s->rstd, B, T, e))
            return -1;
#undef T_
#undef PO
#undef W
    }
    /* The last new token of each sequence: gather its row */
    for (int b = 0; b < B; b++)
        mtk_copy(k, AT(s->h, (size_t)b * C), AT(s->x, ((size_t)b * T + (size_t)(T - 1)) * C), (size_t)C * m->asz);
    s->len += T;
    return 0;
}

int mt_gpt_infer_step(mt_gpt_infer *s, const int32_t *tokens, int T, float *logits, mt_err *e)
{
    if (step_rows(s, tokens, T, e)) return -1;
    /* the final LayerNorm, the logits */
    if (mt_gpt_infer_logits(s->m, s->h, s->tmp, s->mean, s->rstd, s->logits, s->logits32, s->h_logits, s->batch, logits,
                            e)) {
        s->len -= T;
        return -1;
    }
    return 0;
}

int mt_gpt_infer_step_greedy(mt_gpt_infer *s, const int32_t *tokens, int T, int V, int32_t *ids, double *lp, mt_err *e)
{
    mt_gpt *m = s->m;
    mtk *k = m->k;
    int B = s->batch, Vp = m->c.padded_vocab_size;
    if (V <= 0 || V > Vp) return mt_err_set(e, "generation: a vocabulary of %d, the model's rows are %d", V, Vp);
    if (step_rows(s, tokens, T, e)) return -1;
    final_logits(m, s->h, s->tmp, s->mean, s->rstd, s->logits, B);
    mtk_greedy(k, s->d_ids, s->d_lp, s->logits, B, V, Vp);
    mtk_to_host(k, ids, s->d_ids, (size_t)B * sizeof *ids);
    mtk_to_host(k, lp, s->d_lp, (size_t)B * sizeof *lp);
    if (mtk_sync(k, e)) {
        s->len -= T;
        return mt_err_prefix(e, "generation");
    }
    return 0;
}

int mt_gpt_infer_mlp(mt_gpt *m, struct mt_moe_ctx *moe, int l, void *x, void *h, const void *att, void *f, void *act,
                     void *tmp, float *mean, float *rstd, int B, int T, mt_err *e)
{
    const mt_gpt_config *c = &m->c;
    mtk *k = m->k;
    int N = B * T, C = c->hidden_size, F = c->ffn_hidden_size;
#define T_(kind) mt_gpt_t(m, l, kind)
#define PO(kind) mt_gpt_popt(m, mt_gpt_t(m, l, kind))
#define W(kind) mt_gpt_w(m, mt_gpt_t(m, l, kind))
    mtk_matmul_fwd(k, tmp, att, W(MT_T_PROJ_W), PO(MT_T_PROJ_B), N, C, C);
    mtk_acc(k, x, tmp, (size_t)N * C);
    mt_gpt_norm_fwd(m, h, mean, rstd, x, T_(MT_T_NORM2_W), T_(MT_T_NORM2_B), N, C);
    if (mt_arch_is_moe(&m->layout.arch, l)) {
        if (mt_moe_forward(moe, NULL, 0, l, l, h, tmp, B, T, 0, e)) return mt_err_prefix(e, "generation");
    } else {
        mtk_matmul_fwd(k, f, h, W(MT_T_FC1_W), PO(MT_T_FC1_B), N, C, m->fcw);
        void *a = f;
        if (c->mlp == MT_MLP_SWIGLU) mtk_swiglu_fwd(k, a = act, f, N, F);
        else mtk_gelu_fwd(k, f, f, (size_t)N * F, c->exact_gelu);
        mtk_matmul_fwd(k, tmp, a, W(MT_T_FC2_W), PO(MT_T_FC2_B), N, F, C);
    }
    mtk_acc(k, x, tmp, (size_t)N * C);
#undef T_
#undef PO
#undef W
    return 0;
}

int mt_gpt_infer_logits(mt_gpt *m, const void *last, void *tmp, float *mean, float *rstd, void *dlogits, float *logits32,
                        float *h_logits, int n, float *logits, mt_err *e)
{
    mtk *k = m->k;
    int V = m->c.padded_vocab_size;
    final_logits(m, last, tmp, mean, rstd, dlogits, n);
    if (mtk_act_dtype(k) == MTK_F32) mtk_to_host(k, h_logits, dlogits, (size_t)n * V * sizeof(float));
    else {
        mtk_convert(k, logits32, MTK_F32, dlogits, mtk_act_dtype(k), (size_t)n * V);
        mtk_to_host(k, h_logits, logits32, (size_t)n * V * sizeof(float));
    }
    if (mtk_status(k, e)) return mt_err_prefix(e, "generation");   /* the copy back waited: one sync a step */
    memcpy(logits, h_logits, (size_t)n * V * sizeof(float));
    return 0;
}
