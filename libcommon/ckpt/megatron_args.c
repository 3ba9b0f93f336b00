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
    const mt_pk *vs = attr(ns, "vocab_size");   /* NullTokenizer's --vocab-size (None for the others) */
    if (vs && vs->kind == MT_PK_INT) json_object_set_new(a, "vocab-size", json_integer(vs->i));
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
    if (ne && ne->kind == MT_PK_INT && ne->i > 0) {   /* a mixture of experts: Megatron-Core's MoE flags */
        json_object_set_new(a, "num-experts", json_integer(ne->i));
        json_int_t ffn = json_integer_value(json_object_get(a, "ffn-hidden-size"));
        static const char *const ints[][2] = {{"moe_ffn_hidden_size", "moe-ffn-hidden-size"},
                                              {"moe_router_topk", "moe-router-topk"},
                                              {"moe_shared_expert_intermediate_size", "moe-shared-expert-intermediate-size"}};
        json_int_t dflt[] = {ffn, 2, 0};
        for (size_t i = 0; i < 3; i++) {
            const mt_pk *v = attr(ns, ints[i][0]);
            json_object_set_new(a, ints[i][1], json_integer(v && v->kind == MT_PK_INT ? v->i : dflt[i]));
        }
        static const char *const reals[][2] = {{"moe_aux_loss_coeff", "moe-aux-loss-coeff"},
                                               {"moe_z_loss_coeff", "moe-z-loss-coeff"},
                                               {"moe_router_topk_scaling_factor", "moe-router-topk-scaling-factor"},
                                               {"moe_expert_capacity_factor", "moe-expert-capacity-factor"}};
        for (size_t i = 0; i < 4; i++)   /* None: off (0 in mt's args) */
            if (opt_real(ns, reals[i][0], 0, where, a, reals[i][1], e)) goto fail;
        static const char *const strs[][3] = {{"moe_router_load_balancing_type", "moe-router-load-balancing-type", "aux_loss"},
                                              {"moe_router_score_function", "moe-router-score-function", "softmax"},
                                              {"moe_token_drop_policy", "moe-token-drop-policy", "probs"}};
        for (size_t i = 0; i < 3; i++) {
            const mt_pk *v = attr(ns, strs[i][0]);
            json_object_set_new(a, strs[i][1], json_string(v && v->kind == MT_PK_STR ? v->s : strs[i][2]));
        }
        static const char *const bools[][2] = {{"moe_router_pre_softmax", "moe-router-pre-softmax"},
                                               {"moe_pad_expert_input_to_capacity", "moe-pad-expert-input-to-capacity"},
                                               {"moe_shared_expert_gate", "moe-shared-expert-gate"}};
        for (size_t i = 0; i < 3; i++) json_object_set_new(a, bools[i][1], json_boolean(opt_bool(ns, bools[i][0], 0)));
        /* --moe-layer-freq: an int, or a list of 0/1 per layer (mt takes both as Megatron writes them) */
        const mt_pk *f = attr(ns, "moe_layer_freq");
        char spec[4096] = "1";
        if (f && f->kind == MT_PK_INT) snprintf(spec, sizeof spec, "%lld", (long long)f->i);
        else if (f && f->kind == MT_PK_LIST) {
            size_t at = 0;
            at += (size_t)snprintf(spec + at, sizeof spec - at, "[");
            for (size_t i = 0; i < f->len && at < sizeof spec - 8; i++)
                at += (size_t)snprintf(spec + at, sizeof spec - at, "%s%lld", i ? "," : "",
                                       (long long)(f->items[i]->kind == MT_PK_INT ? f->items[i]->i : -1));
            snprintf(spec + at, sizeof spec - at, "]");
        } else if (f) {
            mt_err_set(e, "%s: args.moe_layer_freq is neither an integer nor a list", where);
            goto fail;
        }
        json_object_set_new(a, "moe-layer-freq", json_string(spec));
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
