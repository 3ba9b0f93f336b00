/* torch_zip.h: the zip archives of torch.save (a Megatron-LM `--ckpt-format torch` model_optim_rng.pt):
 * a reader and a writer of stored (uncompressed) entries, zip64 included.
 *
 * torch.save writes every entry stored, named "<archive>/data.pkl", "<archive>/data/<key>",
 * "<archive>/version" (and "<archive>/byteorder" in newer torch), each entry's data aligned to 64 bytes
 * in the file through padding in its local header's extra field. The reader checks every offset and size
 * it reads (end records, central directory, local headers, zip64 fields) against the file and refuses
 * compressed or encrypted entries; its errors name the file and the offset ("x.pt: offset 1234: ...").
 * The writer writes the same layout under a temporary name and renames it when complete (io/atomic.h).
 */
#ifndef MT_CKPT_TORCH_ZIP_H
#define MT_CKPT_TORCH_ZIP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "io/atomic.h"
#include "io/mapfile.h"
#include "util/err.h"

typedef struct mt_tzip_entry {
    char *name;         /* as stored, e.g. "archive/data/0" */
    uint64_t data;      /* offset of the entry's bytes in the file */
    uint64_t size;
    uint32_t crc;       /* CRC-32 the central directory records */
    bool crc_checked;   /* set by mt_tzip_get once the bytes matched */
} mt_tzip_entry;

typedef struct mt_tzip {
    char *path;
    mt_map map;         /* the file (empty when opened over a caller's buffer) */
    const unsigned char *p;
    uint64_t size;
    int n;
    mt_tzip_entry *e;
} mt_tzip;

/* CRC-32 (ISO-HDLC, zip's) of n bytes continuing crc (0 to start). */
uint32_t mt_crc32(uint32_t crc, const void *p, size_t n);

/* Opens and checks an archive: a file, or size bytes at p that the caller keeps (path names them in
 * errors). */
int mt_tzip_open(mt_tzip *z, const char *path, mt_err *e);
int mt_tzip_open_buf(mt_tzip *z, const char *path, const void *p, size_t size, mt_err *e);
void mt_tzip_close(mt_tzip *z);
/* The entry whose name after its first '/' is name ("data.pkl", "data/3"), or NULL. */
const mt_tzip_entry *mt_tzip_find(const mt_tzip *z, const char *name);
/* The bytes of an entry (*p NULL for an empty one), their CRC-32 checked at the first call. */
int mt_tzip_get(mt_tzip *z, const mt_tzip_entry *en, const unsigned char **p, mt_err *e);

/* The writer: entries as torch.save writes them, "<prefix>/<name>". */
typedef struct mt_tzip_writer {
    mt_out out;
    char *prefix;
    uint64_t pos;
    int n, cap;
    struct mt_tzip_wentry {
        char *name;
        uint64_t offset, size;
        uint32_t crc;
    } *w;
} mt_tzip_writer;

int mt_tzip_writer_open(mt_tzip_writer *w, const char *path, const char *prefix, mt_err *e);
int mt_tzip_writer_add(mt_tzip_writer *w, const char *name, const void *p, uint64_t n, mt_err *e);
/* Writes the central directory and renames the file to its final name. */
int mt_tzip_writer_commit(mt_tzip_writer *w, mt_err *e);
/* Removes the temporary file (after an error). */
void mt_tzip_writer_abort(mt_tzip_writer *w);

#endif
