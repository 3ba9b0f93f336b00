/* reshard.c: writing an opened model as a checkpoint of another tensor/pipeline layout (see reshard.h). */
#include "ckpt/reshard.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/checkpoint.h"
#include "model/layout.h"

/* One tensor of one target rank: a slice of a whole tensor of the source. */
typedef struct slice_src {
    mt_model_ckpt *mc;
    const mt_layout_tensor *lt;   /* the target rank's tensor */
    const mt_layout_tensor *w;    /* the whole tensor (one-rank layout of the target's padding) */
    const char *moment;           /* NULL: the weights; ".exp_avg" or ".exp_avg_sq" */
    float *whole;                 /* shared buffer of the largest whole tensor */
    int *done, total;
    mt_ckpt_progress *progress;
} slice_src;

static int slice_fill(void *ctx, const mt_ckpt_tensor *t, float *dst, mt_err *e)
{
    slice_src *x = ctx;
    const mt_layout_tensor *lt = x->lt, *w = x->w;
    (void)t;
    int rc = x->moment ? mt_model_read_optim(x->mc, w->name, x->moment, w->ndim, w->global_shape, x->whole, e)
                       : mt_model_read_tensor(x->mc, w->name, w->ndim, w->global_shape, x->whole, e);
    if (rc) return -1;
    mt_layout_slice(lt, x->whole, dst);
    ++*x->done;
    if (x->progress) x->progress(*x->done, x->total);
    return 0;
}

/* mt_ckpt_save_ranks_ex's hook, run when every rank's files are written and before anything is installed:
 * the source held nothing but what was read (a tensor of another model fails the save, and no tracker or
 * directory of it appears under --save). */
typedef struct all_read {
    mt_model_ckpt *mc;
    int with_optim;
} all_read;

static int check_all_read(const char *tmp, void *arg, mt_err *e)
{
    all_read *x = arg;
    (void)tmp;
    return mt_model_check_all_read(x->mc, e) || (x->with_optim && mt_model_check_all_read_optim(x->mc, e)) ? -1 : 0;
}

