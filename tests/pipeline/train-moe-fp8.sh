#!/usr/bin/env bash
# train-moe-fp8.sh: mt-train --fp8-format with MoE layers (model/fp8.h: each of a rank's experts its own
# input, weight and output-gradient scales, as Transformer Engine's GroupedLinear; the shared expert's
# products in the MLP's places; the model against the float64 reference is model-moe-torch.sh's), on
# train-moe.sh's model (LLaMA-style, MoE in layers 0, 2 and 3 of 4, 4 experts top 2, a shared expert with
# its gate, dropout on), CPU ranks:
#   - one rank, hybrid: 10 iterations within 2% of the run without FP8, and not equal to it;
#   - the checkpoint's meta.json "fp8" holds local_experts 4 and (1 + 1) x (4 x 12 + 3 x 4 x 6) floats (a
#     history of 1: scales and histories of 8 forward tensors and 4 gradients a layer, 4 and 2 more per expert
#     in an MoE layer), and a resume at iteration 5 gives iterations 6-10 bit for bit; the same on 2 ranks with
#     EP 2 (each rank 2 experts: local_experts 2);
#   - TP 2 x EP 2 (4 ranks, --sequence-parallel) with the expert tensor size 2 and 1 against EP 2 on 2 ranks:
#     the same two experts' slots on each rank (TE reduces a GroupedLinear's amaxes by the GEMM's place, so a
#     rank's expert j shares its scales with expert j of the other expert ranks) and the same amaxes: iterations
#     1 and 2 to 1e-5 (measured 5.7e-9), all 10 within 1e-2 (9.8e-4: an element near a rounding tie rounds as
#     the sums' order has it, and AdamW carries the difference on);
#   - the sim backend (the CUDA kernels under the simulator) gives the cpu's iteration 1 to 1e-6;
#   - full activation recomputation gives the same bits (its forward quantizes with the scales the pass used
#     and records nothing); PP 2 (each stage's state its layers': of one width or another) resumes bit for
#     bit, and the interleaved schedule (chunks of one layer) gives the 1F1B run's losses to 1e-6;
#   - an EP 2 checkpoint's FP8 state loaded on one rank (4 experts a rank) is refused in one line naming
#     --expert-model-parallel-size, and a damaged "fp8" (local_experts not a count, layers beyond the model's)
#     in one line naming the file;
#   - the dry run's parameters and memory line are the run's, the FP8 state and its buffer of quantized
#     weights counted (hidden 256: 4 MB of them), on one rank and with EP 2.
# shellcheck disable=SC2086   # the flag lists split into words
. "$(dirname "$0")/../lib.sh"
set -f   # the layer list ([1,0,1,1]) is not a file pattern
py=/usr/bin/python3
d=$T_TMP
t_moe_walk
base="$T_MOE --fp8-format hybrid"
ep2="--expert-model-parallel-size 2"
tp2="--tensor-model-parallel-size 2 --sequence-parallel"

# close NAME A B TOL2 TOL: B's lm loss and grad norm of iterations 1 and 2 within TOL2 (relative) of A's, all
# 10 within TOL, and (TOL2 = -) some differ by more than TOL (FP8 changed something)
close() {
    if $py - "$d/$2.jsonl" "$d/$3.jsonl" "$4" "$5" >"$d/close.out" 2>&1 <<'PYEOF'
import json, sys
def load(p): return {r["iteration"]: (r["lm_loss"], r["grad_norm"]) for r in map(json.loads, open(p)) if r["type"] == "train"}
a, b, t2, tol = load(sys.argv[1]), load(sys.argv[2]), sys.argv[3], float(sys.argv[4])
assert sorted(a) == sorted(b) == list(range(1, 11)), (sorted(a), sorted(b))
rel = {i: max(abs(x - y) / abs(x) for x, y in zip(a[i], b[i])) for i in a}
assert max(rel.values()) < tol, "worst relative difference %.3g" % max(rel.values())
if t2 == "-":
    assert max(rel.values()) > 0, "identical: FP8 changed nothing"
else:
    assert max(rel[1], rel[2]) <= float(t2), "iterations 1 and 2: %.3g, %.3g" % (rel[1], rel[2])
print("iterations 1 and 2: %.2g; all: %.2g" % (max(rel[1], rel[2]), max(rel.values())))
PYEOF
    then t_pass "$1 ($(cat "$d/close.out"))"; else t_fail "$1" "$(tail -2 "$d/close.out")"; fi
}
# train NAME N FLAGS...: mt-train on N ranks, metrics in $d/NAME.jsonl
train() {
    local name=$1 n=$2
    shift 2
    mt-train -n "$n" "$@" --metrics-file "$d/$name.jsonl" >"$d/$name.log" 2>"$d/$name.err" ||
        { t_fail "$name" "$(tail -3 "$d/$name.err")"; return 1; }
}

