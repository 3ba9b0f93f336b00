/* npy.h: numpy .npy files: a writer whose bytes equal numpy 1.24's np.save, and a validating reader.
 *
 * The writer emits format 1.0: "\x93NUMPY" 01 00, u16 header length, the dict literal
 * "{'descr': '<i4', 'fortran_order': False, 'shape': (R, 2), }" followed by numpy's 21-digit growth
 * padding and spaces up to a 64-byte boundary and '\n', then C-order little-endian data.
 * The reader parses the header (versions 1.0, 2.0, 3.0; never assumes its length), checks descr,
 * fortran_order, shape and that the data size matches the file size exactly, and returns a read-only
 * mmap'd view. Errors name the file and the byte offset of the problem.
 */
#ifndef MT_IO_NPY_H
#define MT_IO_NPY_H

#include <stddef.h>
#include <stdint.h>

#include "io/mapfile.h"
#include "util/err.h"

#define MT_NPY_MAXDIM 8

/* Formats the complete header (magic through '\n') into buf; returns its length (a multiple of 64),
 * or 0 if cap is too small. descr is numpy's string ("<i4", "<u4", "<i8", "<i2", "|u1", ...). */
size_t mt_npy_header(char *buf, size_t cap, const char *descr, const int64_t *shape, int ndim);

/* Item size for a descr string, 0 if unknown. */
int mt_npy_itemsize(const char *descr);

/* Writes header + nbytes of data to path atomically (temp file then rename). nbytes must equal
 * prod(shape) * itemsize. */
int mt_npy_write(const char *path, const char *descr, const int64_t *shape, int ndim, const void *data,
                 size_t nbytes, mt_err *e);

typedef struct mt_npy {
    mt_map map;
    char descr[16];
    int ndim;
    int64_t shape[MT_NPY_MAXDIM];
    int itemsize;
    int64_t count;       /* prod(shape) */
    size_t data_offset;  /* where the data starts */
    const void *data;    /* map.data + data_offset (NULL when count == 0) */
} mt_npy;

/* Maps and validates path. */
int mt_npy_open(mt_npy *v, const char *path, mt_err *e);
void mt_npy_close(mt_npy *v);

/* Checks an opened file has this descr and ndim, and (for each dim with want[k] >= 0) that size. */
int mt_npy_expect(const mt_npy *v, const char *path, const char *descr, int ndim, const int64_t *want, mt_err *e);

#endif
