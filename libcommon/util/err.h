/* err.h: error values and reporting.
 *
 * Library functions never exit: they return -1 and fill an mt_err with a one-line message that names
 * the file and line/offset ("vocab.json: line 3: ..."). Only cmd/ decides to print and exit, through
 * mt_die(), which prints "<program>: <message>", removes half-written outputs (see io/atomic.h) and
 * exits with status 1.
 */
#ifndef MT_UTIL_ERR_H
#define MT_UTIL_ERR_H

#include <stdarg.h>
#include <stddef.h>

#define MT_PRINTF(a, b) __attribute__((format(printf, a, b)))
#define MT_NORETURN _Noreturn

/* The error value itself (struct mt_err, a message buffer) is in kernels/mt_base.h, shared with kernels/. */
#include "mt_base.h"

/* Sets e->msg (e may be NULL) and returns -1, so that "return mt_err_set(e, ...)" reads naturally. */
int mt_err_set(mt_err *e, const char *fmt, ...) MT_PRINTF(2, 3);
/* As mt_err_set, appending ": <strerror(errno)>". */
int mt_err_sys(mt_err *e, const char *fmt, ...) MT_PRINTF(2, 3);
/* Prepends context: "<context>: <old message>". Returns -1. */
int mt_err_prefix(mt_err *e, const char *fmt, ...) MT_PRINTF(2, 3);

/* Program name used in messages; set once from argv[0] in main(). */
void mt_set_progname(const char *argv0);
const char *mt_progname(void);

/* "<program>: <message>" on stderr, cleanup, exit(1). */
MT_NORETURN void mt_die(const char *fmt, ...) MT_PRINTF(1, 2);
MT_NORETURN void mt_die_err(const mt_err *e);
/* "<program>: warning: <message>" on stderr. */
void mt_warn(const char *fmt, ...) MT_PRINTF(1, 2);

/* Called by mt_die() and on fatal signals before exiting; io/atomic.c registers its temp-file cleanup. */
void mt_at_die(void (*fn)(void));
/* Replaces mt_die()'s printing and exit: after the hooks above, fn gets the message (without the program
 * name) and must not return. A job of several ranks decides there which rank prints and how the ranks end
 * (comm/bootstrap.h, mt_boot_fail). NULL restores the plain behaviour. */
void mt_set_die_report(void (*fn)(const char *msg));

/* Allocation that aborts with a message on failure (out of memory is not an input error). */
void *mt_xmalloc(size_t n);
void *mt_xcalloc(size_t n, size_t size);
void *mt_xrealloc(void *p, size_t n);
char *mt_xstrdup(const char *s);

#endif
