#!/usr/bin/env bash
# train-moe.sh: mt-train with a mixture of experts (--num-experts) on CPU ranks:
#   - a LLaMA-style model of 4 layers, MoE in layers 0, 2 and 3 (--moe-layer-freq "[1,0,1,1]") with 4
#     experts, top 2, the load-balancing loss and z-loss, a shared expert with its gate, dropout on: data
#     parallelism (2 ranks), two pipeline stages, the distributed optimizer, DP 2 x PP 2 with it, tensor
#     parallelism (2 ranks, the experts' and the shared expert's matrices split as the MLP's) with and
#     without sequence parallelism, DP 2 x TP 2 + SP with the distributed optimizer, TP 2 x PP 2, and full
#     recomputation give the one-rank run's 20 iterations of lm loss, grad norm, params norm,
#     load_balancing_loss and z_loss and its validation losses (10 iterations) to 1e-5 relative (measured: at
#     most 1.4e-7; recomputation bit for bit; the params norm counts every parameter once over the tensor
#     ranks, stages and expert ranks, as Megatron's); a tensor rank sends exactly the ring volume of what the model exchanges (with the sum of the
#     routing weights' gradients of each MoE layer);
#   - the iteration line shows load_balancing_loss and z_loss after the lm loss, as Megatron's;
#   - a run stopped at iteration 10 and resumed gives the uninterrupted run's iterations 11-20 bit for bit,
#     on one rank and on two stages; the checkpoint holds exactly the router, the experts' and the shared expert's tensors of the
#     MoE layers and the dense MLP of layer 1;
#   - expert parallelism (--expert-model-parallel-size: the experts split over consecutive data-parallel
#     ranks, the tokens exchanged by all-to-all, the experts' gradients summed over the ranks holding the
#     same ones): EP 2, EP 4, EP 2 x TP 2 + SP, EP 2 x DP 2 with the distributed optimizer (the dense
#     parameters' moments sharded over the 4 data-parallel ranks, the experts' over the 2 ranks holding
#     them, Megatron's two buffers) and EP 2 x PP 2 give the one-rank losses as above; padded to
#     capacity, a rank sends exactly the volume of its routed rows; the dry run's parameters and memory line
#     of EP 2 are the run's; its checkpoint has Megatron's mp_rank_00_000 / _001 directories, resumes bit for
#     bit on EP 2 and with the one-rank losses on one rank and on EP 4 (also after mt-ckpt-convert
#     --target-expert-model-parallel-size 4), and mt-eval reads it; EP 2 x DP 2 with the distributed
#     optimizer saves each rank's shard in its own expert rank's directory (every directory's meta.json
#     says where each piece of its buffer lies), resumes bit for bit (fp32 with --async-save, bf16 with the
#     optimizer's own fp32 master), and with the one-rank losses on one rank; with --overlap-grad-reduce
#     and --overlap-param-gather the experts' buckets (over the 2 ranks holding them) are reduced during
#     the backward passes and gathered before the layers that read them, as the dense ones, and the run is
#     the one without overlap bit for bit;
#   - TensorBoard (two stages, --moe-per-layer-logging): load_balancing_loss and z_loss, and each MoE
#     layer's (moe/..._layer_L, only the MoE layers) whose mean is the logged value, and the rows per expert
#     of each layer summing to the step's tokens x top-k;
#   - token dropping: --moe-expert-capacity-factor 0.5 changes the losses (tokens are dropped), padding the
#     experts to their capacity does not change a bit, nor with TP 2 + SP (a capacity per shard);
#   - mt-eval runs the MoE checkpoint;
#   - flags: MoE without --disable-bias-linear, top-k above the experts, an MoE flag without --num-experts,
#     a layer list of the wrong length, padding without a capacity, expert parallelism over experts it does
#     not divide, and an expert tensor-parallel size of 1 under tp 2 without --sequence-parallel (etp = tp,
#     Megatron's default, is accepted: the tp2-sp layout gives it; etp 1 is train-moe-etp.sh's) are refused
#     naming the flag. (Token dropping with
#     sequence parallelism, a capacity per shard, is model-moe-torch.sh's.)
. "$(dirname "$0")/../lib.sh"
set -f   # the layer lists ([1,0,1,1]) are not file patterns
py=/usr/bin/python3
d=$T_TMP
t_moe_walk
base=$T_MOE
# shellcheck disable=SC2086
mt-train $base --metrics-file "$d/ref.jsonl" >"$d/ref.log" 2>"$d/ref.err" || t_fail "one rank" "$(tail -3 "$d/ref.err")"
t_grep "the iteration line: lm loss, load_balancing_loss, z_loss" \
    '\| lm loss: [0-9.E+-]+ \| load_balancing_loss: [0-9.E+-]+ \| z_loss: [0-9.E+-]+ \| loss scale' "$d/ref.log"

