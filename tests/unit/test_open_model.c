/* test_open_model.c: the checked reads of meta.json numbers, and opening a trained model: the config
 * from a checkpoint's args equals the one mt-train builds from the same flags, the weights round-trip,
 * and a bad checkpoint is an error value, not an exit. */
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include "ckpt/meta.h"
#include "ckpt/open_model.h"
#include "comm/agree.h"
#include "config/model_config.h"
#include "config/tokenizer.h"
#include "config/train_args_desc.h"
#include "t.h"

TEST(meta_numbers)
{
    mt_err e;
    json_t *o = json_pack("{s:I,s:f,s:f,s:f,s:s,s:I}", "n", (json_int_t)480, "r", 480.0, "h", 2.5, "big", 1e300,
                          "s", "x", "neg", (json_int_t)-1);
    int64_t n = 0;
    double x = 0;
    T_EQ_INT(mt_meta_count(o, "o.", "n", "d", 0, 1000, &n, &e), 0);
    T_EQ_INT(n, 480);
    T_EQ_INT(mt_meta_count(o, "o.", "r", "d", 0, 1000, &n, &e), 0);   /* 480.0 is 480 */
    T_EQ_INT(n, 480);
    T_EQ_INT(mt_meta_count(o, "o.", "h", "d", 0, 1000, &n, &e), -1);
    T_EQ_STR(e.msg, "d/meta.json: \"o.h\" is 2.5, not an integer in [0, 1000]");
    T_EQ_INT(mt_meta_count(o, "o.", "big", "d", 0, MT_META_MAX_COUNT, &n, &e), -1);
    T_EQ_INT(mt_meta_count(o, "o.", "neg", "d", 0, 5, &n, &e), -1);
    T_EQ_STR(e.msg, "d/meta.json: \"o.neg\" is -1, outside [0, 5]");
    T_EQ_INT(mt_meta_count(o, "o.", "s", "d", 0, 5, &n, &e), -1);
    T_EQ_STR(e.msg, "d/meta.json: \"o.s\" is not an integer");
    T_EQ_INT(mt_meta_count(o, "o.", "gone", "d", 0, 5, &n, &e), -1);
    T_EQ_STR(e.msg, "d/meta.json: missing integer \"o.gone\"");
    T_EQ_INT(mt_meta_real(o, "", "h", "d", 0, 3, &x, &e), 0);
    T_NEAR(x, 2.5, 0);
    T_EQ_INT(mt_meta_real(o, "", "h", "d", 0, 1, &x, &e), -1);
    T_EQ_STR(e.msg, "d/meta.json: \"h\" is 2.5, outside [0, 1]");
    T_EQ_INT(mt_meta_real(o, "", "s", "d", 0, 1, &x, &e), -1);
    T_EQ_STR(e.msg, "d/meta.json: \"s\" is not a number");
    json_decref(o);
}

static char dir[600];

/* Saves a checkpoint of a model built from argv as mt-train builds it; the args as it writes them. */
static int save_model(mt_train_args *a, mtk *k, mt_gpt **out, mt_err *e)
{
    char *argv[] = {"mt-train", "--num-layers", "2", "--hidden-size", "16", "--num-attention-heads", "2",
                    "--seq-length", "8", "--max-position-embeddings", "12", "--tokenizer-type", "NullTokenizer",
                    "--vocab-size", "37", "--make-vocab-size-divisible-by", "8", "--micro-batch-size", "3",
                    "--train-iters", "1", "--lr", "1e-3", "--no-bias-gelu-fusion", "--layernorm-epsilon", "1e-6",
                    "--hidden-dropout", "0.2", "--seed", "77", "--data-path", "nowhere", NULL};
    if (mt_train_args_parse(a, (int)(sizeof argv / sizeof *argv) - 1, argv, e)) return -1;
    mt_tokenizer tok;
    if (mt_tokenizer_open(&tok, a, false, e)) return -1;
    mt_gpt_config cfg = mt_gpt_config_from_args(a, tok.vocab_size);
    mt_gpt *m = mt_gpt_create(k, &cfg, MT_GPT_INFER_ONLY, e);
    if (!m) return -1;
    mt_gpt_init(m, 77);
    int nt = mt_gpt_num_tensors(m);
    size_t np = mt_gpt_num_params(m);
    float *host = malloc(np * sizeof(float));
    mtk_to_host(k, host, mt_gpt_params(m), np * sizeof(float));
    mt_ckpt_tensor *ts = calloc((size_t)nt, sizeof *ts);
    for (int i = 0; i < nt; i++) {
        const mt_gpt_tensor *g = mt_gpt_tensor_at(m, i);
        mt_ckpt_tensor c = {.name = g->name, .ndim = g->ndim, .shape = {g->shape[0], g->shape[1]}, .data = host + g->offset};
        ts[i] = c;
    }
    json_t *meta = json_object();
    json_object_set_new(meta, "iteration", json_integer(3));
    json_object_set_new(meta, "args", mt_train_args_to_json(a));
    int rc = mt_ckpt_save(dir, 3, ts, nt, NULL, 0, meta, e);
    json_decref(meta);
    free(ts);
    free(host);
    *out = m;
    return rc;
}

