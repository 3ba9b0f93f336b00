/* jsonl.h: extracting string fields from one JSON-lines record (loose JSON: one object per line).
 *
 * Parsing is jansson's (strict RFC 8259, UTF-8 validated, "\u0000" allowed), or for the common record
 * a validating scanner that accepts only what jansson accepts, decodes as it does and leaves the rest to
 * it. JSON escapes of lone UTF-16 surrogates, which Python's json accepts, become U+FFFD as tiktoken
 * does, instead of failing the line.
 */
#ifndef MT_IO_JSONL_H
#define MT_IO_JSONL_H

#include <stdbool.h>
#include <stddef.h>

#include "util/err.h"
#include "util/vec.h"

typedef struct mt_jsonl_field {
    const char *text; /* UTF-8, valid until the next call with the same parser state */
    size_t len;
} mt_jsonl_field;

typedef struct mt_jsonl {
    void *doc;      /* json_t* of the last parsed line */
    mt_buf repair;  /* line with lone surrogate escapes replaced */
    mt_buf values;  /* the fields' values when the fast path parsed the line (jsonl.c) */
} mt_jsonl;

/* True when line[0..len) holds only blanks (space, tab, CR): such a line is no record and is skipped. */
bool mt_jsonl_blank(const char *line, size_t len);

/* Parses line[0..len) and fills fields[i] with the string value of keys[i]. On error returns -1 with a
 * message "column C: <what>" (the caller prefixes file and line): malformed JSON, not an object,
 * missing key, value not a string. */
int mt_jsonl_extract(mt_jsonl *st, const char *line, size_t len, const char *const *keys, int n_keys,
                     mt_jsonl_field *fields, mt_err *e);
void mt_jsonl_free(mt_jsonl *st);

/* Appends s as a JSON string literal (quotes included) to out. */
void mt_json_quote(mt_buf *out, const char *s, size_t n);

#endif
