/* trainer.c: building a run and its training step (see trainer.h). */
#include "train/trainer.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "data/split.h"
#include "train/open_model.h"

/* The dropout key of micro-batch m of the iteration that starts at iteration it (so resume redraws
 * the same masks). */
static uint64_t dropout_key(const mt_trainer *t, int64_t it, int m)
{
    return mt_mix64(mt_mix64((uint64_t)t->a.seed + MT_GOLDEN64) ^ ((uint64_t)it * 0x100000001B3ull + (uint64_t)m));
}

/* Model FLOPs of one iteration (forward + backward = 3 x forward, no recomputation), as Megatron's
 * num_floating_point_operations counts them for GPT: per layer and token the QKV, dense and MLP
 * products, the attention scores and weighted values over the full T (causality not discounted), and
 * the logits over the padded vocabulary. */
static double flops_per_iteration(const mt_trainer *t)
{
    double B = (double)t->a.global_batch_size, T = t->cfg.seq_length, L = t->cfg.num_layers,
           h = t->cfg.hidden_size, V = t->cfg.padded_vocab_size, f = t->cfg.ffn_hidden_size;
    /* per layer forward: qkv 6Th^2, attention scores+values 4T^2h (causal not discounted, as Megatron),
     * dense 2Th^2, mlp 4Thf; logits 2ThV; x3 for forward + backward */
    double fwd = L * (6 * T * h * h + 4 * T * T * h + 2 * T * h * h + 4 * T * h * f) + 2 * T * h * V;
    return 3 * B * fwd;
}

static int open_data(mt_trainer *t, mt_err *e)
{
    mt_gpt_data_args da = {0};
    da.n_args = t->a.data_path.n;
    da.args = (char *const *)t->a.data_path.v;
    da.split = t->a.split;
    da.seq_length = t->a.seq_length;
    da.seed = (uint32_t)t->a.seed;
    if (mt_split_num_samples(t->a.train_samples ? 0 : t->a.train_iters, t->a.train_samples, t->a.global_batch_size,
                             t->a.eval_interval, t->a.eval_iters, da.num_samples, e))
        return -1;
    char *cache = mt_default_cache_dir(t->a.data_cache_path, t->a.data_path.n, t->a.data_path.v);
    da.cache_dir = cache;
    da.surplus = t->a.mid_level_dataset_surplus;
    int rc = mt_gpt_data_open(&t->data, &da, e);
    free(cache);
    return rc;
}

static int build_schedule(mt_trainer *t, mt_err *e)
{
    mt_sched_args s = mt_sched_args_default();
    s.lr = t->a.lr;
    s.min_lr = t->a.min_lr;
    s.lr_warmup_init = t->a.lr_warmup_init;
    if (mt_lr_style_parse(t->a.lr_decay_style, &s.lr_decay_style))
        return mt_err_set(e, "--lr-decay-style %s", t->a.lr_decay_style);
    if (mt_wd_style_parse(t->a.weight_decay_incr_style, &s.weight_decay_incr_style))
        return mt_err_set(e, "--weight-decay-incr-style %s", t->a.weight_decay_incr_style);
    s.train_iters = t->a.train_samples ? -1 : t->a.train_iters;
    s.train_samples = t->a.train_samples ? t->a.train_samples : -1;
    s.global_batch_size = t->a.global_batch_size;
    if (t->a.lr_decay_iters) s.lr_decay_iters = t->a.lr_decay_iters;
    if (t->a.lr_decay_samples) s.lr_decay_samples = t->a.lr_decay_samples;
    if (t->a.lr_warmup_fraction > 0) s.lr_warmup_fraction = t->a.lr_warmup_fraction;
    s.lr_warmup_iters = t->a.lr_warmup_iters;
    s.lr_warmup_samples = t->a.lr_warmup_samples;
    s.weight_decay = t->a.weight_decay;
    if (strcmp(t->a.weight_decay_incr_style, "constant")) {
        s.start_weight_decay = t->a.start_weight_decay;
        s.end_weight_decay = t->a.end_weight_decay;
    }
    return mt_sched_init(&t->sched, &s, e);
}

