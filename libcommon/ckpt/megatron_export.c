/* megatron_export.c: an mt checkpoint written as a Megatron-LM torch-format checkpoint (see
 * megatron_export.h). */
#include "ckpt/megatron_export.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/checkpoint.h"
#include "ckpt/hf_out.h"
#include "ckpt/megatron_distopt.h"
#include "ckpt/megatron_rng.h"
#include "ckpt/torch_ckpt.h"
#include "io/fsutil.h"
#include "model/layout.h"
#include "mt_base.h"

const char *mt_meg_core_name(const char *n, int moe_layer, char *out, size_t cap)
{
    static const char *const map[][2] = {
        {"input_layernorm.", "self_attention.linear_qkv.layer_norm_"},
        {"post_attention_layernorm.", "mlp.linear_fc1.layer_norm_"},
        {"mlp.router.", "mlp.router."},
        {"mlp.shared_experts.dense_h_to_4h.", "mlp.shared_experts.linear_fc1."},
        {"mlp.shared_experts.dense_4h_to_h.", "mlp.shared_experts.linear_fc2."},
        {"mlp.shared_experts.gate_weight", "mlp.shared_experts.gate_weight"},
        {"self_attention.query_key_value.", "self_attention.linear_qkv."},
        {"self_attention.dense.", "self_attention.linear_proj."},
        {"mlp.dense_h_to_4h.", "mlp.linear_fc1."},
        {"mlp.dense_4h_to_h.", "mlp.linear_fc2."},
    };
    if (!strncmp(n, "language_model.embedding.", 25)) snprintf(out, cap, "%s", n + 15);
    else if (!strncmp(n, "language_model.encoder.final_layernorm.", 39)) snprintf(out, cap, "decoder.%s", n + 23);
    else if (!strcmp(n, "language_model.output_layer.weight") || !strcmp(n, "word_embeddings_for_head.weight"))
        snprintf(out, cap, "output_layer.weight");
    else if (!strncmp(n, "language_model.encoder.layers.", 30)) {
        const char *num = n + 30, *rest = strchr(num, '.');
        if (!rest) return NULL;
        /* a MoE layer's second norm stands alone before the MoE (no linear_fc1 to fuse it into); an expert's
         * matrices are SequentialMLP's */
        if (moe_layer && !strncmp(rest + 1, "post_attention_layernorm.", 25)) {
            snprintf(out, cap, "decoder.layers.%.*s.pre_mlp_layernorm.%s", (int)(rest - num), num, rest + 26);
            return out;
        }
        int j, at = 0;
        char fc[16];
        if (sscanf(rest + 1, "mlp.experts.local_experts.%d.dense_%15[h_to4].weight%n", &j, fc, &at) == 2 && !rest[1 + at]) {
            snprintf(out, cap, "decoder.layers.%.*s.mlp.experts.local_experts.%d.linear_fc%d.weight", (int)(rest - num), num,
                     j, !strcmp(fc, "h_to_4h") ? 1 : 2);
            return out;
        }
        for (size_t i = 0; i < sizeof map / sizeof *map; i++) {
            size_t k = strlen(map[i][0]);
            if (!strncmp(rest + 1, map[i][0], k)) {
                snprintf(out, cap, "decoder.layers.%.*s.%s%s", (int)(rest - num), num, map[i][1], rest + 1 + k);
                return out;
            }
        }
        return NULL;
    } else return NULL;
    return out;
}

/* The dict under str key k of d, created (an OrderedDict, as state_dict() returns) when absent. */
static mt_pk *child(mt_pk_arena *a, mt_pk *d, const char *k)
{
    for (size_t i = 0; i < d->len; i++)
        if (d->items[i]->kind == MT_PK_STR && !strcmp(d->items[i]->s, k)) return d->vals[i];
    mt_pk *c = mt_pk_new(a, MT_PK_DICT);
    c->b = true;
    mt_pk_sets(a, d, k, c);
    return c;
}

static mt_pk *from_json(mt_pk_arena *a, json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_STRING: return mt_pk_str(a, json_string_value(v));
    case JSON_INTEGER: return mt_pk_int(a, json_integer_value(v));
    case JSON_REAL: return mt_pk_float(a, json_real_value(v));
    case JSON_TRUE: return mt_pk_bool(a, true);
    case JSON_FALSE: return mt_pk_bool(a, false);
    case JSON_ARRAY: {
        mt_pk *l = mt_pk_new(a, MT_PK_LIST);
        size_t i;
        json_t *x;
        json_array_foreach(v, i, x) mt_pk_append(a, l, from_json(a, x));
        return l;
    }
    case JSON_OBJECT: {
        mt_pk *d = mt_pk_new(a, MT_PK_DICT);
        const char *k;
        json_t *x;
        json_object_foreach(v, k, x) mt_pk_sets(a, d, k, from_json(a, x));
        return d;
    }
    default: return mt_pk_new(a, MT_PK_NONE);
    }
}

/* The data-parallel size of the smallest run of a layout: its world a multiple of tp pp (the dense grid) and of
 * etp ep pp (the experts'). */
static int smallest_dp(int tp, int ep, int etp)
{
    int span = tp;
    while (span % (etp * ep)) span += tp;
    return span / tp;
}

/* mt's args as Megatron's argparse.Namespace: flag names as attribute names ('-' to '_'), the flags that
 * Megatron stores negated (store_false) under their positive names, and the attributes Megatron derives
 * and checks on load for the layout written. */
