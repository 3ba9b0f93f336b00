#!/usr/bin/env bash
# megatron-write.sh: mt-ckpt-convert --to megatron against torch and against transformers' own Megatron-LM
# converters (transformers < 4.45 from PyPI in build/venv-hf over Debian's torch; tests/oracle/megatron_hf.py
# runs them with GPT-2's tokenizer from share/ in place of the hub's). An mt-trained model exported:
# - every rank's file names only mt's allowlisted globals in its pickle (pickletools), torch.load reads it, and
#   the file holds the iteration, checkpoint_version 3.0, the args Megatron checks on load (the layout
#   written, padded_vocab_size, params_dtype), the schedule of the mt checkpoint and, per rank, the RNG state
#   Megatron seeds from --seed (Python's, numpy's and torch's own seeding, compared);
# - convert_megatron_gpt2_checkpoint.py on the TP 1 export and checkpoint_reshaping_and_interoperability.py
#   (Megatron to transformers) on a TP 2 x PP 2 export give a GPT2LMHeadModel whose logits equal
#   mt-eval --score --logits to 1e-5 of the largest;
# - each rank's model entries (both key families; the interleaved schedule's model chunks with
#   --target-num-layers-per-virtual-pipeline-stage) are tests/oracle/megatron_write.py's layout of the same
#   tensors;
# - the optimizer's state is Megatron-Core's (fp32: torch's AdamW state dict over Megatron's param groups;
#   --bf16 and --fp16 runs: with the fp32 main parameters, and fp16's loss scaler) as
#   tests/oracle/megatron_write.py --optim builds it with torch's own AdamW, and --no-save-optim leaves it out;
#   a --use-distributed-optimizer run's is the distributed optimizer's (distrib_optim.pt per rank, buckets
#   and all) as megatron_write.py --distrib builds it;
# - back with --from megatron: the weights and moments are the original's byte for byte at TP 1 (fp32, bf16,
#   fp16), and at TP 2 x PP 2 (legacy and Megatron-Core keys) every rank's are mt's own resharding's;
#   iteration, consumed samples, Adam's step and the schedule come back;
# - --dtype bf16 writes the tensors rounded as torch rounds them;
# - the LLaMA options (RMSNorm, rope, SwiGLU, GQA, untied, no biases) go mt -> Megatron -> mt at TP 2 x PP 2
#   as mt's own resharding, with both key families, and so does a mixture of experts (Megatron-Core's names,
#   MoE args, the experts' optimizer state in the dense param groups in SequentialMLP's order);
# - experts over expert ranks (--target-expert-model-parallel-size 2, with --target-expert-tensor-parallel-size
#   1 too): the mp_rank_TT[_PPP]_EEE directories, every rank's tensors and its ChainedOptimizer's moments (the
#   dense parameters', the experts') equal to the source's slices as a Python reading of the layout computes
#   them, the expert-parallel RNG seed per rank; back with --from megatron (of every pair, and of only the pairs
#   a Megatron run holds) as mt's own resharding, which mt-train resumes with the same losses;
#   with --use-distributed-optimizer the ChainedOptimizer's two DistributedOptimizer states and distrib_optim.pt's
#   list of the dense and expert buffers' states as megatron_write.py --distrib --ep builds them, back as the
#   reshard;
# and the other way, checkpoint_reshaping_and_interoperability.py (transformers to Megatron, TP 2 x PP 2;
# args as a types.SimpleNamespace, transposed views of shared storages) from a random GPT2LMHeadModel, read
# with --from megatron: mt's logits equal transformers' to 1e-5. Bad requests: one line, nothing written.
# The mt runs and exports come first, with their own checks; what Python checks is then done by two
# megatron_hf.py --jobs calls (torch and transformers imported once each; megatron_write.py's layouts as its
# "run" jobs; every job's output in a directory or log of its own), and those checks are reported after
# them, in the same order.
. "$(dirname "$0")/../lib.sh"
PY=/usr/bin/python3
d=$T_TMP
export OMP_NUM_THREADS=2
if ! HPY=$("$T_TOP/tests/oracle/venv-hf.sh" 2>"$d/venv.err"); then
    t_skip "transformers" "unavailable: $(head -c 300 "$d/venv.err")"; exit 0
fi
# hjob LOG COMMAND ARGS...: a megatron_hf.py job of the next batch ($hjobs), its output in LOG; hok LOG: it
# succeeded. mwjob SRC OUT FLAGS...: megatron_write.py's layout of SRC written into OUT by a job of that batch
# (log OUT.log; before the jobs that read OUT); mwok OUT: it was. pyfile NAME: the Python check on stdin saved
# as $d/NAME.py, for a megatron_hf.py "run" job.
hjob() { printf '%q ' "$@" >>"$hjobs"; echo >>"$hjobs"; }
hok() { grep -qxF "ok $1" "$d/hf.status"; }
mwjob() { hjob "$2.log" run "$T_TOP/tests/oracle/megatron_write.py" "$@" --vocab-file "$GPT2_VOCAB" --merge-file "$GPT2_MERGES"; }
mwok() { hok "$1.log"; }
pyfile() { cat >"$d/$1.py"; }
hjobs=$d/hjobs1
: >"$hjobs"
err1() { "$@" >"$d/o" 2>"$d/e"; local rc=$?; [ $rc != 0 ] && [ "$(wc -l <"$d/e")" -eq 1 ]; }
differ22() {   # A B ITER: the TP 2 x PP 2 ranks whose model or optim.safetensors differ between checkpoints A and B
    local r f
    for r in mp_rank_00_000 mp_rank_01_000 mp_rank_00_001 mp_rank_01_001; do
        for f in model optim; do
            cmp -s "$1/iter_$3/$r/$f.safetensors" "$2/iter_$3/$r/$f.safetensors" || echo -n " $r/$f"
        done
    done
}

# ---- a tiny GPT-2 trained on real text, and text it was not trained on ----
$PY "$T_TOP/tests/oracle/prose.py" 900 >"$d/train.jsonl"   # a fixed corpus, not the docs
mt-tokenize --vocab-file "$GPT2_VOCAB" --merge-file "$GPT2_MERGES" --append-eod --quiet --input "$d/train.jsonl" \
    | mt-index --output-prefix "$d/data" 2>"$d/index.err" || { t_fail "dataset" "$(cat "$d/index.err")"; exit 0; }
train=(--num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 64 --max-position-embeddings 64
       --micro-batch-size 4 --global-batch-size 8 --lr 5e-3 --min-lr 5e-4 --lr-decay-style cosine --log-interval 10
       --eval-iters 0 --split 100,0,0 --seed 5 --vocab-file "$GPT2_VOCAB" --merge-file "$GPT2_MERGES"
       --data-path "$d/data_text_document" --data-cache-path "$d/cache")
if mt-train "${train[@]}" --train-iters 20 --lr-decay-iters 40 --save "$d/ck" >"$d/train.log" 2>"$d/train.err"
then t_pass "tiny GPT-2 model trained"
else t_fail "tiny GPT-2 model trained" "$(tail -2 "$d/train.err")"; exit 0; fi
$PY - "$T_TOP" >"$d/docs.jsonl" <<'PYEOF'
import json, sys
top = sys.argv[1]
for f in (top + "/man/mt.7", top + "/kernels/README.md"):
    text = open(f, encoding="utf-8").read()
    for p in [p for p in text.split("\n\n") if len(p) > 80][:3]:
        print(json.dumps({"text": p[:120]}))
