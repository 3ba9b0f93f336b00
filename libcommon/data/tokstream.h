/* tokstream.h: the binary token stream that mt-tokenize writes and mt-index reads (man mt-formats.5).
 *
 * Layout, all integers little-endian:
 *   header:  magic "MTTOKSv1" (8 bytes)
 *            u32 version (1)   u32 token_bytes (2 or 4)   u32 vocab_size (unpadded)   i32 eod (-1: none)
 *            u32 flags (bit 0: EOD appended to each non-empty document)
 *            u32 n_keys, then n_keys times: u32 length + that many bytes (UTF-8 key name, no NUL)
 *   records: u8 tag 'D' (0x44), u32 key index, u32 n_tokens, n_tokens ids of token_bytes each
 *            (one record per input document and key, in input order)
 *   trailer: u8 tag 'E' (0x45), u64 documents (records), u64 tokens (sum of n_tokens)
 * A stream without the trailer was cut off; counts that disagree mean corruption. token_bytes is 2 when
 * vocab_size < 65500 (Megatron's uint16 rule), else 4.
 */
#ifndef MT_DATA_TOKSTREAM_H
#define MT_DATA_TOKSTREAM_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "io/reader.h"
#include "util/err.h"
#include "util/vec.h"

#define MT_TOKS_MAGIC "MTTOKSv1"
#define MT_TOKS_VERSION 1u
#define MT_TOKS_FLAG_EOD 1u
#define MT_TOKS_MAX_KEYS 256

typedef struct mt_toks_header {
    uint32_t version, token_bytes, vocab_size, flags;
    int32_t eod;
    uint32_t n_keys;
    char *keys[MT_TOKS_MAX_KEYS]; /* owned, NUL-terminated */
} mt_toks_header;

/* The token width Megatron's indexed dataset would use for this vocabulary: 2 or 4. */
uint32_t mt_toks_token_bytes(uint32_t vocab_size);

/* Serialization into a caller's buffer (so workers can format records in parallel). */
void mt_toks_put_header(mt_buf *out, const mt_toks_header *h);
void mt_toks_put_doc(mt_buf *out, const mt_toks_header *h, uint32_t key, const uint32_t *ids, size_t n);
void mt_toks_put_trailer(mt_buf *out, uint64_t docs, uint64_t tokens);

/* Reading. mt_toks_read_header rejects a foreign stream ("not an mt token stream: ..."), another version,
 * or a bad header, naming the input and byte offset. */
int mt_toks_read_header(mt_reader *r, mt_toks_header *h, mt_err *e);
void mt_toks_header_free(mt_toks_header *h);
/* Next record: returns 1 with *key and ids (replaced, not appended) for a document, 0 at the trailer
 * (after checking its counts against what was read), -1 on error (truncation, bad tag, key or id out
 * of range, count mismatch), naming the input and byte offset. */
typedef struct mt_toks_state {
    uint64_t docs, tokens;
    bool done;
} mt_toks_state;
int mt_toks_next(mt_reader *r, const mt_toks_header *h, mt_toks_state *st, uint32_t *key, mt_ids *ids, mt_err *e);

#endif
