/* loss_scaler.c: Megatron's constant and dynamic gradient scalers (see loss_scaler.h). */
#include "train/loss_scaler.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/meta.h"

void mt_loss_scaler_constant(mt_loss_scaler *s, double scale)
{
    memset(s, 0, sizeof *s);
    s->scale = scale;
    s->min_scale = scale;
}

void mt_loss_scaler_dynamic(mt_loss_scaler *s, double initial, double min_scale, int64_t window, int hysteresis)
{
    memset(s, 0, sizeof *s);
    s->dynamic = true;
    s->scale = initial;
    s->min_scale = min_scale;
    s->window = window;
    s->hysteresis = hysteresis;
    s->hysteresis_tracker = hysteresis;
}

void mt_loss_scaler_update(mt_loss_scaler *s, bool found_inf)
{
    if (!s->dynamic) return;
    if (found_inf) {
        s->growth_tracker = 0;
        s->hysteresis_tracker--;
        if (s->hysteresis_tracker <= 0) s->scale = fmax(s->scale * 0.5, s->min_scale);
        return;
    }
    if (++s->growth_tracker == s->window) {
        s->growth_tracker = 0;
        s->hysteresis_tracker = s->hysteresis;
        s->scale *= 2.0;
    }
}

json_t *mt_loss_scaler_to_json(const mt_loss_scaler *s)
{
    return json_pack("{s:f,s:I,s:i,s:b}", "scale", s->scale, "growth_tracker", (json_int_t)s->growth_tracker,
                     "hysteresis_tracker", s->hysteresis_tracker, "dynamic", (int)s->dynamic);
}

int mt_loss_scaler_from_json(mt_loss_scaler *s, const json_t *o, const char *where, mt_err *e)
{
    if (!s->dynamic) return 0;
    if (!json_is_object(o)) return mt_err_set(e, "%s/meta.json: missing \"loss_scaler\"", where);
    double scale;
    int64_t growth, hyst;
    if (mt_meta_real(o, "loss_scaler.", "scale", where, 0, 1e300, &scale, e) ||
        mt_meta_count(o, "loss_scaler.", "growth_tracker", where, 0, MT_META_MAX_COUNT, &growth, e) ||
        mt_meta_count(o, "loss_scaler.", "hysteresis_tracker", where, -((int64_t)1 << 30), (int64_t)1 << 30, &hyst, e))
        return -1;
    if (!(scale > 0)) return mt_err_set(e, "%s/meta.json: \"loss_scaler.scale\" must be positive", where);
    s->scale = scale;
    s->growth_tracker = growth;
    s->hysteresis_tracker = (int)hyst;
    return 0;
}

int mt_loss_scaler_test_overflow(int64_t iteration)
{
    const char *v = getenv("MT_TEST_OVERFLOW_ITERS");
    if (!v) return 0;
    while (*v) {
        char *end;
        long long k = strtoll(v, &end, 10);
        if (end == v) return 0;
        if (k == iteration) return 1;
        v = *end == ',' ? end + 1 : end;
        if (*end && *end != ',') return 0;
    }
    return 0;
}
