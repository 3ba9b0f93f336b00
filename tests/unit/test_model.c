/* test_model.c: the GPT model: configuration checks, padded vocabulary, tensor table, initialization,
 * finite-difference gradients of every tensor (with and without dropout), loss mask, loss scale and
 * accumulation, dropout determinism, memory report; plus a --dump DIR mode that writes a tiny model's
 * parameters, batch, loss, gradients and ten AdamW steps for tests/pipeline/model-torch.sh.
 */
#include <errno.h>
#include <math.h>
#include <inttypes.h>
#include <stdint.h>
#include <sys/stat.h>

#include "io/npy.h"
#include "kernels.h"
#include "model/fp8.h"
#include "model/gpt.h"
#include "t.h"

static mtk *K;

/* The model as these tests drive it: weights with gradients and one activation context created
 * together; fwd returns the masked mean loss (NaN on an error) and bwd(m, s) backpropagates s times
 * that mean, as a trainer with 1/s micro-batches does. */
static struct {
    mt_gpt *m;
    mt_gpt_ctx *x;
    double count;
} reg[16];
static int slot(const mt_gpt *m)
{
    for (int i = 0; i < 16; i++)
        if (reg[i].m == m) return i;
    return -1;
}
/* fp8: the FP8 recipe of its products (NULL: none) */
static mt_gpt *create_fp8(mtk *k, const mt_gpt_config *c, int max_batch, const mt_fp8_recipe *fp8, mt_err *e)
{
    int i = slot(NULL);
    mt_gpt *m = i < 0 ? NULL : mt_gpt_create(k, c, MT_GPT_TRAIN, e);
    if (!m) return NULL;
    if (mt_gpt_set_fp8(m, fp8, NULL, e)) {
        mt_gpt_free(m);
        return NULL;
    }
    mt_gpt_ctx *x = mt_gpt_ctx_new(m, max_batch, e);
    if (!x) {
        mt_gpt_free(m);
        return NULL;
    }
    reg[i].m = m, reg[i].x = x, reg[i].count = 0;
    return m;
}
static mt_gpt *create(mtk *k, const mt_gpt_config *c, int max_batch, mt_err *e)
{
    return create_fp8(k, c, max_batch, NULL, e);
}
static void destroy(mt_gpt *m)
{
    int i = slot(m);
    if (i >= 0) mt_gpt_ctx_free(reg[i].x), reg[i].m = NULL, reg[i].x = NULL;
    mt_gpt_free(m);
}
static double fwd(mt_gpt *m, const int32_t *tok, const int32_t *tgt, const float *mask, int B, int T, float *tl)
{
    mt_err e;
    mt_gpt_loss l;
    int i = slot(m);
    if (mt_gpt_forward(reg[i].x, tok, tgt, mask, B, T, tl, &l, &e)) return NAN;
    reg[i].count = l.count;
    return l.count != 0 ? l.sum / l.count : 0.0;
}
static void bwd(mt_gpt *m, float s)
{
    mt_err e;
    int i = slot(m);
    (void)mt_gpt_backward(reg[i].x, reg[i].count != 0 ? (double)s / reg[i].count : 0.0, &e);   /* no forward: no-op */
}
static void set_dropout(mt_gpt *m, int training, uint64_t key) { mt_gpt_set_dropout(reg[slot(m)].x, training, key); }

static mt_gpt_config tiny_config(void)
{
    mt_gpt_config c = {0};
    c.num_layers = 2;
    c.hidden_size = 8;
    c.num_heads = 2;
    c.ffn_hidden_size = 16;
    c.seq_length = 5;
    c.max_position_embeddings = 6;
    c.vocab_size = 11;
    c.padded_vocab_size = mt_gpt_padded_vocab(11, 8, 1);
    c.layernorm_epsilon = 1e-5f;
    c.init_method_std = 0.02;
    c.hidden_dropout = 0.1f;
    c.attention_dropout = 0.1f;
    return c;
}

/* Small deterministic generator for test data (not the model's). */
static uint64_t lcg_state = 88172645463325252ull;
static double urand(void)
{
    lcg_state = lcg_state * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(lcg_state >> 11) / 9007199254740992.0;
}

static float *host_params(mt_gpt *m)
{
    size_t n = mt_gpt_num_params(m);
    float *h = malloc(n * sizeof *h);
    mtk_to_host(K, h, mt_gpt_params(m), n * sizeof *h);
    return h;
}
static float *host_grads(mt_gpt *m)
{
    size_t n = mt_gpt_num_params(m);
    float *h = malloc(n * sizeof *h);
    mtk_to_host(K, h, mt_gpt_grads(m), n * sizeof *h);
    return h;
}

/* Every parameter ~ U(-a, a) (LayerNorm weights around 1), so that no gradient is degenerate. */
static void randomize(mt_gpt *m, double a)
{
    float *h = host_params(m);
    for (int i = 0; i < mt_gpt_num_tensors(m); i++) {
        const mt_gpt_tensor *t = mt_gpt_tensor_at(m, i);
        int ln_w = strstr(t->name, "layernorm.weight") != NULL;
        for (size_t j = 0; j < t->numel; j++) h[t->offset + j] = (float)((ln_w ? 1 : 0) + a * (2 * urand() - 1));
    }
    mtk_to_device(K, mt_gpt_params(m), h, mt_gpt_num_params(m) * sizeof *h);
    free(h);
}

static void random_batch(int32_t *tok, int32_t *tgt, int n, int vocab)
{
    for (int i = 0; i < n; i++) {
        tok[i] = (int32_t)(urand() * vocab);
        tgt[i] = (int32_t)(urand() * vocab);
    }
}

TEST(padded_vocab)
{
    T_EQ_INT(mt_gpt_padded_vocab(50257, 128, 1), 50304);
    T_EQ_INT(mt_gpt_padded_vocab(50257, 128, 2), 50432);
    T_EQ_INT(mt_gpt_padded_vocab(67, 64, 1), 128);
    T_EQ_INT(mt_gpt_padded_vocab(128, 128, 1), 128);
    T_EQ_INT(mt_gpt_padded_vocab(129, 128, 1), 256);
    T_EQ_INT(mt_gpt_padded_vocab(11, 1, 1), 11);
}

TEST(config_checks)
{
    mt_err e;
    mt_gpt_config c = tiny_config();
    T_EQ_INT(mt_gpt_config_check(&c, &e), 0);
    c.hidden_size = 768;
    c.num_heads = 5;
    T_EQ_INT(mt_gpt_config_check(&c, &e), -1);
    T_EQ_STR(e.msg, "--num-attention-heads (5) must divide --hidden-size (768)");
    c = tiny_config();
    c.seq_length = 7;
    T_EQ_INT(mt_gpt_config_check(&c, &e), -1);
    T_EQ_STR(e.msg, "--seq-length (7) must not exceed --max-position-embeddings (6)");
    struct {
        int field;
        const char *flag;
    } cases[] = {{0, "--num-layers"}, {1, "--hidden-size"}, {2, "--num-attention-heads"}, {3, "--ffn-hidden-size"},
                 {4, "--max-position-embeddings"}, {5, "--seq-length"}, {6, "--make-vocab-size-divisible-by"},
                 {7, "--norm-epsilon"}, {8, "--init-method-std"}, {9, "--hidden-dropout"},
                 {10, "--attention-dropout"}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        c = tiny_config();
        switch (cases[i].field) {
        case 0: c.num_layers = 0; break;
        case 1: c.hidden_size = -8; break;
        case 2: c.num_heads = 0; break;
        case 3: c.ffn_hidden_size = 0; break;
        case 4: c.max_position_embeddings = 0; break;
        case 5: c.seq_length = 0; break;
        case 6: c.padded_vocab_size = 10; break;
        case 7: c.layernorm_epsilon = 0; break;
        case 8: c.init_method_std = -1; break;
        case 9: c.hidden_dropout = 1; break;
        case 10: c.attention_dropout = -0.5f; break;
        }
        T_EQ_INT(mt_gpt_config_check(&c, &e), -1);
        if (!strstr(e.msg, cases[i].flag)) T_FAILF("case %zu: message '%s' does not name %s", i, e.msg, cases[i].flag);
    }
    c = tiny_config();
    c.num_heads = 3;
    T_CHECK(create(K, &c, 1, &e) == NULL);
    T_CHECK(strstr(e.msg, "--num-attention-heads (3)") != NULL);
    c = tiny_config();
    T_CHECK(create(K, &c, 0, &e) == NULL);
}

