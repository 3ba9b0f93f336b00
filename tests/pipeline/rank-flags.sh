#!/usr/bin/env bash
# rank-flags.sh: ranks of one mt-train job started with different flags or files (mpirun's MPMD form,
# "mpirun -np 1 mt-train A : -np 1 mt-train B"). Each job ends within 20 s with exit 1 and one line on
# standard error naming the lowest rank that differs from rank 0, its host and the first differing flag
# with both values: --sequence-parallel on one tensor rank (a hang without the check), --micro-batch-size
# (a crash), --num-layers and --hidden-size (MPI_ERRORS_ARE_FATAL), --lr (replicas that drift and exit
# 0), a dataset of another content at the same path (per-rank working directories), rank 2 of three, and
# a flag value that only rank 1 cannot parse (its error, naming it, within about 3 s; silence without).
# The same flags given through MPMD train and exit 0; no rank is ever left running.
. "$(dirname "$0")/../lib.sh"
py=/usr/bin/python3
d=$T_TMP
if ! command -v mpirun >/dev/null; then t_skip "mpirun" "openmpi-bin is not installed"; exit 0; fi
t_mpi_env
host=$(hostname)
mkdir -p "$d/w0" "$d/w1"
PYTHONPATH=$T_TOP/tests/oracle $py "$T_TOP/tests/oracle/walk_data.py" "$d/data" 7 300 ||
    t_fail "setup" "walk_data.py did not write the dataset"
for w in "w0 300" "w1 301"; do
    PYTHONPATH=$T_TOP/tests/oracle $py "$T_TOP/tests/oracle/walk_data.py" "$d/${w% *}/data" 7 "${w#* }" ||
        t_fail "setup" "walk_data.py did not write $d/${w% *}/data"
done

args="--num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 32 --max-position-embeddings 32
      --tokenizer-type NullTokenizer --vocab-size 60 --make-vocab-size-divisible-by 16
      --global-batch-size 8 --train-iters 3 --log-interval 1 --eval-iters 0 --split 90,5,5 --seed 7"
# the index caches once, so that the jobs below only read them
for p in "$d/data" "$d/w0/data" "$d/w1/data"; do
    # shellcheck disable=SC2086
    mt-train $args --micro-batch-size 2 --lr 3e-3 --data-path "$p" --data-cache-path "$p-cache" >/dev/null 2>"$d/setup.err" ||
        t_fail "setup" "$(head -c 300 "$d/setup.err")"
done

# job NAME RANK0-ARGS RANK1-ARGS [RANK2-ARGS]: one job of a rank per argument list (each after $args),
# stderr in NAME.err, status in NAME.rc, seconds in NAME.s; then no rank of it may be left
job() {
    local name=$1 t0 a0=$2 a1=$3 a2=${4:-}; shift 3
    t0=$(date +%s.%N)
    # shellcheck disable=SC2086
    if [ -n "$a2" ]; then
        timeout -k 5 60 mpirun $T_MPI_ROOT --quiet --oversubscribe -np 1 mt-train $args $a0 : -np 1 mt-train $args $a1 \
            : -np 1 mt-train $args $a2 >"$d/$name.out" 2>"$d/$name.err"
    else
        timeout -k 5 60 mpirun $T_MPI_ROOT --quiet --oversubscribe -np 1 mt-train $args $a0 : -np 1 mt-train $args $a1 \
            >"$d/$name.out" 2>"$d/$name.err"
    fi
    t_job_done "$name" $? "$t0" "$d"
}
# one NAME LINE: the job's standard error is exactly LINE (a fixed string), it exited 1 within 20 s
one() {
    local name=$1 want=$2 rc s
    rc=$(cat "$d/$name.rc"); s=$(cat "$d/$name.s")
    if [ "$(cat "$d/$name.err")" = "$want" ] && [ "$rc" = 1 ] && awk -v s="$s" 'BEGIN { exit !(s < 20) }'; then
        t_pass "$name: one line, exit 1, $s s ($want)"
    else t_fail "$name: one line, exit 1 within 20 s" "exit $rc after $s s: $(head -c 600 "$d/$name.err")"; fi
}

base="--data-path $d/data --data-cache-path $d/data-cache --micro-batch-size 2 --lr 3e-3"
tp="$base --tensor-model-parallel-size 2"
job sp "$tp" "$tp --sequence-parallel"
one sp "mt-train: rank 1 ($host): --sequence-parallel differs from rank 0's: given here, not given on rank 0"
job mbs "$base" "${base/--micro-batch-size 2/--micro-batch-size 4}"
one mbs "mt-train: rank 1 ($host): --micro-batch-size differs from rank 0's: 4 here, 2 on rank 0"
job layers "$base" "$base --num-layers 3"
one layers "mt-train: rank 1 ($host): --num-layers differs from rank 0's: 3 here, 2 on rank 0"
job hidden "$base" "$base --hidden-size 64"
one hidden "mt-train: rank 1 ($host): --hidden-size differs from rank 0's: 64 here, 32 on rank 0"
job lr "$base" "${base/--lr 3e-3/--lr 1e-4}"
one lr "mt-train: rank 1 ($host): --lr differs from rank 0's: 0.0001 here, 0.003 on rank 0"
# rank 2 of three differs; ranks 0 and 1 agree and print nothing
job third "$base" "$base" "${base/--lr 3e-3/--lr 0.003 --seed 8}"
one third "mt-train: rank 2 ($host): --seed differs from rank 0's: 8 here, 7 on rank 0"

# a value only rank 1 cannot parse: its error, naming it, while rank 0 waits in its first collective
job badlr "$base" "${base/--lr 3e-3/--lr abc}"
one badlr "mt-train: rank 1 ($host): --lr: 'abc' is not a number"

# the same --data-path, data, read in each rank's own working directory: another dataset on rank 1
id() { echo "$1: $(stat -c %s "$2") bytes, FNV-1a $("$py" - "$2" <<'PYEOF'
import sys
h = 0xcbf29ce484222325
for c in open(sys.argv[1], "rb").read(): h = ((h ^ c) * 0x100000001b3) & 0xffffffffffffffff
print("%016x" % h)
PYEOF
)"; }
rel="--data-path data --data-cache-path cache --micro-batch-size 2 --lr 3e-3"
t0=$(date +%s.%N)
# shellcheck disable=SC2086
timeout -k 5 60 mpirun $T_MPI_ROOT --quiet --oversubscribe -np 1 -wdir "$d/w0" mt-train $args $rel \
    : -np 1 -wdir "$d/w1" mt-train $args $rel >"$d/file.out" 2>"$d/file.err"
echo $? >"$d/file.rc"
awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f\n", b - a }' >"$d/file.s"
one file "mt-train: rank 1 ($host): --data-path differs from rank 0's: $(id data.idx "$d/w1/data.idx") here, $(id data.idx "$d/w0/data.idx") on rank 0"

# the same flags through MPMD: the ranks agree and train
job same "$base" "$base"
if [ "$(cat "$d/same.rc")" = 0 ] && grep -q ' iteration  *3/' "$d/same.out"; then t_pass "same flags on both ranks: trains, exit 0"
else t_fail "same flags on both ranks: trains, exit 0" "exit $(cat "$d/same.rc"): $(head -c 600 "$d/same.err")"; fi
