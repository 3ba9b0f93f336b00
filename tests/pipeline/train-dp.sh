#!/usr/bin/env bash
# train-dp.sh: data-parallel mt-train under mpirun (2 and 4 CPU ranks) and mt-train -n: every iteration's
# loss and grad norm equal the one-rank run's at the same global batch (1e-5 relative), the log states
# the world and data-parallel sizes, each rank reads exactly its share of the samples as Megatron's sampler
# assigns them, one rank writes the log and checkpoints and resume is exact, a launch of several tasks
# without PMIx is refused before anything is written, a killed rank ends the job, and SIGTERM to one rank
# with --exit-signal-handler stops every rank at the same iteration with one checkpoint and exit 0.
. "$(dirname "$0")/../lib.sh"
py=/usr/bin/python3
d=$T_TMP
t_mpi_walk
args=$T_WALK
# the newest rank (mt-train re-executes itself as /proc/self/exe, so match the command line)
newest_rank() { pgrep -n -f "^([^ ]*/)?mt-train .*--data-path $d/data "; }

# shellcheck disable=SC2086
MT_TRACE_SAMPLES=$d/trace1 mt-train $args --metrics-file "$d/m1.jsonl" --save "$d/c1" --save-interval 10 \
    >"$d/one.log" 2>"$d/one.err" || t_fail "one rank" "$(tail -3 "$d/one.err")"
t_grep "one rank: the log states world and data-parallel size" '^using world size: 1, data-parallel size: 1,' "$d/one.log"

for n in 2 4; do
    # shellcheck disable=SC2086
    # DP=4 in small gradient buckets (28544 parameters in buckets of 1000)
    bucket=""; [ $n = 4 ] && bucket="--ddp-bucket-size 1000"
    # shellcheck disable=SC2086
    if MT_TRACE_SAMPLES=$d/trace$n mpi $n mt-train $args $bucket --metrics-file "$d/m$n.jsonl" --save "$d/c$n" \
        --save-interval 10 >"$d/dp$n.log" 2>"$d/dp$n.err"; then t_pass "DP=$n${bucket:+ $bucket} under mpirun"
    else t_fail "DP=$n under mpirun" "$(tail -5 "$d/dp$n.err")"; fi
    t_grep "DP=$n: the log states world and data-parallel size" "^using world size: $n, data-parallel size: $n," "$d/dp$n.log"
    t_same_losses "DP=$n: the one-rank losses and grad norms of 20 iterations" "$d/m1.jsonl" "$d/m$n.jsonl"
    c=$(grep -cE '^ *(\[[^]]*\])? iteration ' "$d/dp$n.log")
    [ "$c" = 20 ] && t_pass "DP=$n: one rank prints the iteration lines" || t_fail "DP=$n: one rank prints" "$c lines"
    # each rank's samples: the sampler's share, disjoint, together the one-rank run's samples
    if $py - "$d/trace" "$n" >"$d/tr.out" 2>&1 <<'PYEOF'
import sys
base, n = sys.argv[1], int(sys.argv[2])
def read(p):
    return [tuple(map(int, l.split())) for l in open(p)]
