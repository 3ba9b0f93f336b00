/* progress.c: rate/ETA progress line on stderr (see progress.h). */
#include "util/progress.h"

#include <stdio.h>
#include <time.h>
#include <unistd.h>

double mt_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void mt_progress_init(mt_progress *p, const char *what, bool quiet, uint64_t log_interval)
{
    p->tty = isatty(2);
    p->every = quiet ? 0 : log_interval;
    p->next = p->every;
    p->enabled = !quiet && (p->tty || p->every);
    p->t0 = p->last = mt_now();
    p->min_gap = 0.25;
    p->what = what;
    p->drawn = false;
}

static void draw(mt_progress *p, uint64_t docs, uint64_t bytes, uint64_t total, double now, bool final)
{
    double dt = now - p->t0;
    if (dt <= 0) dt = 1e-9;
    double mbs = (double)bytes / dt / 1048576.0;
    char eta[64] = "";
    if (total && bytes && bytes < total && !final) {
        double left = dt * (double)(total - bytes) / (double)bytes;
        snprintf(eta, sizeof eta, " %.0f%%, ETA %dm%02ds", 100.0 * (double)bytes / (double)total, (int)(left / 60),
                 (int)left % 60);
    }
    const char *end = p->tty && !p->every && !final ? "\r" : "\n";
    fprintf(stderr, "Processed %llu %s (%.1f docs/s, %.2f MB/s).%s%s%s", (unsigned long long)docs, p->what,
            (double)docs / dt, mbs, eta, p->tty && !p->every ? "\033[K" : "", end);
    fflush(stderr);
    p->drawn = !final && *end == '\r';
}

void mt_progress_update(mt_progress *p, uint64_t docs, uint64_t bytes, uint64_t total)
{
    if (!p->enabled) return;
    if (p->every) {
        /* One line per multiple of the interval, as Megatron prints them, even when the count
         * advances by a whole batch at a time; bytes are prorated. */
        double now = mt_now();
        for (; p->next <= docs; p->next += p->every)
            draw(p, p->next, (uint64_t)((double)bytes * (double)p->next / (double)docs), total, now, false);
        return;
    }
    double now = mt_now();
    if (now - p->last < p->min_gap) return;
    p->last = now;
    draw(p, docs, bytes, total, now, false);
}

void mt_progress_done(mt_progress *p, uint64_t docs, uint64_t bytes)
{
    if (!p->enabled) return;
    if (p->every && !p->drawn && docs % p->every == 0 && docs) return; /* last interval line already said it */
    draw(p, docs, bytes, 0, mt_now(), true);
}
