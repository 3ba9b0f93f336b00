#!/usr/bin/env bash
# train-pp.sh: pipeline-parallel mt-train (the 1F1B schedule) on CPU ranks under mpirun and mt-train -n:
# for (data, tensor, pipeline) sizes (1,1,2), (1,1,4), (1,2,2), (2,1,2) and (2,2,2), with the distributed
# optimizer and sequence parallelism where they apply, dropout on, every one of 20 iterations' lm loss and
# grad norm and the validation losses equal the one-rank run's at the same global batch (1e-5 relative,
# fp32); bytes sent to the other stages per step equal what the schedule must send (computed here from the
# sizes); each (tensor rank, stage)'s parameter count is its layout's. Checkpoints: one directory per
# (tensor rank, stage) with Megatron's slices; a (2,2,2) run stopped or killed mid-save resumes with the
# uninterrupted losses bit for bit; resharded to (1,4,1) and (1,1,4) it resumes with the same losses.
# The interleaved schedule (--num-layers-per-virtual-pipeline-stage: two model chunks per stage) at (1,1,2),
# (1,2,2) with sequence parallelism and (2,1,2) with the distributed optimizer gives the same one-rank
# losses, and its checkpoint (the chunks as model0., model1.) resumes bit for bit and resharded to one rank.
# Layouts that cannot split the model are refused naming the flag.
. "$(dirname "$0")/../lib.sh"
py=/usr/bin/python3
d=$T_TMP
if ! command -v mpirun >/dev/null; then t_fail "mpirun" "openmpi-bin is not installed (make deps)"; exit 1; fi
t_mpi_env

PYTHONPATH=$T_TOP/tests/oracle $py "$T_TOP/tests/oracle/walk_data.py" "$d/data" 7 300

# 4 layers (one per stage at pp 4), 4 heads, a vocabulary of 61 padded to 64 by every layout (16 x tp
# divides 64); 4 micro-batches per data-parallel rank at dp 1 (more than the stages: warm-up, steady state
# and cool-down all run), 2 at dp 2. Dropout on (Megatron's defaults).
base="--num-layers 4 --hidden-size 32 --num-attention-heads 4 --seq-length 32 --max-position-embeddings 32
      --tokenizer-type NullTokenizer --vocab-size 60 --make-vocab-size-divisible-by 16
      --micro-batch-size 2 --global-batch-size 8 --train-iters 20 --lr 3e-3 --min-lr 3e-4 --lr-decay-style cosine
      --lr-warmup-iters 5 --weight-decay 0.1 --clip-grad 1.0 --log-interval 1 --eval-interval 10 --eval-iters 2
      --split 90,5,5 --seed 77 --data-path $d/data --data-cache-path $d/cache"
args() { echo "$base --tensor-model-parallel-size $1 --pipeline-model-parallel-size $2"; }
# shellcheck disable=SC2046
mt-train $(args 1 1) --train-iters 1 --eval-iters 0 >/dev/null 2>&1   # the index cache, once
# shellcheck disable=SC2046
mt-train $(args 1 1) --metrics-file "$d/ref.jsonl" >"$d/ref.log" 2>"$d/ref.err" || t_fail "one rank" "$(tail -3 "$d/ref.err")"

