#!/usr/bin/env bash
# step-sync.sh: the host syncs of a training step on the sim backend (MT_STEP_STATS=1: mt-train's per-step
# line of mtk_stats) do not grow with the micro-batches or the tensors: one sync per step (the copy back of
# the grad norm's sum of squares and the losses of all micro-batches together) with 1 and 4 micro-batches,
# 2 and 4 layers, with --fp16's loss scaler (its overflow check is the norm's) and with the LLaMA family's
# options. Before the losses stayed on the device a step made 1 + 2 x micro-batches syncs (3 and 9 here);
# each figure is exact, so one more sync per micro-batch or per tensor fails. No copy to the device waits
# either (they go through pinned staging slots; before, each of a micro-batch's three waited for the
# queue: 3 and 12 a step here). With tensor parallelism
# (mt-train -n 2) the host-staged communicator of the simulator syncs for each of its collectives, but
# rank 1, which counts only the split tensors in the grad norm (5 runs of them with 2 layers), makes as
# many syncs as rank 0 (one run): before the norm was one pass, rank 1 made 4 more, one per extra run.
# The launches per step are printed for bench/README. Hidden dropout (0.1, the default, on in the runs
# above) costs exactly 2L + 2 launches per micro-batch over --hidden-dropout 0 (L layers: the MLP output's
# dropout forward and backward, the embedding's forward and backward); the attention output's dropout is
# fused into the residual add and norm after it, and its backward into that norm's backward (before,
# unfused, it was 4L + 2: 40, not 24, with 2 layers and 4 micro-batches; 32 with only the forward fused).
. "$(dirname "$0")/../lib.sh"
d=$T_TMP
t_sim_setup 2
args="--hidden-size 32 --num-attention-heads 4 --seq-length 24 --max-position-embeddings 32
      --tokenizer-type NullTokenizer --vocab-size 60 --make-vocab-size-divisible-by 16 --micro-batch-size 2
      --train-iters 3 --lr 3e-3 --lr-warmup-iters 1 --clip-grad 1.0 --log-interval 1 --eval-iters 0
      --split 90,5,5 --seed 5 --data-path $d/data --data-cache-path $d/cache"
steps() {   # NAME FLAGS...: the run's per-step lines as "iteration syncs upload-waits launches ops" in
            # $d/NAME.stats (rank 0) and $d/NAME.stats1 (rank 1, if any; $pre: mt-train's first flags)
    local name=$1
    shift
    # shellcheck disable=SC2086
    if ! MT_DEVICE=sim MT_STEP_STATS=1 mt-train $pre $args "$@" >"$d/$name.log" 2>"$d/$name.err"; then
        t_fail "$name: mt-train on sim" "$(tail -2 "$d/$name.err")"
        return 1
    fi
    for r in 0 1; do
        sed -n 's/^step stats | rank '$r' | iteration \([0-9]*\) | host syncs: \([0-9]*\) | upload waits: \([0-9]*\) | kernel launches: \([0-9]*\) | kernel ops: \([0-9]*\)$/\1 \2 \3 \4 \5/p' \
            "$d/$name.err" >"$d/$name.stats${r#0}"
    done
    if [ "$(wc -l <"$d/$name.stats")" != 3 ]; then
        t_fail "$name: a step stats line per iteration" "$(head -3 "$d/$name.err")"
        return 1
    fi
}
check() {   # NAME FLAGS...: every step of the run makes exactly one host sync and no upload wait
    local name=$1
    steps "$@" || return
    local bad
    bad=$(awk '$2 != 1 || $3 != 0' "$d/$name.stats")
    if [ -z "$bad" ]; then
        t_pass "$name: one host sync and no upload wait per step ($(awk 'END {printf "iteration %d: %d launches, %d ops", $1, $4, $5}' "$d/$name.stats"))"
    else
        t_fail "$name: one host sync and no upload wait per step" "iteration, syncs, upload waits, launches, ops: $bad"
    fi
}
pre=''
check "2 layers, 1 micro-batch" --num-layers 2 --global-batch-size 2
check "2 layers, 4 micro-batches" --num-layers 2 --global-batch-size 8
check "4 layers, 4 micro-batches" --num-layers 4 --global-batch-size 8
check "2 layers, 4 micro-batches, fp16 loss scaler" --num-layers 2 --global-batch-size 8 --fp16
check "LLaMA options, 2 layers, 4 micro-batches" --num-layers 2 --global-batch-size 8 --normalization RMSNorm \
    --position-embedding-type rope --swiglu --ffn-hidden-size 48 --untie-embeddings-and-output-weights --disable-bias-linear
if steps "2 layers, 4 micro-batches, no hidden dropout" --num-layers 2 --global-batch-size 8 --hidden-dropout 0; then
    want=$((4 * (2 * 2 + 2)))
    got=$(paste -d' ' "$d/2 layers, 4 micro-batches.stats" "$d/2 layers, 4 micro-batches, no hidden dropout.stats" |
        awk '{print $4 - $9}' | sort -u | xargs)
    if [ "$got" = "$want" ]; then
        t_pass "hidden dropout adds 4 x (2 x 2 + 2) = $want launches per step (2 layers, 4 micro-batches)"
    else
        t_fail "hidden dropout adds 4 x (2 x 2 + 2) = $want launches per step (2 layers, 4 micro-batches)" "adds: $got"
    fi
fi
pre='-n 2'
if steps tp --num-layers 2 --global-batch-size 8 --tensor-model-parallel-size 2; then
    if [ "$(cut -d' ' -f1,2 "$d/tp.stats")" = "$(cut -d' ' -f1,2 "$d/tp.stats1")" ]; then
        t_pass "TP=2: rank 1 (5 runs of counted tensors) makes rank 0's syncs per step ($(tail -1 "$d/tp.stats1" | cut -d' ' -f2))"
    else
        t_fail "TP=2: rank 1 makes rank 0's syncs per step" "rank 0: $(cut -d' ' -f2 "$d/tp.stats" | xargs), rank 1: $(cut -d' ' -f2 "$d/tp.stats1" | xargs)"
    fi
fi
