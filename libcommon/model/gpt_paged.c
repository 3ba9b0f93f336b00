/* gpt_paged.c: generation over a paged KV cache (gpt.h's mt_gpt_paged), what a server's continuous
 * batching steps. The pool holds every layer's key and value blocks ([L][nblocks][NG][BS][HS] each); a slot's
 * block table (host, uploaded each step) lists the blocks its positions use, taken from a free list as the
 * slot grows. A step embeds each run's tokens at its positions, runs every layer over all the step's rows
 * (the products and norms over the rows together, rotary positions run by run, mtk_attention_paged over the
 * pool), and returns the logits of each run's last row. Nothing is kept for a backward pass; no dropout. */
#include <stdlib.h>
#include <string.h>

#include "model/gpt_impl.h"
#include "model/moe.h"

struct mt_gpt_paged {
    mt_gpt *m;
    int max_seqs, max_tokens, max_len, bs, nblocks, max_blocks;
    int32_t *table;            /* host [max_seqs][max_blocks]: a slot's blocks */
    int *nheld;                /* host [max_seqs]: blocks a slot holds */
    int *free_list, nfree;     /* host: the blocks no slot holds */
    void *kpool, *vpool;       /* [L][nblocks][NG][bs][HS] */
    void *x, *h, *qkv, *att, *f, *act, *tmp;   /* scratch [max_tokens][...], as mt_gpt_infer's */
    void *last, *logits;       /* [max_seqs][C], [max_seqs][V_pad] */
    float *logits32, *mean, *rstd;
    int32_t *d_tok, *d_seq, *d_pos, *d_table;
    int32_t *h_seq, *h_pos;    /* host [max_tokens] */
    float *h_logits;           /* host [max_seqs][V_pad] */
    mt_moe_ctx *moe;
    size_t bytes;
};

#define AT(buf, i) ((void *)((char *)(buf) + (size_t)(i) * m->asz))

mt_gpt_paged *mt_gpt_paged_new(mt_gpt *m, int max_seqs, int max_tokens, int max_len, int block_size, int nblocks,
                               mt_err *e)
{
    const mt_gpt_config *c = &m->c;
    if (max_seqs <= 0 || max_tokens <= 0 || block_size <= 0 || nblocks <= 0 || max_len <= 0 ||
        max_len > c->max_position_embeddings) {
        mt_err_set(e, "generation: %d sequences of up to %d positions, %d tokens a step, %d blocks of %d (the model has "
                      "%d positions)", max_seqs, max_len, max_tokens, nblocks, block_size, c->max_position_embeddings);
        return NULL;
    }
    if (m->tp || m->pp_size > 1) {
        mt_err_set(e, "generation: the model is split over %d tensor-parallel ranks and %d stages (open the checkpoint as one)",
                   m->tp_size, m->pp_size);
        return NULL;
    }
    mt_gpt_paged *p = mt_xcalloc(1, sizeof *p);
    p->m = m;
    p->max_seqs = max_seqs, p->max_tokens = max_tokens, p->max_len = max_len, p->bs = block_size, p->nblocks = nblocks;
    p->max_blocks = (max_len + block_size - 1) / block_size;
    size_t L = (size_t)c->num_layers, C = (size_t)c->hidden_size, F = (size_t)c->ffn_hidden_size;
    size_t V = (size_t)c->padded_vocab_size, a = m->asz, n = (size_t)max_tokens, S = (size_t)max_seqs;
    size_t pool = L * (size_t)nblocks * (size_t)m->groups * (size_t)block_size * (size_t)m->hs;
    void **bufs[] = {&p->kpool, &p->vpool, &p->x, &p->h, &p->qkv, &p->att, &p->f, &p->act, &p->tmp, &p->last,
                     &p->logits, (void **)&p->logits32, (void **)&p->mean, (void **)&p->rstd, (void **)&p->d_tok,
                     (void **)&p->d_seq, (void **)&p->d_pos, (void **)&p->d_table};
    size_t sizes[] = {pool * a, pool * a, n * C * a, n * C * a, n * (size_t)m->qkvw * a, n * C * a,
                      n * (size_t)m->fcw * a, n * F * a, (n > S ? n : S) * C * a, S * C * a, S * V * a, S * V * 4,
                      (n > S ? n : S) * 4, (n > S ? n : S) * 4, n * 4, n * 4, n * 4, S * (size_t)p->max_blocks * 4};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        if (!(*bufs[i] = mtk_alloc(m->k, sizes[i], e))) {
            mt_err_prefix(e, "generation cache");
            mt_gpt_paged_free(p);
            return NULL;
        }
        p->bytes += sizes[i];
    }
    int failed = 0;
    p->moe = mt_moe_ctx_new(m, n, 1, 1, (int)L, &failed, e);
    p->bytes += mt_moe_bytes(p->moe);
    if (failed || mt_gpt_reserve(m, n > S ? n : S, p->max_blocks * block_size, e)) {
        if (failed) mt_err_prefix(e, "generation cache");
        mt_gpt_paged_free(p);
        return NULL;
    }
    p->table = mt_xcalloc(S * (size_t)p->max_blocks, sizeof *p->table);
    p->nheld = mt_xcalloc(S, sizeof *p->nheld);
    p->free_list = mt_xmalloc((size_t)nblocks * sizeof *p->free_list);
    for (int i = 0; i < nblocks; i++) p->free_list[i] = nblocks - 1 - i;   /* block 0 first */
    p->nfree = nblocks;
    p->h_seq = mt_xmalloc(n * sizeof *p->h_seq);
    p->h_pos = mt_xmalloc(n * sizeof *p->h_pos);
    p->h_logits = mt_xmalloc(S * V * sizeof(float));
    m->ctx_bytes += p->bytes;
    return p;
}

