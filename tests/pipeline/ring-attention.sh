#!/usr/bin/env bash
# ring-attention.sh: context parallelism's ring attention (test_ring_attention --mpi) under mpirun on 2, 3
# and 4 ranks of the cpu backend and on 2 ranks of the simulator (the CUDA kernels, host-staged): each
# rank's out, lse and dqkv equal the whole sequence's attention at its rows, and the bytes it sends are
# the ring's. Every rank reports.
. "$(dirname "$0")/../lib.sh"
bin=$T_TOP/${MT_BUILD:-build}/tests/test_ring_attention
t_mpi_env
cases=4   # the TEST cases of test_ring_attention.c
for run in cpu:2 cpu:3 cpu:4 sim:2; do
    be=${run%%:*} n=${run#*:}
    MT_TEST_BACKEND=$be mpi "$n" "$bin" --mpi >"$T_TMP/$be$n" 2>"$T_TMP/$be$n.err"
    rc=$?
    oks=$(grep -c "^ok - test_ring_attention\[rank [0-9]*/$n\]" "$T_TMP/$be$n")
    if [ $rc = 0 ] && [ "$oks" = $((cases * n)) ] && ! grep -q '^not ok' "$T_TMP/$be$n"; then
        t_pass "$be, CP $n: the whole sequence's attention at every rank's rows, the ring's bytes ($oks checks)"
    else
        t_fail "$be, CP $n" "exit $rc, $oks ok lines: $(grep -m3 '^not ok' "$T_TMP/$be$n" | tr '\n' ';') $(tail -c 300 "$T_TMP/$be$n.err")"
    fi
done
