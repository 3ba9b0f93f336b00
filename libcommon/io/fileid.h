/* fileid.h: a short identity of a file's contents (its size and an FNV-1a hash of its bytes), for ranks
 * that must read the same dataset and tokenizer files to compare without sending the files. */
#ifndef MT_IO_FILEID_H
#define MT_IO_FILEID_H

#include <stddef.h>

/* Files up to this size are hashed whole; larger ones by their first and last MT_FILEID_END bytes (with
 * the size, enough to tell apart two versions of an index or a dataset at a glance of a few MB). */
#define MT_FILEID_WHOLE (16u << 20)
#define MT_FILEID_END (1u << 20)

/* Writes "<N> bytes, FNV-1a <16 hex digits>" for a readable regular file, "absent" when it does not exist,
 * "not a regular file", or "unreadable (<strerror>)" into out (cap bytes). Never fails: a file a rank
 * cannot read is an identity like any other, to compare with the other ranks'. */
void mt_file_identity(const char *path, char *out, size_t cap);

#endif