void mt_gpt_paged_free(mt_gpt_paged *p)
{
    if (!p) return;
    void *dev[] = {p->kpool, p->vpool, p->x, p->h, p->qkv, p->att, p->f, p->act, p->tmp, p->last, p->logits,
                   p->logits32, p->mean, p->rstd, p->d_tok, p->d_seq, p->d_pos, p->d_table};
    for (size_t i = 0; i < sizeof dev / sizeof dev[0]; i++)
        if (dev[i]) mtk_free(p->m->k, dev[i]);
    mt_moe_ctx_free(p->moe);
    if (p->h_logits) p->m->ctx_bytes -= p->bytes;
    free(p->table), free(p->nheld), free(p->free_list), free(p->h_seq), free(p->h_pos), free(p->h_logits);
    free(p);
}

int mt_gpt_paged_reserve(mt_gpt_paged *p, int seq, int len)
{
    if (seq < 0 || seq >= p->max_seqs || len < 0 || len > p->max_len) return -1;
    int need = (len + p->bs - 1) / p->bs - p->nheld[seq];
    if (need <= 0) return 0;
    if (need > p->nfree) return -1;
    for (int i = 0; i < need; i++) p->table[(size_t)seq * p->max_blocks + p->nheld[seq]++] = p->free_list[--p->nfree];
    return 0;
}

void mt_gpt_paged_release(mt_gpt_paged *p, int seq)
{
    if (seq < 0 || seq >= p->max_seqs) return;
    while (p->nheld[seq] > 0) p->free_list[p->nfree++] = p->table[(size_t)seq * p->max_blocks + --p->nheld[seq]];
}

int mt_gpt_paged_free_blocks(const mt_gpt_paged *p) { return p->nfree; }

