/* mt-ckpt-convert: checkpoints to and from Hugging Face's GPT2LMHeadModel and LlamaForCausalLM
 * directories, from Megatron-LM's torch-format checkpoints, and to another
 * tensor/pipeline layout, tensor by tensor (man mt-ckpt-convert.1); the conversions are ckpt/'s
 * (hf_convert.h, megatron_convert.h, reshard.h). */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "ckpt/hf_convert.h"
#include "ckpt/hf_dir.h"
#include "ckpt/hf_llama.h"
#include "ckpt/megatron_convert.h"
#include "ckpt/megatron_export.h"
#include "ckpt/open_model.h"
#include "ckpt/reshard.h"
#include "io/atomic.h"
#include "util/err.h"
#include "util/flags.h"

static const char *load_dir, *to_fmt, *from_fmt, *in_dir, *out_dir, *save_dir, *dtype_name, *vocab_file,
    *merge_file, *megatron_keys;
static int64_t iteration = -1;
static int target_tp, target_pp, target_ep, target_etp, target_chunk_layers;
static bool no_load_optim, no_save_optim;

static const mt_flag flags[] = {
    {"--load", MT_F_STR, &load_dir, "DIR", "mt checkpoint to convert (with --to hf), or Megatron-LM's (--from megatron)", 0, 0, NULL},
    {"--iteration", MT_F_I64, &iteration, "N", "iteration of --load (default: latest_checkpointed_iteration.txt)", 0, 1e15, NULL},
    {"--to", MT_F_CHOICE, &to_fmt, NULL, "write a Hugging Face directory, or a Megatron-LM torch checkpoint (--out)", 0, 0,
     "hf|megatron"},
    {"--out", MT_F_STR, &out_dir, "DIR", "with --to: the directory to create (absent or empty)", 0, 0, NULL},
    {"--dtype", MT_F_CHOICE, &dtype_name, NULL,
     "with --to: tensor dtype (default hf: the dtype the checkpoint was converted from, else fp32; megatron: the "
     "run's --bf16/--fp16, else fp32)", 0, 0, "fp32|bf16|fp16"},
    {"--megatron-keys", MT_F_CHOICE, &megatron_keys, NULL,
     "with --to megatron: the model's state-dict keys, the legacy GPT model's or Megatron-Core's GPTModel's "
     "(default legacy)", 0, 0, "legacy|mcore"},
    {"--from", MT_F_CHOICE, &from_fmt, NULL,
     "read a Hugging Face directory (--in), or a Megatron-LM torch checkpoint (--load), into a checkpoint (--save)", 0, 0,
     "hf|megatron"},
    {"--in", MT_F_STR, &in_dir, "DIR", "with --from hf: the Hugging Face GPT-2 or Llama directory", 0, 0, NULL},
    {"--save", MT_F_STR, &save_dir, "DIR", "the checkpoint directory to write (--from hf or megatron, or resharding --load)", 0, 0, NULL},
    {"--target-tensor-parallel-size", MT_F_INT, &target_tp, "N", "tensor-parallel size of the checkpoint written (default 1)", 1, 4096, NULL},
    {"--target-expert-model-parallel-size", MT_F_INT, &target_ep, "N",
     "expert-parallel size of the checkpoint written (default 1; a model with experts)", 1, 4096, NULL},
    {"--target-expert-tensor-parallel-size", MT_F_INT, &target_etp, "N",
     "ranks each expert is split over in the checkpoint written: the target tensor size (the default), or a divisor of "
     "it (1: each expert whole; mt-train --expert-tensor-parallel-size N)", 1, 4096, NULL},
    {"--target-pipeline-parallel-size", MT_F_INT, &target_pp, "N", "pipeline-parallel size of the checkpoint written (default 1)", 1, 4096, NULL},
    {"--target-num-layers-per-virtual-pipeline-stage", MT_F_INT, &target_chunk_layers, "N",
     "with --to megatron: model chunks of N layers for Megatron's interleaved schedule (model0, model1, ...)", 1, 100000,
     NULL},
    {"--no-load-optim", MT_F_BOOL, &no_load_optim, NULL,
     "with --from megatron: leave the optimizer's state out (weights only; mt-train --load --no-load-optim then)", 0, 0,
     NULL},
    {"--no-save-optim", MT_F_BOOL, &no_save_optim, NULL,
     "with --to megatron: leave the optimizer's state out (Megatron then loads with --no-load-optim)", 0, 0, NULL},
    MT_FLAG_VOCAB_FILE(&vocab_file, "vocab.json (default: the source's)"),
    MT_FLAG_MERGE_FILE(&merge_file, "merges.txt (default: the source's)"),
    {0},
};

