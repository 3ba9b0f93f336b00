#!/usr/bin/env bash
# train-fp8.sh: mt-train --fp8-format (the layers' products in FP8 with delayed scaling, emulated on the
# CPU; model/fp8.h; the model against a float64 torch reference is model-torch.sh's): with dropout on,
#   - one rank, hybrid: 20 iterations train, each loss within 2% of the same run without FP8 and not equal
#     to it (the products are quantized);
#   - an exact resume: saved at iteration 10, loaded, iterations 11-20 give the uninterrupted run's losses
#     and grad norms bit for bit (the scales and amax histories are in the checkpoint: TE's extra state);
#     and a resume that drops them (planted here by deleting them from meta.json) does not;
#   - TP=2 with --sequence-parallel: the two tensor ranks' saved FP8 states are identical (the amaxes are
#     reduced over the tensor group); iterations 1 and 2 give the one-rank run's loss and grad norm to
#     1e-5 (measured 1.4e-6), and the losses of all 20 are within 1e-3 of it (measured 2.5e-4: an element
#     near a rounding tie rounds as the sums' order has it, and AdamW carries the difference on);
#   - DP=2 resumed from iteration 10 continues bit for bit (the data-parallel ranks keep one state), and
#     with --overlap-grad-reduce gives the same bits;
#   - full activation recomputation gives the same bits (its forward quantizes with the scales the pass
#     used and records nothing);
#   - PP=2: each stage saves its layers' state; one rank resumes from that checkpoint within 1e-3 of the
#     one-rank run's losses;
#   - the interleaved schedule (PP=2, chunks of one layer): the plain 1F1B run's losses and grad norms to
#     1e-6 (each chunk's scales update after its own passes, and each layer sees the same passes);
#   - the sim backend (the CUDA kernels under the simulator) gives the cpu's iteration 1 to 1e-6 and the
#     losses of iterations 2 and 3 to 1e-5;
#   - bf16 with e4m3 and a max history of 4 trains, its losses within 3% of bf16's without FP8;
#   - flags that do not fit, and a damaged FP8 state in a checkpoint, are refused in one line before
#     training.
. "$(dirname "$0")/../lib.sh"
py=/usr/bin/python3
d=$T_TMP
t_mpi_walk
base=$T_WALK

# run NAME FLAGS...: one rank, metrics in $d/NAME.jsonl
run() {
    local name=$1; shift
    # shellcheck disable=SC2086
    mt-train $base "$@" --metrics-file "$d/$name.jsonl" >"$d/$name.log" 2>"$d/$name.err" ||
        { t_fail "$name" "$(tail -3 "$d/$name.err")"; return 1; }
}
# near NAME A B TOL: every iteration's lm loss of B within TOL (relative) of A's, and some differs
near() {
    if $py - "$d/$2.jsonl" "$d/$3.jsonl" "$4" >"$d/near.out" 2>&1 <<'PYEOF'
import json, sys
def losses(p): return {r["iteration"]: r["lm_loss"] for r in map(json.loads, open(p)) if r["type"] == "train"}
a, b, tol = losses(sys.argv[1]), losses(sys.argv[2]), float(sys.argv[3])
assert sorted(a) == sorted(b) == list(range(1, 21)), (sorted(a), sorted(b))
rel = [abs(a[i] - b[i]) / a[i] for i in a]
assert max(rel) < tol, "worst relative difference %.3g" % max(rel)
assert max(rel) > 0, "the losses are identical: FP8 changed nothing"
print("worst relative difference %.2g, last losses %.4f and %.4f" % (max(rel), a[20], b[20]))
PYEOF
    then t_pass "$1 ($(cat "$d/near.out"))"; else t_fail "$1" "$(tail -2 "$d/near.out")"; fi
}

run plain && run fp8 --fp8-format hybrid --save "$d/ck" --save-interval 10 &&
    near "hybrid: 20 iterations within 2% of the run without FP8" plain fp8 0.02

# the exact resume from iteration 10 (a run that saves there and exits)
run half --fp8-format hybrid --save "$d/ck-half" --save-interval 10 --exit-interval 10
cp -a "$d/ck-half" "$d/ck-drop"
run resumed --fp8-format hybrid --load "$d/ck-half" &&
    t_resumed_losses "resume at iteration 10: iterations 11-20 bit for bit" "$d/fp8.jsonl" "$d/resumed.jsonl" 0
