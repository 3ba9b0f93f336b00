/* mapfile.h: read-only memory map of a whole file (for .bin/.idx/.npy inputs). */
#ifndef MT_IO_MAPFILE_H
#define MT_IO_MAPFILE_H

#include <stddef.h>

#include "util/err.h"

typedef struct mt_map {
    const unsigned char *data; /* NULL for an empty file */
    size_t size;
} mt_map;

int mt_map_open(mt_map *m, const char *path, mt_err *e);
void mt_map_close(mt_map *m);

#endif
