/* fuzz_ckpt.c: a checkpoint directory as mt-eval, mt-generate and mt-train --load open it:
 * "latest_checkpointed_iteration.txt" FZ_SEP "meta.json" FZ_SEP "model.safetensors" (the last two in
 * iter_0000001/mp_rank_00). The tracker and the metadata are read and checked, then every tensor of
 * the model the metadata describe is read as float32 and the file checked to hold nothing else. */
#include "fuzz.h"

#include "ckpt/checkpoint.h"
#include "ckpt/open_model.h"
#include "model/layout.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fz_part p[3];
    fz_split(data, size, p, 3);
    fz_write("ck/latest_checkpointed_iteration.txt", p[0].p, p[0].n);
    fz_write("ck/iter_0000001/mp_rank_00/meta.json", p[1].p, p[1].n);
    fz_write("ck/iter_0000001/mp_rank_00/model.safetensors", p[2].p, p[2].n);
    char dir[4200];
    snprintf(dir, sizeof dir, "%s", fz_path("ck"));
    mt_model_open_opts o = {.iteration = MT_CKPT_LATEST};
    mt_model_ckpt mc;
    mt_err e;
    if (mt_model_open(&mc, dir, &o, &e)) return fz_refused(&e);
    mt_layout l;
    mt_layout_part one = {0, 1, 0, 1, 1, 0, 1, 0, 0};
    if (!mt_layout_build(&mc.arch, &one, &l, &e)) {
        int rc = 0;
        for (int i = 0; i < l.n && !rc; i++) {
            const mt_layout_tensor *t = &l.t[i];
            size_t numel = (size_t)t->global_shape[0] * (size_t)(t->ndim == 2 ? t->global_shape[1] : 1);
            float *dst = malloc((numel ? numel : 1) * sizeof(float));
            rc = mt_model_read_tensor(&mc, t->name, t->ndim, t->global_shape, dst, &e);
            free(dst);
        }
        if (rc || mt_model_check_all_read(&mc, &e)) fz_refused(&e);
        mt_layout_free(&l);
    }
    mt_model_close(&mc);
    return 0;
}
