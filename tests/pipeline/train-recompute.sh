#!/usr/bin/env bash
# train-recompute.sh: activation recomputation (--recompute-granularity full with --recompute-method
# uniform or block and --recompute-num-layers; selective). The recomputed forward passes run the same
# kernels on the same inputs with the same dropout masks, so every loss and grad norm of 20 iterations
# equals the run without recomputation bit for bit: on one rank, and with tensor, sequence and pipeline
# parallelism (where the recomputed layers' exchanges run again), the interleaved schedule included (each
# stage recomputes the layers of the chunk it runs: a wrong chunk offset gives other losses than one rank's). The activation memory of the memory line
# falls as what each layer keeps says (computed here from the sizes: every layer's input, and the
# activations of only the layers in flight of a recomputed chunk). Inconsistent flags are refused naming
# them.
. "$(dirname "$0")/../lib.sh"
py=/usr/bin/python3
d=$T_TMP
t_mpi_env

PYTHONPATH=$T_TOP/tests/oracle $py "$T_TOP/tests/oracle/walk_data.py" "$d/data" 7 300
base="--num-layers 4 --hidden-size 32 --num-attention-heads 4 --seq-length 32 --max-position-embeddings 32
      --tokenizer-type NullTokenizer --vocab-size 60 --make-vocab-size-divisible-by 16
      --micro-batch-size 2 --global-batch-size 8 --train-iters 20 --lr 3e-3 --min-lr 3e-4 --lr-decay-style cosine
      --lr-warmup-iters 5 --weight-decay 0.1 --clip-grad 1.0 --log-interval 1 --eval-interval 10 --eval-iters 2
      --split 90,5,5 --seed 77 --data-path $d/data --data-cache-path $d/cache"
# shellcheck disable=SC2086
mt-train $base --train-iters 1 --eval-iters 0 >/dev/null 2>&1   # the index cache, once
# shellcheck disable=SC2086
mt-train $base --metrics-file "$d/ref.jsonl" >"$d/ref.log" 2>"$d/ref.err" || t_fail "one rank" "$(tail -3 "$d/ref.err")"

full="--recompute-granularity full --recompute-method"
i=0
for r in "$full uniform --recompute-num-layers 1" "$full uniform --recompute-num-layers 3" \
    "$full block --recompute-num-layers 2" "--recompute-granularity selective" "--recompute-activations"; do
    i=$((i + 1))
    # shellcheck disable=SC2086
    if mt-train $base $r --metrics-file "$d/r$i.jsonl" >"$d/r$i.log" 2>"$d/r$i.err"; then
        t_same_losses "one rank, $r: the losses and grad norms without recomputation, bit for bit" "$d/ref.jsonl" "$d/r$i.jsonl" 1e-300
    else t_fail "one rank, $r" "$(tail -3 "$d/r$i.err")"; fi
done

# with tensor, sequence and pipeline parallelism: the same run without recomputation, bit for bit
if ! command -v mpirun >/dev/null; then t_fail "mpirun" "openmpi-bin is not installed (make deps)"; exit 1; fi
for par in "4 --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 --sequence-parallel" \
    "4 --pipeline-model-parallel-size 2 --use-distributed-optimizer" \
    "2 --pipeline-model-parallel-size 2 --num-layers-per-virtual-pipeline-stage 1"; do
    set -- $par
    n=$1; shift
    i=$((i + 1))
    # shellcheck disable=SC2086
    mpi "$n" mt-train $base "$@" --metrics-file "$d/p$i.jsonl" >"$d/p$i.log" 2>"$d/p$i.err" || t_fail "$* without recomputation" "$(tail -3 "$d/p$i.err")"
    # shellcheck disable=SC2086
    if mpi "$n" mt-train $base "$@" $full uniform --recompute-num-layers 1 --metrics-file "$d/q$i.jsonl" >"$d/q$i.log" 2>"$d/q$i.err"; then
        t_same_losses "$n ranks $*, full uniform recomputation: the losses without it, bit for bit" "$d/p$i.jsonl" "$d/q$i.jsonl" 1e-300
        t_same_losses "$n ranks $*, full uniform recomputation: the one-rank losses" "$d/ref.jsonl" "$d/q$i.jsonl"
    else t_fail "$n ranks $* with recomputation" "$(tail -3 "$d/q$i.err")"; fi
    # the tensor group's traffic counts the recomputed forward passes' exchanges: two all-reduces per
    # recomputed layer and micro-batch more than without recomputation (stage 0: 2 layers, 4 micro-batches,
    # N = 64 tokens x 32 x 4 bytes, ring factor 1 at TP=2)
    if [ "$1" = --tensor-model-parallel-size ]; then
        a=$(sed -n 's/.*tensor-parallel communication per iteration | bytes sent: \([0-9]*\) .*/\1/p' "$d/p$i.log")
        b=$(sed -n 's/.*tensor-parallel communication per iteration | bytes sent: \([0-9]*\) .*/\1/p' "$d/q$i.log")
        want=$((4 * 2 * 2 * 64 * 32 * 4))
        if [ -n "$a" ] && [ -n "$b" ] && [ $((b - a)) = "$want" ]; then
            t_pass "TP=2 PP=2: recomputation adds the recomputed layers' exchanges to the tensor traffic ($a -> $b bytes)"
        else t_fail "TP=2 PP=2: tensor traffic with recomputation" "'$a' -> '$b', expected +$want"; fi
    fi
