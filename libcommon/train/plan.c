/* plan.c: the dry run's per-rank memory and the bubble of the schedule (see plan.h). */
#include "train/plan.h"

#include <stdlib.h>
#include <string.h>

#include "comm/comm.h"
#include "comm/grid.h"
#include "config/model_config.h"
#include "config/tokenizer.h"
#include "model/gpt.h"
#include "model/ring_attention.h"
#include "train/pipeline.h"

/* The floats of the 1-D tensors (biases, norm weights) of a part: what its model keeps in fp32 once the
 * distributed optimizer owns the master (model/gpt.h's mt_gpt_drop_master). */
static int kept_floats(const mt_gpt_config *cfg, int r, int tp, int s, int pp, int vp, size_t *n, mt_err *e)
{
    mt_model_arch arch = mt_gpt_arch(cfg);
    mt_layout_part part = {r, tp, s, pp, vp, 0, 1, 0, 0};
    mt_layout l;
    if (mt_layout_build(&arch, &part, &l, e)) return -1;
    *n = 0;
    for (int i = 0; i < l.n; i++)
        if (l.t[i].ndim == 1) *n += l.t[i].numel;
    mt_layout_free(&l);
    return 0;
}

double mt_plan_cp_bytes(const mt_gpt_config *c, int micro_batch, int tp, int layers, int recomputed, int last,
                        int p2p, size_t asz, int num_micro)
{
    int n = c->context_parallel_size;
    if (n <= 1) return 0;
    double Nl = (double)micro_batch * (c->seq_length / n);
    double G = (c->num_query_groups > 0 ? c->num_query_groups : c->num_heads) / tp;
    double kv = Nl * 2 * G * (c->hidden_size / c->num_heads);
    double micro = (2.0 * layers + recomputed) * (n - 1) * kv * (double)asz +
                   layers * (double)(p2p ? n : n - 1) * kv * sizeof(float) + (last ? (n - 1) * Nl * sizeof(float) : 0);
    return num_micro * micro;
}

