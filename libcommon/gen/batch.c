/* batch.c: continuous batching over the paged KV cache (batch.h). */
#include "gen/batch.h"

#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "gen/sample.h"
#include "gen/seq.h"
#include "util/mt19937.h"

/* A running sequence, in its slot. */
typedef struct bseq {
    int used;
    uint64_t order;        /* when it joined: prompts are read oldest first */
    mt_ids prompt;
    int read;              /* prompt tokens already in the cache */
    int32_t next;          /* once decoding: the token to feed */
    int new_max;           /* new tokens at most (0: the prompt scored only) */
    int score;             /* the prompt's log-probabilities: read a token a step */
    int ntop;              /* alternatives per position */
    int logprobs;          /* each generated id's log-probability wanted */
    mt_sampling sampling;
    mt_gen_stops stops;
    mt_rs rng;
    mt_gen_seq *out;
    mt_gen_token_fn fn;
    void *arg;
    int tag;
} bseq;

struct mt_gen_batch {
    mt_gpt *model;
    const mt_bpe *bpe;
    int64_t eod;
    mt_gen_batch_opts o;
    int positions, Vp, running;
    uint64_t joined;
    mt_gpt_paged *paged;
    mt_sampler *samplers;  /* one per OpenMP thread: the step's choices are made in parallel */
    int nsamplers, V;
    int32_t *pick;         /* a step's, [max_seqs]: each run's next id (-1: none this step) */
    double *pick_lp;
    bseq *seq;             /* [max_seqs], by slot */
    mt_gpt_run *runs;      /* a step's, [max_seqs] */
    int32_t *tokens;       /* [max_prefill + max_seqs] */
    float *logits;         /* [max_seqs][Vp] */
};

mt_gen_batch *mt_gen_batch_new(mt_gpt *model, const mt_bpe *bpe, int64_t vocab_size, int64_t eod,
                               const mt_gen_batch_opts *o, mt_err *e)
{
    const mt_gpt_config *c = mt_gpt_get_config(model);
    if (o->max_seqs <= 0 || o->max_prefill <= 0) {
        mt_err_set(e, "generation: %d sequences at once, %d prompt tokens a step", o->max_seqs, o->max_prefill);
        return NULL;
    }
    mt_gpt_paged *p = mt_gpt_paged_new(model, o->max_seqs, o->max_prefill + o->max_seqs, c->max_position_embeddings,
                                       o->block_size, o->nblocks, e);
    if (!p) return NULL;
    mt_gen_batch *b = mt_xcalloc(1, sizeof *b);
    b->model = model, b->bpe = bpe, b->eod = eod, b->o = *o, b->paged = p;
    b->positions = c->max_position_embeddings;
    b->Vp = c->padded_vocab_size;
    b->V = (int)vocab_size;
    b->nsamplers = omp_get_max_threads();
    b->samplers = mt_xcalloc((size_t)b->nsamplers, sizeof *b->samplers);
    for (int t = 0; t < b->nsamplers; t++) mt_sampler_init(&b->samplers[t], b->V);
    b->pick = mt_xcalloc((size_t)o->max_seqs, sizeof *b->pick);
    b->pick_lp = mt_xcalloc((size_t)o->max_seqs, sizeof *b->pick_lp);
    b->seq = mt_xcalloc((size_t)o->max_seqs, sizeof *b->seq);
    b->runs = mt_xcalloc((size_t)o->max_seqs, sizeof *b->runs);
    b->tokens = mt_xcalloc((size_t)(o->max_prefill + o->max_seqs), sizeof *b->tokens);
    b->logits = mt_xmalloc((size_t)o->max_seqs * (size_t)b->Vp * sizeof *b->logits);
    return b;
}

/* The sequence in slot s has ended (or is dropped): its blocks back to the pool. */
static void leave(mt_gen_batch *b, int s)
{
    bseq *q = &b->seq[s];
    mt_gpt_paged_release(b->paged, s);
    free(q->prompt.p);
    mt_gen_stops_free(&q->stops);
    memset(q, 0, sizeof *q);
    b->running--;
}

