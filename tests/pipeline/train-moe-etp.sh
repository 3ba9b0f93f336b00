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
#     on TP 2 x PP 2 x EP 2, and with etp 2 on TP 4 x PP 2 x EP 2;
#   - a rank holds its experts whole: its parameters are the dense part of tp 2 plus 2 whole experts per
#     MoE layer, as the dry run says (its parameters and memory line are the run's), and the dry run's
#     all-to-all volume is a rank's own rows';
#   - checkpoints: TP 2 x EP 2 writes only mp_rank_00_000 and mp_rank_01_001 (the pairs its ranks hold, as
#     Megatron), resumes bit for bit, and resumes on one rank, with etp 2 and on EP 4 with the one-rank losses
#     (1e-5); mt-eval reads it; TP 2 x PP 2 x EP 2 (--async-save) writes the held pairs of each stage
#     (mp_rank_TT_PPP_EEE), resumes bit for bit and on one rank; with the distributed optimizer over TP 2 alone each directory's meta.json names
#     the expert shard in the other tensor rank's file, resumes bit for bit and on one rank; mt-ckpt-convert
#     writes whole experts on 4 expert ranks (all 8 pairs) and experts split over the tensor ranks, each
#     resuming with the one-rank losses, and back to whole experts the saved tensors bit for bit; --to megatron
#     gives the same model and optimizer state from it as from its conversion to etp 2; a missing
#     tensor rank's directory and an expert tensor size of 3 are refused in one line;
#   - seq_aux_loss: TP 2 x EP 2, TP 2 x CP 2 x EP 2 and TP 2 alone give the one-rank run's losses (each tensor
#     rank's rows whole sequences);
#   - an expert tensor size between 1 and tp (tp 4, etp 2, with 4 query groups): TP 4, TP 4 x EP 2, with the
#     distributed optimizer, DP 2 x TP 4 x EP 2 with the overlapped buckets, TP 4 x CP 2 x EP 2 and TP 4 x PP 2
#     x EP 2 give the one-rank losses, and with seq_aux_loss TP 4 x EP 2 and TP 4 x CP 2 x EP 2; a tensor rank
#     sends exactly its share of mt's ring (uneven chunks of small arrays over 4 ranks); the dry run's
#     parameters, memory line and all-to-all bytes are the run's;
#     its checkpoints hold each tensor rank's pair, resume bit for bit, on one rank, on etp 1 x EP 4 and resharded
#     to TP 4 x etp 2 without EP; --to megatron writes each rank file's expert slices, and --from megatron
#     reads them back (every pair, or the held ones) as mt's own resharding, byte for byte; and
#     with the distributed optimizer name the expert shard in the other group's directory;
#   - token dropping (capacity 1.0; a capacity in each tensor rank's shard of the positions): TP 2 x etp 1, TP 2 x
#     EP 2 x etp 1, TP 4 x etp 2, TP 4 x EP 2 x etp 2 (position policy, padded) and TP 4 x CP 2 x EP 2 x etp 2 give
#     the losses of the same layout with etp = tp, not the dropless ones; the tensor-parallel bytes and the dry
#     run's memory line are the run's;
#   - refused in one line before any step: etp 1 without --sequence-parallel, an etp that does not divide tp,
#     etp x ep not dividing the ranks of a stage (at startup and in the dry run), and
#     seq_aux_loss with a micro-batch that does not split into whole sequences over the expert-tensor groups.
# shellcheck disable=SC2086   # the flag lists ($base, $tp, $etp1, $extra) split into words
. "$(dirname "$0")/../lib.sh"
set -f   # the layer list ([1,0,1,1]) is not a file pattern
py=/usr/bin/python3
d=$T_TMP
t_moe_walk
base=$T_MOE
tp="--tensor-model-parallel-size 2 --sequence-parallel"
etp1="$tp --expert-tensor-parallel-size 1"
# save_at_5 NAME CKPT "DIRS" N FLAGS...: a run of N ranks saves iteration 5 into CKPT, whose rank directories are DIRS
save_at_5() {
    local name=$1 ck=$2 want=$3 n=$4
    shift 4
    mt-train -n "$n" "$@" --save "$ck" --exit-interval 5 >/dev/null 2>"$ck.err" || t_fail "$name: save" "$(tail -3 "$ck.err")"
    local dirs
    dirs=$(ls "$ck/iter_0000005" 2>&1 | tr '\n' ' ')
    if [ "$dirs" = "$want " ]; then t_pass "$name checkpoint: $want"
    else t_fail "$name checkpoint directories" "$dirs"; fi
}
# dist_resume NAME CKPT PEER N FLAGS...: a run with the distributed optimizer saved at 5 and resumed gives
# $d/NAME.jsonl (the uninterrupted run) bit for bit, and mp_rank_00's meta.json names a piece in PEER's shard file
dist_resume() {
    local name=$1 ck=$2 peer=$3 n=$4
    shift 4
    mt-train -n "$n" "$@" --use-distributed-optimizer --save "$ck" --exit-interval 5 >/dev/null 2>"$ck.err" &&
        mt-train -n "$n" "$@" --use-distributed-optimizer --load "$ck" --metrics-file "$ck-res.jsonl" >/dev/null 2>"$ck-res.err" ||
        t_fail "$name, distributed optimizer: save and resume" "$(tail -3 "$ck.err" "$ck-res.err")"
    t_moe_check "$name, distributed optimizer, resumed at 5: the uninterrupted run bit for bit" "$ck-res.jsonl" 0 6 "$d/$name.jsonl"
    t_grep "... mp_rank_00's meta.json: its second expert shard in $peer's file" \
        "\"\\.\\./$peer/distrib_optim_000\\.safetensors\"" "$ck/iter_0000005/mp_rank_00/meta.json"
}
mt-train $base --metrics-file "$d/ref.jsonl" >"$d/ref.log" 2>"$d/ref.err" || t_fail "one rank" "$(tail -3 "$d/ref.err")"