done

# activation memory: what each micro-batch's context keeps (fp32, one rank, 4 layers of hidden 128, ffn
# 512, 4 heads, 4 x 128 tokens): the input of every layer; per layer slot the residual after the
# attention, the two LayerNorm outputs and their statistics, QKV, the attention output and its
# log-sum-exp, the MLP's pre-activation; a slot per layer without recomputation, one per layer of a chunk
# with uniform, one for the recomputed layers and one per other layer with block; the final norm, logits
# and cross-entropy statistics; scratch
big="--num-layers 4 --hidden-size 128 --num-attention-heads 4 --seq-length 128 --max-position-embeddings 128
     --tokenizer-type NullTokenizer --vocab-size 60 --make-vocab-size-divisible-by 16 --micro-batch-size 4
     --global-batch-size 4 --train-iters 1 --lr 1e-3 --log-interval 1 --eval-iters 0 --split 90,5,5 --seed 1
     --data-path $d/data --data-cache-path $d/cache2"
act_mb() {   # slots
    $py -c "
N, C, F, H, V, L, S, a = 4 * 128, 128, 512, 4, 64, 4, $1, 4
slot = N * C * a + 2 * N * C * a + 4 * N * 4 + 3 * N * C * a + N * C * a + N * H * 4 + N * F * a
head = N * C * a + 2 * N * 4 + N * V * a + 3 * N * 4
scratch = 3 * N * C * a + 3 * N * C * a + 2 * N * F * a + 4 * N * 4
print('%.1f' % (((L + 1) * N * C * a + S * slot + head + scratch) / 1048576))"
}
for r in "none 4" "$full uniform --recompute-num-layers 1:1" "$full uniform --recompute-num-layers 2:2" \
    "$full block --recompute-num-layers 3:2" "--recompute-granularity selective:4"; do
    opt=${r%:*} slots=${r##*:}
    [ "$opt" = "none 4" ] && opt="" slots=4
    # shellcheck disable=SC2086
    mt-train $big $opt >"$d/m.log" 2>"$d/m.err" || t_fail "activation memory${opt:+ $opt}" "$(tail -3 "$d/m.err")"
    want=$(act_mb "$slots")
    got=$(sed -n 's/.*memory (MB) .*| activations: \([0-9.]*\) |.*/\1/p' "$d/m.log")
    if [ "$got" = "$want" ]; then t_pass "activations${opt:+ with $opt}: $got MB ($slots layer slots)"
    else t_fail "activations${opt:+ with $opt}" "memory line '$got' MB, expected $want MB"; fi
done

# flags that do not go together, refused naming them
# shellcheck disable=SC2086
t_fails "full without a method" mt-train $base --recompute-granularity full
grep -q -- '--recompute-granularity full needs --recompute-method uniform or block' "$T_TMP/err" &&
    t_pass "full without a method: the message names the flags" || t_fail "full without a method: message" "$(tail -1 "$T_TMP/err")"
# shellcheck disable=SC2086
t_fails "a method with selective" mt-train $base --recompute-granularity selective --recompute-method uniform
# shellcheck disable=SC2086
t_fails "more recomputed layers than a stage has" mt-train $base $full block --recompute-num-layers 3 \
    --pipeline-model-parallel-size 2
grep -q -- '--recompute-num-layers (3) must be between 1 and the layers of a pipeline stage (2)' "$T_TMP/err" &&
    t_pass "--recompute-num-layers 3 at 2 layers a stage: the message says the range" ||
    t_fail "--recompute-num-layers out of range: message" "$(tail -1 "$T_TMP/err")"
t_cleanup
