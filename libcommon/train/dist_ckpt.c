/* dist_ckpt.c: every data-parallel rank's shard of the distributed optimizer written into one checkpoint,
 * and the ranks' agreement on the save (see dist_ckpt.h). */
#include "train/dist_ckpt.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/dist_optim.h"

#define PATH_BYTES 4096

json_t *mt_dist_ckpt_meta(const mt_trainer *t)
{
    return mt_dist_optim_meta(t->dp_size, t->gs.shard_lo);
}

/* This rank's shard into dir. */
static int write_shard(mt_trainer *t, const char *dir, mt_err *e)
{
    size_t n = t->opt.hi - t->opt.lo;
    float *h = mt_xmalloc((2 * n + 1) * sizeof *h);
    mtk_to_host(t->k, h, t->opt.exp_avg, n * sizeof *h);
    mtk_to_host(t->k, h + n, t->opt.exp_avg_sq, n * sizeof *h);
    int rc = mt_dist_optim_write(dir, t->dp_rank, t->dp_size, t->opt.lo, t->gs.n, h, n, e);
    free(h);
    return rc;
}

/* Every rank: the shard (when dir is not empty), then the sum of the failures. */
static int shard_and_agree(mt_trainer *t, const char *dir, mt_err *e)
{
    mt_err mine;
    int64_t bad = dir[0] ? write_shard(t, dir, &mine) != 0 : 1;
    int64_t sum = bad;
    if (mt_all_reduce(t->dp, &sum, 1, MT_C_I64, e)) return -1;
    if (bad && dir[0]) {
        *e = mine;
        return -1;
    }
    if (sum) return mt_err_set(e, "checkpoint not saved: %lld data-parallel rank(s) failed to write their shard", (long long)sum);
    return 0;
}

int mt_dist_ckpt_fill(const char *tmp, void *arg, mt_err *e)
{
    mt_trainer *t = arg;
    char path[PATH_BYTES] = {0};
    if (strlen(tmp) + 12 >= PATH_BYTES) return mt_err_set(e, "%s: path too long for the data-parallel ranks", tmp);
    snprintf(path, sizeof path, "%s/mp_rank_00", tmp);
    t->dist_fill_ran = 1;
    if (mt_broadcast(t->dp, path, PATH_BYTES, MT_C_BYTE, 0, e)) return -1;
    return shard_and_agree(t, path, e);
}

int mt_dist_ckpt_save_done(mt_trainer *t, int rc, mt_err *e)
{
    mt_err ce;
    if (!t->dist_fill_ran) {
        /* rank 0 failed before the shards: release the others */
        char path[PATH_BYTES] = {0};
        if (mt_broadcast(t->dp, path, PATH_BYTES, MT_C_BYTE, 0, &ce) || shard_and_agree(t, path, &ce)) {}
    }
    t->dist_fill_ran = 0;
    int64_t r = rc;
    if (mt_broadcast(t->dp, &r, 1, MT_C_I64, 0, &ce)) {
        *e = ce;
        return -1;
    }
    return rc;
}

int mt_dist_ckpt_save_peer(mt_trainer *t, mt_err *e)
{
    char path[PATH_BYTES];
    if (mt_broadcast(t->dp, path, PATH_BYTES, MT_C_BYTE, 0, e)) return -1;
    path[PATH_BYTES - 1] = 0;
    int rc = shard_and_agree(t, path, e);
    int64_t r0 = 0;
    if (mt_broadcast(t->dp, &r0, 1, MT_C_I64, 0, e)) return -1;
    if (!rc && r0) return mt_err_set(e, "checkpoint of iteration %lld not saved: data-parallel rank 0 failed",
                                     (long long)t->iteration);
    return rc;
}