t_grep "the checkpoint's meta.json holds the FP8 state" '"amax_history_len": 1' "$d/ck-half/iter_0000010/mp_rank_00/meta.json"
# without the saved state the resumed run starts from fresh scales: iteration 11 differs
$py - "$d/ck-drop/iter_0000010/mp_rank_00/meta.json" <<'PYEOF'
import json, sys
m = json.load(open(sys.argv[1])); del m["fp8"]; json.dump(m, open(sys.argv[1], "w"))
PYEOF
if run dropped --fp8-format hybrid --load "$d/ck-drop"; then
    loss11() { $py -c 'import json, sys; print([r["lm_loss"] for r in map(json.loads, open(sys.argv[1]))
                 if r["type"] == "train" and r["iteration"] == 11][0])' "$1" 2>/dev/null; }
    a=$(loss11 "$d/fp8.jsonl") b=$(loss11 "$d/dropped.jsonl")
    if [ -n "$a" ] && [ -n "$b" ] && [ "$a" != "$b" ]; then t_pass "a resume without the FP8 state differs at iteration 11 ($a, $b)"
    else t_fail "a resume without the FP8 state" "iteration 11: '$a' and '$b' (the test cannot tell the state is used)"; fi
fi

# TP=2 with sequence parallelism against the one-rank run
m=$d/tp2
# shellcheck disable=SC2086
if mpi 2 mt-train $base --tensor-model-parallel-size 2 --sequence-parallel --fp8-format hybrid --save "$m-ck" \
    --save-interval 20 --metrics-file "$m.jsonl" >"$m.log" 2>"$m.err"; then
    if $py - "$d/fp8.jsonl" "$m.jsonl" >"$d/tp.out" 2>&1 <<'PYEOF'
import json, sys
def rows(p): return {r["iteration"]: (r["lm_loss"], r["grad_norm"]) for r in map(json.loads, open(p)) if r["type"] == "train"}
a, b = rows(sys.argv[1]), rows(sys.argv[2])
assert sorted(a) == sorted(b) == list(range(1, 21)), (sorted(a), sorted(b))
rel = lambda i, k: abs(a[i][k] - b[i][k]) / abs(a[i][k])
early = max(max(rel(i, 0), rel(i, 1)) for i in (1, 2))
assert early < 1e-5, "iterations 1-2 differ by %.3g" % early
worst = max(rel(i, 0) for i in a)
assert worst < 1e-3, "a loss differs by %.3g" % worst
print("iterations 1-2 within %.1e, the losses of 20 within %.1e" % (early, worst))
PYEOF
    then t_pass "TP=2 SP against one rank: $(cat "$d/tp.out")"; else t_fail "TP=2 SP against one rank" "$(tail -2 "$d/tp.out")"; fi
    if $py - "$m-ck/iter_0000020" >"$d/tp.out" 2>&1 <<'PYEOF'
import json, sys
a, b = (json.load(open("%s/mp_rank_0%d/meta.json" % (sys.argv[1], r)))["fp8"] for r in (0, 1))
assert a["state"] == b["state"], "the tensor ranks' FP8 states differ"
print("%d values" % len(a["state"]))
PYEOF
    then t_pass "TP=2: both tensor ranks saved the same FP8 state ($(cat "$d/tp.out"))"
    else t_fail "TP=2: the tensor ranks' FP8 states" "$(tail -2 "$d/tp.out")"; fi
else t_fail "TP=2 SP with FP8 under mpirun" "$(tail -5 "$m.err")"; fi

# DP=2: a resume at iteration 10 continues bit for bit only if both data-parallel ranks held the state
# rank 0 saved (the amaxes are reduced over the data-parallel group too)
m=$d/dp2
# shellcheck disable=SC2086
if mpi 2 mt-train $base --fp8-format hybrid --metrics-file "$m.jsonl" >"$m.log" 2>"$m.err" &&
   mpi 2 mt-train $base --fp8-format hybrid --save "$m-ck" --save-interval 10 --exit-interval 10 >/dev/null 2>"$m-h.err" &&
   mpi 2 mt-train $base --fp8-format hybrid --load "$m-ck" --metrics-file "$m-r.jsonl" >/dev/null 2>"$m-r.err"; then
    t_resumed_losses "DP=2 resumed at iteration 10: iterations 11-20 bit for bit" "$m.jsonl" "$m-r.jsonl" 0
