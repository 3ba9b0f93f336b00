/* atomic.h: output files that appear under their final name only when complete.
 *
 * mt_out_open() creates "<dir>/.<name>.tmp.<pid>.<n>" beside the final path; writes go through a
 * FILE*; mt_out_commit() flushes, fsyncs, renames onto the final name and fsyncs the directory;
 * mt_out_abort() removes the temp file. Temp files still open when the program dies (mt_die, SIGINT,
 * SIGTERM, SIGHUP, SIGPIPE) are removed, so nothing half-written is ever left under a final name.
 */
#ifndef MT_IO_ATOMIC_H
#define MT_IO_ATOMIC_H

#include <stdbool.h>
#include <stdio.h>

#include "util/err.h"

typedef struct mt_out {
    char *path;  /* final name */
    char *tmp;   /* temp name while open */
    FILE *fp;
    int slot;    /* index in the cleanup registry */
} mt_out;

int mt_out_open(mt_out *o, const char *path, mt_err *e);
/* Writes n bytes; on failure (ENOSPC, EIO) returns -1 with the file named. */
int mt_out_write(mt_out *o, const void *p, size_t n, mt_err *e);
int mt_out_commit(mt_out *o, mt_err *e);
void mt_out_abort(mt_out *o);

/* Installs handlers that remove open temp files and re-raise on SIGINT/SIGTERM/SIGHUP/SIGPIPE. */
void mt_out_install_signal_cleanup(void);

/* Writes a whole buffer to a file descriptor (stdout), retrying on EINTR and short writes. */
int mt_write_fd(int fd, const void *p, size_t n, const char *name, mt_err *e);

#endif
