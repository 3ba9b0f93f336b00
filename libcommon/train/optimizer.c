/* optimizer.c: AdamW with Megatron's decay groups and global-norm gradient clipping. */
#include "train/optimizer.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>

/* The tensors' parts in [lo, hi) as segments, adjacent ones with the same decay merged, offsets from lo:
 * the whole update of a range is then one multi-tensor call. NULL on running out of memory. */
static mtk_adamw_seg *pieces(const mt_gpt *model, size_t lo, size_t hi, int *nseg)
{
    int nt = mt_gpt_num_tensors(model);
    *nseg = 0;
    mtk_adamw_seg *seg = malloc((size_t)(nt > 0 ? nt : 1) * sizeof *seg);
    if (!seg) return NULL;
    for (int i = 0; i < nt; i++) {
        const mt_gpt_tensor *t = mt_gpt_tensor_at(model, i);
        size_t a = t->offset > lo ? t->offset : lo;
        size_t b = t->offset + t->numel < hi ? t->offset + t->numel : hi;
        if (a >= b) continue;   /* the tensor is outside the range */
        mtk_adamw_seg *last = *nseg ? &seg[*nseg - 1] : NULL;
        if (last && last->decay == !t->no_decay && last->off + last->n == a - lo) last->n += b - a;
        else seg[(*nseg)++] = (mtk_adamw_seg){.off = a - lo, .n = b - a, .decay = !t->no_decay};
    }
    return seg;
}

static int build_pieces(mt_adamw *o, mt_err *e)
{
    free(o->seg);
    free(o->seg2);
    o->seg = pieces(o->model, o->lo, o->hi, &o->nseg);
    o->seg2 = pieces(o->model, o->lo2, o->hi2, &o->nseg2);
    if (!o->seg || !o->seg2) return mt_err_set(e, "out of memory");
    return 0;
}

size_t mt_adamw_count(const mt_adamw *o) { return (o->hi - o->lo) + (o->hi2 - o->lo2); }
int mt_adamw_whole(const mt_adamw *o) { return o->lo == 0 && o->hi == mt_gpt_num_params(o->model) && o->lo2 == o->hi2; }

int mt_adamw_init(mt_adamw *o, mtk *k, mt_gpt *model, double beta1, double beta2, double eps, double clip_grad,
                  mt_err *e)
{
    size_t n = mt_gpt_num_params(model);
    o->k = k;
    o->model = model;
    o->step = 0;
    o->beta1 = beta1;
    o->beta2 = beta2;
    o->eps = eps;
    o->clip_grad = clip_grad;
    o->lo = 0;
    o->hi = n;
    o->lo2 = o->hi2 = n;
    o->seg = o->seg2 = NULL;
    o->main = NULL;
    o->exp_avg = mtk_alloc(k, n * sizeof(float), e);
    o->exp_avg_sq = o->exp_avg ? mtk_alloc(k, n * sizeof(float), e) : NULL;
    if (!o->exp_avg_sq || build_pieces(o, e)) {
        mt_adamw_free(o);
        return mt_err_prefix(e, "optimizer state (%zu parameters)", n);
    }
    return 0;
}

void mt_adamw_free(mt_adamw *o)
{
    if (o->exp_avg) mtk_free(o->k, o->exp_avg);
    if (o->exp_avg_sq) mtk_free(o->k, o->exp_avg_sq);
    if (o->main) mtk_free(o->k, o->main);
    o->exp_avg = o->exp_avg_sq = o->main = NULL;
    free(o->seg);
    free(o->seg2);
    o->seg = o->seg2 = NULL;
    o->nseg = o->nseg2 = 0;
}

int mt_adamw_shard(mt_adamw *o, size_t lo, size_t hi, mt_err *e)
{
    size_t n = mt_gpt_num_params(o->model);
    return mt_adamw_shard2(o, lo, hi, n, n, e);
}

