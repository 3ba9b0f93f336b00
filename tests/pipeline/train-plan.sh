#!/usr/bin/env bash
# train-plan.sh: mt-train --dry-run, the memory planner. For layouts with data, tensor and pipeline
# parallelism, the distributed optimizer, bf16 and each recomputation mode, the plan of every (tensor rank,
# stage) (parameter count; parameters, gradients, optimizer state, activations and total in MB) equals the
# memory lines of a real run of the same flags on CPU ranks (the interleaved schedule's contexts included),
# and its bubble fraction is (pp - 1) / m, (pp - 1) / (v m) interleaved. A
# GPT-3 175B layout on 1024 ranks is planned in seconds without allocating it, and its parameters summed
# over the ranks (less the last stage's copies of the word embeddings, replicated tensors counted once)
# are the model's count from its sizes. The plan needs no --data-path (the same plan without it).
# Planning a layout that cannot split the model is refused naming the flag.
. "$(dirname "$0")/../lib.sh"
py=/usr/bin/python3
d=$T_TMP
if ! command -v mpirun >/dev/null; then t_fail "mpirun" "openmpi-bin is not installed (make deps)"; exit 1; fi
t_mpi_env

PYTHONPATH=$T_TOP/tests/oracle $py "$T_TOP/tests/oracle/walk_data.py" "$d/data" 7 300
# hidden 128, seq 128: activations of several MB per rank, so the MB figures compare to 1 part in 100 or
# better
base="--num-layers 4 --hidden-size 128 --num-attention-heads 4 --seq-length 128 --max-position-embeddings 128
      --tokenizer-type NullTokenizer --vocab-size 60 --make-vocab-size-divisible-by 16 --micro-batch-size 2
      --global-batch-size 16 --train-iters 1 --lr 1e-3 --log-interval 1 --eval-iters 0 --split 90,5,5 --seed 1
      --data-path $d/data --data-cache-path $d/cache"
# shellcheck disable=SC2086
mt-train $base >/dev/null 2>&1   # the index cache, once

full="--recompute-granularity full --recompute-method"
for c in "1 --tensor-model-parallel-size 1" \
    "4 --pipeline-model-parallel-size 4 $full uniform --recompute-num-layers 1" \
    "4 --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 --sequence-parallel $full uniform --recompute-num-layers 2" \
    "8 --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 --use-distributed-optimizer --bf16 $full block --recompute-num-layers 1" \
    "4 --pipeline-model-parallel-size 2 --use-distributed-optimizer" \
    "4 --pipeline-model-parallel-size 2 --tensor-model-parallel-size 2 --num-layers-per-virtual-pipeline-stage 1" \
    "2 --pipeline-model-parallel-size 2 --num-layers-per-virtual-pipeline-stage 1 $full block --recompute-num-layers 1"; do
    set -- $c
    n=$1; shift
    name="$n ranks $*"
    # shellcheck disable=SC2086
    mt-train $base "$@" --dry-run --world-size "$n" >"$d/plan" 2>"$d/plan.err" || t_fail "$name: --dry-run" "$(tail -2 "$d/plan.err")"
    # shellcheck disable=SC2086
    mpi "$n" mt-train $base "$@" >"$d/run" 2>"$d/run.err" || t_fail "$name: the real run" "$(tail -3 "$d/run.err")"
    if $py - "$d/plan" "$d/run" >"$d/cmp" 2>&1 <<'PYEOF'
import re, sys
def lines(p):
    mem, par = {}, {}
    for l in open(p):
        m = re.match(r"\[Rank (\d+)\] .*memory \(MB\) \| parameters: ([\d.]+) \| gradients: ([\d.]+) \| optimizer: ([\d.]+) \| activations: ([\d.]+) \| total: ([\d.]+)", l)
        if m: mem[int(m.group(1))] = m.groups()[1:]
        m = re.match(r" > number of parameters on \(tensor, pipeline\) model parallel rank \((\d+), (\d+)\): (\d+)", l)
        if m: par[(int(m.group(1)), int(m.group(2)))] = int(m.group(3))
    return mem, par
