#!/usr/bin/env bash
# train-moe-etp.sh: mt-train's mixture of experts with an expert tensor size other than tp
# (--expert-tensor-parallel-size 1 with --tensor-model-parallel-size 2 and --sequence-parallel: each expert
# whole on its rank, each tensor rank routing its own rows, the all-to-all over expert groups that mix
# tensor ranks, the experts' gradients summed over the new expert-data-parallel group), on CPU ranks with
# train-moe.sh's model (LLaMA-style, MoE in layers 0, 2 and 3 of 4, 4 experts top 2, load-balancing and z
# losses, a shared expert with its gate, dropout on, fp32):
#   - TP 2 x EP 2 (4 ranks), TP 2 alone (2 ranks), TP 2 x EP 2 on 2 ranks (the two tensor ranks are the
#     two expert ranks: expert parallelism without data parallelism), TP 2 x EP 2 with the distributed
#     optimizer, DP 2 x TP 2 x EP 2 with it (8 ranks), TP 2 x CP 2 x EP 2, DP 2 x TP 2 x EP 2 with overlapped
#     gradient reduction and parameter gathering, and TP 2 x PP 2 x EP 2 give the one-rank run's 10 iterations of lm loss, grad norm,
#     params norm, load_balancing_loss and z_loss and its validation losses to 1e-5 relative, and TP 2 x EP 2
#     those of the same layout with the expert tensor size 2 (= tp, Megatron's default); a tensor rank sends
#     exactly the ring volume of what the model exchanges;
#   - without a shared expert (no tensor-parallel exchange in the MoE layers) TP 2 x EP 2 gives that model's
#     one-rank losses, and a tensor rank sends the ring volume of what is left;
#   - on the sim backend (the CUDA kernels under the simulator) TP 2 x EP 2 with etp 1 gives the cpu's numbers;
#   - --moe-per-layer-logging gives the per-layer losses and rows per expert of one tensor rank (two stages)
#     on TP 2 x PP 2 x EP 2;
#   - a rank holds its experts whole: its parameters are the dense part of tp 2 plus 2 whole experts per
#     MoE layer, as the dry run says (its parameters and memory line are the run's), and the dry run's
#     all-to-all volume is a rank's own rows';
#   - refused in one line before any step: etp 1 without --sequence-parallel, an etp that is neither 1 nor tp,
#     etp x ep not dividing the ranks of a stage (at startup and in the dry run), token dropping and
#     seq_aux_loss with it, and --save / --load with it (checkpoints of that layout are not implemented yet).
# shellcheck disable=SC2086   # the flag lists ($base, $tp, $etp1, $extra) split into words
. "$(dirname "$0")/../lib.sh"
set -f   # the layer list ([1,0,1,1]) is not a file pattern
py=/usr/bin/python3
d=$T_TMP
t_moe_walk
base=$T_MOE
tp="--tensor-model-parallel-size 2 --sequence-parallel"
etp1="$tp --expert-tensor-parallel-size 1"
mt-train $base --metrics-file "$d/ref.jsonl" >"$d/ref.log" 2>"$d/ref.err" || t_fail "one rank" "$(tail -3 "$d/ref.err")"

# same A.jsonl B.jsonl TOL: the train iterations 1..10 of B have A's lm_loss, grad_norm,
# load_balancing_loss, z_loss and params_norm within TOL relative, and its validation losses
same() {
    $py - "$@" <<'PYEOF'
import json, sys
keys = ("lm_loss", "grad_norm", "load_balancing_loss", "z_loss", "params_norm")
def load(p):
    rows = [json.loads(l) for l in open(p)]
    return ({r["iteration"]: [r.get(k, float("nan")) for k in keys] for r in rows if r["type"] == "train"},
            [(r["type"], r["iteration"], r["lm_loss"]) for r in rows if r["type"] != "train"])
(a, ea), (b, eb) = load(sys.argv[1]), load(sys.argv[2])
tol = float(sys.argv[3])
assert sorted(b) == list(range(1, 11)), "iterations %s" % sorted(b)
assert all(y == y for i in b for y in b[i]), "a loss or norm missing"
w = max(abs(x - y) / abs(x) for i in b for x, y in zip(a[i], b[i]))
assert w <= tol, "worst relative difference %g" % w
assert len(ea) == len(eb) >= 3, (ea, eb)
for x, y in zip(ea, eb):
    assert x[:2] == y[:2] and abs(x[2] - y[2]) <= tol * abs(x[2]), (x, y)
print("worst %.2g" % w)
PYEOF
}
check() {   # NAME JSONL TOL [REF]: against the one-rank run, or REF
    if same "${4:-$d/ref.jsonl}" "$2" "$3" >"$d/cmp.out" 2>&1; then t_pass "$1 ($(cat "$d/cmp.out"))"
    else t_fail "$1" "$(tail -2 "$d/cmp.out")"; fi
}

