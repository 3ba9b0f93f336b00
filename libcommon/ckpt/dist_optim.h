/* dist_optim.h: the distributed optimizer's state in a checkpoint, one file per data-parallel rank.
 *
 * With --use-distributed-optimizer every data-parallel rank r writes its shard of AdamW's moments,
 * parameters lo_r .. hi_r - 1 of its (tensor rank, stage)'s flat parameter buffer, into that rank
 * directory:
 *   iter_%07d/mp_rank_TT[_PPP]/distrib_optim_%03d.safetensors   (r)
 * with F32 tensors "exp_avg" and "exp_avg_sq" (and "param", the fp32 master, when the optimizer owns
 * it: bf16/fp16 on more than one data-parallel rank) of hi_r - lo_r elements and the metadata "offset"
 * (lo_r), "numel" (all parameters), "dp_rank" and "dp_size". meta.json's "optimizer" object gets
 * "distributed": {"dp_size": N, "shard_offsets": [lo_0, ..., lo_N-1, numel]} (each rank directory its
 * own). How the ranks agree on a save is the trainer's (train/ckpt_write.h).
 *
 * Loading reads ranges of the flat buffer from the shard files that hold them (whatever data-parallel
 * size wrote them), so a run continues with any data-parallel size and with or without the distributed
 * optimizer.
 */
#ifndef MT_CKPT_DIST_OPTIM_H
#define MT_CKPT_DIST_OPTIM_H

#include <jansson.h>
#include <stddef.h>

#include "io/safetensors.h"
#include "util/err.h"

/* The shard file's tensors: the moments, and the fp32 master where the optimizer owns it. */
extern const char *const MT_DIST_OPTIM_NAMES[3];
/* The piece a shard file is written in (mt_dist_optim_write_ranges' staging buffer). */
#define MT_DIST_OPTIM_CHUNK ((size_t)1 << 20)

/* The "distributed" object of meta.json's "optimizer": dp_size shards, shard r from lo[r] to lo[r + 1]. */
json_t *mt_dist_optim_meta(int dp_size, const size_t *lo);

/* Writes data-parallel rank dp_rank's shard into dir (its rank directory of the save): parameters lo ..
 * lo + n - 1 of numel, produced in pieces of MT_DIST_OPTIM_CHUNK bytes by fill (tensor index 0 exp_avg,
 * 1 exp_avg_sq, 2 param; n floats each), with the fp32 master "param" when with_param. 0, or -1 with e
 * set (an error of fill's: nothing left under the file's name). */
int mt_dist_optim_write_ranges(const char *dir, int dp_rank, int dp_size, size_t lo, size_t numel, size_t n,
                               int with_param, mt_st_fill_range_fn fill, void *ctx, mt_err *e);

/* The shard files of one rank directory opened for reading ranges of the flat buffer (headers only). */
typedef struct mt_dist_shards {
    int n, opened, has_param;   /* has_param: every shard holds "param" */
    size_t *lo;                 /* n + 1 boundaries */
    mt_st_file *f;
    int *fd;                    /* opened at the first read */
} mt_dist_shards;
int mt_dist_shards_open(mt_dist_shards *s, const char *dir, const json_t *distributed, size_t numel, mt_err *e);
void mt_dist_shards_close(mt_dist_shards *s);
/* Elements first .. first + count - 1 of the flat buffer's exp_avg (which 0), exp_avg_sq (1) or fp32
 * master (2) into dst, read with pread from the shards that hold them; *bytes counts the bytes read. */
int mt_dist_shards_read(mt_dist_shards *s, int which, size_t first, size_t count, float *dst, uint64_t *bytes, mt_err *e);

#endif
