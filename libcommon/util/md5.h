/* md5.h: MD5 (RFC 1321) of a byte string, as hex; Megatron-Core names its index caches by it. */
#ifndef MT_UTIL_MD5_H
#define MT_UTIL_MD5_H

#include <stddef.h>

/* Writes the 32 lower-case hex digits and a terminating NUL into hex. */
void mt_md5_hex(const void *data, size_t n, char hex[33]);

#endif
