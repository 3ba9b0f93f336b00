/* mapfile.c: mmap a whole file read-only (see mapfile.h). */
#include "io/mapfile.h"

#include "io/fsutil.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

int mt_map_open(mt_map *m, const char *path, mt_err *e)
{
    m->data = NULL;
    m->size = 0;
    int fd = mt_open_regular(path, e);   /* a FIFO is refused, not waited on */
    if (fd < 0) return -1;
    struct stat st;
    if (fstat(fd, &st)) {
        mt_err_sys(e, "%s", path);
        close(fd);
        return -1;
    }
    if (st.st_size > 0) {
        void *p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
        if (p == MAP_FAILED) {
            mt_err_sys(e, "%s: mmap", path);
            close(fd);
            return -1;
        }
        m->data = p;
        m->size = (size_t)st.st_size;
    }
    close(fd);
    return 0;
}

void mt_map_close(mt_map *m)
{
    if (m->data) munmap((void *)m->data, m->size);
    m->data = NULL;
    m->size = 0;
}
