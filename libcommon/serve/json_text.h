/* json_text.h: the two steps every JSON answer of mt-serve takes: bytes made a JSON string (invalid UTF-8,
 * such as a token's part of a character, replaced by U+FFFD) and an answer's object made its compact text.
 * Defined in response.c, used by it and by api.c. */
#ifndef MT_SERVE_JSON_TEXT_H
#define MT_SERVE_JSON_TEXT_H

#include <jansson.h>
#include <stddef.h>

/* A new JSON string of the bytes s[0..n) (s may be NULL when n is 0). */
json_t *mt_serve_jtext(const char *s, size_t n);
/* o's compact text, a string to free; o is released. Dies when out of memory. */
char *mt_serve_dump(json_t *o);

#endif