static const mt_cmd cmd = {
    "mt-ckpt-convert",
    "--load DIR --to hf --out DIR [--dtype fp32|bf16|fp16]\n"
    "               --load DIR --to megatron --out DIR [--megatron-keys legacy|mcore] [--dtype fp32|bf16|fp16]\n"
    "                                      [--target-tensor-parallel-size N --target-pipeline-parallel-size N\n"
    "                                       --target-num-layers-per-virtual-pipeline-stage N\n"
    "                                       --target-expert-model-parallel-size N --target-expert-tensor-parallel-size N]\n"
    "               --from hf --in DIR --save DIR [--target-tensor-parallel-size N --target-pipeline-parallel-size N\n"
    "                                                --target-expert-model-parallel-size N\n"
    "                                                --target-expert-tensor-parallel-size N]\n"
               "               --from megatron --load DIR --save DIR [--target-tensor-parallel-size N\n"
               "                                                      --target-pipeline-parallel-size N\n"
               "                                                      --target-expert-model-parallel-size N\n"
               "                                                      --target-expert-tensor-parallel-size N]\n"
    "               --load DIR --save DIR --target-tensor-parallel-size N --target-pipeline-parallel-size N\n"
    "                                     [--target-expert-model-parallel-size N --target-expert-tensor-parallel-size N]",
    "Converts a checkpoint written by mt-train into a directory that Hugging Face transformers loads as\n"
    "GPT2LMHeadModel, or as LlamaForCausalLM (--normalization RMSNorm --position-embedding-type rope\n"
    "--swiglu --disable-bias-linear), MixtralForCausalLM or Qwen2MoeForCausalLM (the same with experts),\n"
    "with its tokenizer, or such a directory into a checkpoint that\n"
    "mt-train loads (with --finetune), mt-eval and mt-generate use, or reshards a checkpoint of any\n"
    "tensor/pipeline-parallel layout to another. --from megatron reads Megatron-LM's --ckpt-format torch\n"
    "checkpoint of any tensor/pipeline/expert-parallel layout: weights, args, iteration, consumed samples and the learning-rate\n"
    "schedule are kept, and the optimizer's state where Megatron saved it (mt-train --load DIR continues).\n"
    "--to megatron writes such a checkpoint of any tensor/pipeline/expert-parallel layout (weights, args, iteration, consumed\n"
    "samples, schedule, optimizer state, the RNG state Megatron seeds from --seed).\n"
    "Tensors are converted one at a time.",
    flags,
};

static void progress(int i, int n)
{
    if (!isatty(2)) return;
    fprintf(stderr, "\r%s: tensor %d/%d", mt_progname(), i, n);
    if (i == n) fputc('\n', stderr);
}

static void to_hf(void)
{
    mt_err e;
    if (!load_dir || !out_dir) mt_die("--to hf needs --load and --out (try --help)");
    mt_model_ckpt mc;
    mt_model_open_opts o = {.iteration = iteration >= 0 ? iteration : MT_CKPT_LATEST, .vocab_file = vocab_file,
                            .merge_file = merge_file, .vocab_only = true};
    if (mt_model_open(&mc, load_dir, &o, &e)) mt_die_err(&e);
    int n;
    const char *dn;
    if (mt_hf_export_ckpt(&mc, out_dir, dtype_name, progress, &n, &dn, &e)) mt_die_err(&e);
    fprintf(stderr, "%s: wrote %s (%s, %d tensors, %s) from %s\n", mt_progname(), out_dir,
            mt_hf_model_class(&mc.arch), n, dn, mc.dir);
    mt_model_close(&mc);
}