# ---- layouts ----
for v in "tp2-ep2-etp2:4:$tp --expert-model-parallel-size 2" \
         "tp2-ep2-etp1:4:$etp1 --expert-model-parallel-size 2" \
         "tp2-etp1:2:$etp1" \
         "tp2-etp1-dist:2:$etp1 --use-distributed-optimizer" \
         "tp2-ep2-etp1-2ranks:2:$etp1 --expert-model-parallel-size 2" \
         "tp2-ep2-etp1-dist:4:$etp1 --expert-model-parallel-size 2 --use-distributed-optimizer" \
         "dp2-tp2-ep2-etp1-dist:8:$etp1 --expert-model-parallel-size 2 --use-distributed-optimizer" \
         "tp2-cp2-ep2-etp1:4:$etp1 --context-parallel-size 2 --expert-model-parallel-size 2" \
         "dp2-tp2-ep2-etp1-overlap:8:$etp1 --expert-model-parallel-size 2 --use-distributed-optimizer --overlap-grad-reduce --overlap-param-gather --ddp-bucket-size 4000" \
         "tp2-pp2-ep2-etp1:8:$etp1 --pipeline-model-parallel-size 2 --expert-model-parallel-size 2"; do
    name=${v%%:*} rest=${v#*:} n=${rest%%:*} extra=${rest#*:}
    t_moe_layout "$name" "$name" "$n" "$d/ref.jsonl" $base $extra
done
t_moe_check "tp2-ep2-etp1: the losses of etp 2 (= tp) on the same ranks" "$d/tp2-ep2-etp1.jsonl" 1e-5 1 "$d/tp2-ep2-etp2.jsonl"
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
t_moe_check "tp2-ep2-etp1 without a shared expert: the one-rank losses" "$d/ns.jsonl" 1e-5 1 "$d/ns-ref.jsonl"
t_grep "... tensor-parallel bytes sent = the ring volume without the MoE layers' activations" \
    'tensor-parallel communication per iteration \| bytes sent: ([0-9]+) \| ring volume of the activations and statistics: \1$' "$d/ns.log"

# ---- seq_aux_loss with the experts whole: each tensor rank's rows are whole sequences, whose statistics it
# places among the micro-batch's before the sum over the tensor (x context) ranks: TP 2 x EP 2, TP 2 x CP 2 x EP 2
# and TP 2 alone give the one-rank run's losses, its seq_load_balancing_loss included (measured 1.2e-7) ----
seqaux="--moe-router-load-balancing-type seq_aux_loss"
mt-train $base $seqaux --metrics-file "$d/seq-ref.jsonl" >/dev/null 2>"$d/seq-ref.err" || t_fail "seq_aux_loss on one rank" "$(tail -3 "$d/seq-ref.err")"
for v in "tp2-ep2-etp1:4:--expert-model-parallel-size 2" "tp2-cp2-ep2-etp1:4:--context-parallel-size 2 --expert-model-parallel-size 2" \
         "tp2-etp1:2:"; do
    name=${v%%:*} rest=${v#*:} n=${rest%%:*} extra=${rest#*:}
    t_moe_layout "seq_aux_loss, $name" "seq-$name" "$n" "$d/seq-ref.jsonl" $base $etp1 $seqaux $extra
done
t_grep "... the iteration line shows seq_load_balancing_loss" '"seq_load_balancing_loss":' "$d/seq-tp2-ep2-etp1.jsonl"

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
# per_layer NAME REF_DIR DIR: DIR's TensorBoard has REF_DIR's per-layer losses and rows per expert to 1e-6
per_layer() {
    if PYTHONPATH=$T_TOP/tests/oracle $py - "$2" "$3" >"$d/tb.out" 2>&1 <<'PYEOF'
import sys
from tfevents import scalars
a, b = scalars(sys.argv[1]), scalars(sys.argv[2])
tags = [t for t in a if t.startswith("moe/")]
assert len(tags) == 3 * (2 + 4), tags
w = max(abs(v - b[t][s]) / abs(v) for t in tags for s, v in a[t].items() if v)
assert w < 1e-6, "worst %g" % w
print("%d tags, worst %.2g" % (len(tags), w))
PYEOF
    then t_pass "$1: every MoE layer's losses and rows per expert as one rank's ($(cat "$d/tb.out"))"
    else t_fail "$1" "$(tail -2 "$d/tb.out")"; fi
}
per_layer "per-layer logging" "$d/tb0" "$d/tb1"
# the same with an expert tensor size between 1 and tp: TP 4 x PP 2 x EP 2, etp 2 (8 ranks; a group's second rank
# routes the rows its first does, which count once)
mt-train -n 2 ${base//--num-query-groups 2/--num-query-groups 4} --pipeline-model-parallel-size 2 --moe-per-layer-logging \
    --tensorboard-dir "$d/tb2" >/dev/null 2>"$d/tb2.err" &&
    mt-train -n 8 ${base//--num-query-groups 2/--num-query-groups 4} --tensor-model-parallel-size 4 --sequence-parallel \
        --expert-tensor-parallel-size 2 --pipeline-model-parallel-size 2 --expert-model-parallel-size 2 --moe-per-layer-logging \
        --tensorboard-dir "$d/tb3" >/dev/null 2>"$d/tb3.err" || t_fail "per-layer logging runs, etp 2" "$(tail -3 "$d/tb2.err" "$d/tb3.err")"
per_layer "per-layer logging, tp 4 x etp 2" "$d/tb2" "$d/tb3"

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
t_plan_as_run "etp 1 dry run" "$d/plan.out" "$d/tp2-ep2-etp1-dist.log"
# a rank's own 32 rows x 2 choices, half of them to the other expert rank: 3 layers x 2 micro-batches x (4 x 32 rows
# x 32 floats x 4 bytes + 2 counts x 4 bytes)
want=$((3 * 2 * (4 * 32 * 32 * 4 + 2 * 4)))
t_grep "... its experts whole and its all-to-all of the rank's own rows ($want bytes)" \
    "2 on each of 2 expert-parallel ranks, each whole on its tensor rank \(--expert-tensor-parallel-size 1\); all-to-all bytes a rank sends per iteration with evenly spread routing: $want\$" "$d/plan.out"

# ---- an expert tensor size between 1 and tp: tp 4, etp 2 (the model with 4 query groups): each expert-tensor group
# of 2 tensor ranks routes its rows, its experts split over the group's two ranks (their outputs partial sums
# there); TP 4 alone, TP 4 x EP 2, with the distributed optimizer, DP 2 x TP 4 x EP 2 with the overlapped buckets,
# TP 4 x CP 2 x EP 2 and TP 4 x PP 2 x EP 2 give the one-rank run's losses to 1e-5 (measured 1.2e-7) ----
base4=${base//--num-query-groups 2/--num-query-groups 4}
tp4="--tensor-model-parallel-size 4 --sequence-parallel"
etp2="$tp4 --expert-tensor-parallel-size 2"
mt-train $base4 --metrics-file "$d/ref4.jsonl" >/dev/null 2>"$d/ref4.err" || t_fail "one rank, 4 query groups" "$(tail -3 "$d/ref4.err")"
for v in "tp4-etp2:4:" "tp4-ep2-etp2:4:--expert-model-parallel-size 2" "tp4-etp2-dist:4:--use-distributed-optimizer" \
         "dp2-tp4-ep2-etp2-overlap:8:--expert-model-parallel-size 2 --use-distributed-optimizer --overlap-grad-reduce --overlap-param-gather --ddp-bucket-size 4000" \
         "tp4-cp2-ep2-etp2:8:--context-parallel-size 2 --expert-model-parallel-size 2" \
         "tp4-pp2-ep2-etp2:8:--pipeline-model-parallel-size 2 --expert-model-parallel-size 2"; do
    name=${v%%:*} rest=${v#*:} n=${rest%%:*} extra=${rest#*:}
    t_moe_layout "$name" "$name" "$n" "$d/ref4.jsonl" $base4 $etp2 $extra
done
# the bytes a tensor rank sends on 4 tensor ranks: exactly its share of mt's ring, whose chunks of the router's
# statistics (2 x 4 + 1 floats) and of the grad norm (a double) are uneven
for name in tp4-etp2 tp4-ep2-etp2 tp4-cp2-ep2-etp2 tp4-pp2-ep2-etp2; do
    t_grep "$name: tensor-parallel bytes sent = the ring volume of what the model exchanges" \
        'tensor-parallel communication per iteration \| bytes sent: ([0-9]+) \| ring volume of the activations and statistics: \1$' "$d/$name.log"
done
# seq_aux_loss: each expert-tensor group's rows whole sequences, placed by its first rank (measured 6.3e-8)
mt-train $base4 $seqaux --metrics-file "$d/seq-ref4.jsonl" >/dev/null 2>"$d/seq-ref4.err" ||
    t_fail "seq_aux_loss on one rank, 4 query groups" "$(tail -3 "$d/seq-ref4.err")"
for v in "tp4-ep2-etp2:4:--expert-model-parallel-size 2" "tp4-cp2-ep2-etp2:8:--context-parallel-size 2 --expert-model-parallel-size 2"; do
    name=${v%%:*} rest=${v#*:} n=${rest%%:*} extra=${rest#*:}
    t_moe_layout "seq_aux_loss, $name" "seq-$name" "$n" "$d/seq-ref4.jsonl" $base4 $etp2 $seqaux $extra
done
# the dry run of TP 4 x EP 2 x etp 2 with the distributed optimizer: rank 0's parameters and memory line as the run's
# (the dense part of tp 4 plus half of each of its 2 experts), and the all-to-all of its group's 32 rows x 2 choices,
# half of them to the other expert rank: 3 layers x 4 micro-batches x (4 x 32 rows x 32 floats x 4 bytes + 2 x 4)
mt-train $base4 $etp2 --expert-model-parallel-size 2 --use-distributed-optimizer --dry-run --world-size 4 >"$d/plan4.out" 2>&1 &&
    mt-train -n 4 $base4 $etp2 --expert-model-parallel-size 2 --use-distributed-optimizer --train-iters 1 --eval-iters 0 \
        --lr-warmup-iters 0 >"$d/run4.out" 2>&1 || t_fail "etp 2: dry run and run" "$(tail -2 "$d/plan4.out" "$d/run4.out")"
t_plan_as_run "etp 2 dry run" "$d/plan4.out" "$d/run4.out"
want=$((3 * 4 * (4 * 32 * 32 * 4 + 2 * 4)))
t_grep "... each expert split over 2 tensor ranks, the all-to-all of its group's rows ($want bytes)" \
    "2 on each of 2 expert-parallel ranks, each split over 2 tensor ranks \(--expert-tensor-parallel-size 2\); all-to-all bytes a rank sends per iteration with evenly spread routing: $want\$" "$d/plan4.out"
# its checkpoints: TP 4 x EP 2 writes mp_rank_00_000, 01_000, 02_001 and 03_001 (each tensor rank's pair), resumes bit
# for bit and on one rank and on etp 1 x EP 4; TP 4 with the distributed optimizer names the expert shard of the same
# expert tensor slice in the other group's directory (mp_rank_02 for mp_rank_00), resumes bit for bit
ck4=$d/ck4
save_at_5 tp4-ep2-etp2 "$ck4" "mp_rank_00_000 mp_rank_01_000 mp_rank_02_001 mp_rank_03_001" 4 $base4 $etp2 --expert-model-parallel-size 2
for v in "itself:4:$etp2 --expert-model-parallel-size 2:0:$d/tp4-ep2-etp2.jsonl" "one rank:1::1e-5:$d/ref4.jsonl" \
         "etp 1 x EP 4:4:$tp4 --expert-tensor-parallel-size 1 --expert-model-parallel-size 4:1e-5:$d/ref4.jsonl"; do
    name=${v%%:*} rest=${v#*:} n=${rest%%:*} rest=${rest#*:} extra=${rest%%:*} rest=${rest#*:} tol=${rest%%:*} ref=${rest#*:}
    rm -f "$d/ck4-x.jsonl"
    if mt-train -n "$n" $base4 $extra --load "$ck4" --metrics-file "$d/ck4-x.jsonl" >/dev/null 2>"$d/ck4-x.err"; then
        t_moe_check "tp4-ep2-etp2 checkpoint resumed on $name" "$d/ck4-x.jsonl" "$tol" 6 "$ref"
    else t_fail "tp4-ep2-etp2 checkpoint on $name" "$(tail -3 "$d/ck4-x.err")"; fi
done
# resharded offline to TP 4 x etp 2 without expert parallelism (every tensor rank's slice of every expert), resumed
if mt-ckpt-convert --load "$ck4" --save "$d/ck4r" --target-tensor-parallel-size 4 --target-expert-tensor-parallel-size 2 \
        >/dev/null 2>"$d/ck4r.err" &&
    mt-train -n 4 $base4 $etp2 --load "$d/ck4r" --metrics-file "$d/ck4r.jsonl" >/dev/null 2>>"$d/ck4r.err"; then
    t_moe_check "tp4-ep2-etp2 checkpoint resharded to TP 4 x etp 2 by mt-ckpt-convert, resumed: the one-rank losses" \
        "$d/ck4r.jsonl" 1e-5 6 "$d/ref4.jsonl"
else t_fail "tp4-ep2-etp2 checkpoint resharded to TP 4 x etp 2" "$(tail -3 "$d/ck4r.err")"; fi
# Megatron-LM's checkpoint of that layout (--to megatron, TP 4 x EP 2 x etp 2): each rank file's experts are the
# slices of the whole ones (torch against the one-rank conversion: SwiGLU's gate and up rows of the slice,
# the second product's columns), and --from megatron gives mt's own resharding byte for byte, from every
# pair's files and from those of the pairs a 4-rank run holds
lay4="--target-tensor-parallel-size 4 --target-expert-model-parallel-size 2 --target-expert-tensor-parallel-size 2"
bad=
if mt-ckpt-convert --load "$ck4" --to megatron --megatron-keys mcore --out "$d/meg4" $lay4 >/dev/null 2>"$d/meg4.err" &&
    mt-ckpt-convert --load "$ck4" --save "$d/rs4" $lay4 >/dev/null 2>>"$d/meg4.err" &&
    mt-ckpt-convert --load "$ck4" --save "$d/one4" --target-tensor-parallel-size 1 >/dev/null 2>>"$d/meg4.err" &&
    mt-ckpt-convert --from megatron --load "$d/meg4" --save "$d/rt4" $lay4 >/dev/null 2>>"$d/meg4.err" &&
    cp -a "$d/meg4" "$d/meg4h" && rm -r "$d/meg4h/iter_0000005/mp_rank_00_001" "$d/meg4h/iter_0000005/mp_rank_01_001" \
        "$d/meg4h/iter_0000005/mp_rank_02_000" "$d/meg4h/iter_0000005/mp_rank_03_000" &&
    mt-ckpt-convert --from megatron --load "$d/meg4h" --save "$d/rt4h" $lay4 >/dev/null 2>>"$d/meg4.err"; then
    for r in 00_000 00_001 01_000 01_001 02_000 02_001 03_000 03_001; do
        for f in model optim; do
            for rt in rt4 rt4h; do
                cmp -s "$d/$rt/iter_0000005/mp_rank_$r/$f.safetensors" "$d/rs4/iter_0000005/mp_rank_$r/$f.safetensors" ||
                    bad="$bad $rt/mp_rank_$r/$f"
            done
        done
    done
else bad="$(tail -2 "$d/meg4.err")"; fi
if [ -z "$bad" ]; then t_pass "tp4-ep2-etp2 to Megatron and back (every pair, and the held pairs): mt's resharding byte for byte"
else t_fail "tp4-ep2-etp2 to Megatron and back" "$bad"; fi
if $py - "$d/one4/iter_0000005/mp_rank_00/model.safetensors" "$d/meg4/iter_0000005" >"$d/meg4.out" 2>&1 <<'PYEOF'
import json, struct, sys
import numpy as np, torch
b = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", b[:8])[0]
h = json.loads(b[8:8 + n])
whole = {k: np.frombuffer(b[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]], np.float32).reshape(v["shape"])
         for k, v in h.items() if k != "__metadata__"}
F, etp, checked = 24, 2, 0
for t in range(4):
    for x in range(2):
        ck = torch.load("%s/mp_rank_%02d_%03d/model_optim_rng.pt" % (sys.argv[2], t, x), weights_only=False)
        assert (ck["args"].expert_tensor_parallel_size, ck["args"].expert_model_parallel_size) == (2, 2), vars(ck["args"])
        y, f = t % etp, F // etp
        for l in (0, 2, 3):
            for j in range(2):
                pre = "language_model.encoder.layers.%d.mlp.experts.local_experts.%d." % (l, 2 * x + j)
                w1, w2 = whole[pre + "dense_h_to_4h.weight"], whole[pre + "dense_4h_to_h.weight"]
                m = "decoder.layers.%d.mlp.experts.local_experts.%d." % (l, j)
                got1, got2 = ck["model"][m + "linear_fc1.weight"].numpy(), ck["model"][m + "linear_fc2.weight"].numpy()
                assert np.array_equal(got1, np.concatenate([w1[y * f:(y + 1) * f], w1[F + y * f:F + (y + 1) * f]])), (t, x, l, j)
                assert np.array_equal(got2, w2[:, y * f:(y + 1) * f]), (t, x, l, j)
                checked += 2
print("%d expert slices" % checked)
PYEOF
then t_pass "... each Megatron rank file's experts the whole ones' slices ($(cat "$d/meg4.out"))"
else t_fail "... each Megatron rank file's experts the whole ones' slices" "$(tail -3 "$d/meg4.out")"; fi
dist_resume tp4-etp2-dist "$d/ck4d" mp_rank_02 4 $base4 $etp2

# ---- token dropping (--moe-expert-capacity-factor 1.0) with an expert tensor size below tp: a capacity holds in each
# tensor rank's shard of the positions (Megatron's, whatever the expert tensor size), while an expert-tensor group
# routes whole sequences: the micro-batch's choices are gathered over the tensor ranks and dropped as with the
# experts split over tp. TP 2 x etp 1, TP 2 x EP 2 x etp 1, TP 4 x etp 2, TP 4 x EP 2 x etp 2 (the position policy,
# padded to the capacity) and TP 4 x CP 2 x EP 2 x etp 2 give the losses of the same layout with etp = tp to 1e-5
# (measured 1.2e-7), which differ from the dropless ones; a tensor rank sends the ring volume with the gathers,
# and the dry run's memory line is the run's ----
cap="--moe-expert-capacity-factor 1.0"
pad="--moe-token-drop-policy position --moe-pad-expert-input-to-capacity"
for v in "cap-tp2:2:$base:$tp $cap" "cap-tp4:4:$base4:$tp4 $cap" "cap-tp4-pad:4:$base4:$tp4 $cap $pad" \
         "cap-tp4-cp2:8:$base4:$tp4 $cap --context-parallel-size 2"; do
    name=${v%%:*} rest=${v#*:} n=${rest%%:*} rest=${rest#*:} b=${rest%%:*} extra=${rest#*:}
    mt-train -n "$n" $b $extra --metrics-file "$d/$name.jsonl" >/dev/null 2>"$d/$name.err" || t_fail "$name" "$(tail -3 "$d/$name.err")"
done
for v in "cap-tp2-etp1:2:cap-tp2:$base:$etp1 $cap" "cap-tp2-ep2-etp1:4:cap-tp2:$base:$etp1 $cap --expert-model-parallel-size 2" \
         "cap-tp4-etp2:4:cap-tp4:$base4:$etp2 $cap" "cap-tp4-ep2-etp2-pad:4:cap-tp4-pad:$base4:$etp2 $cap $pad --expert-model-parallel-size 2" \
         "cap-tp4-cp2-ep2-etp2:8:cap-tp4-cp2:$base4:$etp2 $cap --context-parallel-size 2 --expert-model-parallel-size 2"; do
    name=${v%%:*} rest=${v#*:} n=${rest%%:*} rest=${rest#*:} ref=${rest%%:*} rest=${rest#*:} b=${rest%%:*} extra=${rest#*:}
    if mt-train -n "$n" $b $extra --metrics-file "$d/$name.jsonl" >"$d/$name.log" 2>"$d/$name.err"; then
        t_moe_check "$name: the capacity's losses with etp = tp ($ref)" "$d/$name.jsonl" 1e-5 1 "$d/$ref.jsonl"
    else t_fail "$name" "$(tail -3 "$d/$name.err")"; fi
done
if ! /usr/bin/python3 - "$d/cap-tp2-etp1.jsonl" "$d/tp2-etp1.jsonl" <<'PYEOF' >"$d/cap.out" 2>&1
import json, sys
a, b = ([r["lm_loss"] for r in map(json.loads, open(p)) if r["type"] == "train"] for p in sys.argv[1:])
assert len(a) == len(b) == 10 and max(abs(x - y) for x, y in zip(a, b)) > 1e-4, (a, b)
PYEOF
then t_fail "cap-tp2-etp1: tokens dropped" "the dropless losses: $(tail -1 "$d/cap.out")"
else t_pass "cap-tp2-etp1: other losses than dropless (tokens dropped)"; fi
for name in cap-tp2-etp1 cap-tp4-etp2; do
    t_grep "$name: tensor-parallel bytes sent = the ring volume, the choices' gathers included" \
        'tensor-parallel communication per iteration \| bytes sent: ([0-9]+) \| ring volume of the activations and statistics: \1$' "$d/$name.log"
done
mt-train $base4 $etp2 $cap $pad --expert-model-parallel-size 2 --dry-run --world-size 4 >"$d/plan-cap.out" 2>&1 ||
    t_fail "token dropping, etp 2: dry run" "$(tail -2 "$d/plan-cap.out")"
t_plan_as_run "token dropping, etp 2: dry run" "$d/plan-cap.out" "$d/cap-tp4-ep2-etp2-pad.log"

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
refused "etp 3 with tp 2 (not a divisor)" \
    'expert-tensor-parallel-size \(3\) must divide --tensor-model-parallel-size \(2\)' 0 \
    $tp --expert-tensor-parallel-size 3 --dry-run
refused "etp 2 of tp 4 with seq_aux_loss and a micro-batch of 1 sequence on 2 groups" \
    'seq_aux_loss with --expert-tensor-parallel-size 2 needs --micro-batch-size \(1\) divisible by --tensor-model-parallel-size / --expert-tensor-parallel-size \(2\)' 0 \
    ${base4//--micro-batch-size 2/--micro-batch-size 1} $tp4 --expert-tensor-parallel-size 2 --moe-router-load-balancing-type seq_aux_loss --dry-run
refused "etp 1 x ep 4 on a stage of 6 ranks (at startup)" \
    'expert-tensor-parallel-size \(1\) x --expert-model-parallel-size \(4\) does not divide the ranks of a pipeline stage 6' 6 \
    $etp1 --expert-model-parallel-size 4 --global-batch-size 12
refused "... and in the dry run" \
    'expert-tensor-parallel-size \(1\) x --expert-model-parallel-size \(4\) does not divide the ranks of a pipeline stage 6' 0 \
    $etp1 --expert-model-parallel-size 4 --global-batch-size 12 --dry-run --world-size 6
refused "etp 1 with seq_aux_loss and a micro-batch of 1 sequence on 2 tensor ranks" \
    'seq_aux_loss with --expert-tensor-parallel-size 1 needs --micro-batch-size \(1\) divisible by --tensor-model-parallel-size / --expert-tensor-parallel-size \(2\)' 2 \
    ${base//--micro-batch-size 2/--micro-batch-size 1} $etp1 --moe-router-load-balancing-type seq_aux_loss

# ---- checkpoints with the experts whole: only the (tensor rank, expert rank) pairs some rank holds are
# written, as Megatron's (TP 2 x EP 2 on 4 ranks: mp_rank_00_000 and mp_rank_01_001) ----
ck=$d/ck
save_at_5 tp2-ep2-etp1 "$ck" "mp_rank_00_000 mp_rank_01_001" 4 $base $etp1 --expert-model-parallel-size 2
mt-train -n 4 $base $etp1 --expert-model-parallel-size 2 --load "$ck" --metrics-file "$d/ck-res.jsonl" >/dev/null 2>"$d/ck-res.err" ||
    t_fail "tp2-ep2-etp1: resume" "$(tail -3 "$d/ck-res.err")"
t_moe_check "tp2-ep2-etp1 resumed at 5: the uninterrupted run bit for bit" "$d/ck-res.jsonl" 0 6 "$d/tp2-ep2-etp1.jsonl"
# on other layouts: the experts split again (etp 2), spread over 4 expert ranks, or all on one rank (measured
# worst 6.3e-8)
for v in "one rank:1:" "etp 2 (= tp):4:$tp --expert-model-parallel-size 2" "EP 4:4:$etp1 --expert-model-parallel-size 4"; do
    name=${v%%:*} rest=${v#*:} n=${rest%%:*} extra=${rest#*:}
    rm -f "$d/ck-x.jsonl"
    if mt-train -n "$n" $base $extra --load "$ck" --metrics-file "$d/ck-x.jsonl" >/dev/null 2>"$d/ck-x.err"; then
        t_moe_check "tp2-ep2-etp1 checkpoint resumed on $name: the one-rank losses" "$d/ck-x.jsonl" 1e-5 6
    else t_fail "tp2-ep2-etp1 checkpoint on $name" "$(tail -3 "$d/ck-x.err")"; fi
done
if mt-eval --load "$ck" --data-path "$d/data" --eval-iters 2 >"$d/ck-eval.out" 2>"$d/ck-eval.err" &&
    grep -Eq 'lm loss value: [0-9]\.[0-9]+E\+00' "$d/ck-eval.out"; then t_pass "mt-eval of the tp2-ep2-etp1 checkpoint"
else t_fail "mt-eval of the tp2-ep2-etp1 checkpoint" "$(tail -2 "$d/ck-eval.err")"; fi

# the distributed optimizer over TP 2 alone: the experts' shards are over the two tensor ranks, so each rank
# directory's meta.json names a piece in the other's shard file; resumed bit for bit, and on one rank
ckd=$d/ckd
dist_resume tp2-etp1-dist "$ckd" mp_rank_01 2 $base $etp1
mt-train $base --load "$ckd" --metrics-file "$d/ckd-1.jsonl" >/dev/null 2>"$d/ckd-1.err" ||
    t_fail "tp2-etp1 distributed checkpoint on one rank" "$(tail -3 "$d/ckd-1.err")"
t_moe_check "... resumed on one rank: the one-rank losses" "$d/ckd-1.jsonl" 1e-5 6

# with stages too (TP 2 x PP 2 x EP 2 on 8 ranks, --async-save): mp_rank_TT_PPP_EEE directories of the held
# pairs, the first mp_rank_00_000_000; resumed bit for bit, and on one rank
ckp=$d/ckp
save_at_5 tp2-pp2-ep2-etp1 "$ckp" "mp_rank_00_000_000 mp_rank_00_001_000 mp_rank_01_000_001 mp_rank_01_001_001" 8 $base $etp1 \
    --pipeline-model-parallel-size 2 --expert-model-parallel-size 2 --async-save
mt-train -n 8 $base $etp1 --pipeline-model-parallel-size 2 --expert-model-parallel-size 2 --load "$ckp" \
    --metrics-file "$d/ckp-res.jsonl" >/dev/null 2>"$d/ckp-res.err" || t_fail "tp2-pp2-ep2-etp1: resume" "$(tail -3 "$d/ckp-res.err")"
t_moe_check "tp2-pp2-ep2-etp1 resumed at 5: the uninterrupted run bit for bit" "$d/ckp-res.jsonl" 0 6 "$d/tp2-pp2-ep2-etp1.jsonl"
mt-train $base --load "$ckp" --metrics-file "$d/ckp-1.jsonl" >/dev/null 2>"$d/ckp-1.err" ||
    t_fail "tp2-pp2-ep2-etp1 checkpoint on one rank" "$(tail -3 "$d/ckp-1.err")"
t_moe_check "... resumed on one rank: the one-rank losses" "$d/ckp-1.jsonl" 1e-5 6

# mt-ckpt-convert: to whole experts on 4 expert ranks (every pair written), and to experts split over the tensor
# ranks; each resumed on its layout gives the one-rank losses
for v in "ckw:4:--target-expert-model-parallel-size 4 --target-expert-tensor-parallel-size 1:$etp1 --expert-model-parallel-size 4" \
         "cks:4:--target-expert-model-parallel-size 2:$tp --expert-model-parallel-size 2"; do
    name=${v%%:*} rest=${v#*:} n=${rest%%:*} rest=${rest#*:} conv=${rest%%:*} run=${rest#*:}
    if mt-ckpt-convert --load "$ck" --save "$d/$name" --target-tensor-parallel-size 2 $conv >/dev/null 2>"$d/$name.err" &&
        mt-train -n "$n" $base $run --load "$d/$name" --metrics-file "$d/$name.jsonl" >/dev/null 2>>"$d/$name.err"; then
        t_moe_check "converted with $conv, resumed: the one-rank losses" "$d/$name.jsonl" 1e-5 6
    else t_fail "converted with $conv" "$(tail -3 "$d/$name.err")"; fi
done
# a target expert tensor size that does not divide the target tensor size: one line naming both flags, before
# anything is created
t_fails "mt-ckpt-convert --target-expert-tensor-parallel-size 3 with --target-tensor-parallel-size 2" \
    mt-ckpt-convert --load "$ck" --save "$d/ck-bad" --target-tensor-parallel-size 2 --target-expert-tensor-parallel-size 3
t_grep "... one line naming both flags" \
    '^mt-ckpt-convert: --target-expert-tensor-parallel-size 3 must divide --target-tensor-parallel-size 2$' "$T_TMP/err"
if [ -e "$d/ck-bad" ]; then t_fail "... nothing created" "$(ls -a "$d/ck-bad")"; else t_pass "... nothing created"; fi
n=$(ls "$d/ckw/iter_0000005" 2>/dev/null | wc -l)
if [ "$n" = 8 ]; then t_pass "... whole experts on 4 expert ranks: all 8 (tensor rank, expert rank) directories"
else t_fail "... whole experts on 4 expert ranks: directories" "$n"; fi
mt-ckpt-convert --load "$d/cks" --save "$d/ckb" --target-tensor-parallel-size 2 --target-expert-model-parallel-size 2 \
    --target-expert-tensor-parallel-size 1 >/dev/null 2>"$d/ckb.err" || t_fail "converted back to whole experts" "$(tail -2 "$d/ckb.err")"
if $py - "$ck/iter_0000005/mp_rank_01_001/model.safetensors" "$d/ckb/iter_0000005/mp_rank_01_001/model.safetensors" \
    >"$d/ckb.out" 2>&1 <<'PYEOF'
import json, struct, sys
def tensors(p):
    b = open(p, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    h = json.loads(b[8:8 + n])
    return {k: b[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]] for k, v in h.items() if k != "__metadata__"}
a, b = tensors(sys.argv[1]), tensors(sys.argv[2])
assert a.keys() == b.keys(), sorted(set(a) ^ set(b))
bad = [k for k in a if a[k] != b[k]]
assert not bad, bad[:3]
print("%d tensors" % len(a))
PYEOF
then t_pass "... and back to whole experts: mp_rank_01_001's model file holds the saved tensors bit for bit ($(cat "$d/ckb.out"))"
else t_fail "... and back to whole experts" "$(tail -2 "$d/ckb.out")"; fi

# --to megatron reads whole tensors whatever the layout: the etp 1 checkpoint and its etp 2 conversion give the same
# model and optimizer state (torch.load; the args Namespace aside, whose fields come in another order)
if mt-ckpt-convert --load "$ck" --to megatron --megatron-keys mcore --out "$d/meg1" --target-tensor-parallel-size 2 >/dev/null 2>"$d/meg.err" &&
    mt-ckpt-convert --load "$d/cks" --to megatron --megatron-keys mcore --out "$d/meg2" --target-tensor-parallel-size 2 >/dev/null 2>>"$d/meg.err" &&
    $py - "$d/meg1/iter_0000005" "$d/meg2/iter_0000005" >"$d/meg.out" 2>&1 <<'PYEOF'
import sys, torch
n = 0
def same(x, y, p):
    global n
    if isinstance(x, dict):
        assert x.keys() == y.keys(), (p, sorted(set(x) ^ set(y)))
        for k in x: same(x[k], y[k], p + "/" + str(k))
    elif isinstance(x, (list, tuple)):
        assert len(x) == len(y), p
        for i, (u, v) in enumerate(zip(x, y)): same(u, v, "%s/%d" % (p, i))
    elif torch.is_tensor(x):
        assert torch.equal(x, y), p
        n += 1
for r in ("mp_rank_00", "mp_rank_01"):
    a, b = (torch.load("%s/%s/model_optim_rng.pt" % (d, r), weights_only=False) for d in sys.argv[1:3])
    same(a["model"], b["model"], r + "/model")
    same(a["optimizer"], b["optimizer"], r + "/optimizer")
print("%d tensors" % n)
PYEOF
then t_pass "--to megatron of the etp 1 checkpoint: its etp 2 conversion's model and optimizer state ($(cat "$d/meg.out"))"
else t_fail "--to megatron of the etp 1 checkpoint" "$(tail -3 "$d/meg.err" "$d/meg.out")"; fi

# damaged: tensor rank 1's only directory gone; an expert tensor size above the tensor size: one line
# naming what is wrong
rm -rf "$d/ckm" && cp -r "$ck" "$d/ckm" && rm -rf "$d/ckm/iter_0000005/mp_rank_01_001"
t_fails "a tp2-ep2-etp1 checkpoint without mp_rank_01_001" mt-train $base --load "$d/ckm"
t_grep "... names the directory and the tensor rank missing" \
    '^mt-train: .*/ckm/iter_0000005: missing shard: no directory of tensor rank 1 \(mp_rank_01_000 or another expert rank.s\)$' "$T_TMP/err"
rm -rf "$d/ckm" && cp -r "$ck" "$d/ckm"
for r in 00_000 01_001; do
    $py -c 'import json,sys; m=json.load(open(sys.argv[1])); m["args"]["expert-tensor-parallel-size"]=3; json.dump(m,open(sys.argv[1],"w"))' \
        "$d/ckm/iter_0000005/mp_rank_$r/meta.json"
done
t_fails "a checkpoint whose expert tensor size is 3 with tp 2" mt-train $base --load "$d/ckm"
t_grep "... names the file and the value" '^mt-train: .*/ckm.*meta.json: expert-tensor-parallel-size 3 out of range$' "$T_TMP/err"
