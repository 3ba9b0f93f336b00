/* trainer.c: building a run and its training step (see trainer.h). */
#include "train/trainer.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/model_config.h"
#include "config/tokenizer.h"
#include "data/split.h"
#include "model/device.h"
#include "model/fp8.h"
#include "model/ring_attention.h"
#include "train/pipeline.h"
#include "train/plan.h"

uint64_t mt_trainer_dropout_key(const mt_trainer *t, int64_t it, int m)
{
    return mt_mix64(mt_mix64((uint64_t)t->a.seed + MT_GOLDEN64) ^ ((uint64_t)it * 0x100000001B3ull + (uint64_t)m));
}

/* Model FLOPs of one iteration (forward + backward = 3 x forward, no recomputation), as Megatron's
 * num_floating_point_operations counts them: per layer and token the query, key/value (ng / np of the
 * queries' with grouped-query attention) and dense products, the attention scores and weighted values
 * over the causal half of the T x T matrix (Megatron's count since March 2025), the MLP (3/2 of it with
 * SwiGLU's gate), and the logits over the padded vocabulary. */
static double flops_per_iteration(const mt_trainer *t)
{
    const mt_gpt_config *c = &t->cfg;
    double B = (double)t->a.global_batch_size, T = c->seq_length, L = c->num_layers, h = c->hidden_size,
           V = c->padded_vocab_size, f = c->ffn_hidden_size;
    double g = (c->num_query_groups > 0 ? c->num_query_groups : c->num_heads) / (double)c->num_heads;
    double glu = c->mlp == MT_MLP_SWIGLU ? 1.5 : 1.0;
    /* per layer forward: q, k, v and dense 4Th^2 (1 + g), attention scores+values 2T^2h (QK^T and the
     * weighted values, 2T^2h each over the whole matrix, halved: only its causal half is needed), mlp
     * 4Thf (x glu); logits 2ThV; x3 for forward + backward */
    double fwd = L * (4 * T * h * h * (1 + g) + 2 * T * T * h + 4 * T * h * f * glu) + 2 * T * h * V;
    return 3 * B * fwd;
}

/* --fp8-format: the layers' products through FP8 (model/fp8.h), the amaxes reduced over the data-parallel
 * group too (with the model's tensor and context groups: Megatron's amax reduction group); refused on a
 * GPU without FP8 (below sm_89), as Transformer Engine does. */
