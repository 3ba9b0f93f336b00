"""megatron_write.py: writes a Megatron-LM --ckpt-format torch checkpoint, as Megatron's save_checkpoint
lays one out, from the tensors of a one-rank mt checkpoint (its model.safetensors read with numpy, its
meta.json for the model's arguments), for tests/pipeline/megatron-read.sh.

Usage: megatron_write.py MT_RANK_DIR OUT_DIR --tp T --pp P --vocab-file F --merge-file F [--divisible-by N] [--core]
       [--drop KEY] [--extra KEY] [--bad-ffn] [--release] [--checkpoint-version V] [--dtype D] [--round D]
       [--optim [--distrib [--bucket-size N] [--args-bucket-size N] [--per-bucket]]] [--vp V]
       [--ep E [--etp 1] [--held] [--grouped] [--chain-len N]]
       megatron_write.py --jobs FILE [ARGS...]

--jobs FILE runs many such writes in this one process (torch is imported once): each non-empty line of FILE
not starting with # holds one job's arguments as for a single run (MT_RANK_DIR OUT_DIR FLAGS..., quoted as
for the shell), ARGS are appended to every job's (e.g. --vocab-file F --merge-file F). The jobs run in
order, each on its own; a failing job does not stop the others. One line per job on stdout: "ok OUT_DIR",
or "failed OUT_DIR: ERROR" (its traceback on stderr). Exit status 1 when any job failed, else 0.

Written from the interop spec (sections 5.1-5.4, 7.2-7.6): the tracker, iter_NNNNNNN/mp_rank_TT[_PPP]/
model_optim_rng.pt per rank, each a dict of args (an argparse.Namespace), checkpoint_version 3.0,
iteration, the model (legacy nested state dict, or Megatron-Core's flat names with --core, Transformer
Engine's _extra_state entries as the io.BytesIO it saves),
opt_param_scheduler and rng_state as Megatron saves it (numpy's RNG state among it). Without --optim
there is no optimizer entry (as with Megatron's --no-save-optim); with --optim, the mt checkpoint's
AdamW state (optim.safetensors, meta.json's step) as Megatron-Core's non-distributed optimizer saves it
(megatron/core/optimizer, core_r0.8 to the 2026 main branch): torch.optim.AdamW's state_dict (made here by
torch itself: per-parameter step, exp_avg, exp_avg_sq; integer parameter indices) over Megatron's param
groups (_get_param_groups: the weight-decayed parameters first, then those named *.bias or of one
dimension, each group in the order the model registers its parameters: the legacy ParallelTransformerLayer
input_layernorm, query_key_value, dense, post_attention_layernorm, dense_h_to_4h, dense_4h_to_h;
Megatron-Core's TransformerLayer with Transformer Engine's layers linear_proj, then linear_qkv with its
fused norm first, linear_fc1 likewise, linear_fc2), FP32Optimizer's state_dict for fp32 and, with --dtype
bf16 or fp16, Float16OptimizerWithFloat16Params' {'optimizer', 'fp32_from_fp16_params'} holding the fp32
main parameters (and 'grad_scaler' for fp16).
With --distrib, the distributed optimizer's state as Megatron-LM's main branch of 2026-08 saves it in this
format (megatron/core/optimizer/distrib_optimizer.py, the "buckets_coalesced" layout of February 2024 on):
model_optim_rng.pt's 'optimizer' is DistributedOptimizer.state_dict() (the inner optimizer's param groups
without 'params', with 'step'; 'grad_scaler' for fp16), and distrib_optim.pt beside it holds, per model
chunk's gradient buffer (get_parameter_state_dp_zero), under the key (param dtype, grad dtype), the fp32
'param', 'exp_avg' and 'exp_avg_sq' of the whole buffer with each bucket's end padding dropped, and
'numel_unpadded'. The buffer is laid out by a literal transcription of _compute_per_buffer_param_layout:
parameters in reverse registration order, starts padded to 64 elements, buckets closed at --bucket-size
elements (args overlap_grad_reduce and ddp_bucket_size; first stage, first chunk only) and around the
shared embedding (Megatron-Core, pp > 1: the first stage's word embeddings, the last stage's output
layer), bucket ends padded to lcm(dp, 128); the world tensors are then cut from that padded buffer bucket by
bucket. --args-bucket-size writes another size into the args than the one used (a mismatch to refuse);
--per-bucket writes the format before February 2024 (lists of per-bucket tensors, no 'buckets_coalesced').
Tensor slices: word embeddings and QKV / h->4h rows split over tensor ranks (QKV rows in the per-head
[np, 3, hn] order, kept as mt stores them; with --checkpoint-version 0 or 1 in those versions'
orders, [3, np, hn] and [np, hn, 3]), dense / 4h->h columns split, the rest replicated; layers
split evenly over stages (with --vp V, over V model chunks per stage, model0 ... model<V-1>: chunk c of
stage p holds global layers (c pp + p) L / (pp V) + i), local indices; the last stage's copy of tied embeddings when pp > 1. The
vocabulary is padded with zero rows to Megatron's padded size for the tensor size.
A model with experts (meta.json's num-experts; --core only): an MoE layer (--moe-layer-freq) holds
pre_mlp_layernorm, mlp.router, SequentialMLP's mlp.experts.local_experts.J.linear_fc1 / linear_fc2 and the
shared expert's mlp.shared_experts.linear_fc1 / linear_fc2, registered in that order (each local expert's
fc1 then fc2; with --grouped TEGroupedMLP's mlp.experts.linear_fc1.weightJ and linear_fc2.weightJ, every fc1
registered before the fc2s). With --ep E the experts go over E expert ranks (get_checkpoint_name: mp_rank_TT[_PPP]_EEE per
(tensor rank, expert rank) pair; local expert J of expert rank e is global expert e num_experts / E + J),
each expert split over the tensor ranks, or with --etp 1 whole on every tensor rank; --held writes only the
pairs that the ranks of data-parallel or expert-data-parallel rank 0 of the smallest world (a multiple of
tp and of etp E) hold, as Megatron's save_checkpoint does. Where the experts' gradients are reduced apart
(E > 1 or etp != tp: allreduce False, is_expert_parallel), the optimizer's state is a ChainedOptimizer's
state_dict(): the list of the dense parameters' optimizer state dict and the experts' (one param group, on a
stage without experts empty), each indexing its parameters from 0; --chain-len N cuts or repeats that list to
N entries (a bad checkpoint). With --distrib, distrib_optim.pt is ChainedOptimizer.save_parameter_state's list
of the two optimizers' get_parameter_state_dp_zero() (the dense buffers', the expert buffers': the experts
alone, one per model chunk that has them), None where this directory's rank of the smallest world is not
that optimizer's data-parallel rank 0 (dense: data-parallel group; experts: expert-data-parallel group);
--dist-len N cuts or repeats it.
"""
import argparse
import collections
import io
import json
import math
import os
import random
import re
import shlex
import struct
import sys
import traceback

