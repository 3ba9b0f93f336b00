/* tmpname.c: making and parsing the names of temporary outputs (see tmpname.h). */
#include "io/tmpname.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/err.h"
#include "util/fnv.h"

static char tag[MT_TMP_TAG_LEN + 1];
static pthread_once_t tag_once = PTHREAD_ONCE_INIT;

static void make_tag(void)
{
    char host[256] = "";
    if (gethostname(host, sizeof host - 1)) host[0] = 0;
    host[sizeof host - 1] = 0;
    struct stat st;
    unsigned long long ns = stat("/proc/self/ns/pid", &st) ? 0 : (unsigned long long)st.st_ino;
    uint64_t h = mt_fnv1a(MT_FNV1A_INIT, host, strlen(host) + 1);
    h = mt_fnv1a(h, &ns, sizeof ns);
    for (int i = 0; i < MT_TMP_TAG_LEN; i++, h /= 26) tag[i] = (char)('a' + h % 26);
    tag[MT_TMP_TAG_LEN] = 0;
}

const char *mt_tmp_tag(void)
{
    pthread_once(&tag_once, make_tag);
    return tag;
}

char *mt_tmp_path(const char *dir, const char *base, unsigned n)
{
    size_t len = strlen(dir) + strlen(base) + MT_TMP_TAG_LEN + 64;
    char *p = mt_xmalloc(len);
    snprintf(p, len, "%s/.%s.tmp.%s.%ld.%u", dir, base, mt_tmp_tag(), (long)getpid(), n);
    return p;
}

char *mt_tmp_save_path(const char *final, const char *more)
{
    size_t len = strlen(final) + strlen(more) + MT_TMP_TAG_LEN + 64;
    char *p = mt_xmalloc(len);
    snprintf(p, len, "%s.tmp-%s-%ld%s", final, mt_tmp_tag(), (long)getpid(), more);
    return p;
}

/* Digits s[0..) up to stop (or the end when stop is 0): their value, or -1 (none, or too many). */
static long digits(const char *s, char stop, const char **end)
{
    long v = 0;
    const char *p = s;
    for (; *p >= '0' && *p <= '9'; p++) {
        if (p - s >= 18) return -1;
        v = v * 10 + (*p - '0');
    }
    if (p == s || *p != stop) return -1;
    *end = p;
    return v;
}

/* A tag at s followed by sep: copied into o->tag, *after set past sep; else false. */
static bool take_tag(const char *s, char sep, mt_tmp_owner *o, const char **after)
{
    for (int i = 0; i < MT_TMP_TAG_LEN; i++)
        if (s[i] < 'a' || s[i] > 'z') return false;
    if (s[MT_TMP_TAG_LEN] != sep) return false;
    memcpy(o->tag, s, MT_TMP_TAG_LEN);
    o->tag[MT_TMP_TAG_LEN] = 0;
    *after = s + MT_TMP_TAG_LEN + 1;
    return true;
}

int mt_tmp_parse(const char *name, mt_tmp_owner *o)
{
    if (name[0] != '.') return -1;
    /* the last ".tmp." with a non-empty base before it and "[<tag>.]<pid>.<n>" after it */
    for (const char *t = strstr(name + 1, ".tmp."); t; t = strstr(t + 1, ".tmp.")) {
        const char *s = t + 5, *end;
        if (t == name + 1) continue;
        mt_tmp_owner w = {"", 0};
        if (!take_tag(s, '.', &w, &s)) w.tag[0] = 0;
        long pid = digits(s, '.', &end);
        if (pid <= 0 || digits(end + 1, 0, &end) < 0) continue;
        w.pid = pid;
        *o = w;
        return 0;
    }
    return -1;
}

int mt_tmp_parse_save(const char *name, mt_tmp_owner *o)
{
    const char *t = strstr(name, ".tmp-");
    if (!t || (strncmp(name, "iter_", 5) && strncmp(name, "release", 7))) return -1;
    const char *s = t + 5;
    mt_tmp_owner w = {"", 0};
    if (!take_tag(s, '-', &w, &s)) w.tag[0] = 0;
    char *end;
    long pid = strtol(s, &end, 10);
    if (end == s || *s < '0' || *s > '9' || pid <= 0) return -1;
    w.pid = pid;
    *o = w;
    return 0;
}

bool mt_pid_dead(long pid) { return pid > 0 && kill((pid_t)pid, 0) && errno == ESRCH; }

bool mt_tmp_local(const mt_tmp_owner *o) { return !o->tag[0] || !strcmp(o->tag, mt_tmp_tag()); }

bool mt_tmp_stale(const mt_tmp_owner *o, bool self)
{
    if (!mt_tmp_local(o)) return false;
    return o->pid == (long)getpid() ? self : mt_pid_dead(o->pid);
}
