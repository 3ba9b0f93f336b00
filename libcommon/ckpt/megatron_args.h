/* megatron_args.h: what mt keeps of a Megatron-LM checkpoint besides its weights: the model's arguments
 * (its argparse.Namespace) as mt's args, named as mt-train's flags and as a checkpoint's meta.json holds
 * them, and the training state (iteration, consumed samples, the learning-rate schedule).
 */
#ifndef MT_CKPT_MEGATRON_ARGS_H
#define MT_CKPT_MEGATRON_ARGS_H

#include <jansson.h>
#include <stdint.h>

#include "ckpt/torch_pickle.h"
#include "util/err.h"

/* mt's args of the model ns describes (where names the file in errors); *padded_rows: its
 * padded_vocab_size. A model mt has no form of (experts, post-LayerNorm residuals) is an error. NULL with
 * e set. */
json_t *mt_meg_args(const mt_pk *ns, const char *where, int64_t *padded_rows, mt_err *e);
/* meta.json's state of the checkpoint root (its args ns) at iteration: checkpoint_version, iteration,
 * consumed_train_samples, consumed_valid_samples, num_floating_point_operations_so_far and
 * opt_param_scheduler as Megatron saved them. NULL with e set. */
json_t *mt_meg_state(const mt_pk *root, const mt_pk *ns, int64_t iteration, const char *where, mt_err *e);

#endif
