/* fsutil.c: small file-system helpers (see fsutil.h). */
#include "io/fsutil.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io/atomic.h"

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

char *mt_path_join(const char *a, const char *b)
{
    size_t n = strlen(a) + strlen(b) + 2;
    char *p = mt_xmalloc(n);
    snprintf(p, n, "%s/%s", a, b);
    return p;
}

int mt_copy_file(const char *src, const char *dst, mt_err *e)
{
    FILE *in = fopen(src, "rb");
    if (!in) return mt_err_sys(e, "%s", src);
    mt_out o;
    if (mt_out_open(&o, dst, e)) {
        fclose(in);
        return -1;
    }
    char buf[1 << 16];
    size_t n;
    int rc = 0;
    while (!rc && (n = fread(buf, 1, sizeof buf, in)) > 0) rc = mt_out_write(&o, buf, n, e);
    if (!rc && ferror(in)) rc = mt_err_sys(e, "%s: read", src);
    fclose(in);
    if (rc) {
        mt_out_abort(&o);
        return -1;
    }
    return mt_out_commit(&o, e);
}

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    return remove(path) && errno != ENOENT ? -1 : 0;
}

int mt_rm_rf(const char *path)
{
    struct stat st;
    if (lstat(path, &st) && errno == ENOENT) return 0;
    return nftw(path, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

int mt_open_regular(const char *path, mt_err *e)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) {
        int saved = errno;   /* callers tell ENOENT apart */
        mt_err_sys(e, "%s", path);
        errno = saved;
        return -1;
    }
    struct stat st;
    if (fstat(fd, &st)) {
        mt_err_sys(e, "%s", path);
        close(fd);
        return -1;
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        errno = EINVAL;
        return mt_err_set(e, "%s: not a regular file", path);
    }
    int fl = fcntl(fd, F_GETFL);
    if (fl >= 0) fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
    return fd;
}

FILE *mt_fopen_regular(const char *path, mt_err *e)
{
    int fd = mt_open_regular(path, e);
    if (fd < 0) return NULL;
    FILE *f = fdopen(fd, "rb");
    if (!f) {
        mt_err_sys(e, "%s", path);
        close(fd);
    }
    return f;
}
