/* test_sim_model.c: a tiny GPT trained for a few steps on the sim backend (the CUDA kernels under the
 * SIMT simulator) and on the cpu backend, from the same initial weights and batches, with dropout on:
 * the losses and pre-clip gradient norms of every step agree. Both backends round the same values to the
 * same storage but sum in other orders. Measured clean gaps (relative, loss / norm): fp32 1.6e-8 / 3.9e-8,
 * bf16 5.0e-7 / 5.6e-5, fp16 1.7e-6 / 3.1e-5; the limits are 20-60x those: fp32 1e-6 / 1e-6, bf16
 * 1e-5 / 1e-3, fp16 3e-5 / 1e-3. Skipped only when the build has no simulator (no CUDA headers); a
 * model or optimizer that cannot be set up on it fails. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels.h"
#include "model/gpt.h"
#include "train/optimizer.h"
#include "t.h"

enum { STEPS = 4, B = 3, T = 16 };

static mt_gpt_config tiny(void)
{
    mt_gpt_config c = {0};
    c.num_layers = 2;
    c.hidden_size = 32;
    c.num_heads = 4;
    c.ffn_hidden_size = 128;
    c.seq_length = T;
    c.max_position_embeddings = T;
    c.vocab_size = 61;
    c.padded_vocab_size = mt_gpt_padded_vocab(61, 16, 1);
    c.layernorm_epsilon = 1e-5f;
    c.init_method_std = 0.02;
    c.hidden_dropout = 0.1f;
    c.attention_dropout = 0.1f;
    return c;
}

/* STEPS training steps on backend `name`: losses and pre-clip gradient norms; -1 with *e filled when the
 * backend, the model or the optimizer cannot be set up. */
static int train(const char *name, mtk_dtype act, double *loss, double *gnorm, mt_err *err)
{
    mt_err e;
    mtk *k = mtk_open(&(mtk_config){.backend = name, .threads = 2, .act_dtype = act}, &e);
    if (!k) {
        *err = e;
        return -1;
    }
    mt_gpt_config c = tiny();
    mt_gpt *m = mt_gpt_create(k, &c, MT_GPT_TRAIN, &e);
    mt_gpt_ctx *x = m ? mt_gpt_ctx_new(m, B, &e) : NULL;
    mt_adamw o;
    if (!x || mt_adamw_init(&o, k, m, 0.9, 0.95, 1e-8, 1.0, &e)) {
        *err = e;
        return -1;
    }
    mt_gpt_init(m, 1234);
    uint64_t s = 99;
    for (int step = 0; step < STEPS; step++) {
        int32_t tok[B * T], tgt[B * T];
        for (int i = 0; i < B * T; i++) {
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            tok[i] = (int32_t)((s >> 33) % 61);
            tgt[i] = (int32_t)((s >> 17) % 61);
        }
        mt_gpt_zero_grad(m);
        mt_gpt_set_dropout(x, 1, 1000 + (uint64_t)step);
        mt_gpt_loss l;
        if (mt_gpt_forward(x, tok, tgt, NULL, B, T, NULL, &l, &e) || mt_gpt_backward(x, 1.0 / l.count, &e)) {
            fprintf(stderr, "%s: %s\n", name, e.msg);
            loss[step] = gnorm[step] = NAN;
            continue;
        }
        loss[step] = l.sum / l.count;
        gnorm[step] = mt_adamw_step(&o, 3e-3, 0.1);
    }
    mt_adamw_free(&o);
    mt_gpt_ctx_free(x);
    mt_gpt_free(m);
    mtk_close(k);
    return 0;
}

