/* atomic.c: temp-file + fsync + rename outputs with cleanup on death (see atomic.h). */
#include "io/atomic.h"
#include "io/fsutil.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAX_OPEN 64

/* Temp names of open outputs; read from a signal handler, so plain fixed-size storage. */
static char *volatile open_tmp[MAX_OPEN];
static unsigned counter;

static void cleanup_all(void)
{
    for (int i = 0; i < MAX_OPEN; i++) {
        char *t = open_tmp[i];
        if (t) {
            unlink(t);
            open_tmp[i] = NULL;
        }
    }
}

static void on_signal(int sig)
{
    cleanup_all();
    signal(sig, SIG_DFL);
    raise(sig);
}

void mt_out_install_signal_cleanup(void)
{
    static const int sigs[] = {SIGINT, SIGTERM, SIGHUP, SIGPIPE};
    for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_signal;
        sigemptyset(&sa.sa_mask);
        sigaction(sigs[i], &sa, NULL);
    }
    mt_at_die(cleanup_all);
}

/* ---- temporaries of dead processes ---- */

int mt_remove_stale(const char *dir, int (*parse)(const char *name, mt_tmp_owner *o), bool self, bool dirs)
{
    DIR *d = opendir(dir);
    if (!d) return 0;
    int removed = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        mt_tmp_owner o;
        if (parse(de->d_name, &o) || !mt_tmp_stale(&o, self)) continue;
        struct stat st;
        if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW)) continue;
        size_t n = strlen(dir) + strlen(de->d_name) + 2;
        char *p = mt_xmalloc(n);
        snprintf(p, n, "%s/%s", dir, de->d_name);
        if (S_ISREG(st.st_mode) ? unlink(p) == 0 : S_ISDIR(st.st_mode) && dirs && mt_rm_rf(p) == 0)
            removed++;
        free(p);
    }
    closedir(d);
    return removed;
}

/* Directories already swept by this process (each is swept once: later temporaries there are ours). */
static pthread_mutex_t swept_lock = PTHREAD_MUTEX_INITIALIZER;
static char *swept[32];

void mt_out_sweep_dir(const char *dir)
{
    pthread_mutex_lock(&swept_lock);
    int i = 0;
    for (; i < 32 && swept[i]; i++)
        if (!strcmp(swept[i], dir)) break;
    if (i == 32 || !swept[i]) {
        mt_remove_stale(dir, mt_tmp_parse, false, false);
        if (i < 32) swept[i] = mt_xstrdup(dir);
    }
    pthread_mutex_unlock(&swept_lock);
}

int mt_out_open(mt_out *o, const char *path, mt_err *e)
{
    memset(o, 0, sizeof *o);
    mt_at_die(cleanup_all);
    char *d1 = mt_xstrdup(path), *d2 = mt_xstrdup(path);
    const char *dir = dirname(d1), *base = basename(d2);
    mt_out_sweep_dir(dir);
    char *tmp = mt_tmp_path(dir, base, __atomic_fetch_add(&counter, 1, __ATOMIC_RELAXED));
    free(d1);
    free(d2);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) {
        mt_err_sys(e, "cannot create output %s", path);
        free(tmp);
        return -1;
    }
    o->slot = -1;
    for (int i = 0; i < MAX_OPEN; i++) {
        char *expected = NULL;
        if (__atomic_compare_exchange_n(&open_tmp[i], &expected, tmp, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) {
            o->slot = i;
            break;
        }
    }
    o->fp = fdopen(fd, "wb");
    if (!o->fp) {
        mt_err_sys(e, "%s", tmp);
        close(fd);
        unlink(tmp);
        if (o->slot >= 0) open_tmp[o->slot] = NULL;
        free(tmp);
        return -1;
    }
    setvbuf(o->fp, NULL, _IOFBF, 1 << 20);
    o->path = mt_xstrdup(path);
    o->tmp = tmp;
    return 0;
}

int mt_out_write(mt_out *o, const void *p, size_t n, mt_err *e)
{
    if (n && fwrite(p, 1, n, o->fp) != n) return mt_err_sys(e, "%s: write failed", o->path);
    return 0;
}

static void release(mt_out *o)
{
    if (o->slot >= 0) open_tmp[o->slot] = NULL;
    free(o->tmp);
    free(o->path);
    o->tmp = o->path = NULL;
    o->fp = NULL;
}

int mt_out_commit(mt_out *o, mt_err *e)
{
    if (fflush(o->fp) || fsync(fileno(o->fp))) {
        mt_err_sys(e, "%s: write failed", o->path);
        fclose(o->fp);
        o->fp = NULL;
        mt_out_abort(o);
        return -1;
    }
    if (fclose(o->fp)) {
        o->fp = NULL;
        mt_err_sys(e, "%s: close failed", o->path);
        mt_out_abort(o);
        return -1;
    }
    o->fp = NULL;
    if (rename(o->tmp, o->path)) {
        mt_err_sys(e, "cannot rename %s to %s", o->tmp, o->path);
        mt_out_abort(o);
        return -1;
    }
    char *d = mt_xstrdup(o->path);
    int dfd = open(dirname(d), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
        fsync(dfd);
        close(dfd);
    }
    free(d);
    release(o);
    return 0;
}

void mt_out_abort(mt_out *o)
{
    if (!o->tmp) return;
    if (o->fp) fclose(o->fp);
    unlink(o->tmp);
    release(o);
}

int mt_write_fd(int fd, const void *p, size_t n, const char *name, mt_err *e)
{
    const char *c = p;
    while (n) {
        ssize_t k = write(fd, c, n);
        if (k < 0 && errno == EINTR) continue;
        if (k < 0) return mt_err_sys(e, "%s: write failed", name);
        c += k;
        n -= (size_t)k;
    }
    return 0;
}

int mt_out_write_text(const char *path, const char *text, mt_err *e)
{
    mt_out o;
    if (mt_out_open(&o, path, e)) return -1;
    if (mt_out_write(&o, text, strlen(text), e)) {
        mt_out_abort(&o);
        return -1;
    }
    return mt_out_commit(&o, e);
}
