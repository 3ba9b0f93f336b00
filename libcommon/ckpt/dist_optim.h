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
 * With expert parallelism (--expert-model-parallel-size E), or an expert tensor size below the tensor size
 * (--expert-tensor-parallel-size), a rank's shard has two ranges: its part of the dense parameters (the
 * buffer's start, sharded over the whole data-parallel group) and its part of its expert rank's experts
 * (the buffer's end from the first expert tensor, sharded over the expert-data-parallel group: with an expert
 * tensor size below tp its ranks are of several tensor ranks). Its file, in its own rank directory
 * (mp_rank_TT[_PPP]_EEE), holds the first range then the second, with the metadata "ranges" ("lo:hi,lo2:hi2").
 * The pieces of one directory's buffer are then in files of other rank directories, so such a directory's
 * "distributed" object lists where each piece of its buffer lies: "pieces": [[file, lo, hi, at], ...] in
 * rising order from 0 to numel, file relative to the rank directory (distrib_optim_RRR.safetensors or
 * ../mp_rank_.../distrib_optim_RRR.safetensors) and at the piece's first element in that file's tensors.
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
/* The same with the experts apart (expert parallelism, or an expert tensor size below tp): where
 * each piece of one rank directory's flat buffer lies, elements lo .. hi - 1 in shard file
 * distrib_optim_<shard> of rank directory dir (NULL or "": this one) from element at of its tensors, the
 * pieces in rising order from 0 to the buffer's end. */
typedef struct mt_dist_src {
    const char *dir;
    int shard;
    size_t lo, hi, at;
} mt_dist_src;
json_t *mt_dist_optim_meta_pieces(int dp_size, int ep_size, const mt_dist_src *p, int n);

/* Writes data-parallel rank dp_rank's shard into dir (its rank directory of the save): parameters lo ..
 * hi - 1 and lo2 .. hi2 - 1 (none when lo2 == hi2) of numel, produced in pieces of MT_DIST_OPTIM_CHUNK bytes
 * by fill (tensor index 0 exp_avg, 1 exp_avg_sq, 2 param; the two ranges' elements one after the other),
 * with the fp32 master "param" when with_param. 0, or -1 with e set (an error of fill's: nothing left under
 * the file's name). */
int mt_dist_optim_write_ranges(const char *dir, int dp_rank, int dp_size, size_t lo, size_t hi, size_t lo2, size_t hi2,
                               size_t numel, int with_param, mt_st_fill_range_fn fill, void *ctx, mt_err *e);

/* The shard files of one rank directory opened for reading ranges of the flat buffer (headers only). */
typedef struct mt_dist_piece {
    size_t lo, hi;   /* elements lo .. hi - 1 of the flat buffer */
    int file;        /* in file f[file] */
    size_t at;       /* from its tensors' element at */
} mt_dist_piece;
typedef struct mt_dist_shards {
    int n, opened, has_param;   /* n files; has_param: every file holds "param" */
    mt_st_file *f;
    int *fd;                    /* opened at the first read */
    int npieces;
    mt_dist_piece *piece;       /* rising, from 0 to numel */
} mt_dist_shards;
int mt_dist_shards_open(mt_dist_shards *s, const char *dir, const json_t *distributed, size_t numel, mt_err *e);
void mt_dist_shards_close(mt_dist_shards *s);
/* Elements first .. first + count - 1 of the flat buffer's exp_avg (which 0), exp_avg_sq (1) or fp32
 * master (2) into dst, read with pread from the shards that hold them; *bytes counts the bytes read. */
int mt_dist_shards_read(mt_dist_shards *s, int which, size_t first, size_t count, float *dst, uint64_t *bytes, mt_err *e);

#endif
