#!/usr/bin/env bash
# train-dp-sim.sh: data and tensor parallelism on device buffers. Two ranks on the sim backend (the CUDA
# kernels under the SIMT simulator, MT_DEVICE=sim) reduce their gradients through the host-staged
# communicator and give the one-rank cpu run's losses (1e-5 relative, as train-sim.sh) and grad norms; so
# does the distributed optimizer (reduce-scatter and all-gather staged), and so do two sim ranks holding
# halves of the model (--tensor-model-parallel-size 2, with and without --sequence-parallel: the model's
# all-reduces, all-gathers and reduce-scatters of activations staged; every iteration's loss and grad norm
# from the metrics file), and two sim ranks as two pipeline stages (--pipeline-model-parallel-size 2: the
# 1F1B schedule's sends and receives of activations and the tied embeddings' gradients staged), and two sim
# ranks each holding half of every sequence (--context-parallel-size 2: the ring attention's blocks of keys
# and values, their gradients and the gathered losses staged, its exchanges on an engine thread). Two ranks with --device cuda on a machine without a GPU are refused before
# training with a message that says so, not a crash.
. "$(dirname "$0")/../lib.sh"
py=/usr/bin/python3
d=$T_TMP
if ! command -v mpirun >/dev/null; then t_skip "mpirun" "openmpi-bin is not installed"; exit 0; fi
t_sim_setup 1
export OMPI_MCA_mpi_yield_when_idle=1 OMPI_MCA_btl_base_warn_component_unused=0 TMPDIR=$T_TMP
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
root=""; [ "$(id -u)" = 0 ] && root=--allow-run-as-root
mpi() { local n=$1; shift; timeout -k 5 300 mpirun $root --oversubscribe -np "$n" "$@"; }
args="--num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 24 --max-position-embeddings 32
      --tokenizer-type NullTokenizer --vocab-size 60 --make-vocab-size-divisible-by 16
      --micro-batch-size 3 --global-batch-size 6 --train-iters 4 --lr 3e-3 --lr-decay-style cosine
      --lr-warmup-iters 2 --weight-decay 0.1 --clip-grad 1.0 --log-interval 1 --eval-interval 4 --eval-iters 1
      --split 90,5,5 --seed 5 --data-path $d/data --data-cache-path $d/cache"
# shellcheck disable=SC2086
mt-train $args --device cpu >"$d/cpu.log" 2>"$d/cpu.err" || t_fail "one cpu rank" "$(tail -3 "$d/cpu.err")"
field() { grep -oE "$2: +[-0-9.E+]+" "$1" | sed -E 's/.*: +//'; }
compare() {   # name, log, field regex, tolerance (relative)
    field "$d/cpu.log" "$3" >"$d/a"
    field "$2" "$3" >"$d/b"
    local n
    n=$(wc -l <"$d/a")
    if [ "$n" -gt 0 ] && [ "$n" = "$(wc -l <"$d/b")" ] && paste "$d/a" "$d/b" | awk -v t="$4" '
        { d = $1 - $2; if (d < 0) d = -d; m = $1 < 0 ? -$1 : $1; if (d > t * m) bad = 1 } END { exit bad }'
    then t_pass "$1: $n values = the one-rank cpu run's (tolerance $4)"
    else t_fail "$1" "cpu: $(tr '\n' ' ' <"$d/a") 2 ranks: $(tr '\n' ' ' <"$d/b")"; fi
}
for opt in "" --use-distributed-optimizer; do
    name="2 sim ranks${opt:+ $opt}"
    # shellcheck disable=SC2086
    if MT_DEVICE=sim mpi 2 mt-train $args $opt >"$d/sim2.log" 2>"$d/sim2.err"; then t_pass "$name"
    else t_fail "$name" "$(tail -3 "$d/sim2.err")"; fi
    t_grep "$name: the host-staged data-parallel communicator" '^> data-parallel communicator: staged$' "$d/sim2.log"
    compare "$name: lm loss" "$d/sim2.log" 'lm loss' 1e-5
    compare "$name: validation/test lm loss" "$d/sim2.log" 'lm loss value' 1e-5
    compare "$name: grad norm" "$d/sim2.log" 'grad norm' 2e-3