TEST(tensor_table)
{
    mt_err e;
    mt_gpt_config c = tiny_config();
    c.num_layers = 3;
    c.ffn_hidden_size = 24;
    mt_gpt *m = create(K, &c, 2, &e);
    if (!m) {
        T_FAILF("model not built: %s", e.msg);
        return;
    }
    int L = 3, h = 8, f = 24, V = 16, P = 6;
    T_EQ_INT(mt_gpt_num_tensors(m), 2 + 12 * L + 2);
    size_t expect_total = (size_t)V * h + (size_t)P * h + (size_t)L * (4 * h + 3 * h * h + 3 * h + h * h + h + f * h + f + h * f + h) + 2 * h;
    T_EQ_INT(mt_gpt_num_params(m), expect_total);
    size_t off = 0;
    for (int i = 0; i < mt_gpt_num_tensors(m); i++) {
        const mt_gpt_tensor *t = mt_gpt_tensor_at(m, i);
        T_EQ_INT(t->offset, off);
        T_EQ_INT(t->numel, t->ndim == 2 ? t->shape[0] * t->shape[1] : t->shape[0]);
        int bias = strlen(t->name) > 5 && !strcmp(t->name + strlen(t->name) - 5, ".bias");
        T_EQ_INT(t->no_decay, bias || t->ndim == 1);
        T_EQ_INT(t->no_decay, t->ndim == 1);
        T_CHECK(mt_gpt_tensor_find(m, t->name) == t);
        off += t->numel;
    }
    T_CHECK(mt_gpt_tensor_at(m, -1) == NULL && mt_gpt_tensor_at(m, mt_gpt_num_tensors(m)) == NULL);
    T_CHECK(mt_gpt_tensor_find(m, "language_model.nothing") == NULL);
    const mt_gpt_tensor *t = mt_gpt_tensor_at(m, 0);
    T_EQ_STR(t->name, "language_model.embedding.word_embeddings.weight");
    T_EQ_INT(t->shape[0], V);
    T_EQ_INT(t->shape[1], h);
    t = mt_gpt_tensor_at(m, 1);
    T_EQ_STR(t->name, "language_model.embedding.position_embeddings.weight");
    T_EQ_INT(t->shape[0], P);
    static const char *names[12] = {"input_layernorm.weight", "input_layernorm.bias",
                                    "self_attention.query_key_value.weight", "self_attention.query_key_value.bias",
                                    "self_attention.dense.weight", "self_attention.dense.bias",
                                    "post_attention_layernorm.weight", "post_attention_layernorm.bias",
                                    "mlp.dense_h_to_4h.weight", "mlp.dense_h_to_4h.bias", "mlp.dense_4h_to_h.weight",
                                    "mlp.dense_4h_to_h.bias"};
    int64_t shapes[12][2] = {{h, 0}, {h, 0}, {3 * h, h}, {3 * h, 0}, {h, h}, {h, 0},
                             {h, 0}, {h, 0}, {f, h},     {f, 0},     {h, f}, {h, 0}};
    for (int l = 0; l < L; l++)
        for (int j = 0; j < 12; j++) {
            t = mt_gpt_tensor_at(m, 2 + 12 * l + j);
            char want[128];
            snprintf(want, sizeof want, "language_model.encoder.layers.%d.%s", l, names[j]);
            T_EQ_STR(t->name, want);
            T_EQ_INT(t->ndim, shapes[j][1] ? 2 : 1);
            T_EQ_INT(t->shape[0], shapes[j][0]);
            if (shapes[j][1]) T_EQ_INT(t->shape[1], shapes[j][1]);
        }
    T_EQ_STR(mt_gpt_tensor_at(m, 2 + 12 * L)->name, "language_model.encoder.final_layernorm.weight");
    T_EQ_STR(mt_gpt_tensor_at(m, 3 + 12 * L)->name, "language_model.encoder.final_layernorm.bias");
    T_EQ_INT(mt_gpt_tensor_at(m, 3 + 12 * L)->offset + h, mt_gpt_num_params(m));
    T_CHECK(mt_gpt_get_config(m)->num_layers == 3);

    /* Memory: parameters and gradients are one float each; activations grow with the batch. */
    size_t pb, gb, ab1, ab2;
    mt_gpt_memory(m, &pb, &gb, &ab1);
    T_EQ_INT(pb, mt_gpt_num_params(m) * 4);
    T_EQ_INT(gb, pb);
    mt_gpt *m4 = create(K, &c, 4, &e);
    mt_gpt_memory(m4, NULL, NULL, &ab2);
    T_CHECK(ab1 > 0 && ab2 > ab1 && ab2 <= 2 * ab1 + 1);
    destroy(m4);
    destroy(m);
}

static void stats(const float *x, size_t n, double *mean, double *std)
{
    double s = 0, s2 = 0;
    for (size_t i = 0; i < n; i++) s += x[i];
    *mean = s / n;
    for (size_t i = 0; i < n; i++) s2 += (x[i] - *mean) * (x[i] - *mean);
    *std = sqrt(s2 / n);
}

