/* megatron_convert.c: a Megatron-LM checkpoint to an mt checkpoint (see megatron_convert.h). */
#include "ckpt/megatron_convert.h"

#include <stdio.h>
#include <string.h>

#include "ckpt/checkpoint.h"
#include "ckpt/megatron_args.h"

int mt_meg_open(mt_model_ckpt *mc, mt_meg_dir *m, const char *dir, int tp, const char *vocab_file,
                const char *merge_file, int no_optim, mt_err *e)
{
    memset(mc, 0, sizeof *mc);
    if (mt_meg_dir_open(m, dir, e)) return -1;
    const char *first = m->r[0].path;
    int64_t rows;
    json_t *args = mt_meg_args(m->args, first, &rows, e);
    if (!args) {
        mt_meg_dir_close(m);
        return -1;
    }
    /* the rows Megatron padded to kept whole: its padding multiple is make_vocab_size_divisible_by times its
     * tensor size (any other padding: the rows themselves). The divisor written is that multiple over the
     * target's tensor size, so that the target pads to the same rows (a Megatron TP 2 run with 128 is an mt
     * TP 2 run with 128); where the target's size does not divide it, the multiple itself: the one-rank view
     * has the rows and the target pads further with zero rows, as mt's resharding does */
    const mt_pk *dv = mt_pk_get(m->args, "make_vocab_size_divisible_by");
    int64_t md = dv && dv->kind == MT_PK_INT && dv->i > 0 ? dv->i : 128, unit = md * m->tp;
    int rc = 0;
    if (rows < 1 || rows > (1 << 30) || unit > (1 << 30))
        rc = mt_err_set(e, "%s: args.padded_vocab_size %lld", first, (long long)rows);
    if (!rc && rows % unit) unit = rows;
    int64_t d = unit % tp == 0 ? unit / tp : unit;
    json_object_set_new(args, "make-vocab-size-divisible-by", json_integer(d));
    /* the tokenizer files given in place of the args' are the checkpoint's from now on */
    if (vocab_file) json_object_set_new(args, "vocab-file", json_string(vocab_file));
    if (merge_file) json_object_set_new(args, "merge-file", json_string(merge_file));
    json_object_set_new(args, "tensor-model-parallel-size", json_integer(tp));
    json_object_set_new(args, "pipeline-model-parallel-size", json_integer(1));
    mc->meta = json_pack("{s:o}", "args", args);
    mc->dir = m->dir;
    mt_model_open_opts o = {.iteration = MT_CKPT_LATEST, .vocab_file = vocab_file, .merge_file = merge_file,
                            .vocab_only = true};
    if (!rc) rc = mt_model_open_args(mc, &o, e);
    if (!rc && mt_gpt_padded_vocab(mc->vocab_size, (int)unit, 1) != rows)
        rc = mt_err_set(e, "%s: the tokenizer's %d tokens do not pad to the checkpoint's %lld vocabulary rows", first,
                        mc->vocab_size, (long long)rows);
    mt_model_arch a = mc->arch;
    a.padded_vocab_size = (int)rows;
    mc->arch = a;
    if (!rc) rc = mt_meg_dir_layout(m, &a, e);
    if (!rc && !no_optim) rc = mt_meg_dir_optim(m, e);
    mc->meg = m;
    if (rc) mt_meg_close(mc, m);
    return rc;
}

void mt_meg_close(mt_model_ckpt *mc, mt_meg_dir *m)
{
    json_t *meta = mc->meta;
    mt_model_close(mc);
    json_decref(meta);
    mt_meg_dir_close(m);
}

int mt_meg_import_ckpt(mt_model_ckpt *mc, const char *save, int tp, int pp, int ep, int etp, mt_ckpt_progress *progress,
                       mt_err *e)
{
    mt_meg_dir *m = mc->meg;
    if (!m) return mt_err_set(e, "%s: not a Megatron-LM checkpoint", mc->dir);
    if (mt_ckpt_check_new_save_dir(save, e)) return -1;
    int64_t it = m->iteration;
    json_t *meta = mt_meg_state(m->root, m->args, it == MT_CKPT_RELEASE ? 0 : it, m->r[0].path, e);
    if (!meta) return -1;
    json_object_set(meta, "args", mc->args);
    if (m->has_optim) {
        json_object_set_new(meta, "optimizer", json_pack("{s:s,s:I,s:f,s:f,s:f}", "type", "adamw", "step",
                                                         (json_int_t)m->step, "beta1", m->beta1, "beta2", m->beta2,
                                                         "eps", m->eps));
        if (m->has_scaler)
            json_object_set_new(meta, "loss_scaler",
                                json_pack("{s:f,s:I,s:I,s:b}", "scale", m->scale, "growth_tracker",
                                          (json_int_t)m->growth_tracker, "hysteresis_tracker",
                                          (json_int_t)m->hysteresis_tracker, "dynamic", 1));
    }
    json_object_set_new(meta, "converted_from",
                        json_pack("{s:s,s:s,s:i,s:i}", "format", "megatron", "dir", m->dir, "tensor-model-parallel-size",
                                  m->tp, "pipeline-model-parallel-size", m->pp));
    /* every tensor of every rank is read while saving, and the sources' leftovers checked before installing */
    int rc = mt_ckpt_write_layout(mc, save, it, tp, pp, ep, etp, meta, m->has_optim, progress, e);
    json_decref(meta);
    return rc;
}