int mt_ckpt_write_layout(mt_model_ckpt *mc, const char *save, int64_t it, int tp, int pp, int ep, int etp,
                         const json_t *meta, int with_optim, mt_ckpt_progress *progress, mt_err *e)
{
    mt_model_arch a = mc->arch;
    int d = mc->a.make_vocab_size_divisible_by;
    a.padded_vocab_size = mt_gpt_padded_vocab(mc->vocab_size, d, tp);
    if (ep < 1) ep = 1;
    if (ep > 1 && !a.num_experts) return mt_err_set(e, "%s: an expert-parallel size (%d) for a model without experts", mc->dir, ep);
    if (etp > 0 && tp % etp)
        return mt_err_set(e, "expert tensor size %d: it must divide the tensor size (%d)", etp, tp);
    if (etp > 0 && etp != tp && !a.num_experts)
        return mt_err_set(e, "%s: an expert tensor size (%d) for a model without experts", mc->dir, etp);
    /* an expert tensor size below tp: the experts split over etp (whole with 1), every (tensor rank, expert rank)
     * pair written, which any data-parallel size a run resumes with finds its own in */
    int grouped = etp > 0 && etp < tp;
    int n = tp * pp * ep, rc = 0, done = 0, total = 0;   /* rank i: (stage, expert rank, tensor rank) */
    mt_layout whole, *l = mt_xcalloc((size_t)n, sizeof *l);
    mt_layout_part one = {0, 1, 0, 1, 1, 0, 1, 0, 0};
    if (mt_layout_build(&a, &one, &whole, e)) {
        free(l);
        return -1;
    }
    size_t most = 1;
    for (int i = 0; i < whole.n; i++)
        if (whole.t[i].numel > most) most = whole.t[i].numel;
    for (int i = 0; i < n && !rc; i++) {
        mt_layout_part part = {i % tp, tp, i / (tp * ep), pp, 1, (i / tp) % ep, ep, grouped ? (i % tp) % etp : 0,
                               grouped ? etp : 0};
        if (mt_layout_build(&a, &part, &l[i], e)) rc = -1;
        else total += l[i].n * (with_optim ? 3 : 1);
    }
    mt_ckpt_rank *ranks = mt_xcalloc((size_t)n, sizeof *ranks);
    char (*names)[32] = mt_xcalloc((size_t)n, sizeof *names);
    slice_src **srcs = mt_xcalloc((size_t)n, sizeof *srcs);
    char (**ons)[200] = mt_xcalloc((size_t)n, sizeof *ons);
    float *buf = mt_xmalloc(most * sizeof(float));
    for (int i = 0; i < n && !rc; i++) {
        int nt = l[i].n, per = with_optim ? 3 : 1;
        mt_ckpt_tensor *ct = mt_xcalloc((size_t)nt * (size_t)per, sizeof *ct);
        slice_src *src = mt_xcalloc((size_t)nt * (size_t)per, sizeof *src);
        char (*on)[200] = mt_xcalloc((size_t)nt * 2 + 1, sizeof *on);
        for (int j = 0; j < nt; j++) {
            const mt_layout_tensor *lt = &l[i].t[j];
            /* the head copy of tied embeddings is a slice of the word embeddings */
            mt_tensor_kind k = lt->kind == MT_T_OUTPUT && a.tied_embeddings ? MT_T_WORD_EMB : lt->kind;
            const mt_layout_tensor *w = mt_layout_get_expert(&whole, lt->layer, k, lt->expert);
            for (int m = 0; m < per; m++) {
                int q = m * nt + j;
                const char *moment = m == 0 ? NULL : m == 1 ? ".exp_avg" : ".exp_avg_sq";
                src[q] = (slice_src){mc, lt, w, moment, buf, &done, total, progress};
                if (m) snprintf(on[(m - 1) * nt + j], sizeof *on, "%s%s", lt->name, moment);
                ct[q] = (mt_ckpt_tensor){.name = m ? on[(m - 1) * nt + j] : lt->name, .ndim = lt->ndim,
                                         .shape = {lt->local_shape[0], lt->local_shape[1]}, .fill = slice_fill,
                                         .fill_ctx = &src[q]};
            }
        }
        mt_ckpt_rank_name_ep(names[i], sizeof *names, i % tp, i / (tp * ep), pp, (i / tp) % ep, ep);
        json_t *m = json_deep_copy(meta), *args = json_object_get(m, "args");
        json_object_set_new(args, "tensor-model-parallel-size", json_integer(tp));
        json_object_set_new(args, "pipeline-model-parallel-size", json_integer(pp));
        if (a.num_experts) json_object_set_new(args, "expert-model-parallel-size", json_integer(ep));
        if (grouped) json_object_set_new(args, "expert-tensor-parallel-size", json_integer(etp));
        else json_object_del(args, "expert-tensor-parallel-size");   /* the tensor size */
        json_object_del(args, "num-layers-per-virtual-pipeline-stage");   /* written without model chunks */
        ranks[i] = (mt_ckpt_rank){names[i], ct, nt, with_optim ? ct + nt : NULL, with_optim ? 2 * nt : 0, m};
        srcs[i] = src;
        ons[i] = on;
    }
    all_read check = {mc, with_optim};
    if (!rc) rc = mt_ckpt_save_ranks_ex(save, it, ranks, n, check_all_read, &check, e);
    for (int i = 0; i < n; i++) {
        free((void *)ranks[i].model);
        free(srcs[i]);
        free(ons[i]);
        json_decref(ranks[i].meta);
        mt_layout_free(&l[i]);
    }
    free(srcs);
    free(ons);
    free(ranks);
    free(names);
    free(buf);
    free(l);
    mt_layout_free(&whole);
    return rc;
}

int mt_ckpt_reshard(mt_model_ckpt *mc, const char *save, int tp, int pp, int ep, int etp, mt_ckpt_progress *progress,
                    int *with_optim, mt_err *e)
{
    if (mc->hf) return mt_err_set(e, "%s: a Hugging Face directory, not a checkpoint", mc->dir);
    if (mt_ckpt_check_new_save_dir(save, e)) return -1;
    int opt = mt_model_has_optim(mc);
    json_t *meta = json_deep_copy(mc->meta);
    /* distributed-optimizer shards become each rank's optim.safetensors */
    json_object_del(json_object_get(meta, "optimizer"), "distributed");
    int rc = mt_ckpt_write_layout(mc, save, mc->iteration, tp, pp, ep, etp, meta, opt, progress, e);
    json_decref(meta);
    if (with_optim) *with_optim = opt;
    return rc;
}