TEST(init_statistics)
{
    mt_err e;
    mt_gpt_config c = tiny_config();
    c.num_layers = 4;
    c.hidden_size = 64;
    c.num_heads = 4;
    c.ffn_hidden_size = 256;
    c.vocab_size = 500;
    c.padded_vocab_size = mt_gpt_padded_vocab(500, 128, 1);
    c.max_position_embeddings = 64;
    mt_gpt *m = create(K, &c, 1, &e);
    if (!m) {
        T_FAILF("model not built: %s", e.msg);
        return;
    }
    mt_gpt_init(m, 0);
    float *p = host_params(m);
    /* numpy.random.RandomState(0).normal() == 1.764052345967664, then 0.4001572083672233 */
    T_EQ_INT(p[0] == (float)(0.02 * 1.764052345967664), 1);
    T_EQ_INT(p[1] == (float)(0.02 * 0.4001572083672233), 1);
    double out_std = 0.02 / sqrt(8.0);
    for (int i = 0; i < mt_gpt_num_tensors(m); i++) {
        const mt_gpt_tensor *t = mt_gpt_tensor_at(m, i);
        double mu, sd;
        stats(p + t->offset, t->numel, &mu, &sd);
        if (t->ndim == 2) {
            int out = strstr(t->name, "dense.weight") || strstr(t->name, "dense_4h_to_h.weight");
            double want = out ? out_std : 0.02;
            double tol = 4 * want / sqrt(2.0 * t->numel) + 1e-12;   /* ~4 standard errors of the sample std */
            if (fabs(sd - want) > tol) T_FAILF("%s: std %g, expected %g", t->name, sd, want);
            if (fabs(mu) > 4 * want / sqrt((double)t->numel)) T_FAILF("%s: mean %g", t->name, mu);
        } else {
            double want = strstr(t->name, "layernorm.weight") ? 1.0 : 0.0;
            for (size_t j = 0; j < t->numel; j++)
                if (p[t->offset + j] != want) {
                    T_FAILF("%s[%zu] = %g, expected %g", t->name, j, p[t->offset + j], want);
                    break;
                }
        }
    }
    /* The padded vocabulary rows are drawn like the others. */
    const mt_gpt_tensor *wte = mt_gpt_tensor_at(m, 0);
    double mu, sd;
    stats(p + wte->offset + (size_t)500 * 64, (size_t)12 * 64, &mu, &sd);
    T_CHECK(sd > 0.015 && sd < 0.025);
    /* Same seed, same parameters; another seed, others. */
    mt_gpt_init(m, 0);
    float *q = host_params(m);
    T_CHECK(!memcmp(p, q, mt_gpt_num_params(m) * sizeof *p));
    mt_gpt_init(m, 1);
    free(q);
    q = host_params(m);
    T_CHECK(memcmp(p, q, wte->numel * sizeof *p) != 0);
    free(p);
    free(q);
    destroy(m);
}

/* Central differences against the backward pass for a sample of entries of every tensor. Entries
 * whose gradient is below 1% of the tensor's largest are compared in absolute terms only. */
static double grad_check(mt_gpt *m, const int32_t *tok, const int32_t *tgt, const float *mask, int B, int T,
                         int per_tensor, double *worst_abs)
{
    mt_gpt_zero_grad(m);
    double loss = fwd(m, tok, tgt, mask, B, T, NULL);
    bwd(m, 1.0f);
    float *g = host_grads(m), *p = host_params(m);
    double worst = 0, wabs = 0, eps = 1e-2;
    for (int i = 0; i < mt_gpt_num_tensors(m); i++) {
        const mt_gpt_tensor *t = mt_gpt_tensor_at(m, i);
        double gmax = 0;
        for (size_t j = 0; j < t->numel; j++) gmax = fmax(gmax, fabs(g[t->offset + j]));
        for (int s = 0; s < per_tensor; s++) {
            size_t j = t->offset;
            /* the largest gradient first, then random entries */
            if (s == 0) {
                for (size_t q = 0; q < t->numel; q++)
                    if (fabs(g[t->offset + q]) == gmax) {
                        j = t->offset + q;
                        break;
                    }
            } else {
                j = t->offset + (size_t)(urand() * t->numel);
            }
            float keep = p[j];
            p[j] = (float)(keep + eps);
            mtk_to_device(K, mt_gpt_params(m) + j, p + j, sizeof(float));
            double lp = fwd(m, tok, tgt, mask, B, T, NULL);
            p[j] = (float)(keep - eps);
            mtk_to_device(K, mt_gpt_params(m) + j, p + j, sizeof(float));
            double lm = fwd(m, tok, tgt, mask, B, T, NULL);
            p[j] = keep;
            mtk_to_device(K, mt_gpt_params(m) + j, p + j, sizeof(float));
            double fd = (lp - lm) / (2 * eps), an = g[j];
            double err = fabs(fd - an);
            wabs = fmax(wabs, err);
            if (fabs(an) >= 0.01 * gmax && gmax > 0) worst = fmax(worst, err / fmax(fabs(an), fabs(fd)));
            if (err > 1e-2 * fmax(fabs(an), 0.01 * gmax) + 1e-4)
                T_FAILF("%s[%zu]: backward %.6g, central difference %.6g (loss %.6g)", t->name, j - t->offset, an, fd,
                        loss);
            if (getenv("MT_TEST_VERBOSE"))
                fprintf(stderr, "%-60s %6zu  bwd %12.6g  fd %12.6g\n", t->name, j - t->offset, an, fd);
        }
    }
    free(g);
    free(p);
    *worst_abs = wabs;
    return worst;
}

TEST(gradients_match_central_differences)
{
    mt_err e;
    mt_gpt_config c = tiny_config();
    int B = 2, T = 5;
    mt_gpt *m = create(K, &c, B, &e);
    if (!m) {
        T_FAILF("model not built: %s", e.msg);
        return;
    }
    randomize(m, 0.3);
    int32_t tok[10], tgt[10];
    random_batch(tok, tgt, B * T, c.padded_vocab_size);
    float mask[10] = {1, 1, 0, 1, 1, 1, 1, 1, 0.5f, 1};
    double wabs, worst = grad_check(m, tok, tgt, mask, B, T, 8, &wabs);
    if (getenv("MT_TEST_VERBOSE")) fprintf(stderr, "worst relative %.3g, worst absolute %.3g\n", worst, wabs);
    /* T shorter than seq_length: the unused position rows get no gradient */
    mt_gpt_zero_grad(m);
    fwd(m, tok, tgt, NULL, 2, 3, NULL);
    bwd(m, 1.0f);
    float *g = host_grads(m);
    const mt_gpt_tensor *wpe = mt_gpt_tensor_at(m, 1);
    for (size_t j = 3 * 8; j < wpe->numel; j++) T_CHECK(g[wpe->offset + j] == 0);
    T_CHECK(g[wpe->offset] != 0);
    free(g);
    (void)grad_check(m, tok, tgt, NULL, 2, 3, 3, &wabs);
    destroy(m);
}

TEST(gradients_with_dropout)
{
    mt_err e;
    mt_gpt_config c = tiny_config();
    c.hidden_dropout = 0.2f;
    c.attention_dropout = 0.3f;
    int B = 2, T = 5;
    mt_gpt *m = create(K, &c, B, &e);
    if (!m) {
        T_FAILF("model not built: %s", e.msg);
        return;
    }
    randomize(m, 0.3);
    int32_t tok[10], tgt[10];
    random_batch(tok, tgt, B * T, c.vocab_size);
    set_dropout(m, 1, 12345);
    double wabs, worst = grad_check(m, tok, tgt, NULL, B, T, 8, &wabs);
    if (getenv("MT_TEST_VERBOSE")) fprintf(stderr, "dropout: worst relative %.3g, worst absolute %.3g\n", worst, wabs);
    destroy(m);
}