else t_fail "DP=2 with FP8 under mpirun" "$(tail -5 "$m.err" "$m-h.err" "$m-r.err" 2>/dev/null)"; fi
# with the gradient buckets reduced by the progress thread meanwhile (its own communicator): the same bits
# shellcheck disable=SC2086
if mpi 2 mt-train $base --fp8-format hybrid --overlap-grad-reduce --metrics-file "$m-ov.jsonl" >/dev/null 2>"$m-ov.err"; then
    t_same_losses "DP=2 --overlap-grad-reduce: the losses and grad norms without it, bit for bit" "$m.jsonl" "$m-ov.jsonl" 0
else t_fail "DP=2 --overlap-grad-reduce with FP8 under mpirun" "$(tail -5 "$m-ov.err")"; fi

# full recomputation quantizes again with the scales its forward used: the same bits
run recompute --fp8-format hybrid --recompute-granularity full --recompute-method uniform --recompute-num-layers 1 &&
    t_same_losses "full recomputation: the losses and grad norms of the run without it, bit for bit" "$d/fp8.jsonl" \
        "$d/recompute.jsonl" 0

# PP=2: each stage saves its layers' state; one rank resumes from it (the state of both stages)
m=$d/pp2
# shellcheck disable=SC2086
if mpi 2 mt-train $base --pipeline-model-parallel-size 2 --fp8-format hybrid --save "$m-ck" --save-interval 10 \
    --exit-interval 10 --metrics-file "$m.jsonl" >"$m.log" 2>"$m.err"; then
    if run pp-resumed --fp8-format hybrid --load "$m-ck" && $py - "$d/fp8.jsonl" "$d/pp-resumed.jsonl" "$m-ck/iter_0000010" >"$d/pp.out" 2>&1 <<'PYEOF'
import json, sys
def rows(p): return {r["iteration"]: r["lm_loss"] for r in map(json.loads, open(p)) if r["type"] == "train"}
a, b = rows(sys.argv[1]), rows(sys.argv[2])
assert sorted(b) == list(range(11, 21)), sorted(b)
worst = max(abs(a[i] - b[i]) / a[i] for i in b)
assert worst < 1e-3, "a loss differs from the one-rank run's by %.3g" % worst
st = [json.load(open("%s/mp_rank_00_00%d/meta.json" % (sys.argv[3], p)))["fp8"] for p in (0, 1)]
assert [(s["first_layer"], s["layers"]) for s in st] == [(0, 1), (1, 1)], st
print("iterations 11-20 within %.1e of the one-rank run's" % worst)
PYEOF
    then t_pass "PP=2 saved per stage, resumed on one rank: $(cat "$d/pp.out")"
    else t_fail "PP=2 saved, resumed on one rank" "$(tail -2 "$d/pp.out")"; fi
else t_fail "PP=2 with FP8 under mpirun" "$(tail -5 "$m.err")"; fi

# the interleaved schedule (4 layers, PP=2, chunks of one layer): each chunk's scales update after its own
# passes, and every layer sees the micro-batches in the order of the plain 1F1B schedule: the same losses
m=$d/vp
# shellcheck disable=SC2086
if mpi 2 mt-train $base --num-layers 4 --pipeline-model-parallel-size 2 --fp8-format hybrid \
        --metrics-file "$m-1f1b.jsonl" >/dev/null 2>"$m-1f1b.err" &&
   mpi 2 mt-train $base --num-layers 4 --pipeline-model-parallel-size 2 --num-layers-per-virtual-pipeline-stage 1 \
        --fp8-format hybrid --metrics-file "$m.jsonl" >/dev/null 2>"$m.err"; then
    t_same_losses "PP=2 interleaved, chunks of one layer: the plain schedule's losses and grad norms" "$m-1f1b.jsonl" "$m.jsonl" 1e-6
else t_fail "PP=2 interleaved with FP8 under mpirun" "$(tail -5 "$m-1f1b.err" "$m.err" 2>/dev/null)"; fi

