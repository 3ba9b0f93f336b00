/* hf_convert.c: checkpoint to Hugging Face directory and back, tensor by tensor (see hf_convert.h). */
#include "ckpt/hf_convert.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ckpt/checkpoint.h"
#include "ckpt/hf_gpt2.h"
#include "ckpt/hf_llama.h"
#include "ckpt/hf_moe.h"
#include "ckpt/hf_out.h"
#include "io/fsutil.h"
#include "mt_base.h"

const char *mt_hf_dtype_name(mt_st_dtype d)
{
    return d == MT_ST_BF16 ? "bf16" : d == MT_ST_F16 ? "fp16" : "fp32";
}

/* ---- checkpoint -> Hugging Face ---- */

typedef struct export_ctx {
    mt_model_ckpt *mc;
    mt_hf_tensor *t;
    int n, done;
    mt_st_dtype dtype;
    float *a, *b;   /* the Megatron tensor, the HF tensor */
    float *whole;   /* the Megatron tensor that several HF ones are parts of (Llama's QKV, fc1) */
    char whole_name[128];
    mt_ckpt_progress *progress;
} export_ctx;

static int export_fill(void *ctx, int index, void *buf, size_t nbytes, mt_err *e)
{
    export_ctx *x = ctx;
    const mt_hf_tensor *t = &x->t[index];
    (void)nbytes;
    const float *src = x->a;
    if (t->x == MT_HF_QKV_PART || t->x == MT_HF_FC1_PART) {   /* read once for its parts */
        if (strcmp(x->whole_name, t->mt)) {
            x->whole_name[0] = 0;
            if (mt_model_read_tensor(x->mc, t->mt, t->ndim, t->mt_shape, x->whole, e)) return -1;
            snprintf(x->whole_name, sizeof x->whole_name, "%s", t->mt);
        }
        src = x->whole;
    } else if (mt_model_read_tensor(x->mc, t->mt, t->ndim, t->mt_shape, x->a, e)) {
        return -1;
    }
    size_t n = (size_t)t->hf_shape[0] * (size_t)(t->ndim == 2 ? t->hf_shape[1] : 1);
    float *dst = x->dtype == MT_ST_F32 ? buf : x->b;
    mt_hf_export(t, x->mc->cfg.num_heads, src, dst);
    uint16_t *h = buf;
    /* every value written must be the finite number it was: a non-finite weight, or one beyond the
     * largest number of the output dtype (65504 in fp16), is an error naming the tensor */
    for (size_t i = 0; i < n; i++) {
        float v = dst[i];
        if (x->dtype == MT_ST_BF16) h[i] = mt_f32_to_bf16(v);
        else if (x->dtype == MT_ST_F16) h[i] = mt_f32_to_f16(v);
        if (!isfinite(v))
            return mt_err_set(e, "%s: tensor '%s' holds a non-finite value (%g at element %zu of transformer.%s)",
                              x->mc->dir, t->mt, (double)v, i, t->hf);
        float back = x->dtype == MT_ST_BF16 ? mt_bf16_to_f32(h[i]) : x->dtype == MT_ST_F16 ? mt_f16_to_f32(h[i]) : v;
        if (!isfinite(back))
            return mt_err_set(e, "%s: tensor '%s': %g (element %zu of transformer.%s) overflows %s (largest %g); "
                                 "convert with --dtype fp32 or bf16",
                              x->mc->dir, t->mt, (double)v, i, t->hf, mt_hf_dtype_name(x->dtype),
                              x->dtype == MT_ST_F16 ? 65504.0 : 3.3895313892515355e38);
    }
    ++x->done;
    if (x->progress) x->progress(x->done, x->n);
    return 0;
}

/* The config.json of the Llama model of mc with rows vocabulary rows; -1 with e set when mc's options
 * are not Llama's. */