TEST(loss_mask_scale_and_accumulation)
{
    mt_err e;
    mt_gpt_config c = tiny_config();
    int B = 2, T = 5, N = 10;
    mt_gpt *m = create(K, &c, B, &e);
    if (!m) {
        T_FAILF("model not built: %s", e.msg);
        return;
    }
    randomize(m, 0.3);
    size_t n = mt_gpt_num_params(m);
    int32_t tok[10], tgt[10], tgt2[10];
    random_batch(tok, tgt, N, c.vocab_size);
    float mask[10] = {1, 0, 1, 1, 0, 1, 1, 0, 1, 1}, tl[10];
    double loss = fwd(m, tok, tgt, mask, B, T, tl), want = 0;
    for (int i = 0; i < N; i++) {
        want += tl[i] * mask[i];
        T_CHECK(tl[i] > 0 && isfinite(tl[i]));
    }
    T_NEAR(loss, want / 7, 1e-12);
    double all = fwd(m, tok, tgt, NULL, B, T, NULL);
    want = 0;
    for (int i = 0; i < N; i++) want += tl[i];
    T_NEAR(all, want / N, 1e-6);

    /* Targets under a zero mask change neither the loss nor the gradient. */
    mt_gpt_zero_grad(m);
    fwd(m, tok, tgt, mask, B, T, NULL);
    bwd(m, 1.0f);
    float *g1 = host_grads(m);
    memcpy(tgt2, tgt, sizeof tgt2);
    for (int i = 0; i < N; i++)
        if (mask[i] == 0) tgt2[i] = (tgt[i] + 3) % c.vocab_size;
    mt_gpt_zero_grad(m);
    T_NEAR(fwd(m, tok, tgt2, mask, B, T, NULL), loss, 1e-12);
    bwd(m, 1.0f);
    float *g2 = host_grads(m);
    T_CHECK(!memcmp(g1, g2, n * sizeof *g1));
    /* ... but they do without the mask */
    mt_gpt_zero_grad(m);
    fwd(m, tok, tgt2, NULL, B, T, NULL);
    bwd(m, 1.0f);
    free(g2);
    g2 = host_grads(m);
    T_CHECK(memcmp(g1, g2, n * sizeof *g1) != 0);

    /* Backward accumulates: two passes at scale 0.25 equal one at 0.5; the scale is linear. */
    mt_gpt_zero_grad(m);
    for (int r = 0; r < 2; r++) {
        fwd(m, tok, tgt, mask, B, T, NULL);
        bwd(m, 0.25f);
    }
    free(g2);
    g2 = host_grads(m);
    double md = 0, mx = 0;
    for (size_t i = 0; i < n; i++) {
        md = fmax(md, fabs(2 * g2[i] - g1[i]));
        mx = fmax(mx, fabs(g1[i]));
    }
    T_CHECK(mx > 0 && md <= 1e-6 * mx);
    /* A second backward without a forward adds nothing. */
    bwd(m, 1.0f);
    float *g3 = host_grads(m);
    T_CHECK(!memcmp(g2, g3, n * sizeof *g2));
    /* All-zero mask: loss 0, no gradient. */
    float zero[10] = {0};
    mt_gpt_zero_grad(m);
    T_EQ_INT(fwd(m, tok, tgt, zero, B, T, NULL) == 0.0, 1);
    bwd(m, 1.0f);
    T_EQ_INT(mtk_sumsq(K, mt_gpt_grads(m), n) == 0.0, 1);
    /* Out-of-range tokens, targets or sizes: NaN. */
    int32_t bad[10];
    memcpy(bad, tok, sizeof bad);
    bad[3] = c.padded_vocab_size;
    T_CHECK(isnan(fwd(m, bad, tgt, NULL, B, T, NULL)));
    bad[3] = -1;
    T_CHECK(isnan(fwd(m, tok, bad, NULL, B, T, NULL)));
    T_CHECK(isnan(fwd(m, tok, tgt, NULL, B + 1, T, NULL)));
    T_CHECK(isnan(fwd(m, tok, tgt, NULL, 1, T + 1, NULL)));
    free(g1);
    free(g2);
    free(g3);
    destroy(m);
}

TEST(dropout_modes)
{
    mt_err e;
    mt_gpt_config c = tiny_config();
    c.hidden_dropout = 0.2f;
    c.attention_dropout = 0.2f;
    int B = 2, T = 5, N = 10;
    mt_gpt *m = create(K, &c, B, &e);
    if (!m) {
        T_FAILF("model not built: %s", e.msg);
        return;
    }
    randomize(m, 0.3);
    size_t n = mt_gpt_num_params(m);
    int32_t tok[10], tgt[10];
    random_batch(tok, tgt, N, c.vocab_size);
    float a[10], b[10];
    double l0 = fwd(m, tok, tgt, NULL, B, T, a);   /* default: evaluation mode */
    double l1 = fwd(m, tok, tgt, NULL, B, T, b);
    T_CHECK(l0 == l1 && !memcmp(a, b, sizeof a));
    set_dropout(m, 0, 777);
    T_CHECK(fwd(m, tok, tgt, NULL, B, T, b) == l0 && !memcmp(a, b, sizeof a));

    set_dropout(m, 1, 777);
    double d1 = fwd(m, tok, tgt, NULL, B, T, a);
    mt_gpt_zero_grad(m);
    bwd(m, 1.0f);
    float *g1 = host_grads(m);
    double d2 = fwd(m, tok, tgt, NULL, B, T, b);
    mt_gpt_zero_grad(m);
    bwd(m, 1.0f);
    float *g2 = host_grads(m);
    T_CHECK(d1 == d2 && !memcmp(a, b, sizeof a));
    T_CHECK(!memcmp(g1, g2, n * sizeof *g1));
    T_CHECK(d1 != l0);
    set_dropout(m, 1, 778);
    double d3 = fwd(m, tok, tgt, NULL, B, T, b);
    T_CHECK(d3 != d1 && memcmp(a, b, sizeof a) != 0);

    /* Sites draw different masks, and keys different seeds. */
    T_CHECK(mt_gpt_dropout_seed(777, 0) != mt_gpt_dropout_seed(777, 1));
    T_CHECK(mt_gpt_dropout_seed(777, 1) != mt_gpt_dropout_seed(778, 1));
    T_CHECK(mt_gpt_dropout_seed(0, 0) != mt_gpt_dropout_seed(1, 0));

    /* Attention dropout alone and hidden dropout alone each change the loss. */
    c.hidden_dropout = 0;
    mt_gpt *ma = create(K, &c, B, &e);
    c.hidden_dropout = 0.2f;
    c.attention_dropout = 0;
    mt_gpt *mh = create(K, &c, B, &e);
    float *p = host_params(m);
    mtk_to_device(K, mt_gpt_params(ma), p, n * sizeof *p);
    mtk_to_device(K, mt_gpt_params(mh), p, n * sizeof *p);
    set_dropout(ma, 1, 777);
    set_dropout(mh, 1, 777);
    double la = fwd(ma, tok, tgt, NULL, B, T, NULL), lh = fwd(mh, tok, tgt, NULL, B, T, NULL);
    T_CHECK(la != l0 && lh != l0 && la != lh && la != d1 && lh != d1);
    /* p = 0 in training mode is evaluation */
    c.hidden_dropout = 0;
    mt_gpt *m0 = create(K, &c, B, &e);
    mtk_to_device(K, mt_gpt_params(m0), p, n * sizeof *p);
    set_dropout(m0, 1, 777);
    T_CHECK(fwd(m0, tok, tgt, NULL, B, T, NULL) == l0);
    destroy(m0);
    destroy(ma);
    destroy(mh);
    free(p);
    free(g1);
    free(g2);
    destroy(m);
}

/* Generation with a KV cache gives the logits of a full forward pass at every position: a prompt of 2
 * tokens, then one token at a time, for 2 sequences at once; with GPT-2's options and with the LLaMA
 * family's (rope: the rotary position of a cached step; grouped-query attention: the cache holds the
 * groups' keys and values; SwiGLU, RMSNorm, no biases, an untied output layer). */