static mt_pk *namespace(mt_pk_arena *a, const mt_model_ckpt *mc, int tp, int pp, int vp, int ep, int etp, int rows,
                        const char *torch_dtype)
{
    static const char *const negated[][2] = {
        {"no-bias-gelu-fusion", "bias_gelu_fusion"},
        {"disable-bias-linear", "add_bias_linear"},
        {"no-check-for-nan-in-loss-and-grad", "check_for_nan_in_loss_and_grad"},
        {"no-log-loss-scale-to-tensorboard", "log_loss_scale_to_tensorboard"},
    };
    mt_pk *ns = mt_pk_named(a, MT_PK_OBJECT, "argparse.Namespace");
    mt_pk *d = ns->obj = mt_pk_new(a, MT_PK_DICT);
    const char *k;
    json_t *v;
    json_object_foreach(mc->args, k, v) {
        char name[128];
        size_t i;
        for (i = 0; i < sizeof negated / sizeof *negated && strcmp(k, negated[i][0]); i++) {}
        if (i < sizeof negated / sizeof *negated) {
            mt_pk_sets(a, d, negated[i][1], mt_pk_bool(a, !json_is_true(v)));
            continue;
        }
        snprintf(name, sizeof name, "%s", k);
        for (char *c = name; *c; c++)
            if (*c == '-') *c = '_';
        mt_pk_sets(a, d, name, from_json(a, v));
    }
    if (mc->arch.num_experts) {
        /* --moe-layer-freq as Megatron parses it: an int, or the list of 0/1 per layer */
        const char *f = json_string_value(json_object_get(mc->args, "moe-layer-freq"));
        int L = mc->arch.num_layers, all = f && *f && strspn(f, "0123456789") == strlen(f);
        if (all) mt_pk_sets(a, d, "moe_layer_freq", mt_pk_int(a, atoi(f)));
        else {
            mt_pk *l = mt_pk_new(a, MT_PK_LIST);
            for (int i = 0; i < L && i < MT_MOE_MAX_LAYERS; i++) mt_pk_append(a, l, mt_pk_int(a, mc->arch.moe_layers[i]));
            mt_pk_sets(a, d, "moe_layer_freq", l);
        }
        /* Megatron's "off" for these is None, not 0 */
        static const char *const none_if_zero[] = {"moe_expert_capacity_factor", "moe_router_topk_scaling_factor",
                                                   "moe_z_loss_coeff", "moe_shared_expert_intermediate_size"};
        for (size_t i = 0; i < sizeof none_if_zero / sizeof *none_if_zero; i++) {
            const mt_pk *x = mt_pk_get(d, none_if_zero[i]);
            if (x && ((x->kind == MT_PK_FLOAT && x->f == 0) || (x->kind == MT_PK_INT && x->i == 0)))
                mt_pk_sets(a, d, none_if_zero[i], mt_pk_new(a, MT_PK_NONE));
        }
    }
    mt_pk_sets(a, d, "tensor_model_parallel_size", mt_pk_int(a, tp));
    /* the experts' layout written: over ep expert ranks, split over etp ranks (Megatron's default: tp) */
    mt_pk_sets(a, d, "expert_model_parallel_size", mt_pk_int(a, ep));
    mt_pk_sets(a, d, "expert_tensor_parallel_size", mt_pk_int(a, etp));
    /* --fp8-format is Megatron's args.fp8 (its dest) */
    const char *fp8 = json_string_value(json_object_get(mc->args, "fp8-format"));
    mt_pk_sets(a, d, "fp8", fp8 ? mt_pk_str(a, fp8) : mt_pk_new(a, MT_PK_NONE));
    mt_pk_sets(a, d, "pipeline_model_parallel_size", mt_pk_int(a, pp));
    mt_pk_sets(a, d, "virtual_pipeline_model_parallel_size", vp > 1 ? mt_pk_int(a, vp) : mt_pk_new(a, MT_PK_NONE));
    mt_pk_sets(a, d, "num_layers_per_virtual_pipeline_stage",
               vp > 1 ? mt_pk_int(a, mc->arch.num_layers / (pp * vp)) : mt_pk_new(a, MT_PK_NONE));
    int dp = smallest_dp(tp, ep, etp);
    mt_pk_sets(a, d, "data_parallel_size", mt_pk_int(a, dp));
    mt_pk_sets(a, d, "world_size", mt_pk_int(a, (int64_t)dp * tp * pp));
    mt_pk_sets(a, d, "padded_vocab_size", mt_pk_int(a, rows));
    mt_pk_sets(a, d, "params_dtype", mt_pk_named(a, MT_PK_GLOBAL, torch_dtype));
    /* Megatron reduces bf16 gradients in fp32 (it turns this on for --bf16): the distributed optimizer's
     * buffers are keyed by it */
    mt_pk_sets(a, d, "accumulate_allreduce_grads_in_fp32", mt_pk_bool(a, !strcmp(torch_dtype, "torch.bfloat16")));
    mt_pk_sets(a, d, "add_position_embedding", mt_pk_bool(a, mc->arch.position == MT_POS_LEARNED));
    mt_pk_sets(a, d, "use_rotary_position_embeddings", mt_pk_bool(a, mc->arch.position == MT_POS_ROPE));
    static const char *const counts[] = {"consumed_train_samples", "consumed_valid_samples"};
    for (int i = 0; i < 2; i++) {
        json_t *c = json_object_get(mc->meta, counts[i]);
        mt_pk_sets(a, d, counts[i], mt_pk_int(a, json_is_integer(c) ? json_integer_value(c) : 0));
    }
    return ns;
}

/* The rank's state dict around its model dict. */
static mt_pk *rank_root(mt_pk_arena *a, const mt_model_ckpt *mc, mt_pk *ns, mt_pk **models, int vp, mt_pk *rng)
{
    mt_pk *r = mt_pk_new(a, MT_PK_DICT);
    mt_pk_sets(a, r, "args", ns);
    mt_pk_sets(a, r, "checkpoint_version", mt_pk_float(a, 3.0));
    if (mc->iteration != MT_CKPT_RELEASE) mt_pk_sets(a, r, "iteration", mt_pk_int(a, mc->iteration));
    if (vp == 1) mt_pk_sets(a, r, "model", models[0]);
    for (int c = 0; c < vp && vp > 1; c++) {   /* the interleaved schedule's model chunks */
        char k[32];
        snprintf(k, sizeof k, "model%d", c);
        mt_pk_sets(a, r, k, models[c]);
    }
    json_t *s = json_object_get(mc->meta, "opt_param_scheduler");
    if (json_is_object(s)) mt_pk_sets(a, r, "opt_param_scheduler", from_json(a, s));
    if (rng) mt_pk_sets(a, r, "rng_state", rng);
    json_t *fl = json_object_get(mc->meta, "num_floating_point_operations_so_far");
    if (json_is_number(fl)) mt_pk_sets(a, r, "num_floating_point_operations_so_far", mt_pk_float(a, json_number_value(fl)));
    return r;
}

/* Transformer Engine's modules of a Megatron-Core layer keep an `_extra_state` entry each (FP8 metadata;
 * None when unused), which Megatron's strict load expects: the attention's core_attention and every linear
 * layer (linear_qkv, linear_proj, linear_fc1, linear_fc2, an expert's and the shared expert's) whose weight
 * the layer holds, written after the layer's tensors. */
typedef struct extra_states {
    char prefix[64];       /* the layer's "decoder.layers.N." */
    int n;
    char mods[64][96];     /* its linear modules so far */
} extra_states;

