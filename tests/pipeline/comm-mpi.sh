#!/usr/bin/env bash
# comm-mpi.sh: the communicator under mpirun with 2, 3 and 4 ranks (test_comm --mpi): PMIx bootstrap and its
# blob exchange, ring all-reduce (sum and max; fp32, fp64, int64, bytes, bf16 and fp16 bit for bit) /
# reduce-scatter / all-gather / broadcast / send-recv / batched point-to-point / all-to-all of uneven blocks
# (also as MPI datatypes of pieces) / barrier against values every rank computes, bytes counted, split
# groups in Megatron's order, the parallel context's expert and context groups (also with an expert tensor
# size of 1 under tp 2: ep, edp, etp and the tensor x context group); the host-staged communicator on
# device buffers of the cpu backend and, on 2 ranks, of the simulator: the same bits as on the host.
# Every rank reports.
. "$(dirname "$0")/../lib.sh"
bin=$T_TOP/${MT_BUILD:-build}/tests/test_comm
if ! command -v mpirun >/dev/null; then t_skip "mpirun" "openmpi-bin is not installed"; exit 0; fi
export OMPI_MCA_mpi_yield_when_idle=1 OMPI_MCA_btl_base_warn_component_unused=0
# OpenMPI keeps allocations until exit: no leak report under make asan
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
root=""; [ "$(id -u)" = 0 ] && root=--allow-run-as-root
for n in 2 3 4; do
    # shellcheck disable=SC2086
    TMPDIR=$T_TMP timeout -k 5 120 mpirun $root --oversubscribe -np $n "$bin" --mpi >"$T_TMP/out$n" 2>"$T_TMP/err$n"
    rc=$?
    want=$((13 * n)); [ $((n % 2)) = 1 ] && want=$((12 * n))   # split groups need an even count
    oks=$(grep -c '^ok - test_comm\[rank [0-9]*/'$n'\]' "$T_TMP/out$n")
    if [ $rc = 0 ] && [ "$oks" = $want ] && ! grep -q '^not ok' "$T_TMP/out$n"; then
        t_pass "$n ranks: every collective on every rank ($oks checks)"
    else
        t_fail "$n ranks" "exit $rc, $oks ok lines: $(grep -m3 '^not ok' "$T_TMP/out$n") $(tail -c 300 "$T_TMP/err$n")"
    fi
    for r in $(seq 0 $((n - 1))); do
        grep -q "^ok - test_comm\[rank $r/$n\]: mpi_bootstrap" "$T_TMP/out$n" || t_fail "$n ranks: rank $r" "did not report"
    done
done
# the host-staged communicator on the simulator's device buffers (MT_TEST_BACKEND=sim): the MPI
# communicator's bits on host buffers, on both ranks
# shellcheck disable=SC2086
MT_TEST_BACKEND=sim TMPDIR=$T_TMP timeout -k 5 300 mpirun $root --oversubscribe -np 2 "$bin" --mpi >"$T_TMP/sim" 2>"$T_TMP/simerr"
if grep -q "unknown kernel backend 'sim'" "$T_TMP/sim"; then
    t_skip "staged on sim" "this build has no SIMT simulator (no CUDA headers)"
elif [ "$(grep -c '^ok - test_comm\[rank [01]/2\]: mpi_staged' "$T_TMP/sim")" = 2 ] && ! grep -q '^not ok' "$T_TMP/sim"; then
    t_pass "2 ranks on sim: the staged communicator gives the MPI communicator's bits"
else t_fail "2 ranks on sim: staged" "$(grep -m3 '^not ok' "$T_TMP/sim") $(tail -c 300 "$T_TMP/simerr")"; fi