static void to_megatron(void)
{
    mt_err e;
    if (!load_dir || !out_dir) mt_die("--to megatron needs --load and --out (try --help)");
    mt_model_ckpt mc;
    mt_model_open_opts o = {.iteration = iteration >= 0 ? iteration : MT_CKPT_LATEST, .vocab_file = vocab_file,
                            .merge_file = merge_file, .vocab_only = true};
    if (mt_model_open(&mc, load_dir, &o, &e)) mt_die_err(&e);
    if (mc.hf) mt_die("%s: a Hugging Face directory: convert it with --from hf first", load_dir);
    int tp = target_tp ? target_tp : 1, pp = target_pp ? target_pp : 1;
    mt_meg_keys keys = megatron_keys && !strcmp(megatron_keys, "mcore") ? MT_MEG_KEYS_MCORE : MT_MEG_KEYS_LEGACY;
    const char *dn;
    int with_optim;
    if (mt_meg_export_ckpt(&mc, out_dir, tp, pp, target_ep, target_etp, target_chunk_layers, keys, dtype_name,
                           no_save_optim, progress, &dn, &with_optim, &e))
        mt_die_err(&e);
    char it[32] = "release", rng[96];
    if (mc.iteration != MT_CKPT_RELEASE) snprintf(it, sizeof it, "iteration %lld", (long long)mc.iteration);
    int64_t seed;
    if (mt_meg_export_rng_seed(&mc, pp, &seed)) snprintf(rng, sizeof rng, "the RNG state of seed %lld", (long long)seed);
    else snprintf(rng, sizeof rng, "no RNG state (seed %lld): Megatron continues with --no-load-rng", (long long)seed);
    char eps[96] = "";
    if (target_ep > 1 || (target_etp && target_etp != tp))
        snprintf(eps, sizeof eps, ", expert-parallel %d, expert tensor %d", target_ep ? target_ep : 1, target_etp ? target_etp : tp);
    fprintf(stderr, "%s: wrote %s (Megatron-LM torch checkpoint, %s keys, %s, tensor-parallel %d, pipeline %d%s, %s; %s%s; %s)\n",
            mt_progname(), out_dir, keys == MT_MEG_KEYS_MCORE ? "Megatron-Core" : "legacy", it, tp, pp, eps, dn,
            with_optim ? "with the optimizer's state" : "no optimizer state: Megatron continues with --no-load-optim",
            with_optim && json_is_true(json_object_get(mc.args, "use-distributed-optimizer")) ? " (the distributed optimizer's)" : "",
            rng);
    mt_model_close(&mc);
}

static void from_hf(void)
{
    mt_err e;
    if (!in_dir || !save_dir) mt_die("--from hf needs --in and --save (try --help)");
    if (!mt_hf_dir_is(in_dir)) mt_die("%s: not a Hugging Face model directory (config.json and model.safetensors)", in_dir);
    mt_model_ckpt mc;
    mt_model_open_opts o = {.iteration = MT_CKPT_LATEST, .vocab_file = vocab_file, .merge_file = merge_file, .vocab_only = true};
    if (mt_model_open(&mc, in_dir, &o, &e)) mt_die_err(&e);
    if (mt_hf_import_ckpt(&mc, in_dir, save_dir, target_tp ? target_tp : 1, target_pp ? target_pp : 1,
                          target_ep ? target_ep : 1, target_etp, progress, &e))
        mt_die_err(&e);
    fprintf(stderr, "%s: wrote %s (release, from %s, %s)\n", mt_progname(), save_dir, in_dir,
            mt_hf_dtype_name(mc.hf->dtype));
    mt_model_close(&mc);
}

static void from_megatron(void)
{
    mt_err e;
    if (!load_dir || !save_dir) mt_die("--from megatron needs --load and --save (try --help)");
    mt_model_ckpt mc;
    mt_meg_dir m;
    int tp = target_tp ? target_tp : 1, pp = target_pp ? target_pp : 1;
    if (mt_meg_open(&mc, &m, load_dir, tp, vocab_file, merge_file, no_load_optim, &e)) mt_die_err(&e);
    if (mt_meg_import_ckpt(&mc, save_dir, tp, pp, target_ep ? target_ep : 1, target_etp, progress, &e)) mt_die_err(&e);
    char it[32] = "release", what[200];
    if (m.iteration != MT_CKPT_RELEASE) snprintf(it, sizeof it, "iteration %lld", (long long)m.iteration);
    if (m.has_optim) snprintf(what, sizeof what, "with the optimizer's state (Adam step %lld)", (long long)m.step);
    else snprintf(what, sizeof what, "weights only, no optimizer state: continue with mt-train --load %s --no-load-optim",
                  save_dir);
    char eps[96] = "";
    if (m.ep > 1 || m.etp != m.tp || target_ep > 1 || (target_etp && target_etp != tp))
        snprintf(eps, sizeof eps, ", expert-parallel %d -> %d, expert tensor %d -> %d", m.ep, target_ep ? target_ep : 1, m.etp,
                 target_etp ? target_etp : tp);
    fprintf(stderr, "%s: wrote %s (%s, from %s: tensor-parallel %d -> %d, pipeline %d -> %d%s; %s)\n", mt_progname(),
            save_dir, it, load_dir, m.tp, tp, m.pp, pp, eps, what);
    mt_meg_close(&mc, &m);
}

