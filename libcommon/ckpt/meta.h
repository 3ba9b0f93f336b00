/* meta.h: typed, range-checked reads of the numbers in a checkpoint's meta.json.
 *
 * Every number is checked for type and range before any conversion (a double outside an integer type's
 * range has no defined conversion) and before use; a bad one is an error naming the file and the field,
 * e.g. "ckpt/iter_0000005/mp_rank_00/meta.json: \"opt_param_scheduler.num_steps\" is -5, outside [0, 20]".
 * obj is the field's prefix ("opt_param_scheduler.", "args." or ""), where the checkpoint's directory.
 * Counts stay within MT_META_MAX_COUNT (2^53), where doubles are exact and sums of two cannot overflow.
 */
#ifndef MT_CKPT_META_H
#define MT_CKPT_META_H

#include <jansson.h>
#include <stdint.h>

#include "util/err.h"

#define MT_META_MAX_COUNT ((int64_t)1 << 53)

/* An integer in [lo, hi] (480.0 is 480; 2.5 and 1e300 are errors). 0, or -1 with e set. */
int mt_meta_count(const json_t *o, const char *obj, const char *key, const char *where, int64_t lo, int64_t hi,
                  int64_t *out, mt_err *e);
/* A number in [lo, hi]. 0, or -1 with e set. */
int mt_meta_real(const json_t *o, const char *obj, const char *key, const char *where, double lo, double hi,
                 double *out, mt_err *e);

#endif
