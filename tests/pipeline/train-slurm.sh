#!/usr/bin/env bash
# train-slurm.sh: mt-train under a real Slurm started on 127.0.0.1 for the test (tests/slurm/local-slurm.sh;
# root, and the packages of `share/install-deps.sh slurm`, installed here when missing): srun --mpi=pmix with
# 2 and 4 ranks, with and without the distributed optimizer, and with tensor parallelism (TP=2, with and
# without --sequence-parallel; DP=2 x TP=2), gives the one-rank losses and grad norms; srun --mpi=none -n 2
# is refused before anything is written, in one line; a missing dataset is printed once and every task exits
# 1, an error of one task is printed once by it and ends the step; a killed task ends the step within 10 s; SIGTERM from Slurm
# (scancel --signal=TERM) with --exit-signal-handler stops every rank at one iteration with one checkpoint.
. "$(dirname "$0")/../lib.sh"
py=/usr/bin/python3
d=$T_TMP
if [ "$(id -u)" != 0 ]; then t_skip "slurm" "needs root to start slurmctld, slurmd and munged"; exit 0; fi
if ! command -v slurmctld >/dev/null || ! command -v munged >/dev/null; then
    "$T_TOP/share/install-deps.sh" slurm >"$d/deps.log" 2>&1 || true
fi
if ! command -v slurmctld >/dev/null || ! command -v munged >/dev/null || ! command -v srun >/dev/null; then
    t_skip "slurm" "slurm-wlm/munge not installed and could not be installed: $(tail -c 200 "$d/deps.log" 2>/dev/null)"; exit 0
