/* tensor_parallel.c: the column- and row-parallel products, the vocabulary-parallel embedding and
 * cross-entropy, and the head-parallel attention of a GPT model split over tensor-parallel ranks
 * (tensor_parallel.h). */
#include "model/context_parallel.h"
#include "model/tensor_parallel.h"

/* The communicator's element type for the backend's activation dtype. */
static mt_cdtype act_cdtype(const mt_gpt *m)
{
    switch (mtk_act_dtype(m->k)) {
    case MTK_BF16: return MT_C_BF16;
    case MTK_F16: return MT_C_F16;
    default: return MT_C_F32;
    }
}

/* One sum over the ranks of n elements (all-reduce). */
static int tp_sum(mt_gpt *m, void *buf, size_t n, mt_err *e)
{
    if (!m->tp) return 0;
    return mt_all_reduce(m->tp, buf, n, act_cdtype(m), e) ? mt_err_prefix(e, "tensor-parallel sum") : 0;
}

/* counts[i]: rank i's rows of a full [N, C] buffer, in elements */
static size_t *row_counts(const mt_gpt *m, int N, int C, size_t *counts)
{
    for (int i = 0; i < m->tp_size; i++) counts[i] = (size_t)(N / m->tp_size) * (size_t)C;
    return counts;
}

int mt_tp_tokens(const mt_gpt *m, int N) { return m->sp ? N / m->tp_size : N; }
size_t mt_tp_first(const mt_gpt *m, int N) { return m->sp ? (size_t)m->tp_rank * (size_t)(N / m->tp_size) : 0; }
void *mt_tp_local(const mt_gpt *m, void *full, int N, int C)
{
    return (char *)full + mt_tp_first(m, N) * (size_t)C * m->asz;
}

int mt_tp_gather(mt_gpt *m, void *full, int N, int C, mt_err *e)
{
    if (!m->sp) return 0;
    if (mt_all_gather(m->tp, full, row_counts(m, N, C, m->tp_counts), act_cdtype(m), e))
        return mt_err_prefix(e, "sequence-parallel all-gather");
    return 0;
}

const void *mt_tp_gathered(mt_gpt *m, void *full, const void *local, int N, int C, mt_err *e)
{
    if (!m->sp) return local;
    mtk_copy(m->k, mt_tp_local(m, full, N, C), local, (size_t)mt_tp_tokens(m, N) * (size_t)C * m->asz);
    return mt_tp_gather(m, full, N, C, e) ? NULL : full;
}

void *mt_tp_placed(mt_gpt *m, void *full, const void *local, int N, int C)
{
    void *mine = mt_tp_local(m, full, N, C);
    if (mine != local) mtk_copy(m->k, mine, local, (size_t)mt_tp_tokens(m, N) * (size_t)C * m->asz);
    return full;
}

static int scatter_sum(mt_gpt *m, void *full, int N, int C, mt_err *e)
{
    if (mt_reduce_scatter(m->tp, full, row_counts(m, N, C, m->tp_counts), act_cdtype(m), e))
        return mt_err_prefix(e, "sequence-parallel reduce-scatter");
    return 0;
}

int mt_tp_row_linear_fwd(mt_gpt *m, void *full, const void *inp, const void *w, const float *bias, int N, int Cl,
                         int OC, mt_err *e)
{
    if (!m->tp) {
        mtk_matmul_fwd(m->k, full, inp, w, bias, N, Cl, OC);
        return 0;
    }
    mtk_matmul_fwd(m->k, full, inp, w, NULL, N, Cl, OC);
    if (m->sp ? scatter_sum(m, full, N, OC, e) : tp_sum(m, full, (size_t)N * OC, e)) return -1;
    if (bias) mtk_bias_add(m->k, mt_tp_local(m, full, N, OC), bias, mt_tp_tokens(m, N), OC);
    return 0;
}

int mt_tp_input_grad(mt_gpt *m, void *full, int N, int C, mt_err *e)
{
    if (!m->tp) return 0;
    return m->sp ? scatter_sum(m, full, N, C, e) : tp_sum(m, full, (size_t)N * C, e);
}

int mt_tp_output_grad(mt_gpt *m, const void *dlocal, void *full, int N, int C, const void **dout, mt_err *e)
{
    *dout = dlocal;
    if (!m->sp) return 0;
    void *mine = mt_tp_local(m, full, N, C);
    if (mine != dlocal) mtk_copy(m->k, mine, dlocal, (size_t)mt_tp_tokens(m, N) * (size_t)C * m->asz);
    *dout = full;
    return mt_tp_gather(m, full, N, C, e);
}

int mt_tp_embed_fwd(mt_gpt *m, void *local, void *scratch, const int32_t *tok, int B, int T, mt_err *e)
{
    int C = m->c.hidden_size, N = B * T;
    const void *wte = mt_gpt_w(m, mt_gpt_t(m, -1, MT_T_WORD_EMB));
    int pos = mt_gpt_t(m, -1, MT_T_POS_EMB);   /* none with rotary positions */
    const void *wpe = m->tp_rank == 0 && pos >= 0 ? mt_gpt_w(m, pos) : NULL;
    if (!m->sp) {
        mt_cp_embed_fwd(m, local, tok, wte, wpe, B, T);
        return tp_sum(m, local, (size_t)N * C, e);
    }
    mt_cp_embed_fwd(m, scratch, tok, wte, wpe, B, T);
    if (scatter_sum(m, scratch, N, C, e)) return -1;
    mtk_copy(m->k, local, mt_tp_local(m, scratch, N, C), (size_t)mt_tp_tokens(m, N) * (size_t)C * m->asz);
    return 0;
}