int mt_adamw_shard2(mt_adamw *o, size_t lo, size_t hi, size_t lo2, size_t hi2, mt_err *e)
{
    mt_adamw_free(o);
    o->lo = lo;
    o->hi = hi > lo ? hi : lo;
    o->lo2 = lo2;
    o->hi2 = hi2 > lo2 ? hi2 : lo2;
    size_t n = mt_adamw_count(o);
    o->exp_avg = mtk_alloc(o->k, (n ? n : 1) * sizeof(float), e);
    o->exp_avg_sq = o->exp_avg ? mtk_alloc(o->k, (n ? n : 1) * sizeof(float), e) : NULL;
    if (!o->exp_avg_sq || build_pieces(o, e)) return mt_err_prefix(e, "optimizer state (shard of %zu parameters)", n);
    mtk_zero(o->k, o->exp_avg, (n ? n : 1) * sizeof(float));
    mtk_zero(o->k, o->exp_avg_sq, (n ? n : 1) * sizeof(float));
    return 0;
}

int mt_adamw_own_master(mt_adamw *o, mt_err *e)
{
    if (o->main || mt_adamw_whole(o) || !mt_gpt_work(o->model) || !mt_gpt_params(o->model)) return 0;
    size_t n = mt_adamw_count(o), n1 = o->hi - o->lo;
    o->main = mtk_alloc(o->k, (n ? n : 1) * sizeof(float), e);
    if (!o->main) return mt_err_prefix(e, "fp32 master parameters (shard of %zu)", n);
    mtk_copy(o->k, o->main, mt_gpt_params(o->model) + o->lo, n1 * sizeof(float));
    if (n > n1) mtk_copy(o->k, o->main + n1, mt_gpt_params(o->model) + o->lo2, (n - n1) * sizeof(float));
    if (mt_gpt_drop_master(o->model, e)) {
        mtk_free(o->k, o->main);
        o->main = NULL;
        return -1;
    }
    return 0;
}

float *mt_adamw_master(mt_adamw *o) { return o->main ? o->main : mt_gpt_params(o->model) + o->lo; }

double mt_adamw_step(mt_adamw *o, double lr, double wd) { return mt_adamw_step_unscale(o, lr, wd, 1.0); }

double mt_adamw_step_unscale(mt_adamw *o, double lr, double wd, double unscale)
{
    double norm = sqrt(mtk_sumsq(o->k, mt_gpt_grads(o->model), mt_gpt_num_params(o->model))) * unscale;
    return mt_adamw_update(o, lr, wd, norm, unscale);
}

double mt_adamw_update(mt_adamw *o, double lr, double wd, double norm, double unscale)
{
    float *g = mt_gpt_grads(o->model), *p = mt_adamw_master(o);
    if (!isfinite(norm)) return norm;
    double coef = 1.0;
    if (o->clip_grad > 0) {
        double c = o->clip_grad / (norm + 1e-6);
        if (c < 1.0) coef = c;
    }
    float scale = (float)(coef * unscale);
    o->step++;
    /* unsharded, and with the optimizer's own master, the update also writes the working copy (one pass
     * over memory instead of two); otherwise a shard's caller refreshes it once the parameters are
     * all-gathered (mt_gpt_params_changed) */
    const bool whole = mt_adamw_whole(o);
    mtk_act *work = whole || o->main ? mt_gpt_work(o->model) : NULL;
    size_t n1 = o->hi - o->lo;
    mtk_act *work1 = work && o->main ? (mtk_act *)((char *)work + o->lo * mtk_act_size(o->k)) : work;
    mtk_adamw_multi(o->k, p, work1, g + o->lo, o->exp_avg, o->exp_avg_sq, o->seg, o->nseg, (float)lr,
                    (float)o->beta1, (float)o->beta2, (float)o->eps, (float)wd, (int)o->step, scale);
    if (o->nseg2) {   /* the second range: its master and moments follow the first's */
        float *p2 = o->main ? o->main + n1 : mt_gpt_params(o->model) + o->lo2;
        mtk_act *work2 = work ? (mtk_act *)((char *)work + o->lo2 * mtk_act_size(o->k)) : NULL;
        mtk_adamw_multi(o->k, p2, work2, g + o->lo2, o->exp_avg + n1, o->exp_avg_sq + n1, o->seg2, o->nseg2,
                        (float)lr, (float)o->beta1, (float)o->beta2, (float)o->eps, (float)wd, (int)o->step, scale);
    }
    if (o->main) {
        mt_gpt_kept_from(o->model, o->main, o->lo, o->hi);
        if (o->hi2 > o->lo2) mt_gpt_kept_from(o->model, o->main + n1, o->lo2, o->hi2);
    }
    return norm;
}
