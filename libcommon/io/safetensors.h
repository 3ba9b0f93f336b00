/* safetensors.h: the Hugging Face safetensors format: a writer and a strictly validating reader.
 *
 * Layout: u64 LE header length N, N bytes of UTF-8 JSON, then the data buffer. The JSON object maps
 * each tensor name to {"dtype": "F32", "shape": [d0, ...], "data_offsets": [begin, end]} (offsets
 * relative to the buffer) and may hold "__metadata__": {str: str}. Data are little-endian, C order.
 *
 * The writer emits what the reference implementation emits: compact JSON with "__metadata__" first
 * (its keys sorted), tensors ordered by dtype alignment (largest first) and then by name, packed
 * back to back, the header padded with spaces to a multiple of 8 bytes. The file is written under a
 * temporary name, fsynced and renamed (io/atomic.h).
 *
 * The reader maps the file and accepts it only if: the file holds the 8-byte length and the header;
 * N <= 100,000,000; the header is a JSON object without duplicate keys; "__metadata__", when
 * present, is an object of strings; every tensor entry has exactly dtype (a known name), shape (at
 * most MT_ST_MAXDIM non-negative integers) and data_offsets ([begin, end], begin <= end, inside the
 * buffer); end - begin == prod(shape) * dtype bits / 8 (whole bytes); sorted by offset the tensors
 * start at 0 and tile the buffer without gaps or overlaps, and the buffer ends where the last one
 * does. Errors are one line naming the file and the tensor or byte position at fault.
 */
#ifndef MT_IO_SAFETENSORS_H
#define MT_IO_SAFETENSORS_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "io/mapfile.h"
#include "util/err.h"

#define MT_ST_MAXDIM 8
#define MT_ST_MAX_HEADER 100000000u

typedef enum mt_st_dtype {
    MT_ST_BOOL, MT_ST_U8, MT_ST_I8, MT_ST_I16, MT_ST_U16, MT_ST_F16, MT_ST_BF16, MT_ST_I32, MT_ST_U32,
    MT_ST_F32, MT_ST_F64, MT_ST_I64, MT_ST_U64, MT_ST_F8_E4M3, MT_ST_F8_E5M2, MT_ST_F8_E8M0,
    MT_ST_F8_E4M3FNUZ, MT_ST_F8_E5M2FNUZ, MT_ST_F4, MT_ST_F6_E2M3, MT_ST_F6_E3M2, MT_ST_C64,
    MT_ST_NDTYPES
} mt_st_dtype;

/* "F32" etc.; NULL for an invalid value. */
const char *mt_st_dtype_name(mt_st_dtype d);
/* The dtype named s, or -1. */
int mt_st_dtype_parse(const char *s);
/* Bits per element (4, 6, 8, 16, 32, 64). */
int mt_st_dtype_bits(mt_st_dtype d);

/* One tensor to write: data points to prod(shape) elements (little-endian, C order); ndim 0 is a
 * scalar. Names are non-empty UTF-8, unique, and not "__metadata__". */
typedef struct mt_st_tensor {
    const char *name;
    mt_st_dtype dtype;
    int ndim;
    int64_t shape[MT_ST_MAXDIM];
    const void *data;
} mt_st_tensor;

/* One "__metadata__" entry. */
typedef struct mt_st_kv {
    const char *key, *value;
} mt_st_kv;

/* Writes n tensors and n_meta metadata entries to path atomically. Returns 0 or -1. */
int mt_st_write(const char *path, const mt_st_tensor *t, int n, const mt_st_kv *meta, int n_meta, mt_err *e);

/* A tensor of an opened file. data points into the mapping (not necessarily aligned; NULL when
 * nbytes is 0). */
typedef struct mt_st_info {
    const char *name;
    mt_st_dtype dtype;
    int ndim;
    int64_t shape[MT_ST_MAXDIM];
    int64_t numel;
    size_t begin, nbytes; /* data_offsets[0] and end - begin */
    const void *data;
} mt_st_info;

typedef struct mt_st_file {
    char *path;
    mt_map map;
    json_t *header;   /* the parsed header (names point into it) */
    json_t *meta;     /* its "__metadata__" object, or NULL */
    mt_st_info *t;    /* sorted by name */
    int n;
    size_t header_len; /* N */
} mt_st_file;

/* Maps and validates path. On error f holds nothing to close. */
int mt_st_open(mt_st_file *f, const char *path, mt_err *e);
void mt_st_close(mt_st_file *f);

/* Fills buf (nbytes, the data of tensor t[index] in file order) for mt_st_write_fill; 0 or -1 with e set. */
typedef int (*mt_st_fill_fn)(void *ctx, int index, void *buf, size_t nbytes, mt_err *e);

/* As mt_st_write, but tensors whose data is NULL are produced one at a time by fill into one buffer of
 * the largest such tensor's size, in the order they are written: a file larger than memory can be
 * streamed. An error from fill leaves nothing under path. */
int mt_st_write_fill(const char *path, const mt_st_tensor *t, int n, const mt_st_kv *meta, int n_meta,
                     mt_st_fill_fn fill, void *ctx, mt_err *e);

/* As mt_st_write_fill with a bounded buffer: a tensor without data is produced in pieces of at most chunk
 * bytes (rounded down to a multiple of 8; 0: the whole tensor), fill writing bytes off .. off + nbytes - 1
 * of its data into buf. The writer holds one buffer of chunk bytes. */
typedef int (*mt_st_fill_range_fn)(void *ctx, int index, size_t off, void *buf, size_t nbytes, mt_err *e);
int mt_st_write_ranges(const char *path, const mt_st_tensor *t, int n, const mt_st_kv *meta, int n_meta,
                       mt_st_fill_range_fn fill, void *ctx, size_t chunk, mt_err *e);

/* The tensor called name, or NULL. */
const mt_st_info *mt_st_find(const mt_st_file *f, const char *name);
/* The metadata value for key, or NULL. */
const char *mt_st_meta(const mt_st_file *f, const char *key);
/* Widens a float tensor (F32, F16 or BF16, exactly) to float32 in dst; -1 for any other dtype. */
int mt_st_to_f32(const mt_st_info *t, float *dst);
/* Elements first .. first + count - 1 of tensor t of file f (F32, or F16/BF16 widened) into dst, read with
 * pread(2) rather than through the mapping (*fd: the file, opened at the first read; -1 before; the caller
 * closes it); *bytes (when not NULL) counts the bytes read. 0, or -1 with e set. */
int mt_st_pread_f32(const mt_st_file *f, int *fd, const mt_st_info *t, size_t first, size_t count, float *dst,
                    uint64_t *bytes, mt_err *e);
/* Lets the kernel drop t's pages from this process's memory after it was read (they are read again
 * from the file if touched): converting a model tensor by tensor then needs memory for one tensor. */
void mt_st_drop(const mt_st_file *f, const mt_st_info *t);

/* Writes "[d0, d1]" into buf (for messages); returns buf. */
char *mt_st_shape_str(char *buf, size_t cap, int ndim, const int64_t *shape);

#endif