static void core_extra_states(mt_pk_arena *a, mt_pk *model, extra_states *x)
{
    if (!*x->prefix) return;
    char k[256];
    snprintf(k, sizeof k, "%sself_attention.core_attention._extra_state", x->prefix);
    mt_pk_sets(a, model, k, mt_pk_new(a, MT_PK_NONE));
    for (int i = 0; i < x->n; i++) {
        snprintf(k, sizeof k, "%s%s._extra_state", x->prefix, x->mods[i]);
        mt_pk_sets(a, model, k, mt_pk_new(a, MT_PK_NONE));
    }
    x->prefix[0] = 0;
    x->n = 0;
}

/* Puts tensor v under layout name n in the model dict: legacy names nest at their dots, except the
 * encoder's own keys ("layers.0.mlp.dense_h_to_4h.weight"), which are flat in language_model.encoder as in
 * Megatron's state dict; Megatron-Core's are flat (moe_layer: n is of a mixture-of-experts layer). */
static int place(mt_pk_arena *a, mt_pk *model, const char *n, mt_meg_keys keys, int moe_layer, mt_pk *v,
                 extra_states *x, mt_err *e)
{
    if (keys == MT_MEG_KEYS_MCORE) {
        char c[256];
        if (!mt_meg_core_name(n, moe_layer, c, sizeof c)) return mt_err_set(e, "tensor '%s' has no Megatron-Core name", n);
        char pre[64] = "";
        if (!strncmp(c, "decoder.layers.", 15)) {
            const char *dot = strchr(c + 15, '.');
            snprintf(pre, sizeof pre, "%.*s", (int)(dot - c + 1), c);
        }
        if (*x->prefix && strcmp(pre, x->prefix)) core_extra_states(a, model, x);
        snprintf(x->prefix, sizeof x->prefix, "%s", pre);
        size_t l = strlen(c), pl = strlen(pre);
        if (*pre && l > pl + 7 && !strcmp(c + l - 7, ".weight")) {   /* a linear module's weight */
            char mod[96];
            snprintf(mod, sizeof mod, "%.*s", (int)(l - 7 - pl), c + pl);
            const char *last = strrchr(mod, '.');
            int dup = 0;
            for (int i = 0; i < x->n; i++) dup |= !strcmp(x->mods[i], mod);
            if (!dup && x->n < 64 && !strncmp(last ? last + 1 : mod, "linear_", 7))
                snprintf(x->mods[x->n++], sizeof x->mods[0], "%s", mod);
        }
        mt_pk_sets(a, model, c, v);
        return 0;
    }
    mt_pk *d = model;
    const char *p = n;
    if (!strncmp(n, "language_model.encoder.", 23)) {
        d = child(a, child(a, d, "language_model"), "encoder");
        p = n + 23;
    } else {
        const char *dot;
        while ((dot = strchr(p, '.'))) {
            char k[128];
            snprintf(k, sizeof k, "%.*s", (int)(dot - p), p);
            d = child(a, d, k);
            p = dot + 1;
        }
    }
    mt_pk_sets(a, d, p, v);
    return 0;
}

/* A rank's directory, as Megatron's get_checkpoint_name names it: mp_rank_TT, _PPP with pipeline stages, then
 * _EEE (the expert rank er) with expert parallelism. */
static void rank_dir(char *b, size_t cap, int t, int p, int pp, int er, int ep)
{
    if (pp > 1) snprintf(b, cap, "mp_rank_%02d_%03d", t, p);
    else snprintf(b, cap, "mp_rank_%02d", t);
    if (ep > 1) snprintf(b + strlen(b), cap - strlen(b), "_%03d", er);
}

typedef struct export_ctx {
    mt_model_ckpt *mc;
    const mt_layout *whole;
    float *buf;             /* the largest whole tensor */
    mt_st_dtype dt;
    const char *torch_dtype;
    mt_meg_keys keys;
    int tp, pp, vp, rows, done, total;   /* vp: model chunks per stage (1: not interleaved) */
    int ep, etp;            /* the experts over ep expert ranks, split over etp ranks (a divisor of tp) */
    int chained;            /* the experts' gradients reduced apart (ep > 1 or etp != tp): Megatron's
                               ChainedOptimizer of the dense parameters' optimizer and the experts' */
    int optim;              /* write the optimizer's state */
    int dist;               /* as the distributed optimizer saves it (the run's --use-distributed-optimizer) */
    mt_ckpt_progress *progress;
} export_ctx;

/* A rank's file being built: its value tree and its storages, one per tensor. */
typedef struct rank_out {
    mt_pk_arena a;
    int n, cap;
    mt_tckpt_storage *st;   /* keys: the tensors' own (in the arena) */
    void **data;
} rank_out;

/* A new storage of numel values of src as dt, and the tensor of shape over it. */
static mt_pk *add_tensor(rank_out *o, const float *src, size_t numel, mt_st_dtype dt, int ndim, const int64_t *shape,
                         const char *what, mt_err *e)
{
    if (o->n == o->cap) {
        o->cap = o->cap ? 2 * o->cap : 64;
        o->st = realloc(o->st, (size_t)o->cap * sizeof *o->st);
        o->data = realloc(o->data, (size_t)o->cap * sizeof *o->data);
        if (!o->st || !o->data) mt_die("out of memory");
    }
    int bytes = mt_st_dtype_bits(dt) / 8;
    void *d = mt_xmalloc((numel ? numel : 1) * (size_t)bytes);
    for (size_t i = 0; i < numel; i++) {
        float f = src[i];
        if (dt == MT_ST_F32) memcpy((float *)d + i, &f, 4);
        else if (dt == MT_ST_BF16) ((uint16_t *)d)[i] = mt_f32_to_bf16(f);
        else if (isfinite(f) && fabsf(f) > 65504.0f) {
            free(d);
            mt_err_set(e, "tensor '%s' holds %g (element %zu), beyond fp16's range: convert with --dtype fp32 or bf16",
                       what, (double)f, i);
            return NULL;
        } else ((uint16_t *)d)[i] = mt_f32_to_f16(f);
    }
    char key[16];
    snprintf(key, sizeof key, "%d", o->n);
    mt_pk *t = mt_pk_tensor_new(&o->a, key, dt, (int64_t)numel, 0, ndim, shape);
    o->data[o->n] = d;
    o->st[o->n++] = (mt_tckpt_storage){t->t->key, dt, (int64_t)numel, d};
    return t;
}

