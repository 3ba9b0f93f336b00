/* optimizer.c: AdamW with Megatron's decay groups and global-norm gradient clipping. */
#include "train/optimizer.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>

/* o->seg: the tensors' parts in [lo, hi), adjacent ones with the same decay merged, offsets from lo: the
 * whole update is then one multi-tensor call. */
static int build_pieces(mt_adamw *o, mt_err *e)
{
    int nt = mt_gpt_num_tensors(o->model);
    free(o->seg);
    o->nseg = 0;
    o->seg = malloc((size_t)(nt > 0 ? nt : 1) * sizeof *o->seg);
    if (!o->seg) return mt_err_set(e, "out of memory");
    for (int i = 0; i < nt; i++) {
        const mt_gpt_tensor *t = mt_gpt_tensor_at(o->model, i);
        size_t a = t->offset > o->lo ? t->offset : o->lo;
        size_t b = t->offset + t->numel < o->hi ? t->offset + t->numel : o->hi;
        if (a >= b) continue;   /* the tensor is outside the shard */
        mtk_adamw_seg *last = o->nseg ? &o->seg[o->nseg - 1] : NULL;
        if (last && last->decay == !t->no_decay && last->off + last->n == a - o->lo) last->n += b - a;
        else o->seg[o->nseg++] = (mtk_adamw_seg){.off = a - o->lo, .n = b - a, .decay = !t->no_decay};
    }
    return 0;
}

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
    o->seg = NULL;
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
    o->seg = NULL;
    o->nseg = 0;
}

int mt_adamw_shard(mt_adamw *o, size_t lo, size_t hi, mt_err *e)
{
    mt_adamw_free(o);
    size_t n = hi > lo ? hi - lo : 0;
    o->lo = lo;
    o->hi = lo + n;
    o->exp_avg = mtk_alloc(o->k, (n ? n : 1) * sizeof(float), e);
    o->exp_avg_sq = o->exp_avg ? mtk_alloc(o->k, (n ? n : 1) * sizeof(float), e) : NULL;
    if (!o->exp_avg_sq || build_pieces(o, e)) return mt_err_prefix(e, "optimizer state (shard of %zu parameters)", n);
    mtk_zero(o->k, o->exp_avg, (n ? n : 1) * sizeof(float));
    mtk_zero(o->k, o->exp_avg_sq, (n ? n : 1) * sizeof(float));
    return 0;
}

int mt_adamw_own_master(mt_adamw *o, mt_err *e)
{
    const bool whole = o->lo == 0 && o->hi == mt_gpt_num_params(o->model);
    if (o->main || whole || !mt_gpt_work(o->model) || !mt_gpt_params(o->model)) return 0;
    size_t n = o->hi - o->lo;
    o->main = mtk_alloc(o->k, (n ? n : 1) * sizeof(float), e);
    if (!o->main) return mt_err_prefix(e, "fp32 master parameters (shard of %zu)", n);
    mtk_copy(o->k, o->main, mt_gpt_params(o->model) + o->lo, n * sizeof(float));
    if (mt_gpt_drop_master(o->model, e)) {
        mtk_free(o->k, o->main);
        o->main = NULL;
        return -1;
    }
    return 0;
}

float *mt_adamw_master(mt_adamw *o) { return o->main ? o->main : mt_gpt_params(o->model) + o->lo; }

double mt_adamw_master_sumsq(mt_adamw *o)
{
    if (o->main) return mtk_sumsq(o->k, o->main, o->hi - o->lo);
    return mtk_sumsq(o->k, mt_gpt_params(o->model), mt_gpt_num_params(o->model));
}

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
    const bool whole = o->lo == 0 && o->hi == mt_gpt_num_params(o->model);
    mtk_act *work = whole || o->main ? mt_gpt_work(o->model) : NULL;
    if (work && o->main) work = (mtk_act *)((char *)work + o->lo * mtk_act_size(o->k));
    mtk_adamw_multi(o->k, p, work, g + o->lo, o->exp_avg, o->exp_avg_sq, o->seg, o->nseg, (float)lr,
                    (float)o->beta1, (float)o->beta2, (float)o->eps, (float)wd, (int)o->step, scale);
    if (o->main) mt_gpt_kept_from(o->model, o->main, o->lo, o->hi);
    return norm;
}