static int set_fp8(mt_trainer *t, mt_err *e)
{
    int cc = mtk_compute_capability(t->k);
    if (cc > 0 && cc < 89)
        return mt_err_set(e, "--fp8-format: this GPU has compute capability %d.%d; FP8 needs 8.9 or later (Ada, Hopper)",
                          cc / 10, cc % 10);
    mt_fp8_recipe r = {1, MTK_FP8_E4M3, strcmp(t->a.fp8_format, "hybrid") ? MTK_FP8_E4M3 : MTK_FP8_E5M2,
                       t->a.fp8_margin, t->a.fp8_amax_history_len,
                       strcmp(t->a.fp8_amax_compute_algo, "max") ? MTK_AMAX_MOST_RECENT : MTK_AMAX_MAX};
    return mt_gpt_set_fp8(t->model, &r, t->dev_dp ? t->dev_dp : t->par->dpcp, e);
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
    if (!t->a.tokenizer_type || !strcmp(t->a.tokenizer_type, "GPT2BPETokenizer")) {
        da.vocab_file = t->a.vocab_file;
        da.merge_file = t->a.merge_file;
    }
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

int mt_trainer_open(mt_trainer *t, const mt_train_args *a, mt_err *e) { return mt_trainer_open_par(t, a, NULL, e); }

int mt_trainer_open_par(mt_trainer *t, const mt_train_args *a, const mt_parallel *par, mt_err *e)
{
    memset(t, 0, sizeof *t);
    t->a = *a;
    if (!par) {   /* one rank: a context of its own */
        const mt_boot alone = {.rank = 0, .size = 1};
        if (mt_parallel_init(&t->own, &alone, 1, 1, e)) return -1;
        par = &t->own;
    }
    t->par = par;   /* its groups are read from it, not copied */
    t->dp_rank = t->par->dp->rank;
    t->dp_size = t->par->dp->size;
    t->cp_size = t->par->cp_size > 1 ? t->par->cp_size : 1;
    t->gdp_rank = t->par->dpcp->rank;
    t->gdp_size = t->par->dpcp->size;
    t->tp_rank = t->par->tp->rank;
    t->tp_size = t->par->tp->size;
    t->pp_rank = t->par->pp->rank;
    t->pp_size = t->par->pp->size;
    if (t->tp_size != t->a.tensor_model_parallel_size)
        return mt_err_set(e, "--tensor-model-parallel-size (%d) is not the job's tensor-parallel group (%d ranks)",
                          t->a.tensor_model_parallel_size, t->tp_size);
    if (t->cp_size != t->a.context_parallel_size)
        return mt_err_set(e, "--context-parallel-size (%d) is not the job's context-parallel group (%d ranks)",
                          t->a.context_parallel_size, t->cp_size);
    if (t->a.num_experts && t->a.expert_tensor_parallel_size && t->a.expert_tensor_parallel_size != t->par->etp_size)
        return mt_err_set(e, "--expert-tensor-parallel-size (%d) is not the job's expert tensor size (%d)",
                          t->a.expert_tensor_parallel_size, t->par->etp_size);
    if (t->pp_size != t->a.pipeline_model_parallel_size)
        return mt_err_set(e, "--pipeline-model-parallel-size (%d) is not the job's pipeline group (%d ranks)",
                          t->a.pipeline_model_parallel_size, t->pp_size);
    if (t->a.global_batch_size % ((int64_t)t->a.micro_batch_size * t->dp_size))
        return mt_err_set(e, "--global-batch-size (%lld) must be a multiple of --micro-batch-size (%d) x data-parallel size (%d)",
                          (long long)t->a.global_batch_size, t->a.micro_batch_size, t->dp_size);
    mt_tokenizer tok;
    if (mt_tokenizer_open(&tok, &t->a, false, e)) return -1;
    t->vocab_size = tok.vocab_size;
    t->eod = tok.eod;
    mt_tokenizer_close(&tok);
    t->cfg = mt_gpt_config_from_args(&t->a, t->vocab_size);
    if (mt_gpt_config_check(&t->cfg, e)) return -1;
    mtk_dtype act = t->a.bf16 ? MTK_BF16 : t->a.fp16 ? MTK_F16 : MTK_F32;
    t->k = mt_device_open(t->a.backend, t->a.threads, act, e);
    if (!t->k) return -1;
    /* the gradients' group: data x context parallel (the data-parallel ranks without context parallelism) */
    if (t->gdp_size > 1 && !(t->dev_dp = mt_device_comm(t->par->dpcp, t->k, e))) return -1;
    if (t->cp_size > 1 && !(t->dev_cp = mt_device_comm(t->par->cp, t->k, e))) return -1;
    if (t->tp_size > 1 && !(t->dev_tp = mt_device_comm(t->par->tp, t->k, e))) return -1;
    t->ep_size = t->par->ep_size > 1 ? t->par->ep_size : 1;
    t->experts_whole = t->a.num_experts > 0 && t->tp_size > 1 && t->par->etp_size == 1;
    t->experts_grouped = t->a.num_experts > 0 && t->par->etp_size < t->tp_size;
    t->experts_apart = t->ep_size > 1 || t->experts_grouped;
    if (t->experts_apart) {
        if (t->ep_size > 1 && !(t->dev_ep = mt_device_comm(t->par->ep, t->k, e))) return -1;
        if (t->par->edp->size > 1 && !(t->dev_edp = t->par->edp == t->par->dpcp && t->dev_dp ? t->dev_dp
                                                    : mt_device_comm(t->par->edp, t->k, e)))
            return -1;
    }
    if (t->experts_grouped && t->cp_size > 1 && !(t->dev_tpcp = mt_device_comm(t->par->tpcp, t->k, e))) return -1;
    if (t->experts_grouped && t->par->etp_size > 1 && !(t->dev_etp = mt_device_comm(t->par->etp, t->k, e))) return -1;
    if (t->pp_size > 1) {
        /* the embedding group: stage 0 and the last stage (the others get a group they do not use) */
        int member = t->pp_rank == 0 || t->pp_rank == t->pp_size - 1;
        if (!(t->dev_pp = mt_device_comm(t->par->pp, t->k, e)) ||
            !(t->emb = mt_comm_split(t->par->pp, member ? 0 : 1, t->pp_rank, e)) ||
            !(t->dev_emb = mt_device_comm(t->emb, t->k, e)))
            return -1;
    }
    t->num_micro = (int)(t->a.global_batch_size / ((int64_t)t->a.micro_batch_size * t->dp_size));
    t->train_iters = mt_train_total_iters(&t->a);
    /* rank 0 builds the index cache, the others then read it (as Megatron builds on rank 0 first); an
     * error of rank 0 (a missing dataset) is every rank's, so that the job reports it once */
    char first_err[sizeof e->msg] = "";
    if (t->par->world->rank == 0 && open_data(t, e)) snprintf(first_err, sizeof first_err, "%s", e->msg);
    if (t->par->world->size > 1 && mt_broadcast(t->par->world, first_err, sizeof first_err, MT_C_BYTE, 0, e)) return -1;
    if (*first_err) return mt_err_set(e, "%s", first_err);
    if (t->par->world->rank != 0 && open_data(t, e)) return -1;
    t->vp = t->a.num_layers_per_virtual_pipeline_stage
                ? t->cfg.num_layers / t->pp_size / t->a.num_layers_per_virtual_pipeline_stage
                : 1;
    if (t->vp > 1 && t->num_micro % t->pp_size)
        return mt_err_set(e, "the interleaved schedule needs the micro-batches of a data-parallel rank (%d = "
                             "--global-batch-size / (--micro-batch-size x data-parallel size)) to be a multiple of "
                             "--pipeline-model-parallel-size (%d)", t->num_micro, t->pp_size);
    if (t->a.moe_per_layer_logging && t->cfg.num_experts)
        t->moe_layer = mt_xcalloc((size_t)t->cfg.num_layers * (size_t)(2 + t->cfg.num_experts), sizeof *t->moe_layer);
    t->model = mt_gpt_create_ep(t->k, &t->cfg, t->dev_tp, t->dev_ep, t->pp_rank, t->pp_size, t->vp, MT_GPT_TRAIN, e);
    if (!t->model) return -1;
    if (t->dev_tpcp) mt_gpt_set_router_group(t->model, t->dev_tpcp);
    if (t->dev_etp) mt_gpt_set_expert_tensor_group(t->model, t->dev_etp);
    /* the ring's exchanges overlap its blocks (MT_CP_OVERLAP=0, a measurement aid: they do not) */
    const char *ov = getenv("MT_CP_OVERLAP");
    int p2p = !strcmp(t->a.cp_comm_type, "p2p"), cp_overlap = p2p && !(ov && !strcmp(ov, "0"));
    if (t->cp_size > 1 &&
        mt_gpt_set_context_parallel(t->model, t->dev_cp, p2p ? MT_CP_P2P : MT_CP_ALL_GATHER, cp_overlap, e))
        return -1;
    if (t->a.fp8_format && set_fp8(t, e)) return -1;
    /* the schedule and the contexts of the micro-batches in flight */
    if (!(t->pipe = mt_pipeline_open(t, e))) return -1;
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
    const char *tr = getenv("MT_TRACE_SAMPLES");
    if (tr && *tr && t->tp_rank == 0 && t->pp_rank == 0) {
        char path[4096];
        snprintf(path, sizeof path, "%s.%d", tr, t->dp_rank);
        if (!(t->trace = fopen(path, "w"))) return mt_err_sys(e, "MT_TRACE_SAMPLES: %s", path);
    }
    /* the step's device results (mt_trainer_step): the grad norm's double, then a loss slot per forward
     * pass of a step */
    t->nslot = t->num_micro * t->vp;
    size_t slot = (size_t)t->a.micro_batch_size * (size_t)t->a.seq_length;
    size_t step_bytes = sizeof(double) + (size_t)t->nslot * slot * sizeof(float);
    if (!(t->d_step = mtk_alloc(t->k, step_bytes, e))) return mt_err_prefix(e, "step results (%zu bytes)", step_bytes);
    t->h_step = mt_xmalloc(step_bytes);
    t->h_mask = mt_xmalloc((size_t)t->nslot * slot * sizeof(float));
    t->slot_n = mt_xcalloc((size_t)t->nslot, sizeof *t->slot_n);
    size_t bucket = t->a.ddp_bucket_size ? (size_t)t->a.ddp_bucket_size : mt_grad_sync_default_bucket(t->gdp_size);
    size_t xlo = mt_gpt_expert_lo(t->model), n = mt_gpt_num_params(t->model);
    mt_grad_sync_init(&t->gs, t->dev_dp ? t->dev_dp : t->par->dpcp, t->experts_apart ? xlo : n, bucket);
    if (t->experts_apart) mt_grad_sync_init(&t->gs_exp, t->dev_edp ? t->dev_edp : t->par->edp, n - xlo, bucket);
    /* the distributed optimizer: moments for this rank's shard only; with expert parallelism that of the
     * dense parameters over the data-parallel ranks and that of its experts over the expert-data-parallel
     * ones (Megatron's two buffers) */
    if (t->a.use_distributed_optimizer && t->experts_apart) {
        int x = t->par->edp->rank;
        if (mt_adamw_shard2(&t->opt, t->gs.shard_lo[t->gdp_rank], t->gs.shard_lo[t->gdp_rank + 1],
                            xlo + t->gs_exp.shard_lo[x], xlo + t->gs_exp.shard_lo[x + 1], e))
            return -1;
    } else if (t->a.use_distributed_optimizer &&
               mt_adamw_shard(&t->opt, t->gs.shard_lo[t->gdp_rank], t->gs.shard_lo[t->gdp_rank + 1], e))
        return -1;
    if ((t->a.overlap_grad_reduce || t->a.overlap_param_gather) && t->gdp_size > 1) {
        t->ov = mt_xcalloc(1, sizeof *t->ov);
        int *passes = mt_xmalloc((size_t)t->vp * sizeof *passes);   /* each chunk's, from the schedule */
        for (int c = 0; c < t->vp; c++) passes[c] = mt_pipeline_backward_passes(t->pipe, c);
        int params = t->a.overlap_param_gather && t->a.use_distributed_optimizer;
        int sp = t->cfg.sequence_parallel && t->tp_size > 1, wr = t->par->world ? t->par->world->rank : 0;
        int rc = mt_overlap_init(t->ov, t->model, &t->gs, 0, t->a.overlap_grad_reduce, params,
                                 t->a.use_distributed_optimizer, passes, t->vp, sp, wr, e);
        /* with expert parallelism the experts' buckets over their own group, driven by the same hook */
        if (!rc && t->experts_apart && t->par->edp->size > 1) {
            t->ov_exp = mt_xcalloc(1, sizeof *t->ov_exp);
            rc = mt_overlap_init(t->ov_exp, t->model, &t->gs_exp, xlo, t->a.overlap_grad_reduce, params,
                                 t->a.use_distributed_optimizer, passes, t->vp, sp, wr, e);
            if (!rc) mt_overlap_chain(t->ov, t->ov_exp);
        }
        free(passes);
        if (rc) return -1;
    }
    return 0;
}

void mt_trainer_close(mt_trainer *t)
{
    for (mt_overlap **ov = &t->ov_exp; ov; ov = ov == &t->ov_exp ? &t->ov : NULL)
        if (*ov) {
            mt_err ignore;
            mt_overlap_params_ready(*ov, &ignore);
            mt_overlap_free(*ov);
            free(*ov);
            *ov = NULL;
        }
    mt_batch_free(&t->batch);
    mt_adamw_free(&t->opt);
    mt_pipeline_close(t->pipe);
    t->pipe = NULL;
    if (t->d_step) mtk_free(t->k, t->d_step);
    free(t->h_step);
    free(t->h_mask);
    free(t->slot_n);
    t->d_step = NULL;
    t->h_step = NULL;
    t->h_mask = NULL;
    t->slot_n = NULL;
    mt_gpt_free(t->model);
    mt_gpt_data_close(&t->data);
    if (t->dev_dp != t->par->dpcp) mt_comm_free(t->dev_dp);   /* NCCL's uses the kernels' stream */
    if (t->dev_cp != t->par->cp) mt_comm_free(t->dev_cp);
    t->dev_cp = NULL;
    if (t->dev_tp != t->par->tp) mt_comm_free(t->dev_tp);
    if (t->dev_edp && t->dev_edp != t->dev_dp && t->dev_edp != t->par->edp) mt_comm_free(t->dev_edp);
    if (t->dev_ep && t->dev_ep != t->par->ep) mt_comm_free(t->dev_ep);
    if (t->dev_tpcp && t->dev_tpcp != t->par->tpcp) mt_comm_free(t->dev_tpcp);
    if (t->dev_etp && t->dev_etp != t->par->etp) mt_comm_free(t->dev_etp);
    t->dev_ep = t->dev_edp = t->dev_tpcp = t->dev_etp = NULL;
    if (t->dev_pp != t->par->pp) mt_comm_free(t->dev_pp);
    if (t->dev_emb != t->emb) mt_comm_free(t->dev_emb);
    mt_comm_free(t->emb);
    t->dev_dp = t->dev_tp = t->dev_pp = t->dev_emb = t->emb = NULL;
    mtk_close(t->k);
    mt_grad_sync_free(&t->gs);
    free(t->moe_layer);
    t->moe_layer = NULL;
    if (t->experts_apart) mt_grad_sync_free(&t->gs_exp);
    if (t->trace) fclose(t->trace);
    t->trace = NULL;
    if (t->own.world) mt_parallel_free(&t->own);
    t->par = NULL;
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

int64_t mt_trainer_micro_first(const mt_trainer *t, int64_t first, int m)
{
    return first + ((int64_t)m * t->dp_size + t->dp_rank) * t->a.micro_batch_size;
}

/* Bytes sent over a group: its host communicator, and its device one when that is not layered on it
 * (NCCL; the host-staged one's traffic is its host communicator's). */
static uint64_t sent_via(const mt_comm *host, const mt_comm *dev)
{
    uint64_t n = host ? host->bytes_sent : 0;
    if (dev && dev != host && strcmp(dev->ops->name, "staged")) n += dev->bytes_sent;
    return n;
}
static uint64_t tp_sent(const mt_trainer *t) { return sent_via(t->par->tp, t->dev_tp); }
static uint64_t pp_sent(const mt_trainer *t) { return sent_via(t->par->pp, t->dev_pp) + sent_via(t->emb, t->dev_emb); }
/* the MoE layers' all-to-alls (counted by the model: the expert group may be the data-parallel one), and
 * the experts' share of the grad norm (ep_norm_bytes) */
static uint64_t cp_sent(const mt_trainer *t) { return t->cp_size > 1 ? mt_gpt_cp_bytes(t->model) : 0; }
static uint64_t ep_sent(const mt_trainer *t) { return t->ep_size > 1 ? mt_gpt_ep_bytes(t->model) + t->ep_norm_bytes : 0; }

float *mt_trainer_loss_slot(mt_trainer *t, const float *mask, int n, mt_err *e)
{
    size_t slot = (size_t)t->a.micro_batch_size * (size_t)t->a.seq_length;
    if (t->used_slots >= t->nslot || n < 0 || (size_t)n > slot) {
        mt_err_set(e, "iteration %lld: forward pass %d of %d tokens beyond the step's %d slots of %zu",
                   (long long)t->iteration + 1, t->used_slots + 1, n, t->nslot, slot);
        return NULL;
    }
    int i = t->used_slots++;
    float *hm = t->h_mask + (size_t)i * slot;
    for (int j = 0; j < n; j++) hm[j] = mask ? mask[j] : 1.0f;
    t->slot_n[i] = n;
    return (float *)((char *)t->d_step + sizeof(double)) + (size_t)i * slot;
}

/* The step's one copy back: the grad norm's sum of squares (computed here into d_step) and the losses of
 * its forward passes, added in the order they ran, each pass's as mt_gpt_forward adds them. */
static int step_results(mt_trainer *t, mt_step_result *r, double *ss, mt_err *e)
{
    size_t slot = (size_t)t->a.micro_batch_size * (size_t)t->a.seq_length;
    mt_gpt_grad_sumsq2_to(t->model, t->opt.lo, t->opt.hi, t->opt.lo2, t->opt.hi2, (double *)t->d_step);
    size_t bytes = sizeof(double) + (t->used_slots ? ((size_t)(t->used_slots - 1) * slot + (size_t)t->slot_n[t->used_slots - 1]) * sizeof(float) : 0);
    mtk_to_host(t->k, t->h_step, t->d_step, bytes);
    if (mtk_status(t->k, e)) return mt_err_prefix(e, "iteration %lld", (long long)t->iteration + 1);
    *ss = t->h_step[0];
    const float *losses = (const float *)(t->h_step + 1);
    for (int i = 0; i < t->used_slots; i++)
        r->loss_sum += mt_gpt_loss_sum(losses + (size_t)i * slot, t->h_mask + (size_t)i * slot, (size_t)t->slot_n[i]);
    t->used_slots = 0;
    return 0;
}

int mt_trainer_own_master(mt_trainer *t, mt_err *e)
{
    if (!t->a.use_distributed_optimizer || t->gdp_size == 1) return 0;
    return mt_adamw_own_master(&t->opt, e);
}

/* After a sharded update, every rank's updated parameters to every rank: the fp32 master (whose working
 * copy is then refreshed), or, once the optimizer owns the master, the working copy in the activation
 * dtype (half the bytes, as Megatron gathers its bf16 parameters) and the 1-D tensors' fp32 values. */
static int gather_params(mt_trainer *t, mt_err *e)
{
    /* with expert parallelism the experts (the buffer's end) from their expert-data-parallel shards */
    size_t xlo = mt_gpt_expert_lo(t->model);
    int exp = t->experts_apart && t->par->edp->size > 1;
    if (!mt_gpt_master_dropped(t->model)) {
        if (mt_grad_all_gather(&t->gs, mt_gpt_params(t->model), e) ||
            (exp && mt_grad_all_gather(&t->gs_exp, mt_gpt_params(t->model) + xlo, e)))
            return -1;
        mt_gpt_params_changed(t->model);
        return 0;
    }
    mt_cdtype wt = mtk_act_dtype(t->k) == MTK_BF16 ? MT_C_BF16 : MT_C_F16;
    if (mt_grad_all_gather_as(&t->gs, mt_gpt_work(t->model), wt, e) ||
        (exp && mt_grad_all_gather_as(&t->gs_exp, (char *)mt_gpt_work(t->model) + xlo * mtk_act_size(t->k), wt, e)))
        return -1;
    int N = t->gs.dp->size;
    size_t *counts = mt_xmalloc((size_t)N * sizeof *counts);
    mt_gpt_kept_counts(t->model, t->gs.shard_lo, N, counts);
    int rc = mt_all_gather(t->gs.dp, mt_gpt_kept(t->model, NULL), counts, MT_C_F32, e);
    free(counts);
    return rc;
}

int mt_trainer_params_ready(mt_trainer *t, mt_err *e)
{
    return (t->ov && mt_overlap_params_ready(t->ov, e)) || (t->ov_exp && mt_overlap_params_ready(t->ov_exp, e))
               ? mt_err_prefix(e, "parameter all-gather")
               : 0;
}

/* The sum of squares of every expert rank's experts (summed over the expert-parallel group) as this rank
 * counts it in a norm then summed over the tensor ranks: with an expert tensor size below tp on the first
 * expert-tensor group's ranks only (tensor ranks 0 .. etp - 1: the others' groups hold the same slices); all
 * of it when each tensor rank holds its slices. */
static double experts_counted(const mt_trainer *t, double all)
{
    return t->experts_grouped && t->tp_rank >= t->par->etp_size ? 0 : all;
}

int mt_trainer_params_norm(mt_trainer *t, double *norm, mt_err *e)
{
    if (mt_trainer_params_ready(t, e)) return -1;
    /* as Megatron's calc_params_l2_norm: every parameter once over the model-parallel ranks (a replicated
     * tensor on tensor rank 0, not the last stage's copy of tied embeddings), each expert rank's experts */
    const mt_adamw *o = &t->opt;
    size_t n = mt_gpt_num_params(t->model), xlo = t->experts_apart ? mt_gpt_expert_lo(t->model) : n;
    double ss;
    if (o->main) {   /* the shards of the fp32 master: summed over the data-parallel ranks */
        ss = mt_gpt_sumsq_counted(t->model, o->main, o->lo, o->lo, o->hi);
        if (o->hi2 > o->lo2) ss += mt_gpt_sumsq_counted(t->model, o->main + (o->hi - o->lo), o->lo2, o->lo2, o->hi2);
        if (mt_all_reduce(t->par->dpcp, &ss, 1, MT_C_F64, e)) return mt_err_prefix(e, "parameter norm");
    } else {
        const float *p = mt_gpt_params(t->model);
        ss = mt_gpt_sumsq_counted(t->model, p, 0, 0, xlo);
        if (xlo < n) {   /* the experts: every expert rank's */
            double x = mt_gpt_sumsq_counted(t->model, p, 0, xlo, n);
            if (mt_all_reduce(t->par->ep, &x, 1, MT_C_F64, e)) return mt_err_prefix(e, "parameter norm");
            ss += experts_counted(t, x);
        }
    }
    if ((t->tp_size > 1 && mt_all_reduce(t->par->tp, &ss, 1, MT_C_F64, e)) ||
        (t->pp_size > 1 && mt_all_reduce(t->par->pp, &ss, 1, MT_C_F64, e)))
        return mt_err_prefix(e, "parameter norm");
    *norm = sqrt(ss);
    return 0;
}

int mt_trainer_step(mt_trainer *t, mt_step_result *r, mt_err *e)
{
    if (mt_trainer_own_master(t, e)) return -1;
    memset(r, 0, sizeof *r);
    const mtk_stats k0 = mtk_stats_get(t->k);
    uint64_t sent0 = t->par->dpcp->bytes_sent + (t->ov ? mt_overlap_bytes(t->ov) : 0), tp0 = tp_sent(t);
    uint64_t pp0 = pp_sent(t), ep0 = ep_sent(t), cp0 = cp_sent(t);
    mt_gpt_zero_grad(t->model);
    if (t->moe_layer)
        memset(t->moe_layer, 0, (size_t)t->cfg.num_layers * (size_t)(2 + t->cfg.num_experts) * sizeof *t->moe_layer);
    if ((t->ov && mt_overlap_step_begin(t->ov, e)) || (t->ov_exp && mt_overlap_step_begin(t->ov_exp, e)))
        return mt_err_prefix(e, "iteration %lld: parameter all-gather", (long long)t->iteration + 1);
    double ls = t->scaler.scale;
    t->used_slots = 0;
    if (mt_pipeline_train(t, r, e)) return -1;
    if (mt_gpt_reduce_grads(t->model, e) || mt_pipeline_tied_grads(t, e))
        return mt_err_prefix(e, "iteration %lld", (long long)t->iteration + 1);
    int dist = t->a.use_distributed_optimizer;
    float *grads = mt_gpt_grads(t->model);
    int overlapped = t->ov && t->ov->grads;   /* buckets started during the backward passes */
    if (t->gdp_size > 1 && (overlapped               ? mt_overlap_grads_finish(t->ov, e)
                           : dist                    ? mt_grad_reduce_scatter(&t->gs, grads, e)
                                                     : mt_grad_all_reduce(&t->gs, grads, e)))
        return mt_err_prefix(e, "iteration %lld: data-parallel reduction", (long long)t->iteration + 1);
    /* with expert parallelism the experts' gradients (the buffer's end) over the ranks holding the same
     * ones: summed into each one's shard with the distributed optimizer */
    float *xg = grads + mt_gpt_expert_lo(t->model);
    if (t->experts_apart && t->par->edp->size > 1 &&
        (t->ov_exp && t->ov_exp->grads ? mt_overlap_grads_finish(t->ov_exp, e)
         : dist                        ? mt_grad_reduce_scatter(&t->gs_exp, xg, e)
                                       : mt_grad_all_reduce(&t->gs_exp, xg, e)))
        return mt_err_prefix(e, "iteration %lld: expert-data-parallel reduction", (long long)t->iteration + 1);
    if (mt_loss_scaler_test_overflow(t->iteration + 1)) {   /* test hook: an overflow as fp16 would make it */
        float inf = INFINITY;
        mtk_to_device(t->k, grads, &inf, sizeof inf);
    }
    /* the norm: the squares of this rank's (shard of the) gradients, each replicated tensor counted on one
     * tensor rank, computed on the device and copied back with the losses (the step's one sync) */
    double ss;
    if (step_results(t, r, &ss, e)) return -1;
    if (t->experts_apart && !dist) {   /* the experts' squares: every expert rank's, the others' once (with the
                                          distributed optimizer the shards' sum over the data-parallel and tensor
                                          ranks below counts each expert rank's experts once) */
        size_t xlo = mt_gpt_expert_lo(t->model);
        double mine = mt_gpt_grad_sumsq(t->model, xlo, mt_gpt_num_params(t->model)), all = mine;
        uint64_t b0 = t->par->ep->bytes_sent;
        if (mt_all_reduce(t->par->ep, &all, 1, MT_C_F64, e)) return mt_err_prefix(e, "grad norm");
        t->ep_norm_bytes += t->par->ep->bytes_sent - b0;
        ss += experts_counted(t, all) - mine;
    }
    int nmoe = mt_gpt_moe_layers(&t->cfg), ns = nmoe ? 4 : 2;   /* with MoE layers their losses too */
    if (t->moe_layer) {   /* each layer's from its stage, summed over the data-parallel ranks */
        size_t n = (size_t)t->cfg.num_layers * (size_t)(2 + t->cfg.num_experts);
        if ((t->pp_size > 1 && mt_all_reduce(t->par->pp, t->moe_layer, n, MT_C_F64, e)) ||
            (t->experts_grouped && mt_all_reduce(t->par->tp, t->moe_layer, n, MT_C_F64, e)) ||
            (t->dp_size > 1 && mt_all_reduce(t->par->dp, t->moe_layer, n, MT_C_F64, e)))
            return mt_err_prefix(e, "iteration %lld: MoE per-layer logging", (long long)t->iteration + 1);
        for (int l = 0; l < t->cfg.num_layers; l++)
            for (int i = 0; i < 2; i++) t->moe_layer[(size_t)l * (size_t)(2 + t->cfg.num_experts) + i] /= (double)t->num_micro * t->dp_size;
        r->moe_layer = t->moe_layer;
    }
    if (t->pp_size > 1) {   /* the loss is the last stage's; the MoE layers' losses every stage's */
        double sums[4] = {r->loss_sum, r->tokens, r->moe_lb, r->moe_z};
        if (mt_all_reduce(t->par->pp, sums, ns, MT_C_F64, e)) return mt_err_prefix(e, "iteration %lld: pipeline loss", (long long)t->iteration + 1);
        r->loss_sum = sums[0], r->tokens = sums[1], r->moe_lb = sums[2], r->moe_z = sums[3];
    }
    if (t->dp_size > 1) {
        double sums[4] = {r->loss_sum, r->tokens, r->moe_lb, r->moe_z};
        if (mt_all_reduce(t->par->dp, sums, ns, MT_C_F64, e))
            return mt_err_prefix(e, "iteration %lld: data-parallel reduction", (long long)t->iteration + 1);
        r->loss_sum = sums[0], r->tokens = sums[1], r->moe_lb = sums[2], r->moe_z = sums[3];
    }
    r->loss = r->tokens > 0 ? r->loss_sum / r->tokens : 0;
    if (nmoe) {
        double n = (double)nmoe * t->num_micro * t->dp_size;
        r->moe_lb /= n, r->moe_z /= n;
    }
    if (check_finite(t, "the lm loss", r->loss, e)) return -1;
    /* gradients unscaled by 1 / loss scale; no update when the norm is NaN/inf: with a loss scaler that is
     * an overflow and the step is skipped, as Megatron's */
    bool has_scaler = t->a.fp16 || t->a.loss_scale > 0;
    /* the norm summed over the shards (distributed optimizer), the tensor ranks and the stages; then the
     * update of this rank's parameters (its shard: every rank's updated parameters then go to every rank) */
    if ((dist && mt_all_reduce(t->par->dpcp, &ss, 1, MT_C_F64, e)) || (t->tp_size > 1 && mt_all_reduce(t->par->tp, &ss, 1, MT_C_F64, e)) ||
        (t->pp_size > 1 && mt_all_reduce(t->par->pp, &ss, 1, MT_C_F64, e)))
        return mt_err_prefix(e, "grad norm");
    r->grad_norm = mt_adamw_update(&t->opt, t->sched.lr, t->sched.wd, sqrt(ss) * (1.0 / ls), 1.0 / ls);
    if (!has_scaler && check_finite(t, "the grad norm", r->grad_norm, e)) return -1;
    /* with --overlap-param-gather the buckets are gathered while the next step's forward passes run, each
     * waited for before the first layer that reads it (overlap.h); the fp32 master is then the model's own
     * only in fp32 runs (no working copy to refresh) */
    int gather_later = t->ov && t->ov->params && (mt_gpt_master_dropped(t->model) || !mt_gpt_work(t->model));
    if (dist && isfinite(r->grad_norm) &&
        (gather_later ? mt_overlap_params_start(t->ov, e) || (t->ov_exp && mt_overlap_params_start(t->ov_exp, e))
                      : gather_params(t, e)))
        return mt_err_prefix(e, "iteration %lld: parameter all-gather", (long long)t->iteration + 1);
    r->skipped = !isfinite(r->grad_norm);
    mt_loss_scaler_update(&t->scaler, r->skipped);
    r->loss_scale = t->scaler.scale;
    t->step_bytes = t->par->dpcp->bytes_sent + (t->ov ? mt_overlap_bytes(t->ov) : 0) - sent0;
    t->tp_step_bytes = tp_sent(t) - tp0;
    t->pp_step_bytes = pp_sent(t) - pp0;
    t->ep_step_bytes = ep_sent(t) - ep0;
    t->cp_step_bytes = cp_sent(t) - cp0;
    if (!r->skipped) mt_sched_step(&t->sched, t->a.global_batch_size);
    t->iteration++;
    t->consumed_train += t->a.global_batch_size;
    t->flops_so_far += t->flops_per_iter;
    const mtk_stats k1 = mtk_stats_get(t->k);
    r->stats = (mtk_stats){.syncs = k1.syncs - k0.syncs, .upload_waits = k1.upload_waits - k0.upload_waits,
                           .launches = k1.launches - k0.launches, .ops = k1.ops - k0.ops};
    return 0;
}

/* The bytes this rank sends in mt's ring exchanges over the tensor group (comm_mpi.c), n elements of es bytes
 * in the chunks of mt_comm_even_counts: a reduce-scatter sends every chunk but the rank's own, an all-gather
 * every chunk but the next rank's, an all-reduce both. */
static double chunk(const mt_trainer *t, double n, int i)
{
    size_t w = (size_t)n, P = (size_t)t->tp_size, q = (size_t)(i % t->tp_size);
    return (double)(w / P + (q < w % P));
}
static double ring_all_reduce(const mt_trainer *t, double n, double es)
{
    return es * (2 * n - chunk(t, n, t->tp_rank) - chunk(t, n, t->tp_rank + 1));
}
static double ring_all_gather(const mt_trainer *t, double n, double es)
{
    return es * (n - chunk(t, n, t->tp_rank + 1));
}

double mt_trainer_tp_volume(const mt_trainer *t)
{
    int n = t->tp_size;
    if (n <= 1) return 0;
    double N = (double)t->a.micro_batch_size * (t->a.seq_length / t->cp_size);
    double C = t->cfg.hidden_size, a = (double)mtk_act_size(t->k), f = sizeof(float);
    /* an activation's exchange, a sum over the ranks: with sequence parallelism a gather and a reduce-scatter of
     * each rank's rows, else an all-reduce; and a gather alone */
    int sp = t->cfg.sequence_parallel;
    double act = sp ? C * ring_all_reduce(t, N, a) : ring_all_reduce(t, N * C, a), gather = C * ring_all_gather(t, N, a);
    /* this rank's stage: its layers, those recomputed (their forward exchanges run again in the backward
     * pass), the embedding on the first, the logits and the cross-entropy (its rows' maximum, then their
     * sums of exponentials and target logits) on the last */
    int L = t->cfg.num_layers / t->pp_size, R = mt_gpt_recomputed_layers(t->model);
    int first = t->pp_rank == 0, last = t->pp_rank == t->pp_size - 1;
    double micro = (4 * L + 2 * R + first + last) * act + last * (ring_all_reduce(t, N, f) + ring_all_reduce(t, 2 * N, f));
    /* with sequence parallelism the backward pass gathers every LayerNorm output again (two a layer, the
     * final one on the last stage) for the weight gradients */
    if (sp) micro += (2 * L + last) * gather;
    /* an MoE layer's backward pass sums the gradients of its routing weights (and of its shared expert's
     * gate) over the ranks: each rank's experts give a partial sum of the output they weigh. With the experts
     * whole the routing weights' are each rank's own; the router's statistics are summed over the ranks
     * instead (in each forward pass, recomputed ones too; the tensor group without context parallelism), and
     * its weight's gradient once per step */
    const mt_layout *lay = mt_gpt_layout(t->model);
    int moe = 0, moe_rc = 0, gate = t->cfg.moe_shared_gate && t->cfg.moe_shared_ffn > 0, E = t->cfg.num_experts;
    for (int li = 0; li < lay->num_layers; li++) {
        int is = mt_arch_is_moe(&lay->arch, mt_layout_global_layer(lay, li));
        moe += is, moe_rc += is && li < R;
    }
    int stats = t->experts_grouped && t->cp_size == 1 &&
                ((t->cfg.moe_aux_type != MT_MOE_AUX_NONE && t->cfg.moe_aux_coeff > 0) || t->cfg.moe_z_coeff > 0);
    double K = t->cfg.moe_topk;
    micro += moe * ((t->experts_grouped ? 0 : ring_all_reduce(t, N * K, f)) + gate * ring_all_reduce(t, N, f));
    micro += stats * (moe + moe_rc) * ring_all_reduce(t, 2.0 * E + 1, f);
    /* token dropping with the experts in groups below tp: every forward gathers each rank's rows' choices (an
     * index and a weight each) over the tensor ranks */
    int drops = t->experts_grouped && t->cfg.moe_capacity_factor > 0;
    micro += drops * (moe + moe_rc) * K * ring_all_gather(t, N, sizeof(int32_t) + sizeof(float));
    /* ... and without a shared expert such a layer exchanges no activations: not its input's gathers (forward,
     * recomputed forward, and again for the backward) nor its output's and input gradient's sums */
    if (t->experts_whole && !(t->cfg.moe_shared_ffn > 0)) micro -= (2 * moe + moe_rc) * act + moe * gather;
    double step = t->num_micro * micro + ring_all_reduce(t, 1, sizeof(double));
    if (t->experts_grouped) step += moe * ring_all_reduce(t, (double)E * C, f);
    int nv = t->cfg.norm == MT_NORM_LAYERNORM ? 2 : 1;   /* vectors of a norm: weight (and bias) */
    if (sp) step += nv * (2 * L + last) * ring_all_reduce(t, C, f);   /* the norms' gradients */
    return step;
}

double mt_trainer_cp_volume(const mt_trainer *t)
{
    return mt_plan_cp_bytes(&t->cfg, t->a.micro_batch_size, t->tp_size, t->cfg.num_layers / t->pp_size,
                            mt_gpt_recomputed_layers(t->model), t->pp_rank == t->pp_size - 1,
                            !strcmp(t->a.cp_comm_type, "p2p"), mtk_act_size(t->k), t->num_micro);
}

double mt_trainer_pp_volume(const mt_trainer *t)
{
    int P = t->pp_size, s = t->pp_rank;
    if (P <= 1) return 0;
    double n = (double)mt_gpt_stage_numel(t->model, t->a.micro_batch_size, t->a.seq_length) * (double)mtk_act_size(t->k);
    /* per micro-batch and model chunk: its output unless it is the last virtual stage, its input gradient
     * unless it is the first (with chunks the stages form a ring) */
    int sends = 0;
    for (int c = 0; c < t->vp; c++) sends += !(s == P - 1 && c == t->vp - 1) + !(s == 0 && c == 0);
    double v = t->num_micro * n * sends + 3 * sizeof(double) * 2.0 * (P - 1) / P;
    int tied = mt_gpt_tied_copy(t->model);
    if (tied >= 0) v += (double)mt_gpt_tensor_at(t->model, tied)->numel * sizeof(float);
    return v;
}

size_t mt_trainer_optimizer_bytes(const mt_trainer *t)
{
    return (t->opt.main ? 3 : 2) * mt_adamw_count(&t->opt) * sizeof(float);
}

int mt_trainer_evaluate(mt_trainer *t, int split, int64_t *consumed, int64_t iters, mt_eval_result *r, mt_err *e)
{
    r->loss = r->loss_sum = r->tokens = 0;
    r->samples = 0;
    if (mt_trainer_params_ready(t, e)) return -1;
    const mt_gpt_split_data *sp = &t->data.split[split];
    if (!sp->present) return mt_err_set(e, "the %s split is empty (see --split)", mt_split_names[split]);
    for (int64_t it = 0; it < iters; it++) {
        if (mt_pipeline_eval(t, split, *consumed, &r->loss_sum, &r->tokens, e)) return -1;
        *consumed += t->a.global_batch_size;
        r->samples += t->a.global_batch_size;
    }
    double sums[2] = {r->loss_sum, r->tokens};
    if (mt_all_reduce(t->par->dp, sums, 2, MT_C_F64, e) || (t->pp_size > 1 && mt_all_reduce(t->par->pp, sums, 2, MT_C_F64, e)))
        return mt_err_prefix(e, "evaluation");
    r->loss_sum = sums[0];
    r->tokens = sums[1];
    r->loss = r->tokens > 0 ? r->loss_sum / r->tokens : NAN;
    return 0;
}
