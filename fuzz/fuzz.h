/* fuzz.h: what the libFuzzer targets of fuzz/ share (README.md): a scratch directory of their own for
 * parsers that read files, writing an input (or part of one) there, and cutting one input into the parts
 * of a several-file format at the separator line FZ_SEP. Header-only: each target is one file. */
#ifndef MT_FUZZ_H
#define MT_FUZZ_H

#include <fcntl.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/err.h"

/* Separates the files of a several-file input: "config.json\n--8<--\nmodel.safetensors". */
#define FZ_SEP "\n--8<--\n"
#define FZ_SEP_LEN 8

/* The process's scratch directory ($TMPDIR/mt-fuzz.XXXXXX), made at the first call, removed at exit. */
static char fz_dir_buf[4096];
static inline void fz_rm_dir(void)
{
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", fz_dir_buf);
    if (system(cmd)) {}
}
static inline const char *fz_dir(void)
{
    if (!fz_dir_buf[0]) {
        const char *t = getenv("TMPDIR");
        snprintf(fz_dir_buf, sizeof fz_dir_buf, "%s/mt-fuzz.XXXXXX", t && *t ? t : "/tmp");
        if (!mkdtemp(fz_dir_buf)) { perror("mkdtemp"); abort(); }
        atexit(fz_rm_dir);
    }
    return fz_dir_buf;
}

/* "<scratch>/<name>" in a static buffer of four (so that a call may hold several). */
static inline const char *fz_path(const char *name)
{
    static char bufs[4][4200];
    static int next;
    char *b = bufs[next++ % 4];
    snprintf(b, sizeof bufs[0], "%s/%s", fz_dir(), name);
    return b;
}

/* Writes data to <scratch>/<name> (directories on the way made); returns its path. */
static inline const char *fz_write(const char *name, const void *data, size_t n)
{
    const char *p = fz_path(name);
    char dir[4200];
    snprintf(dir, sizeof dir, "%s", p);
    for (char *s = dir + strlen(fz_dir()) + 1; (s = strchr(s, '/')); s++) {
        *s = 0;
        mkdir(dir, 0755);
        *s = '/';
    }
    int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) { perror(p); abort(); }
    for (size_t off = 0; off < n;) {
        ssize_t w = write(fd, (const char *)data + off, n - off);
        if (w <= 0) { perror(p); abort(); }
        off += (size_t)w;
    }
    close(fd);
    return p;
}

typedef struct fz_part {
    const uint8_t *p;
    size_t n;
} fz_part;

/* Cuts data at the first n-1 separators into n parts (missing parts are empty). */
static inline void fz_split(const uint8_t *data, size_t size, fz_part *parts, int n)
{
    for (int i = 0; i < n; i++) {
        parts[i].p = data;
        if (i == n - 1) { parts[i].n = size; break; }
        const uint8_t *s = size >= FZ_SEP_LEN ? memmem(data, size, FZ_SEP, FZ_SEP_LEN) : NULL;
        size_t len = s ? (size_t)(s - data) : size;
        parts[i].n = len;
        size_t skip = s ? len + FZ_SEP_LEN : size;
        data += skip;
        size -= skip;
    }
}

/* Where an input is refused: with MT_FUZZ_VERBOSE set, prints why (to check that seeds go deep). 0. */
static inline int fz_refused(const mt_err *e)
{
    if (getenv("MT_FUZZ_VERBOSE")) fprintf(stderr, "refused: %s\n", e->msg);
    return 0;
}

#endif
