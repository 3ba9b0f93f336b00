/* tmpname.h: the names of mt's temporary outputs, made and parsed in one place.
 *
 * A temporary names the process that writes it: its PID and a tag of its host and PID namespace (8
 * lowercase letters, a hash of the host name and of the inode of /proc/self/ns/pid), because on a shared
 * file system a PID says nothing about a process of another node or container. Two forms:
 *   ".<base>.tmp.<tag>.<pid>.<n>"     files (io/atomic) and HF directories being written beside <base>
 *   "<final>.tmp-<tag>-<pid>[<more>]" checkpoint save directories (iter_NNNNNNN, release) and probes
 * Names of earlier versions, without the tag (".<base>.tmp.<pid>.<n>", "<final>.tmp-<pid>[<more>]"), are
 * still recognized; they are taken to be of this host, as they always were.
 * A temporary is stale when it is of this host and namespace (or untagged) and its PID is dead; those of
 * other hosts are never removed by mt (a user may remove them).
 */
#ifndef MT_IO_TMPNAME_H
#define MT_IO_TMPNAME_H

#include <stdbool.h>

#define MT_TMP_TAG_LEN 8

typedef struct mt_tmp_owner {
    char tag[MT_TMP_TAG_LEN + 1]; /* "" for a name of the old form (no tag) */
    long pid;
} mt_tmp_owner;

/* This process's tag (computed once). */
const char *mt_tmp_tag(void);
/* "<dir>/.<base>.tmp.<tag>.<pid>.<n>" of this process, malloc'ed. */
char *mt_tmp_path(const char *dir, const char *base, unsigned n);
/* "<final>.tmp-<tag>-<pid><more>" of this process (more may be ""), malloc'ed. */
char *mt_tmp_save_path(const char *final, const char *more);

/* Parse a directory entry's name: 0 with *o filled when it is a temporary of the form above (either
 * version), -1 otherwise. A save directory's name must start with "iter_" or "release" (or be a probe). */
int mt_tmp_parse(const char *name, mt_tmp_owner *o);
int mt_tmp_parse_save(const char *name, mt_tmp_owner *o);

/* True when no process has this id (kill(pid, 0) fails with ESRCH). */
bool mt_pid_dead(long pid);
/* True when o was made on this host and namespace (or has no tag). */
bool mt_tmp_local(const mt_tmp_owner *o);
/* True when the temporary may be removed: local, and its PID dead (or this process's, when self). */
bool mt_tmp_stale(const mt_tmp_owner *o, bool self);

#endif
