/* progress.h: progress reporting on stderr for long work.
 *
 * Prints Megatron's line "Processed N documents (X docs/s, Y MB/s)." (plus ETA when the total size is
 * known), redrawn in place at most a few times a second. Silent when stderr is not a TTY or when quiet;
 * `force` (e.g. an explicit --log-interval) prints one line per interval even when not a TTY.
 */
#ifndef MT_UTIL_PROGRESS_H
#define MT_UTIL_PROGRESS_H

#include <stdbool.h>
#include <stdint.h>

typedef struct mt_progress {
    bool tty;        /* redraw in place with \r */
    bool enabled;    /* anything printed at all */
    double t0, last; /* start and last print, seconds (mt_now) */
    double min_gap;  /* seconds between prints */
    uint64_t every;  /* forced mode: print when docs crosses a multiple of this (0 = time based) */
    uint64_t next;   /* next docs count that triggers a forced print */
    const char *what; /* "documents" */
    bool drawn;
} mt_progress;

/* log_interval > 0 forces one line per that many documents, TTY or not (Megatron's --log-interval). */
void mt_progress_init(mt_progress *p, const char *what, bool quiet, uint64_t log_interval);
/* bytes: input bytes consumed so far; total: total input bytes or 0 if unknown. */
void mt_progress_update(mt_progress *p, uint64_t docs, uint64_t bytes, uint64_t total);
/* Final line (TTY only, or forced mode), ends the in-place line. */
void mt_progress_done(mt_progress *p, uint64_t docs, uint64_t bytes);

/* Monotonic clock in seconds. */
double mt_now(void);

#endif
