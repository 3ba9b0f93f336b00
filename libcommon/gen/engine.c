/* engine.c: the decoding loop over the model's KV cache (engine.h). */
#include "gen/engine.h"

#include <stdlib.h>
#include <string.h>

#include "gen/seq.h"
#include "util/mt19937.h"
#include "util/progress.h"

struct mt_gen {
    mt_gpt *model;
    const mt_bpe *bpe;
    int64_t eod;
    mt_gen_opts o;
    mt_gen_stops stops;
    mt_sampler sampler;   /* scratch of one vocabulary, used by one sequence at a time */
    int device_greedy;    /* greedy without a repetition penalty: chosen on the device (mtk_greedy) */
};

mt_gen *mt_gen_new(mt_gpt *model, const mt_bpe *bpe, int64_t vocab_size, int64_t eod, const mt_gen_opts *o)
{
    mt_gen *g = mt_xcalloc(1, sizeof *g);
    g->model = model;
    g->bpe = bpe;
    g->eod = eod;
    g->o = *o;
    mt_gen_stops_init(&g->stops, o);
    mt_sampler_init(&g->sampler, (int)vocab_size);
    /* the same choice and log-probability as mt_sample_next's (the cpu backend's bit for bit), without the
     * logits' copy to the host; MT_GREEDY_ON_HOST=1 keeps the host's, for comparison */
    const char *h = getenv("MT_GREEDY_ON_HOST");
    g->device_greedy = (o->sampling.greedy || o->sampling.temperature <= 0) && o->sampling.repetition_penalty == 1.0 &&
                       !(h && !strcmp(h, "1"));
    return g;
}

void mt_gen_free(mt_gen *g)
{
    if (!g) return;
    mt_sampler_free(&g->sampler);
    mt_gen_stops_free(&g->stops);
    free(g);
}

int64_t mt_gen_room(const mt_gen *g, size_t prompt_len)
{
    int64_t room = (int64_t)mt_gpt_get_config(g->model)->max_position_embeddings - (int64_t)prompt_len;
    return room < g->o.max_new_tokens ? room : g->o.max_new_tokens;
}

void mt_gen_seq_free(mt_gen_seq *s)
{
    free(s->out.p);
    free(s->logprob);
    free(s->prompt_logprob);
    free(s->top_id);
    free(s->top_lp);
    free(s->text.p);
    memset(s, 0, sizeof *s);
}

int mt_gen_run(mt_gen *g, const mt_ids *prompts, int B, uint64_t first, mt_gen_seq *seqs, mt_gen_token_fn on_token,
               void *arg, mt_gen_stats *st, mt_err *e)
{
    const mt_gpt_config *c = mt_gpt_get_config(g->model);
    int T = (int)prompts[0].n;
    int64_t room = mt_gen_room(g, (size_t)T);
    if (room <= 0)
        return mt_err_set(e, "%d prompt tokens leave no room in the model's %d positions", T, c->max_position_embeddings);
    int new_max = (int)room;
    double t0 = mt_now();
    mt_gpt_infer *s = mt_gpt_infer_new(g->model, B, T + new_max, e);
    if (!s) return -1;
    int Vp = c->padded_vocab_size;
    float *logits = g->device_greedy ? NULL : mt_xmalloc((size_t)B * Vp * sizeof *logits);
    int32_t *ids = mt_xmalloc((size_t)B * sizeof *ids);
    double *lps = mt_xmalloc((size_t)B * sizeof *lps);
    int32_t *in = mt_xmalloc((size_t)B * T * sizeof *in);
    mt_rs *rng = mt_xmalloc((size_t)B * sizeof *rng);
    for (int b = 0; b < B; b++) mt_rs_seed(&rng[b], (uint32_t)(g->o.seed + first + (uint64_t)b));
    for (int b = 0; b < B; b++) {
        seqs[b] = (mt_gen_seq){0};
        seqs[b].logprob = mt_xmalloc((size_t)new_max * sizeof(double));
        for (int t = 0; t < T; t++) in[b * T + t] = (int32_t)prompts[b].p[t];
    }
    int n = T, live = B, rc = 0;
    double t_first = t0;
    size_t made = 0;
    for (int step = 0; step < new_max && live; step++) {
        if (g->device_greedy ? mt_gpt_infer_step_greedy(s, in, n, g->sampler.V, ids, lps, e)
                             : mt_gpt_infer_step(s, in, n, logits, e)) {
            rc = -1;
            break;
        }
        if (step == 0) t_first = mt_now();
        made += (size_t)live;
        for (int b = 0; b < B; b++) {
            mt_gen_seq *q = &seqs[b];
            if (q->why) {
                in[b] = (int32_t)(g->eod >= 0 ? g->eod : 0);   /* finished: its inputs are ignored */
                continue;
            }
            double lp = lps[b];
            int32_t id = g->device_greedy ? ids[b]
                                          : mt_sample_next(&g->sampler, logits + (size_t)b * Vp, &g->o.sampling, q->out.p,
                                                           q->out.n, &rng[b], &lp);
            mt_gen_seq_append(&g->stops, g->bpe, g->eod, q, (uint32_t)id, lp);
            if (!q->why && q->out.n == (size_t)new_max) q->why = "length";
            if (on_token && on_token(arg, b, q) && !q->why) q->why = "abort";
            if (q->why) live--;
            in[b] = id;
        }
        n = 1;
    }
    for (int b = 0; b < B; b++) {
        if (rc) mt_gen_seq_free(&seqs[b]);
        else if (!seqs[b].why) seqs[b].why = "length";
    }
    if (st) *st = (mt_gen_stats){t_first - t0, mt_now() - t0, made};
    free(rng);
    free(in);
    free(logits);
    free(ids);
    free(lps);
    mt_gpt_infer_free(s);
    return rc;
}
