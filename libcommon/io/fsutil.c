/* fsutil.c: small file-system helpers (see fsutil.h). */
#include "io/fsutil.h"

#include <errno.h>
#include <stdlib.h>
#include <sys/stat.h>

static int mkdir_one(const char *p, mt_err *e)
{
    if (mkdir(p, 0755) == 0) return 0;
    if (errno != EEXIST) return mt_err_sys(e, "cannot create directory %s", p);
    struct stat st;
    if (stat(p, &st) == 0 && S_ISDIR(st.st_mode)) return 0;
    return mt_err_set(e, "cannot create directory %s: it exists and is not a directory", p);
}

int mt_mkdir_p(const char *dir, mt_err *e)
{
    char *p = mt_xstrdup(dir);
    int rc = 0;
    for (char *s = p; *s && rc == 0; s++) {
        if (*s != '/' || s == p) continue;
        *s = 0;
        rc = mkdir_one(p, e);
        *s = '/';
    }
    if (rc == 0) rc = mkdir_one(p, e);
    free(p);
    return rc;
}
