/* fuzz_hf_dir.c: a Hugging Face GPT-2 directory as mt-ckpt-convert --from hf and mt-generate open it:
 * "config.json" FZ_SEP "model.safetensors.index.json" FZ_SEP "shard 1" FZ_SEP "shard 2". With an empty
 * index part, shard 1 is model.safetensors; else the shards are model-0000{1,2}-of-00002.safetensors.
 * Every tensor of the GPT2LMHeadModel that config.json describes is then read as float32 and the
 * files' names checked against them. */
#include "fuzz.h"

#include "ckpt/hf_dir.h"
#include "ckpt/hf_gpt2.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fz_part p[4];
    fz_split(data, size, p, 4);
    char cmd[4300];
    snprintf(cmd, sizeof cmd, "%s/hf", fz_dir());
    static const char *const names[] = {"hf/config.json", "hf/model.safetensors.index.json", "hf/model.safetensors",
                                        "hf/model-00001-of-00002.safetensors", "hf/model-00002-of-00002.safetensors"};
    for (int i = 0; i < 5; i++) unlink(fz_path(names[i]));
    fz_write(names[0], p[0].p, p[0].n);
    if (p[1].n) {
        fz_write(names[1], p[1].p, p[1].n);
        fz_write(names[3], p[2].p, p[2].n);
        fz_write(names[4], p[3].p, p[3].n);
    } else {
        fz_write(names[2], p[2].p, p[2].n);
    }
    mt_hf_dir d;
    mt_err e;
    if (mt_hf_dir_open(&d, cmd, &e)) return fz_refused(&e);
    mt_model_arch a = mt_hf_arch(&d.cfg, d.cfg.vocab_size);
    int n;
    mt_hf_tensor *t = mt_hf_tensors(&a, d.cfg.vocab_size, &n, &e);
    if (t) {
        int rc = 0;
        for (int i = 0; i < n && !rc; i++) {
            size_t numel = (size_t)t[i].hf_shape[0] * (size_t)(t[i].ndim == 2 ? t[i].hf_shape[1] : 1);
            float *dst = malloc((numel ? numel : 1) * sizeof(float));
            rc = mt_hf_dir_read(&d, &t[i], dst, &e);
            free(dst);
        }
        if (rc || mt_hf_dir_check_names(&d, t, n, &e)) fz_refused(&e);
        free(t);
    } else {
        fz_refused(&e);
    }
    mt_hf_dir_close(&d);
    return 0;
}
