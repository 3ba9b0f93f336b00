/* err.c: error values, program name, fatal exit with cleanup, checked allocation. */
#include "util/err.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *progname = "mt";
static void (*die_hooks[8])(void);
static int n_die_hooks;
static void (*die_report)(const char *msg);

int mt_err_set(mt_err *e, const char *fmt, ...)
{
    if (!e) return -1;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->msg, sizeof e->msg, fmt, ap);
    va_end(ap);
    return -1;
}

int mt_err_sys(mt_err *e, const char *fmt, ...)
{
    int saved = errno;
    if (!e) return -1;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->msg, sizeof e->msg, fmt, ap);
    va_end(ap);
    size_t n = strlen(e->msg);
    snprintf(e->msg + n, sizeof e->msg - n, ": %s", strerror(saved));
    return -1;
}

int mt_err_prefix(mt_err *e, const char *fmt, ...)
{
    if (!e) return -1;
    char old[sizeof e->msg];
    memcpy(old, e->msg, sizeof old);
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(e->msg, sizeof e->msg, fmt, ap);
    va_end(ap);
    if (n >= 0 && (size_t)n + 2 < sizeof e->msg) {
        memcpy(e->msg + n, ": ", 2);
        size_t room = sizeof e->msg - (size_t)n - 2;
        size_t len = strnlen(old, room - 1);
        memcpy(e->msg + n + 2, old, len);
        e->msg[n + 2 + len] = 0;
    }
    return -1;
}

void mt_set_progname(const char *argv0)
{
    const char *s = strrchr(argv0, '/');
    progname = s ? s + 1 : argv0;
}

const char *mt_progname(void) { return progname; }

void mt_at_die(void (*fn)(void))
{
    for (int i = 0; i < n_die_hooks; i++)
        if (die_hooks[i] == fn) return;
    if (n_die_hooks < (int)(sizeof die_hooks / sizeof die_hooks[0])) die_hooks[n_die_hooks++] = fn;
}

static void run_die_hooks(void)
{
    for (int i = n_die_hooks - 1; i >= 0; i--) die_hooks[i]();
}

void mt_set_die_report(void (*fn)(const char *msg)) { die_report = fn; }

void mt_die(const char *fmt, ...)
{
    char msg[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fflush(stdout);
    if (die_report) {
        run_die_hooks();
        die_report(msg);   /* does not return */
    } else {
        fprintf(stderr, "%s: %s\n", progname, msg);
        run_die_hooks();
    }
    exit(1);
}

void mt_die_err(const mt_err *e) { mt_die("%s", e->msg); }

void mt_warn(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "%s: warning: ", progname);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

static void oom(size_t n)
{
    if (die_report) mt_die("out of memory allocating %zu bytes", n);   /* the job's ranks end together */
    fprintf(stderr, "%s: out of memory allocating %zu bytes\n", progname, n);
    run_die_hooks();
    abort();
}

void *mt_xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p) oom(n);
    return p;
}

void *mt_xcalloc(size_t n, size_t size)
{
    void *p = calloc(n ? n : 1, size ? size : 1);
    if (!p) oom(n * size);
    return p;
}

void *mt_xrealloc(void *p, size_t n)
{
    void *q = realloc(p, n ? n : 1);
    if (!q) oom(n);
    return q;
}

char *mt_xstrdup(const char *s)
{
    size_t n = strlen(s) + 1;
    char *p = mt_xmalloc(n);
    memcpy(p, s, n);
    return p;
}
