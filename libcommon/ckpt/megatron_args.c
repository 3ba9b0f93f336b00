/* megatron_args.c: a Megatron-LM checkpoint's argparse.Namespace as mt's args (mt-train's flag names, as
 * a checkpoint's meta.json records them), and its counters (see megatron_args.h). */
#include "ckpt/megatron_args.h"

#include <stdio.h>
#include <string.h>

static const mt_pk *attr(const mt_pk *ns, const char *k)
{
    const mt_pk *v = mt_pk_get(ns, k);
    return v && v->kind != MT_PK_NONE ? v : NULL;
}

static int want_int(const mt_pk *ns, const char *k, const char *where, json_t *out, const char *flag, mt_err *e)
{
    const mt_pk *v = attr(ns, k);
    if (!v || v->kind != MT_PK_INT) return mt_err_set(e, "%s: args.%s is %s, not an integer", where, k, v ? "another type" : "absent");
    json_object_set_new(out, flag, json_integer(v->i));
    return 0;
}

static int opt_real(const mt_pk *ns, const char *k, double dflt, const char *where, json_t *out, const char *flag, mt_err *e)
{
    const mt_pk *v = attr(ns, k);
    if (v && v->kind != MT_PK_FLOAT && v->kind != MT_PK_INT)
        return mt_err_set(e, "%s: args.%s is not a number", where, k);
    json_object_set_new(out, flag, json_real(!v ? dflt : v->kind == MT_PK_FLOAT ? v->f : (double)v->i));
    return 0;
}

static int opt_bool(const mt_pk *ns, const char *k, int dflt)
{
    const mt_pk *v = attr(ns, k);
    return v && v->kind == MT_PK_BOOL ? v->b : dflt;
}

static void opt_str(const mt_pk *ns, const char *k, json_t *out, const char *flag)
{
    const mt_pk *v = attr(ns, k);
    json_object_set_new(out, flag, v && v->kind == MT_PK_STR ? json_string(v->s) : json_null());
}