/* A new storage of n bytes (a torch.uint8 tensor of one dimension, as torch keeps its generators' states). */
static mt_pk *add_bytes(rank_out *o, const unsigned char *src, int64_t n)
{
    if (o->n == o->cap) {
        o->cap = o->cap ? 2 * o->cap : 64;
        o->st = realloc(o->st, (size_t)o->cap * sizeof *o->st);
        o->data = realloc(o->data, (size_t)o->cap * sizeof *o->data);
        if (!o->st || !o->data) mt_die("out of memory");
    }
    void *d = mt_xmalloc((size_t)n);
    memcpy(d, src, (size_t)n);
    char key[16];
    snprintf(key, sizeof key, "%d", o->n);
    mt_pk *t = mt_pk_tensor_new(&o->a, key, MT_ST_U8, n, 0, 1, &n);
    o->data[o->n] = d;
    o->st[o->n++] = (mt_tckpt_storage){t->t->key, MT_ST_U8, n, d};
    return t;
}

/* numpy's pickle of a uint32 vector: _reconstruct(ndarray, (0,), b'b'), then BUILD with (1, shape,
 * dtype('u4'), False, its little-endian bytes); the dtype is itself dtype('u4', False, True) then BUILD with
 * (3, '<', None, None, None, -1, -1, 0). */
static mt_pk *numpy_u32(mt_pk_arena *a, const uint32_t *v, int n)
{
    mt_pk *dt = mt_pk_named(a, MT_PK_OPAQUE, "numpy.dtype"), *dargs = mt_pk_new(a, MT_PK_TUPLE),
          *dstate = mt_pk_new(a, MT_PK_TUPLE);
    mt_pk_append(a, dargs, mt_pk_str(a, "u4"));
    mt_pk_append(a, dargs, mt_pk_bool(a, false));
    mt_pk_append(a, dargs, mt_pk_bool(a, true));
    mt_pk_append(a, dstate, mt_pk_int(a, 3));
    mt_pk_append(a, dstate, mt_pk_str(a, "<"));
    for (int i = 0; i < 3; i++) mt_pk_append(a, dstate, mt_pk_new(a, MT_PK_NONE));
    mt_pk_append(a, dstate, mt_pk_int(a, -1));
    mt_pk_append(a, dstate, mt_pk_int(a, -1));
    mt_pk_append(a, dstate, mt_pk_int(a, 0));
    dt->obj = mt_pk_new(a, MT_PK_TUPLE);
    mt_pk_append(a, dt->obj, dargs);
    mt_pk_append(a, dt->obj, dstate);

    mt_pk *arr = mt_pk_named(a, MT_PK_OPAQUE, "numpy.core.multiarray._reconstruct"), *args = mt_pk_new(a, MT_PK_TUPLE),
          *zero = mt_pk_new(a, MT_PK_TUPLE), *state = mt_pk_new(a, MT_PK_TUPLE), *shape = mt_pk_new(a, MT_PK_TUPLE);
    mt_pk_append(a, args, mt_pk_named(a, MT_PK_GLOBAL, "numpy.ndarray"));
    mt_pk_append(a, zero, mt_pk_int(a, 0));
    mt_pk_append(a, args, zero);
    mt_pk_append(a, args, mt_pk_bytes(a, "b", 1));
    mt_pk_append(a, shape, mt_pk_int(a, n));
    unsigned char *bytes = mt_xmalloc((size_t)n * 4);
    for (int i = 0; i < n; i++)
        for (int k = 0; k < 4; k++) bytes[4 * i + k] = (unsigned char)(v[i] >> (8 * k));
    mt_pk *raw = mt_pk_bytes(a, bytes, (size_t)n * 4);
    free(bytes);
    mt_pk_append(a, state, mt_pk_int(a, 1));
    mt_pk_append(a, state, shape);
    mt_pk_append(a, state, dt);
    mt_pk_append(a, state, mt_pk_bool(a, false));
    mt_pk_append(a, state, raw);
    arr->obj = mt_pk_new(a, MT_PK_TUPLE);
    mt_pk_append(a, arr->obj, args);
    mt_pk_append(a, arr->obj, state);
    return arr;
}

/* The rank's rng_state: a list of one dict, as Megatron saves it without --data-parallel-random-init, holding
 * the generators' states that seeding the rank with --seed gives (ckpt/megatron_rng.h). */
static mt_pk *rng_state(rank_out *o, const mt_layout *l, int64_t seed)
{
    mt_pk_arena *a = &o->a;
    mt_meg_rng g;
    mt_meg_rng_seeded_ep(seed, l->part.tp_rank, l->part.pp_stage, l->part.ep_size > 1 ? l->part.ep_rank : 0,
                         l->part.etp_size > 0 ? l->part.etp_rank : l->part.tp_rank, &g);
    mt_pk *d = mt_pk_new(a, MT_PK_DICT), *py = mt_pk_new(a, MT_PK_TUPLE), *words = mt_pk_new(a, MT_PK_TUPLE);
    for (int i = 0; i < MT_MT19937_N; i++) mt_pk_append(a, words, mt_pk_int(a, g.py[i]));
    mt_pk_append(a, words, mt_pk_int(a, MT_MT19937_N));   /* the index */
    mt_pk_append(a, py, mt_pk_int(a, 3));
    mt_pk_append(a, py, words);
    mt_pk_append(a, py, mt_pk_new(a, MT_PK_NONE));
    mt_pk_sets(a, d, "random_rng_state", py);
    mt_pk *np = mt_pk_new(a, MT_PK_TUPLE);
    mt_pk_append(a, np, mt_pk_str(a, "MT19937"));
    mt_pk_append(a, np, numpy_u32(a, g.np, MT_MT19937_N));
    mt_pk_append(a, np, mt_pk_int(a, MT_MT19937_N));
    mt_pk_append(a, np, mt_pk_int(a, 0));
    mt_pk_append(a, np, mt_pk_float(a, 0.0));
    mt_pk_sets(a, d, "np_rng_state", np);
    mt_pk_sets(a, d, "torch_rng_state", add_bytes(o, g.torch_cpu, MT_TORCH_CPU_RNG_BYTES));
    mt_pk_sets(a, d, "cuda_rng_state", add_bytes(o, g.cuda, 16));
    mt_pk *tr = mt_pk_new(a, MT_PK_DICT);
    mt_pk_sets(a, tr, "data-parallel-rng", add_bytes(o, g.data_parallel, 16));
    mt_pk_sets(a, tr, "model-parallel-rng", add_bytes(o, g.model_parallel, 16));
    mt_pk_sets(a, tr, "expert-parallel-rng", add_bytes(o, g.expert_parallel, 16));
    mt_pk_sets(a, d, "rng_tracker_states", tr);
    mt_pk *list = mt_pk_new(a, MT_PK_LIST);
    mt_pk_append(a, list, d);
    return list;
}

static void rank_out_free(rank_out *o)
{
    for (int i = 0; i < o->n; i++) free(o->data[i]);
    free(o->data);
    free(o->st);
    mt_pk_arena_free(&o->a);
}