done
# tensor parallelism: the metrics file's full digits against the one-rank cpu run's
# shellcheck disable=SC2086
mt-train $args --device cpu --metrics-file "$d/cpu.jsonl" >/dev/null 2>"$d/cpum.err" || t_fail "one cpu rank, metrics" "$(tail -3 "$d/cpum.err")"
for opt in "--tensor-model-parallel-size 2" "--tensor-model-parallel-size 2 --sequence-parallel" "--pipeline-model-parallel-size 2" \
    "--context-parallel-size 2"; do
    name="2 sim ranks $opt"
    kind=tensor; case "$opt" in --pipeline*) kind=pipeline ;; --context*) kind=context ;; esac
    rm -f "$d/tp.jsonl"
    # shellcheck disable=SC2086
    if MT_DEVICE=sim mpi 2 mt-train $args $opt --metrics-file "$d/tp.jsonl" >"$d/tp.log" 2>"$d/tp.err"
    then t_pass "$name"; else t_fail "$name" "$(tail -3 "$d/tp.err")"; fi
    t_grep "$name: the host-staged $kind-parallel communicator" "^> $kind-parallel communicator: staged\$" "$d/tp.log"
    if $py - "$d/cpu.jsonl" "$d/tp.jsonl" >"$d/tpc.out" 2>&1 <<'PYEOF'
import json, sys
def load(p):
    return {(r["type"], r["iteration"]): (r["lm_loss"], r.get("grad_norm")) for r in map(json.loads, open(p))}
a, b = load(sys.argv[1]), load(sys.argv[2])
assert sorted(a) == sorted(b) and len(a) >= 5, (sorted(a), sorted(b))
wl = max(abs(a[k][0] - b[k][0]) / abs(a[k][0]) for k in a)
wg = max(abs(a[k][1] - b[k][1]) / abs(a[k][1]) for k in a if a[k][1] is not None)
# the sim's sums run in the CUDA kernels' order: the clean gaps measured were 6e-9 (loss) and 9e-9 (grad
# norm); the limit is 100 times that
assert wl < 1e-6 and wg < 1e-6, (wl, wg)
print("loss %.1g, grad norm %.1g" % (wl, wg))
PYEOF
    then t_pass "$name: every loss and grad norm = the one-rank cpu run's ($(cat "$d/tpc.out"))"
    else t_fail "$name: losses" "$(tail -2 "$d/tpc.out")"; fi
done

# cuda without a GPU: refused with the reason (an error of every rank: printed once), nothing half done
if [ "$(MT_TEST_BACKEND=cuda "$T_TOP/${MT_BUILD:-build}/tests/test_kernels" 2>&1 | grep -c '^ok - test_kernels: matmul_fwd')" = 0 ]; then
    # shellcheck disable=SC2086
    if mpi 2 mt-train $args --device cuda >"$d/cu.log" 2>"$d/cu.err"; then t_fail "--device cuda without a GPU" "exit 0"
    elif [ "$(grep -cE '^mt-train: (rank [01] .*)?--device cuda: .*(no CUDA device|no GPU|no CUDA backend)' "$d/cu.err")" = 1 ] &&
        ! grep -qiE 'segmentation|signal|core dumped' "$d/cu.err" &&
        ! grep -q 'iteration' "$d/cu.log"; then t_pass "2 ranks --device cuda without a GPU: refused ($(grep -m1 "^mt-train" "$d/cu.err" | head -c 160))"
    else t_fail "--device cuda without a GPU" "$(head -c 400 "$d/cu.err")"; fi
else t_skip "--device cuda without a GPU" "this machine has a GPU"; fi