static void compare(mtk_dtype act, double tol_loss, double tol_norm)
{
    double lc[STEPS], nc[STEPS], ls[STEPS], ns[STEPS];
    mt_err e;
    if (train("sim", act, ls, ns, &e) < 0) {
        /* only a build without the simulator is a skip; any other setup failure fails */
        if (strstr(e.msg, "unknown kernel backend")) T_SKIP("this build has no sim backend (no CUDA headers: make deps)");
        T_FAILF("sim: %s", e.msg);
        return;
    }
    if (train("cpu", act, lc, nc, &e) < 0) {
        T_FAILF("cpu: %s", e.msg);
        return;
    }
    double el = 0, en = 0;
    for (int i = 0; i < STEPS; i++) {
        double a = fabs(ls[i] - lc[i]) / fabs(lc[i]), b = fabs(ns[i] - nc[i]) / fabs(nc[i]);
        el = a > el || a != a ? a : el;
        en = b > en || b != b ? b : en;
    }
    printf("# %s: largest relative difference sim - cpu: loss %.2e, grad norm %.2e (first loss %.6f)\n",
           mtk_dtype_name(act), el, en, lc[0]);
    if (!(el <= tol_loss)) T_FAILF("%s: loss differs by %.3g > %g", mtk_dtype_name(act), el, tol_loss);
    if (!(en <= tol_norm)) T_FAILF("%s: grad norm differs by %.3g > %g", mtk_dtype_name(act), en, tol_norm);
}

/* Generation on sim: a prompt of 11 tokens runs as one pass (the operations and kernel launches of a
 * one-token step, none per prompt token), and every step, the prompt's and each decoded token's, waits
 * for the device once (the copy of the logits back). */
TEST(generation_one_pass_one_sync)
{
    mt_err e;
    mtk *k = mtk_open(&(mtk_config){.backend = "sim", .threads = 2, .act_dtype = MTK_F32}, &e);
    if (!k) {
        if (strstr(e.msg, "unknown kernel backend")) T_SKIP("this build has no sim backend (no CUDA headers: make deps)");
        T_FAILF("sim: %s", e.msg);
        return;
    }
    mt_gpt_config c = tiny();
    mt_gpt *m = mt_gpt_create(k, &c, MT_GPT_INFER_ONLY, &e);
    mt_gpt_infer *g = m ? mt_gpt_infer_new(m, 2, T, &e) : NULL;
    if (!g) {
        T_FAILF("sim: %s", e.msg);
        return;
    }
    mt_gpt_init(m, 7);
    enum { P = 11 };
    int32_t prompt[2 * P], next[2] = {5, 9};
    for (int i = 0; i < 2 * P; i++) prompt[i] = (int32_t)((i * 7 + 3) % 61);
    float *logits = malloc(2 * (size_t)c.padded_vocab_size * sizeof *logits);
    mtk_stats s0 = mtk_stats_get(k), s1, s2, s3;
    int rc = mt_gpt_infer_step(g, prompt, P, logits, &e);
    s1 = mtk_stats_get(k);
    rc = rc || mt_gpt_infer_step(g, next, 1, logits, &e);
    s2 = mtk_stats_get(k);
    rc = rc || mt_gpt_infer_step(g, next, 1, logits, &e);
    s3 = mtk_stats_get(k);
    T_CHECK(rc == 0);
    printf("# prompt of %d tokens: %llu syncs, %llu ops, %llu launches; a decoded token: %llu syncs, %llu ops, "
           "%llu launches\n", P, (unsigned long long)(s1.syncs - s0.syncs), (unsigned long long)(s1.ops - s0.ops),
           (unsigned long long)(s1.launches - s0.launches), (unsigned long long)(s2.syncs - s1.syncs),
           (unsigned long long)(s2.ops - s1.ops), (unsigned long long)(s2.launches - s1.launches));
    T_EQ_INT((int)(s1.syncs - s0.syncs), 1);
    T_EQ_INT((int)(s2.syncs - s1.syncs), 1);
    T_EQ_INT((int)(s3.syncs - s2.syncs), 1);
    T_EQ_INT((int)(s1.ops - s0.ops), (int)(s2.ops - s1.ops));
    T_EQ_INT((int)(s1.launches - s0.launches), (int)(s2.launches - s1.launches));
    free(logits);
    mt_gpt_infer_free(g);
    mt_gpt_free(m);
    mtk_close(k);
}

TEST(fp32) { compare(MTK_F32, 1e-6, 1e-6); }
TEST(bf16) { compare(MTK_BF16, 1e-5, 1e-3); }
TEST(fp16) { compare(MTK_F16, 3e-5, 1e-3); }

T_MAIN_BEGIN("test_sim_model")
RUN(fp32);
RUN(bf16);
RUN(fp16);
RUN(generation_one_pass_one_sync);
T_MAIN_END