/* Tensor lt's slice for this rank (suffix NULL: the weights; ".exp_avg", ".exp_avg_sq") into dst. */
static int read_slice(export_ctx *x, const mt_layout_tensor *lt, const char *suffix, float *dst, mt_err *e)
{
    mt_tensor_kind k = lt->kind == MT_T_OUTPUT && x->mc->arch.tied_embeddings ? MT_T_WORD_EMB : lt->kind;
    const mt_layout_tensor *w = mt_layout_get_expert(x->whole, lt->layer, k, lt->expert);
    if (!w) return mt_err_set(e, "tensor '%s' has no whole tensor", lt->name);
    int rc = suffix ? mt_model_read_optim(x->mc, w->name, suffix, w->ndim, w->global_shape, x->buf, e)
                    : mt_model_read_tensor(x->mc, w->name, w->ndim, w->global_shape, x->buf, e);
    if (!rc) mt_layout_slice(lt, x->buf, dst);
    return rc;
}

/* Megatron-Core's optimizer state dict of the rank: torch's AdamW state dict (per-parameter step, exp_avg,
 * exp_avg_sq under integer indices) over Megatron's param groups (the weight-decayed parameters, then the
 * biases and 1-D ones, each in the order the model registers them); as FP32Optimizer saves it, or with
 * mixed precision as Float16OptimizerWithFloat16Params does, with the fp32 main parameters (master, by
 * layout index) and, for fp16, the loss scaler. The experts (no expert parallelism: Megatron reduces their
 * gradients with the dense ones, allreduce) are in the same two groups, so there is one optimizer, not a
 * ChainedOptimizer's list. With the distributed optimizer (x->dist) its state_dict(): the param groups without
 * their parameters, with the step, and the loss scaler (the parameters' state goes to distrib_optim.pt).
 * sel: -1 every parameter; 0 the dense ones, 1 the experts' (a ChainedOptimizer's two, see chained_state). */
static mt_pk *optimizer_state(export_ctx *x, const mt_layout *l, rank_out *o, float *s, mt_pk **master, int sel,
                              mt_err *e)
{
    mt_pk_arena *a = &o->a;
    json_t *jo = json_object_get(x->mc->meta, "optimizer"), *args = x->mc->args;
    double step = json_number_value(json_object_get(jo, "step"));
    const mt_layout_tensor **order = mt_xcalloc((size_t)(l->n ? l->n : 1), sizeof *order);
    int n = mt_meg_param_order(l, x->keys == MT_MEG_KEYS_MCORE, 0, order), idx = 0, rc = 0;
    mt_pk *state = mt_pk_new(a, MT_PK_DICT), *groups = mt_pk_new(a, MT_PK_LIST), *masters = mt_pk_new(a, MT_PK_LIST);
    float stepf = (float)step;
    /* the groups in the order Megatron-Core sorts them: the default (weight-decayed), then wd_mult 0 */
    for (int g = 0; g < 2 && !rc; g++) {
        int any = 0;
        for (int q = 0; q < n; q++) any |= order[q]->no_decay == g && (sel < 0 || (order[q]->expert >= 0) == sel);
        /* the experts' optimizer has its group on every rank (Megatron gathers the groups' keys over the ranks),
         * empty on a stage without experts */
        if (!any && !(sel == 1 && g == 0)) continue;
        mt_pk *gr = mt_pk_new(a, MT_PK_DICT), *params = mt_pk_new(a, MT_PK_LIST), *mg = mt_pk_new(a, MT_PK_LIST);
        for (int q = 0; q < n && !rc && !x->dist; q++) {
            const mt_layout_tensor *lt = order[q];
            if (lt->no_decay != g || (sel >= 0 && (lt->expert >= 0) != sel)) continue;
            mt_pk *ps = mt_pk_new(a, MT_PK_DICT), *t;
            t = add_tensor(o, &stepf, 1, MT_ST_F32, 0, NULL, "step", e);
            mt_pk_sets(a, ps, "step", t);
            for (int m = 0; m < 2 && !rc; m++) {
                const char *sfx = m ? ".exp_avg_sq" : ".exp_avg";
                if (read_slice(x, lt, sfx, s, e) ||
                    !(t = add_tensor(o, s, lt->numel, MT_ST_F32, lt->ndim, lt->local_shape, lt->name, e)))
                    rc = -1;
                else mt_pk_sets(a, ps, sfx + 1, t);
            }
            mt_pk_set(a, state, mt_pk_int(a, idx), ps);
            mt_pk_append(a, params, mt_pk_int(a, idx++));
            if (master) mt_pk_append(a, mg, master[lt - l->t]);
        }
        /* Megatron's group keys, then torch AdamW's defaults, then the indices (as state_dict() orders them);
         * lr and weight_decay are set again by Megatron's scheduler at every step */
        mt_pk_sets(a, gr, "wd_mult", mt_pk_float(a, g ? 0.0 : 1.0));
        mt_pk_sets(a, gr, "lr_mult", mt_pk_float(a, 1.0));
        mt_pk_sets(a, gr, "is_expert_parallel", mt_pk_bool(a, sel == 1));
        mt_pk_sets(a, gr, "is_decoupled_lr", mt_pk_bool(a, false));
        mt_pk_sets(a, gr, "default_config", mt_pk_bool(a, true));
        double lr = json_number_value(json_object_get(args, "lr")), wd = json_number_value(json_object_get(args, "weight-decay"));
        mt_pk_sets(a, gr, "max_lr", mt_pk_float(a, lr));
        mt_pk_sets(a, gr, "min_lr", mt_pk_float(a, json_number_value(json_object_get(args, "min-lr"))));
        mt_pk_sets(a, gr, "lr", mt_pk_float(a, lr));
        mt_pk *betas = mt_pk_new(a, MT_PK_TUPLE);
        mt_pk_append(a, betas, mt_pk_float(a, json_number_value(json_object_get(jo, "beta1"))));
        mt_pk_append(a, betas, mt_pk_float(a, json_number_value(json_object_get(jo, "beta2"))));
        mt_pk_sets(a, gr, "betas", betas);
        mt_pk_sets(a, gr, "eps", mt_pk_float(a, json_number_value(json_object_get(jo, "eps"))));
        mt_pk_sets(a, gr, "weight_decay", mt_pk_float(a, g ? 0.0 : wd));
        mt_pk_sets(a, gr, "amsgrad", mt_pk_bool(a, false));
        mt_pk_sets(a, gr, "maximize", mt_pk_bool(a, false));
        mt_pk_sets(a, gr, "foreach", mt_pk_new(a, MT_PK_NONE));
        mt_pk_sets(a, gr, "capturable", mt_pk_bool(a, false));
        mt_pk_sets(a, gr, "differentiable", mt_pk_bool(a, false));
        mt_pk_sets(a, gr, "fused", mt_pk_new(a, MT_PK_NONE));
        if (x->dist) mt_pk_sets(a, gr, "step", mt_pk_int(a, (int64_t)step));
        else mt_pk_sets(a, gr, "params", params);
        mt_pk_append(a, groups, gr);
        mt_pk_append(a, masters, mg);
    }
    free(order);
    if (rc) return NULL;
    mt_pk *sd = mt_pk_new(a, MT_PK_DICT);
    if (!x->dist) mt_pk_sets(a, sd, "state", state);
    mt_pk_sets(a, sd, "param_groups", groups);
    if (!master && !x->dist) return sd;
    mt_pk *f16 = mt_pk_new(a, MT_PK_DICT);
    mt_pk_sets(a, f16, "optimizer", sd);
    json_t *ls = json_object_get(x->mc->meta, "loss_scaler");
    if (x->dt == MT_ST_F16 && json_is_true(json_object_get(ls, "dynamic"))) {
        mt_pk *gs = mt_pk_new(a, MT_PK_DICT);
        float scale = (float)json_number_value(json_object_get(ls, "scale"));
        mt_pk *t = add_tensor(o, &scale, 1, MT_ST_F32, 0, NULL, "grad_scaler.scale", e);
        mt_pk_sets(a, gs, "scale", t);
        mt_pk_sets(a, gs, "growth_tracker", mt_pk_int(a, json_integer_value(json_object_get(ls, "growth_tracker"))));
        mt_pk_sets(a, gs, "hysteresis_tracker", mt_pk_int(a, json_integer_value(json_object_get(ls, "hysteresis_tracker"))));
        mt_pk_sets(a, f16, "grad_scaler", gs);
    }
    if (!x->dist) mt_pk_sets(a, f16, "fp32_from_fp16_params", masters);
    return f16;
}

