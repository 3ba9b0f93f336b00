#!/usr/bin/env bash
# rank-errors.sh: how an error of a two-rank mt-train job reads, under mt-train -n 2 and under mpirun run
# directly. An error every rank meets (a bad flag value, a missing dataset, a --save that cannot be
# written) is one line, printed once in the plain form "mt-train: ..."; an error of one rank only (its
# MT_TRACE_SAMPLES file is a directory) is one line printed once by that rank, "mt-train: rank 1 (host):
# ...", and ends the job within 10 s. Each job exits 1, leaves no rank running, never shows Open MPI's
# MPI_ABORT text, and under mt-train -n shows nothing of mpirun's: standard error is the one line. Under
# mt-train -n a rank killed by SIGKILL is the one line of mt-train's "mt-train: rank 1 (host): killed by
# signal 9 (SIGKILL)", nothing of mpirun's, exit 137.
. "$(dirname "$0")/../lib.sh"
py=/usr/bin/python3
d=$T_TMP
if ! command -v mpirun >/dev/null; then t_skip "mpirun" "openmpi-bin is not installed"; exit 0; fi
t_mpi_env
PYTHONPATH=$T_TOP/tests/oracle $py "$T_TOP/tests/oracle/walk_data.py" "$d/data" 7 300 ||
    t_fail "setup" "walk_data.py did not write the dataset"
host=$(hostname)

args="--num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 32 --max-position-embeddings 32
      --tokenizer-type NullTokenizer --vocab-size 60 --make-vocab-size-divisible-by 16
      --micro-batch-size 2 --global-batch-size 8 --train-iters 4 --lr 3e-3 --log-interval 1 --eval-iters 0
      --split 90,5,5 --seed 7 --data-cache-path $d/cache"
# the index cache once, so that the jobs below only read it
# shellcheck disable=SC2086
mt-train $args --data-path "$d/data" >/dev/null 2>"$d/setup.err" || t_fail "setup" "$(head -c 300 "$d/setup.err")"

# mpirun's and MPI_Abort's help texts
noise='MPI_ABORT was invoked|Primary job|mpirun detected|mpirun noticed|ORTE_ERROR_LOG'

# job NAME LAUNCHER ARGS...: runs the job (LAUNCHER n: mt-train -n 2, m: mpirun -np 2 mt-train) with
# stderr in $d/NAME.err, its status in $d/NAME.rc and its seconds in $d/NAME.s; then checks that no rank
# of it is left (every rank's command line holds $d)
job() {
    local name=$1 how=$2 t0; shift 2
    t0=$(date +%s.%N)
    case $how in
        n) timeout -k 5 120 mt-train -n 2 "$@" >"$d/$name.out" 2>"$d/$name.err" ;;
        m) mpi 2 mt-train "$@" >"$d/$name.out" 2>"$d/$name.err" ;;
    esac
    t_job_done "$name" $? "$t0" "$d"
}
# once NAME PATTERN HOW: the job's stderr has exactly one line matching the extended regex PATTERN, it
# exited 1, and has no MPI_ABORT text; under mt-train -n (HOW n) that line is all of standard error
once() {
    local name=$1 pat=$2 how=$3 n rc
    n=$(grep -cE -- "$pat" "$d/$name.err"); rc=$(cat "$d/$name.rc")
    if [ "$n" = 1 ] && [ "$rc" = 1 ]; then t_pass "$name: the error once, exit 1 ($(grep -E -- "$pat" "$d/$name.err"), $(cat "$d/$name.s") s)"
    else t_fail "$name: the error once, exit 1" "$n lines matching, exit $rc: $(head -c 600 "$d/$name.err")"; fi
    if grep -q 'MPI_ABORT was invoked' "$d/$name.err"; then t_fail "$name: no MPI_ABORT text" "$(head -c 600 "$d/$name.err")"
    else t_pass "$name: no MPI_ABORT text"; fi
    if [ "$how" = n ]; then
        if [ "$(grep -c . "$d/$name.err")" = 1 ] && ! grep -qE "$noise" "$d/$name.err"; then t_pass "$name: nothing of mpirun's"
        else t_fail "$name: nothing of mpirun's" "$(head -c 600 "$d/$name.err")"; fi
    fi
}