static void kv_cache_case(mt_gpt_config c)
{
    c.init_method_std = 0.3;
    mt_err e;
    mt_gpt *m = create(K, &c, 2, &e);
    T_CHECK(m != NULL);
    mt_gpt_init(m, 7);
    enum { B = 2, T = 5 };
    int32_t tok[B * T], tgt[B * T];
    float tl[B * T];
    for (int i = 0; i < B * T; i++) tok[i] = (int32_t)(urand() * c.vocab_size), tgt[i] = (int32_t)(urand() * c.vocab_size);
    T_CHECK(!isnan(fwd(m, tok, tgt, NULL, B, T, tl)));
    mt_gpt_infer *s = mt_gpt_infer_new(m, B, T, &e);
    T_CHECK(s != NULL);
    int V = c.padded_vocab_size;
    float *logits = mt_xmalloc((size_t)B * V * sizeof(float));
    double worst = 0;
    for (int pos = 0; pos < T;) {
        int n = pos == 0 ? 2 : 1;
        int32_t step[B * 2];
        for (int b = 0; b < B; b++)
            for (int j = 0; j < n; j++) step[b * n + j] = tok[b * T + pos + j];
        T_CHECK(mt_gpt_infer_step(s, step, n, logits, &e) == 0);
        pos += n;
        T_EQ_INT(mt_gpt_infer_len(s), pos);
        for (int b = 0; b < B; b++) {   /* -log softmax(logits)[target] of the last new token */
            const float *x = logits + (size_t)b * V;
            double mx = -INFINITY, se = 0;
            for (int v = 0; v < V; v++) mx = x[v] > mx ? x[v] : mx;
            for (int v = 0; v < V; v++) se += exp(x[v] - mx);
            double want = tl[b * T + pos - 1], got = mx + log(se) - x[tgt[b * T + pos - 1]];
            if (fabs(got - want) > worst) worst = fabs(got - want);
        }
    }
    T_CHECK(worst < 1e-5);
    int32_t one[B] = {1, 2};
    T_CHECK(mt_gpt_infer_step(s, one, 1, logits, &e) == -1);   /* the cache is full */
    T_CHECK(strstr(e.msg, "exceed the context") != NULL);
    mt_gpt_infer_reset(s);
    T_EQ_INT(mt_gpt_infer_len(s), 0);
    T_CHECK(mt_gpt_infer_step(s, one, 1, logits, &e) == 0);
    mt_gpt_infer_free(s);
    T_CHECK(mt_gpt_infer_new(m, 1, c.max_position_embeddings + 1, &e) == NULL);
    free(logits);
    destroy(m);
}
TEST(kv_cache_matches_forward) { kv_cache_case(tiny_config()); }
TEST(kv_cache_matches_forward_llama)
{
    mt_gpt_config c = tiny_config();
    c.norm = MT_NORM_RMSNORM, c.position = MT_POS_ROPE, c.rotary_base = 10000, c.rotary_percent = 1.0;
    c.mlp = MT_MLP_SWIGLU, c.num_query_groups = 1, c.untie_embeddings_and_output_weights = 1;
    c.disable_bias_linear = 1;
    kv_cache_case(c);
}

/* Generation over a paged KV cache: three sequences (9, 6 and 12 tokens) stepped together as a server
 * would, prompt chunks beside single decoded tokens, blocks of 4 positions taken as the slots grow and a
 * finished slot's blocks reused by a new sequence; every run's logits equal those of the sequence generated
 * alone with mt_gpt_infer (to 1e-5 of the largest: the products run over other rows), with GPT-2's and
 * the LLaMA family's options. A run beyond its slot's blocks and a pool too small are refused. */
static void paged_case(mt_gpt_config c)
{
    c.init_method_std = 0.3;
    c.max_position_embeddings = c.seq_length = 12;
    mt_err e;
    mt_gpt *m = create(K, &c, 1, &e);
    T_CHECK(m != NULL);
    mt_gpt_init(m, 5);
    enum { S = 4, LMAX = 12 };
    static const int len[S] = {9, 6, 12, 7};
    const int V = c.padded_vocab_size;
    int32_t tok[S][LMAX];
    float *want[S];
    mt_gpt_infer *one = mt_gpt_infer_new(m, 1, LMAX, &e);
    T_CHECK(one != NULL);
    for (int s = 0; s < S; s++) {   /* each alone, a token at a time: the logits at every position */
        want[s] = mt_xmalloc((size_t)len[s] * V * sizeof(float));
        mt_gpt_infer_reset(one);
        for (int p = 0; p < len[s]; p++) {
            tok[s][p] = (int32_t)(urand() * c.vocab_size);
            T_CHECK(mt_gpt_infer_step(one, &tok[s][p], 1, want[s] + (size_t)p * V, &e) == 0);
        }
    }
    mt_gpt_infer_free(one);
    mt_gpt_paged *pg = mt_gpt_paged_new(m, 3, 16, LMAX, 4, 9, &e);
    T_CHECK(pg != NULL);
    /* the steps: {sequence, slot, first position, count} runs; sequence 3 takes slot 1 after sequence 1 ends */
    static const int steps[][3][4] = {
        {{0, 0, 0, 5}, {1, 1, 0, 3}, {-1}},   {{0, 0, 5, 1}, {1, 1, 3, 3}, {2, 2, 0, 4}},
        {{2, 2, 4, 6}, {0, 0, 6, 1}, {-1}},   {{0, 0, 7, 2}, {3, 1, 0, 7}, {2, 2, 10, 1}},
        {{2, 2, 11, 1}, {-1}, {-1}}};
    float *logits = mt_xmalloc((size_t)3 * V * sizeof(float));
    double worst = 0, scale = 0;
    int checked = 0;
    for (size_t st = 0; st < sizeof steps / sizeof steps[0]; st++) {
        mt_gpt_run runs[3];
        int32_t in[16];
        int n = 0, N = 0;
        for (int u = 0; u < 3 && steps[st][u][0] >= 0; u++) {
            const int *r = steps[st][u];
            if (r[0] == 3 && r[2] == 0) mt_gpt_paged_release(pg, 1);   /* sequence 1 has ended */
            T_CHECK(mt_gpt_paged_reserve(pg, r[1], r[2] + r[3]) == 0);
            runs[n++] = (mt_gpt_run){r[1], r[2], r[3]};
            for (int t = 0; t < r[3]; t++) in[N++] = tok[r[0]][r[2] + t];
        }
        T_CHECK(mt_gpt_paged_step(pg, runs, n, in, logits, &e) == 0);
        for (int u = 0; u < n; u++) {
            const int *r = steps[st][u];
            const float *w = want[r[0]] + (size_t)(r[2] + r[3] - 1) * V;
            for (int v = 0; v < V; v++) {
                double d = fabs((double)logits[(size_t)u * V + v] - w[v]);
                if (d > worst || d != d) worst = d;
                if (fabs(w[v]) > scale) scale = fabs(w[v]);
            }
            checked++;
        }
    }
    T_EQ_INT(checked, 11);
    /* measured: 1.4e-7 (GPT-2) and 2.5e-7 (LLaMA) of the largest logit; 1e-5 leaves a margin of 40 */
    if (getenv("MT_TEST_VERBOSE")) fprintf(stderr, "paged vs alone: %.3g of %.3g\n", worst, scale);
    T_CHECK(scale > 0 && worst <= 1e-5 * scale);
    /* slot 0 holds 9 positions in 3 blocks: a run to position 12 is refused; the pool has 9 blocks */
    mt_gpt_run past = {0, 9, 4};
    int32_t four[4] = {1, 2, 3, 4};
    T_CHECK(mt_gpt_paged_step(pg, &past, 1, four, logits, &e) == -1);
    T_CHECK(strstr(e.msg, "beyond the 3 blocks") != NULL);
    T_EQ_INT(mt_gpt_paged_free_blocks(pg), 1);   /* 3 + 2 + 3 of 9 blocks held */
    mt_gpt_paged_release(pg, 2);
    T_EQ_INT(mt_gpt_paged_free_blocks(pg), 4);
    T_CHECK(mt_gpt_paged_reserve(pg, 2, 13) == -1);   /* beyond max_len */
    mt_gpt_paged_free(pg);
    pg = mt_gpt_paged_new(m, 2, 16, LMAX, 4, 4, &e);   /* a pool of 4 blocks */
    T_CHECK(pg != NULL && mt_gpt_paged_reserve(pg, 0, 12) == 0);
    T_CHECK(mt_gpt_paged_reserve(pg, 1, 8) == -1);    /* 2 blocks wanted, 1 free: none taken */
    T_EQ_INT(mt_gpt_paged_free_blocks(pg), 1);
    mt_gpt_paged_free(pg);
    for (int s = 0; s < S; s++) free(want[s]);
    free(logits);
    destroy(m);
}
TEST(paged_matches_kv_cache) { paged_case(tiny_config()); }
TEST(paged_matches_kv_cache_llama)
{
    mt_gpt_config c = tiny_config();
    c.norm = MT_NORM_RMSNORM, c.position = MT_POS_ROPE, c.rotary_base = 10000, c.rotary_percent = 1.0;
    c.mlp = MT_MLP_SWIGLU, c.num_query_groups = 1, c.untie_embeddings_and_output_weights = 1;
    c.disable_bias_linear = 1;
    paged_case(c);
}

