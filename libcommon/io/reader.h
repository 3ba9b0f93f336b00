/* reader.h: sequential input from a file or stdin, with transparent zstd decompression.
 *
 * Compression is detected by the zstd frame magic (28 B5 2F FD), never by the file name; concatenated
 * and multi-frame zstd inputs work. A zstd input that ends inside a frame is an error ("truncated zstd
 * input"), so a cut-off download is reported instead of silently tokenizing a prefix.
 */
#ifndef MT_IO_READER_H
#define MT_IO_READER_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "util/err.h"

typedef struct mt_reader mt_reader;

/* path "-" means stdin. */
int mt_reader_open(mt_reader **r, const char *path, mt_err *e);
void mt_reader_close(mt_reader *r);

/* Reads up to n decompressed bytes. Returns the count, 0 at end of input, -1 on error. */
ssize_t mt_reader_read(mt_reader *r, void *buf, size_t n, mt_err *e);
/* Fills exactly n bytes. Returns 1 when read, 0 on clean end of input before any byte, -1 on error
 * (including end of input after some but not all of the n bytes: "truncated"). */
int mt_reader_read_full(mt_reader *r, void *buf, size_t n, mt_err *e);

/* Next line without its '\n' (a final line without '\n' is returned too). *line stays valid until the
 * next call. Returns 1, 0 at end of input, -1 on error. A line longer than the limit set with
 * mt_reader_set_max_line, or one that memory cannot hold, is an error naming the input and the line. */
int mt_reader_getline(mt_reader *r, const char **line, size_t *len, mt_err *e);
/* Whether mt_reader_getline would return at once, without waiting for input that is not there yet:
 * 1 when a whole line (or the end of the input) is already read, or can be read now without blocking
 * (what is available is read, never more; a line longer than the buffer counts as ready), 0 when the
 * next line has not (all) arrived, -1 with e set on a read error. The line last returned by
 * mt_reader_getline is no longer valid after it. */
int mt_reader_line_ready(mt_reader *r, mt_err *e);
/* The programs' default for --max-line-bytes: 1 GiB. */
#define MT_MAX_LINE_DEFAULT (1 << 30)
/* Longest line mt_reader_getline returns, in bytes without the '\n'; 0 (the default): no limit. */
void mt_reader_set_max_line(mt_reader *r, size_t max);

/* Looks at the next n (at most 64 KiB) bytes without consuming them: *got < n only at end of input. */
int mt_reader_peek(mt_reader *r, size_t n, const unsigned char **p, size_t *got, mt_err *e);

const char *mt_reader_name(const mt_reader *r); /* path, or "<stdin>" */
uint64_t mt_reader_lineno(const mt_reader *r);  /* 1-based number of the line last returned */
uint64_t mt_reader_offset(const mt_reader *r);  /* decompressed bytes consumed so far */
uint64_t mt_reader_raw_offset(const mt_reader *r); /* bytes read from the underlying file */
uint64_t mt_reader_raw_size(const mt_reader *r);   /* size of a regular file, else 0 */
bool mt_reader_is_zstd(const mt_reader *r);

#endif