(pm, pp), (rm, rp) = lines(sys.argv[1]), lines(sys.argv[2])
assert pm and pm == rm, ("memory", pm, rm)
assert pp and pp == rp, ("parameters", pp, rp)
print("%d ranks' lines" % len(pm))
PYEOF
    then t_pass "$name: the plan = the real run's memory and parameters per (tensor rank, stage) ($(cat "$d/cmp"))"
    else t_fail "$name: plan against the run" "$(tail -2 "$d/cmp")"; fi
done

# the bubble of the schedule: (pp - 1) / m with m micro-batches per data-parallel rank (16 / (2 x 2) = 4)
# shellcheck disable=SC2086
mt-train $base --pipeline-model-parallel-size 4 --dry-run --world-size 8 >"$d/b" 2>&1
t_grep "PP=4, DP=2, 4 micro-batches: bubble fraction 3/4" "^pipeline bubble fraction \(pp - 1\) / m: 0\.7500 \(4 stages, 4 micro-batches\)$" "$d/b"
# interleaved: (pp - 1) / (v m) with v = 2 chunks of 1 layer on 2 stages, m = 8
# shellcheck disable=SC2086
mt-train $base --pipeline-model-parallel-size 2 --num-layers-per-virtual-pipeline-stage 1 --dry-run --world-size 2 >"$d/b" 2>&1
t_grep "PP=2 interleaved, 2 chunks, 8 micro-batches: bubble fraction 1/16" \
    "^pipeline bubble fraction \(pp - 1\) / \(v m\): 0\.0625 \(2 stages, 2 model chunks each, 8 micro-batches\)$" "$d/b"

# GPT-3 175B (96 layers, hidden 12288, 96 heads, seq 2048, vocabulary 50257) on 1024 ranks, TP=8 PP=16:
# planned without allocating it; every rank's parameters summed, less the last stage's copies of the
# word embeddings and with the replicated tensors counted once, is V h + P h + L (12 h^2 + 13 h) + 2 h
g3="--num-layers 96 --hidden-size 12288 --num-attention-heads 96 --seq-length 2048 --max-position-embeddings 2048
    --tokenizer-type NullTokenizer --vocab-size 50256 --micro-batch-size 1 --global-batch-size 1536 --train-iters 1
    --lr 1e-4 --data-path $d/data --bf16 --use-distributed-optimizer --sequence-parallel
    --tensor-model-parallel-size 8 --pipeline-model-parallel-size 16 $full uniform --recompute-num-layers 1"
# shellcheck disable=SC2086
if timeout 30 mt-train $g3 --dry-run --world-size 1024 >"$d/g3" 2>"$d/g3.err" && $py - "$d/g3" >"$d/g3c" 2>&1 <<'PYEOF'
import re, sys
par = {}
for l in open(sys.argv[1]):
    m = re.match(r" > number of parameters on \(tensor, pipeline\) model parallel rank \((\d+), (\d+)\): (\d+)", l)
    if m: par[(int(m.group(1)), int(m.group(2)))] = int(m.group(3))