/* Two micro-batches in flight (two contexts, as a pipeline schedule keeps them) give the gradients of
 * running them one after the other, bit for bit; a model without gradients refuses a backward pass. */
TEST(contexts_in_flight)
{
    mt_gpt_config c = tiny_config();
    c.hidden_dropout = c.attention_dropout = 0;
    mt_err e;
    mt_gpt *m = mt_gpt_create(K, &c, MT_GPT_TRAIN, &e);
    T_CHECK(m != NULL);
    mt_gpt_init(m, 3);
    mt_gpt_ctx *x1 = mt_gpt_ctx_new(m, 2, &e), *x2 = mt_gpt_ctx_new(m, 2, &e);
    T_CHECK(x1 && x2);
    enum { B = 2, T = 5 };
    int32_t ta[B * T], ga[B * T], tb[B * T], gb[B * T];
    for (int i = 0; i < B * T; i++) {
        ta[i] = (int32_t)(urand() * c.vocab_size), ga[i] = (int32_t)(urand() * c.vocab_size);
        tb[i] = (int32_t)(urand() * c.vocab_size), gb[i] = (int32_t)(urand() * c.vocab_size);
    }
    size_t n = mt_gpt_num_params(m);
    mt_gpt_loss la, lb;
    mt_gpt_zero_grad(m);
    T_CHECK(!mt_gpt_forward(x1, ta, ga, NULL, B, T, NULL, &la, &e) && !mt_gpt_backward(x1, 0.5 / la.count, &e));
    T_CHECK(!mt_gpt_forward(x1, tb, gb, NULL, B, T, NULL, &lb, &e) && !mt_gpt_backward(x1, 0.5 / lb.count, &e));
    float *seq = host_grads(m);
    mt_gpt_zero_grad(m);
    T_CHECK(!mt_gpt_forward(x1, ta, ga, NULL, B, T, NULL, &la, &e) && !mt_gpt_forward(x2, tb, gb, NULL, B, T, NULL, &lb, &e));
    T_CHECK(!mt_gpt_backward(x1, 0.5 / la.count, &e) && !mt_gpt_backward(x2, 0.5 / lb.count, &e));
    float *par = host_grads(m);
    T_CHECK(!memcmp(seq, par, n * sizeof(float)));
    T_CHECK(mt_gpt_backward(x1, 1.0, &e) == -1);   /* one backward per forward */
    mt_gpt_ctx_free(x1);
    mt_gpt_ctx_free(x2);
    mt_gpt_free(m);
    free(seq);
    free(par);

    mt_gpt *mi = mt_gpt_create(K, &c, MT_GPT_INFER_ONLY, &e);
    T_CHECK(mi && mt_gpt_grads(mi) == NULL);
    mt_gpt_ctx *xi = mt_gpt_ctx_new(mi, 1, &e);
    T_CHECK(!mt_gpt_forward(xi, ta, ga, NULL, 1, T, NULL, &la, &e));
    T_CHECK(mt_gpt_backward(xi, 1.0, &e) == -1 && strstr(e.msg, "without gradients"));
    mt_gpt_ctx_free(xi);
    mt_gpt_free(mi);
}

/* The same model on a backend with bf16 activations: fp32 master weights, bf16 working copy and
 * activations, fp32 gradients. Measured clean gaps to fp32 (this model, seed 5): loss 5.0e-4, the worst
 * tensor's gradient 1.5e-2 (relative, the whole tensor's norm); the limits are 10x those. */
#define BF16_LOSS_TOL 5e-3
#define BF16_GRAD_TOL 0.15
TEST(bf16_activations)
{
    mt_gpt_config c = tiny_config();
    c.hidden_dropout = c.attention_dropout = 0;
    c.init_method_std = 0.2;
    mt_err e;
    mtk *kb = mtk_open(&(mtk_config){.backend = "cpu", .act_dtype = MTK_BF16}, &e);
    T_CHECK(kb != NULL);
    mt_gpt *m32 = mt_gpt_create(K, &c, MT_GPT_TRAIN, &e), *m16 = mt_gpt_create(kb, &c, MT_GPT_TRAIN, &e);
    T_CHECK(m32 && m16);
    mt_gpt_init(m32, 5);
    mt_gpt_init(m16, 5);
    mt_gpt_ctx *x32 = mt_gpt_ctx_new(m32, 2, &e), *x16 = mt_gpt_ctx_new(m16, 2, &e);
    T_CHECK(x32 && x16);
    enum { B = 2, T = 5 };
    int32_t tok[B * T], tgt[B * T];
    for (int i = 0; i < B * T; i++) tok[i] = (int32_t)(urand() * c.vocab_size), tgt[i] = (int32_t)(urand() * c.vocab_size);
    mt_gpt_loss l32, l16;
    mt_gpt_zero_grad(m32);
    mt_gpt_zero_grad(m16);
    T_CHECK(!mt_gpt_forward(x32, tok, tgt, NULL, B, T, NULL, &l32, &e) && !mt_gpt_backward(x32, 1.0 / l32.count, &e));
    int r16 = mt_gpt_forward(x16, tok, tgt, NULL, B, T, NULL, &l16, &e);
    if (r16) fprintf(stderr, "bf16: %s\n", e.msg);
    T_CHECK(!r16 && !mt_gpt_backward(x16, 1.0 / l16.count, &e));
    double dl = fabs(l16.sum / l16.count - l32.sum / l32.count) / (l32.sum / l32.count);
    if (!(dl <= BF16_LOSS_TOL)) T_FAILF("bf16 loss %.7g, fp32 %.7g: %.2e apart > %g", l16.sum / l16.count,
                                        l32.sum / l32.count, dl, BF16_LOSS_TOL);
    size_t n = mt_gpt_num_params(m32);
    float *g32 = host_grads(m32), *g16 = mt_xmalloc(n * sizeof(float));
    mtk_to_host(kb, g16, mt_gpt_grads(m16), n * sizeof(float));
    /* every tensor's gradient on its own: |g16 - g32| / |g32| over the tensor (a tensor whose gradient
     * is lost is 1.0 apart, however small it is beside the others) */
    double worst = 0;
    const char *wname = "";
    for (int i = 0; i < mt_gpt_num_tensors(m32); i++) {
        const mt_gpt_tensor *t = mt_gpt_tensor_at(m32, i);
        double d2 = 0, n2 = 0;
        for (size_t j = t->offset; j < t->offset + t->numel; j++) {
            d2 += ((double)g16[j] - g32[j]) * ((double)g16[j] - g32[j]);
            n2 += (double)g32[j] * g32[j];
        }
        if (n2 == 0) continue;   /* padding rows of the vocabulary and the like */
        double r = sqrt(d2 / n2);
        if (r > worst || r != r) worst = r, wname = t->name;
    }
    printf("# bf16 against fp32: loss %.2e apart, worst gradient tensor %.2e apart (%s)\n", dl, worst, wname);
    if (!(worst <= BF16_GRAD_TOL)) T_FAILF("bf16 gradient of %s: %.3g apart from fp32's > %g", wname, worst, BF16_GRAD_TOL);
    size_t pb32, pb16;
    mt_gpt_memory(m32, &pb32, NULL, NULL);
    mt_gpt_memory(m16, &pb16, NULL, NULL);
    T_EQ_INT(pb16, pb32 + n * 2);   /* the bf16 working copy */
    free(g32);
    free(g16);
    mt_gpt_ctx_free(x32);
    mt_gpt_ctx_free(x16);
    mt_gpt_free(m32);
    mt_gpt_free(m16);
    mtk_close(kb);
}