TEST(open_roundtrip)
{
    mt_err e;
    mtk *k = mtk_open(&(mtk_config){.backend = "cpu", .threads = 1}, &e);
    T_CHECK(k);
    if (!k) return;
    mt_train_args a;
    mt_gpt *saved = NULL;
    if (save_model(&a, k, &saved, &e)) {
        T_FAILF("save: %s", e.msg);
        return;
    }
    mt_model_ckpt mc;
    mt_model_open_opts o = {.iteration = MT_CKPT_LATEST};
    if (mt_model_open(&mc, dir, &o, &e)) {
        T_FAILF("open: %s", e.msg);
        mt_gpt_free(saved);
        mtk_close(k);
        return;
    }
    const mt_gpt_config *want = mt_gpt_get_config(saved);
    /* every field, dropout and epsilon included */
    T_EQ_INT(mc.cfg.num_layers, want->num_layers);
    T_EQ_INT(mc.cfg.hidden_size, want->hidden_size);
    T_EQ_INT(mc.cfg.num_heads, want->num_heads);
    T_EQ_INT(mc.cfg.ffn_hidden_size, want->ffn_hidden_size);
    T_EQ_INT(mc.cfg.seq_length, want->seq_length);
    T_EQ_INT(mc.cfg.max_position_embeddings, want->max_position_embeddings);
    T_EQ_INT(mc.cfg.vocab_size, want->vocab_size);
    T_EQ_INT(mc.cfg.padded_vocab_size, want->padded_vocab_size);
    T_CHECK(mc.cfg.layernorm_epsilon == want->layernorm_epsilon && mc.cfg.init_method_std == want->init_method_std);
    T_CHECK(mc.cfg.hidden_dropout == want->hidden_dropout && mc.cfg.attention_dropout == want->attention_dropout);
    T_EQ_INT(mc.cfg.exact_gelu, want->exact_gelu);
    T_EQ_INT(mc.cfg.padded_vocab_size, 40);
    T_EQ_INT(mc.cfg.exact_gelu, 1);
    T_CHECK(mc.tok.bpe == NULL);
    T_EQ_INT(mc.tok.vocab_size, 38);
    T_EQ_INT(mc.tok.eod, 37);
    T_EQ_INT(mc.a.micro_batch_size, 3);
    T_EQ_INT(mc.a.seed, 77);
    T_EQ_INT(json_integer_value(json_object_get(mc.meta, "iteration")), 3);
    T_EQ_INT(mt_model_load_weights(&mc, k, NULL, &e), 0);
    T_CHECK(mc.model != NULL);
    if (mc.model) {
        size_t np = mt_gpt_num_params(saved);
        float *x = malloc(np * sizeof(float)), *y = malloc(np * sizeof(float));
        mtk_to_host(k, x, mt_gpt_params(saved), np * sizeof(float));
        mtk_to_host(k, y, mt_gpt_params(mc.model), np * sizeof(float));
        T_CHECK(mt_gpt_num_params(mc.model) == np && !memcmp(x, y, np * sizeof(float)));
        free(x);
        free(y);
    }
    mt_model_close(&mc);

    /* mt-train --load: the args must describe the model of this run's flags */
    mt_train_args other = a;
    other.hidden_size = 32;
    mt_model_open_opts ox = {.iteration = MT_CKPT_LATEST, .expect = &other};
    T_EQ_INT(mt_model_open(&mc, dir, &ox, &e), -1);
    T_CHECK(strstr(e.msg, "checkpoint was saved with --hidden-size 16, this run has --hidden-size 32") != NULL);
    ox.expect = &a;
    T_EQ_INT(mt_model_open(&mc, dir, &ox, &e), 0);
    T_EQ_INT(mt_model_load_weights(&mc, k, saved, &e), 0);
    mt_model_close(&mc);

    /* no checkpoint: an error value naming the directory */
    char none[700];
    snprintf(none, sizeof none, "%s/none", t_tmp);
    T_EQ_INT(mt_model_open(&mc, none, &o, &e), -1);
    T_CHECK(strstr(e.msg, none) != NULL);
    mt_gpt_free(saved);
    mtk_close(k);
}