# ---- layouts ----
for v in "tp2-ep2-etp2:4:$tp --expert-model-parallel-size 2" \
         "tp2-ep2-etp1:4:$etp1 --expert-model-parallel-size 2" \
         "tp2-etp1:2:$etp1" \
         "tp2-ep2-etp1-2ranks:2:$etp1 --expert-model-parallel-size 2" \
         "tp2-ep2-etp1-dist:4:$etp1 --expert-model-parallel-size 2 --use-distributed-optimizer" \
         "dp2-tp2-ep2-etp1-dist:8:$etp1 --expert-model-parallel-size 2 --use-distributed-optimizer" \
         "tp2-cp2-ep2-etp1:4:$etp1 --context-parallel-size 2 --expert-model-parallel-size 2" \
         "dp2-tp2-ep2-etp1-overlap:8:$etp1 --expert-model-parallel-size 2 --use-distributed-optimizer --overlap-grad-reduce --overlap-param-gather --ddp-bucket-size 4000" \
         "tp2-pp2-ep2-etp1:8:$etp1 --pipeline-model-parallel-size 2 --expert-model-parallel-size 2"; do
    name=${v%%:*} rest=${v#*:} n=${rest%%:*} extra=${rest#*:}
    if mt-train -n "$n" $base $extra --metrics-file "$d/$name.jsonl" >"$d/$name.log" 2>"$d/$name.err"; then
        check "$name: the one-rank losses" "$d/$name.jsonl" 1e-5
    else t_fail "$name" "$(tail -3 "$d/$name.err")"; fi
done
check "tp2-ep2-etp1: the losses of etp 2 (= tp) on the same ranks" "$d/tp2-ep2-etp1.jsonl" 1e-5 "$d/tp2-ep2-etp2.jsonl"
# the bytes a tensor rank sends: the dense exchanges, the shared expert's gate gradient, the router's statistics
# in each forward pass and its weight's gradient once per step (no routing weights' gradients: each rank's own)
for name in tp2-ep2-etp1 tp2-etp1; do
    t_grep "$name: tensor-parallel bytes sent = the ring volume of what the model exchanges" \
        'tensor-parallel communication per iteration \| bytes sent: ([0-9]+) \| ring volume of the activations and statistics: \1$' "$d/$name.log"
done

# ---- without a shared expert an MoE layer with whole experts exchanges no activations over the tensor group
# (Megatron's with etp 1): TP 2 x EP 2 gives the one-rank losses of that model, and the bytes a tensor rank sends
# are the ring volume without the MoE layers' gathers and reduce-scatters ----
noshared=${base//--moe-shared-expert-intermediate-size 16/}
noshared=${noshared//--moe-shared-expert-gate/}
mt-train $noshared --metrics-file "$d/ns-ref.jsonl" >/dev/null 2>"$d/ns-ref.err" &&
    mt-train -n 4 $noshared $etp1 --expert-model-parallel-size 2 --metrics-file "$d/ns.jsonl" >"$d/ns.log" 2>"$d/ns.err" ||
    t_fail "runs without a shared expert" "$(tail -n 3 "$d/ns-ref.err" "$d/ns.err")"
check "tp2-ep2-etp1 without a shared expert: the one-rank losses" "$d/ns.jsonl" 1e-5 "$d/ns-ref.jsonl"
t_grep "... tensor-parallel bytes sent = the ring volume without the MoE layers' activations" \
    'tensor-parallel communication per iteration \| bytes sent: ([0-9]+) \| ring volume of the activations and statistics: \1$' "$d/ns.log"

# ---- the sim backend (the CUDA kernels under the SIMT simulator, host-staged communicators): TP 2 x EP 2 with
# etp 1, 3 iterations, the cpu backend's losses and norms to 1e-6 (measured 1.5e-8) ----
if t_has_sim; then
    short="--train-iters 3 --eval-iters 0 --lr-warmup-iters 1"
    MT_DEVICE=sim mt-train -n 4 $base $short $etp1 --expert-model-parallel-size 2 --metrics-file "$d/sim.jsonl" >"$d/sim.log" 2>&1 &&
        mt-train -n 4 $base $short $etp1 --expert-model-parallel-size 2 --metrics-file "$d/cpu3.jsonl" >"$d/cpu3.log" 2>&1 ||
        t_fail "sim and cpu runs" "$(tail -n 3 "$d/sim.log" "$d/cpu3.log")"
    if $py - "$d/cpu3.jsonl" "$d/sim.jsonl" >"$d/sim.out" 2>&1 <<'PYEOF'
import json, sys
keys = ("lm_loss", "grad_norm", "load_balancing_loss", "z_loss", "params_norm")
def load(p): return {r["iteration"]: [r[k] for k in keys] for r in map(json.loads, open(p)) if r["type"] == "train"}
a, b = load(sys.argv[1]), load(sys.argv[2])
assert sorted(a) == sorted(b) == [1, 2, 3], (sorted(a), sorted(b))
w = max(abs(x - y) / abs(x) for i in a for x, y in zip(a[i], b[i]))
assert w <= 1e-6, "worst %g" % w
print("worst %.2g" % w)
PYEOF
    then t_pass "tp2-ep2-etp1 on sim: the cpu backend's losses and norms ($(cat "$d/sim.out"))"
    else t_fail "tp2-ep2-etp1 on sim" "$(tail -2 "$d/sim.out")"; fi
else t_skip "tp2-ep2-etp1 on sim" "this build has no SIMT simulator"; fi

# ---- --moe-per-layer-logging: each MoE layer's losses and rows per expert (the tensor ranks' rows summed) as one
# rank's, on TP 2 x PP 2 x EP 2 with etp 1 (4 ranks: the stage's two tensor ranks are the two expert ranks) ----
mt-train -n 2 $base --pipeline-model-parallel-size 2 --moe-per-layer-logging --tensorboard-dir "$d/tb0" >/dev/null 2>"$d/tb0.err" &&
    mt-train -n 4 $base $etp1 --pipeline-model-parallel-size 2 --expert-model-parallel-size 2 --moe-per-layer-logging \
        --tensorboard-dir "$d/tb1" >/dev/null 2>"$d/tb1.err" || t_fail "per-layer logging runs" "$(tail -3 "$d/tb0.err" "$d/tb1.err")"
if PYTHONPATH=$T_TOP/tests/oracle $py - "$d/tb0" "$d/tb1" >"$d/tb.out" 2>&1 <<'PYEOF'
import sys
from tfevents import scalars
a, b = scalars(sys.argv[1]), scalars(sys.argv[2])
tags = [t for t in a if t.startswith("moe/")]
assert len(tags) == 3 * (2 + 4), tags
w = max(abs(v - b[t][s]) / abs(v) for t in tags for s, v in a[t].items() if v)
assert w < 1e-6, "worst %g" % w
print("%d tags, worst %.2g" % (len(tags), w))
PYEOF
then t_pass "per-layer logging: every MoE layer's losses and rows per expert as one rank's ($(cat "$d/tb.out"))"
else t_fail "per-layer logging" "$(tail -2 "$d/tb.out")"; fi

# ---- each rank's experts whole: the dense part of tp 2 plus 2 whole experts (24 x 32 x 3 each) per MoE layer ----
params() { sed -nE 's/.*number of parameters on \(tensor, pipeline\) model parallel rank \(0, 0\): ([0-9]+)$/\1/p' "$1" | head -1; }
p1=$(params "$d/tp2-ep2-etp1.log") p2=$(params "$d/tp2-ep2-etp2.log")
# etp 2 holds half of each of its 2 experts: the difference is 3 layers x 2 experts x half of 3 x 24 x 32
if [ -n "$p1" ] && [ -n "$p2" ] && [ $((p1 - p2)) = $((3 * 2 * 3 * 24 * 32 / 2)) ]; then
    t_pass "tp2-ep2-etp1: a rank holds its 2 experts whole ($p1 parameters, etp 2: $p2)"
else t_fail "tp2-ep2-etp1: parameters of a rank" "etp 1: '$p1', etp 2: '$p2'"; fi
# the dry run of TP 2 x EP 2 x etp 1 with the distributed optimizer: rank 0's parameters and memory line as the run's
mt-train $base $etp1 --expert-model-parallel-size 2 --use-distributed-optimizer --dry-run --world-size 4 >"$d/plan.out" 2>&1 ||
    t_fail "dry run" "$(tail -2 "$d/plan.out")"
mem() { grep -E "$2" "$1" | head -1 | sed -E 's/.*(parameters: [^|]*\| gradients: [^|]*\| optimizer: [^|]*\| activations: [^|]*\| total: [0-9.]*).*/\1/'; }
for pat in 'number of parameters on' 'memory \(MB\)'; do
    a=$(mem "$d/plan.out" "$pat") b=$(mem "$d/tp2-ep2-etp1-dist.log" "$pat")
    if [ -n "$a" ] && [ "$a" = "$b" ]; then t_pass "etp 1 dry run: $pat as the run's ($a)"
    else t_fail "etp 1 dry run: $pat" "plan '$a', run '$b'"; fi
done
# a rank's own 32 rows x 2 choices, half of them to the other expert rank: 3 layers x 2 micro-batches x (4 x 32 rows
# x 32 floats x 4 bytes + 2 counts x 4 bytes)
want=$((3 * 2 * (4 * 32 * 32 * 4 + 2 * 4)))
t_grep "... its experts whole and its all-to-all of the rank's own rows ($want bytes)" \
    "2 on each of 2 expert-parallel ranks, each whole on its tensor rank \(--expert-tensor-parallel-size 1\); all-to-all bytes a rank sends per iteration with evenly spread routing: $want\$" "$d/plan.out"

# ---- refused in one line, before any step ----
refused() {   # NAME PATTERN N FLAGS...: mt-train -n N (0: without -n) with FLAGS fails with one line matching PATTERN
    local name=$1 pat=$2 n=$3   # (the same line from every rank), and no iteration
    shift 3
    local ranks=()
    [ "$n" = 0 ] || ranks=(-n "$n")
    mt-train "${ranks[@]}" $base "$@" >"$d/r.out" 2>"$d/r.err"
    local rc=$?
    if [ $rc != 0 ] && [ "$(sort -u "$d/r.err" | wc -l)" = 1 ] && grep -Eq -- "$pat" "$d/r.err" && ! grep -q 'iteration ' "$d/r.out"; then
        t_pass "$name: refused in one line ($(head -c 160 "$d/r.err"))"
    else t_fail "$name: refused in one line" "exit $rc: $(head -c 400 "$d/r.err")"; fi
}
refused "etp 1 without --sequence-parallel" \
    'expert-tensor-parallel-size 1 with --tensor-model-parallel-size 2 needs --sequence-parallel' 2 \
    --tensor-model-parallel-size 2 --expert-tensor-parallel-size 1
refused "etp 3 with tp 2 (neither 1 nor tp)" \
    'expert-tensor-parallel-size \(3\): 1 or --tensor-model-parallel-size \(2\); other sizes are not implemented' 0 \
    $tp --expert-tensor-parallel-size 3 --dry-run
refused "etp 1 x ep 4 on a stage of 6 ranks (at startup)" \
    'expert-tensor-parallel-size \(1\) x --expert-model-parallel-size \(4\) does not divide the ranks of a pipeline stage 6' 6 \
    $etp1 --expert-model-parallel-size 4 --global-batch-size 12
refused "... and in the dry run" \
    'expert-tensor-parallel-size \(1\) x --expert-model-parallel-size \(4\) does not divide the ranks of a pipeline stage 6' 0 \
    $etp1 --expert-model-parallel-size 4 --global-batch-size 12 --dry-run --world-size 6
refused "etp 1 with token dropping" 'moe-expert-capacity-factor with --expert-tensor-parallel-size 1.*dropless routing only' 2 \
    $etp1 --moe-expert-capacity-factor 1.0
refused "etp 1 with seq_aux_loss" 'seq_aux_loss with --expert-tensor-parallel-size 1.*not implemented' 2 \
    $etp1 --moe-router-load-balancing-type seq_aux_loss
refused "etp 1 with --save" 'save with --expert-tensor-parallel-size 1 .*checkpoints of that layout are not implemented yet' 2 \
    $etp1 --save "$d/ck"
refused "etp 1 with --load" 'load with --expert-tensor-parallel-size 1 .*checkpoints of that layout are not implemented yet' 2 \
    $etp1 --load "$d/ck"
if [ -e "$d/ck" ]; then t_fail "nothing saved" "$(ls "$d/ck")"; else t_pass "nothing saved by the refused runs"; fi
