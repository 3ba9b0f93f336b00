/* loss_scaler.h: Megatron's gradient scalers for mixed precision (spec 4.4).
 *
 * The loss is multiplied by the scale before the backward pass, so that small fp16 gradients do not
 * flush to zero; the fp32 master gradients are multiplied by 1 / scale before the optimizer uses them.
 *   - constant (--loss-scale S, or 1.0 for fp32 and bf16): the scale never changes;
 *   - dynamic (--fp16 without --loss-scale): starts at --initial-loss-scale; after every step
 *       found inf/NaN: growth = 0; hyst -= 1; if hyst <= 0: scale = max(scale / 2, min scale)
 *       else:          growth += 1; if growth == window: growth = 0; hyst = hysteresis; scale *= 2
 *     (hysteresis is restored only on growth). A step whose gradients hold inf/NaN is skipped.
 * The dynamic state is what Megatron's DynamicGradScaler.state_dict holds (scale, growth_tracker,
 * hysteresis_tracker) and goes into the checkpoint's meta.json as "loss_scaler".
 */
#ifndef MT_TRAIN_LOSS_SCALER_H
#define MT_TRAIN_LOSS_SCALER_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "util/err.h"

typedef struct mt_loss_scaler {
    bool dynamic;
    double scale;                 /* a power of two for the dynamic scaler */
    double min_scale;
    int64_t window;               /* --loss-scale-window: clean steps before the scale doubles */
    int hysteresis;               /* --hysteresis: overflows tolerated before the scale halves */
    int64_t growth_tracker;       /* clean steps since the last overflow or growth */
    int hysteresis_tracker;       /* overflows left before the next halving */
} mt_loss_scaler;

void mt_loss_scaler_constant(mt_loss_scaler *s, double scale);
void mt_loss_scaler_dynamic(mt_loss_scaler *s, double initial, double min_scale, int64_t window, int hysteresis);
/* After a step: found_inf says whether the unscaled gradients held inf/NaN. */
void mt_loss_scaler_update(mt_loss_scaler *s, bool found_inf);

/* {"scale", "growth_tracker", "hysteresis_tracker", "dynamic"} (new reference). */
json_t *mt_loss_scaler_to_json(const mt_loss_scaler *s);
/* Restores a dynamic scaler's state from a checkpoint's "loss_scaler" object; where names the file in
 * messages. A constant scaler keeps its scale (Megatron's ConstantGradScaler loads nothing). */
int mt_loss_scaler_from_json(mt_loss_scaler *s, const json_t *o, const char *where, mt_err *e);

/* Test hook: 1 when MT_TEST_OVERFLOW_ITERS (a comma-separated list of iteration numbers, 1-based)
 * names iteration; the trainer then makes that iteration's gradients infinite, as an fp16 overflow
 * would. 0 when the variable is unset. */
int mt_loss_scaler_test_overflow(int64_t iteration);

#endif