static int llama_config(mt_model_ckpt *mc, const mt_model_arch *arch, int64_t rows, mt_hf_config *hc, mt_err *e)
{
    const mt_gpt_config *c = &mc->cfg;
    if (c->rotary_percent != 1.0)
        return mt_err_set(e, "%s: --rotary-percent %g: transformers' LlamaForCausalLM has no partial rotary "
                             "embedding (it rotates every channel of a head); only 1.0 converts", mc->dir,
                          c->rotary_percent);
    if (c->rotary_base != floor(c->rotary_base) || c->rotary_base > 9.2e18)
        return mt_err_set(e, "%s: --rotary-base %g is not an integer", mc->dir, c->rotary_base);
    json_t *from = json_object_get(mc->meta, "converted_from"), *b = json_object_get(from, "bos_token_id"),
           *s = json_object_get(from, "eos_token_id");
    *hc = (mt_hf_config){
        .llama = 1, .n_layer = c->num_layers, .n_embd = c->hidden_size, .n_head = c->num_heads,
        .n_kv_head = arch->num_query_groups, .n_inner = c->ffn_hidden_size, .n_positions = c->max_position_embeddings,
        .vocab_size = (int)rows, .layer_norm_epsilon = mc->a.layernorm_epsilon, .initializer_range = mc->a.init_method_std,
        .rope_theta = (int64_t)c->rotary_base, .tie_word_embeddings = arch->tied_embeddings,
        /* the ids of the model converted from, else those of the tokenizer's end of document */
        .bos_token_id = json_is_integer(b) ? (int)json_integer_value(b) : from ? -1 : (int)mc->tok.eod,
        .eos_token_id = json_is_integer(s) ? (int)json_integer_value(s) : from ? -1 : (int)mc->tok.eod,
    };
    if (!arch->num_experts) return 0;
    /* a mixture of experts: Mixtral or Qwen2-MoE, whose routing is a softmax, dropless, unscaled */
    int kind = mt_hf_moe_kind(arch, e);
    if (kind < 0) return mt_err_prefix(e, "%s", mc->dir);
    if (c->moe_score != MTK_MOE_SOFTMAX || c->moe_topk_scaling > 0 || c->moe_capacity_factor > 0)
        return mt_err_set(e, "%s: transformers' %s routes by a softmax, dropless and unscaled: the checkpoint's "
                             "--moe-router-score-function, --moe-router-topk-scaling-factor or "
                             "--moe-expert-capacity-factor differ", mc->dir,
                          kind == MT_HF_MIXTRAL ? "MixtralForCausalLM" : "Qwen2MoeForCausalLM");
    if (kind == MT_HF_MIXTRAL && c->moe_pre_softmax)
        return mt_err_set(e, "%s: MixtralForCausalLM renormalizes the top-k weights: --moe-router-pre-softmax has no "
                             "Mixtral equivalent", mc->dir);
    hc->moe = kind;
    hc->n_experts = c->num_experts;
    hc->topk = c->moe_topk;
    hc->moe_inner = c->moe_ffn_hidden_size;
    hc->shared_inner = c->moe_shared_ffn;
    hc->norm_topk_prob = !c->moe_pre_softmax;
    hc->qkv_bias = arch->add_qkv_bias;
    hc->aux_coef = c->moe_aux_coeff;
    memcpy(hc->moe_layers, arch->moe_layers, sizeof hc->moe_layers);
    return 0;
}