PYEOF
mt-tokenize --vocab-file "$GPT2_VOCAB" --merge-file "$GPT2_MERGES" --quiet --input "$d/docs.jsonl" \
    | mt-index --output-prefix "$d/docs" 2>/dev/null && mt-index --dump "$d/docs_text_document" >"$d/ids.txt"
mt-eval --load "$d/ck" --score --logits "$d/logits.f32" <"$d/docs.jsonl" >/dev/null 2>"$d/eval.err" \
    || { t_fail "mt-eval --score --logits" "$(cat "$d/eval.err")"; exit 0; }

# ---- TP 1, legacy keys ----
t_ok "--to megatron (TP 1, legacy keys)" mt-ckpt-convert --load "$d/ck" --to megatron --out "$d/meg1"
t_grep "the tracker names iteration 20" '^20$' "$d/meg1/latest_checkpointed_iteration.txt"
ls -a "$d" | grep -q '\.tmp\.' && t_fail "no temporary left beside --out" "$(ls -a "$d")"
hjob "$d/r.out" restricted "$d/meg1"
# what Megatron reads on load, against the mt checkpoint's meta.json
hjob "$d/fields.out" run "$d/fields.py" "$d/meg1/iter_0000020/mp_rank_00/model_optim_rng.pt" \
    "$d/ck/iter_0000020/mp_rank_00/meta.json"
pyfile fields <<'PYEOF'
import json, sys, torch
sd = torch.load(sys.argv[1], map_location="cpu")
meta = json.load(open(sys.argv[2]))
a = sd["args"]
want = [("iteration", sd["iteration"], 20), ("checkpoint_version", sd["checkpoint_version"], 3.0),
        ("tensor_model_parallel_size", a.tensor_model_parallel_size, 1),
        ("pipeline_model_parallel_size", a.pipeline_model_parallel_size, 1),
        ("expert_tensor_parallel_size", a.expert_tensor_parallel_size, 1), ("fp8", a.fp8, None),
        ("padded_vocab_size", a.padded_vocab_size, 50304), ("params_dtype", a.params_dtype, torch.float32),
        ("num_layers", a.num_layers, 2), ("hidden_size", a.hidden_size, 32), ("ffn_hidden_size", a.ffn_hidden_size, 128),
        ("make_vocab_size_divisible_by", a.make_vocab_size_divisible_by, 128),
        ("tokenizer_type", a.tokenizer_type, "GPT2BPETokenizer"), ("bias_gelu_fusion", a.bias_gelu_fusion, True),
        ("add_bias_linear", a.add_bias_linear, True), ("add_position_embedding", a.add_position_embedding, True),
        ("consumed_train_samples", a.consumed_train_samples, meta["consumed_train_samples"]),
        ("opt_param_scheduler", sd["opt_param_scheduler"], meta["opt_param_scheduler"])]
bad = ["%s: %r, want %r" % w for w in want if w[1] != w[2]]
print("; ".join(bad) if bad else "%d fields as Megatron reads them" % len(want))
sys.exit(1 if bad else 0)
PYEOF
cp -r "$d/meg1" "$d/meg1-hf"
hjob "$d/c1.out" convert1 "$d/meg1-hf/iter_0000020/mp_rank_00/model_optim_rng.pt" "$GPT2_VOCAB" "$GPT2_MERGES"
hjob "$d/l1.out" logits "$d/meg1-hf/iter_0000020/mp_rank_00" "$d/ids.txt" "$d/logits.f32"
t_ok "--from megatron of the export" mt-ckpt-convert --from megatron --load "$d/meg1" --save "$d/rt1"
cmp -s "$d/rt1/iter_0000020/mp_rank_00/model.safetensors" "$d/ck/iter_0000020/mp_rank_00/model.safetensors" \
    && cmp -s "$d/rt1/iter_0000020/mp_rank_00/optim.safetensors" "$d/ck/iter_0000020/mp_rank_00/optim.safetensors" \
    && t_pass "mt -> Megatron -> mt at TP 1: model.safetensors and optim.safetensors byte for byte" \
    || t_fail "mt -> Megatron -> mt at TP 1: model.safetensors and optim.safetensors byte for byte" "differ"
$PY - "$d/rt1/iter_0000020/mp_rank_00/meta.json" "$d/ck/iter_0000020/mp_rank_00/meta.json" >"$d/m.out" 2>&1 <<'PYEOF'
import json, sys
a, b = (json.load(open(f)) for f in sys.argv[1:])
keys = ["iteration", "consumed_train_samples", "consumed_valid_samples", "opt_param_scheduler", "optimizer"]
bad = [k for k in keys if a.get(k) != b.get(k)]
print(bad or keys)
sys.exit(1 if bad else 0)
PYEOF
[ $? = 0 ] && t_pass "the round trip keeps $(cat "$d/m.out")" || t_fail "the round trip keeps the training state" "$(cat "$d/m.out")"

# ---- TP 2 x PP 2, both key families ----
mt-ckpt-convert --load "$d/ck" --save "$d/ck22" --target-tensor-parallel-size 2 --target-pipeline-parallel-size 2 2>/dev/null
for keys in legacy mcore; do
    t_ok "--to megatron TP 2 x PP 2, $keys keys" mt-ckpt-convert --load "$d/ck" --to megatron --out "$d/meg22-$keys" \
        --megatron-keys $keys --target-tensor-parallel-size 2 --target-pipeline-parallel-size 2
    rm -rf "$d/rt22"
    if ! mt-ckpt-convert --from megatron --load "$d/meg22-$keys" --save "$d/rt22" --target-tensor-parallel-size 2 \
            --target-pipeline-parallel-size 2 2>"$d/ce"; then
        t_fail "$keys TP 2 x PP 2: --from megatron" "$(cat "$d/ce")"; continue
    fi
    bad=$(differ22 "$d/rt22" "$d/ck22" 0000020)
    [ -z "$bad" ] && t_pass "mt -> Megatron ($keys keys) -> mt at TP 2 x PP 2: every rank's model and optim.safetensors are the reshard's" \
        || t_fail "mt -> Megatron ($keys keys) -> mt at TP 2 x PP 2: every rank's model and optim.safetensors are the reshard's" "differ:$bad"
