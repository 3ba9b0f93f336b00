/* optimizer.c: AdamW with Megatron's decay groups and global-norm gradient clipping. */
#include "train/optimizer.h"

#include <math.h>
#include <stdbool.h>

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
    o->exp_avg = mtk_alloc(k, n * sizeof(float), e);
    o->exp_avg_sq = o->exp_avg ? mtk_alloc(k, n * sizeof(float), e) : NULL;
    if (!o->exp_avg_sq) {
        if (o->exp_avg) mtk_free(k, o->exp_avg);
        return mt_err_prefix(e, "optimizer state (%zu parameters)", n);
    }
    return 0;
}

void mt_adamw_free(mt_adamw *o)
{
    if (o->exp_avg) mtk_free(o->k, o->exp_avg);
    if (o->exp_avg_sq) mtk_free(o->k, o->exp_avg_sq);
    o->exp_avg = o->exp_avg_sq = NULL;
}

int mt_adamw_shard(mt_adamw *o, size_t lo, size_t hi, mt_err *e)
{
    mt_adamw_free(o);
    size_t n = hi > lo ? hi - lo : 0;
    o->lo = lo;
    o->hi = lo + n;
    o->exp_avg = mtk_alloc(o->k, (n ? n : 1) * sizeof(float), e);
    o->exp_avg_sq = o->exp_avg ? mtk_alloc(o->k, (n ? n : 1) * sizeof(float), e) : NULL;
    if (!o->exp_avg_sq) return mt_err_prefix(e, "optimizer state (shard of %zu parameters)", n);
    mtk_zero(o->k, o->exp_avg, (n ? n : 1) * sizeof(float));
    mtk_zero(o->k, o->exp_avg_sq, (n ? n : 1) * sizeof(float));
    return 0;
}

double mt_adamw_step(mt_adamw *o, double lr, double wd) { return mt_adamw_step_unscale(o, lr, wd, 1.0); }

double mt_adamw_step_unscale(mt_adamw *o, double lr, double wd, double unscale)
{
    double norm = sqrt(mtk_sumsq(o->k, mt_gpt_grads(o->model), mt_gpt_num_params(o->model))) * unscale;
    return mt_adamw_update(o, lr, wd, norm, unscale);
}

double mt_adamw_update(mt_adamw *o, double lr, double wd, double norm, double unscale)
{
    float *g = mt_gpt_grads(o->model), *p = mt_gpt_params(o->model);
    if (!isfinite(norm)) return norm;
    double coef = 1.0;
    if (o->clip_grad > 0) {
        double c = o->clip_grad / (norm + 1e-6);
        if (c < 1.0) coef = c;
    }
    float scale = (float)(coef * unscale);
    o->step++;
    /* unsharded, the update also writes the working copy (one pass over memory instead of two); a shard's
     * caller refreshes it once the parameters are all-gathered (mt_gpt_params_changed) */
    const bool whole = o->lo == 0 && o->hi == mt_gpt_num_params(o->model);
    char *work = whole ? (char *)mt_gpt_work(o->model) : NULL;
    const size_t wsize = mtk_dtype_size(mtk_act_dtype(o->k));
    int nt = mt_gpt_num_tensors(o->model);
    for (int i = 0; i < nt; i++) {
        const mt_gpt_tensor *t = mt_gpt_tensor_at(o->model, i);
        /* the part of the tensor in [lo, hi) (all of it unless sharded) */
        size_t a = t->offset > o->lo ? t->offset : o->lo, b = t->offset + t->numel < o->hi ? t->offset + t->numel : o->hi;
        if (a >= b) continue;
        mtk_adamw_to(o->k, p + a, work ? work + a * wsize : NULL, g + a, o->exp_avg + (a - o->lo),
                     o->exp_avg_sq + (a - o->lo), b - a, (float)lr, (float)o->beta1, (float)o->beta2, (float)o->eps,
                     t->no_decay ? 0.0f : (float)wd, (int)o->step, scale);
    }
    return norm;
}

double mt_params_norm(mtk *k, mt_gpt *model)
{
    return sqrt(mtk_sumsq(k, mt_gpt_params(model), mt_gpt_num_params(model)));
}