int mt_hf_export_ckpt(mt_model_ckpt *mc, const char *out_dir, const char *dtype, mt_ckpt_progress *progress,
                      int *n_tensors, const char **dtype_out, mt_err *e)
{
    const mt_gpt_config *c = &mc->cfg;
    mt_model_arch arch = mt_gpt_arch(c);
    int llama = mt_hf_llama_is(&arch);
    if (!llama && !mc->tok.bpe)
        return mt_err_set(e, "%s: the checkpoint has no GPT-2 vocabulary (NullTokenizer): pass --vocab-file and "
                             "--merge-file", mc->dir);
    /* Llama's tokenizer goes with it as transformers reads one: GPT-2's files, or the tokenizer.json */
    const char *type = mc->a.tokenizer_type, *tok_model = NULL;
    if (llama && type && !strcmp(type, "HuggingFaceTokenizer")) {
        char *jp = NULL, *jd = NULL;
        if (!mc->tokenizer_model)
            return mt_err_set(e, "%s: --tokenizer-type HuggingFaceTokenizer without --tokenizer-model: no tokenizer "
                                 "to write with the model", mc->dir);
        if (mt_hf_out_llama_tokenizer_json(mc->tokenizer_model, &jp, &jd, e)) return mt_err_prefix(e, "%s", mc->dir);
        free(jp);
        free(jd);
        tok_model = mc->tokenizer_model;
    } else if (llama && type && strcmp(type, "GPT2BPETokenizer")) {
        return mt_err_set(e, "%s: --tokenizer-type %s: transformers has no tokenizer of this kind to write with the "
                             "model (GPT2BPETokenizer and HuggingFaceTokenizer convert)", mc->dir, type);
    }
    /* defaults for a checkpoint converted from Hugging Face: back to its dtype and vocabulary rows */
    json_t *from = json_object_get(mc->meta, "converted_from");
    const char *dn = dtype;
    if (!dn) {
        const char *src = json_string_value(json_object_get(from, "dtype"));
        dn = src && (!strcmp(src, "bf16") || !strcmp(src, "fp16")) ? src : "fp32";
    }
    mt_st_dtype dt = !strcmp(dn, "bf16") ? MT_ST_BF16 : !strcmp(dn, "fp16") ? MT_ST_F16 : MT_ST_F32;
    if (dt == MT_ST_F32 && strcmp(dn, "fp32")) return mt_err_set(e, "dtype '%s' is not fp32, bf16 or fp16", dn);
    dn = mt_hf_dtype_name(dt);
    int64_t rows = mc->tok.vocab_size;
    json_t *fr = json_object_get(from, "vocab_size");
    if (json_is_integer(fr) && json_integer_value(fr) > rows && json_integer_value(fr) <= mc->cfg.padded_vocab_size)
        rows = json_integer_value(fr);
    mt_hf_config hc = {
        .n_layer = c->num_layers, .n_embd = c->hidden_size, .n_head = c->num_heads, .n_inner = c->ffn_hidden_size,
        .n_positions = c->max_position_embeddings, .vocab_size = (int)rows,
        .layer_norm_epsilon = mc->a.layernorm_epsilon, .initializer_range = mc->a.init_method_std,
        .exact_gelu = c->exact_gelu, .bos_token_id = (int)mc->tok.eod, .eos_token_id = (int)mc->tok.eod,
    };
    if (llama && llama_config(mc, &arch, rows, &hc, e)) return -1;
    hc.torch_dtype = dt == MT_ST_BF16 ? "bfloat16" : dt == MT_ST_F16 ? "float16" : "float32";
    int n;
    mt_hf_tensor *t = mt_hf_tensors(&arch, hc.vocab_size, &n, e);
    if (!t) return mt_err_prefix(e, "%s", mc->dir);

    mt_hf_out out;
    if (mt_hf_out_begin(&out, out_dir, e)) {
        free(t);
        return -1;
    }
    size_t most = 1;
    for (int i = 0; i < n; i++) {
        size_t m = (size_t)t[i].mt_shape[0] * (size_t)(t[i].ndim == 2 ? t[i].mt_shape[1] : 1);
        if (m > most) most = m;
    }
    export_ctx x = {mc, t, n, 0, dt, mt_xmalloc(most * sizeof(float)),
                    dt == MT_ST_F32 ? NULL : mt_xmalloc(most * sizeof(float)), llama ? mt_xmalloc(most * sizeof(float)) : NULL,
                    "", progress};
    mt_st_tensor *st = mt_xcalloc((size_t)n, sizeof *st);
    char (*names)[128] = mt_xcalloc((size_t)n, sizeof *names);
    for (int i = 0; i < n; i++) {
        snprintf(names[i], sizeof *names, "%s%s", llama ? "" : "transformer.", t[i].hf);
        st[i] = (mt_st_tensor){.name = names[i], .dtype = x.dtype, .ndim = t[i].ndim,
                               .shape = {t[i].hf_shape[0], t[i].hf_shape[1]}};
    }
    static const mt_st_kv meta[] = {{"format", "pt"}};
    int rc = mt_st_write_fill(out.model_path, st, n, meta, 1, export_fill, &x, e);
    if (!rc) rc = mt_model_check_all_read(mc, e);
    if (!rc)
        rc = llama ? mt_hf_out_llama_files(&out, &hc, tok_model, mc->vocab_file, mc->merge_file, e)
                   : mt_hf_out_files(&out, &hc, mc->vocab_file, mc->merge_file, e);
    if (!rc) rc = mt_hf_out_commit(&out, e);
    if (rc) mt_hf_out_abort(&out);
    free(st);
    free(names);
    free(x.a);
    free(x.b);
    free(x.whole);
    free(t);
    if (!rc) {
        if (n_tensors) *n_tensors = n;
        if (dtype_out) *dtype_out = dn;
    }
    return rc;
}

/* ---- Hugging Face -> checkpoint ---- */

