/* seq.h: a continuation growing token by token, shared by gen/engine.h and gen/batch.h: each new id's bytes
 * appended to its text, the sequence ended at the end-of-document token or before the earliest stop string,
 * and the part of the text that no later token can cut back (a stop string may still start in the last
 * L - 1 bytes, L the longest). */
#ifndef MT_GEN_SEQ_H
#define MT_GEN_SEQ_H

#include <stddef.h>
#include <stdint.h>

#include "gen/engine.h"
#include "tok/bpe.h"

/* The non-empty stop strings of a request (o's stop and stops; pointers into them, which must outlive it). */
typedef struct mt_gen_stops {
    const char **s;
    size_t *len;
    int n;
    size_t hold;   /* the longest one's length */
} mt_gen_stops;

void mt_gen_stops_init(mt_gen_stops *st, const mt_gen_opts *o);
void mt_gen_stops_free(mt_gen_stops *st);

/* Adds generated id (its log-probability lp) to s, whose logprob has room for it: why "eod" at the end of
 * document (eod; -1: none), "stop" at the earliest stop string (the text cut before it), else s->safe moves
 * up to the text no stop string can take back. bpe gives the id's bytes. */
void mt_gen_seq_append(const mt_gen_stops *st, const mt_bpe *bpe, int64_t eod, mt_gen_seq *s, uint32_t id, double lp);

#endif
