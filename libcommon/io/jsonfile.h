/* jsonfile.h: a JSON document read from a file (checkpoint metadata, Hugging Face config and index files,
 * vocab.json): only a regular file is read, so a FIFO or device under the expected name is an error at
 * once instead of a wait, and every error is one line naming the file (and the line and column of a
 * syntax error). */
#ifndef MT_IO_JSONFILE_H
#define MT_IO_JSONFILE_H

#include <jansson.h>
#include <stddef.h>

#include "util/err.h"

/* The document of path parsed with jansson's flags, or NULL with e set: "path: <system error>",
 * "path: not a regular file", or "path: line L, column C: <what>". errno is ENOENT when path is absent. */
json_t *mt_json_load_regular(const char *path, size_t flags, mt_err *e);

#endif
