/* jsonfile.c: JSON documents from regular files only (jsonfile.h). */
#include "io/jsonfile.h"

#include <errno.h>
#include <stdio.h>

#include "io/fsutil.h"

json_t *mt_json_load_regular(const char *path, size_t flags, mt_err *e)
{
    FILE *f = mt_fopen_regular(path, e);
    if (!f) return NULL;
    json_error_t je;
    json_t *o = json_loadf(f, flags, &je);
    int failed = ferror(f);
    fclose(f);
    if (failed) {
        json_decref(o);
        errno = EIO;
        mt_err_sys(e, "%s: read failed", path);
        return NULL;
    }
    if (!o) mt_err_set(e, "%s: line %d, column %d: %s", path, je.line, je.column, je.text);
    return o;
}