train plain 1 $T_MOE && train one 1 $base && close "hybrid, one rank: within 2% of the run without FP8" plain one - 0.02

# the state in the checkpoint, and exact resumes
for v in "one:1::4:mp_rank_00" "ep2:2:$ep2:2:mp_rank_00_000"; do
    name=${v%%:*} rest=${v#*:} n=${rest%%:*} rest=${rest#*:} extra=${rest%%:*} rest=${rest#*:} El=${rest%%:*} dir=${rest#*:}
    [ -f "$d/$name.jsonl" ] || train "$name" "$n" $base $extra
    if mt-train -n "$n" $base $extra --save "$d/ck-$name" --exit-interval 5 >/dev/null 2>"$d/ck-$name.err" &&
        mt-train -n "$n" $base $extra --load "$d/ck-$name" --metrics-file "$d/res-$name.jsonl" >/dev/null 2>"$d/res-$name.err"; then
        t_moe_check "$name: resumed at 5, iterations 6-10 bit for bit" "$d/res-$name.jsonl" 0 6 "$d/$name.jsonl"
    else t_fail "$name: save and resume" "$(tail -3 "$d/ck-$name.err" "$d/res-$name.err")"; fi
    if $py - "$d/ck-$name/iter_0000005/$dir/meta.json" "$El" >"$d/st.out" 2>&1 <<'PYEOF'
import json, sys
f, El = json.load(open(sys.argv[1]))["fp8"], int(sys.argv[2])
n = 2 * (4 * 12 + 3 * El * 6)
assert f["local_experts"] == El and len(f["state"]) == n, (f.get("local_experts"), len(f["state"]), n)
print("local_experts %d, %d floats" % (El, n))
PYEOF
    then t_pass "$name: the checkpoint's FP8 state ($(cat "$d/st.out"))"; else t_fail "$name: the checkpoint's FP8 state" "$(tail -2 "$d/st.out")"; fi
done

# the same experts' slots on every layout of two experts a rank
train ep2-tp2 4 $base $tp2 $ep2 && close "TP 2 x EP 2, etp 2: EP 2's losses" ep2 ep2-tp2 1e-5 1e-2
train ep2-tp2-etp1 4 $base $tp2 --expert-tensor-parallel-size 1 $ep2 &&
    close "TP 2 x EP 2, etp 1: EP 2's losses" ep2 ep2-tp2-etp1 1e-5 1e-2

# the CUDA kernels under the simulator: iteration 1 as the cpu's
if t_has_sim; then
    short="--train-iters 2 --eval-iters 0 --lr-warmup-iters 1"
    if MT_DEVICE=sim mt-train $base $short --metrics-file "$d/sim.jsonl" >"$d/sim.log" 2>&1 &&
        mt-train $base $short --metrics-file "$d/cpu2.jsonl" >"$d/cpu2.log" 2>&1 &&
        $py - "$d/cpu2.jsonl" "$d/sim.jsonl" >"$d/sim.out" 2>&1 <<'PYEOF'
import json, sys
keys = ("lm_loss", "grad_norm", "load_balancing_loss", "z_loss")
a, b = ([[r[k] for k in keys] for r in map(json.loads, open(p)) if r["type"] == "train"][0] for p in sys.argv[1:])
w = max(abs(x - y) / abs(x) for x, y in zip(a, b))
assert w <= 1e-6, "worst %g" % w
print("worst %.2g" % w)
PYEOF
    then t_pass "sim backend: iteration 1 as the cpu's ($(cat "$d/sim.out"))"
    else t_fail "sim backend" "$(tail -2 "$d/sim.out" "$d/sim.log")"; fi
else t_fail "sim backend" "this build has no SIMT simulator"; fi

# an FP8 state of 2 experts a rank on a rank of 4
mt-train $base --load "$d/ck-ep2" >"$d/r.out" 2>"$d/r.err"
if [ $? != 0 ] && [ "$(wc -l <"$d/r.err")" = 1 ] &&
    grep -q 'FP8 state of MoE layer 1 is for 2 experts a rank, this run has 4 (--expert-model-parallel-size)' "$d/r.err" &&
    ! grep -q ' iteration  *[0-9]*/' "$d/r.out"; then
    t_pass "EP 2's FP8 state on one rank: refused in one line ($(cat "$d/r.err"))"
else t_fail "EP 2's FP8 state on one rank" "$(head -c 300 "$d/r.err")"; fi

# full recomputation quantizes as the forward did and records nothing: the same bits; the interleaved schedule
# (PP 2, chunks of one layer, each chunk's state its own layers': MoE or dense) gives the 1F1B run's losses
train recompute 1 $base --recompute-granularity full --recompute-method uniform --recompute-num-layers 1 &&
    t_moe_check "full recomputation: the same bits" "$d/recompute.jsonl" 0 1 "$d/one.jsonl"
train pp2 2 $base --pipeline-model-parallel-size 2 &&
    mt-train -n 2 $base --pipeline-model-parallel-size 2 --save "$d/ck-pp2" --exit-interval 5 >/dev/null 2>"$d/ck-pp2.err" &&
    mt-train -n 2 $base --pipeline-model-parallel-size 2 --load "$d/ck-pp2" --metrics-file "$d/res-pp2.jsonl" \
        >/dev/null 2>>"$d/ck-pp2.err" &&
    t_moe_check "PP 2 (stage 0: an MoE and a dense layer, stage 1 two MoE layers): resumed at 5 bit for bit" \
        "$d/res-pp2.jsonl" 0 6 "$d/pp2.jsonl" &&
    train pp2-vp 2 $base --pipeline-model-parallel-size 2 --num-layers-per-virtual-pipeline-stage 1 &&
    t_moe_check "PP 2 interleaved (chunks of one layer): the 1F1B run's losses" "$d/pp2-vp.jsonl" 1e-6 1 "$d/pp2.jsonl"

# the dry run counts the FP8 state and its buffer of quantized weights (here the 4 experts' first products of
# 1024 x 256, 4 MB) as the run holds them: rank 0's memory line as the run's, on one rank and with EP 2
big="${T_MOE//--hidden-size 32/--hidden-size 256} --ffn-hidden-size 512 --moe-ffn-hidden-size 512 --fp8-format hybrid"
for v in "1:" "2:$ep2"; do
    n=${v%%:*} extra=${v#*:}
    mt-train $big $extra --dry-run --world-size "$n" >"$d/plan.out" 2>&1 &&
        mt-train -n "$n" $big $extra --train-iters 1 --eval-iters 0 --lr-warmup-iters 0 >"$d/run.out" 2>&1 ||
        t_fail "FP8 dry run and run on $n ranks" "$(tail -2 "$d/plan.out" "$d/run.out")"
    t_plan_as_run "FP8 dry run on $n ranks" "$d/plan.out" "$d/run.out"
done

# a damaged "fp8" in meta.json (local_experts not a count, layers beyond the model's): one line naming the file,
# before any iteration
for bad in experts layers; do
    cp -a "$d/ck-one" "$d/ck-$bad"
    $py - "$d/ck-$bad/iter_0000005/mp_rank_00/meta.json" "$bad" <<'PYEOF'
import json, sys
m = json.load(open(sys.argv[1]))
if sys.argv[2] == "experts": m["fp8"]["local_experts"] = "4"
else: m["fp8"]["layers"] = 10 ** 12
json.dump(m, open(sys.argv[1], "w"))
PYEOF
    mt-train $base --load "$d/ck-$bad" >"$d/r.out" 2>"$d/r.err"
    rc=$?
    want='"fp8.local_experts" is missing or not a count of experts \(1 to 4\)'
    [ $bad = layers ] && want='"fp8" names layers 1 to 1000000000000, not layers of this model \(1 to 4\)'
    if [ $rc != 0 ] && [ "$(wc -l <"$d/r.err")" = 1 ] && grep -q "ck-$bad/iter_0000005/mp_rank_00/meta.json" "$d/r.err" &&
        grep -Eq "$want" "$d/r.err" && ! grep -q ' iteration  *[0-9]*/' "$d/r.out"; then
        t_pass "a damaged FP8 state ($bad): refused in one line ($(cat "$d/r.err"))"
    else t_fail "a damaged FP8 state ($bad)" "$(head -c 300 "$d/r.err")"; fi
done
