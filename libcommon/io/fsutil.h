/* fsutil.h: small file-system helpers shared by the writers of directories (checkpoints, TensorBoard
 * event files, the dataset index cache). */
#ifndef MT_IO_FSUTIL_H
#define MT_IO_FSUTIL_H

#include <stdio.h>

#include "util/err.h"

/* Creates dir and any missing parents (mode 0755), like `mkdir -p`. A directory that already exists is
 * fine; anything else already there under that name is an error. Returns 0, or -1 with e naming the
 * path that could not be created. */
int mt_mkdir_p(const char *dir, mt_err *e);

/* Copies the regular file src to dst through io/atomic (dst appears only when complete). 0, or -1 with e
 * naming the file. */
int mt_copy_file(const char *src, const char *dst, mt_err *e);

/* Opens path for reading only if it is a regular file: a FIFO, device or directory is refused at once,
 * "path: not a regular file", without the open waiting for a FIFO's writer (O_NONBLOCK, cleared once the
 * file is known to be regular). The descriptor (O_CLOEXEC), or -1 with e set; errno ENOENT when absent. */
int mt_open_regular(const char *path, mt_err *e);
/* fopen(path, "rb") of a regular file, as mt_open_regular; NULL with e set. */
FILE *mt_fopen_regular(const char *path, mt_err *e);

/* "a/b", malloc'ed. */
char *mt_path_join(const char *a, const char *b);

/* Removes path and everything under it (no error when absent). 0, or -1. */
int mt_rm_rf(const char *path);

#endif
