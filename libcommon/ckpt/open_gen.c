/* open_gen.c: opening a trained model for generation (open_gen.h). */
#include "ckpt/open_gen.h"

#include <string.h>

#include "model/device.h"

int mt_gen_model_open(mt_gen_model *m, const mt_gen_open_opts *o, mt_err *e)
{
    memset(m, 0, sizeof *m);
    mt_model_open_opts mo = {.iteration = o->iteration, .vocab_file = o->vocab_file, .merge_file = o->merge_file};
    if (mt_model_open(&m->mc, o->load_dir, &mo, e)) return -1;
    if (!m->mc.tok.bpe) {
        mt_err_set(e, "%s: the checkpoint has no BPE vocabulary (NullTokenizer): pass --vocab-file and --merge-file",
                   m->mc.dir);
        mt_model_close(&m->mc);
        return -1;
    }
    m->k = mt_device_open(o->device, o->threads, o->act, e);
    if (!m->k || mt_model_load_weights(&m->mc, m->k, NULL, e)) {
        mt_gen_model_close(m);
        return -1;
    }
    return 0;
}

void mt_gen_model_close(mt_gen_model *m)
{
    mt_model_close(&m->mc);
    if (m->k) mtk_close(m->k);
    memset(m, 0, sizeof *m);
}
