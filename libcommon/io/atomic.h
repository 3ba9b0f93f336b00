/* atomic.h: output files that appear under their final name only when complete.
 *
 * mt_out_open() creates "<dir>/.<name>.tmp.<tag>.<pid>.<n>" (io/tmpname) beside the final path;
 * writes go through a FILE*; mt_out_commit() flushes, fsyncs, renames onto the final name and fsyncs
 * the directory; mt_out_abort() removes the temp file. Temp files still open when the program dies
 * (mt_die, SIGINT, SIGTERM, SIGHUP, SIGPIPE) are removed, so nothing half-written is ever left under a
 * final name.
 */
#ifndef MT_IO_ATOMIC_H
#define MT_IO_ATOMIC_H

#include <stdbool.h>
#include <stdio.h>

#include "io/tmpname.h"
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
/* The whole file path holding text (a string), written as above: open, write, commit. */
int mt_out_write_text(const char *path, const char *text, mt_err *e);
void mt_out_abort(mt_out *o);

/* Temp files of a process killed with SIGKILL (or by the OOM killer) outlive it. mt_out_open sweeps
 * the directory it writes in, once per process: temporaries of mt_out_open's exact pattern that are
 * stale (mt_tmp_stale: made on this host and PID namespace, or untagged, and their PID names no live
 * process) are removed. Temporaries of live processes, of this one, of PIDs owned by other users and of
 * other hosts are left alone. */
void mt_out_sweep_dir(const char *dir);
/* Removes the entries of dir that parse (mt_tmp_parse or mt_tmp_parse_save) names as stale temporaries
 * (mt_tmp_stale with self): regular files, and directories with their contents when dirs. Returns how
 * many. */
int mt_remove_stale(const char *dir, int (*parse)(const char *name, mt_tmp_owner *o), bool self, bool dirs);

/* Installs handlers that remove open temp files and re-raise on SIGINT/SIGTERM/SIGHUP/SIGPIPE. */
void mt_out_install_signal_cleanup(void);

/* Writes a whole buffer to a file descriptor (stdout), retrying on EINTR and short writes. */
int mt_write_fd(int fd, const void *p, size_t n, const char *name, mt_err *e);

#endif
