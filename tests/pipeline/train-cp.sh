#!/usr/bin/env bash
# train-cp.sh: context-parallel mt-train (--context-parallel-size) on CPU ranks under mpirun. Each sequence is
# cut into 2 CP chunks, rank r holding chunks r and 2 CP - 1 - r; the attention runs around the ring.
#   - CP 2 and CP 4, CP 2 x TP 2 + SP, CP 2 x PP 2, CP 2 x DP 2 with the distributed optimizer, and CP 2 with
#     --cp-comm-type all_gather, for GPT and for the LLaMA options (rope, GQA, SwiGLU, RMSNorm, untied):
#     every one of 20 iterations' lm loss and grad norm, and the validation losses, equal the one-rank run's
#     with dropout on (1e-5 relative, fp32: the masks are drawn by global coordinates);
#   - the bytes rank 0 sent to its context-parallel group in a step equal the volume computed here from
#     the sizes (the ring's blocks of keys and values, their gradients, the gathered losses), and the
#     volume the log states; with --eod-mask-loss (the loss mask follows the chunks) CP 4 = one rank;
#   - a checkpoint saved at CP 2 (with the distributed optimizer over data x context) resumes at CP 1 and
#     at CP 4 with the uninterrupted run's losses;
#   - at a sequence of 4096, the activations of a rank at CP 4 (its memory line) are within 10% of 1/4 of
#     CP 1's, and the planner (--dry-run) prints the runs' memory lines; under a device memory limit
#     (MT_CPU_MEMORY) that one rank cannot train the sequence in, four ranks at CP 4 do;
#   - mixtures of experts (dropless, the load-balancing loss per micro-batch and per sequence, the z-loss):
#     CP 2, CP 2 x EP 2 and CP 2 x TP 2 + SP give the one-rank losses, grad norms and auxiliary losses;
#   - layouts that cannot split are refused before training, naming the flag.
. "$(dirname "$0")/../lib.sh"
py=/usr/bin/python3
d=$T_TMP
if ! command -v mpirun >/dev/null; then t_fail "mpirun" "openmpi-bin is not installed (make deps)"; exit 1; fi
t_mpi_env

PYTHONPATH=$T_TOP/tests/oracle $py "$T_TOP/tests/oracle/walk_data.py" "$d/data" 7 300

# 4 heads, ffn 128, sequences of 32 (8 chunks of 4 tokens at CP 4). Dropout is on (Megatron's defaults).
base="--num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 32 --max-position-embeddings 32
      --tokenizer-type NullTokenizer --vocab-size 60 --make-vocab-size-divisible-by 16
      --micro-batch-size 2 --global-batch-size 8 --train-iters 20 --lr 3e-3 --min-lr 3e-4 --lr-decay-style cosine
      --lr-warmup-iters 5 --weight-decay 0.1 --clip-grad 1.0 --log-interval 1 --eval-interval 10 --eval-iters 2
      --split 90,5,5 --seed 77 --data-path $d/data --data-cache-path $d/cache"
llama="--position-embedding-type rope --normalization RMSNorm --swiglu --group-query-attention --num-query-groups 2
       --untie-embeddings-and-output-weights --disable-bias-linear"
# shellcheck disable=SC2086
mt-train $base --train-iters 1 --eval-iters 0 >/dev/null 2>&1   # the index cache, once