/* A ChainedOptimizer's state_dict() (the experts' gradients reduced over other ranks than the rest's: Megatron
 * builds one optimizer of the dense parameters and one of the experts', is_expert_parallel): the list of the
 * two optimizers' state dicts, each with its own parameter indices from 0. */
static mt_pk *chained_state(export_ctx *x, const mt_layout *l, rank_out *o, float *s, mt_pk **master, mt_err *e)
{
    mt_pk *list = mt_pk_new(&o->a, MT_PK_LIST);
    for (int sel = 0; sel < 2; sel++) {
        mt_pk *sd = optimizer_state(x, l, o, s, master, sel, e);
        if (!sd) return NULL;
        mt_pk_append(&o->a, list, sd);
    }
    return list;
}

/* One optimizer's get_parameter_state_dp_zero() of the rank (sel: -1 every parameter, 0 the dense ones, 1 the
 * experts', as mt_meg_dbufs): buckets_coalesced, then per gradient buffer (one per model chunk holding such
 * parameters, numbered from 0), under its (param dtype, grad dtype) key, the flat fp32 main parameters and Adam's
 * moments with zeros in the alignment gaps, and numel_unpadded. NULL on error. */
static mt_pk *dist_state(export_ctx *x, const mt_layout *l, rank_out *o, int sel, float *s, mt_err *e)
{
    mt_pk_arena *a = &o->a;
    json_t *args = x->mc->args;
    int nc = l->chunks > 1 ? l->chunks : 1, rc = 0, k = 0;
    int64_t np = 0;
    for (int j = 0; j < l->n; j++) np += (int64_t)l->t[j].numel;
    /* the buckets of the args written: their data-parallel size, the smallest run's */
    json_t *bs = json_object_get(args, "ddp-bucket-size");
    int64_t size = mt_meg_bucket_size(json_is_true(json_object_get(args, "overlap-grad-reduce")),
                                      json_is_integer(bs) ? json_integer_value(bs) : 0, 0,
                                      smallest_dp(x->tp, x->ep, x->etp), np);
    mt_meg_dbuf *b = mt_xcalloc((size_t)nc, sizeof *b);
    mt_meg_dbufs(l, x->keys == MT_MEG_KEYS_MCORE, 0, x->mc->arch.tied_embeddings, size, sel, b);
    mt_pk *root = mt_pk_new(a, MT_PK_DICT);
    mt_pk_sets(a, root, "buckets_coalesced", mt_pk_bool(a, true));
    /* the gradients' dtype: fp32 for bf16 (Megatron turns accumulate_allreduce_grads_in_fp32 on) and fp32 */
    const char *gdt = x->dt == MT_ST_F16 ? "torch.float16" : "torch.float32";
    static const char *const keys[3] = {"param", "exp_avg", "exp_avg_sq"};
    static const char *const sfx[3] = {NULL, ".exp_avg", ".exp_avg_sq"};
    for (int c = 0; c < nc && !rc; c++) {
        int64_t numel = b[c].numel;
        if (sel == 1 && !b[c].n) continue;   /* a chunk without experts has no expert buffer */
        mt_pk *st = mt_pk_new(a, MT_PK_DICT);
        for (int q = 0; q < 3 && !rc; q++) {
            float *w = mt_xcalloc((size_t)(numel ? numel : 1), sizeof *w);
            for (int p = 0; p < b[c].n && !rc; p++) {
                const mt_layout_tensor *lt = b[c].t[p];
                if (read_slice(x, lt, sfx[q], s, e)) rc = -1;
                else memcpy(w + b[c].off[p], s, lt->numel * sizeof *s);
            }
            mt_pk *t = rc ? NULL : add_tensor(o, w, (size_t)numel, MT_ST_F32, 1, &numel, keys[q], e);
            free(w);
            if (!t) rc = -1;
            else mt_pk_sets(a, st, keys[q], t);
        }
        mt_pk_sets(a, st, "numel_unpadded", mt_pk_int(a, numel));
        mt_pk *key = mt_pk_new(a, MT_PK_TUPLE), *g = mt_pk_new(a, MT_PK_DICT);
        mt_pk_append(a, key, mt_pk_named(a, MT_PK_GLOBAL, x->torch_dtype));
        mt_pk_append(a, key, mt_pk_named(a, MT_PK_GLOBAL, gdt));
        mt_pk_set(a, g, key, st);
        mt_pk_set(a, root, mt_pk_int(a, k++), g);
    }
    mt_meg_dbufs_free(b, nc);
    free(b);
    return rc ? NULL : root;
}