json_t *mt_meg_args(const mt_pk *ns, const char *where, int64_t *padded_rows, mt_err *e)
{
    json_t *a = json_object();
    static const char *const ints[][2] = {
        {"num_layers", "num-layers"}, {"hidden_size", "hidden-size"}, {"num_attention_heads", "num-attention-heads"},
        {"max_position_embeddings", "max-position-embeddings"}, {"padded_vocab_size", "vocab-rows"},
    };
    for (size_t i = 0; i < sizeof ints / sizeof *ints; i++)
        if (want_int(ns, ints[i][0], where, a, ints[i][1], e)) goto fail;
    /* absent or None (transformers' converter toward Megatron leaves them out): Megatron's defaults, 4 h and
     * the positions; one sequence per micro-batch */
    json_int_t h = json_integer_value(json_object_get(a, "hidden-size"));
    const char *const opt[][2] = {{"ffn_hidden_size", "ffn-hidden-size"}, {"seq_length", "seq-length"},
                                  {"micro_batch_size", "micro-batch-size"}};
    json_int_t dflt[] = {4 * h, json_integer_value(json_object_get(a, "max-position-embeddings")), 1};
    for (size_t i = 0; i < sizeof opt / sizeof *opt; i++) {
        if (attr(ns, opt[i][0])) {
            if (want_int(ns, opt[i][0], where, a, opt[i][1], e)) goto fail;
        } else json_object_set_new(a, opt[i][1], json_integer(dflt[i]));
    }
    *padded_rows = json_integer_value(json_object_get(a, "vocab-rows"));
    json_object_del(a, "vocab-rows");
    const mt_pk *kv = attr(ns, "kv_channels");
    if (kv && kv->kind == MT_PK_INT) json_object_set_new(a, "kv-channels", json_integer(kv->i));
    const mt_pk *gb = attr(ns, "global_batch_size");
    if (gb && gb->kind == MT_PK_INT) json_object_set_new(a, "global-batch-size", json_integer(gb->i));
    const mt_pk *eps = attr(ns, "norm_epsilon") ? attr(ns, "norm_epsilon") : attr(ns, "layernorm_epsilon");
    json_object_set_new(a, "layernorm-epsilon", json_real(eps && eps->kind == MT_PK_FLOAT ? eps->f : 1e-5));
    if (opt_real(ns, "init_method_std", 0.02, where, a, "init-method-std", e) ||
        opt_real(ns, "hidden_dropout", 0.1, where, a, "hidden-dropout", e) ||
        opt_real(ns, "attention_dropout", 0.1, where, a, "attention-dropout", e))
        goto fail;
    const mt_pk *seed = attr(ns, "seed");
    json_object_set_new(a, "seed", json_integer(seed && seed->kind == MT_PK_INT ? seed->i : 1234));
    /* GeLU: Megatron's fused bias-GeLU and --openai-gelu are the tanh form; without the fusion, erf */
    json_object_set_new(a, "no-bias-gelu-fusion", json_boolean(!opt_bool(ns, "bias_gelu_fusion", 1)));
    json_object_set_new(a, "openai-gelu", json_boolean(opt_bool(ns, "openai_gelu", 0)));
    opt_str(ns, "tokenizer_type", a, "tokenizer-type");
    opt_str(ns, "vocab_file", a, "vocab-file");
    opt_str(ns, "merge_file", a, "merge-file");
    opt_str(ns, "tokenizer_model", a, "tokenizer-model");
    opt_str(ns, "split", a, "split");
    opt_str(ns, "data_cache_path", a, "data-cache-path");
    /* the architecture (absent: GPT-2's) */
    const mt_pk *norm = attr(ns, "normalization"), *pos = attr(ns, "position_embedding_type");
    json_object_set_new(a, "normalization", json_string(norm && norm->kind == MT_PK_STR ? norm->s : "LayerNorm"));
    json_object_set_new(a, "position-embedding-type",
                        json_string(pos && pos->kind == MT_PK_STR ? pos->s : "learned_absolute"));
    json_object_set_new(a, "swiglu", json_boolean(opt_bool(ns, "swiglu", 0)));
    json_object_set_new(a, "untie-embeddings-and-output-weights",
                        json_boolean(opt_bool(ns, "untie_embeddings_and_output_weights", 0)));
    json_object_set_new(a, "disable-bias-linear", json_boolean(!opt_bool(ns, "add_bias_linear", 1)));
    json_object_set_new(a, "add-qkv-bias", json_boolean(opt_bool(ns, "add_qkv_bias", 0)));
    int gqa = opt_bool(ns, "group_query_attention", 0);
    json_object_set_new(a, "group-query-attention", json_boolean(gqa));
    if (gqa && want_int(ns, "num_query_groups", where, a, "num-query-groups", e)) goto fail;
    const mt_pk *rb = attr(ns, "rotary_base");
    json_object_set_new(a, "rotary-base", json_integer(rb && rb->kind == MT_PK_INT ? rb->i : 10000));
    if (opt_real(ns, "rotary_percent", 1.0, where, a, "rotary-percent", e)) goto fail;
    const mt_pk *ne = attr(ns, "num_experts");
    if (ne && ne->kind == MT_PK_INT && ne->i > 0) {
        mt_err_set(e, "%s: args.num_experts %lld: mixtures of experts are not read from Megatron checkpoints yet", where,
                   (long long)ne->i);
        goto fail;
    }
    if (opt_bool(ns, "apply_residual_connection_post_layernorm", 0)) {
        mt_err_set(e, "%s: args.apply_residual_connection_post_layernorm: not a model mt has", where);
        goto fail;
    }
    return a;
fail:
    json_decref(a);
    return NULL;
}

json_t *mt_meg_state(const mt_pk *root, const mt_pk *ns, int64_t iteration, const char *where, mt_err *e)
{
    json_t *m = json_object();
    json_object_set_new(m, "checkpoint_version", json_real(3.0));
    json_object_set_new(m, "iteration", json_integer(iteration));
    static const char *const counts[] = {"consumed_train_samples", "consumed_valid_samples"};
    for (int i = 0; i < 2; i++) {
        const mt_pk *v = attr(ns, counts[i]);
        if (v && v->kind != MT_PK_INT) {
            json_decref(m);
            mt_err_set(e, "%s: args.%s is not an integer", where, counts[i]);
            return NULL;
        }
        json_object_set_new(m, counts[i], json_integer(v ? v->i : 0));
    }
    const mt_pk *fl = attr(root, "num_floating_point_operations_so_far");
    if (fl && (fl->kind == MT_PK_FLOAT || fl->kind == MT_PK_INT))
        json_object_set_new(m, "num_floating_point_operations_so_far", json_real(fl->kind == MT_PK_FLOAT ? fl->f : (double)fl->i));
    /* the learning-rate schedule: Megatron's names are mt's (v2's lr_scheduler has older names: not kept) */
    const mt_pk *s = attr(root, "opt_param_scheduler");
    if (s && s->kind == MT_PK_DICT) {
        json_t *js = json_object();
        for (size_t i = 0; i < s->len; i++) {
            const mt_pk *k = s->items[i], *v = s->vals[i];
            if (k->kind != MT_PK_STR) continue;
            if (v->kind == MT_PK_INT) json_object_set_new(js, k->s, json_integer(v->i));
            else if (v->kind == MT_PK_FLOAT) json_object_set_new(js, k->s, json_real(v->f));
            else if (v->kind == MT_PK_STR) json_object_set_new(js, k->s, json_string(v->s));
        }
        json_object_set_new(m, "opt_param_scheduler", js);
    }
    return m;
}