done
# the RNG state of every rank: what Megatron's _set_random_seed gives for --seed 5 on that stage and tensor
# rank, as Python's random, numpy and torch themselves produce it (so Megatron loads it without --no-load-rng)
hjob "$d/rng.out" run "$d/rng.py" "$d/meg22-mcore/iter_0000020" 5
pyfile rng <<'PYEOF'
import random, struct, sys, numpy as np, torch
n = 0
for t in (0, 1):
    for p in (0, 1):
        sd = torch.load("%s/mp_rank_%02d_%03d/model_optim_rng.pt" % (sys.argv[1], t, p), map_location="cpu")
        st, = sd["rng_state"]
        seed = int(sys.argv[2]) + 100 * p
        random.seed(seed)
        assert st["random_rng_state"] == random.getstate(), "random"
        np.random.seed(seed)
        want = np.random.get_state()
        got = st["np_rng_state"]
        assert got[0] == want[0] and got[1].dtype == want[1].dtype and (got[1] == want[1]).all() and got[2:] == want[2:], "numpy"
        assert torch.equal(st["torch_rng_state"], torch.Generator().manual_seed(seed).get_state()), "torch"
        cuda = {k: struct.unpack("<QQ", bytes(v.tolist())) for k, v in st["rng_tracker_states"].items()}
        assert struct.unpack("<QQ", bytes(st["cuda_rng_state"].tolist())) == (seed, 0), "cuda"
        assert cuda == {"data-parallel-rng": (seed, 0), "model-parallel-rng": (seed + 2718 + t, 0),
                        "expert-parallel-rng": (seed + 1024 + t, 0)}, cuda
        n += 1
print("%d ranks" % n)
PYEOF
# each rank's model and optimizer state are what tests/oracle/megatron_write.py lays out as Megatron saves
# them (the optimizer's built with torch's own AdamW): legacy and Megatron-Core keys at TP 2 x PP 2, and the
# interleaved schedule's model chunks
mwjob "$d/ck/iter_0000020/mp_rank_00" "$d/or22" --tp 2 --pp 2 --core --optim
mwjob "$d/ck/iter_0000020/mp_rank_00" "$d/or22l" --tp 2 --pp 2
hjob "$d/sm22l" same_model "$d/meg22-legacy" "$d/or22l"
hjob "$d/sm22" same_model "$d/meg22-mcore" "$d/or22"
hjob "$d/so22" same_optim "$d/meg22-mcore" "$d/or22"
# the model chunks: exported, and back (compared after the batches, with the oracle's layout)
rm -rf "$d/megv" "$d/orv" "$d/rtv"
mt-ckpt-convert --load "$d/ck" --to megatron --out "$d/megv" --megatron-keys mcore \
    --target-num-layers-per-virtual-pipeline-stage 1 2>"$d/ce-v" &&
    mt-ckpt-convert --from megatron --load "$d/megv" --save "$d/rtv" 2>>"$d/ce-v"
rc_v=$?
mwjob "$d/ck/iter_0000020/mp_rank_00" "$d/orv" --vp 2 --core --optim
hjob "$d/smv" same_model "$d/megv" "$d/orv"
hjob "$d/sov" same_optim "$d/megv" "$d/orv"
declare -A rc_dt
for dt in bf16 fp16; do   # Float16OptimizerWithFloat16Params: the fp32 main parameters (and fp16's loss scaler)
    rm -rf "$d/ck-$dt" "$d/meg-$dt" "$d/or-$dt" "$d/rt-$dt"
    mt-train "${train[@]}" --$dt --train-iters 4 --lr-decay-iters 40 --save "$d/ck-$dt" >/dev/null 2>"$d/t-$dt.err" &&
        mt-ckpt-convert --load "$d/ck-$dt" --to megatron --out "$d/meg-$dt" 2>"$d/ce-$dt" &&
        mt-ckpt-convert --from megatron --load "$d/meg-$dt" --save "$d/rt-$dt" 2>>"$d/ce-$dt"
    rc_dt[$dt]=$?
    mwjob "$d/ck-$dt/iter_0000004/mp_rank_00" "$d/or-$dt" --optim --dtype $dt
    hjob "$d/so-$dt" same_optim "$d/meg-$dt" "$d/or-$dt"
done
# ---- the distributed optimizer (a --bf16 run with --use-distributed-optimizer --overlap-grad-reduce and
# 100-element buckets): each rank file holds DistributedOptimizer.state_dict() and distrib_optim.pt beside it
# the buffers' main parameters and moments, as megatron_write.py --distrib lays them out (the same TP 2 x PP 2
# layout from a one-rank copy of the run); back with --from megatron as mt's own reshard ----
rm -rf "$d/ckd" "$d/ckd1" "$d/ckd22" "$d/megd" "$d/ord" "$d/rtd"
bad_d=
mt-train "${train[@]}" --bf16 --use-distributed-optimizer --overlap-grad-reduce --ddp-bucket-size 100 --train-iters 4 \
        --lr-decay-iters 40 --save "$d/ckd" >/dev/null 2>"$d/t-d.err" &&
    mt-ckpt-convert --load "$d/ckd" --save "$d/ckd1" 2>"$d/ce-d" &&
    mt-ckpt-convert --load "$d/ckd" --save "$d/ckd22" --target-tensor-parallel-size 2 --target-pipeline-parallel-size 2 2>>"$d/ce-d" &&
    mt-ckpt-convert --load "$d/ckd" --to megatron --out "$d/megd" --megatron-keys mcore --target-tensor-parallel-size 2 \
        --target-pipeline-parallel-size 2 2>>"$d/ce-d" &&
    mt-ckpt-convert --from megatron --load "$d/megd" --save "$d/rtd" --target-tensor-parallel-size 2 \
        --target-pipeline-parallel-size 2 2>>"$d/ce-d" && bad_d=$(differ22 "$d/rtd" "$d/ckd22" 0000004)
rc_d=$?
mwjob "$d/ckd1/iter_0000004/mp_rank_00" "$d/ord" --tp 2 --pp 2 --core --optim --distrib --bucket-size 100 --dtype bf16
hjob "$d/sod" same_optim "$d/megd" "$d/ord"
hjob "$d/smd" same_model "$d/megd" "$d/ord"
# ---- the LLaMA options (RMSNorm, rope, SwiGLU, grouped-query attention, untied, no biases) both ways ----
if mt-train "${train[@]}" --normalization RMSNorm --position-embedding-type rope --swiglu --group-query-attention \
        --num-query-groups 2 --untie-embeddings-and-output-weights --disable-bias-linear --train-iters 4 \
        --lr-decay-iters 40 --save "$d/ckl" >/dev/null 2>"$d/t.err" &&
    mt-ckpt-convert --load "$d/ckl" --save "$d/ckl22" --target-tensor-parallel-size 2 --target-pipeline-parallel-size 2 2>"$d/ce"
then
    for keys in legacy mcore; do
        rm -rf "$d/megl" "$d/rtl"
        bad=
        if mt-ckpt-convert --load "$d/ckl" --to megatron --out "$d/megl" --megatron-keys $keys --target-tensor-parallel-size 2 \
                --target-pipeline-parallel-size 2 2>"$d/ce" &&
            mt-ckpt-convert --from megatron --load "$d/megl" --save "$d/rtl" --target-tensor-parallel-size 2 \
                --target-pipeline-parallel-size 2 2>>"$d/ce"; then
            bad=$(differ22 "$d/rtl" "$d/ckl22" 0000004)
        else bad="$(cat "$d/ce")"; fi
        [ -z "$bad" ] && t_pass "LLaMA options, $keys keys, TP 2 x PP 2: mt -> Megatron -> mt is the reshard, model and optimizer" \
            || t_fail "LLaMA options, $keys keys, TP 2 x PP 2: mt -> Megatron -> mt is the reshard" "$bad"
    done
