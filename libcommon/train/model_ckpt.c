/* model_ckpt.c: loads a GPT model's weights from a checkpoint reader. */
#include "train/model_ckpt.h"

#include <stdlib.h>

int mt_gpt_load_weights(mt_gpt *m, mtk *k, mt_ckpt_reader *r, mt_err *e)
{
    size_t np = mt_gpt_num_params(m);
    float *host = mt_xmalloc(np * sizeof(float));
    int rc = 0;
    for (int i = 0; i < mt_gpt_num_tensors(m) && !rc; i++) {
        const mt_gpt_tensor *g = mt_gpt_tensor_at(m, i);
        rc = mt_ckpt_read_tensor(r, MT_CKPT_MODEL, g->name, g->ndim, g->shape, host + g->offset, e);
    }
    if (!rc) rc = mt_ckpt_check_all_read(r, MT_CKPT_MODEL, e);
    if (!rc) {
        mtk_to_device(k, mt_gpt_params(m), host, np * sizeof(float));
        mt_gpt_params_changed(m);
    }
    free(host);
    return rc;
}