# the CUDA kernels under the SIMT simulator (--device cuda's code path: the scales, histories and amaxes in
# device memory) against the cpu backend, 3 iterations: the first to 1e-6, the others' losses to 1e-5 (the
# roundings near a tie; measured 4e-9 and 3.5e-7)
short=(--fp8-format hybrid --train-iters 3 --lr-warmup-iters 1 --eval-iters 0)
if t_has_sim; then
    if run sim-ref "${short[@]}" && MT_DEVICE=sim mt-train $base "${short[@]}" --metrics-file "$d/sim.jsonl" \
            >"$d/sim.log" 2>"$d/sim.err"; then
        if $py - "$d/sim-ref.jsonl" "$d/sim.jsonl" >"$d/sim.out" 2>&1 <<'PYEOF'
import json, sys
def rows(p): return {r["iteration"]: (r["lm_loss"], r["grad_norm"]) for r in map(json.loads, open(p)) if r["type"] == "train"}
a, b = rows(sys.argv[1]), rows(sys.argv[2])
assert sorted(a) == sorted(b) == [1, 2, 3], (sorted(a), sorted(b))
r1 = max(abs(x - y) / abs(x) for x, y in zip(a[1], b[1]))
r2 = max(abs(a[i][0] - b[i][0]) / a[i][0] for i in (2, 3))
assert r1 < 1e-6 and r2 < 1e-5, "iteration 1 within %.3g, the later losses %.3g" % (r1, r2)
print("iteration 1 within %.1e, the losses of 2 and 3 within %.1e" % (r1, r2))
PYEOF
        then t_pass "sim backend: $(cat "$d/sim.out")"; else t_fail "sim backend against cpu" "$(tail -2 "$d/sim.out")"; fi
    else t_fail "sim backend with FP8" "$(tail -3 "$d/sim.err")"; fi
else t_fail "sim backend" "this build has no SIMT simulator"; fi

# bf16, e4m3 everywhere, a margin and a max over 4 steps of history
run bf16 --bf16 && run bf16-fp8 --bf16 --fp8-format e4m3 --fp8-margin 1 --fp8-amax-history-len 4 --fp8-amax-compute-algo max &&
    near "bf16, e4m3, margin 1, max of 4: within 3% of bf16 without FP8" bf16 bf16-fp8 0.03

# refusals, before any iteration
refused() {   # NAME PATTERN FLAGS...
    local name=$1 pat=$2; shift 2
    # shellcheck disable=SC2086
    if mt-train $base "$@" >"$d/r.log" 2>"$d/r.err"; then t_fail "$name" "accepted"
    elif [ "$(wc -l <"$d/r.err")" -ne 1 ] || ! grep -q -- "$pat" "$d/r.err" || grep -q ' iteration  *[0-9]*/' "$d/r.log"; then
        t_fail "$name" "$(head -c 300 "$d/r.err")"
    else t_pass "$name: $(cat "$d/r.err")"; fi
}
refused "--fp8-margin alone" "applies with --fp8-format only" --fp8-margin 1
refused "--fp8-format e5m2" "fp8-format" --fp8-format e5m2
refused "--fp8-amax-history-len 0" "fp8-amax-history-len" --fp8-format hybrid --fp8-amax-history-len 0
refused "a resume with another history length" "amax histories hold 1 entries" --fp8-format hybrid \
    --fp8-amax-history-len 2 --load "$d/ck-half"
# a damaged FP8 state in meta.json: named by file, before any iteration
for bad in short text; do
    cp -a "$d/ck-half" "$d/ck-$bad"
    $py - "$d/ck-$bad/iter_0000010/mp_rank_00/meta.json" "$bad" <<'PYEOF'
import json, sys
m = json.load(open(sys.argv[1]))
if sys.argv[2] == "short": m["fp8"]["state"] = m["fp8"]["state"][:-1]
else: m["fp8"]["state"][3] = "x"
json.dump(m, open(sys.argv[1], "w"))
PYEOF
done
refused "a truncated FP8 state" 'mp_rank_00/meta.json: "fp8.state" does not hold 2 layers' --fp8-format hybrid --load "$d/ck-short"
refused "an FP8 state with a string" 'mp_rank_00/meta.json: "fp8.state" holds a value that is not a number' --fp8-format hybrid \
    --load "$d/ck-text"
