/* meta.c: typed, range-checked reads of meta.json numbers (see meta.h). */
#include "ckpt/meta.h"

#include <math.h>

static json_t *meta_get(const json_t *o, const char *obj, const char *key, const char *where, const char *want,
                        mt_err *e)
{
    json_t *v = json_object_get(o, key);
    if (!v) mt_err_set(e, "%s/meta.json: missing %s \"%s%s\"", where, want, obj, key);
    return v;
}

int mt_meta_count(const json_t *o, const char *obj, const char *key, const char *where, int64_t lo, int64_t hi,
                  int64_t *out, mt_err *e)
{
    json_t *v = meta_get(o, obj, key, where, "integer", e);
    if (!v) return -1;
    if (json_is_integer(v)) {
        json_int_t x = json_integer_value(v);
        if (x >= lo && x <= hi) {
            *out = (int64_t)x;
            return 0;
        }
        return mt_err_set(e, "%s/meta.json: \"%s%s\" is %lld, outside [%lld, %lld]", where, obj, key, (long long)x,
                          (long long)lo, (long long)hi);
    }
    if (json_is_real(v)) {
        double x = json_real_value(v);
        if (x >= (double)lo && x <= (double)hi && x == floor(x)) {
            *out = (int64_t)x;
            return 0;
        }
        return mt_err_set(e, "%s/meta.json: \"%s%s\" is %.17g, not an integer in [%lld, %lld]", where, obj, key, x,
                          (long long)lo, (long long)hi);
    }
    return mt_err_set(e, "%s/meta.json: \"%s%s\" is not an integer", where, obj, key);
}

int mt_meta_real(const json_t *o, const char *obj, const char *key, const char *where, double lo, double hi,
                 double *out, mt_err *e)
{
    json_t *v = meta_get(o, obj, key, where, "number", e);
    if (!v) return -1;
    if (!json_is_number(v)) return mt_err_set(e, "%s/meta.json: \"%s%s\" is not a number", where, obj, key);
    double x = json_number_value(v);
    if (!(x >= lo && x <= hi))
        return mt_err_set(e, "%s/meta.json: \"%s%s\" is %.17g, outside [%g, %g]", where, obj, key, x, lo, hi);
    *out = x;
    return 0;
}