one = read(base + "1.0")
mbs, gbs = 2, 8
all_samples = sorted(s for it, f, b in one for s in range(f, f + b))
got = []
for r in range(n):
    rows = read("%s%d.%d" % (base, n, r))
    assert len(rows) == 20 * gbs // (mbs * n), (r, len(rows))
    for k, (it, f, b) in enumerate(rows):
        m = k % (gbs // (mbs * n))
        want = (it - 1) * gbs + (m * n + r) * mbs
        assert f == want and b == mbs, ("rank", r, "row", k, (it, f, b), "expected first", want)
        got += range(f, f + b)
assert len(got) == len(set(got)), "ranks read the same sample"
assert sorted(got) == all_samples, "not the one-rank samples"
print("%d ranks, %d samples each" % (n, len(got) // n))
PYEOF
    then t_pass "DP=$n: ranks read different samples, Megatron's share each ($(cat "$d/tr.out"))"
    else t_fail "DP=$n: samples" "$(tail -2 "$d/tr.out")"; fi
    # one checkpoint layout: the tracker at 20, rank 0's files, no temporaries (the weights themselves are not
    # compared with the one-rank run's here; the losses and grad norms of every iteration above are)
    if [ "$(cat "$d/c$n/latest_checkpointed_iteration.txt")" = 20 ] && [ -s "$d/c$n/iter_0000010/mp_rank_00/model.safetensors" ] &&
        [ "$(find "$d/c$n" -name '*.tmp-*' | wc -l)" = 0 ]; then t_pass "DP=$n: checkpoints at 10 and 20"
    else t_fail "DP=$n: checkpoints" "$(ls -R "$d/c$n" | head)"; fi
done

# bytes each rank sends per step: the ring all-reduce volume 2(N-1)/N of the gradient bytes, plus the loss
# sums; the gradient bytes computed here from the model's sizes (2 layers, hidden 32, ffn 128, the
# vocabulary of 61 padded to 64, 32 positions), not taken from mt's log
grad_bytes=$((4 * (64 * 32 + 32 * 32 + 2 * (3 * 32 * 32 + 3 * 32 + 32 * 32 + 32 + 4 * 32 + 128 * 32 + 128 + 32 * 128 + 32) + 2 * 32)))
for n in 2 4; do
    line=$(grep 'data-parallel communication per iteration' "$d/dp$n.log")
    sent=$(echo "$line" | sed -n 's/.*bytes sent: \([0-9]*\) .*/\1/p'); vol=$((2 * (n - 1) * grad_bytes / n))
    if [ -n "$sent" ] && [ -n "$vol" ] && [ "$sent" -ge "$vol" ] && [ "$sent" -le $((vol + 64)) ]; then
        t_pass "DP=$n: bytes sent per step $sent = ring volume $vol + the loss sums"
    else t_fail "DP=$n: bytes sent per step" "'$line'"; fi
done

# resume DP=2 from its iteration-10 checkpoint: the same losses as the uninterrupted run
cp -r "$d/c2" "$d/r2" && echo 10 > "$d/r2/latest_checkpointed_iteration.txt" && rm -rf "$d/r2/iter_0000020"
# shellcheck disable=SC2086
mpi 2 mt-train $args --metrics-file "$d/r2.jsonl" --load "$d/r2" --save "$d/r2" >"$d/r2.log" 2>"$d/r2.err" ||
    t_fail "DP=2 resume" "$(tail -3 "$d/r2.err")"
$py - "$d/m2.jsonl" "$d/r2.jsonl" >"$d/res.out" 2>&1 <<'PYEOF' && t_pass "DP=2: resume at 10 gives the same losses" || t_fail "DP=2 resume" "$(tail -2 "$d/res.out")"
import json, sys
a = {r["iteration"]: r["lm_loss"] for r in map(json.loads, open(sys.argv[1])) if r["type"] == "train"}
b = {r["iteration"]: r["lm_loss"] for r in map(json.loads, open(sys.argv[2])) if r["type"] == "train"}
assert sorted(b) == list(range(11, 21)), sorted(b)
assert all(a[i] == b[i] for i in b), [(a[i], b[i]) for i in b]
PYEOF

# the distributed optimizer (ZeRO-1): the same losses; its shards in the checkpoint, resumed at DP=1, 2 and 4
for n in 2 4; do
    # shellcheck disable=SC2086
    bucket=""; [ $n = 4 ] && bucket="--ddp-bucket-size 777"
    # shellcheck disable=SC2086
    if mpi $n mt-train $args $bucket --use-distributed-optimizer --metrics-file "$d/do$n.jsonl" --save "$d/cdo$n" \
        --save-interval 10 >"$d/do$n.log" 2>"$d/do$n.err"; then t_pass "DP=$n --use-distributed-optimizer"
    else t_fail "DP=$n --use-distributed-optimizer" "$(tail -5 "$d/do$n.err")"; fi
    t_same_losses "DP=$n distributed optimizer: the one-rank losses and grad norms" "$d/m1.jsonl" "$d/do$n.jsonl"
done
# in bf16 the shard's update is all-gathered into the fp32 parameters and only then into the bf16 working
# copy that the next forward pass reads: the one-rank bf16 losses (fp32 gradient sums in another order)
# shellcheck disable=SC2086
mt-train $args --bf16 --metrics-file "$d/b1.jsonl" >"$d/b1.log" 2>"$d/b1.err" || t_fail "one rank --bf16" "$(tail -3 "$d/b1.err")"
# shellcheck disable=SC2086
if mpi 2 mt-train $args --bf16 --use-distributed-optimizer --metrics-file "$d/bdo2.jsonl" >"$d/bdo2.log" 2>"$d/bdo2.err"
then t_same_losses "DP=2 --bf16 distributed optimizer: the one-rank bf16 losses (1e-3)" "$d/b1.jsonl" "$d/bdo2.jsonl" 1e-3
else t_fail "DP=2 --bf16 --use-distributed-optimizer" "$(tail -5 "$d/bdo2.err")"; fi
c=$d/cdo2/iter_0000010/mp_rank_00
if [ -s "$c/distrib_optim_000.safetensors" ] && [ -s "$c/distrib_optim_001.safetensors" ] && [ ! -e "$c/optim.safetensors" ] &&
    grep -q '"shard_offsets"' "$c/meta.json"; then t_pass "distributed optimizer: one shard file per rank in the checkpoint"
else t_fail "distributed optimizer checkpoint" "$(ls "$c")"; fi
for n in 1 2 4; do
    rm -rf "$d/rd$n" && cp -r "$d/cdo2" "$d/rd$n" && printf 10 >"$d/rd$n/latest_checkpointed_iteration.txt" && rm -rf "$d/rd$n/iter_0000020"
    opt=--use-distributed-optimizer; [ $n = 1 ] && opt=
    # shellcheck disable=SC2086
    if mpi $n mt-train $args $opt --metrics-file "$d/rd$n.jsonl" --load "$d/rd$n" --save "$d/rd$n" >"$d/rd$n.log" 2>"$d/rd$n.err" &&
        $py - "$d/do2.jsonl" "$d/rd$n.jsonl" >"$d/rd.out" 2>&1 <<'PYEOF'
import json, sys
a = {r["iteration"]: r["lm_loss"] for r in map(json.loads, open(sys.argv[1])) if r["type"] == "train"}
b = {r["iteration"]: r["lm_loss"] for r in map(json.loads, open(sys.argv[2])) if r["type"] == "train"}
assert sorted(b) == list(range(11, 21)), sorted(b)
w = max(abs(a[i] - b[i]) / a[i] for i in b)
assert w < 1e-5, w
print("worst %.2g" % w)
PYEOF
    then t_pass "DP=2 sharded checkpoint resumed on DP=$n ${opt:-(plain optimizer)}: the same losses ($(cat "$d/rd.out"))"
    else t_fail "DP=2 sharded checkpoint resumed on DP=$n" "$(tail -3 "$d/rd$n.err") $(tail -2 "$d/rd.out")"; fi
done

# optimizer memory per rank in the memory line: 1/DP of the plain optimizer's
big="${args/--hidden-size 32/--hidden-size 128} --train-iters 1 --lr-warmup-iters 0 --eval-iters 0"
# shellcheck disable=SC2086
mt-train $big >"$d/mem1.log" 2>&1
for n in 2 4; do
    # shellcheck disable=SC2086
    mpi $n mt-train $big --use-distributed-optimizer >"$d/mem$n.log" 2>&1
    o1=$(sed -n 's/.*| optimizer: \([0-9.]*\) |.*/\1/p' "$d/mem1.log"); on=$(sed -n 's/.*| optimizer: \([0-9.]*\) |.*/\1/p' "$d/mem$n.log")
    if [ -n "$o1" ] && [ -n "$on" ] && awk -v a="$o1" -v b="$on" -v n=$n 'BEGIN { exit !(a > 1 && b - a / n < 0.06 && a / n - b < 0.06) }'
    then t_pass "DP=$n distributed optimizer: optimizer memory per rank $on MB (one rank: $o1 MB)"
    else t_fail "optimizer memory at DP=$n" "one rank '$o1', DP=$n '$on': $(grep memory "$d/mem$n.log")"; fi
done

# mt-train -n 2: its own launcher, no Slurm, no mpirun given
# shellcheck disable=SC2086
# (with an index cache of its own: rank 0 builds it, the other reads it)
if timeout -k 5 300 mt-train -n 2 $args --data-cache-path "$d/cache-n2" --metrics-file "$d/n2.jsonl" >"$d/n2.log" 2>"$d/n2.err"
then t_pass "mt-train -n 2"
else t_fail "mt-train -n 2" "$(tail -5 "$d/n2.err")"; fi
t_grep "mt-train -n 2: two ranks" '^using world size: 2, data-parallel size: 2,' "$d/n2.log"
t_same_losses "mt-train -n 2: the one-rank losses" "$d/m1.jsonl" "$d/n2.jsonl"

# several tasks without PMIx (srun --mpi=none -n 2 sets these): refused before anything is written
# shellcheck disable=SC2086
if env -u PMIX_RANK -u PMIX_NAMESPACE SLURM_NTASKS=2 SLURM_STEP_NUM_TASKS=2 mt-train $args --save "$d/refused" \
    --tensorboard-dir "$d/refused-tb" >"$d/ref.out" 2>"$d/ref.err"; then t_fail "launch without PMIx refused" "exit 0"
elif grep -q -- '--mpi=pmix' "$d/ref.err" && [ ! -e "$d/refused" ] && [ ! -e "$d/refused-tb" ] && [ ! -s "$d/ref.out" ]; then
    t_pass "launch of 2 tasks without PMIx refused, nothing written ($(head -c 120 "$d/ref.err"))"
else t_fail "launch without PMIx refused" "$(cat "$d/ref.err") $(ls "$d")"; fi

# a killed rank ends the job within 10 s, naming the rank and the host
long="${args/--train-iters 20/--train-iters 100000} --eval-iters 0"
# shellcheck disable=SC2086
(mpi 2 mt-train $long >"$d/k.log" 2>"$d/k.err"; echo $? >"$d/k.rc") &
t_wait_line "$d/k.log" ' iteration  *3/'
victim=$(newest_rank)
echo "# killing rank pid $victim: $(tr '\0' ' ' </proc/"$victim"/cmdline 2>/dev/null | head -c 60)" >&2
t0=$(date +%s.%N)
kill -9 "$victim"
for _ in $(seq 200); do [ -s "$d/k.rc" ] && break; sleep 0.1; done
t1=$(date +%s.%N)
wait
if [ -s "$d/k.rc" ] && [ "$(cat "$d/k.rc")" != 0 ] && awk -v a="$t0" -v b="$t1" 'BEGIN { exit !(b - a < 10) }' &&
    grep -qE "rank [01].*$(hostname)|$(hostname).*rank [01]" "$d/k.err"; then
    t_pass "a killed rank ends the job within 10 s ($(grep -m1 -E 'rank [01]' "$d/k.err" | head -c 150))"
else t_fail "a killed rank ends the job" "rc $(cat "$d/k.rc" 2>/dev/null) after $(awk -v a="$t0" -v b="$t1" 'BEGIN { print b - a }') s: $(tail -c 400 "$d/k.err")"; fi

# an error on one rank only (its sample trace cannot be created) ends the job, naming the rank and host
mkdir -p "$d/bad.1"
t0=$(date +%s.%N)
# shellcheck disable=SC2086
MT_TRACE_SAMPLES=$d/bad mpi 2 mt-train $long >"$d/b.log" 2>"$d/b.err"
rc=$?
t1=$(date +%s.%N)
if [ $rc != 0 ] && grep -q "^mt-train: rank 1 ($(hostname)): MT_TRACE_SAMPLES: .*bad.1" "$d/b.err" &&
    awk -v a="$t0" -v b="$t1" 'BEGIN { exit !(b - a < 10) }'; then t_pass "an error on rank 1 ends the job, naming rank and host"
else t_fail "an error on rank 1" "rc $rc: $(head -c 400 "$d/b.err")"; fi

# SIGTERM to one rank only, with --exit-signal-handler: every rank stops at the same iteration, one
# checkpoint, exit 0
# shellcheck disable=SC2086
(mpi 2 mt-train $long --exit-signal-handler --save "$d/sig" >"$d/s.log" 2>"$d/s.err"; echo $? >"$d/s.rc") &
t_wait_line "$d/s.log" ' iteration  *3/'
victim=$(newest_rank)
kill -TERM "$victim"
t_wait_line "$d/s.rc" . 1200
wait
t_sigterm_stop "SIGTERM to one rank" "$d/sig" "$d/s.rc" "$d/s.err"

# flag errors: one line, exit non-zero
for bad in "-n 0" "-n abc" "-n 100000" "--ddp-bucket-size 0" "--device tpu"; do
    # shellcheck disable=SC2086
    if mt-train $bad $args --save "$d/flagerr" >"$d/fo" 2>"$d/fe"; then t_fail "mt-train $bad: error" "exit 0"
    elif [ "$(wc -l <"$d/fe")" = 1 ] && [ ! -e "$d/flagerr" ]; then t_pass "mt-train $bad: one-line error ($(cat "$d/fe"))"
    else t_fail "mt-train $bad: one-line error" "$(head -c 300 "$d/fe")"; fi
done