void mt_gen_batch_free(mt_gen_batch *b)
{
    if (!b) return;
    for (int s = 0; s < b->o.max_seqs; s++)
        if (b->seq[s].used) leave(b, s);
    mt_gpt_paged_free(b->paged);
    for (int t = 0; t < b->nsamplers; t++) mt_sampler_free(&b->samplers[t]);
    free(b->samplers), free(b->pick), free(b->pick_lp);
    free(b->seq), free(b->runs), free(b->tokens), free(b->logits);
    free(b);
}

int mt_gen_batch_running(const mt_gen_batch *b) { return b->running; }

int mt_gen_batch_add(mt_gen_batch *b, const mt_ids *prompt, const mt_gen_opts *o, uint32_t seed, mt_gen_seq *out,
                     mt_gen_token_fn fn, void *arg, int tag, mt_err *e)
{
    int T = (int)prompt->n;
    int64_t room = (int64_t)b->positions - T, new_max = o->max_new_tokens < room ? o->max_new_tokens : room;
    int score_only = o->prompt_logprobs && o->max_new_tokens == 0;
    if (T <= 0 || T > b->positions || (new_max <= 0 && !score_only))
        return mt_err_set(e, "%d prompt tokens leave no room in the model's %d positions", T, b->positions);
    if (score_only) new_max = 0;
    int len = T + (int)new_max, need = (len + b->o.block_size - 1) / b->o.block_size;
    if (need > b->o.nblocks)
        return mt_err_set(e, "%d positions need %d KV blocks of %d, the cache has %d", len, need, b->o.block_size,
                          b->o.nblocks);
    int s = 0;
    while (s < b->o.max_seqs && b->seq[s].used) s++;
    if (s == b->o.max_seqs || mt_gpt_paged_reserve(b->paged, s, len)) return 1;
    bseq *q = &b->seq[s];
    *q = (bseq){.used = 1, .order = b->joined++, .new_max = (int)new_max, .score = o->prompt_logprobs, .ntop = o->top_logprobs,
                .logprobs = o->logprobs, .sampling = o->sampling, .out = out, .fn = fn, .arg = arg, .tag = tag};
    q->prompt.p = mt_xmalloc((size_t)T * sizeof *q->prompt.p);
    memcpy(q->prompt.p, prompt->p, (size_t)T * sizeof *q->prompt.p);
    q->prompt.n = q->prompt.cap = (size_t)T;
    mt_gen_stops_init(&q->stops, o);
    mt_rs_seed(&q->rng, seed);
    *out = (mt_gen_seq){0};
    out->logprob = mt_xmalloc((size_t)(new_max ? new_max : 1) * sizeof(double));
    if (q->score) out->prompt_logprob = mt_xcalloc((size_t)(T > 1 ? T - 1 : 1), sizeof(double));
    if (q->ntop) {
        size_t at = (size_t)(q->score ? T - 1 : 0) + (size_t)new_max + 1;
        out->ntop = q->ntop;
        out->top_id = mt_xcalloc(at * (size_t)q->ntop, sizeof *out->top_id);
        out->top_lp = mt_xcalloc(at * (size_t)q->ntop, sizeof *out->top_lp);
    }
    b->running++;
    return 0;
}

/* The alternatives of q's position at, from row u of the step's logits. */
static void top(mt_gen_batch *b, bseq *q, int u, int at)
{
    if (q->ntop)
        mt_top_logprobs(b->logits + (size_t)u * b->Vp, b->V, q->ntop, q->out->top_id + (size_t)at * q->ntop,
                        q->out->top_lp + (size_t)at * q->ntop);
}