# ---- layouts ----
for v in "dp2:2:" "pp2:2:--pipeline-model-parallel-size 2" "dp2-dist:2:--use-distributed-optimizer" \
         "dp2-pp2-dist:4:--pipeline-model-parallel-size 2 --use-distributed-optimizer" \
         "tp2:2:--tensor-model-parallel-size 2" "tp2-sp:2:--tensor-model-parallel-size 2 --sequence-parallel --expert-tensor-parallel-size 2" \
         "dp2-tp2-sp-dist:4:--tensor-model-parallel-size 2 --sequence-parallel --use-distributed-optimizer" \
         "tp2-pp2:4:--tensor-model-parallel-size 2 --pipeline-model-parallel-size 2" \
         "ep2:2:--expert-model-parallel-size 2" "ep4:4:--expert-model-parallel-size 4" \
         "ep2-tp2-sp:4:--expert-model-parallel-size 2 --tensor-model-parallel-size 2 --sequence-parallel" \
         "ep2-dp2-dist:4:--expert-model-parallel-size 2 --use-distributed-optimizer" \
         "ep2-pp2:4:--expert-model-parallel-size 2 --pipeline-model-parallel-size 2"; do
    name=${v%%:*} rest=${v#*:} n=${rest%%:*} extra=${rest#*:}
    # shellcheck disable=SC2086
    t_moe_layout "$name" "$name" "$n" "$d/ref.jsonl" $base $extra
done
# the bytes a tensor rank sends: the dense exchanges and an MoE layer's sum of its routing weights' gradients
for name in tp2 tp2-sp dp2-tp2-sp-dist tp2-pp2; do
    t_grep "$name: tensor-parallel bytes sent = the ring volume of what the model exchanges" \
        'tensor-parallel communication per iteration \| bytes sent: ([0-9]+) \| ring volume of the activations and statistics: \1$' "$d/$name.log"
done
# shellcheck disable=SC2086
mt-train $base --recompute-granularity full --recompute-method uniform --recompute-num-layers 2 \
    --metrics-file "$d/rc.jsonl" >"$d/rc.log" 2>"$d/rc.err" || t_fail "recompute" "$(tail -3 "$d/rc.err")"
t_moe_check "full recomputation: the same bits" "$d/rc.jsonl" 0

# the dry run's plan of EP 2 (2 ranks): rank 0's parameters and memory line as the real run's
# shellcheck disable=SC2086
mt-train $base --expert-model-parallel-size 2 --dry-run --world-size 2 >"$d/plan.out" 2>&1 || t_fail "dry run" "$(tail -2 "$d/plan.out")"
t_plan_as_run "EP 2 dry run" "$d/plan.out" "$d/ep2.log"
t_grep "... and it names the experts of each rank" '> 3 MoE layers of 4 experts \(top 2\), 2 on each of 2 expert-parallel ranks' "$d/plan.out"

# expert parallelism's traffic: with every expert padded to its capacity (ceil(64 tokens x 2 / 4 experts x
# 1.0) = 32 rows from each rank), a rank of EP 2 (DP 4: one micro-batch each) sends per MoE layer the other
# rank's 2 experts their 2 x 32 rows of 32 floats four times (the inputs and the outputs back, their
# gradients likewise) and its 2 counts once: 3 layers x (4 x 64 x 32 x 4 + 2 x 4) bytes, and per step the
# experts' share of the grad norm (a double, a two-rank ring)
pad="--moe-expert-capacity-factor 1.0 --moe-pad-expert-input-to-capacity"
# shellcheck disable=SC2086
mt-train $base $pad --metrics-file "$d/pad1.jsonl" >"$d/pad1.log" 2>"$d/pad1.err" &&
    mt-train -n 4 $base $pad --expert-model-parallel-size 2 --metrics-file "$d/pad-ep.jsonl" >"$d/pad-ep.log" 2>"$d/pad-ep.err" ||
    t_fail "padded runs" "$(tail -n 3 "$d/pad1.err" "$d/pad-ep.err")"
t_moe_check "EP 2 (4 ranks), padded to capacity: the one-rank losses" "$d/pad-ep.jsonl" 1e-5 1 "$d/pad1.jsonl"
want=$((3 * (4 * 64 * 32 * 4 + 2 * 4) + 8))
t_grep "EP 2 (4 ranks): all-to-all bytes per step = the routed rows' volume ($want)" \
    "expert-parallel communication per iteration \| bytes sent: $want\$" "$d/pad-ep.log"

# ---- checkpoints ----
# shellcheck disable=SC2086
mt-train $base --save "$d/ck" --exit-interval 5 >/dev/null 2>"$d/ck.err" || t_fail "save" "$(tail -3 "$d/ck.err")"
# shellcheck disable=SC2086
mt-train $base --load "$d/ck" --save "$d/ck" --metrics-file "$d/res.jsonl" >/dev/null 2>"$d/res.err" ||
    t_fail "resume" "$(tail -3 "$d/res.err")"
t_moe_check "resumed at 5: iterations 6-10 bit for bit" "$d/res.jsonl" 0 6
# shellcheck disable=SC2086
mt-train -n 2 $base --pipeline-model-parallel-size 2 --save "$d/ckp" --exit-interval 5 >/dev/null 2>"$d/ckp.err" &&
    mt-train -n 2 $base --pipeline-model-parallel-size 2 --load "$d/ckp" --metrics-file "$d/resp.jsonl" >/dev/null 2>"$d/resp.err" ||
    t_fail "two stages: save and resume" "$(tail -3 "$d/ckp.err" "$d/resp.err")"
t_moe_check "two stages resumed at 5: the uninterrupted two-stage run bit for bit" "$d/resp.jsonl" 0 6 "$d/pp2.jsonl"
if $py - "$d/ck/iter_0000010/mp_rank_00/model.safetensors" >"$d/names.out" 2>&1 <<'PYEOF'
import json, struct, sys
f = open(sys.argv[1], "rb")
n = struct.unpack("<Q", f.read(8))[0]
names = {k for k in json.loads(f.read(n)) if k != "__metadata__"}
pre = "language_model.encoder.layers."
mlp = {k for k in names if ".mlp." in k}
want = {pre + "1.mlp.dense_h_to_4h.weight", pre + "1.mlp.dense_4h_to_h.weight"}
for l in (0, 2, 3):
    want |= {pre + "%d.mlp.router.weight" % l, pre + "%d.mlp.shared_experts.dense_h_to_4h.weight" % l,
             pre + "%d.mlp.shared_experts.dense_4h_to_h.weight" % l, pre + "%d.mlp.shared_experts.gate_weight" % l}
    want |= {pre + "%d.mlp.experts.local_experts.%d.%s.weight" % (l, j, w) for j in range(4)
             for w in ("dense_h_to_4h", "dense_4h_to_h")}
assert mlp == want, (sorted(mlp - want), sorted(want - mlp))
print(len(mlp))
PYEOF
then t_pass "checkpoint: the MoE layers' tensors ($(cat "$d/names.out") MLP tensors)"
else t_fail "checkpoint tensors" "$(tail -2 "$d/names.out")"; fi

# ---- TensorBoard: the MoE losses, and with --moe-per-layer-logging each layer's (two stages) ----
# shellcheck disable=SC2086
mt-train -n 2 $base --pipeline-model-parallel-size 2 --moe-per-layer-logging --tensorboard-dir "$d/tb" \
    --metrics-file "$d/tb.jsonl" >"$d/tb.log" 2>"$d/tb.err" || t_fail "per-layer logging run" "$(tail -3 "$d/tb.err")"
if PYTHONPATH=$T_TOP/tests/oracle $py - "$d/tb" "$d/tb.jsonl" >"$d/tb.out" 2>&1 <<'PYEOF'
import json, sys
from tfevents import scalars
scal = {(tag, step): v for tag, steps in scalars(sys.argv[1]).items() for step, v in steps.items()}
it = {r["iteration"]: r for r in map(json.loads, open(sys.argv[2])) if r["type"] == "train"}
moe = [0, 2, 3]
for l in range(4):
    has = ("moe/load_balancing_loss_layer_%d" % l, 1) in scal
    assert has == (l in moe), "layer %d: per-layer tags %s" % (l, has)
worst = 0
for i, r in it.items():
    for name in ("load_balancing_loss", "z_loss"):
        per = [scal[("moe/%s_layer_%d" % (name, l), i)] for l in moe]
        for v in (scal[(name, i)], sum(per) / len(per)):   # the total tag, and the layers' mean
            worst = max(worst, abs(v - r[name]) / r[name])
    for l in moe:   # every token's 2 choices: 8 sequences x 32 tokens x 2 rows per layer and step
        rows = sum(scal[("moe/tokens_per_expert_layer_%d_expert_%d" % (l, j), i)] for j in range(4))
        assert rows == 8 * 32 * 2, "iteration %d layer %d: %g rows" % (i, l, rows)
assert worst < 1e-6, "worst %g" % worst   # float32 scalars against the metrics' doubles
print("%d iterations, worst %.2g" % (len(it), worst))
PYEOF
then t_pass "TensorBoard: load_balancing_loss and z_loss, and per MoE layer (not the dense one) its losses, whose mean is the logged one, and rows per expert summing to the step's tokens x 2 ($(cat "$d/tb.out"))"
else t_fail "TensorBoard per-layer logging" "$(tail -2 "$d/tb.out")"; fi

# ---- expert-parallel checkpoints: Megatron's mp_rank_TT_EEE directories, each expert rank's experts ----
# shellcheck disable=SC2086
mt-train -n 2 $base --expert-model-parallel-size 2 --save "$d/cke" --exit-interval 5 >/dev/null 2>"$d/cke.err" ||
    t_fail "EP 2: save" "$(tail -3 "$d/cke.err")"
if [ -d "$d/cke/iter_0000005/mp_rank_00_000" ] && [ -d "$d/cke/iter_0000005/mp_rank_00_001" ] &&
    [ "$(ls "$d/cke/iter_0000005" | wc -l)" = 2 ]; then t_pass "EP 2 checkpoint: mp_rank_00_000 and mp_rank_00_001"
else t_fail "EP 2 checkpoint directories" "$(ls "$d/cke/iter_0000005" | tr '\n' ' ')"; fi
# shellcheck disable=SC2086
mt-train -n 2 $base --expert-model-parallel-size 2 --load "$d/cke" --metrics-file "$d/cke-res.jsonl" >/dev/null 2>"$d/cke-res.err" ||
    t_fail "EP 2: resume" "$(tail -3 "$d/cke-res.err")"
t_moe_check "EP 2 resumed at 5: the uninterrupted EP 2 run bit for bit" "$d/cke-res.jsonl" 0 6 "$d/ep2.jsonl"
for v in "1:1" "4:4"; do   # on one rank, and on EP 4: the experts go to their new ranks
    n=${v%%:*} ep=${v#*:}
    # shellcheck disable=SC2086
    mt-train -n "$n" $base --expert-model-parallel-size "$ep" --load "$d/cke" --metrics-file "$d/cke-$ep.jsonl" >/dev/null \
        2>"$d/cke-$ep.err" || t_fail "EP 2 checkpoint on EP $ep" "$(tail -3 "$d/cke-$ep.err")"
    t_moe_check "EP 2 checkpoint resumed on EP $ep ($n ranks): the one-rank losses" "$d/cke-$ep.jsonl" 1e-5 6
done
# resharded offline onto 4 expert ranks (mt-ckpt-convert), then resumed there
mt-ckpt-convert --load "$d/cke" --save "$d/cke4" --target-expert-model-parallel-size 4 >/dev/null 2>"$d/cke4.err" ||
    t_fail "mt-ckpt-convert --target-expert-model-parallel-size 4" "$(tail -2 "$d/cke4.err")"
# shellcheck disable=SC2086
mt-train -n 4 $base --expert-model-parallel-size 4 --load "$d/cke4" --metrics-file "$d/cke4.jsonl" >/dev/null 2>"$d/cke4r.err" ||
    t_fail "EP 4 from the resharded checkpoint" "$(tail -3 "$d/cke4r.err")"
t_moe_check "resharded to EP 4 by mt-ckpt-convert, resumed: the one-rank losses" "$d/cke4.jsonl" 1e-5 6
if mt-eval --load "$d/cke" --data-path "$d/data" --eval-iters 2 >"$d/cke-eval.out" 2>"$d/cke-eval.err" &&
    grep -Eq 'lm loss value: [0-9]\.[0-9]+E\+00' "$d/cke-eval.out"; then t_pass "mt-eval of the EP 2 checkpoint (every rank's copy checked)"
else t_fail "mt-eval of the EP 2 checkpoint" "$(tail -2 "$d/cke-eval.err")"; fi

# a damaged EP 2 checkpoint: an expert rank's directory missing, expert-model-parallel-size not an integer
# or not dividing the experts: one line naming what is wrong
rm -rf "$d/ckm" && cp -r "$d/cke" "$d/ckm" && rm -rf "$d/ckm/iter_0000005/mp_rank_00_001"
# shellcheck disable=SC2086
t_fails "EP 2 checkpoint without expert rank 1's directory" mt-train $base --load "$d/ckm"
t_grep "... names it" 'missing shard: .*/iter_0000005/mp_rank_00_001: no such directory' "$T_TMP/err"
for v in '"two":is not an integer' '3:must divide --num-experts \(4\)'; do
    rm -rf "$d/ckm" && cp -r "$d/cke" "$d/ckm"
    for m in "$d/ckm/iter_0000005/mp_rank_00_000/meta.json" "$d/ckm/iter_0000005/mp_rank_00_001/meta.json"; do
        $py -c 'import json,sys; m=json.load(open(sys.argv[1])); m["args"]["expert-model-parallel-size"]=json.loads(sys.argv[2]); json.dump(m,open(sys.argv[1],"w"))' "$m" "${v%%:*}"
    done
    # shellcheck disable=SC2086
    t_fails "EP 2 checkpoint whose expert-model-parallel-size is ${v%%:*}" mt-train $base --load "$d/ckm"
    t_grep "... says so" "${v#*:}" "$T_TMP/err"
done

# EP 2 x DP 2 with the distributed optimizer: each rank's shard file in its expert rank's directory, the
# dense pieces of every directory's buffer found in both (dist_optim.h)
epd="--expert-model-parallel-size 2 --use-distributed-optimizer"
# shellcheck disable=SC2086
mt-train -n 4 $base $epd --save "$d/ckd" --exit-interval 5 >/dev/null 2>"$d/ckd.err" &&
    mt-train -n 4 $base $epd --load "$d/ckd" --metrics-file "$d/ckd-res.jsonl" >/dev/null 2>"$d/ckd-res.err" ||
    t_fail "EP 2 x DP 2, distributed optimizer: save and resume" "$(tail -3 "$d/ckd.err" "$d/ckd-res.err")"
t_moe_check "EP 2 x DP 2 with the distributed optimizer resumed at 5: the uninterrupted run bit for bit" "$d/ckd-res.jsonl" 0 6 "$d/ep2-dp2-dist.jsonl"
# shellcheck disable=SC2086
mt-train $base --load "$d/ckd" --metrics-file "$d/ckd-1.jsonl" >/dev/null 2>"$d/ckd-1.err" || t_fail "its checkpoint on one rank" "$(tail -3 "$d/ckd-1.err")"
t_moe_check "... and on one rank: the one-rank losses" "$d/ckd-1.jsonl" 1e-5 6
# the shards: rank r's file holds a quarter of the dense parameters and half of its expert rank's experts
if $py - "$d/ckd/iter_0000005" >"$d/shards.out" 2>&1 <<'PYEOF'
import json, struct, sys, os
it = sys.argv[1]
def header(p):
    f = open(p, "rb"); n = struct.unpack("<Q", f.read(8))[0]; return json.loads(f.read(n))
total = {}
for e in (0, 1):
    rd = "%s/mp_rank_00_%03d" % (it, e)
    meta = json.load(open(rd + "/meta.json"))["optimizer"]["distributed"]
    pieces = meta["pieces"]
    assert [p[1] for p in pieces] == [0] + [p[2] for p in pieces[:-1]], pieces   # they tile the buffer
    for f, lo, hi, at in pieces:   # each piece where its file says it is
        h = header(os.path.normpath(os.path.join(rd, f)))
        r = [int(x) for x in h["__metadata__"]["ranges"].replace(",", ":").split(":")]
        pos = at if at < r[1] - r[0] else at - (r[1] - r[0])
        base = r[0] if at < r[1] - r[0] else r[2]
        assert lo == base + pos and hi - lo <= h["exp_avg"]["shape"][0] - at, (f, lo, hi, at, r)
    names = sorted(os.listdir(rd))
    assert [n for n in names if n.startswith("distrib_optim")] == ["distrib_optim_%03d.safetensors" % (2 * x + e) for x in (0, 1)], names
    xlo, n = pieces[4][1], pieces[-1][2]
    for x in (0, 1):   # data-parallel rank 2x + e: dense / 4 + its experts / 2
        h = header("%s/distrib_optim_%03d.safetensors" % (rd, 2 * x + e))
        got = h["exp_avg"]["shape"][0]
        assert abs(got - (xlo / 4 + (n - xlo) / 2)) <= 2, (got, xlo, n)   # near-equal parts
        total[2 * x + e] = got
print("shard elements per rank %s of %d dense + 2 x %d expert parameters" % (sorted(total.values()), xlo, n - xlo))
PYEOF
then t_pass "EP 2 x DP 2 checkpoint: each rank's shard (a quarter of the dense, half of its experts) in its directory, pieces where the files say ($(cat "$d/shards.out"))"
else t_fail "EP 2 x DP 2 shard files" "$(tail -3 "$d/shards.out")"; fi
# a damaged checkpoint of it: a piece said to be in another file, a piece outside the rank directories, a
# missing shard file of the sibling directory: one line naming the file, no run
bad_piece() {   # NAME EDIT PATTERN: EDIT (python, on meta = mp_rank_00_001's meta.json) then --load fails with PATTERN
    rm -rf "$d/ckx" && cp -r "$d/ckd" "$d/ckx"
    $py - "$d/ckx/iter_0000005/mp_rank_00_001/meta.json" "$2" <<'PYEOF'
import json, sys
meta = json.load(open(sys.argv[1]))
pieces = meta["optimizer"]["distributed"]["pieces"]
exec(sys.argv[2])
json.dump(meta, open(sys.argv[1], "w"))
PYEOF
    # shellcheck disable=SC2086
    t_fails "EP 2 x DP 2 checkpoint, $1" mt-train $base --load "$d/ckx"
    t_grep "... $1: one line naming the file" "$3" "$T_TMP/err"
}
bad_piece "a piece in the wrong file" 'pieces[1][0] = "../mp_rank_00_000/distrib_optim_000.safetensors"' \
    'mp_rank_00_000/distrib_optim_000.safetensors: does not hold parameters [0-9]+ \.\. [0-9]+ at element 0'
bad_piece "a piece outside the rank directories" 'pieces[0][0] = "../../x/distrib_optim_000.safetensors"' \
    'mp_rank_00_001/meta.json: "optimizer.distributed.pieces"\[0\] is not \[shard file, lo, hi, at\]'
bad_piece "a gap between pieces" 'pieces[2][1] += 1' 'pieces"\[2\] is not \[shard file, lo, hi, at\] continuing from'
rm -f "$d/ckx/iter_0000005/mp_rank_00_000/distrib_optim_002.safetensors"
cp "$d/ckd/iter_0000005/mp_rank_00_001/meta.json" "$d/ckx/iter_0000005/mp_rank_00_001/meta.json"
# shellcheck disable=SC2086
t_fails "EP 2 x DP 2 checkpoint without a shard file of the other directory" mt-train $base --load "$d/ckx"
t_grep "... names it" 'mp_rank_00_000/distrib_optim_002.safetensors' "$T_TMP/err"
# bf16 (the optimizer owns the fp32 master of its two ranges), and fp32 with --async-save: bit for bit
# shellcheck disable=SC2086
mt-train -n 4 $base $epd --bf16 --metrics-file "$d/epdb.jsonl" >/dev/null 2>"$d/epdb.err" &&
    mt-train -n 4 $base $epd --bf16 --save "$d/ckdb" --exit-interval 5 >/dev/null 2>"$d/ckdb.err" &&
    mt-train -n 4 $base $epd --bf16 --load "$d/ckdb" --metrics-file "$d/ckdb-res.jsonl" >/dev/null 2>"$d/ckdb-res.err" ||
    t_fail "EP 2 x DP 2 bf16 runs" "$(tail -3 "$d/epdb.err" "$d/ckdb.err" "$d/ckdb-res.err")"
t_moe_check "EP 2 x DP 2, bf16, resumed at 5: the uninterrupted bf16 run bit for bit" "$d/ckdb-res.jsonl" 0 6 "$d/epdb.jsonl"
# shellcheck disable=SC2086
mt-train -n 4 $base $epd --save "$d/ckda" --save-interval 5 --async-save >"$d/ckda.log" 2>"$d/ckda.err" ||
    t_fail "EP 2 x DP 2 --async-save" "$(tail -3 "$d/ckda.err")"
t_grep "... --async-save writes in the background" 'saving checkpoint at iteration +5 to .* in the background' "$d/ckda.log"
echo 5 >"$d/ckda/latest_checkpointed_iteration.txt"
# shellcheck disable=SC2086
mt-train -n 4 $base $epd --load "$d/ckda" --metrics-file "$d/ckda-res.jsonl" >/dev/null 2>"$d/ckda-res.err" ||
    t_fail "EP 2 x DP 2: resume from the background save" "$(tail -3 "$d/ckda-res.err")"
t_moe_check "... resumed from its iteration 5: bit for bit" "$d/ckda-res.jsonl" 0 6 "$d/ep2-dp2-dist.jsonl"

# overlap: the experts' buckets of 4000 parameters (4 on a rank) and the dense ones, each bucket's collective
# started as the backward passes make it final and the parameters waited for before the layer that reads
# them (MT_TRACE_BUCKETS); the same bits as without overlap at the same bucket size. Without
# --log-params-norm, whose norm waits for every parameter at the end of the step.
ov="--overlap-grad-reduce --overlap-param-gather --ddp-bucket-size 4000" nonorm=${base//--log-params-norm/}
# shellcheck disable=SC2086
MT_TRACE_BUCKETS=$d/trace mt-train -n 4 $nonorm $epd $ov --metrics-file "$d/epd-ov.jsonl" >/dev/null 2>"$d/epd-ov.err" &&
    mt-train -n 4 $nonorm $epd --ddp-bucket-size 4000 --metrics-file "$d/epd-b.jsonl" >/dev/null 2>"$d/epd-b.err" ||
    t_fail "EP 2 x DP 2 with overlap" "$(tail -3 "$d/epd-ov.err" "$d/epd-b.err")"
t_moe_check "EP 2 x DP 2, distributed optimizer, overlap: the one-rank losses" "$d/epd-ov.jsonl" 1e-5
t_moe_check "... and the run without overlap bit for bit" "$d/epd-ov.jsonl" 0 1 "$d/epd-b.jsonl"
# shellcheck disable=SC2086
mt-train -n 4 $base $epd --bf16 --overlap-grad-reduce --overlap-param-gather --metrics-file "$d/epdb-ov.jsonl" >/dev/null \
    2>"$d/epdb-ov.err" || t_fail "EP 2 x DP 2, bf16, overlap" "$(tail -3 "$d/epdb-ov.err")"
t_moe_check "... in bf16 (the working copy gathered): the run without overlap bit for bit" "$d/epdb-ov.jsonl" 0 1 "$d/epdb.jsonl"
for part in "" .experts; do
    f=$d/trace.1$part
    during=$(grep -c '^5 grad bucket [0-9]* after layer [0-9]' "$f" 2>/dev/null) before=$(grep -c '^5 param bucket [0-9]* before layer [0-9]' "$f" 2>/dev/null)
    if [ "${during:-0}" -ge 2 ] && [ "${before:-0}" -ge 1 ]; then
        t_pass "overlap trace${part:- (dense)}: $during gradient buckets started during step 5's backward passes, parameters waited for before $before layers"
    else t_fail "overlap trace$part" "$(head -c 400 "$f" 2>&1)"; fi
done

# ---- token dropping ----
short="--train-iters 4 --lr-warmup-iters 1 --eval-iters 0 --log-interval 1"
# shellcheck disable=SC2086
mt-train $base $short >"$d/nodrop.log" 2>&1 &&
    mt-train $base $short --moe-expert-capacity-factor 0.5 >"$d/drop.log" 2>&1 &&
    mt-train $base $short --moe-expert-capacity-factor 0.5 --moe-pad-expert-input-to-capacity >"$d/pad.log" 2>&1 ||
    t_fail "capacity runs" "$(tail -n 2 "$d/nodrop.log" "$d/drop.log" "$d/pad.log")"
losses() { grep -o 'lm loss: [^|]*| load_balancing_loss: [^|]*| z_loss: [^|]*| loss scale: [^|]*| grad norm: [^|]*' "$1"; }
if [ -n "$(losses "$d/drop.log")" ] && [ "$(losses "$d/nodrop.log")" != "$(losses "$d/drop.log")" ]; then
    t_pass "capacity factor 0.5 drops tokens: other losses"
else t_fail "capacity factor 0.5" "the same losses as dropless"; fi
if [ -n "$(losses "$d/pad.log")" ] && [ "$(losses "$d/drop.log")" = "$(losses "$d/pad.log")" ]; then
    t_pass "padding to capacity: the same bits"
else t_fail "padding to capacity" "$(diff <(losses "$d/drop.log") <(losses "$d/pad.log") | head -4)"; fi
# with sequence parallelism a capacity per shard (model-moe-torch.sh checks its values): padded, each expert
# has that capacity of rows of each shard, 2 x the tokens' choices in all with a factor of 2
sp="--tensor-model-parallel-size 2 --sequence-parallel --moe-expert-capacity-factor 2.0"
# shellcheck disable=SC2086
mt-train -n 2 $base $short $sp >"$d/drop-sp.log" 2>&1 &&
    mt-train -n 2 $base $short $sp --moe-pad-expert-input-to-capacity >"$d/pad-sp.log" 2>&1 ||
    t_fail "capacity runs with sequence parallelism" "$(tail -n 2 "$d/drop-sp.log" "$d/pad-sp.log")"
if [ -n "$(losses "$d/pad-sp.log")" ] && [ "$(losses "$d/drop-sp.log")" = "$(losses "$d/pad-sp.log")" ]; then
    t_pass "TP 2 + SP: padding to each shard's capacity: the same bits"
else t_fail "TP 2 + SP: padding to capacity" "$(diff <(losses "$d/drop-sp.log") <(losses "$d/pad-sp.log") | head -4)"; fi

# ---- evaluation and generation ----
if mt-eval --load "$d/ck" --data-path "$d/data" --eval-iters 2 >"$d/eval.out" 2>"$d/eval.err" &&
    grep -Eq 'lm loss value: [0-9]\.[0-9]+E\+00' "$d/eval.out"; then t_pass "mt-eval of the MoE checkpoint"
else t_fail "mt-eval" "$(tail -2 "$d/eval.err" "$d/eval.out")"; fi

# ---- refused flags ----
nobias=${base//--disable-bias-linear/}
# shellcheck disable=SC2086
t_fails "MoE without --disable-bias-linear" mt-train $nobias --dry-run
t_grep "... says so" 'add --disable-bias-linear' "$T_TMP/err"
# shellcheck disable=SC2086
t_fails "top-k above the experts" mt-train $base --moe-router-topk 5 --dry-run
t_grep "... names the flag" 'moe-router-topk \(5\) must not exceed --num-experts \(4\)' "$T_TMP/err"
dense=${base%%--num-experts*}
# shellcheck disable=SC2086
t_fails "an MoE flag without --num-experts" mt-train $dense --moe-aux-loss-coeff 1e-2 --dry-run
t_grep "... names it" 'moe-aux-loss-coeff goes with --num-experts' "$T_TMP/err"
# shellcheck disable=SC2086
t_fails "a layer list of the wrong length" mt-train $base --moe-layer-freq "([1]*3+[0])*2" --dry-run
t_grep "... says so" "moe-layer-freq '\(\[1\]\*3\+\[0\]\)\*2': 8 entries for 4 layers" "$T_TMP/err"
# shellcheck disable=SC2086
t_fails "padding without a capacity factor" mt-train $base --moe-pad-expert-input-to-capacity --dry-run
# shellcheck disable=SC2086
t_fails "expert parallelism over 3 experts" mt-train $base --num-experts 3 --expert-model-parallel-size 2 --dry-run
t_grep "... names the flags" 'expert-model-parallel-size \(2\) must divide --num-experts \(3\)' "$T_TMP/err"
# shellcheck disable=SC2086
t_fails "an expert tensor-parallel size of 1 without --sequence-parallel" mt-train $base --tensor-model-parallel-size 2 \
    --expert-tensor-parallel-size 1 --dry-run
t_grep "... names both (train-moe-etp.sh runs it with --sequence-parallel)" \
    'expert-tensor-parallel-size 1 with --tensor-model-parallel-size 2 needs --sequence-parallel' "$T_TMP/err"