else t_fail "a LLaMA-options run" "$(tail -2 "$d/t.err" "$d/ce")"; fi

# ---- a mixture of experts (a dense layer then an MoE layer: router, 4 experts, a shared expert), with
# Megatron-Core's names; no expert parallelism, so one optimizer holds the experts' state with the rest ----
if mt-train "${train[@]}" --num-experts 4 --moe-router-topk 2 --moe-shared-expert-intermediate-size 64 \
        --moe-layer-freq "[0,1]" --moe-aux-loss-coeff 0.01 --disable-bias-linear --train-iters 4 --lr-decay-iters 40 \
        --save "$d/ckm" >/dev/null 2>"$d/t.err" &&
    mt-ckpt-convert --load "$d/ckm" --save "$d/ckm22" --target-tensor-parallel-size 2 --target-pipeline-parallel-size 2 2>"$d/ce"
then
    moe=ran bad_m=
    if mt-ckpt-convert --load "$d/ckm" --to megatron --out "$d/megm" --megatron-keys mcore --target-tensor-parallel-size 2 \
            --target-pipeline-parallel-size 2 2>"$d/ce" &&
        mt-ckpt-convert --from megatron --load "$d/megm" --save "$d/rtm" --target-tensor-parallel-size 2 \
            --target-pipeline-parallel-size 2 2>>"$d/ce"; then
        bad_m=$(differ22 "$d/rtm" "$d/ckm22" 0000004)
        moe=exported   # and its file checked after the batch
        hjob "$d/mo" run "$d/mo.py" "$d/megm/iter_0000004/mp_rank_00_001/model_optim_rng.pt"
        pyfile mo <<'PYEOF'
import sys, torch
sd = torch.load(sys.argv[1], map_location="cpu")
a, o, m = sd["args"], sd["optimizer"], sd["model"]
assert (a.num_experts, a.moe_layer_freq, a.moe_router_topk, a.moe_shared_expert_intermediate_size,
        a.moe_expert_capacity_factor) == (4, [0, 1], 2, 64, None), vars(a)
# no expert parallelism: Megatron reduces the experts' gradients with the dense ones (allreduce), so they are
# in the dense param groups of one optimizer (no ChainedOptimizer list), in SequentialMLP's registration
# order: expert 0's linear_fc1 and linear_fc2, then expert 1's, ...
assert isinstance(o, dict) and [g["is_expert_parallel"] for g in o["param_groups"]] == [False, False], o["param_groups"]
L = "decoder.layers.0."
reg = [L + "self_attention.linear_proj.weight", L + "self_attention.linear_qkv.weight", L + "mlp.router.weight"]
for j in range(4):
    reg += [L + "mlp.experts.local_experts.%d.linear_fc%d.weight" % (j, f) for f in (1, 2)]
reg += [L + "mlp.shared_experts.linear_fc1.weight", L + "mlp.shared_experts.linear_fc2.weight", "output_layer.weight"]
got = [tuple(o["state"][i]["exp_avg"].shape) for i in o["param_groups"][0]["params"]]
assert got == [tuple(m[k].shape) for k in reg], got
for k in ("decoder.layers.0.pre_mlp_layernorm.weight", "decoder.layers.0.mlp.router.weight",
          "decoder.layers.0.mlp.experts.local_experts.3.linear_fc2.weight", "decoder.layers.0.mlp.shared_experts.linear_fc1.weight"):
    assert k in m, k
PYEOF
    else bad_m="$(cat "$d/ce")"; fi
    err1 mt-ckpt-convert --load "$d/ckm" --to megatron --out "$d/megml" && [ ! -e "$d/megml" ] \
        && t_pass "experts with the legacy keys: refused in one line ($(cat "$d/e"))" || t_fail "experts with the legacy keys refused" "$(cat "$d/e")"
else moe=failed; t_fail "an MoE run" "$(tail -2 "$d/t.err" "$d/ce")"; fi

# ---- experts over expert ranks: TP 2 x PP 2 x EP 2 (mp_rank_TT_PPP_EEE), and TP 2 x EP 2 with each expert
# whole (--target-expert-tensor-parallel-size 1); the optimizer's state as Megatron's ChainedOptimizer (the dense
# parameters', then the experts'). Back with --from megatron as the reshard (all pairs, and only the pairs a
# Megatron run of 2 ranks holds: mp_rank_00_000, mp_rank_01_001), and mt-train resumes it with the reshard's
# losses ----
if [ "$moe" != failed ]; then
    bad_ep=
    if mt-ckpt-convert --load "$d/ckm" --to megatron --out "$d/megep" --megatron-keys mcore --target-tensor-parallel-size 2 \
            --target-pipeline-parallel-size 2 --target-expert-model-parallel-size 2 2>"$d/ce" &&
        mt-ckpt-convert --from megatron --load "$d/megep" --save "$d/rtep" --target-tensor-parallel-size 2 \
            --target-pipeline-parallel-size 2 2>>"$d/ce"
    then bad_ep=$(differ22 "$d/rtep" "$d/ckm22" 0000004)
    else bad_ep="$(cat "$d/ce")"; fi
    # and straight into mt's own expert-parallel layout: the directories mt's resharding writes, byte for byte
    if mt-ckpt-convert --from megatron --load "$d/megep" --save "$d/rtep222" --target-tensor-parallel-size 2 \
            --target-pipeline-parallel-size 2 --target-expert-model-parallel-size 2 2>"$d/ce" &&
        mt-ckpt-convert --load "$d/ckm" --save "$d/ckm222" --target-tensor-parallel-size 2 --target-pipeline-parallel-size 2 \
            --target-expert-model-parallel-size 2 2>>"$d/ce"
    then
        n=0
        for f in "$d"/ckm222/iter_0000004/mp_rank_*/*.safetensors; do
            n=$((n + 1)); cmp -s "$f" "$d/rtep222/${f#$d/ckm222/}" || bad_ep="$bad_ep ${f#$d/ckm222/}"
        done
        [ $n = 16 ] && [ "$(ls "$d/rtep222/iter_0000004")" = "$(ls "$d/ckm222/iter_0000004")" ] || bad_ep="$bad_ep ($n files)"
    else bad_ep="$bad_ep $(cat "$d/ce")"; fi
    hjob "$d/mep.out" run "$d/mep.py" "$d/ckm/iter_0000004/mp_rank_00" "$d/megep/iter_0000004" 2 2 2 2 5
    bad_etp=
    if mt-ckpt-convert --load "$d/ckm" --to megatron --out "$d/megetp" --megatron-keys mcore --target-tensor-parallel-size 2 \
            --target-expert-model-parallel-size 2 --target-expert-tensor-parallel-size 1 2>"$d/ce" &&
        mt-ckpt-convert --load "$d/ckm" --save "$d/ckm2" --target-tensor-parallel-size 2 2>>"$d/ce" &&
        cp -a "$d/megetp" "$d/megheld" && rm -r "$d/megheld/iter_0000004/mp_rank_00_001" "$d/megheld/iter_0000004/mp_rank_01_000" &&
        mt-ckpt-convert --from megatron --load "$d/megheld" --save "$d/rtetp" --target-tensor-parallel-size 2 2>>"$d/ce"
    then
        for r in mp_rank_00 mp_rank_01; do for f in model optim; do
            cmp -s "$d/rtetp/iter_0000004/$r/$f.safetensors" "$d/ckm2/iter_0000004/$r/$f.safetensors" || bad_etp="$bad_etp $r/$f"
        done; done
        # resumed: two more iterations from the round trip and from the reshard, the same losses
        for c in rtetp ckm2; do
            mt-train -n 2 "${train[@]}" --tensor-model-parallel-size 2 --num-experts 4 --moe-router-topk 2 \
                --moe-shared-expert-intermediate-size 64 --moe-layer-freq "[0,1]" --moe-aux-loss-coeff 0.01 --disable-bias-linear \
                --train-iters 6 --lr-decay-iters 40 --log-interval 1 --use-checkpoint-opt_param-scheduler --load "$d/$c" --save "$d/$c" >"$d/res-$c.log" 2>"$d/res-$c.err" \
                || bad_etp="$bad_etp resume $c: $(tail -1 "$d/res-$c.err")"
            grep -o "iteration  *[0-9]*/.*lm loss: [^|]*" "$d/res-$c.log" | sed 's/elapsed.*lm loss/lm loss/' >"$d/res-$c.txt"
        done
        [ "$(wc -l <"$d/res-ckm2.txt")" = 2 ] && cmp -s "$d/res-rtetp.txt" "$d/res-ckm2.txt" \
            || bad_etp="$bad_etp losses: $(cat "$d/res-rtetp.txt" "$d/res-ckm2.txt" | tr '\n' ' ')"
    else bad_etp="$(cat "$d/ce")"; fi
    hjob "$d/metp.out" run "$d/mep.py" "$d/ckm/iter_0000004/mp_rank_00" "$d/megetp/iter_0000004" 2 1 2 1 5
    pyfile mep <<'PYEOF'