int mt_gpt_paged_step(mt_gpt_paged *p, const mt_gpt_run *runs, int n, const int32_t *tokens, float *logits, mt_err *e)
{
    mt_gpt *m = p->m;
    const mt_gpt_config *c = &m->c;
    int C = c->hidden_size, NH = c->num_heads, V = c->padded_vocab_size, L = c->num_layers;
    int HS = C / NH, N = 0;
    if (n <= 0 || n > p->max_seqs) return mt_err_set(e, "generation: %d runs in a step of at most %d", n, p->max_seqs);
    for (int i = 0; i < n; i++) {
        const mt_gpt_run *r = &runs[i];
        if (r->seq < 0 || r->seq >= p->max_seqs || r->pos < 0 || r->count <= 0)
            return mt_err_set(e, "generation: run %d: slot %d, position %d, %d tokens", i, r->seq, r->pos, r->count);
        if ((r->pos + r->count + p->bs - 1) / p->bs > p->nheld[r->seq])
            return mt_err_set(e, "generation: run %d: positions up to %d beyond the %d blocks slot %d holds", i,
                              r->pos + r->count - 1, p->nheld[r->seq], r->seq);
        for (int j = 0; j < i; j++)
            if (runs[j].seq == r->seq) return mt_err_set(e, "generation: slot %d in two runs of a step", r->seq);
        if (r->count > p->max_tokens - N)
            return mt_err_set(e, "generation: a step of more than %d tokens", p->max_tokens);
        for (int t = 0; t < r->count; t++) {
            p->h_seq[N + t] = r->seq;
            p->h_pos[N + t] = r->pos + t;
        }
        N += r->count;
    }
    for (int i = 0; i < N; i++)
        if (tokens[i] < 0 || tokens[i] >= c->vocab_size)
            return mt_err_set(e, "generation: token %d outside the vocabulary [0, %d)", tokens[i], c->vocab_size);
    mtk *k = m->k;
    size_t layer_pool = (size_t)p->nblocks * (size_t)m->groups * (size_t)p->bs * (size_t)HS;
    int pos = mt_gpt_t(m, -1, MT_T_POS_EMB);   /* none with rotary positions */
    mtk_to_device(k, p->d_tok, tokens, (size_t)N * sizeof(int32_t));
    mtk_to_device(k, p->d_seq, p->h_seq, (size_t)N * sizeof(int32_t));
    mtk_to_device(k, p->d_pos, p->h_pos, (size_t)N * sizeof(int32_t));
    mtk_to_device(k, p->d_table, p->table, (size_t)p->max_seqs * p->max_blocks * sizeof(int32_t));
    for (int i = 0, row = 0; i < n; row += runs[i++].count)
        mtk_embed_fwd(k, AT(p->x, (size_t)row * C), p->d_tok + row, mt_gpt_w(m, mt_gpt_t(m, -1, MT_T_WORD_EMB)),
                      pos >= 0 ? mt_gpt_w(m, pos) : NULL, 1, runs[i].count, C, runs[i].pos, 0, V);
    for (int l = 0; l < L; l++) {
#define T_(kind) mt_gpt_t(m, l, kind)
#define PO(kind) mt_gpt_popt(m, mt_gpt_t(m, l, kind))
#define W(kind) mt_gpt_w(m, mt_gpt_t(m, l, kind))
        mt_gpt_norm_fwd(m, p->h, p->mean, p->rstd, p->x, T_(MT_T_NORM1_W), T_(MT_T_NORM1_B), N, C);
        mtk_matmul_fwd(k, p->qkv, p->h, W(MT_T_QKV_W), PO(MT_T_QKV_B), N, C, m->qkvw);
        if (m->rot)
            for (int i = 0, row = 0; i < n; row += runs[i++].count)
                mtk_rope_fwd(k, AT(p->qkv, (size_t)row * m->qkvw), 1, runs[i].count, NH, m->groups, HS, m->rot,
                             (float)c->rotary_base, runs[i].pos);
        mtk_attention_paged(k, p->att, p->qkv, AT(p->kpool, (size_t)l * layer_pool), AT(p->vpool, (size_t)l * layer_pool),
                            N, p->d_seq, p->d_pos, p->d_table, p->max_blocks, p->bs, NH, m->groups, HS);
        if (mt_gpt_infer_mlp(m, p->moe, l, p->x, p->h, p->att, p->f, p->act, p->tmp, p->mean, p->rstd, 1, N, e))
            return -1;
#undef T_
#undef PO
#undef W
    }
    /* each run's last row: the final norm, the logits */
    for (int i = 0, row = 0; i < n; i++) {
        row += runs[i].count;
        mtk_copy(k, AT(p->last, (size_t)i * C), AT(p->x, (size_t)(row - 1) * C), (size_t)C * m->asz);
    }
    return mt_gpt_infer_logits(m, p->last, p->tmp, p->mean, p->rstd, p->logits, p->logits32, p->h_logits, n, logits, e);
}