import numpy as np
import torch

DT = {"F32": np.float32, "F16": np.float16}


def read_safetensors(path):
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    head = json.loads(raw[8:8 + n])
    out = {}
    for k, v in head.items():
        if k == "__metadata__":
            continue
        a, b = v["data_offsets"]
        buf = raw[8 + n + a:8 + n + b]
        if v["dtype"] == "BF16":
            x = np.frombuffer(buf, np.uint16).astype(np.uint32) << 16
            arr = x.view(np.float32)
        else:
            arr = np.frombuffer(buf, DT[v["dtype"]]).astype(np.float32)
        out[k] = arr.reshape(v["shape"]).copy()
    return out


def optimizer(reg, w, mom, part, meta, a, dtype, expert=False):
    """Megatron-Core's optimizer state of one rank: reg, the rank's parameters (mt names and partition) in
    registration order; torch.optim.AdamW builds the state dict over Megatron's two param groups. expert: the
    experts' optimizer of a ChainedOptimizer (is_expert_parallel; its one group of 2-D weights, on a rank
    without experts empty)."""
    params, nowd = [], []
    for name, dim in reg:
        p = torch.nn.Parameter(torch.from_numpy(np.ascontiguousarray(part(w[name], dim))))
        params.append((name, dim, p))
    common = {"lr_mult": 1.0, "is_expert_parallel": expert, "is_decoupled_lr": False, "default_config": True,
              "max_lr": a["lr"], "min_lr": a["min-lr"]}
    groups = [dict(params=[p for n, d, p in params if not (n.endswith(".bias") or p.dim() == 1)], wd_mult=1.0,
                   **common),
              dict(params=[p for n, d, p in params if n.endswith(".bias") or p.dim() == 1], wd_mult=0.0, **common)]
    if expert:
        groups = groups[:1]
    if not params:   # torch builds no optimizer of no parameters: its state_dict() as it would be
        g = dict(groups[0], params=[], lr=a["lr"], betas=(a["adam-beta1"], a["adam-beta2"]), eps=a["adam-eps"],
                 weight_decay=a["weight-decay"], amsgrad=False, maximize=False, foreach=None, capturable=False,
                 differentiable=False, fused=None)
        sd = {"state": {}, "param_groups": [g]}
        return sd if dtype == "fp32" else {"optimizer": sd, "fp32_from_fp16_params": [[]]}
    opt = torch.optim.AdamW(groups, lr=a["lr"], betas=(a["adam-beta1"], a["adam-beta2"]), eps=a["adam-eps"],
                            weight_decay=a["weight-decay"])
    for g in opt.param_groups:   # as Megatron's OptimizerParamScheduler.step() leaves them
        g["weight_decay"] = a["weight-decay"] * g["wd_mult"]
    step = meta["optimizer"]["step"]
    for name, dim, p in params:
        opt.state[p] = {"step": torch.tensor(float(step)),
                        "exp_avg": torch.from_numpy(np.ascontiguousarray(part(mom[name + ".exp_avg"], dim))),
                        "exp_avg_sq": torch.from_numpy(np.ascontiguousarray(part(mom[name + ".exp_avg_sq"], dim)))}
    sd = opt.state_dict()
    if dtype == "fp32":
        return sd   # FP32Optimizer.state_dict()
    out = {"optimizer": sd, "fp32_from_fp16_params": [[p.detach().clone() for p in g["params"]] for g in groups]}
    if dtype == "fp16":
        out["grad_scaler"] = {"scale": torch.tensor(float(meta["loss_scaler"]["scale"])),
                              "growth_tracker": meta["loss_scaler"]["growth_tracker"],
                              "hysteresis_tracker": meta["loss_scaler"]["hysteresis_tracker"]}
    return out