/* ---- --dump DIR: the tiny model for tests/pipeline/model-torch.sh ----
 * DIR/eval, DIR/drop (training mode, dropout 0.1/0.1, key 4242 + step), and DIR/fp8, DIR/fp8max (as drop,
 * the layers' products in FP8, model/fp8.h; two recipes) each get:
 *   meta.txt      key value lines (config, batch, optimizer settings, loss; the FP8 recipe)
 *   table.txt     name offset numel ndim rows cols no_decay, one tensor a line
 *   params.npy    float32 [P] initial parameters (mt_gpt_init seed 1234)
 *   tokens.npy, targets.npy int32 [B,T]; mask.npy float32 [B,T]
 *   tok_losses.npy float32 [B,T]; grads.npy float32 [P] of the masked mean loss
 *   step_tokens.npy, step_targets.npy int32 [S,B,T]; step_mask.npy float32 [S,B,T]
 *   step_losses.npy float64 [S+1]: the loss of step s's batch before its update (key 4242 + s), and last
 *   the loss of batch 0 after all S updates (evaluation mode)
 *   DIR/fp8max's steps take two micro-batches (micro_batches 2): batch s and batch s + 1 (mod S), each
 *   with half of the mean, step_losses the mean of the two;
 *   FP8 only: step_fp8.npy float32 [S+1][mt_gpt_fp8_state_numel]: the FP8 state before step s and, last,
 *   after the last step; step_params.npy, step_grads.npy float32 [S][P]: step s's parameters and gradients
 * Steps are AdamW through mtk_adamw: lr 1e-3, betas 0.9/0.999, eps 1e-8, weight decay 0.1 on
 * tensors that are not no_decay. */
enum { D_B = 3, D_T = 16, D_STEPS = 10 };

static int dump_npy(const char *dir, const char *name, const char *descr, const int64_t *shape, int ndim,
                    const void *data)
{
    char p[1024];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    size_t n = (size_t)mt_npy_itemsize(descr);
    for (int i = 0; i < ndim; i++) n *= (size_t)shape[i];
    mt_err e;
    if (mt_npy_write(p, descr, shape, ndim, data, n, &e)) {
        fprintf(stderr, "%s\n", e.msg);
        return -1;
    }
    return 0;
}