int mt_plan_print(FILE *out, const mt_train_args *a, int world, mt_err *e)
{
    int tp = a->tensor_model_parallel_size, pp = a->pipeline_model_parallel_size;
    int cp = a->context_parallel_size > 1 ? a->context_parallel_size : 1;
    if (world < 1 || world % (tp * cp * pp))
        return mt_err_set(e, "--world-size (%d) must be a multiple of --tensor-model-parallel-size (%d) x "
                             "--context-parallel-size (%d) x --pipeline-model-parallel-size (%d)", world, tp, cp, pp);
    int dp = world / (tp * cp * pp);
    if (a->global_batch_size % ((int64_t)a->micro_batch_size * dp))
        return mt_err_set(e, "--global-batch-size (%lld) must be a multiple of --micro-batch-size (%d) x data-parallel size (%d)",
                          (long long)a->global_batch_size, a->micro_batch_size, dp);
    int M = (int)(a->global_batch_size / ((int64_t)a->micro_batch_size * dp));
    mt_tokenizer tok;
    if (mt_tokenizer_open(&tok, a, false, e)) return -1;
    int64_t vocab = tok.vocab_size;
    mt_tokenizer_close(&tok);
    mt_gpt_config cfg = mt_gpt_config_from_args(a, vocab);
    if (mt_gpt_config_check(&cfg, e)) return -1;
    size_t asz = a->bf16 || a->fp16 ? 2 : 4;
    fprintf(out,
            "dry run: using world size: %d, data-parallel size: %d, context-parallel size: %d, tensor-model-parallel "
            "size: %d, pipeline-model-parallel size: %d\n",
            world, dp, cp, tp, pp);
    fprintf(out, "> padded vocab (size: %lld) with %lld dummy tokens (new size: %d)\n", (long long)vocab,
            (long long)(cfg.padded_vocab_size - vocab), cfg.padded_vocab_size);
    fprintf(out, "> %d micro-batches of %d x %d tokens per data-parallel rank and iteration%s\n", M, a->micro_batch_size,
            a->seq_length, cfg.recompute_granularity == MT_RECOMPUTE_FULL ? ", full activation recomputation" : "");
    int lc = a->num_layers_per_virtual_pipeline_stage, vp = lc ? a->num_layers / pp / lc : 1;
    int p2p = !a->cp_comm_type || !strcmp(a->cp_comm_type, "p2p");
    if (cp > 1) {   /* the attention's exchanges, per rank of the first and the last stage */
        int L = cfg.num_layers / pp, R = 0;
        if (cfg.recompute_granularity == MT_RECOMPUTE_FULL)
            R = cfg.recompute_method == MT_RECOMPUTE_BLOCK && cfg.recompute_num_layers < L ? cfg.recompute_num_layers : L;
        fprintf(out, "> context parallelism: each sequence of %d tokens in %d chunks, %d tokens on each of %d ranks "
                     "(--cp-comm-type %s); bytes a rank sends to its context-parallel group per iteration: %.0f\n",
                a->seq_length, 2 * cp, a->seq_length / cp, cp, p2p ? "p2p" : "all_gather",
                mt_plan_cp_bytes(&cfg, a->micro_batch_size, tp, L, R, pp == 1, p2p, asz, M));
    }
    if (vp > 1 && M % pp)
        return mt_err_set(e, "the interleaved schedule needs the micro-batches of a data-parallel rank (%d) to be a "
                             "multiple of --pipeline-model-parallel-size (%d)", M, pp);
    double mb = 1024.0 * 1024.0;
    int ep = a->num_experts ? a->expert_model_parallel_size : 1;
    int etp = a->num_experts ? a->expert_tensor_parallel_size : 0;
    mt_grid grid;   /* the expert groups as the run makes them: etp x ep must divide the ranks of a stage */
    if (mt_grid_make_expert(&grid, world, tp, cp, pp, ep, etp, e)) return -1;
    int grouped = grid.etp < tp;   /* experts split over expert-tensor groups of tensor ranks (whole with 1), each
                                      group routing its rows */
    int apart = ep > 1 || grouped; /* the experts' gradients over their own group (grid.edp ranks) */
    int nmoe = mt_gpt_moe_layers(&cfg);
    if (nmoe) {   /* the experts, and what expert parallelism exchanges with routing spread evenly: every token
                     of the micro-batch from each tensor rank, or with an expert tensor size below tp its group's */
        double N = (double)a->micro_batch_size * a->seq_length * (grouped ? (double)grid.etp / tp : 1.0), K = cfg.moe_topk,
               C = cfg.hidden_size;
        double rows = N * K * (ep - 1) / ep;   /* the rows a rank sends to the other ranks' experts */
        char split[96] = "";
        if (grouped && grid.etp == 1) snprintf(split, sizeof split, ", each whole on its tensor rank (--expert-tensor-parallel-size 1)");
        else if (grouped)
            snprintf(split, sizeof split, ", each split over %d tensor ranks (--expert-tensor-parallel-size %d)", grid.etp, grid.etp);
        double bytes = (double)nmoe / pp * M * (4.0 * rows * C * (double)asz + (ep - 1) * (cfg.num_experts / ep) * 4.0);
        fprintf(out, "> %d MoE layers of %d experts (top %d), %d on each of %d expert-parallel ranks%s; all-to-all "
                     "bytes a rank sends per iteration with evenly spread routing: %.0f\n",
                nmoe, cfg.num_experts, cfg.moe_topk, cfg.num_experts / ep, ep,
                split, ep > 1 ? bytes : 0.0);
    }
    size_t *cb = mt_xcalloc((size_t)vp, sizeof *cb);
    int *live = mt_xcalloc((size_t)vp, sizeof *live);
    for (int s = 0; s < pp; s++) {
        if (mt_pipeline_contexts(pp, s, M, vp, live)) {
            free(cb), free(live);
            return mt_err_set(e, "stage %d of %d: no schedule for %d micro-batches of %d model chunks", s, pp, M, vp);
        }
        for (int r = 0; r < tp; r++) {
            size_t np, nx, shared;
            if (mt_gpt_plan_part_ep(&cfg, r, tp, ep, s, pp, vp, a->micro_batch_size, asz,
                                    a->fp8_format ? a->fp8_amax_history_len : 0, &np, &nx, cb, &shared, e)) {
                free(cb), free(live);
                return -1;
            }
            /* fp32 master parameters (and the working copy in bf16/fp16), fp32 gradients, AdamW's two moments
             * of this rank's shard (the distributed optimizer's first shard), the contexts alive at once; the
             * distributed optimizer in bf16/fp16 holds the fp32 master of its shard too, and the model only
             * the working copy and its 1-D tensors in fp32 (Megatron's 6 + 12/DP bytes per parameter) */
            size_t shard = np, kept = 0;
            if (a->use_distributed_optimizer) {   /* with expert parallelism the dense part over the data-parallel
                                                     ranks, the experts over the expert-data-parallel ones */
                size_t *counts = mt_xmalloc((size_t)dp * cp * sizeof *counts);   /* over data x context */
                mt_comm_even_counts(apart ? np - nx : np, dp * cp, counts);
                shard = counts[0];
                if (apart) {
                    size_t *xc = mt_xmalloc((size_t)grid.edp * sizeof *xc);
                    mt_comm_even_counts(nx, grid.edp, xc);
                    shard += xc[0];
                    free(xc);
                }
                free(counts);
            }
            int own_master = a->use_distributed_optimizer && dp * cp > 1 && asz != 4;
            if (own_master && kept_floats(&cfg, r, tp, s, pp, vp, &kept, e)) {
                free(cb), free(live);
                return -1;
            }
            double pb = own_master ? (double)np * asz + 4.0 * (double)kept : (double)np * (4 + (asz == 4 ? 0 : asz));
            double gb = (double)np * 4, ob = (own_master ? 3.0 : 2.0) * 4 * (double)shard;
            double ab = (double)shared;   /* the scratch the contexts share */
            if (cp > 1) {   /* the context-parallel attention's buffers and the gathered losses */
                int G = cfg.num_query_groups > 0 ? cfg.num_query_groups : cfg.num_heads;
                ab += (double)mt_ring_attention_plan(a->micro_batch_size, a->seq_length, cp, cfg.num_heads / tp, G / tp,
                                                     cfg.hidden_size / cfg.num_heads, p2p ? MT_CP_P2P : MT_CP_ALL_GATHER,
                                                     asz) +
                      (double)a->micro_batch_size * a->seq_length * sizeof(float);
            }
            int n_live = 0;
            for (int c = 0; c < vp; c++) ab += (double)live[c] * (double)cb[c], n_live += live[c];
            fprintf(out, " > number of parameters on (tensor, pipeline) model parallel rank (%d, %d): %zu\n", r, s, np);
            fprintf(out,
                    "[Rank %d] memory (MB) | parameters: %.1f | gradients: %.1f | optimizer: %.1f | activations: %.1f "
                    "| total: %.1f | micro-batches in flight: %d%s\n",
                    r + tp * cp * dp * s, pb / mb, gb / mb, ob / mb, ab / mb, (pb + gb + ob + ab) / mb, n_live,
                    vp > 1 ? " (model chunks)" : "");
        }
    }
    free(cb), free(live);
    if (vp > 1)
        fprintf(out, "pipeline bubble fraction (pp - 1) / (v m): %.4f (%d stages, %d model chunks each, %d micro-batches)\n",
                (double)(pp - 1) / ((double)vp * M), pp, vp, M);
    else
        fprintf(out, "pipeline bubble fraction (pp - 1) / m: %.4f (%d stages, %d micro-batches)\n", (double)(pp - 1) / M,
                pp, M);
    return 0;
}
