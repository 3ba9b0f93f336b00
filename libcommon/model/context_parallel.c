/* context_parallel.c: the GPT model's pieces that follow the context-parallel split of its sequences
 * (context_parallel.h): positions, dropout counters, attention and losses by the chunks a rank holds. */
#include <stdlib.h>
#include <string.h>

#include "model/context_parallel.h"
#include "model/ring_attention.h"
#include "model/tensor_parallel.h"

#define AT(buf, i) ((void *)((char *)(buf) + (size_t)(i) * m->asz))

int mt_cp_position(const mt_gpt *m, int Tl, int t)
{
    if (m->cp_size <= 1) return t;
    const int h = Tl / 2;
    const mtk_att_rows w = mt_ring_rows(m->cp_rank, m->cp_size, Tl * m->cp_size);
    return w.start[t / h] + t % h;
}

size_t mt_cp_global(const mt_gpt *m, int Tl, size_t i)
{
    const size_t b = i / (size_t)Tl;
    return b * (size_t)Tl * (size_t)m->cp_size + (size_t)mt_cp_position(m, Tl, (int)(i % (size_t)Tl));
}

void mt_cp_dropout(mt_gpt *m, int forward, void *dst, const void *src, int B, int Tl, const mtk_dropout *drop)
{
    const int N = B * Tl, C = m->c.hidden_size, Nl = mt_tp_tokens(m, N);
    void (*op)(mtk *, mtk_act *, const mtk_act *, size_t, const mtk_dropout *) =
        forward ? mtk_dropout_fwd : mtk_dropout_bwd;
    if (m->cp_size <= 1) {
        op(m->k, dst, src, (size_t)Nl * C, drop);
        return;
    }
    /* the region's rows [first, first + Nl) in runs that are consecutive in the global micro-batch: a chunk
     * (h tokens) at most */
    const size_t first = mt_tp_first(m, N), h = (size_t)Tl / 2;
    for (size_t i = first; i < first + (size_t)Nl;) {
        size_t n = h - i % h;
        if (n > first + (size_t)Nl - i) n = first + (size_t)Nl - i;
        mtk_dropout d = *drop;
        d.offset = (uint64_t)mt_cp_global(m, Tl, i) * (uint64_t)C;
        op(m->k, AT(dst, (i - first) * C), AT(src, (i - first) * C), n * C, &d);
        i += n;
    }
}

void mt_cp_embed_fwd(mt_gpt *m, void *out, const int32_t *tok, const void *wte, const void *wpe, int B, int Tl)
{
    const int C = m->c.hidden_size;
    if (m->cp_size <= 1) {
        mtk_embed_fwd(m->k, out, tok, wte, wpe, B, Tl, C, 0, m->v0, m->vocab);
        return;
    }
    const int h = Tl / 2;
    for (int b = 0; b < B; b++)
        for (int c = 0; c < 2; c++) {
            const size_t i = (size_t)b * Tl + (size_t)c * h;
            mtk_embed_fwd(m->k, AT(out, i * C), tok + i, wte, wpe, 1, h, C, mt_cp_position(m, Tl, c * h), m->v0,
                          m->vocab);
        }
}

void mt_cp_embed_bwd(mt_gpt *m, float *dwte, float *dwpe, const void *dout, const int32_t *tok, int B, int Tl)
{
    const int C = m->c.hidden_size;
    if (m->cp_size <= 1) {
        mtk_embed_bwd(m->k, dwte, dwpe, dout, tok, B, Tl, C, 0, m->v0, m->vocab);
        return;
    }
    const int h = Tl / 2;
    for (int b = 0; b < B; b++)
        for (int c = 0; c < 2; c++) {
            const size_t i = (size_t)b * Tl + (size_t)c * h;
            mtk_embed_bwd(m->k, dwte, dwpe, AT(dout, i * C), tok + i, 1, h, C, mt_cp_position(m, Tl, c * h), m->v0,
                          m->vocab);
        }
}

void mt_cp_rope(mt_gpt *m, int forward, void *qkv, int B, int Tl)
{
    void (*op)(mtk *, mtk_act *, int, int, int, int, int, int, float, int) = forward ? mtk_rope_fwd : mtk_rope_bwd;
    const float base = (float)m->c.rotary_base;
    if (m->cp_size <= 1) {
        op(m->k, qkv, B, Tl, m->heads, m->groups, m->hs, m->rot, base, 0);
        return;
    }
    const int h = Tl / 2;
    for (int b = 0; b < B; b++)
        for (int c = 0; c < 2; c++) {
            const size_t i = (size_t)b * Tl + (size_t)c * h;
            op(m->k, AT(qkv, i * m->qkvw), 1, h, m->heads, m->groups, m->hs, m->rot, base,
               mt_cp_position(m, Tl, c * h));
        }
}

int mt_cp_attention_fwd(mt_gpt *m, void *out, float *lse, const void *qkv, int B, int Tl, const mtk_dropout *drop,
                        mt_err *e)
{
    if (m->cp_size <= 1) {
        mt_tp_attention_fwd(m, out, lse, qkv, B, Tl, drop);
        return 0;
    }
    if (mt_ring_attention_batch(m->ring, B, e)) return -1;
    return mt_ring_attention_fwd(m->ring, out, lse, qkv, drop, e);
}

int mt_cp_attention_bwd(mt_gpt *m, void *dqkv, const void *dout, const void *qkv, const void *out, const float *lse,
                        int B, int Tl, const mtk_dropout *drop, mt_err *e)
{
    if (m->cp_size <= 1) {
        mt_tp_attention_bwd(m, dqkv, dout, qkv, out, lse, B, Tl, drop);
        return 0;
    }
    if (mt_ring_attention_batch(m->ring, B, e)) return -1;
    return mt_ring_attention_bwd(m->ring, dqkv, dout, qkv, out, lse, drop, e);
}

int mt_cp_gather_losses(mt_gpt_ctx *x, int B, int Tl, float *host, float *dev, mt_err *e)
{
    mt_gpt *m = x->m;
    mtk *k = m->k;
    const int CP = m->cp_size, h = Tl / 2, Tg = Tl * CP;
    const size_t n = (size_t)B * Tl, f = sizeof(float);
    size_t counts[MT_CP_MAX];
    for (int j = 0; j < CP; j++) counts[j] = n;
    mtk_copy(k, m->cp_losses + (size_t)m->cp_rank * n, x->d_losses, n * f);
    if (mtk_sync(k, e) || mt_all_gather(m->cp, m->cp_losses, counts, MT_C_F32, e))
        return mt_err_prefix(e, "context-parallel losses");
    float *all = NULL;
    if (host) {
        all = mt_xmalloc((size_t)CP * n * f);
        mtk_to_host(k, all, m->cp_losses, (size_t)CP * n * f);
        if (mtk_sync(k, e)) {
            free(all);
            return mt_err_prefix(e, "context-parallel losses");
        }
    }
    /* rank j's chunk c of sequence b to its place in the sequence */
    for (int j = 0; j < CP; j++) {
        const mtk_att_rows w = mt_ring_rows(j, CP, Tg);
        for (int b = 0; b < B; b++)
            for (int c = 0; c < 2; c++) {
                const size_t src = (size_t)j * n + (size_t)b * Tl + (size_t)c * h;
                const size_t dst = (size_t)b * Tg + (size_t)w.start[c];
                if (host) memcpy(host + dst, all + src, (size_t)h * f);
                else mtk_copy(k, dev + dst, m->cp_losses + src, (size_t)h * f);
            }
    }
    free(all);
    return 0;
}
