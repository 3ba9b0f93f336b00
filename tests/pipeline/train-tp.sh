#!/usr/bin/env bash
# train-tp.sh: tensor-parallel mt-train on CPU ranks under mpirun and mt-train -n: for (data, tensor)
# sizes (1,2), (1,4) and (2,2), with and without --sequence-parallel and --use-distributed-optimizer (at
# (1,4) without both and with both), with dropout on, every one
# of 20 iterations' lm loss and grad norm and the validation losses equal the one-rank run's at the same
# global batch (1e-5 relative, fp32; 1e-2 in bf16); the log states the sizes; and a layout that cannot split the model
# is refused before training with a message naming the flag. Checkpoints: a directory per tensor rank
# with Megatron's slices, an exact resume, and resharded to TP=1 and TP=4 a resume with the same losses.
. "$(dirname "$0")/../lib.sh"
py=/usr/bin/python3
d=$T_TMP
if ! command -v mpirun >/dev/null; then t_fail "mpirun" "openmpi-bin is not installed (make deps)"; exit 1; fi
export OMP_NUM_THREADS=1 OMPI_MCA_mpi_yield_when_idle=1 OMPI_MCA_btl_base_warn_component_unused=0 TMPDIR=$T_TMP
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
root=""; [ "$(id -u)" = 0 ] && root=--allow-run-as-root
mpi() { local n=$1; shift; timeout -k 5 180 mpirun $root --oversubscribe -np "$n" "$@"; }

PYTHONPATH=$T_TOP/tests/oracle $py "$T_TOP/tests/oracle/walk_data.py" "$d/data" 7 300

# 4 heads, ffn 128, a vocabulary of 61 padded to 64 by every layout below (16 x tp divides 64): the one-rank
# model is the tensor-parallel model's whole. Dropout is on (Megatron's defaults, 0.1 and 0.1).
base="--num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 32 --max-position-embeddings 32
      --tokenizer-type NullTokenizer --vocab-size 60
      --micro-batch-size 2 --global-batch-size 8 --train-iters 20 --lr 3e-3 --min-lr 3e-4 --lr-decay-style cosine
      --lr-warmup-iters 5 --weight-decay 0.1 --clip-grad 1.0 --log-interval 1 --eval-interval 10 --eval-iters 2
      --split 90,5,5 --seed 77 --data-path $d/data --data-cache-path $d/cache"
args() { echo "$base --make-vocab-size-divisible-by 16 --tensor-model-parallel-size $1"; }
# shellcheck disable=SC2046
mt-train $(args 1) --train-iters 1 --eval-iters 0 >/dev/null 2>&1   # the index cache, once


# shellcheck disable=SC2046
mt-train $(args 1) --metrics-file "$d/ref.jsonl" >"$d/ref.log" 2>"$d/ref.err" || t_fail "one rank" "$(tail -3 "$d/ref.err")"
t_grep "one rank: 61 tokens (with the end of document) padded to 64" "padded vocab \\(size: 61\\) with 3 dummy tokens \\(new size: 64\\)" "$d/ref.log"