fi
# munged wants every directory above its socket searchable by all: a directory of its own under /tmp
LOCAL_SLURM_DIR=$(mktemp -d /tmp/mt-slurm.XXXXXX) && chmod 755 "$LOCAL_SLURM_DIR"
export LOCAL_SLURM_DIR LOCAL_SLURM_PORT=$((20000 + ($$ % 4000) * 2))
slurm_stop() {
    cp "$LOCAL_SLURM_DIR"/log/*.log "$d/" 2>/dev/null
    "$T_TOP/tests/slurm/local-slurm.sh" stop >/dev/null 2>&1 && rm -rf "$LOCAL_SLURM_DIR"
}
trap 'slurm_stop; t_cleanup' EXIT
if ! "$T_TOP/tests/slurm/local-slurm.sh" start >"$d/slurm.out" 2>"$d/slurm.err"; then
    t_skip "slurm" "local Slurm did not start: $(tail -c 300 "$d/slurm.err")"; exit 0
fi
# shellcheck disable=SC1091
. "$LOCAL_SLURM_DIR/env"
export OMP_NUM_THREADS=1 OMPI_MCA_mpi_yield_when_idle=1 OMPI_MCA_btl_base_warn_component_unused=0 TMPDIR=$d
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
run_srun() { timeout -k 5 120 srun -K1 --immediate=10 "$@"; }

PYTHONPATH=$T_TOP/tests/oracle $py - "$d/data" <<'PYEOF'
import sys, numpy as np
from indexed_write import write_indexed
rs = np.random.RandomState(3)
docs = [list(rs.randint(0, 60, rs.randint(20, 90))) + [60] for _ in range(300)]
write_indexed(sys.argv[1], docs)
PYEOF
args="--num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 32 --max-position-embeddings 32
      --tokenizer-type NullTokenizer --vocab-size 60 --make-vocab-size-divisible-by 16
      --micro-batch-size 2 --global-batch-size 8 --train-iters 20 --lr 3e-3 --lr-warmup-iters 5 --clip-grad 1.0
      --log-interval 1 --eval-interval 10 --eval-iters 2 --split 90,5,5 --seed 5 --data-path $d/data
      --data-cache-path $d/cache"
# shellcheck disable=SC2086
mt-train $args --metrics-file "$d/m1.jsonl" >"$d/one.log" 2>"$d/one.err" || t_fail "one rank" "$(tail -3 "$d/one.err")"

same() {
    $py - "$d/m1.jsonl" "$1" <<'PYEOF'
import json, sys
def load(p):
    return {r["iteration"]: (r["lm_loss"], r["grad_norm"]) for r in map(json.loads, open(p)) if r["type"] == "train"}
a, b = load(sys.argv[1]), load(sys.argv[2])
assert sorted(a) == sorted(b) == list(range(1, 21)), (sorted(a), sorted(b))
w = max(abs(x - y) / abs(x) for i in a for x, y in zip(a[i], b[i]))   # losses and grad norms
assert w < 1e-5, w
print("worst %.2g" % w)
PYEOF
}
for n in 2 4; do
    for opt in "" --use-distributed-optimizer; do
        name="srun --mpi=pmix -n $n${opt:+ $opt}"
        # shellcheck disable=SC2086
        if run_srun --mpi=pmix -n $n mt-train $args $opt --metrics-file "$d/s$n$opt.jsonl" >"$d/s.log" 2>"$d/s.err" &&
            grep -q "^using world size: $n, data-parallel size: $n," "$d/s.log" && same "$d/s$n$opt.jsonl" >"$d/cmp" 2>&1
        then t_pass "$name: $n ranks, the one-rank losses and grad norms ($(cat "$d/cmp"))"
        else t_fail "$name" "$(tail -3 "$d/s.err") $(head -1 "$d/s.log") $(tail -2 "$d/cmp" 2>/dev/null)"; fi
    done
done
# tensor and pipeline parallelism under srun: TP=2 alone (with and without --sequence-parallel), DP=2 x
# TP=2, PP=2 alone and TP=2 x PP=2
for run in "2 1 --tensor-model-parallel-size 2" "2 1 --tensor-model-parallel-size 2 --sequence-parallel" \
    "4 2 --tensor-model-parallel-size 2 --use-distributed-optimizer" "2 1 --pipeline-model-parallel-size 2" \
    "4 1 --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 --sequence-parallel"; do
    set -- $run
    n=$1 dp=$2; shift 2
    name="srun --mpi=pmix -n $n $*"
    rm -f "$d/t.jsonl"
    # shellcheck disable=SC2086
    if run_srun --mpi=pmix -n $n mt-train $args "$@" --metrics-file "$d/t.jsonl" >"$d/s.log" 2>"$d/s.err" &&
        grep -q "^using world size: $n, data-parallel size: $dp, context-parallel size: 1," "$d/s.log" &&
        same "$d/t.jsonl" >"$d/cmp" 2>&1
    then t_pass "$name: the one-rank losses and grad norms ($(cat "$d/cmp"))"
    else t_fail "$name" "$(tail -3 "$d/s.err") $(head -1 "$d/s.log") $(tail -2 "$d/cmp" 2>/dev/null)"; fi
done

# srun --mpi=none -n 2: two would-be singletons; refused, nothing written
# shellcheck disable=SC2086
if run_srun --mpi=none -n 2 mt-train $args --save "$d/refused" >"$d/r.log" 2>"$d/r.err"; then t_fail "srun --mpi=none refused" "exit 0"
elif grep -q -- 'use srun --mpi=pmix' "$d/r.err" && [ ! -e "$d/refused" ]; then t_pass "srun --mpi=none -n 2 refused, nothing written"
else t_fail "srun --mpi=none refused" "$(head -c 300 "$d/r.err")"; fi
[ "$(grep -c 'use srun --mpi=pmix' "$d/r.err")" = 1 ] && t_pass "srun --mpi=none -n 2: the refusal printed once (by task 0)" ||
    t_fail "srun --mpi=none: the refusal once" "$(head -c 400 "$d/r.err")"
# the same with task 0 started a second after task 1 (as on a loaded machine): srun -K1 ends the step at
# the first failed task, so the other tasks must not end before task 0 has said why
# shellcheck disable=SC2016,SC2086
run_srun --mpi=none -n 2 bash -c '[ "$SLURM_PROCID" = 0 ] && sleep 1; exec "$@"' late mt-train $args --save "$d/refused" \
    >"$d/r2.log" 2>"$d/r2.err"
[ "$(grep -c 'use srun --mpi=pmix' "$d/r2.err")" = 1 ] && [ ! -e "$d/refused" ] &&
    t_pass "srun --mpi=none -n 2, task 0 a second late: the refusal still printed once, nothing written" ||
    t_fail "srun --mpi=none, task 0 late: the refusal once" "$(head -c 400 "$d/r2.err")"

# errors (rank-errors.sh has them under mpirun): a missing dataset, every rank's, is printed once in the plain
# form and every task exits 1; an error of task 1 only (its MT_TRACE_SAMPLES file is a directory) is printed
# once, naming it, and ends the step; never Open MPI's MPI_ABORT text
# shellcheck disable=SC2086
run_srun --mpi=pmix -n 2 mt-train ${args/--data-path $d\/data/--data-path $d\/nodata} >"$d/e.log" 2>"$d/e.err"; rc=$?
if [ $rc = 1 ] && [ "$(grep -c "^mt-train: $d/nodata\.idx: No such file or directory$" "$d/e.err")" = 1 ] &&
    ! grep -q 'MPI_ABORT' "$d/e.err" && grep -q 'tasks 0-1: Exited with exit code 1' "$d/e.err"; then
    t_pass "srun: a missing dataset printed once, every task exits 1"
else t_fail "srun: a missing dataset printed once" "rc $rc: $(head -c 500 "$d/e.err")"; fi
mkdir -p "$d/bad.1"
# shellcheck disable=SC2086
MT_TRACE_SAMPLES=$d/bad run_srun --mpi=pmix -n 2 mt-train $args >"$d/e1.log" 2>"$d/e1.err"; rc=$?
if [ $rc = 1 ] && [ "$(grep -c "^mt-train: rank 1 ($(hostname)): MT_TRACE_SAMPLES: $d/bad\.1: Is a directory$" "$d/e1.err")" = 1 ] &&
    ! grep -q 'MPI_ABORT' "$d/e1.err"; then t_pass "srun: an error of task 1 printed once by it, the step ends with exit 1"
else t_fail "srun: an error of task 1" "rc $rc: $(head -c 500 "$d/e1.err")"; fi

long="${args/--train-iters 20/--train-iters 100000} --eval-iters 0"
newest_rank() { pgrep -n -f "^([^ ]*/)?mt-train .*--data-path $d/data "; }
# a killed task ends the step within 10 s (srun -K1), naming the host and task
# shellcheck disable=SC2086
(run_srun --mpi=pmix -n 2 mt-train $long >"$d/k.log" 2>"$d/k.err"; echo $? >"$d/k.rc") &
t_wait_line "$d/k.log" ' iteration  *3/'
victim=$(newest_rank)
t0=$(date +%s.%N)
kill -9 "$victim"
for _ in $(seq 200); do [ -s "$d/k.rc" ] && break; sleep 0.1; done
t1=$(date +%s.%N)
wait
if [ -s "$d/k.rc" ] && [ "$(cat "$d/k.rc")" != 0 ] && awk -v a="$t0" -v b="$t1" 'BEGIN { exit !(b - a < 10) }' &&
    grep -qE 'localhost: task [01]: Killed' "$d/k.err"; then t_pass "a killed task ends the step within 10 s"