assert len(par) == 8 * 16, len(par)
h, P, L, tp = 12288, 2048, 96, 8
V = -(-50257 // (128 * tp)) * 128 * tp   # padded to a multiple of 128 x 8
whole = V * h + P * h + L * (12 * h * h + 13 * h) + 2 * h
# less the last stage's copy of the word embeddings (over its tensor ranks), and the replicated tensors
# (norms, row-parallel biases, position embeddings, final norm) counted once instead of on every tensor rank
total = sum(par.values()) - V * h - (tp - 1) * (L * 6 * h + P * h + 2 * h)
assert total == whole, (total, whole)
# weights and optimizer per rank against Megatron's theoretical_memory_usage.py: with the distributed
# optimizer 6 + 12/DP bytes per parameter (bf16 weights, fp32 gradients; fp32 master and moments sharded
# over DP = 8); mt also keeps the 1-D tensors (norms, biases: 6 h + 7 h / 8 per layer here) in fp32
mem = {}
for l in open(sys.argv[1]):
    m = re.match(r"\[Rank (\d+)\] memory \(MB\) \| parameters: ([\d.]+) \| gradients: ([\d.]+) \| optimizer: ([\d.]+) \|", l)
    if m: mem[int(m.group(1))] = sum(float(x) for x in m.groups()[1:])
dp, worst = 8, 0
for (r, s), n in par.items():
    kept = L // 16 * (6 * h + 7 * h // tp) + (2 * h if s == 15 else 0)
    megatron = (6 + 12 / dp) * n / 2**20
    got = mem[r + tp * dp * s]
    assert abs(got - megatron - 4 * kept / 2**20) < 0.2, ((r, s), got, megatron, kept)
    worst = max(worst, got / megatron - 1)
print("%.1fB parameters; weights and optimizer per rank Megatron's 6 + 12/DP bytes, +%.3f%% (the fp32 norms and biases)"
      % (whole / 1e9, 100 * worst))
PYEOF
then t_pass "GPT-3 175B on 1024 ranks planned: every rank's parameters sum to the model's ($(cat "$d/g3c"))"
else t_fail "GPT-3 175B plan" "$(tail -2 "$d/g3.err" "$d/g3c" 2>/dev/null)"; fi

# A Llama-7B-like model (32 layers, hidden 4096, 32 heads in 8 key/value groups, SwiGLU of 11008, RMSNorm,
# rope, untied output layer, no biases, vocabulary 32000, seq 4096) at TP=8 PP=4 DP=8, SP, bf16, the
# distributed optimizer: the first stage against Megatron's theoretical_memory_usage.py
# (compute_weight_and_optimizer_memory: the most loaded shard, the first stage's layers and the word
# embeddings over TP, times 6 + 12/DP bytes; compute_activation_memory: s b h (18 + 4 ffn / h) a layer,
# the first stage's layers times PP micro-batches in flight, over TP). Megatron's parameter count gives
# each layer two LayerNorms with biases and divides them by TP; mt's RMSNorm weights have no bias and
# every tensor rank holds them whole: the difference, exactly. mt keeps them in fp32 besides (the
# distributed optimizer's working copy is bf16). Megatron's activation formula predates gated MLPs: mt
# keeps SwiGLU's gate and up products (2 ffn / h more a layer than its 4 ffn / h counts), so within 10%.
llama="--num-layers 32 --hidden-size 4096 --num-attention-heads 32 --group-query-attention --num-query-groups 8
    --ffn-hidden-size 11008 --swiglu --normalization RMSNorm --position-embedding-type rope
    --untie-embeddings-and-output-weights --disable-bias-linear --seq-length 4096 --max-position-embeddings 4096
    --tokenizer-type NullTokenizer --vocab-size 31999 --micro-batch-size 1 --global-batch-size 256 --train-iters 1
    --lr 1e-4 --bf16 --use-distributed-optimizer --sequence-parallel --tensor-model-parallel-size 8
    --pipeline-model-parallel-size 4"
# shellcheck disable=SC2086
if timeout 30 mt-train $llama --dry-run --world-size 256 >"$d/ll" 2>"$d/ll.err" && $py - "$d/ll" >"$d/llc" 2>&1 <<'PYEOF'
import re, sys
text = open(sys.argv[1]).read()
n = int(re.search(r"model parallel rank \(0, 0\): (\d+)", text).group(1))
m = re.search(r"\[Rank 0\] memory \(MB\) \| parameters: ([\d.]+) \| gradients: ([\d.]+) \| optimizer: ([\d.]+) \| activations: ([\d.]+)", text)
pb, gb, ob, ab = (float(x) for x in m.groups())
s, b, h, a, g, ffn, L, t, pp, dp, V = 4096, 1, 4096, 32, 8, 11008, 32, 8, 4, 8, 32768
# Megatron's parameters: 2 L h^2 ((1 + g / a) q + ffn / h x 3/2 + 2 / h + 1 / (L h)), q = kv_channels a / h = 1
layers = 2 * L * h * h * ((1 + g / a) + ffn / h * 1.5 + 2 / h + 1 / (L * h))
most_loaded = (layers / pp + V * h) / t
norms_mt, norms_meg = (L // pp) * 2 * h, ((L // pp) * 4 * h + 2 * h / pp) / t
assert n == most_loaded - norms_meg + norms_mt, (n, most_loaded, norms_meg, norms_mt)
mb = 2.0 ** 20
meg_w = most_loaded * (6 + 12 / dp) / mb
kept = (L // pp) * 2 * h
mine = pb + gb + ob
assert abs(mine - ((6 + 12 / dp) * n + 4 * kept) / mb) < 0.2, (mine, n, kept)
act = s * b * h * (18 + 4 * ffn / h) * L / t / mb   # (L / pp) layers x pp micro-batches in flight
assert abs(ab / act - 1) <= 0.10, (ab, act)
print("parameters %d = Megatron's %.0f less its norms over TP plus mt's whole; weights and optimizer %.1f MB, Megatron %.1f (%+.2f%%); activations %.1f MB, Megatron %.1f (%.3f)"
      % (n, most_loaded, mine, meg_w, 100 * (mine / meg_w - 1), ab, act, ab / act))
PYEOF
then t_pass "Llama-7B-like GQA, TP=8 PP=4 DP=8 SP: the first stage against Megatron's formulas ($(cat "$d/llc"))"
else t_fail "Llama-7B-like plan against Megatron's formulas" "$(tail -2 "$d/ll.err" "$d/llc" 2>/dev/null)"; fi

# the planner reads no data: without --data-path the plan is the same, line for line (training still
# needs it)
nodata=${base/"--data-path $d/data --data-cache-path $d/cache"/}
# shellcheck disable=SC2086
mt-train $base --pipeline-model-parallel-size 2 --num-layers-per-virtual-pipeline-stage 1 --dry-run --world-size 4 >"$d/with" 2>&1
# shellcheck disable=SC2086
if mt-train $nodata --pipeline-model-parallel-size 2 --num-layers-per-virtual-pipeline-stage 1 --dry-run --world-size 4 \
    >"$d/without" 2>"$d/without.err" && grep -q '^\[Rank 2\] memory' "$d/without" && cmp -s "$d/with" "$d/without"; then
    t_pass "--dry-run without --data-path: the plan with it, line for line"
else t_fail "--dry-run without --data-path" "$(tail -1 "$d/without.err") $(diff "$d/with" "$d/without" | head -3)"; fi
# shellcheck disable=SC2086
t_fails "training without --data-path" mt-train $nodata
grep -q -- '--data-path is required' "$T_TMP/err" && t_pass "training without --data-path: the message names the flag" ||
    t_fail "training without --data-path message" "$(tail -1 "$T_TMP/err")"

# refusals naming the flag
# shellcheck disable=SC2086
t_fails "a world that is not a multiple of TP x PP" mt-train $base --pipeline-model-parallel-size 2 --dry-run --world-size 3
grep -q -- '--world-size (3) must be a multiple' "$T_TMP/err" && t_pass "--world-size 3 at PP=2: the message names the flags" ||
    t_fail "--world-size 3 message" "$(tail -1 "$T_TMP/err")"
# shellcheck disable=SC2086
t_fails "--world-size without --dry-run" mt-train $base --world-size 4
t_cleanup