/* Copies the tokenizer file src to <save>/<name> (atomically) and returns the copy's absolute path. */
static char *copy_into(const char *src, const char *save, const char *name, mt_err *e)
{
    size_t n = strlen(save) + strlen(name) + 2;
    char *dst = mt_xmalloc(n);
    snprintf(dst, n, "%s/%s", save, name);
    if (mt_copy_file(src, dst, e)) {
        free(dst);
        return NULL;
    }
    char *abs = realpath(dst, NULL);
    free(dst);
    if (!abs) mt_err_sys(e, "%s/%s", save, name);
    return abs;
}

/* Llama: the tokenizer files of the HF directory in copied into save; the absolute path of save when
 * there was a tokenizer.json (the checkpoint's --tokenizer-model), else NULL. *copied: how many. */
static char *copy_tokenizer(const char *in, const char *save, char **copied, int *ncopied, mt_err *e)
{
    static const char *const files[] = {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", NULL};
    char *dir = NULL;
    for (int i = 0; files[i]; i++) {
        char *src = mt_path_join(in, files[i]);
        if (access(src, F_OK) == 0) {
            char *c = copy_into(src, save, files[i], e);
            if (!c) {
                free(src);
                free(dir);
                return (char *)-1;
            }
            copied[(*ncopied)++] = c;
            if (i == 0) dir = realpath(save, NULL);
        }
        free(src);
    }
    return dir;
}

int mt_hf_import_ckpt(mt_model_ckpt *mc, const char *in, const char *save, int tp, int pp, int ep, int etp,
                      mt_ckpt_progress *progress, mt_err *e)
{
    if (!mc->hf) return mt_err_set(e, "%s: not a Hugging Face model directory", mc->dir);
    /* a checkpoint whose tokenizer mt cannot read is of no use to mt-eval or mt-generate: refused before
     * anything is written */
    if (mt_model_check_tokenizer(mc, e)) return -1;
    if (mt_ckpt_check_new_save_dir(save, e)) return -1;
    const mt_hf_config *hc = &mc->hf->cfg;
    char *copied[3] = {0};
    int ncopied = 0;
    json_t *args;
    if (hc->llama && mc->tok.hf) {
        char *dir = copy_tokenizer(in, save, copied, &ncopied, e);
        if (dir == (char *)-1) {
            for (int i = 0; i < ncopied; i++) unlink(copied[i]), free(copied[i]);
            return -1;
        }
        args = mt_hf_megatron_args(hc, mc->a.make_vocab_size_divisible_by, dir, NULL, NULL);
        free(dir);
    } else {
        copied[0] = copy_into(mc->vocab_file, save, "vocab.json", e);
        copied[1] = copied[0] ? copy_into(mc->merge_file, save, "merges.txt", e) : NULL;
        if (!copied[1]) {
            if (copied[0]) unlink(copied[0]);
            free(copied[0]);
            return -1;
        }
        ncopied = 2;
        args = mt_hf_megatron_args(hc, mc->a.make_vocab_size_divisible_by, NULL, copied[0], copied[1]);
    }
    /* the tensors are read while saving; what the source has besides them is checked first */
    json_t *meta = json_pack("{s:f,s:o,s:i,s:i,s:{s:s,s:s,s:s,s:i}}", "checkpoint_version", 3.0, "args", args,
                             "consumed_train_samples", 0, "consumed_valid_samples", 0, "converted_from", "format",
                             "huggingface", "dir", in, "dtype", mt_hf_dtype_name(mc->hf->dtype), "vocab_size",
                             hc->vocab_size);
    if (hc->llama) {   /* config.json's token ids, for the way back */
        json_t *from = json_object_get(meta, "converted_from");
        json_object_set_new(from, "bos_token_id", hc->bos_token_id >= 0 ? json_integer(hc->bos_token_id) : json_null());
        json_object_set_new(from, "eos_token_id", hc->eos_token_id >= 0 ? json_integer(hc->eos_token_id) : json_null());
    }
    int rc = mt_model_check_all_read(mc, e);   /* names only: the data are read while saving */
    if (!rc) rc = mt_ckpt_write_layout(mc, save, MT_CKPT_RELEASE, tp, pp, ep, etp, meta, 0, progress, e);
    for (int i = 0; i < ncopied; i++) {   /* nothing of a failed conversion stays: the tokenizer files go too */
        if (rc) unlink(copied[i]);
        free(copied[i]);
    }
    json_decref(meta);
    return rc;
}