static void reshard(void)
{
    mt_err e;
    mt_model_ckpt mc;
    mt_model_open_opts o = {.iteration = iteration >= 0 ? iteration : MT_CKPT_LATEST, .vocab_file = vocab_file,
                            .merge_file = merge_file, .vocab_only = true};
    if (mt_model_open(&mc, load_dir, &o, &e)) mt_die_err(&e);
    if (mc.hf) mt_die("%s: a Hugging Face directory: use --from hf --in %s --save DIR", load_dir, load_dir);
    int tp = target_tp ? target_tp : 1, pp = target_pp ? target_pp : 1, stp, spp, with_optim;
    mt_model_parallel_sizes(&mc, &stp, &spp);
    if (mt_ckpt_reshard(&mc, save_dir, tp, pp, target_ep ? target_ep : 1, target_etp, progress, &with_optim, &e))
        mt_die_err(&e);
    json_t *se = json_object_get(mc.args, "expert-model-parallel-size"), *st = json_object_get(mc.args, "expert-tensor-parallel-size");
    int sep = json_is_integer(se) ? (int)json_integer_value(se) : 1, ep = target_ep ? target_ep : 1;
    int setp = json_is_integer(st) && json_integer_value(st) > 0 ? (int)json_integer_value(st) : stp, etp = target_etp ? target_etp : tp;
    char eps[64] = "", etps[64] = "";
    if (sep > 1 || ep > 1) snprintf(eps, sizeof eps, ", expert-parallel %d -> %d", sep, ep);
    if (mc.arch.num_experts && (setp != stp || etp != tp)) snprintf(etps, sizeof etps, ", expert tensor %d -> %d", setp, etp);
    fprintf(stderr, "%s: wrote %s: tensor-parallel %d -> %d, pipeline %d -> %d%s%s%s\n", mt_progname(), save_dir, stp, tp,
            spp, pp, eps, etps, with_optim ? ", with optimizer state" : "");
    mt_model_close(&mc);
}

int main(int argc, char **argv)
{
    mt_set_progname(argv[0]);
    mt_out_install_signal_cleanup();
    mt_err e;
    if (mt_flags_parse(&cmd, argc, argv, NULL, NULL, &e)) mt_die_err(&e);
    if (to_fmt && from_fmt) mt_die("--to and --from are exclusive (try --help)");
    /* before anything is opened or created */
    if (target_etp && (target_tp ? target_tp : 1) % target_etp)
        mt_die("--target-expert-tensor-parallel-size %d must divide --target-tensor-parallel-size %d", target_etp,
               target_tp ? target_tp : 1);
    if (megatron_keys && !(to_fmt && !strcmp(to_fmt, "megatron"))) mt_die("--megatron-keys goes with --to megatron");
    if (no_load_optim && !(from_fmt && !strcmp(from_fmt, "megatron"))) mt_die("--no-load-optim goes with --from megatron");
    if (no_save_optim && !(to_fmt && !strcmp(to_fmt, "megatron"))) mt_die("--no-save-optim goes with --to megatron");
    if (target_chunk_layers && !(to_fmt && !strcmp(to_fmt, "megatron")))
        mt_die("--target-num-layers-per-virtual-pipeline-stage goes with --to megatron");
    if (to_fmt && !strcmp(to_fmt, "megatron")) {
        if (in_dir || save_dir) mt_die("--to megatron reads --load and writes --out (--in and --save go with --from)");
        to_megatron();
    } else if (to_fmt) {
        if (in_dir || save_dir) mt_die("--to hf reads --load and writes --out (--in and --save go with --from hf)");
        if (target_tp || target_pp || target_ep || target_etp) mt_die("--to hf writes one directory: --target-*-parallel-size go with --save");
        to_hf();
    } else if (from_fmt && !strcmp(from_fmt, "megatron")) {
        if (in_dir || out_dir || dtype_name || iteration >= 0)
            mt_die("--from megatron reads --load and writes --save (--in, --out, --dtype and --iteration do not go with it)");
        from_megatron();
    } else if (from_fmt) {
        if (load_dir || out_dir || dtype_name || iteration >= 0)
            mt_die("--from hf reads --in and writes --save (--load, --out, --dtype and --iteration go with --to hf)");
        from_hf();
    } else if (load_dir && save_dir) {
        if (in_dir || out_dir || dtype_name) mt_die("resharding reads --load and writes --save (--in, --out, --dtype go with --from/--to hf)");
        reshard();
    } else {
        mt_die("nothing to do: give --to hf, --from hf, or --load and --save with target sizes (try --help)");
    }
    return 0;
}
