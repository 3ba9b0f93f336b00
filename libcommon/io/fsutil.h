/* fsutil.h: small file-system helpers shared by the writers of directories (checkpoints, TensorBoard
 * event files, the dataset index cache). */
#ifndef MT_IO_FSUTIL_H
#define MT_IO_FSUTIL_H

#include "util/err.h"

/* Creates dir and any missing parents (mode 0755), like `mkdir -p`. A directory that already exists is
 * fine; anything else already there under that name is an error. Returns 0, or -1 with e naming the
 * path that could not be created. */
int mt_mkdir_p(const char *dir, mt_err *e);

#endif