/* Which of a ChainedOptimizer's two states the smallest run of the layout saves in the directory of (tensor
 * rank t, expert rank er): each rank writes the list of its optimizers' states, an optimizer's only on its
 * data-parallel rank 0 (the dense one's data-parallel group, the experts' expert-data-parallel group), None for
 * the other; the ranks of data-parallel rank 0 are the first tp, of expert-data-parallel rank 0 the first
 * etp ep, rank r at tensor rank r % tp and expert rank (r / etp) % ep. A pair no rank holds (experts whole:
 * never loaded) gets both. */
static void dist_held(const export_ctx *x, int t, int er, int *dense, int *experts)
{
    *dense = (t / x->etp) % x->ep == er;
    *experts = 0;
    for (int r = 0; r < x->etp * x->ep && !*experts; r++) *experts = r % x->tp == t && (r / x->etp) % x->ep == er;
    if (!*dense && !*experts) *dense = *experts = 1;
}

/* One rank's distrib_optim.pt at path: its optimizer's dist_state, or with the experts' optimizer apart (a
 * ChainedOptimizer, as ChainedOptimizer.save_parameter_state writes it) the list of the dense parameters' and
 * the experts' states, None for one this directory's rank does not save (dist_held). */
static int write_dist(export_ctx *x, const mt_layout *l, const char *path, mt_err *e)
{
    rank_out o = {0};
    mt_pk_arena *a = &o.a;
    size_t most = 1;
    for (int j = 0; j < l->n; j++)
        if (l->t[j].numel > most) most = l->t[j].numel;
    float *s = mt_xmalloc(most * sizeof(float));
    mt_pk *root = NULL;
    int rc = 0;
    if (!x->chained) {
        if (!(root = dist_state(x, l, &o, -1, s, e))) rc = -1;
    } else {
        int held[2];
        dist_held(x, l->part.tp_rank, l->part.ep_size > 1 ? l->part.ep_rank : 0, &held[0], &held[1]);
        root = mt_pk_new(a, MT_PK_LIST);
        for (int sel = 0; sel < 2 && !rc; sel++) {
            mt_pk *st = held[sel] ? dist_state(x, l, &o, sel, s, e) : mt_pk_new(a, MT_PK_NONE);
            if (!st) rc = -1;
            else mt_pk_append(a, root, st);
        }
    }
    if (!rc) rc = mt_tckpt_save(path, "distrib_optim", root, o.st, o.n, e);
    if (rc) mt_err_prefix(e, "%s", path);
    free(s);
    rank_out_free(&o);
    return rc;
}

/* One rank's model_optim_rng.pt at path. */
static int write_rank(export_ctx *x, const mt_layout *l, const char *path, mt_err *e)
{
    rank_out o = {0};
    int vp = l->chunks > 1 ? l->chunks : 1, cur = 0;
    mt_pk **models = mt_xcalloc((size_t)vp, sizeof *models);
    for (int c = 0; c < vp; c++) {
        models[c] = mt_pk_new(&o.a, MT_PK_DICT);
        models[c]->b = true;
    }
    size_t most = 1;
    for (int j = 0; j < l->n; j++)
        if (l->t[j].numel > most) most = l->t[j].numel;
    float *s = mt_xmalloc(most * sizeof(float));
    /* mixed precision: the fp32 main parameters go with the optimizer's state */
    mt_pk **master = x->optim && !x->dist && x->dt != MT_ST_F32 ? mt_xcalloc((size_t)(l->n ? l->n : 1), sizeof *master) : NULL;
    extra_states ex = {0};
    int rc = 0;
    for (int j = 0; j < l->n && !rc; j++) {
        const mt_layout_tensor *lt = &l->t[j];
        /* a model chunk's tensors are named "model<c>." in the layout: into that chunk's dict */
        const char *name = lt->name;
        int c = 0;
        if (vp > 1 && sscanf(name, "model%d.", &c) == 1 && c >= 0 && c < vp) name = strchr(name, '.') + 1;
        if (c != cur) {
            core_extra_states(&o.a, models[cur], &ex);
            cur = c;
        }
        mt_pk *t;
        if (read_slice(x, lt, NULL, s, e) ||
            !(t = add_tensor(&o, s, lt->numel, x->dt, lt->ndim, lt->local_shape, lt->name, e)) ||
            place(&o.a, models[c], name, x->keys, mt_arch_is_moe(&x->mc->arch, lt->layer), t, &ex, e) ||
            (master && !(master[j] = add_tensor(&o, s, lt->numel, MT_ST_F32, lt->ndim, lt->local_shape, lt->name, e))))
            rc = mt_err_prefix(e, "%s", path);
        if (x->progress) x->progress(++x->done, x->total);
    }
    if (!rc) core_extra_states(&o.a, models[cur], &ex);
    mt_pk *opt = NULL;
    if (!rc && x->optim && !(opt = x->chained ? chained_state(x, l, &o, s, master, e) : optimizer_state(x, l, &o, s, master, -1, e)))
        rc = mt_err_prefix(e, "%s", path);
    if (!rc) {
        mt_pk *ns = namespace(&o.a, x->mc, x->tp, x->pp, x->vp, x->ep, x->etp, x->rows, x->torch_dtype);
        int64_t seed;
        mt_pk *root = rank_root(&o.a, x->mc, ns, models, vp,
                                mt_meg_export_rng_seed(x->mc, x->pp, &seed) ? rng_state(&o, l, seed) : NULL);
        if (opt) {   /* after the model (its last chunk), as Megatron's save_checkpoint orders the dict */
            char last[32];
            if (vp > 1) snprintf(last, sizeof last, "model%d", vp - 1);
            else snprintf(last, sizeof last, "model");
            mt_pk *r2 = mt_pk_new(&o.a, MT_PK_DICT);
            for (size_t i = 0; i < root->len; i++) {
                mt_pk_set(&o.a, r2, root->items[i], root->vals[i]);
                if (root->items[i]->kind == MT_PK_STR && !strcmp(root->items[i]->s, last)) mt_pk_sets(&o.a, r2, "optimizer", opt);
            }
            root = r2;
        }
        /* torch.save names the archive after the file, less its extension */
        rc = mt_tckpt_save(path, "model_optim_rng", root, o.st, o.n, e);
    }
    free(master);
    free(models);
    free(s);
    rank_out_free(&o);
    return rc;
}

int mt_meg_export_rng_seed(const mt_model_ckpt *mc, int pp, int64_t *seed)
{
    json_t *s = json_object_get(mc->args, "seed");
    *seed = json_is_integer(s) ? json_integer_value(s) : 1234;
    return *seed > 0 && *seed < ((int64_t)1 << 32) - 100 * (int64_t)pp;
}

