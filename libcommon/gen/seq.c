/* seq.c: a continuation's text and its stop strings (seq.h). */
#include "gen/seq.h"

#include <stdlib.h>
#include <string.h>

#include "util/err.h"

void mt_gen_stops_init(mt_gen_stops *st, const mt_gen_opts *o)
{
    *st = (mt_gen_stops){0};
    st->s = mt_xcalloc((size_t)o->n_stops + 1, sizeof *st->s);
    st->len = mt_xcalloc((size_t)o->n_stops + 1, sizeof *st->len);
    for (int i = -1; i < o->n_stops; i++) {
        const char *t = i < 0 ? o->stop : o->stops[i];
        if (!t || !*t) continue;
        st->s[st->n] = t;
        st->len[st->n] = strlen(t);
        if (st->len[st->n] > st->hold) st->hold = st->len[st->n];
        st->n++;
    }
}

void mt_gen_stops_free(mt_gen_stops *st)
{
    free(st->s);
    free(st->len);
    *st = (mt_gen_stops){0};
}

void mt_gen_seq_append(const mt_gen_stops *st, const mt_bpe *bpe, int64_t eod, mt_gen_seq *s, uint32_t id, double lp)
{
    s->logprob[s->out.n] = lp;
    mt_ids_push(&s->out, id);
    if ((int64_t)id == eod) {
        s->why = "eod";
        return;
    }
    size_t n;
    const char *b = mt_bpe_token_bytes(bpe, id, &n);
    size_t from = s->text.n, hold = st->hold;
    if (b) mt_buf_append(&s->text, b, n);
    char *first = NULL;   /* the earliest match of any stop string */
    for (int i = 0; i < st->n; i++) {
        size_t len = st->len[i];
        size_t look = from >= len ? from - len + 1 : 0;   /* a match can start in the held-back tail */
        char *hit = memmem(s->text.p + look, s->text.n - look, st->s[i], len);
        if (hit && (!first || hit < first)) first = hit;
    }
    if (first) {
        s->text.n = (size_t)(first - s->text.p);
        s->why = "stop";
        return;
    }
    if (s->text.n > hold) s->safe = s->text.n - (hold ? hold - 1 : 0);
}