int mt_gen_batch_step(mt_gen_batch *b, mt_err *e)
{
    int n = 0, N = 0, budget = b->o.max_prefill;
    /* every decoding sequence's next token, then the prompts being read, the oldest first */
    for (int s = 0; s < b->o.max_seqs; s++) {
        bseq *q = &b->seq[s];
        if (!q->used || q->read < (int)q->prompt.n) continue;
        b->runs[n++] = (mt_gpt_run){s, (int)q->prompt.n + (int)q->out->out.n - 1, 1};
        b->tokens[N++] = q->next;
    }
    while (budget > 0) {
        int best = -1;
        for (int s = 0; s < b->o.max_seqs; s++) {
            const bseq *q = &b->seq[s];
            int taken = 0;
            for (int u = 0; u < n && !taken; u++) taken = b->runs[u].seq == s;
            if (q->used && !taken && q->read < (int)q->prompt.n && (best < 0 || q->order < b->seq[best].order)) best = s;
        }
        if (best < 0) break;
        bseq *q = &b->seq[best];
        int count = (int)q->prompt.n - q->read < budget ? (int)q->prompt.n - q->read : budget;
        if (q->score) count = 1;   /* a step gives the logits of each run's last row only */
        b->runs[n++] = (mt_gpt_run){best, q->read, count};
        for (int t = 0; t < count; t++) b->tokens[N++] = (int32_t)q->prompt.p[q->read + t];
        budget -= count;
    }
    if (!n) return b->running;
    if (mt_gpt_paged_step(b->paged, b->runs, n, b->tokens, b->logits, e)) {
        for (int s = 0; s < b->o.max_seqs; s++)
            if (b->seq[s].used) {
                if (!b->seq[s].out->why) b->seq[s].out->why = "abort";
                leave(b, s);
            }
        return -1;
    }
    /* each run that chooses a token this step (decoding, or at the end of its prompt with tokens to make):
     * its choice and its alternatives, the runs shared among the threads (each sequence draws from its own
     * stream: the same choices in any order) */
#pragma omp parallel for schedule(dynamic, 1) if (n > 1)
    for (int u = 0; u < n; u++) {
        bseq *q = &b->seq[b->runs[u].seq];
        mt_gen_seq *o = q->out;
        b->pick[u] = -1;
        if ((q->read < (int)q->prompt.n && q->read + b->runs[u].count < (int)q->prompt.n) || !q->new_max) continue;
        top(b, q, u, (q->score ? (int)q->prompt.n - 1 : 0) + (int)o->out.n);
        b->pick_lp[u] = NAN;
        b->pick[u] = mt_sample_next(&b->samplers[omp_get_thread_num()], b->logits + (size_t)u * b->Vp, &q->sampling,
                                    o->out.p, o->out.n, &q->rng, q->logprobs ? &b->pick_lp[u] : NULL);
    }
    for (int u = 0; u < n; u++) {
        int s = b->runs[u].seq;
        bseq *q = &b->seq[s];
        mt_gen_seq *o = q->out;
        if (q->read < (int)q->prompt.n) {
            q->read += b->runs[u].count;
            if (q->read < (int)q->prompt.n) {   /* more of its prompt to read */
                if (q->score) {
                    o->prompt_logprob[q->read - 1] = mt_logprob(b->logits + (size_t)u * b->Vp, b->V,
                                                                (int32_t)q->prompt.p[q->read]);
                    top(b, q, u, q->read - 1);
                }
                continue;
            }
            if (!q->new_max) {   /* scored only */
                o->why = "length";
                if (q->fn) q->fn(q->arg, q->tag, o);
                leave(b, s);
                continue;
            }
        }
        int32_t id = b->pick[u];
        mt_gen_seq_append(&q->stops, b->bpe, b->eod, o, (uint32_t)id, b->pick_lp[u]);
        if (!o->why && o->out.n == (size_t)q->new_max) o->why = "length";
        if (q->fn && q->fn(q->arg, q->tag, o) && !o->why) o->why = "abort";
        if (o->why) leave(b, s);
        else q->next = id;
    }
    return b->running;
}