int mt_tp_embed_bwd(mt_gpt *m, const void *dlocal, void *scratch, const int32_t *tok, int B, int T, mt_err *e)
{
    int C = m->c.hidden_size;
    const void *dout;
    if (mt_tp_output_grad(m, dlocal, scratch, B * T, C, &dout, e)) return -1;
    mt_cp_embed_bwd(m, mt_gpt_g(m, mt_gpt_t(m, -1, MT_T_WORD_EMB)), mt_gpt_gopt(m, mt_gpt_t(m, -1, MT_T_POS_EMB)), dout,
                    tok, B, T);
    return 0;
}

/* The tensors whose gradients a sequence-parallel rank computes from its own rows only: the norms, and with
 * an expert tensor size below tp (moe.h) the MoE layers' routers (its expert-tensor group's rows, from the
 * group's first rank). */
static int rows_only(const mt_gpt *m, mt_tensor_kind k)
{
    return k == MT_T_NORM1_W || k == MT_T_NORM1_B || k == MT_T_NORM2_W || k == MT_T_NORM2_B ||
           k == MT_T_FINAL_NORM_W || k == MT_T_FINAL_NORM_B || (m->experts_grouped && k == MT_T_ROUTER_W);
}

int mt_gpt_reduce_grads(mt_gpt *m, mt_err *e)
{
    if (!m->sp || !m->grads) return 0;
    for (int t = 0; t < m->ntensors; t++) {
        if (!rows_only(m, m->layout.t[t].kind)) continue;
        if (mt_all_reduce(m->tp, mt_gpt_g(m, t), m->tensors[t].numel, MT_C_F32, e))
            return mt_err_prefix(e, "sequence-parallel gradients of %s", m->tensors[t].name);
    }
    return 0;
}

/* With the heads split and dropout on, the attention runs one sequence at a time, each from the counter
 * of its first global head: ((b NH + h0 + h) T + i) T + j is the one-rank mask's counter for local head h
 * of rank r (h0 = r x heads). */
#define PER_SEQUENCE(call_one, call_all)                                                                       \
    do {                                                                                                       \
        if (!m->tp || !drop) {                                                                                 \
            call_all;                                                                                          \
            break;                                                                                             \
        }                                                                                                      \
        size_t HS = (size_t)m->hs, Tn = (size_t)T, a = m->asz;                                                \
        size_t tok_qkv = (size_t)m->qkvw * a, tok_out = (size_t)m->heads * HS * a;                            \
        for (int b = 0; b < B; b++) {                                                                          \
            mtk_dropout d = *drop;                                                                             \
            d.offset = drop->offset + ((uint64_t)b * (uint64_t)m->c.num_heads + (uint64_t)m->tp_rank * m->heads) \
                                          * Tn * Tn;                                                           \
            size_t bq = (size_t)b * Tn * tok_qkv, bo = (size_t)b * Tn * tok_out, bl = (size_t)b * m->heads * Tn; \
            (void)bq, (void)bo, (void)bl;                                                                      \
            call_one;                                                                                          \
        }                                                                                                      \
    } while (0)

void mt_tp_attention_fwd(mt_gpt *m, void *out, float *lse, const void *qkv, int B, int T, const mtk_dropout *drop)
{
    int HS = m->hs, NG = m->groups;
    PER_SEQUENCE(mtk_attention_gqa_fwd(m->k, (char *)out + bo, lse + bl, (const char *)qkv + bq, 1, T, m->heads, NG, HS, &d),
                 mtk_attention_gqa_fwd(m->k, out, lse, qkv, B, T, m->heads, NG, HS, drop));
}

void mt_tp_attention_bwd(mt_gpt *m, void *dqkv, const void *dout, const void *qkv, const void *out, const float *lse,
                         int B, int T, const mtk_dropout *drop)
{
    int HS = m->hs, NG = m->groups;
    PER_SEQUENCE(mtk_attention_gqa_bwd(m->k, (char *)dqkv + bq, (const char *)dout + bo, (const char *)qkv + bq,
                                       (const char *)out + bo, lse + bl, 1, T, m->heads, NG, HS, &d),
                 mtk_attention_gqa_bwd(m->k, dqkv, dout, qkv, out, lse, B, T, m->heads, NG, HS, drop));
}

int mt_tp_xent_fwd(mt_gpt_ctx *x, int N, mt_err *e)
{
    mt_gpt *m = x->m;
    if (!m->tp) {
        mtk_xent_fwd_bwd(m->k, x->d_losses, NULL, x->logits, x->d_tgt, NULL, N, m->vocab);
        return 0;
    }
    float *rowmax = x->xent, *sumexp = x->xent + N, *tlogit = x->xent + 2 * (size_t)N;
    mtk_xent_rowmax(m->k, rowmax, x->logits, N, m->vocab);
    if (mt_all_reduce_op(m->tp, rowmax, (size_t)N, MT_C_F32, MT_OP_MAX, e)) return -1;
    mtk_xent_sumexp(m->k, sumexp, tlogit, x->logits, rowmax, x->d_tgt, N, m->vocab, m->v0);
    if (mt_all_reduce(m->tp, sumexp, 2 * (size_t)N, MT_C_F32, e)) return -1;   /* sumexp and tlogit */
    mtk_xent_loss(m->k, x->d_losses, rowmax, sumexp, tlogit, N);
    return 0;
}

int mt_tp_xent_bwd(mt_gpt_ctx *x, int N, mt_err *e)
{
    (void)e;
    mt_gpt *m = x->m;
    if (!m->tp) mtk_xent_fwd_bwd(m->k, x->d_losses, x->logits, x->logits, x->d_tgt, x->d_dscale, N, m->vocab);
    else
        mtk_xent_bwd(m->k, x->logits, x->logits, x->xent, x->xent + N, x->d_tgt, x->d_dscale, N, m->vocab, m->v0);
    return 0;
}