int mt_trainer_open(mt_trainer *t, const mt_train_args *a, mt_err *e)
{
    memset(t, 0, sizeof *t);
    t->a = *a;
    mt_tokenizer tok;
    if (mt_tokenizer_open(&tok, t->a.tokenizer_type, t->a.vocab_file, t->a.merge_file, t->a.vocab_size, e)) return -1;
    t->vocab_size = tok.vocab_size;
    t->eod = tok.eod;
    mt_tokenizer_close(&tok);
    t->cfg = mt_gpt_config_from_args(&t->a, t->vocab_size);
    if (mt_gpt_config_check(&t->cfg, e)) return -1;
    mtk_dtype act = t->a.bf16 ? MTK_BF16 : t->a.fp16 ? MTK_F16 : MTK_F32;
    t->k = mtk_open(&(mtk_config){.backend = t->a.backend, .threads = t->a.threads, .act_dtype = act}, e);
    if (!t->k) return -1;
    t->num_micro = (int)(t->a.global_batch_size / t->a.micro_batch_size);
    t->train_iters = mt_train_total_iters(&t->a);
    if (open_data(t, e)) return -1;
    t->model = mt_gpt_create(t->k, &t->cfg, MT_GPT_TRAIN, e);
    if (!t->model) return -1;
    t->ctx = mt_gpt_ctx_new(t->model, t->a.micro_batch_size, e);
    if (!t->ctx) return -1;
    mt_gpt_init(t->model, (uint64_t)t->a.seed);
    if (mt_adamw_init(&t->opt, t->k, t->model, t->a.adam_beta1, t->a.adam_beta2, t->a.adam_eps, t->a.clip_grad, e))
        return -1;
    if (build_schedule(t, e)) return -1;
    if (t->a.loss_scale > 0) mt_loss_scaler_constant(&t->scaler, t->a.loss_scale);
    else if (t->a.fp16)
        mt_loss_scaler_dynamic(&t->scaler, t->a.initial_loss_scale, t->a.min_loss_scale, (int64_t)t->a.loss_scale_window,
                               t->a.hysteresis);
    else mt_loss_scaler_constant(&t->scaler, 1.0);
    mt_batch_init(&t->batch, t->a.micro_batch_size, t->a.seq_length, t->vocab_size, t->eod, t->a.eod_mask_loss);
    t->flops_per_iter = flops_per_iteration(t);
    return 0;
}

void mt_trainer_close(mt_trainer *t)
{
    mt_batch_free(&t->batch);
    mt_adamw_free(&t->opt);
    mt_gpt_ctx_free(t->ctx);
    t->ctx = NULL;
    mt_gpt_free(t->model);
    mt_gpt_data_close(&t->data);
    mtk_close(t->k);
    t->model = NULL;
    t->k = NULL;
}

/* Megatron's --check-for-nan-in-loss-and-grad (on unless --no-check-for-nan-in-loss-and-grad): a
 * non-finite loss or grad norm stops the run before the optimizer step, so that neither the weights nor
 * a checkpoint take it. */
static int check_finite(const mt_trainer *t, const char *what, double v, mt_err *e)
{
    if (t->a.no_check_for_nan_in_loss_and_grad || isfinite(v)) return 0;
    return mt_err_set(e,
                      "iteration %lld: %s is %g; stopping before the optimizer step, no checkpoint written "
                      "(--no-check-for-nan-in-loss-and-grad skips such iterations instead)",
                      (long long)t->iteration + 1, what, v);
}

int mt_trainer_step(mt_trainer *t, mt_step_result *r, mt_err *e)
{
    memset(r, 0, sizeof *r);
    mt_gpt_zero_grad(t->model);
    double ls = t->scaler.scale;   /* 1.0 in fp32 and bf16: the products below are then exact */
    /* the micro-batches (pipeline parallelism: its schedule replaces this loop) */
    for (int m = 0; m < t->num_micro; m++) {
        if (mt_batch_read(&t->batch, &t->data, MT_SPLIT_TRAIN, t->consumed_train + (int64_t)m * t->a.micro_batch_size, e)) {
            mt_gpt_set_dropout(t->ctx, 0, 0);
            return -1;
        }
        mt_gpt_set_dropout(t->ctx, 1, dropout_key(t, t->iteration, m));
        mt_gpt_loss l;
        /* each micro-batch's mean loss weighs 1 / num_micro, as Megatron averages them */
        if (mt_gpt_forward(t->ctx, t->batch.tokens, t->batch.targets, t->batch.loss_mask, t->batch.B, t->batch.T, NULL,
                           &l, e) ||
            mt_gpt_backward(t->ctx, l.count > 0 ? (double)(1.0f / (float)t->num_micro) / l.count * ls : 0.0, e)) {
            mt_gpt_set_dropout(t->ctx, 0, 0);
            return -1;
        }
        r->loss_sum += l.sum;
        r->tokens += l.count;
    }
    mt_gpt_set_dropout(t->ctx, 0, 0);
    r->loss = r->tokens > 0 ? r->loss_sum / r->tokens : 0;
    if (check_finite(t, "the lm loss", r->loss, e)) return -1;
    /* (data parallelism: the gradient reduction across ranks goes here) */
    if (mt_loss_scaler_test_overflow(t->iteration + 1)) {   /* test hook: an overflow as fp16 would make it */
        float inf = INFINITY;
        mtk_to_device(t->k, mt_gpt_grads(t->model), &inf, sizeof inf);
    }
    /* unscaled by 1 / loss scale; no update when the norm is NaN/inf */
    r->grad_norm = mt_adamw_step_unscale(&t->opt, t->sched.lr, t->sched.wd, 1.0 / ls);
    bool has_scaler = t->a.fp16 || t->a.loss_scale > 0;   /* an overflow skips the step, as Megatron's */
    if (!has_scaler && check_finite(t, "the grad norm", r->grad_norm, e)) return -1;
    r->skipped = !isfinite(r->grad_norm);
    mt_loss_scaler_update(&t->scaler, r->skipped);
    r->loss_scale = t->scaler.scale;
    if (!r->skipped) mt_sched_step(&t->sched, t->a.global_batch_size);
    t->iteration++;
    t->consumed_train += t->a.global_batch_size;
    t->flops_so_far += t->flops_per_iter;
    return 0;
}