# the bytes rank 0 (stage 0) must send in a step: its output activations of every micro-batch (N tokens,
# N/tp with sequence parallelism, x hidden x 4 bytes), the tied word embeddings' gradients to the last
# stage (its [64/tp, 32] slice, all of it in a two-rank ring), and three doubles by ring (loss sum,
# tokens, the grad norm's square)
pp_bytes() {   # dp tp pp sp
    $py -c "
dp, tp, pp, sp = $1, $2, $3, $4
micro, N, C = 8 // (2 * dp), 2 * 32, 32
print(round(micro * (N // tp if sp else N) * C * 4 + 64 // tp * C * 4 + 3 * 8 * 2 * (pp - 1) / pp))"
}
# the parameters of (tensor rank, stage): 1/tp of the split tensors and the replicated ones of its layers,
# the embeddings on stage 0, the final norm and the copy of the word embeddings on the last
params() {   # tp pp stage
    $py -c "
t, pp, s, L, C, F, V, P = $1, $2, $3, 4, 32, 128, 64, 32
layer = (3 * C * C + 3 * C + C * F + F) // t + C * C // t + C * F // t + 6 * C
n = L // pp * layer
if s == 0: n += V * C // t + P * C
if s == pp - 1: n += 2 * C + (V * C // t if pp > 1 else 0)
print(n)"
}

for layout in "1 1 2" "1 1 4" "1 2 2" "2 1 2" "2 2 2"; do
    set -- $layout
    dp=$1 tp=$2 pp=$3 n=$(($1 * $2 * $3))
    opts=("")
    [ "$tp" -gt 1 ] && opts+=("--sequence-parallel")
    [ "$dp" -gt 1 ] && opts+=("--use-distributed-optimizer")
    [ "$dp" -gt 1 ] && [ "$tp" -gt 1 ] && opts=("" "--sequence-parallel --use-distributed-optimizer")
    for opt in "${opts[@]}"; do
        name="DP=$dp TP=$tp PP=$pp${opt:+ $opt}" m=$d/m-$dp-$tp-$pp$(echo "$opt" | tr -d " ")
        # shellcheck disable=SC2046,SC2086
        if mpi $n mt-train $(args $tp $pp) $opt --metrics-file "$m.jsonl" >"$m.log" 2>"$m.err"; then
            t_same_losses "$name: the one-rank losses and grad norms of 20 iterations, dropout on" "$d/ref.jsonl" "$m.jsonl"
        else t_fail "$name under mpirun" "$(tail -5 "$m.err")"; continue; fi
        sent=$(sed -n 's/.*pipeline-parallel communication per iteration | bytes sent: \([0-9]*\) .*/\1/p' "$m.log")
        sp=0; case "$opt" in *sequence*) sp=1 ;; esac
        want=$(pp_bytes "$dp" "$tp" "$pp" $sp)
        if [ -n "$sent" ] && [ $((sent - want)) -le 16 ] && [ $((want - sent)) -le 16 ]; then
            t_pass "$name: bytes sent per step by stage 0, $sent = activations, tied gradients and statistics ($want)"
        else t_fail "$name: pipeline bytes per step" "sent '$sent', expected $want"; fi
    done
    m=$d/m-$dp-$tp-$pp
    bad=""
    for s in $(seq 0 $((pp - 1))); do
        for r in $(seq 0 $((tp - 1))); do
            want=$(params "$tp" "$pp" "$s")
            grep -q "number of parameters on (tensor, pipeline) model parallel rank ($r, $s): $want\$" "$m.log" || bad="$bad ($r,$s) want $want"
        done
    done
    if [ -z "$bad" ]; then t_pass "DP=$dp TP=$tp PP=$pp: each (tensor rank, stage)'s parameters are its layout's"
    else t_fail "DP=$dp TP=$tp PP=$pp: parameter counts" "$bad: $(grep 'number of parameters' "$m.log" | head -4)"; fi
done

# the interleaved schedule: 4 layers over 2 stages as 2 chunks of 1 layer each (stage 0: layers 0 and 2)
vl="--num-layers-per-virtual-pipeline-stage 1"
for layout in "1 1 2" "1 2 2 --sequence-parallel" "2 1 2 --use-distributed-optimizer"; do
    set -- $layout
    dp=$1 tp=$2 pp=$3 n=$(($1 * $2 * $3)); shift 3
    name="DP=$dp TP=$tp PP=$pp interleaved${*:+ $*}" m=$d/i-$dp-$tp-$pp
    # shellcheck disable=SC2046,SC2086
    if mpi $n mt-train $(args $tp $pp) $vl "$@" --metrics-file "$m.jsonl" >"$m.log" 2>"$m.err"; then
        t_same_losses "$name: the one-rank losses and grad norms of 20 iterations, dropout on" "$d/ref.jsonl" "$m.jsonl"
    else t_fail "$name under mpirun" "$(tail -5 "$m.err")"; fi
done
s=$d/si
# shellcheck disable=SC2046
mpi 4 mt-train $(args 2 2) $vl --sequence-parallel --metrics-file "$s.jsonl" --save "$s" --save-interval 10 --exit-interval 10 >"$s.log" 2>"$s.err" ||
    t_fail "(1,2,2) interleaved --save" "$(tail -3 "$s.err")"
if $py - "$s/iter_0000010/mp_rank_01_001/model.safetensors" >"$d/names" 2>&1 <<'PYEOF'
import json, struct, sys
f = open(sys.argv[1], "rb")
names = set(json.loads(f.read(struct.unpack("<Q", f.read(8))[0])))
# the last stage of 2 holds chunk 0 = global layer 1 and chunk 1 = global layer 3 with the head
for n in ("model0.language_model.encoder.layers.0.input_layernorm.weight",
          "model1.language_model.encoder.layers.0.mlp.dense_4h_to_h.weight",
          "model1.language_model.encoder.final_layernorm.weight", "model1.word_embeddings_for_head.weight"):
    assert n in names, n
assert not any(n.startswith("model0.language_model.encoder.final") or ".layers.1." in n for n in names), sorted(names)
PYEOF
then t_pass "(1,2,2) interleaved checkpoint: each stage's chunks as model0. and model1."
else t_fail "(1,2,2) interleaved checkpoint names" "$(tail -2 "$d/names")"; fi
t_ok "(1,2,2) interleaved checkpoint resharded to one rank" mt-ckpt-convert --load "$s" --save "$d/si1" \
    --target-tensor-parallel-size 1 --target-pipeline-parallel-size 1
# shellcheck disable=SC2046
mpi 4 mt-train $(args 2 2) $vl --sequence-parallel --metrics-file "$s.jsonl" --load "$s" >>"$s.log" 2>>"$s.err" || t_fail "(1,2,2) interleaved resume" "$(tail -3 "$s.err")"
t_same_losses "(1,2,2) interleaved stopped at 10 and resumed: the uninterrupted losses, bit for bit" "$d/i-1-2-2.jsonl" "$s.jsonl" 1e-300
# shellcheck disable=SC2046
if mt-train $(args 1 1) --load "$d/si1" --metrics-file "$d/si1.jsonl" >"$d/si1.log" 2>"$d/si1.err"; then
    t_resumed_losses "(1,2,2) interleaved resharded to one rank resumes with its losses" "$d/i-1-2-2.jsonl" "$d/si1.jsonl"
else t_fail "(1,2,2) interleaved resharded, resumed" "$(tail -3 "$d/si1.err")"; fi
# shellcheck disable=SC2046
t_fails "interleaved with micro-batches not a multiple of the stages" mpi 2 mt-train $(args 1 2) $vl --global-batch-size 6
grep -q -- 'to be a multiple of --pipeline-model-parallel-size (2)' "$T_TMP/err" &&
    t_pass "interleaved, 3 micro-batches on 2 stages: the message says why" || t_fail "interleaved micro-batches message" "$(tail -1 "$T_TMP/err")"
# shellcheck disable=SC2046
t_fails "a chunk size that does not divide a stage's layers" mt-train $(args 1 2) --num-layers-per-virtual-pipeline-stage 3

# the launcher of one machine: mt-train -n 4, TP=2 PP=2
# shellcheck disable=SC2046
if timeout -k 5 180 mt-train -n 4 $(args 2 2) --metrics-file "$d/n4.jsonl" >"$d/n4.log" 2>"$d/n4.err"; then
    t_same_losses "mt-train -n 4, TP=2 PP=2: the one-rank losses" "$d/ref.jsonl" "$d/n4.jsonl"
else t_fail "mt-train -n 4 TP=2 PP=2" "$(tail -5 "$d/n4.err")"; fi

# checkpoints of a (2,2,2) run with sequence parallelism and the distributed optimizer
L3="--sequence-parallel --use-distributed-optimizer"
ref3=$d/m-2-2-2--sequence-parallel--use-distributed-optimizer.jsonl
s=$d/s
# shellcheck disable=SC2046,SC2086
mpi 8 mt-train $(args 2 2) $L3 --metrics-file "$s.jsonl" --save "$s" --save-interval 10 --exit-interval 10 >"$s.log" 2>"$s.err" ||
    t_fail "(2,2,2) --save, stopped at 10" "$(tail -3 "$s.err")"
dirs=$(cd "$s/iter_0000010" 2>/dev/null && echo mp_rank_*)
if [ "$dirs" = "mp_rank_00_000 mp_rank_00_001 mp_rank_01_000 mp_rank_01_001" ]; then
    t_pass "(2,2,2): a directory per (tensor rank, stage): $dirs"
else t_fail "(2,2,2): rank directories" "'$dirs'"; fi
for to in "4 1" "1 4" "1 1"; do
    set -- $to
    t_ok "(2,2,2) checkpoint resharded to TP=$1 PP=$2" mt-ckpt-convert --load "$s" --save "$d/r$1$2" \
        --target-tensor-parallel-size "$1" --target-pipeline-parallel-size "$2"
done
if $py "$T_TOP/tests/oracle/megatron_split.py" check "$d/r11/iter_0000010" "$s/iter_0000010" 2 2 >"$d/orc" 2>&1
then t_pass "(2,2,2) checkpoint: every rank's tensors and moments are Megatron's slices ($(tail -1 "$d/orc"))"
else t_fail "(2,2,2) checkpoint: Megatron's slices" "$(tail -3 "$d/orc")"; fi
# killed in the middle of its next save (rank 0 dies after writing one file, test hook MT_CKPT_CRASH_AFTER):
# the tracker still names 10 and the resumed run gives the uninterrupted losses
k=$d/k
cp -r "$s" "$k"
# shellcheck disable=SC2046,SC2086
if MT_CKPT_CRASH_AFTER=1 mpi 8 mt-train $(args 2 2) $L3 --load "$k" --save "$k" --save-interval 10 >"$k.log" 2>"$k.err"; then
    t_fail "(2,2,2) killed mid-save" "exit 0"
elif [ "$(cat "$k/latest_checkpointed_iteration.txt")" = 10 ] && [ ! -e "$k/iter_0000020" ]; then
    # shellcheck disable=SC2046,SC2086
    mpi 8 mt-train $(args 2 2) $L3 --load "$k" --metrics-file "$k.jsonl" >>"$k.log" 2>>"$k.err" ||
        t_fail "(2,2,2) resume after the kill" "$(tail -3 "$k.err")"
    t_resumed_losses "(2,2,2) killed mid-save: the tracker names the last complete checkpoint, the resumed run the same losses bit for bit" \
        "$ref3" "$k.jsonl" 1e-300
else t_fail "(2,2,2) killed mid-save" "tracker $(cat "$k/latest_checkpointed_iteration.txt"): $(ls "$k")"; fi
# shellcheck disable=SC2046,SC2086
mpi 8 mt-train $(args 2 2) $L3 --metrics-file "$s.jsonl" --load "$s" >>"$s.log" 2>>"$s.err" ||
    t_fail "(2,2,2) resume" "$(tail -3 "$s.err")"
t_same_losses "(2,2,2) stopped at 10 and resumed: the uninterrupted losses and grad norms, bit for bit" "$ref3" "$s.jsonl" 1e-300
for to in "4 1" "1 4"; do
    set -- $to
    # shellcheck disable=SC2046
    if mpi $(($1 * $2)) mt-train $(args "$1" "$2") --metrics-file "$d/r$1$2.jsonl" --load "$d/r$1$2" >"$d/r$1$2.log" 2>"$d/r$1$2.err"; then
        t_resumed_losses "(2,2,2) checkpoint resharded to TP=$1 PP=$2 resumes with the (2,2,2) losses" "$ref3" "$d/r$1$2.jsonl"
    else t_fail "(2,2,2) resharded to TP=$1 PP=$2, resumed" "$(tail -3 "$d/r$1$2.err")"; fi
done

# layouts that cannot split the model, refused before training with the flag named
# shellcheck disable=SC2046
t_fails "PP=3 does not divide 4 layers" mpi 3 mt-train $(args 1 3)
grep -q -- '--pipeline-model-parallel-size (3) must divide --num-layers (4)' "$T_TMP/err" &&
    t_pass "PP=3: the message names the flag" || t_fail "PP=3 message" "$(tail -2 "$T_TMP/err")"
# shellcheck disable=SC2046
t_fails "6 ranks are not a multiple of TP=2 x PP=4" mpi 6 mt-train $(args 2 4)
grep -q -- 'pipeline-model-parallel-size' "$T_TMP/err" && t_pass "6 ranks, TP=2 PP=4: the message names the flag" ||
    t_fail "6 ranks, TP=2 PP=4 message" "$(tail -2 "$T_TMP/err")"
t_cleanup