static int dump_variant(const char *dir, int training, const mt_fp8_recipe *fp8)
{
    if (mkdir(dir, 0777) && errno != EEXIST) {
        perror(dir);
        return 1;
    }
    mt_gpt_config c = {0};
    c.num_layers = 2;
    c.hidden_size = 32;
    c.num_heads = 4;
    c.ffn_hidden_size = 128;
    c.seq_length = D_T;
    c.max_position_embeddings = 20;
    c.vocab_size = 67;
    c.padded_vocab_size = mt_gpt_padded_vocab(67, 64, 1);
    c.layernorm_epsilon = 1e-5f;
    c.init_method_std = 0.2;
    c.hidden_dropout = 0.1f;
    c.attention_dropout = 0.1f;
    mt_err e;
    /* fp8max: two micro-batches a step (a weight keeps its first micro-batch's scale) */
    int micro = fp8 && fp8->algo == MTK_AMAX_MAX ? 2 : 1;
    mt_gpt *m = create_fp8(K, &c, D_B, fp8, &e);
    if (!m) {
        fprintf(stderr, "%s\n", e.msg);
        return 1;
    }
    mt_gpt_init(m, 1234);
    size_t n = mt_gpt_num_params(m);
    const int N = D_B * D_T;
    uint64_t key = 4242;
    int32_t tok[D_STEPS][N], tgt[D_STEPS][N];
    float mask[D_STEPS][N];
    lcg_state = 99;
    for (int s = 0; s < D_STEPS; s++) {
        random_batch(tok[s], tgt[s], N, c.vocab_size);
        for (int i = 0; i < N; i++) mask[s][i] = urand() < 0.15 ? 0.0f : 1.0f;
    }

    int rc = 0;
    int64_t shp[3] = {D_STEPS, D_B, D_T}, pshape[1] = {(int64_t)n};
    float *p0 = host_params(m);
    rc |= dump_npy(dir, "params.npy", "<f4", pshape, 1, p0);
    rc |= dump_npy(dir, "tokens.npy", "<i4", shp + 1, 2, tok[0]);
    rc |= dump_npy(dir, "targets.npy", "<i4", shp + 1, 2, tgt[0]);
    rc |= dump_npy(dir, "mask.npy", "<f4", shp + 1, 2, mask[0]);
    rc |= dump_npy(dir, "step_tokens.npy", "<i4", shp, 3, tok);
    rc |= dump_npy(dir, "step_targets.npy", "<i4", shp, 3, tgt);
    rc |= dump_npy(dir, "step_mask.npy", "<f4", shp, 3, mask);

    float tl[N];
    set_dropout(m, training, key);
    mt_gpt_zero_grad(m);
    double loss = fwd(m, tok[0], tgt[0], mask[0], D_B, D_T, tl);
    bwd(m, 1.0f);
    float *g = host_grads(m);
    rc |= dump_npy(dir, "tok_losses.npy", "<f4", shp + 1, 2, tl);
    rc |= dump_npy(dir, "grads.npy", "<f4", pshape, 1, g);

    float *mom = mtk_alloc(K, n * sizeof(float), &e), *var = mtk_alloc(K, n * sizeof(float), &e);
    double losses[D_STEPS + 1];
    /* FP8: the state before each step and after the last, each step's parameters and gradients */
    size_t fs = mt_gpt_fp8_state_numel(m);
    float *fstate = fs ? mt_xmalloc((D_STEPS + 1) * fs * sizeof(float)) : NULL;
    float *sp = fs ? mt_xmalloc(D_STEPS * n * sizeof(float)) : NULL, *sgr = fs ? mt_xmalloc(D_STEPS * n * sizeof(float)) : NULL;
    for (int s = 0; s < D_STEPS; s++) {
        set_dropout(m, training, key + (uint64_t)s);
        mt_gpt_zero_grad(m);
        if (fs) {
            mt_gpt_fp8_state_get(m, fstate + (size_t)s * fs);
            mtk_to_host(K, sp + (size_t)s * n, mt_gpt_params(m), n * sizeof(float));
        }
        if (micro == 2) {   /* the step's batch and the next one, each half of the mean */
            int s2 = (s + 1) % D_STEPS;
            losses[s] = 0.5 * fwd(m, tok[s], tgt[s], mask[s], D_B, D_T, NULL);
            bwd(m, 0.5f);
            losses[s] += 0.5 * fwd(m, tok[s2], tgt[s2], mask[s2], D_B, D_T, NULL);
            bwd(m, 0.5f);
        } else {
            losses[s] = fwd(m, tok[s], tgt[s], mask[s], D_B, D_T, NULL);
            bwd(m, 1.0f);
        }
        if (fs) {
            mtk_to_host(K, sgr + (size_t)s * n, mt_gpt_grads(m), n * sizeof(float));
            if (mtk_sync(K, &e)) rc = 1;
        }
        for (int i = 0; i < mt_gpt_num_tensors(m); i++) {
            const mt_gpt_tensor *t = mt_gpt_tensor_at(m, i);
            mtk_adamw(K, mt_gpt_params(m) + t->offset, mt_gpt_grads(m) + t->offset, mom + t->offset, var + t->offset,
                      t->numel, 1e-3f, 0.9f, 0.999f, 1e-8f, t->no_decay ? 0.0f : 0.1f, s + 1, 1.0f);
        }
    }
    set_dropout(m, 0, 0);
    losses[D_STEPS] = fwd(m, tok[0], tgt[0], mask[0], D_B, D_T, NULL);
    int64_t lshape[1] = {D_STEPS + 1};
    rc |= dump_npy(dir, "step_losses.npy", "<f8", lshape, 1, losses);
    if (fs) {
        mt_gpt_fp8_state_get(m, fstate + (size_t)D_STEPS * fs);
        int64_t fshape[2] = {D_STEPS + 1, (int64_t)fs}, pshape2[2] = {D_STEPS, (int64_t)n};
        rc |= dump_npy(dir, "step_fp8.npy", "<f4", fshape, 2, fstate);
        rc |= dump_npy(dir, "step_params.npy", "<f4", pshape2, 2, sp);
        rc |= dump_npy(dir, "step_grads.npy", "<f4", pshape2, 2, sgr);
        free(fstate);
        free(sp);
        free(sgr);
    }

    char path[1024];
    snprintf(path, sizeof path, "%s/meta.txt", dir);
    FILE *f = fopen(path, "w");
    if (!f) {
        perror(path);
        return 1;
    }
    fprintf(f, "num_layers %d\nhidden_size %d\nnum_heads %d\nffn_hidden_size %d\nseq_length %d\n", c.num_layers,
            c.hidden_size, c.num_heads, c.ffn_hidden_size, c.seq_length);
    fprintf(f, "max_position_embeddings %d\nvocab_size %d\npadded_vocab_size %d\nlayernorm_epsilon %.9g\n",
            c.max_position_embeddings, c.vocab_size, c.padded_vocab_size, (double)c.layernorm_epsilon);
    fprintf(f, "init_method_std %.17g\nexact_gelu %d\nhidden_dropout %.9g\nattention_dropout %.9g\n",
            c.init_method_std, c.exact_gelu, (double)c.hidden_dropout, (double)c.attention_dropout);
    fprintf(f, "seed 1234\ntraining %d\nkey %" PRIu64 "\nB %d\nT %d\nsteps %d\n", training, key, D_B, D_T, D_STEPS);
    fprintf(f, "lr 1e-3\nbeta1 0.9\nbeta2 0.999\nadam_eps 1e-8\nweight_decay 0.1\nloss %.17g\n", loss);
    fprintf(f, "micro_batches %d\n", micro);
    if (fp8)
        fprintf(f, "fp8_format %s\nfp8_margin %d\nfp8_amax_history_len %d\nfp8_amax_compute_algo %s\n",
                fp8->bwd == MTK_FP8_E5M2 ? "hybrid" : "e4m3", fp8->margin, fp8->history_len,
                fp8->algo == MTK_AMAX_MAX ? "max" : "most_recent");
    fclose(f);
    snprintf(path, sizeof path, "%s/table.txt", dir);
    f = fopen(path, "w");
    if (!f) {
        perror(path);
        return 1;
    }
    for (int i = 0; i < mt_gpt_num_tensors(m); i++) {
        const mt_gpt_tensor *t = mt_gpt_tensor_at(m, i);
        fprintf(f, "%s %zu %zu %d %" PRId64 " %" PRId64 " %d\n", t->name, t->offset, t->numel, t->ndim, t->shape[0],
                t->ndim == 2 ? t->shape[1] : 0, t->no_decay);
    }
    fclose(f);
    mtk_free(K, mom);
    mtk_free(K, var);
    free(p0);
    free(g);
    destroy(m);
    return rc ? 1 : 0;
}

static int dump_main(const char *dir)
{
    if (mkdir(dir, 0777) && errno != EEXIST) {
        perror(dir);
        return 1;
    }
    char sub[1024];
    snprintf(sub, sizeof sub, "%s/eval", dir);
    if (dump_variant(sub, 0, NULL)) return 1;
    snprintf(sub, sizeof sub, "%s/drop", dir);
    if (dump_variant(sub, 1, NULL)) return 1;
    /* FP8: Megatron's defaults with hybrid, and E4M3 gradients with a margin and a longer max history */
    mt_fp8_recipe hybrid = {1, MTK_FP8_E4M3, MTK_FP8_E5M2, 0, 1, MTK_AMAX_MOST_RECENT};
    mt_fp8_recipe e4m3 = {1, MTK_FP8_E4M3, MTK_FP8_E4M3, 1, 3, MTK_AMAX_MAX};
    snprintf(sub, sizeof sub, "%s/fp8", dir);
    if (dump_variant(sub, 1, &hybrid)) return 1;
    snprintf(sub, sizeof sub, "%s/fp8max", dir);
    return dump_variant(sub, 1, &e4m3);
}

T_MAIN_BEGIN("test_model")
mt_err e;
K = mtk_open(&(mtk_config){.backend = "cpu"}, &e);
if (!K) {
    fprintf(stderr, "%s\n", e.msg);
    return 1;
}
if (argc > 2 && !strcmp(argv[1], "--dump")) {
    int rc = dump_main(argv[2]);
    mtk_close(K);
    return rc;
}
RUN(padded_vocab);
RUN(config_checks);
RUN(tensor_table);
RUN(init_statistics);
RUN(gradients_match_central_differences);
RUN(gradients_with_dropout);
RUN(loss_mask_scale_and_accumulation);
RUN(dropout_modes);
RUN(kv_cache_matches_forward);
RUN(kv_cache_matches_forward_llama);
RUN(paged_matches_kv_cache);
RUN(paged_matches_kv_cache_llama);
RUN(contexts_in_flight);
RUN(bf16_activations);
mtk_close(K);
T_MAIN_END