else t_fail "a killed task" "rc $(cat "$d/k.rc" 2>/dev/null): $(tail -c 300 "$d/k.err")"; fi

# SIGTERM from Slurm to the job's tasks, with --exit-signal-handler: one iteration, one checkpoint, exit 0
# shellcheck disable=SC2086
(run_srun --mpi=pmix -n 2 -J mt-sigterm mt-train $long --exit-signal-handler --save "$d/sig" >"$d/g.log" 2>"$d/g.err"
 echo $? >"$d/g.rc") &
t_wait_line "$d/g.log" ' iteration  *3/'
scancel --signal=TERM --name=mt-sigterm
t_wait_line "$d/g.rc" . 300
wait
t_sigterm_stop "scancel --signal=TERM" "$d/sig" "$d/g.rc" "$d/g.err"

# the sbatch example, shrunk through its variables: two ranks, a checkpoint, the world size in its log
(cd "$d" && MT_TRAIN=$(command -v mt-train) DATA=$d/data CKPT=$d/sb MODEL="--num-layers 2 --hidden-size 32
    --num-attention-heads 4 --seq-length 32 --max-position-embeddings 32 --tokenizer-type NullTokenizer --vocab-size 60" \
    TRAIN="--micro-batch-size 2 --global-batch-size 8 --train-iters 6 --lr 3e-3 --log-interval 1 --save-interval 3
    --eval-iters 1 --eval-interval 3 --split 90,5,5" \
    timeout -k 5 120 sbatch --wait --export=ALL --ntasks-per-node=2 --cpus-per-task=1 --output="$d/sb.out" \
    "$T_TOP/share/examples/train-gpt2.sbatch" >"$d/sb.submit" 2>&1)
rc=$?
if [ $rc = 0 ] && grep -q '^using world size: 2, data-parallel size: 2,' "$d/sb.out" &&
    [ "$(cat "$d/sb/latest_checkpointed_iteration.txt" 2>/dev/null)" = 6 ] &&
    [ -s "$d/sb/iter_0000006/mp_rank_00/distrib_optim_001.safetensors" ]; then
    t_pass "share/examples/train-gpt2.sbatch: 2 ranks, sharded checkpoint at 6"
else t_fail "sbatch example" "rc $rc: $(tail -c 300 "$d/sb.submit") $(tail -c 400 "$d/sb.out" 2>/dev/null)"; fi