for layout in "1 2" "1 4" "2 2"; do
    set -- $layout
    dp=$1 tp=$2 n=$(($1 * $2))
    opts=("" "--use-distributed-optimizer" "--sequence-parallel" "--sequence-parallel --use-distributed-optimizer")
    # TP=4: the plain layout and the two flags together (each alone runs at TP=2 and at DP=2 x TP=2)
    [ "$tp" = 4 ] && opts=("" "--sequence-parallel --use-distributed-optimizer")
    for opt in "${opts[@]}"; do
        name="DP=$dp TP=$tp${opt:+ $opt}" m=$d/m-$dp-$tp$(echo "$opt" | tr -d " ")
        # shellcheck disable=SC2046,SC2086
        if mpi $n mt-train $(args $tp) $opt --metrics-file "$m.jsonl" >"$m.log" 2>"$m.err"; then
            t_same_losses "$name: the one-rank losses and grad norms of 20 iterations, dropout on" "$d/ref.jsonl" "$m.jsonl"
        else t_fail "$name under mpirun" "$(tail -5 "$m.err")"; fi
        # the bytes rank 0 sent to its tensor group in a step: what the ring collectives of the model's
        # exchanges must send (computed here from the sizes, independently of mt's own figure), to the few
        # bytes by which a ring's uneven chunks of a one-element reduction differ from 2(t-1)/t of it;
        # with --sequence-parallel the backward pass gathers each LayerNorm's output again (two a layer
        # and the final one) for the weight gradients, an all-gather (half a ring all-reduce) each
        sent=$(sed -n 's/.*tensor-parallel communication per iteration | bytes sent: \([0-9]*\) .*/\1/p' "$m.log")
        want=$($py -c "
t, N, C, L, micro = $tp, 2 * 32, 32, 2, 8 // (2 * $dp)
ring = 2 * (t - 1) / t
v = micro * ((4 * L + 2) * N * C * 4 + 3 * N * 4) * ring + 8 * ring
if '$opt'.find('sequence') >= 0: v += (4 * L + 2) * C * 4 * ring + micro * (2 * L + 1) * N * C * 4 * ring / 2
print(round(v))")
        if [ -n "$sent" ] && [ $((sent - want)) -le 16 ] && [ $((want - sent)) -le 16 ]; then
            t_pass "$name: bytes sent per step $sent = the ring volume of the exchanges ($want)"
        else t_fail "$name: tensor-parallel bytes per step" "sent '$sent', expected $want"; fi
    done
    # this rank's parameters: 1/tp of every split matrix and vector, all of the replicated ones
    want=$($py -c "
t, L, C, F, V, P = $tp, 2, 32, 128, 64, 32
split = V * C + L * (3 * C * C + 3 * C + C * C + F * C + F + C * F)
repl = P * C + L * 6 * C + 2 * C
print(split // t + repl)")
    t_grep "DP=$dp TP=$tp: rank 0 holds 1/$tp of the split tensors ($want parameters)" \
        "number of parameters on \(tensor, pipeline\) model parallel rank \(0, 0\): $want\$" "$d/m-$dp-$tp.log"
    mb=$($py -c "print('%.1f' % ($want * 4 / 1048576))")
    t_grep "DP=$dp TP=$tp: the memory line's parameters, gradients and optimizer state are this rank's" \
        "memory \(MB\) \| parameters: $mb \| gradients: $mb \| optimizer: $($py -c "print('%.1f' % (2 * $want * 4 / 1048576))") " "$d/m-$dp-$tp.log"
    t_grep "DP=$dp TP=$tp: the log states the sizes" \
        "^using world size: $n, data-parallel size: $dp, context-parallel size: 1, tensor-model-parallel size: $tp," "$d/m-$dp-$tp.log"
done

# bf16: activations exchanged in bf16 (the ring adds in fp32 and rounds at each hop, as NCCL does): the
# one-rank bf16 run's losses and grad norms to 1e-2, as the issue's limit for bf16
# shellcheck disable=SC2046
mt-train $(args 1) --bf16 --metrics-file "$d/b1.jsonl" >"$d/b1.log" 2>"$d/b1.err" || t_fail "one rank --bf16" "$(tail -3 "$d/b1.err")"
for opt in "" --sequence-parallel; do
    rm -f "$d/b2.jsonl"
    # shellcheck disable=SC2046,SC2086
    if mpi 2 mt-train $(args 2) --bf16 $opt --metrics-file "$d/b2.jsonl" >"$d/b2.log" 2>"$d/b2.err"; then
        t_same_losses "TP=2 --bf16${opt:+ $opt}: the one-rank bf16 losses and grad norms (1e-2)" "$d/b1.jsonl" "$d/b2.jsonl" 1e-2
    else t_fail "TP=2 --bf16${opt:+ $opt}" "$(tail -3 "$d/b2.err")"; fi
done

# checkpoints of a TP=2 run: one directory per tensor rank (mp_rank_00, mp_rank_01) holding Megatron's
# slices (tests/oracle/megatron_split.py, from the spec, against the one-rank reshard of the same
# checkpoint); a run stopped at 10 and resumed, or killed in the middle of its next save and resumed, gives
# the uninterrupted run's every loss and grad norm bit for bit; resharded to TP=1 and TP=4 by mt-ckpt-convert it resumes there with the same losses
s=$d/s
# shellcheck disable=SC2046
mpi 2 mt-train $(args 2) --metrics-file "$s.jsonl" --save "$s" --save-interval 10 --exit-interval 10 >"$s.log" 2>"$s.err" ||
    t_fail "TP=2 --save, stopped at 10" "$(tail -3 "$s.err")"
if [ -s "$s/iter_0000010/mp_rank_00/model.safetensors" ] && [ -s "$s/iter_0000010/mp_rank_01/model.safetensors" ] &&
    [ -s "$s/iter_0000010/mp_rank_01/optim.safetensors" ] && [ ! -e "$s/iter_0000010/mp_rank_02" ]; then
    t_pass "TP=2: a directory per tensor rank"
else t_fail "TP=2: a directory per tensor rank" "$(ls -R "$s" | head -c 300)"; fi
for to in 1 4; do
    t_ok "TP=2 checkpoint resharded to TP=$to" mt-ckpt-convert --load "$s" --save "$d/r$to" --target-tensor-parallel-size $to
done
if $py "$T_TOP/tests/oracle/megatron_split.py" check "$d/r1/iter_0000010" "$s/iter_0000010" 2 1 >"$d/orc" 2>&1
then t_pass "TP=2 checkpoint: every rank's tensors and moments are Megatron's slices ($(tail -1 "$d/orc"))"
else t_fail "TP=2 checkpoint: Megatron's slices" "$(tail -3 "$d/orc")"; fi
# a job killed in the middle of its next save (rank 0 dies after writing mp_rank_00's model file, test hook
# MT_CKPT_CRASH_AFTER): the tracker still names 10, and the run resumed from it gives the same losses
k=$d/k
cp -r "$s" "$k"
# shellcheck disable=SC2046
if MT_CKPT_CRASH_AFTER=1 mpi 2 mt-train $(args 2) --load "$k" --save "$k" --save-interval 10 >"$k.log" 2>"$k.err"; then
    t_fail "TP=2 killed mid-save" "exit 0"
elif [ "$(cat "$k/latest_checkpointed_iteration.txt")" = 10 ] && [ ! -e "$k/iter_0000020" ]; then
    # shellcheck disable=SC2046
    mpi 2 mt-train $(args 2) --load "$k" --metrics-file "$k.jsonl" >>"$k.log" 2>>"$k.err" || t_fail "TP=2 resume after the kill" "$(tail -3 "$k.err")"
    if $py - "$d/m-1-2.jsonl" "$k.jsonl" >"$d/kc" 2>&1 <<'PYEOF'
import json, sys
load = lambda p: {r["iteration"]: (r["lm_loss"], r["grad_norm"]) for r in map(json.loads, open(p)) if r["type"] == "train"}
a, b = load(sys.argv[1]), load(sys.argv[2])
assert sorted(b) == list(range(11, 21)) and all(a[i] == b[i] for i in b), (sorted(b), [(a[i], b[i]) for i in b][:2])
PYEOF
    then t_pass "TP=2 killed mid-save: the tracker names the last complete checkpoint, the resumed run the same losses bit for bit"
    else t_fail "TP=2 killed mid-save, resumed" "$(tail -2 "$d/kc")"; fi
else t_fail "TP=2 killed mid-save" "tracker $(cat "$k/latest_checkpointed_iteration.txt"): $(ls "$k")"; fi
# shellcheck disable=SC2046
mpi 2 mt-train $(args 2) --metrics-file "$s.jsonl" --load "$s" --save "$s" --save-interval 10 >>"$s.log" 2>>"$s.err" ||
    t_fail "TP=2 resume" "$(tail -3 "$s.err")"
t_same_losses "TP=2 stopped at 10 and resumed: the uninterrupted losses and grad norms, bit for bit" "$d/m-1-2.jsonl" "$s.jsonl" 1e-300
for to in 1 4; do
    # shellcheck disable=SC2046
    if mpi $to mt-train $(args $to) --metrics-file "$d/r$to.jsonl" --load "$d/r$to" >"$d/r$to.log" 2>"$d/r$to.err" &&
        $py - "$d/m-1-2.jsonl" "$d/r$to.jsonl" >"$d/rc" 2>&1 <<'PYEOF'
import json, sys
load = lambda p: {r["iteration"]: (r["lm_loss"], r["grad_norm"]) for r in map(json.loads, open(p)) if r["type"] == "train"}
a, b = load(sys.argv[1]), load(sys.argv[2])
assert sorted(b) == list(range(11, 21)), sorted(b)
w = max(abs(x - y) / abs(x) for i in b for x, y in zip(a[i], b[i]))
assert w < 1e-5, w
print("worst %.2g" % w)
PYEOF
    then t_pass "TP=2 checkpoint resharded to TP=$to resumes with the TP=2 losses ($(cat "$d/rc"))"
    else t_fail "TP=2 resharded to TP=$to, resumed" "$(tail -3 "$d/r$to.err" "$d/rc" 2>/dev/null | head -c 400)"; fi
done

# DP=2 x TP=2 with the distributed optimizer: every data-parallel rank writes its shard of its tensor rank's
# moments into that tensor rank's directory (no optim.safetensors, nothing gathered); stopped at 10 and
# resumed, the uninterrupted run's losses bit for bit
s=$d/sd
# shellcheck disable=SC2046
mpi 4 mt-train $(args 2) --use-distributed-optimizer --metrics-file "$s.jsonl" --save "$s" --save-interval 10 \
    --exit-interval 10 >"$s.log" 2>"$s.err" || t_fail "DP=2 TP=2 distributed optimizer --save" "$(tail -3 "$s.err")"
if [ "$(cd "$s/iter_0000010" && ls mp_rank_00 mp_rank_01 | grep -c '^distrib_optim_00[01].safetensors$')" = 4 ] &&
    ! ls "$s"/iter_0000010/mp_rank_0?/optim.safetensors >/dev/null 2>&1; then
    t_pass "DP=2 TP=2 distributed optimizer: each tensor rank's directory holds its data-parallel ranks' shards"
else t_fail "DP=2 TP=2 distributed optimizer checkpoint" "$(ls -R "$s" | head -c 300)"; fi
# shellcheck disable=SC2046
mpi 4 mt-train $(args 2) --use-distributed-optimizer --metrics-file "$s.jsonl" --load "$s" >>"$s.log" 2>>"$s.err" ||
    t_fail "DP=2 TP=2 distributed optimizer resume" "$(tail -3 "$s.err")"
t_same_losses "DP=2 TP=2 distributed optimizer stopped at 10 and resumed: the uninterrupted losses, bit for bit" \
    "$d/m-2-2--use-distributed-optimizer.jsonl" "$s.jsonl" 1e-300

# the launcher of one machine: mt-train -n 4 --tensor-model-parallel-size 2 (DP=2 TP=2)
# shellcheck disable=SC2046
if timeout -k 5 180 mt-train -n 4 $(args 2) --metrics-file "$d/n4.jsonl" >"$d/n4.log" 2>"$d/n4.err"; then
    t_same_losses "mt-train -n 4, TP=2: the one-rank losses" "$d/ref.jsonl" "$d/n4.jsonl"
else t_fail "mt-train -n 4 --tensor-model-parallel-size 2" "$(tail -5 "$d/n4.err")"; fi

# layouts that cannot split the model, refused before training with the flag named
# shellcheck disable=SC2046
t_fails "TP=3 does not divide 4 heads" mpi 3 mt-train $(args 1) --tensor-model-parallel-size 3 --make-vocab-size-divisible-by 1
grep -q -- '--tensor-model-parallel-size (3) must divide --num-attention-heads (4)' "$T_TMP/err" &&
    t_pass "TP=3: the message names the flag" || t_fail "TP=3 message" "$(tail -2 "$T_TMP/err")"
# shellcheck disable=SC2046
t_fails "3 ranks are not a multiple of TP=2" mpi 3 mt-train $(args 2)
grep -q -- 'tensor-model-parallel-size' "$T_TMP/err" && t_pass "3 ranks, TP=2: the message names the flag" ||
    t_fail "3 ranks, TP=2 message" "$(tail -2 "$T_TMP/err")"
# --sequence-parallel needs the sequence to split over the tensor ranks: a one-line error naming both flags
# shellcheck disable=SC2046
if mt-train $(args 2) --sequence-parallel --seq-length 31 --save "$d/sp31" >"$d/sp31.out" 2>"$d/sp31.err"; then
    t_fail "--sequence-parallel with TP=2 and --seq-length 31" "exit 0"
elif [ "$(wc -l <"$d/sp31.err")" = 1 ] && grep -q -- '--sequence-parallel: --tensor-model-parallel-size (2) must divide --seq-length (31)' "$d/sp31.err" &&
    [ ! -e "$d/sp31" ]; then t_pass "--sequence-parallel with a sequence TP does not divide: one-line error, nothing written"
else t_fail "--sequence-parallel with TP=2 and --seq-length 31" "$(head -c 300 "$d/sp31.err")"; fi
t_cleanup