def buffer_layout(numels, shared, bucket_size, dp):
    """Megatron-Core's DistributedOptimizer._compute_per_buffer_param_layout: numels in registration order;
    returns each parameter's (start, end), the buckets' (start, end) and their unpadded sizes."""
    index, buckets, unpadded = {}, [], []
    div = dp * 128 // math.gcd(dp, 128)

    def finalize(end, bstart):
        unpadded.append(end - bstart)
        bend = -(-end // div) * div
        buckets.append((bstart, bend))
        return bend

    start = bstart = end = 0
    held = []
    for i in reversed(range(len(numels))):
        start = -(-start // 64) * 64
        if shared[i] and held:
            bstart = finalize(start, bstart)
            held = []
            start = bstart
        end = start + numels[i]
        index[i] = (start, end)
        held.append(i)
        if (bucket_size and end - bstart >= bucket_size) or shared[i]:
            bstart = finalize(end, bstart)
            held = []
            start = bstart
        else:
            start = end
    if held:
        finalize(end, bstart)
    return index, buckets, unpadded


def distrib(chunks, w, mom, part, meta, a, dtype, bucket_size, first, per_bucket):
    """distrib_optim.pt's dict: chunks, per model chunk the (mt name, slicing, shared) of its parameters in
    registration order."""
    TD = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
    key = (TD[dtype], torch.float16 if dtype == "fp16" else torch.float32)
    out = {} if per_bucket else {"buckets_coalesced": True}
    for c, params in enumerate(chunks):
        vals = {"param": [part(w[n], d) for n, d, _ in params],
                "exp_avg": [part(mom[n + ".exp_avg"], d) for n, d, _ in params],
                "exp_avg_sq": [part(mom[n + ".exp_avg_sq"], d) for n, d, _ in params]}
        size = bucket_size if first and c == 0 else 0
        index, buckets, unpadded = buffer_layout([v.size for v in vals["param"]], [sh for _, _, sh in params], size, 1)
        st = {}
        for k, xs in vals.items():
            buf = np.zeros(buckets[-1][1], np.float32)   # the padded gradient buffer
            for i, x in enumerate(xs):
                buf[index[i][0]:index[i][1]] = x.reshape(-1)
            cut = [torch.from_numpy(buf[b0:b0 + u].copy()) for (b0, _), u in zip(buckets, unpadded)]
            st[k] = cut if per_bucket else torch.cat(cut)
        if not per_bucket:
            st["numel_unpadded"] = sum(unpadded)
        out[c] = {key: st}
    return out


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("src")
    ap.add_argument("out")
    ap.add_argument("--tp", type=int, default=1)
    ap.add_argument("--pp", type=int, default=1)
    ap.add_argument("--vocab-file", required=True)
    ap.add_argument("--merge-file", required=True)
    ap.add_argument("--divisible-by", type=int, default=0)   # Megatron's make_vocab_size_divisible_by
    ap.add_argument("--core", action="store_true")
    ap.add_argument("--drop", default=None)
    ap.add_argument("--extra", default=None)
    ap.add_argument("--bad-ffn", action="store_true")
    ap.add_argument("--release", action="store_true")
    ap.add_argument("--checkpoint-version", type=float, default=3.0)
    # --dtype: the model's tensors stored in bf16 or fp16 (a --bf16 / --fp16 run's checkpoint); --round: stored
    # in fp32, each value rounded to that dtype first (the same numbers)
    ap.add_argument("--dtype", choices=("fp32", "bf16", "fp16"), default="fp32")
    ap.add_argument("--round", choices=("bf16", "fp16"), default=None)
    ap.add_argument("--optim", action="store_true")
    ap.add_argument("--distrib", action="store_true")
    ap.add_argument("--bucket-size", type=int, default=0)
    ap.add_argument("--args-bucket-size", type=int, default=0)
    ap.add_argument("--per-bucket", action="store_true")
    ap.add_argument("--vp", type=int, default=1)   # model chunks per stage (the interleaved schedule)
    ap.add_argument("--args-etp", type=int, default=0)   # expert_tensor_parallel_size in the args (0: None)
    # a model with experts (--core): over --ep expert ranks, each expert split over --etp ranks (0: tp; or 1);
    # --held: only the (tensor rank, expert rank) pairs the smallest Megatron run of the layout saves
    ap.add_argument("--ep", type=int, default=1)
    ap.add_argument("--etp", type=int, default=0)
    ap.add_argument("--held", action="store_true")
    ap.add_argument("--grouped", action="store_true")   # TEGroupedMLP's experts.linear_fc1.weightJ names and order
    ap.add_argument("--chain-len", type=int, default=0)
    ap.add_argument("--dist-len", type=int, default=0)   # distrib_optim.pt's list cut or repeated to N (bad)   # the ChainedOptimizer's list cut or repeated to N (bad)
    o = ap.parse_args(argv)
    meta = json.load(open(os.path.join(o.src, "meta.json")))
    a = meta["args"]
    w = read_safetensors(os.path.join(o.src, "model.safetensors"))
    mom = read_safetensors(os.path.join(o.src, "optim.safetensors")) if o.optim else {}
    tp, pp = o.tp, o.pp
    ep, etp = o.ep, o.etp or o.tp
    E = a.get("num-experts") or 0
    freq = a.get("moe-layer-freq") or "1"
    moe = set()
    if E:
        assert o.core and o.vp == 1 and not o.per_bucket, "experts: Megatron-Core's names, no --vp or --per-bucket here"
        fl = json.loads(freq) if freq.startswith("[") else [int(l % int(freq) == 0) for l in range(a["num-layers"])]
        moe = {l for l, x in enumerate(fl) if x}
    chained = E and (ep > 1 or etp != tp)   # Megatron's ChainedOptimizer: the dense parameters', the experts'
    L, h, nh = a["num-layers"], a["hidden-size"], a["num-attention-heads"]
    f = a["ffn-hidden-size"]
    V = len(json.load(open(o.vocab_file, encoding="utf-8")))
    md = o.divisible_by or a["make-vocab-size-divisible-by"]
    P = -(-V // (md * tp)) * (md * tp)
    we = w["language_model.embedding.word_embeddings.weight"]
    rows = np.zeros((P, h), np.float32)
    k = min(P, we.shape[0])
    rows[:k] = we[:k]
    w["language_model.embedding.word_embeddings.weight"] = rows
    for sfx in (".exp_avg", ".exp_avg_sq"):
        if mom:
            x = np.zeros((P, h), np.float32)
            x[:k] = mom["language_model.embedding.word_embeddings.weight" + sfx][:k]
            mom["language_model.embedding.word_embeddings.weight" + sfx] = x

    ns = argparse.Namespace(
        num_layers=L, hidden_size=h, ffn_hidden_size=f + (8 if o.bad_ffn else 0), num_attention_heads=nh,
        kv_channels=h // nh, seq_length=a["seq-length"], max_position_embeddings=a["max-position-embeddings"],
        micro_batch_size=a["micro-batch-size"], global_batch_size=a.get("global-batch-size", 8),
        make_vocab_size_divisible_by=md, padded_vocab_size=P, tokenizer_type="GPT2BPETokenizer",
        vocab_file=o.vocab_file, merge_file=o.merge_file, layernorm_epsilon=a["layernorm-epsilon"],
        init_method_std=a["init-method-std"], hidden_dropout=a["hidden-dropout"],
        attention_dropout=a["attention-dropout"], seed=a.get("seed", 1234),
        bias_gelu_fusion=not a.get("no-bias-gelu-fusion", False), openai_gelu=a.get("openai-gelu", False),
        tensor_model_parallel_size=tp, pipeline_model_parallel_size=pp,
        virtual_pipeline_model_parallel_size=o.vp if o.vp > 1 else None,
        num_layers_per_virtual_pipeline_stage=L // (o.pp * o.vp) if o.vp > 1 else None, consumed_train_samples=meta["consumed_train_samples"],
        consumed_valid_samples=meta["consumed_valid_samples"], split="969, 30, 1", data_cache_path=None,
        params_dtype=torch.float32, untie_embeddings_and_output_weights=False,
        add_bias_linear=not a.get("disable-bias-linear", False),
        swiglu=False, normalization="LayerNorm", position_embedding_type="learned_absolute",
        apply_query_key_layer_scaling=False, lr=3e-4, fp16=False, bf16=False, load=None, save=o.out,
        use_distributed_optimizer=o.distrib, overlap_grad_reduce=bool(o.bucket_size),
        ddp_bucket_size=(o.args_bucket_size or o.bucket_size) or None, data_parallel_size=1,
        expert_tensor_parallel_size=o.args_etp or (etp if E else None))
    if E:
        for k in ("num-experts", "moe-ffn-hidden-size", "moe-router-topk", "moe-aux-loss-coeff"):
            setattr(ns, k.replace("-", "_"), a[k])
        ns.moe_layer_freq = json.loads(freq) if freq.startswith("[") else int(freq)
        ns.moe_shared_expert_intermediate_size = a.get("moe-shared-expert-intermediate-size") or None
        ns.expert_model_parallel_size = ep

    def part(x, t, dim):
        if dim >= 10:   # an expert's: over the expert tensor size (its rank the tensor rank; 1: whole)
            if etp == 1:
                return np.ascontiguousarray(x)
            dim -= 10
        n = x.shape[dim] // tp
        return np.ascontiguousarray(x[t * n:(t + 1) * n] if dim == 0 else x[:, t * n:(t + 1) * n])

    def layer_items(g, e):
        """layer g's (name under the legacy layer, its mt name, slicing) in the legacy registration order, on
        expert rank e: an MoE layer's router, local experts (global e E / ep + j), shared expert in place of the
        MLP; the model's biases only where it has them"""
        pre = "language_model.encoder.layers.%d." % g
        names = [(n, d) for n, d in per_layer if g not in moe or not n.startswith("mlp.")]
        if g in moe:
            names.append(("mlp.router.weight", -1))
            fcs = (("dense_h_to_4h", 10), ("dense_4h_to_h", 11))
            if o.grouped:   # TEGroupedMLP: linear_fc1 (every expert's weightJ), then linear_fc2
                names += [("mlp.experts.local_experts.%d.%s.weight" % (j, n), d) for n, d in fcs for j in range(E // ep)]
            else:           # SequentialMLP: expert by expert, each one's linear_fc1 then linear_fc2
                names += [("mlp.experts.local_experts.%d.%s.weight" % (j, n), d) for j in range(E // ep) for n, d in fcs]
            names += [("mlp.shared_experts.dense_h_to_4h.weight", 0), ("mlp.shared_experts.dense_4h_to_h.weight", 1)]
        out = []
        for n, d in names:
            x = re.match(r"mlp\.experts\.local_experts\.(\d+)\.(.*)", n)
            src = pre + ("mlp.experts.local_experts.%d.%s" % (e * E // ep + int(x.group(1)), x.group(2)) if x else n)
            if src in w:
                out.append((n, src, d))
        return out

    def core_name(n, g):
        if g in moe and n.startswith("post_attention_layernorm."):
            return "pre_mlp_layernorm." + n[25:]
        x = re.fullmatch(r"mlp\.experts\.local_experts\.(\d+)\.dense_(h_to_4h|4h_to_h)\.weight", n)
        if x and o.grouped:
            return "mlp.experts.linear_fc%d.weight%s" % (1 if x.group(2) == "h_to_4h" else 2, x.group(1))
        for old, new in core_names.items():
            if n.startswith(old):
                return new + n[len(old):]
        return n.replace(".dense_h_to_4h.", ".linear_fc1.").replace(".dense_4h_to_h.", ".linear_fc2.")

    # the rank directories: every (tensor rank, expert rank) pair, or with --held those a run of the smallest
    # world saves (its ranks of data-parallel or expert-data-parallel rank 0)
    pairs = [(t, e) for e in range(ep) for t in range(tp)]
    if o.held:
        world = tp
        while world % (etp * ep):
            world += tp
        pairs = sorted({(r % tp, (r // etp) % ep) for r in range(world) if r // tp == 0 or r // (etp * ep) == 0},
                       key=lambda q: (q[1], q[0]))

    per_layer = [("input_layernorm.weight", -1), ("input_layernorm.bias", -1),
                 ("self_attention.query_key_value.weight", 0), ("self_attention.query_key_value.bias", 0),
                 ("self_attention.dense.weight", 1), ("self_attention.dense.bias", -1),
                 ("post_attention_layernorm.weight", -1), ("post_attention_layernorm.bias", -1),
                 ("mlp.dense_h_to_4h.weight", 0), ("mlp.dense_h_to_4h.bias", 0),
                 ("mlp.dense_4h_to_h.weight", 1), ("mlp.dense_4h_to_h.bias", -1)]
    core_names = {"input_layernorm.": "self_attention.linear_qkv.layer_norm_",
                  "post_attention_layernorm.": "mlp.linear_fc1.layer_norm_",
                  "self_attention.query_key_value.": "self_attention.linear_qkv.",
                  "self_attention.dense.": "self_attention.linear_proj.",
                  "mlp.dense_h_to_4h.": "mlp.linear_fc1.", "mlp.dense_4h_to_h.": "mlp.linear_fc2."}
    it = meta["iteration"]
    sub = "release" if o.release else "iter_%07d" % it
    vp = o.vp
    per = L // (pp * vp)   # layers per model chunk
    for p in range(pp):
        for t, e in pairs:
            TD = {"bf16": torch.bfloat16, "fp16": torch.float16}

            def T(x):
                t = torch.from_numpy(np.ascontiguousarray(x))
                if t.dtype != torch.float32:
                    return t
                if o.round:
                    return t.to(TD[o.round]).float()
                return t.to(TD[o.dtype]) if o.dtype != "fp32" else t
            models, reg = [], []   # reg: (its mt name, slicing) in the order the model chunks register their parameters
            chunks = []            # per model chunk: (mt name, slicing, shared embedding) in registration order
            for c in range(vp):
                first, last = p == 0 and c == 0, p == pp - 1 and c == vp - 1
                reg0 = len(reg)
                enc = collections.OrderedDict()
                flat = collections.OrderedDict()   # Megatron-Core's names
                emb = collections.OrderedDict()
                if first:
                    emb["word_embeddings"] = collections.OrderedDict(
                        weight=T(part(w["language_model.embedding.word_embeddings.weight"], t, 0)))
                    emb["position_embeddings"] = collections.OrderedDict(
                        weight=T(w["language_model.embedding.position_embeddings.weight"]))
                    flat["embedding.word_embeddings.weight"] = emb["word_embeddings"]["weight"]
                    flat["embedding.position_embeddings.weight"] = emb["position_embeddings"]["weight"]
                    reg += [("language_model.embedding.word_embeddings.weight", 0),
                            ("language_model.embedding.position_embeddings.weight", -1)]
                for i in range(per):
                    g = (c * pp + p) * per + i
                    items = layer_items(g, e)
                    order = items if not o.core else [x for x in items if x[0].startswith("self_attention.dense.")] + \
                        [x for x in items if not x[0].startswith("self_attention.dense.")]
                    reg += [(src, dim) for _, src, dim in order]
                    for name, src, dim in items:
                        x = w[src]
                        x = x if dim < 0 else part(x, t, dim) if x.ndim == 2 or dim == 0 else x
                        if "query_key_value" in name and o.checkpoint_version < 2.0:
                            # the rank's rows in the order of older checkpoints (Megatron's checkpointing.py
                            # fix_query_key_value_ordering undoes it on load): version 0 [3, np, hn], 1 [np, hn, 3]
                            hn = h // nh
                            y = x.reshape(-1, 3, hn, *x.shape[1:])   # [np, 3, hn, ...], as mt holds them
                            y = y.transpose(1, 0, 2, *range(3, y.ndim)) if o.checkpoint_version == 0 \
                                else y.transpose(0, 2, 1, *range(3, y.ndim))
                            x = np.ascontiguousarray(y).reshape(x.shape)
                        enc["layers.%d.%s" % (i, name)] = T(x)
                        flat["decoder.layers.%d.%s" % (i, core_name(name, g))] = enc["layers.%d.%s" % (i, name)]
                        if o.core and name == "mlp.dense_4h_to_h.bias":
                            # Transformer Engine's modules keep their FP8 metadata as torch.save'd into an
                            # io.BytesIO (of None without FP8)
                            for mod in ("self_attention.core_attention", "self_attention.linear_proj",
                                        "self_attention.linear_qkv", "mlp.linear_fc1", "mlp.linear_fc2"):
                                buf = io.BytesIO()
                                torch.save(None, buf)
                                flat["decoder.layers.%d.%s._extra_state" % (i, mod)] = buf
                if last:
                    for n in ("weight", "bias"):
                        enc["final_layernorm." + n] = T(w["language_model.encoder.final_layernorm." + n])
                        flat["decoder.final_layernorm." + n] = enc["final_layernorm." + n]
                        reg.append(("language_model.encoder.final_layernorm." + n, -1))
                    if pp > 1:
                        reg.append(("language_model.embedding.word_embeddings.weight", 0))
                lm = collections.OrderedDict()
                if first:
                    lm["embedding"] = emb
                if o.checkpoint_version < 2.0:   # the names of those versions
                    enc = collections.OrderedDict((k.replace(".self_attention.", ".attention."), v) for k, v in enc.items())
                    lm["transformer"] = enc
                else:
                    lm["encoder"] = enc
                model = collections.OrderedDict(language_model=lm)
                if last and pp > 1:
                    head = T(part(w["language_model.embedding.word_embeddings.weight"], t, 0))
                    model["word_embeddings_for_head"] = collections.OrderedDict(weight=head)
                    flat["output_layer.weight"] = head
                # Megatron-Core marks the embeddings shared_embedding where a pipeline splits them
                chunks.append([(n, dim, o.core and pp > 1 and n.endswith("word_embeddings.weight"))
                               for n, dim in reg[reg0:]])
                if o.core:
                    model = flat
                if o.extra:
                    enc[o.extra] = torch.zeros(2)
                if o.drop:
                    for d in (model, lm, enc, emb):
                        d.pop(o.drop, None)
                models.append(model)
            state = {
                "args": ns, "checkpoint_version": o.checkpoint_version, "iteration": it,
                "opt_param_scheduler": meta["opt_param_scheduler"],
                "rng_state": [{"random_rng_state": random.Random(t).getstate(),
                               "np_rng_state": np.random.RandomState(t).get_state(),
                               "torch_rng_state": torch.Generator().manual_seed(t).get_state(),
                               "cuda_rng_state": torch.zeros(16, dtype=torch.uint8),
                               "rng_tracker_states": {"model-parallel-rng": torch.zeros(16, dtype=torch.uint8)}}],
                "num_floating_point_operations_so_far": 1.5e12,
            }
            if vp == 1:
                state["model"] = models[0]
            else:   # the interleaved schedule's model chunks
                for c in range(vp):
                    state["model%d" % c] = models[c]
            sl = lambda x, dim: x if dim < 0 else part(x, t, dim)
            if o.optim and chained:
                state["optimizer"] = [optimizer([r for r in reg if r[1] < 10], w, mom, sl, meta, a, o.dtype),
                                      optimizer([r for r in reg if r[1] >= 10], w, mom, sl, meta, a, o.dtype, True)]
            elif o.optim:
                state["optimizer"] = optimizer(reg, w, mom, sl, meta, a, o.dtype)
            if o.optim and chained and o.chain_len:
                state["optimizer"] = (state["optimizer"] * o.chain_len)[:o.chain_len]
            rank = "mp_rank_%02d" % t if pp == 1 else "mp_rank_%02d_%03d" % (t, p)
            if ep > 1:
                rank += "_%03d" % e
            d = os.path.join(o.out, sub, rank)
            os.makedirs(d, exist_ok=True)
            if o.optim and o.distrib:
                # DistributedOptimizer.state_dict(): the param groups without their parameters, with the step
                def dist_sd(opt):
                    inner = opt["optimizer"] if "optimizer" in opt else opt
                    groups = [dict((k, v) for k, v in g.items() if k != "params") for g in inner["param_groups"]]
                    for g in groups:
                        g["step"] = int(meta["optimizer"]["step"])
                    out = {"optimizer": {"param_groups": groups}}
                    if "grad_scaler" in opt:
                        out["grad_scaler"] = opt["grad_scaler"]
                    return out
                args = (w, mom, sl, meta, a, o.dtype, o.bucket_size, p == 0, o.per_bucket)
                if chained:
                    # ChainedOptimizer: each optimizer's state_dict(), and save_parameter_state's list of each one's
                    # get_parameter_state_dp_zero() where this rank is that optimizer's data-parallel rank 0, else
                    # None (the smallest world's ranks simulated; a pair none holds gets both)
                    state["optimizer"] = [dist_sd(x) for x in state["optimizer"]]
                    dense = [[x for x in ch if x[1] < 10] for ch in chunks]
                    experts = [ch for ch in ([x for x in ch if x[1] >= 10] for ch in chunks) if ch]
                    world = tp
                    while world % (etp * ep):
                        world += tp
                    saves = [any(r % tp == t and (r // etp) % ep == e and q == 0 for r in range(world)
                                 for q in ([r // tp] if k == 0 else [r // (etp * ep)])) for k in (0, 1)]
                    if not any(saves):
                        saves = [True, True]
                    states = [distrib(ch, *args) if sv else None for ch, sv in zip((dense, experts), saves)]
                    if o.dist_len:
                        states = (states * o.dist_len)[:o.dist_len]
                    torch.save(states, os.path.join(d, "distrib_optim.pt"))
                else:
                    state["optimizer"] = dist_sd(state["optimizer"])
                    torch.save(distrib(chunks, *args), os.path.join(d, "distrib_optim.pt"))
            torch.save(state, os.path.join(d, "model_optim_rng.pt"))
    with open(os.path.join(o.out, "latest_checkpointed_iteration.txt"), "w") as fh:
        fh.write("release" if o.release else str(it))


def jobs(path, common):
    """--jobs FILE [ARGS...]: each job line's arguments plus ARGS, run in order by main(); one status line each."""
    failed = 0
    for line in open(path, encoding="utf-8"):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        argv = shlex.split(line)
        out = argv[1] if len(argv) > 1 else line.strip()
        try:
            main(argv + common)
            sys.stdout.write("ok %s\n" % out)
        except SystemExit as e:   # argparse's refusals
            if e.code in (0, None):
                sys.stdout.write("ok %s\n" % out)
            else:
                failed += 1
                sys.stdout.write("failed %s: exit %s\n" % (out, e.code))
        except Exception as e:
            failed += 1
            traceback.print_exc()
            sys.stdout.write("failed %s: %s: %s\n" % (out, type(e).__name__, str(e).replace("\n", " ")))
        sys.stdout.flush()
        sys.stderr.flush()
    return 1 if failed else 0


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "--jobs":
        sys.exit(jobs(sys.argv[2], sys.argv[3:]))
    sys.exit(main())