/* Parses the mt-train command line of base plus extra (NULL-terminated); 0 or -1 with e set. */
static int parse(mt_train_args *a, const char *const *extra, mt_err *e)
{
    const char *base[] = {"mt-train", "--num-layers", "2", "--hidden-size", "64", "--num-attention-heads", "4",
                          "--seq-length", "8", "--max-position-embeddings", "12", "--tokenizer-type", "NullTokenizer",
                          "--vocab-size", "37", "--micro-batch-size", "1", "--train-iters", "1", "--lr", "1e-3",
                          "--data-path", "nowhere"};
    char *argv[64];
    int n = 0;
    for (size_t i = 0; i < sizeof base / sizeof *base; i++) argv[n++] = (char *)base[i];
    for (int i = 0; extra[i]; i++) argv[n++] = (char *)extra[i];
    argv[n] = NULL;
    return mt_train_args_parse(a, n, argv, e);
}

/* The LLaMA family's flags: parsed with Megatron's semantics and defaults, written to meta.json's args and
 * read back into the same model config and architecture; GPT-2's defaults when absent; the refusals. */
TEST(llama_args)
{
    mt_err e;
    mt_train_args a;
    const char *llama[] = {"--normalization", "RMSNorm", "--norm-epsilon", "1e-6", "--use-rotary-position-embeddings",
                           "--rotary-base", "500000", "--swiglu", "--group-query-attention", "--num-query-groups", "2",
                           "--untie-embeddings-and-output-weights", "--disable-bias-linear", NULL};
    T_EQ_INT(parse(&a, llama, &e), 0);
    T_EQ_STR(a.position_embedding_type, "rope");
    T_EQ_INT(a.ffn_hidden_size, 128);   /* int(4 x 64 x 2 / 3 / 64) x 64 */
    T_EQ_INT(a.rotary_base, 500000);
    T_NEAR(a.rotary_percent, 1.0, 0);
    mt_gpt_config c = mt_gpt_config_from_args(&a, 38);
    T_EQ_INT(mt_gpt_config_check(&c, &e), 0);
    T_CHECK(c.norm == MT_NORM_RMSNORM && c.position == MT_POS_ROPE && c.mlp == MT_MLP_SWIGLU);
    T_EQ_INT(c.num_query_groups, 2);
    T_CHECK(c.untie_embeddings_and_output_weights && c.disable_bias_linear && c.rotary_base == 500000);
    T_NEAR(c.layernorm_epsilon, 1e-6, 1e-7);
    mt_model_arch arch = mt_gpt_arch(&c);
    T_CHECK(arch.norm == MT_NORM_RMSNORM && arch.position == MT_POS_ROPE && arch.mlp == MT_MLP_SWIGLU);
    T_CHECK(arch.num_query_groups == 2 && !arch.add_bias_linear && !arch.tied_embeddings);

    /* meta.json and back */
    json_t *j = mt_train_args_to_json(&a);
    mt_train_args b;
    T_EQ_INT(mt_train_args_arch_from_json(j, &b, "d/meta.json", &e), 0);
    T_EQ_STR(b.normalization, "RMSNorm");
    T_EQ_STR(b.position_embedding_type, "rope");
    T_CHECK(b.swiglu && b.group_query_attention && b.num_query_groups == 2 && b.rotary_base == 500000);
    T_CHECK(b.untie_embeddings_and_output_weights && b.disable_bias_linear && b.rotary_percent == 1.0);
    T_EQ_INT(mt_train_args_check_model(&a, j, "d", &e), 0);
    mt_train_args g;
    const char *none[] = {NULL};
    T_EQ_INT(parse(&g, none, &e), 0);
    T_EQ_INT(mt_train_args_check_model(&g, j, "d", &e), -1);
    T_CHECK(strstr(e.msg, "ffn-hidden-size"));   /* 128 against GPT-2's 4h */
    g.ffn_hidden_size = a.ffn_hidden_size;
    T_EQ_INT(mt_train_args_check_model(&g, j, "d", &e), -1);
    T_EQ_STR(e.msg, "d: checkpoint was saved with another --normalization");
    json_object_set_new(j, "swiglu", json_string("yes"));
    T_EQ_INT(mt_train_args_arch_from_json(j, &b, "d/meta.json", &e), -1);
    T_EQ_STR(e.msg, "d/meta.json: \"args.swiglu\" is not a boolean");
    json_object_set_new(j, "swiglu", json_true());
    json_object_set_new(j, "normalization", json_string("ScaleNorm"));
    T_EQ_INT(mt_train_args_arch_from_json(j, &b, "d/meta.json", &e), -1);
    json_decref(j);
    /* checkpoints written before these options: GPT-2 */
    json_t *old = json_pack("{s:i}", "num-attention-heads", 4);
    T_EQ_INT(mt_train_args_arch_from_json(old, &b, "d/meta.json", &e), 0);
    T_EQ_STR(b.normalization, "LayerNorm");
    T_EQ_STR(b.position_embedding_type, "learned_absolute");
    T_CHECK(!b.swiglu && !b.group_query_attention && !b.untie_embeddings_and_output_weights && !b.disable_bias_linear);
    json_decref(old);
    c = mt_gpt_config_from_args(&g, 38);
    T_CHECK(c.norm == MT_NORM_LAYERNORM && c.position == MT_POS_LEARNED && c.mlp == MT_MLP_GELU);
    T_CHECK(c.num_query_groups == 4 && !c.untie_embeddings_and_output_weights && !c.disable_bias_linear);

    /* Megatron's default ffn size with --swiglu at a real size; the refusals, each naming its flag */
    const char *big[] = {"--swiglu", "--hidden-size", "4096", "--num-attention-heads", "32", NULL};
    T_EQ_INT(parse(&a, big, &e), 0);
    T_EQ_INT(a.ffn_hidden_size, 10880);
    static const struct {
        const char *args[6];
        const char *msg;
    } bad[] = {
        {{"--num-query-groups", "2"}, "--num-query-groups goes with --group-query-attention"},
        {{"--group-query-attention", "--num-query-groups", "3"}, "--num-query-groups (3) must divide --num-attention-heads (4)"},
        {{"--group-query-attention", "--num-query-groups", "2", "--tensor-model-parallel-size", "4"},
         "--tensor-model-parallel-size (4) must divide --num-query-groups (2): each rank holds whole query groups"},
        {{"--rotary-base", "500000"}, "--rotary-base goes with --position-embedding-type rope"},
        {{"--position-embedding-type", "none"}, "--position-embedding-type none is not implemented (learned_absolute or rope)"},
        {{"--position-embedding-type", "rope", "--rotary-percent", "0.1"},
         "--rotary-percent 0.1: the rotary dimension int(16 x 0.1) = 1 must be even and at least 2"},
        {{"--rotary-interleaved"}, "--rotary-interleaved is not supported: rope rotates the two halves of each head "
                                   "(rotate-half), not interleaved pairs"},
        {{"--swiglu", "--hidden-size", "16", "--num-attention-heads", "2"},
         "--swiglu: the default --ffn-hidden-size int(8 x 16 / 3 / 64) x 64 is 0; give --ffn-hidden-size"},
        {{"--normalization", "ScaleNorm"}, NULL},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        T_EQ_INT(parse(&a, bad[i].args, &e), -1);
        if (bad[i].msg) T_EQ_STR(e.msg, bad[i].msg);
    }
}