mkdir -p "$d/bad.1"   # rank 1's MT_TRACE_SAMPLES file: a directory (rank 0's, bad.0, is created)
for how in n m; do
    # (a) a bad flag value: every rank parses the same flags
    # shellcheck disable=SC2086
    job "$how-flag" $how $args --data-path "$d/data" --lr abc
    once "$how-flag" "^mt-train: --lr: 'abc' is not a number$" $how
    # (b) a missing dataset: every rank's error
    # shellcheck disable=SC2086
    job "$how-data" $how $args --data-path "$d/nodata"
    once "$how-data" "^mt-train: $d/nodata\.idx: No such file or directory$" $how
    # (c) an error of rank 1 only, while rank 0 goes on to its first collective
    # shellcheck disable=SC2086
    MT_TRACE_SAMPLES=$d/bad job "$how-one" $how $args --data-path "$d/data"
    once "$how-one" "^mt-train: rank 1 \($host\): MT_TRACE_SAMPLES: $d/bad\.1: Is a directory$" $how
    if awk -v s="$(cat "$d/$how-one.s")" 'BEGIN { exit !(s < 10) }'; then t_pass "$how-one: the job ends within 10 s"
    else t_fail "$how-one: the job ends within 10 s" "$(cat "$d/$how-one.s") s"; fi
    # ... and under mpirun run directly, without mpirun's own texts either (PMIx_Abort, not MPI_Abort)
    if [ $how = m ]; then
        if grep -qE "$noise" "$d/m-one.err"; then t_fail "m-one: nothing of mpirun's" "$(head -c 600 "$d/m-one.err")"
        else t_pass "m-one: nothing of mpirun's"; fi
    fi
done

# (d) a --save that cannot be written (rank 0 checks it): the job's error, once
printf x >"$d/file"
# shellcheck disable=SC2086
job n-save n $args --data-path "$d/data" --save "$d/file/ck"
once n-save "^mt-train: --save: .*$d/file.*$" n

# (e) a rank killed by SIGKILL under mt-train -n: the one line naming it, mpirun's exit status 137
long="${args/--train-iters 4/--train-iters 100000}"
# shellcheck disable=SC2086
(timeout -k 5 120 mt-train -n 2 $long --data-path "$d/data" >"$d/k.log" 2>"$d/k.err"; echo $? >"$d/k.rc") &
t_wait_line "$d/k.log" ' iteration  *3/'
# rank 1's processes (its environment says so); of these, the one whose parent is one of them works
r1=$(for p in $(pgrep -f "mt-train .*--data-path $d/data"); do
    tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx 'OMPI_COMM_WORLD_RANK=1' && echo "$p"; done)
victim=$(for p in $r1; do grep -qx "$(ps -o ppid= -p "$p" | tr -d ' ')" <<<"$r1" && echo "$p"; done)
# shellcheck disable=SC2086   # $r1: one pid when there is no watcher
kill -9 ${victim:-$r1}
t_wait_line "$d/k.rc" . 300
wait
# the line once and no other of mt-train's or mpirun's (rank 0's Open MPI may add "Read -1, expected N,
# errno = 3" when it was reading from rank 1's memory as it died)
want="mt-train: rank 1 ($host): killed by signal 9 (SIGKILL)"
if [ "$(cat "$d/k.rc")" = 137 ] && [ "$(grep -c '^mt-train' "$d/k.err")" = 1 ] && grep -qxF "$want" "$d/k.err" &&
    ! grep -qE "$noise" "$d/k.err"; then t_pass "a rank killed by SIGKILL under mt-train -n: exit 137, one line ($want)"
else t_fail "a rank killed by SIGKILL under mt-train -n: exit 137, one line" "exit $(cat "$d/k.rc"): $(head -c 600 "$d/k.err")"; fi
sleep 0.5
if pgrep -f "mt-train .*$d/" >"$d/k.left"; then t_fail "killed rank: no rank left running" "$(cat "$d/k.left")"
else t_pass "killed rank: no rank left running"; fi