import glob, json, math, os, re, struct, sys
import numpy as np, torch
src, top, tp, pp, ep, etp, seed = sys.argv[1], sys.argv[2], *map(int, sys.argv[3:8])
def safetensors(path):   # the whole source: mt's one-rank checkpoint, read without mt
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        h, raw = json.loads(f.read(n)), f.read()
    return {k: np.frombuffer(raw[v["data_offsets"][0]:v["data_offsets"][1]], np.float32).reshape(v["shape"])
            for k, v in h.items() if k != "__metadata__"}
W = safetensors(src + "/model.safetensors")
O = safetensors(src + "/optim.safetensors")
E = 4
L = max(int(k.split(".")[3]) for k in W if k.startswith("language_model.encoder.layers.")) + 1
moe = {l for l in range(L) if any(k.startswith("language_model.encoder.layers.%d.mlp.router" % l) for k in W)}
def piece(a, dim, n, r):   # rank r's slice of n along dim
    s = a.shape[dim] // n
    return a[r * s:(r + 1) * s] if dim == 0 else a[:, r * s:(r + 1) * s]
def expected(key, t, p, e, whole):
    """(the source tensor of Megatron-Core key `key` on rank (t, p, e), sliced as Megatron holds it)"""
    if key.startswith("embedding.word_embeddings.") or key == "output_layer.weight":
        a = whole["language_model.embedding.word_embeddings.weight"]
        rows = -(-a.shape[0] // (128 * tp)) * 128 * tp
        a = np.concatenate([a, np.zeros((rows - a.shape[0], a.shape[1]), np.float32)])
        return piece(a, 0, tp, t)
    if key.startswith("embedding.position_embeddings."): return whole["language_model.embedding.position_embeddings.weight"]
    if key.startswith("decoder.final_layernorm."): return whole["language_model.encoder." + key[8:]]
    m = re.fullmatch(r"decoder\.layers\.(\d+)\.(.*)", key)
    g = p * (L // pp) + int(m.group(1))
    pre, rest = "language_model.encoder.layers.%d." % g, m.group(2)
    x = re.fullmatch(r"mlp\.experts\.local_experts\.(\d+)\.linear_fc([12])\.weight", rest)
    if x:
        j, f = int(x.group(1)), x.group(2)
        a = whole[pre + "mlp.experts.local_experts.%d.%s.weight" % (e * E // ep + j, "dense_h_to_4h" if f == "1" else "dense_4h_to_h")]
        return a if etp == 1 else piece(a, 0 if f == "1" else 1, tp, t)
    table = [("self_attention.linear_qkv.layer_norm_", "input_layernorm.", None),
             ("mlp.linear_fc1.layer_norm_", "post_attention_layernorm.", None),
             ("pre_mlp_layernorm.", "post_attention_layernorm.", None), ("mlp.router.", "mlp.router.", None),
             ("self_attention.linear_qkv.", "self_attention.query_key_value.", 0),
             ("self_attention.linear_proj.", "self_attention.dense.", 1),
             ("mlp.shared_experts.linear_fc1.", "mlp.shared_experts.dense_h_to_4h.", 0),
             ("mlp.shared_experts.linear_fc2.", "mlp.shared_experts.dense_4h_to_h.", 1),
             ("mlp.linear_fc1.", "mlp.dense_h_to_4h.", 0), ("mlp.linear_fc2.", "mlp.dense_4h_to_h.", 1)]
    for a, b, dim in table:
        if rest.startswith(a):
            w = whole[pre + b + rest[len(a):]]
            return w if dim is None else piece(w, dim, tp, t)
    raise KeyError(key)
def registered(p, e):
    """rank (p, e)'s parameters in Megatron-Core's registration order"""
    out = ["embedding.word_embeddings.weight", "embedding.position_embeddings.weight"] if p == 0 else []
    for n in range(L // pp):
        g, q = p * (L // pp) + n, "decoder.layers.%d." % n
        out += [q + "self_attention.linear_proj.weight", q + "self_attention.linear_qkv.layer_norm_weight",
                q + "self_attention.linear_qkv.layer_norm_bias", q + "self_attention.linear_qkv.weight"]
        if g in moe:
            out += [q + "pre_mlp_layernorm.weight", q + "pre_mlp_layernorm.bias", q + "mlp.router.weight"]
            for j in range(E // ep): out += [q + "mlp.experts.local_experts.%d.linear_fc%d.weight" % (j, f) for f in (1, 2)]
            out += [q + "mlp.shared_experts.linear_fc1.weight", q + "mlp.shared_experts.linear_fc2.weight"]
        else:
            out += [q + "mlp.linear_fc1.layer_norm_weight", q + "mlp.linear_fc1.layer_norm_bias",
                    q + "mlp.linear_fc1.weight", q + "mlp.linear_fc2.weight"]
    if p == pp - 1:
        out += ["decoder.final_layernorm.weight", "decoder.final_layernorm.bias"] + (["output_layer.weight"] if pp > 1 else [])
    return out
def rank_name(t, p, e):
    return "mp_rank_%02d" % t + ("_%03d" % p if pp > 1 else "") + ("_%03d" % e if ep > 1 else "")
want = sorted(rank_name(t, p, e) for t in range(tp) for p in range(pp) for e in range(ep))
have = sorted(os.path.basename(x) for x in glob.glob(top + "/mp_rank_*"))
assert have == want, (have, want)
ntens = nstate = 0
for t in range(tp):
    for p in range(pp):
        for e in range(ep):
            f = "%s/%s/model_optim_rng.pt" % (top, rank_name(t, p, e))
            sd = torch.load(f, map_location="cpu", weights_only=False)
            a = sd["args"]
            assert (a.tensor_model_parallel_size, a.pipeline_model_parallel_size, a.expert_model_parallel_size,
                    a.expert_tensor_parallel_size) == (tp, pp, ep, etp), (f, vars(a))
            # the smallest run of the layout: a world per stage of lcm(tp, etp ep) ranks
            span = tp * etp * ep // math.gcd(tp, etp * ep)
            assert (a.data_parallel_size, a.world_size) == (span // tp, span * pp), (f, a.data_parallel_size, a.world_size)
            m = {k: v for k, v in sd["model"].items() if v is not None}
            reg = registered(p, e)
            assert sorted(m) == sorted(reg), (f, sorted(set(m) ^ set(reg)))
            for k in reg:
                x = expected(k, t, p, e, W)
                assert m[k].dtype == torch.float32 and np.array_equal(m[k].numpy(), x), (f, k)
                ntens += 1
            # the optimizer: Megatron's ChainedOptimizer, the dense parameters' then the experts'
            o = sd["optimizer"]
            assert isinstance(o, list) and len(o) == 2, (f, type(o))
            for which, opt in enumerate(o):
                ps = [k for k in reg if (".local_experts." in k) == bool(which)]
                groups = [[k for k in ps if m[k].dim() >= 2], [k for k in ps if m[k].dim() < 2]]
                if which: groups = groups[:1]   # the experts' have no 1-D parameters: one group, on every rank
                got = [(g["is_expert_parallel"], g["weight_decay"] > 0 or not a.weight_decay, len(g["params"])) for g in opt["param_groups"]]
                assert got == [(bool(which), i == 0, len(gr)) for i, gr in enumerate(groups)], (f, which, got)
                idx = [i for g in opt["param_groups"] for i in g["params"]]
                assert idx == list(range(len(idx))), (f, idx)
                for i, k in zip(idx, groups[0] + (groups[1] if len(groups) > 1 else [])):
                    st = opt["state"][i]
                    for mo in ("exp_avg", "exp_avg_sq"):
                        moments = {kk[:-len(mo) - 1]: v for kk, v in O.items() if kk.endswith("." + mo)}
                        assert np.array_equal(st[mo].numpy(), expected(k, t, p, e, moments)), (f, which, k, mo)
                    nstate += 1
            r = sd["rng_state"][0]["rng_tracker_states"]
            want_seed = seed + 100 * p + 1024 + 100 * e + (0 if etp == 1 else t)
            assert r["expert-parallel-rng"][:8].view(torch.int64).item() == want_seed, (f, r["expert-parallel-rng"])
print("%d ranks, %d tensors and %d parameters' moments equal the source's slices" % (len(want), ntens, nstate))
PYEOF
    # bad requests: one line, nothing written
    err1 mt-ckpt-convert --load "$d/ckm" --to megatron --out "$d/x" --megatron-keys mcore --target-expert-model-parallel-size 3 \
        && [ ! -e "$d/x" ] && t_pass "an expert-parallel size that does not divide the experts: one line ($(cat "$d/e"))" \
        || t_fail "an expert-parallel size that does not divide the experts" "$(cat "$d/e")"
    err1 mt-ckpt-convert --load "$d/ck" --to megatron --out "$d/x" --target-expert-model-parallel-size 2 && [ ! -e "$d/x" ] \
        && t_pass "an expert-parallel size for a model without experts: one line ($(cat "$d/e"))" \
        || t_fail "an expert-parallel size for a model without experts" "$(cat "$d/e")"
    cp -a "$d/megep" "$d/megmiss" && rm -r "$d/megmiss/iter_0000004/mp_rank_01_001_000"
    err1 mt-ckpt-convert --from megatron --load "$d/megmiss" --save "$d/x" && [ ! -e "$d/x" ] && grep -q mp_rank_01_001_000 "$d/e" \
        && t_pass "a missing expert rank directory: one line naming it ($(cat "$d/e")), nothing written" \
        || t_fail "a missing expert rank directory" "$(cat "$d/e")"
    # the distributed optimizer with experts over expert ranks (a --bf16 run, --overlap-grad-reduce, 100-element
    # buckets): each rank's ChainedOptimizer of two DistributedOptimizer states and distrib_optim.pt's list of the
    # dense and the expert buffers' states (None where the directory's rank is not that optimizer's data-parallel
    # rank 0), as megatron_write.py --distrib --ep lays them out; back as the reshard (TP 2 x PP 2 x EP 2, and
    # ETP 1)
    bad_epd=
    if mt-train "${train[@]}" --num-experts 4 --moe-router-topk 2 --moe-shared-expert-intermediate-size 64 \
            --moe-layer-freq "[0,1]" --moe-aux-loss-coeff 0.01 --disable-bias-linear --bf16 --use-distributed-optimizer \
            --overlap-grad-reduce --ddp-bucket-size 100 --train-iters 4 --lr-decay-iters 40 --save "$d/ckmd" >/dev/null 2>"$d/t.err" &&
        mt-ckpt-convert --load "$d/ckmd" --save "$d/ckmd1" 2>"$d/ce" &&
        mt-ckpt-convert --load "$d/ckmd" --save "$d/ckmd22" --target-tensor-parallel-size 2 --target-pipeline-parallel-size 2 2>>"$d/ce"
    then
        for etp in 2 1; do
            if mt-ckpt-convert --load "$d/ckmd" --to megatron --out "$d/megepd$etp" --megatron-keys mcore --target-tensor-parallel-size 2 \
                    --target-pipeline-parallel-size 2 --target-expert-model-parallel-size 2 --target-expert-tensor-parallel-size $etp 2>>"$d/ce" &&
                mt-ckpt-convert --from megatron --load "$d/megepd$etp" --save "$d/rtepd$etp" --target-tensor-parallel-size 2 \
                    --target-pipeline-parallel-size 2 2>>"$d/ce"
            then b=$(differ22 "$d/rtepd$etp" "$d/ckmd22" 0000004); [ -n "$b" ] && bad_epd="$bad_epd ETP $etp:$b"
            else bad_epd="$bad_epd $(tail -1 "$d/ce")"; fi
        done
        mwjob "$d/ckmd1/iter_0000004/mp_rank_00" "$d/orepd" --tp 2 --pp 2 --ep 2 --core --optim --distrib --bucket-size 100 --dtype bf16
        hjob "$d/soepd" same_optim "$d/megepd2" "$d/orepd"
    else bad_epd="an MoE run with --use-distributed-optimizer: $(tail -2 "$d/t.err" "$d/ce")"; fi
    rm -r "$d/megheld/iter_0000004/mp_rank_01_001"
    err1 mt-ckpt-convert --from megatron --load "$d/megheld" --save "$d/x" && [ ! -e "$d/x" ] && grep -q "mp_rank_01_" "$d/e" \
        && t_pass "ETP 1, no directory of tensor rank 1 at all: one line naming it ($(cat "$d/e")), nothing written" \
        || t_fail "ETP 1 without tensor rank 1" "$(cat "$d/e")"
fi
t_ok "--no-save-optim" mt-ckpt-convert --load "$d/ck" --to megatron --out "$d/meg-noopt" --no-save-optim
hjob "$d/nso.out" run "$d/nso.py" "$d/meg-noopt/iter_0000020/mp_rank_00/model_optim_rng.pt"
pyfile nso <<'PYEOF'
import sys, torch; sys.exit("optimizer" in torch.load(sys.argv[1], map_location="cpu"))
PYEOF
hjob "$d/r22.out" restricted "$d/meg22-mcore"
hjob "$d/c2.out" reshape "$GPT2_VOCAB" "$GPT2_MERGES" --convert_checkpoint_from_megatron_to_transformers \
    --load_path "$d/meg22-legacy/iter_0000020" --save_path "$d/hf22"
hjob "$d/l2.out" logits "$d/hf22" "$d/ids.txt" "$d/logits.f32"
# transformers -> Megatron (TP 2 x PP 2): the random model and its conversion in this batch, mt's reading and
# transformers' logits after it
hjob "$d/rn.out" random "$d/rnd"
hjob "$d/c3.out" reshape "$GPT2_VOCAB" "$GPT2_MERGES" --load_path "$d/rnd" \
    --save_path "$d/megr" --target_tensor_model_parallel_size 2 --target_pipeline_model_parallel_size 2

# ---- --dtype bf16: torch's rounding of the fp32 export ----
t_ok "--to megatron --dtype bf16" mt-ckpt-convert --load "$d/ck" --to megatron --out "$d/megbf" --dtype bf16
hjob "$d/bf.out" run "$d/bf.py" "$d/meg1/iter_0000020/mp_rank_00/model_optim_rng.pt" \
    "$d/megbf/iter_0000020/mp_rank_00/model_optim_rng.pt"
pyfile bf <<'PYEOF'
import sys, torch
a, b = (torch.load(f, map_location="cpu") for f in sys.argv[1:])
def flat(d, p=""):
    for k, v in d.items():
        if isinstance(v, dict): yield from flat(v, p + k + ".")
        else: yield p + k, v
fa, fb = dict(flat(a["model"])), dict(flat(b["model"]))
bad = [k for k in fa if fb[k].dtype != torch.bfloat16 or not torch.equal(fa[k].to(torch.bfloat16), fb[k])]
print("%d tensors, bad: %s" % (len(fa), bad[:3]) if bad or b["args"].params_dtype != torch.bfloat16 else "%d tensors" % len(fa))
sys.exit(1 if bad or b["args"].params_dtype != torch.bfloat16 else 0)
PYEOF

# ---- bad requests ----
mkdir -p "$d/full" && echo x >"$d/full/keep"
err1 mt-ckpt-convert --load "$d/ck" --to megatron --out "$d/full" && [ "$(ls "$d/full")" = keep ] \
    && t_pass "--out not empty: one line ($(cat "$d/e")), nothing written" || t_fail "--out not empty" "$(cat "$d/e")"
err1 mt-ckpt-convert --load "$d/ck" --to hf --out "$d/x" --megatron-keys mcore && [ ! -e "$d/x" ] \
    && t_pass "--megatron-keys without --to megatron: one line" || t_fail "--megatron-keys without --to megatron" "$(cat "$d/e")"
err1 mt-ckpt-convert --load "$d/nothing" --to megatron --out "$d/x" && [ ! -e "$d/x" ] \
    && t_pass "a missing --load: one line ($(cat "$d/e"))" || t_fail "a missing --load" "$(cat "$d/e")"
err1 mt-ckpt-convert --load "$d/ck" --to megatron --out "$d/x" --target-tensor-parallel-size 3 && [ ! -e "$d/x" ] \
    && t_pass "a tensor size the heads do not divide: one line ($(cat "$d/e")), nothing written" \
    || t_fail "a tensor size the heads do not divide" "$(cat "$d/e")"
err1 mt-ckpt-convert --load "$d/ck" --to megatron --out "$d/x" --target-num-layers-per-virtual-pipeline-stage 2 && [ ! -e "$d/x" ] \
    && t_pass "model chunks the layers do not make: one line ($(cat "$d/e")), nothing written" \
    || t_fail "model chunks the layers do not make" "$(cat "$d/e")"
err1 mt-ckpt-convert --load "$d/ck" --to megatron --out "$d/x" --no-load-optim && [ ! -e "$d/x" ] \
    && t_pass "--no-load-optim with --to megatron: one line ($(cat "$d/e"))" || t_fail "--no-load-optim with --to megatron" "$(cat "$d/e")"

# ---- the oracles: megatron_hf.py's jobs, in two batches (mt reads the checkpoint transformers' converter
# writes in the first before the second compares the logits) ----
"$HPY" -W ignore "$T_TOP/tests/oracle/megatron_hf.py" --jobs "$d/hjobs1" >"$d/hf.status" 2>"$d/hf.err"
rc_r=1
if hok "$d/rn.out" && hok "$d/c3.out"; then
    mt-ckpt-convert --from megatron --load "$d/megr" --save "$d/mtr" --vocab-file "$GPT2_VOCAB" \
        --merge-file "$GPT2_MERGES" 2>"$d/ce-r" \
        && mt-eval --load "$d/mtr" --score --logits "$d/lr.f32" <"$d/docs.jsonl" >/dev/null 2>"$d/ee"
    rc_r=$?
    hjobs=$d/hjobs2
    : >"$hjobs"
    hjob "$d/l3.out" logits "$d/rnd" "$d/ids.txt" "$d/lr.f32"
    [ $rc_r = 0 ] && "$HPY" -W ignore "$T_TOP/tests/oracle/megatron_hf.py" --jobs "$d/hjobs2" >>"$d/hf.status" 2>>"$d/hf.err"
fi

# ---- their checks, in the order of the sections above ----
# TP 1, legacy keys
if hok "$d/r.out"; then
    t_pass "its pickle names only allowlisted globals and torch.load reads it ($(cat "$d/r.out"))"
else t_fail "its pickle names only allowlisted globals and torch.load reads it" "$(tail -2 "$d/r.out")"; fi
hok "$d/fields.out" && t_pass "$(cat "$d/fields.out")" || t_fail "the file's fields" "$(tail -3 "$d/fields.out")"
if hok "$d/c1.out" && hok "$d/l1.out"
then t_pass "convert_megatron_gpt2_checkpoint.py on the TP 1 export: logits = mt-eval's ($(cat "$d/l1.out"))"
else t_fail "convert_megatron_gpt2_checkpoint.py on the TP 1 export: logits = mt-eval's" "$(tail -3 "$d/c1.out" "$d/l1.out" 2>/dev/null)"; fi
# TP 2 x PP 2
if hok "$d/rng.out"
then t_pass "each rank's rng_state is Megatron's seeding of --seed 5 (Python, numpy, torch CPU and CUDA states; $(cat "$d/rng.out"))"
else t_fail "each rank's rng_state is Megatron's seeding of --seed" "$(tail -3 "$d/rng.out")"; fi
if mwok "$d/or22" && mwok "$d/or22l" && hok "$d/sm22l" && hok "$d/sm22" && hok "$d/so22"
then t_pass "TP 2 x PP 2, legacy and Megatron-Core keys: model ($(cat "$d/sm22l" "$d/sm22" | tr '\n' ' ')) and optimizer state ($(cat "$d/so22")) as Megatron saves them"
else t_fail "TP 2 x PP 2: model and optimizer state as Megatron saves them" "$(tail -2 "$d/or22.log" "$d/or22l.log"; tail -2 "$d/sm22l" "$d/sm22" "$d/so22" 2>/dev/null)"; fi
if [ $rc_v = 0 ] && mwok "$d/orv" && hok "$d/smv" && hok "$d/sov" &&
    cmp -s "$d/rtv/iter_0000020/mp_rank_00/model.safetensors" "$d/ck/iter_0000020/mp_rank_00/model.safetensors" &&
    cmp -s "$d/rtv/iter_0000020/mp_rank_00/optim.safetensors" "$d/ck/iter_0000020/mp_rank_00/optim.safetensors"
then t_pass "--target-num-layers-per-virtual-pipeline-stage 1: model0, model1 and the optimizer state as Megatron saves them, back byte for byte"
else t_fail "--target-num-layers-per-virtual-pipeline-stage 1: model chunks" "$(tail -2 "$d/ce-v"; tail -2 "$d/orv.log"; tail -2 "$d/smv" "$d/sov" 2>/dev/null)"; fi
for dt in bf16 fp16; do
    if [ "${rc_dt[$dt]}" = 0 ] && mwok "$d/or-$dt" && hok "$d/so-$dt" &&
        cmp -s "$d/rt-$dt/iter_0000004/mp_rank_00/model.safetensors" "$d/ck-$dt/iter_0000004/mp_rank_00/model.safetensors" &&
        cmp -s "$d/rt-$dt/iter_0000004/mp_rank_00/optim.safetensors" "$d/ck-$dt/iter_0000004/mp_rank_00/optim.safetensors"
    then t_pass "--$dt run, legacy keys: $dt tensors, the optimizer state Megatron saves ($(cat "$d/so-$dt")), back byte for byte"
    else t_fail "--$dt run, legacy keys: the optimizer state Megatron saves, back byte for byte" "$(tail -2 "$d/t-$dt.err" "$d/ce-$dt"; tail -2 "$d/or-$dt.log"; tail -2 "$d/so-$dt")"; fi
done
# the distributed optimizer
if [ $rc_d = 0 ] && mwok "$d/ord" && hok "$d/sod" && hok "$d/smd" && [ -z "$bad_d" ]
then t_pass "--use-distributed-optimizer run, TP 2 x PP 2: distrib_optim.pt and the param groups as Megatron saves them ($(cat "$d/sod")), back as the reshard"
else t_fail "--use-distributed-optimizer run: distrib_optim.pt as Megatron saves it, back as the reshard" \
    "$(tail -2 "$d/t-d.err" "$d/ce-d"; tail -2 "$d/ord.log"; tail -2 "$d/sod" "$d/smd" 2>/dev/null) $bad_d"; fi
# experts
if [ "$moe" != failed ]; then
    [ "$moe" = exported ] && ! hok "$d/mo" && bad_m="$bad_m $(tail -1 "$d/mo")"
    [ -z "$bad_m" ] && t_pass "experts, TP 2 x PP 2: Megatron-Core's MoE names and args, the experts' state in SequentialMLP's order; back as the reshard, model and optimizer" \
        || t_fail "experts, TP 2 x PP 2: mt -> Megatron -> mt" "$bad_m"
fi
# experts over expert ranks
if [ "$moe" != failed ]; then
    if [ -z "$bad_ep" ] && hok "$d/mep.out"
    then t_pass "experts, TP 2 x PP 2 x EP 2: mp_rank_TT_PPP_EEE, each rank's tensors and ChainedOptimizer state the source's slices ($(cat "$d/mep.out")); back as the reshard (to TP 2 x PP 2, and to mt's TP 2 x PP 2 x EP 2)"
    else t_fail "experts, TP 2 x PP 2 x EP 2: mt -> Megatron -> mt" "$bad_ep $(tail -2 "$d/mep.out")"; fi
    if [ -z "$bad_epd" ] && mwok "$d/orepd" && hok "$d/soepd"
    then t_pass "experts over expert ranks, --use-distributed-optimizer: the ChainedOptimizer's states and distrib_optim.pt's list as Megatron saves them ($(cat "$d/soepd")); back as the reshard (ETP 2 and 1)"
    else t_fail "experts over expert ranks, --use-distributed-optimizer" "$bad_epd $(tail -2 "$d/orepd.log" "$d/soepd" 2>/dev/null)"; fi
    if [ -z "$bad_etp" ] && hok "$d/metp.out"
    then t_pass "experts whole, TP 2 x EP 2 x ETP 1: every pair's file the source's slices ($(cat "$d/metp.out")); the held pairs read back as the reshard, mt-train resumes with its losses"
    else t_fail "experts whole, TP 2 x EP 2 x ETP 1: mt -> Megatron -> mt" "$bad_etp $(tail -2 "$d/metp.out")"; fi
fi
# --no-save-optim, the Megatron-Core export's globals, transformers' converter on the TP 2 x PP 2 export
hok "$d/nso.out" && t_pass "--no-save-optim: no optimizer entry" || t_fail "--no-save-optim: no optimizer entry" "present"
if hok "$d/r22.out"; then
    t_pass "Megatron-Core keys: only allowlisted globals, torch.load reads it ($(cat "$d/r22.out"))"
else t_fail "Megatron-Core keys: only allowlisted globals, torch.load reads it" "$(tail -2 "$d/r22.out")"; fi
if hok "$d/c2.out" && hok "$d/l2.out"
then t_pass "checkpoint_reshaping_and_interoperability.py on the TP 2 x PP 2 export: logits = mt-eval's ($(cat "$d/l2.out"))"
else t_fail "checkpoint_reshaping_and_interoperability.py on the TP 2 x PP 2 export: logits = mt-eval's" \
    "$(tail -3 "$d/c2.out" "$d/l2.out" 2>/dev/null)"; fi
# transformers -> Megatron (TP 2 x PP 2) -> mt
if hok "$d/rn.out" && hok "$d/c3.out"
then
    if [ $rc_r = 0 ] && hok "$d/l3.out"
    then t_pass "transformers' TP 2 x PP 2 Megatron checkpoint of a random GPT-2, read: logits = transformers' ($(cat "$d/l3.out"))"
    else t_fail "transformers' TP 2 x PP 2 Megatron checkpoint of a random GPT-2, read" "$(cat "$d/ce-r" "$d/ee"; tail -3 "$d/l3.out" 2>/dev/null)"; fi
else t_fail "transformers' converter toward Megatron" "$(tail -3 "$d/rn.out" "$d/c3.out")"; fi
# --dtype bf16
hok "$d/bf.out" && t_pass "bf16 export: $(cat "$d/bf.out") are torch's bf16 rounding of the fp32 export, params_dtype bfloat16" \
    || t_fail "bf16 export is torch's rounding of the fp32 export" "$(tail -3 "$d/bf.out")"