/* What ranks compare: parsed values (--lr 3e-3 is --lr 0.003), a flag of two names under the first, the
 * identity of the dataset's files; the line naming the first flag that differs. */
TEST(args_description)
{
    mt_err e;
    mt_train_args a, b;
    const char *x[] = {"--lr", "0.003", NULL}, *y[] = {"--lr", "3e-3", NULL}, *z[] = {"--lr", "1e-4", NULL};
    const char *eps[] = {"--lr", "0.003", "--layernorm-epsilon", "1e-6", NULL};
    size_t na, nb;
    char line[512];
    T_EQ_INT(parse(&a, x, &e), 0);
    T_EQ_INT(parse(&b, y, &e), 0);
    char *da = mt_train_args_describe(&a, &na), *db = mt_train_args_describe(&b, &nb);
    T_CHECK(na == nb && !memcmp(da, db, na));
    T_CHECK(memmem(da, na, "--data-path\0nowhere.idx: absent\0--data-path\0nowhere.bin: absent", 64) != NULL);
    free(db);
    mt_train_args_free(&b);
    T_EQ_INT(parse(&b, z, &e), 0);
    db = mt_train_args_describe(&b, &nb);
    T_EQ_INT(mt_agree_first_difference(db, nb, da, na, line, sizeof line), 0);
    T_EQ_STR(line, "--lr differs from rank 0's: 0.0001 here, 0.003 on rank 0");
    free(db);
    mt_train_args_free(&b);
    T_EQ_INT(parse(&b, eps, &e), 0);
    db = mt_train_args_describe(&b, &nb);
    T_EQ_INT(mt_agree_first_difference(db, nb, da, na, line, sizeof line), 0);
    T_EQ_STR(line, "--norm-epsilon differs from rank 0's: 1e-06 here, 1e-05 on rank 0");
    T_CHECK(!memmem(db, nb, "--layernorm-epsilon", 19));
    free(db);
    free(da);
    mt_train_args_free(&b);
    mt_train_args_free(&a);
}

T_MAIN_BEGIN("test_open_model")
t_tmpdir();
snprintf(dir, sizeof dir, "%s/ck", t_tmp);
RUN(meta_numbers);
RUN(open_roundtrip);
RUN(llama_args);
RUN(args_description);
t_tmpdir_remove();
T_MAIN_END
