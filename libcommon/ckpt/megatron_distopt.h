/* megatron_distopt.h: where Megatron-Core's distributed optimizer keeps each parameter's state in a
 * `--ckpt-format torch` checkpoint's distrib_optim.pt, beside each tensor/pipeline rank's model_optim_rng.pt.
 *
 * The file holds, per gradient buffer (one per model chunk without expert parallelism), flat fp32 tensors
 * "param" (the main parameters), "exp_avg" and "exp_avg_sq", and "numel_unpadded", as
 * DistributedOptimizer.get_parameter_state_dp_zero gathers them ("buckets_coalesced": the buckets' end
 * padding dropped, the format since February 2024). A buffer lays its parameters out as Megatron-Core's
 * DDP does: in reverse registration order (megatron_dir.h's mt_meg_param_order), each start rounded up to 64
 * elements, in buckets that close once they reach the bucket size (--overlap-grad-reduce on the first
 * stage's first model chunk only) and around the word embeddings shared between the first and the last
 * stage (tied embeddings over a pipeline, Megatron-Core's model); a bucket's elements run from its first
 * parameter's start to its last one's end, its alignment gaps included.
 */
#ifndef MT_CKPT_MEGATRON_DISTOPT_H
#define MT_CKPT_MEGATRON_DISTOPT_H

#include <stdint.h>

#include "model/layout.h"

/* One gradient buffer: its parameters in buffer order and where each begins in the buffer's tensors. */
typedef struct mt_meg_dbuf {
    int n;
    const mt_layout_tensor **t;
    int64_t *off;
    int64_t numel;              /* numel_unpadded: the elements of the file's tensors */
} mt_meg_dbuf;

/* The bucket size Megatron resolves (resolve_ddp_bucket_size), in elements, 0 for one bucket: without
 * --overlap-grad-reduce one; --ddp-num-buckets N: the rank's parameters / N; --ddp-bucket-size; else
 * max(40000000, 1000000 x the data-parallel (times context-parallel) size). */
int64_t mt_meg_bucket_size(int overlap_grad_reduce, int64_t ddp_bucket_size, int64_t num_buckets, int64_t dp_cp,
                           int64_t num_parameters);

/* The rank's buffers, one per model chunk (l->chunks, or 1), into b. core, grouped: as mt_meg_param_order;
 * tied: the output layer shares the word embeddings; bucket_size: as mt_meg_bucket_size, applied to the first
 * stage's first chunk (Megatron disables bucketing elsewhere, and everywhere with
 * --overlap-param-gather-with-optimizer-step: pass 0); sel: -1 every parameter, 0 the dense ones, 1 the experts'
 * (with expert parallelism, or an expert tensor size other than tp, Megatron-Core keeps the experts in buffers
 * of their own, expert_parallel_buffers, laid out the same way, and a ChainedOptimizer's two optimizers own the
 * two kinds). Free with mt_meg_dbufs_free. */
void mt_meg_dbufs(const mt_layout *l, int core, int grouped, int tied, int64_t bucket_size, int sel, mt_meg_dbuf *b);
void mt_meg_dbufs_free(mt_meg_dbuf *b, int n);

#endif
