/* fileid.c: the identity of a file's contents (fileid.h). */
#include "io/fileid.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/err.h"
#include "util/fnv.h"

/* h continued over n bytes of fd from offset off; 0 or -1 (errno set) */
static int hash_range(int fd, off_t off, size_t n, unsigned char *buf, size_t cap, uint64_t *h)
{
    while (n > 0) {
        ssize_t k = pread(fd, buf, n < cap ? n : cap, off);
        if (k < 0 && errno == EINTR) continue;
        if (k < 0) return -1;
        if (k == 0) {   /* shorter than fstat said: changed while read */
            errno = EIO;
            return -1;
        }
        *h = mt_fnv1a(*h, buf, (size_t)k);
        off += k;
        n -= (size_t)k;
    }
    return 0;
}

void mt_file_identity(const char *path, char *out, size_t cap)
{
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
        if (errno == ENOENT) snprintf(out, cap, "absent");
        else snprintf(out, cap, "unreadable (%s)", strerror(errno));
        return;
    }
    struct stat st;
    if (fstat(fd, &st) || !S_ISREG(st.st_mode)) {
        snprintf(out, cap, "not a regular file");
        close(fd);
        return;
    }
    size_t cap_buf = 1u << 16;
    unsigned char *buf = mt_xmalloc(cap_buf);
    uint64_t h = MT_FNV1A_INIT, size = (uint64_t)st.st_size;
    int rc = size <= MT_FILEID_WHOLE ? hash_range(fd, 0, (size_t)size, buf, cap_buf, &h)
                                     : hash_range(fd, 0, MT_FILEID_END, buf, cap_buf, &h) ||
                                           hash_range(fd, (off_t)(size - MT_FILEID_END), MT_FILEID_END, buf, cap_buf, &h);
    if (rc) snprintf(out, cap, "unreadable (%s)", strerror(errno));
    else snprintf(out, cap, "%llu bytes, FNV-1a %016llx", (unsigned long long)size, (unsigned long long)h);
    free(buf);
    close(fd);
}