for family in gpt llama; do
    fam=""; [ $family = llama ] && fam=$llama
    # shellcheck disable=SC2086
    mt-train $base $fam --metrics-file "$d/$family.jsonl" >"$d/$family.log" 2>"$d/$family.err" ||
        t_fail "$family: one rank" "$(tail -3 "$d/$family.err")"
    for layout in "2 2 1 1" "4 4 1 1" "4 2 2 1 --sequence-parallel" "4 2 1 2" "4 2 1 1 --use-distributed-optimizer" \
        "2 2 1 1 --cp-comm-type all_gather"; do
        set -- $layout
        n=$1 cp=$2 tp=$3 pp=$4; shift 4
        opt="$*" dp=$((n / (cp * tp * pp)))
        name="$family CP=$cp TP=$tp PP=$pp DP=$dp${opt:+ $opt}" m=$d/$family-$n-$cp-$tp-$pp$(echo "$opt" | tr -d " ")
        # shellcheck disable=SC2086
        if mpi "$n" mt-train $base $fam --context-parallel-size "$cp" --tensor-model-parallel-size "$tp" \
            --pipeline-model-parallel-size "$pp" $opt --metrics-file "$m.jsonl" >"$m.log" 2>"$m.err"; then
            t_same_losses "$name: the one-rank losses and grad norms of 20 iterations, dropout on" "$d/$family.jsonl" "$m.jsonl"
        else t_fail "$name under mpirun" "$(tail -5 "$m.err")"; continue; fi
        [ "$family" = gpt ] || continue
        t_grep "$name: the log states the sizes" \
            "^using world size: $n, data-parallel size: $dp, context-parallel size: $cp, tensor-model-parallel size: $tp," "$m.log"
        # rank 0's bytes to its context-parallel group in a step, computed independently of mt's own figure:
        # per micro-batch and layer of its stage, its block of keys and values (B x T/CP tokens x 2 x its
        # tensor rank's heads x 8 floats) CP - 1 hops forward and CP - 1 backward, and its fp32 gradient
        # CP hops around the ring (all_gather: a reduce-scatter, CP - 1 parts); on the last stage the losses
        # of the micro-batch's tokens gathered (CP - 1 parts of B x T/CP floats)
        sent=$(sed -n 's/.*context-parallel communication per iteration | bytes sent: \([0-9]*\) .*/\1/p' "$m.log")
        want=$($py -c "
cp, tp, pp, dp, B, T, heads, hs, L = $cp, $tp, $pp, $dp, 2, 32, 4, 8, 2
micro = 8 // (B * dp)
kv = B * (T // cp) * 2 * (heads // tp) * hs * 4
grad_hops = cp - 1 if '$opt'.find('all_gather') >= 0 else cp
per = (L // pp) * (2 * (cp - 1) * kv + grad_hops * kv) + ((cp - 1) * B * (T // cp) * 4 if pp == 1 else 0)
print(micro * per)")
        said=$(sed -n 's/.*context-parallel communication per iteration | .* the losses: \([0-9]*\)$/\1/p' "$m.log")
        if [ -n "$sent" ] && [ "$sent" = "$want" ] && [ "$said" = "$want" ]; then
            t_pass "$name: bytes sent to the context-parallel group per step $sent = $want, as the log's volume says"
        else t_fail "$name: context-parallel bytes per step" "sent '$sent', the log's volume '$said', expected $want"; fi
    done
done
# the loss mask follows the chunks: --eod-mask-loss leaves the ends of documents out of the loss
# shellcheck disable=SC2086
mt-train $base --eod-mask-loss --metrics-file "$d/eod.jsonl" >"$d/eod.log" 2>"$d/eod.err" || t_fail "one rank --eod-mask-loss" "$(tail -3 "$d/eod.err")"
# shellcheck disable=SC2086
if mpi 4 mt-train $base --eod-mask-loss --context-parallel-size 4 --metrics-file "$d/eod4.jsonl" >"$d/eod4.log" 2>"$d/eod4.err"
then t_same_losses "CP=4 --eod-mask-loss: the one-rank losses and grad norms" "$d/eod.jsonl" "$d/eod4.jsonl"
else t_fail "CP=4 --eod-mask-loss" "$(tail -3 "$d/eod4.err")"; fi

# mixtures of experts (dropless): the router's statistics, a rank's tokens' part, summed over the group, so the
# load-balancing loss (per micro-batch, and per sequence with seq_aux_loss) and the z-loss are the whole
# sequences', with their gradients; the experts over the context ranks too (--expert-model-parallel-size 2)
moe="--num-layers 4 --disable-bias-linear --num-experts 4 --moe-router-topk 2 --moe-ffn-hidden-size 24
     --moe-layer-freq [1,0,1,1] --moe-aux-loss-coeff 1e-2 --moe-z-loss-coeff 1e-3
     --moe-shared-expert-intermediate-size 16 --moe-shared-expert-gate"
same_moe() {   # NAME A.jsonl B.jsonl: every iteration's load-balancing and z losses within 1e-5
    if $py - "$2" "$3" >"$T_TMP/moe.out" 2>&1 <<'PYEOF'
import json, sys
lb = lambda r: r["load_balancing_loss"] if "load_balancing_loss" in r else r["seq_load_balancing_loss"]
load = lambda p: {r["iteration"]: (lb(r), r["z_loss"]) for r in map(json.loads, open(p)) if r["type"] == "train"}
a, b = load(sys.argv[1]), load(sys.argv[2])
assert sorted(a) == sorted(b) == list(range(1, 21)), (sorted(a), sorted(b))
w = max(abs(x - y) / abs(x) for i in a for x, y in zip(a[i], b[i]))
assert w < 1e-5, w
print("worst %.2g" % w)
PYEOF
    then t_pass "$1 ($(cat "$T_TMP/moe.out"))"; else t_fail "$1" "$(tail -2 "$T_TMP/moe.out")"; fi
}
for lb in aux_loss seq_aux_loss; do
    # shellcheck disable=SC2086
    mt-train $base $moe --moe-router-load-balancing-type $lb --metrics-file "$d/moe-$lb.jsonl" >"$d/moe-$lb.log" \
        2>"$d/moe-$lb.err" || t_fail "MoE $lb: one rank" "$(tail -3 "$d/moe-$lb.err")"
    layouts=("2:")
    [ $lb = aux_loss ] && layouts=("2:" "2:--expert-model-parallel-size 2" "4:--tensor-model-parallel-size 2 --sequence-parallel")
    for layout in "${layouts[@]}"; do
        n=${layout%%:*} opt=${layout#*:} m=$d/moe-$lb-$n$(echo "$opt" | tr -d " ")
        name="MoE $lb CP=2${opt:+ $opt}"
        # shellcheck disable=SC2086
        if mpi "$n" mt-train $base $moe --moe-router-load-balancing-type $lb --context-parallel-size 2 $opt \
            --metrics-file "$m.jsonl" >"$m.log" 2>"$m.err"; then
            t_same_losses "$name: the one-rank losses and grad norms of 20 iterations" "$d/moe-$lb.jsonl" "$m.jsonl"
            same_moe "$name: the one-rank load-balancing and z losses" "$d/moe-$lb.jsonl" "$m.jsonl"
        else t_fail "$name under mpirun" "$(tail -5 "$m.err")"; fi
    done
done

# a checkpoint at CP 2 x DP 2 (the distributed optimizer's shards over the four data x context ranks),
# stopped at 10, resumed at CP 1 (DP 2) and at CP 4: the uninterrupted one-rank run's losses
s=$d/s
# shellcheck disable=SC2086
mpi 4 mt-train $base --context-parallel-size 2 --use-distributed-optimizer --save "$s" --save-interval 10 \
    --exit-interval 10 >"$s.log" 2>"$s.err" || t_fail "CP=2 DP=2 --save, stopped at 10" "$(tail -3 "$s.err")"
for to in "2 1 --use-distributed-optimizer" "4 4"; do
    set -- $to
    n=$1 cp=$2; shift 2
    # shellcheck disable=SC2086,SC2068
    if mpi "$n" mt-train $base --context-parallel-size "$cp" $@ --load "$s" --metrics-file "$d/r$n$cp.jsonl" \
        >"$d/r$n$cp.log" 2>"$d/r$n$cp.err"; then
        t_resumed_losses "checkpoint of CP=2 DP=2 resumed on $n ranks at CP=$cp: the one-rank losses" "$d/gpt.jsonl" "$d/r$n$cp.jsonl"
    else t_fail "checkpoint of CP=2 resumed at CP=$cp" "$(tail -3 "$d/r$n$cp.err")"; fi
done

# memory at a sequence of 4096 (one iteration; 8 layers: the ring's buffers, held once for all the layers,
# are about one layer's activations of the rank's tokens: two blocks of keys and values and three of their
# fp32 gradients, the third for the overlapped gradient hops in the forward's block-result buffer)
long="--num-layers 8 --hidden-size 64 --num-attention-heads 4 --seq-length 4096 --max-position-embeddings 4096
      --tokenizer-type NullTokenizer --vocab-size 60 --micro-batch-size 1 --global-batch-size 1 --train-iters 1
      --lr 1e-3 --log-interval 1 --eval-iters 0 --split 100,0,0 --seed 1 --data-path $d/data --data-cache-path $d/cache"
act0() { sed -n 's/^\[Rank 0\] .*memory (MB) | .* | activations: \([0-9.]*\) | .*/\1/p' "$1" | head -1; }
line0() { sed -n 's/^\[Rank 0\] .*memory (MB) | \(.* | total: [0-9.]*\) | .*/\1/p' "$1" | head -1; }
# shellcheck disable=SC2086
mt-train $long >"$d/l1.log" 2>"$d/l1.err" || t_fail "sequence 4096, one rank" "$(tail -3 "$d/l1.err")"
# shellcheck disable=SC2086
mpi 4 mt-train $long --context-parallel-size 4 >"$d/l4.log" 2>"$d/l4.err" || t_fail "sequence 4096, CP=4" "$(tail -3 "$d/l4.err")"
a1=$(act0 "$d/l1.log") a4=$(act0 "$d/l4.log")
if [ -n "$a1" ] && [ -n "$a4" ] && $py -c "import sys; r = $a4 / ($a1 / 4); print('%.3f' % r); sys.exit(not 0.9 <= r <= 1.1)" >"$d/ratio"; then
    t_pass "sequence 4096: a CP=4 rank's activations $a4 MB = $(cat "$d/ratio") x 1/4 of one rank's $a1 MB"
else t_fail "sequence 4096: CP=4 activations within 10% of 1/4" "one rank '$a1', CP=4 '$a4' ($(cat "$d/ratio"))"; fi
for cp in 1 4; do
    # shellcheck disable=SC2086
    mt-train $long --context-parallel-size $cp --dry-run --world-size $cp >"$d/p$cp" 2>&1
    got=$(line0 "$d/p$cp") want=$(line0 "$d/l$cp.log")
    if [ -n "$got" ] && [ "$got" = "$want" ]; then t_pass "sequence 4096, CP=$cp: the planner's memory line is the run's ($got)"
    else t_fail "sequence 4096, CP=$cp: the planner's memory line" "plan '$got', run '$want'"; fi
done
t_grep "sequence 4096, CP=4: the planner states the chunks and the ring's bytes" \
    "^> context parallelism: each sequence of 4096 tokens in 8 chunks, 1024 tokens on each of 4 ranks \(--cp-comm-type p2p\); bytes a rank sends to its context-parallel group per iteration: [0-9]+" "$d/p4"
# a device of 80 MiB: one rank runs out of it, four at CP=4 train
# shellcheck disable=SC2086
if MT_CPU_MEMORY=80M mt-train $long >"$d/m1.log" 2>"$d/m1.err"; then t_fail "sequence 4096 in 80 MiB, one rank" "exit 0"
else t_grep "sequence 4096 in 80 MiB: one rank refused, naming the limit" "^mt-train: .*MT_CPU_MEMORY" "$d/m1.err"; fi
# shellcheck disable=SC2086
if MT_CPU_MEMORY=80M mpi 4 mt-train $long --context-parallel-size 4 >"$d/m4.log" 2>"$d/m4.err"; then
    t_grep "sequence 4096 in 80 MiB: CP=4 trains" "iteration +1/ +1 .*lm loss: [0-9.]+E\+00" "$d/m4.log"
else t_fail "sequence 4096 in 80 MiB at CP=4" "$(tail -3 "$d/m4.err")"; fi

# a limit that is not a size: refused in one line naming the variable
# shellcheck disable=SC2086
t_fails "MT_CPU_MEMORY=80X is refused" env MT_CPU_MEMORY=80X mt-train $long
t_grep "MT_CPU_MEMORY=80X: the message names the variable" "^mt-train: .*MT_CPU_MEMORY=80X: not a size" "$T_TMP/err"

# refused before training, naming the flag
# shellcheck disable=SC2086
t_fails "a sequence of 32 over CP=3 (not a multiple of 2 x 3) is refused" mpi 3 mt-train $base --context-parallel-size 3
t_grep "CP=3: the message names the flags" "seq-length \(32\) must be a multiple of 2 x --context-parallel-size \(3\)" "$T_TMP/err"
# shellcheck disable=SC2086
t_fails "CP=4 on 2 ranks is refused" mpi 2 mt-train $base --context-parallel-size 4
t_grep "CP=4 on 2 ranks: the message names the flag" "context-parallel-size" "$T_TMP/err"