int mt_meg_export_ckpt(mt_model_ckpt *mc, const char *out, int tp, int pp, int ep, int etp, int chunk_layers,
                       mt_meg_keys keys, const char *dtype, int no_optim, mt_ckpt_progress *progress, const char **dtype_out,
                       int *with_optim, mt_err *e)
{
    if (mc->hf || mc->meg) return mt_err_set(e, "%s: --to megatron writes an mt checkpoint", mc->dir);
    if (mc->arch.num_experts && keys != MT_MEG_KEYS_MCORE)
        return mt_err_set(e, "%s: a model with experts: Megatron's legacy model has none (use --megatron-keys mcore)",
                          mc->dir);
    if (ep < 1) ep = 1;
    if (etp < 1) etp = tp;
    if ((ep > 1 || etp != tp) && !mc->arch.num_experts)
        return mt_err_set(e, "%s: --target-expert-%s-parallel-size %d for a model without experts", mc->dir,
                          ep > 1 ? "model" : "tensor", ep > 1 ? ep : etp);
    if (tp % etp)
        return mt_err_set(e, "--target-expert-tensor-parallel-size %d: it must divide the tensor size (%d)", etp, tp);
    if (ep > 1 && mc->arch.num_experts % ep)
        return mt_err_set(e, "--target-expert-model-parallel-size %d does not divide the %d experts", ep,
                          mc->arch.num_experts);
    if (!dtype)
        dtype = json_is_true(json_object_get(mc->args, "bf16"))   ? "bf16"
                : json_is_true(json_object_get(mc->args, "fp16")) ? "fp16"
                                                                   : "fp32";
    int L = mc->arch.num_layers, vp = 1;
    if (chunk_layers > 0) {
        if (L % (pp * chunk_layers) || L / (pp * chunk_layers) < 2)
            return mt_err_set(e, "--target-num-layers-per-virtual-pipeline-stage %d: the %d layers over %d stages make no "
                                 "two or more chunks of that many",
                              chunk_layers, L, pp);
        vp = L / (pp * chunk_layers);
    }
    export_ctx x = {.mc = mc, .keys = keys, .tp = tp, .pp = pp, .vp = vp, .ep = ep, .etp = etp,
                    .chained = ep > 1 || etp != tp, .progress = progress,
                    .optim = !no_optim && mt_model_has_optim(mc) && json_is_object(json_object_get(mc->meta, "optimizer"))};
    x.dist = x.optim && json_is_true(json_object_get(mc->args, "use-distributed-optimizer"));
    *with_optim = x.optim;
    if (!strcmp(dtype, "fp32")) x.dt = MT_ST_F32, x.torch_dtype = "torch.float32";
    else if (!strcmp(dtype, "bf16")) x.dt = MT_ST_BF16, x.torch_dtype = "torch.bfloat16";
    else if (!strcmp(dtype, "fp16")) x.dt = MT_ST_F16, x.torch_dtype = "torch.float16";
    else return mt_err_set(e, "dtype '%s' is not fp32, bf16 or fp16", dtype);
    *dtype_out = dtype;
    mt_model_arch arch = mc->arch;
    arch.padded_vocab_size = x.rows = mt_gpt_padded_vocab(mc->vocab_size, mc->a.make_vocab_size_divisible_by, tp);
    mt_layout whole;
    mt_layout_part one = {0, 1, 0, 1, 1, 0, 1, 0, 0};
    if (mt_layout_build(&arch, &one, &whole, e)) return -1;
    x.whole = &whole;
    /* rank i: tensor rank i % tp, expert rank (i / tp) % ep, stage i / (tp ep); with an expert tensor size below
     * tp every (tensor rank, expert rank) pair, so that a run of any data-parallel size finds
     * the directory of its own */
    int n = tp * pp * ep, rc = 0;
    mt_layout *l = mt_xcalloc((size_t)n, sizeof *l);
    for (int i = 0; i < n && !rc; i++) {
        mt_layout_part part = {i % tp, tp, i / (tp * ep), pp, vp, (i / tp) % ep, ep, etp < tp ? (i % tp) % etp : 0,
                               etp < tp ? etp : 0};
        if (mt_layout_build(&arch, &part, &l[i], e)) rc = -1;
        else x.total += l[i].n;
    }
    size_t most = 1;
    for (int i = 0; i < whole.n; i++)
        if (whole.t[i].numel > most) most = whole.t[i].numel;
    x.buf = mt_xmalloc(most * sizeof(float));
    mt_hf_out o = {0};
    char sub[32], rd[32];
    if (mc->iteration == MT_CKPT_RELEASE) snprintf(sub, sizeof sub, "release");
    else snprintf(sub, sizeof sub, "iter_%07lld", (long long)mc->iteration);
    if (!rc) rc = mt_hf_out_begin(&o, out, e);
    char *itdir = o.tmp ? mt_path_join(o.tmp, sub) : NULL;
    for (int i = 0; i < n && !rc; i++) {
        rank_dir(rd, sizeof rd, i % tp, i / (tp * ep), pp, (i / tp) % ep, ep);
        char *dir = mt_path_join(itdir, rd), *path = mt_path_join(dir, "model_optim_rng.pt");
        rc = mt_mkdir_p(dir, e) || write_rank(&x, &l[i], path, e) ? -1 : 0;
        if (!rc && x.dist) {
            char *dp = mt_path_join(dir, "distrib_optim.pt");
            rc = write_dist(&x, &l[i], dp, e);
            free(dp);
        }
        free(dir);
        free(path);
    }
    if (!rc) rc = mt_model_check_all_read(mc, e);
    if (!rc && x.optim) rc = mt_model_check_all_read_optim(mc, e);
    if (!rc) {
        /* the tracker as Megatron writes it: the iteration, or "release" */
        char *tracker = mt_path_join(o.tmp, MT_CKPT_TRACKER);
        FILE *f = fopen(tracker, "w");
        if (!f) rc = mt_err_sys(e, "cannot create %s", tracker);
        else {
            if (mc->iteration == MT_CKPT_RELEASE) fputs("release", f);
            else fprintf(f, "%lld", (long long)mc->iteration);
            if (fclose(f)) rc = mt_err_sys(e, "cannot write %s", tracker);
        }
        free(tracker);
    }
    if (!rc) rc = mt_hf_out_commit(&o, e);
    if (rc && o.tmp) mt_hf_out_abort(&o);
    free(itdir);
    free(x.buf);
    for (int i = 0; i < n; i++) mt_layout_free(&l[i]);
    free(l);
    mt_layout_free(&whole);
    return rc;
}
