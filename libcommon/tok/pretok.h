/* pretok.h: the GPT-2 pre-tokenizer, a hand-written scanner equivalent to the regex
 *   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 * applied leftmost-first, as tiktoken and HF tokenizers do. Pieces are returned one at a time so the
 * caller needs no storage. */
#ifndef MT_TOK_PRETOK_H
#define MT_TOK_PRETOK_H

#include <stddef.h>

/* End (exclusive) of the piece that starts at s[pos], pos < len. s should be valid UTF-8; an invalid
 * byte sequence is treated as one "other" character per maximal subpart, so the scan always moves
 * forward and never reads past len. */
size_t mt_pretok_next(const char *s, size_t len, size_t pos);

#endif
