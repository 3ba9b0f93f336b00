#!/usr/bin/env bash
# sim-sanitizers.sh: the SIMT simulator (kernels/sim) and the CUDA kernels under it, built by make check
# with ThreadSanitizer (build-tsan) and AddressSanitizer (build-asan-sim): the simulator's self-test and
# the kernel conformance suite on the sim backend must come out clean, and each sanitizer must catch the
# bug planted for it: a block sum with a __syncthreads removed (a shared-memory race, reported whatever
# order the fibers ran in), a kernel reading one row past a cudaMalloc'd buffer, and one reading past its
# dynamic shared memory. The plain build's self-test runs here too, and a warp split between a
# __syncthreads and a full-warp shuffle must stop the simulator with "deadlock" (on a GPU it would hang).
. "$(dirname "$0")/../lib.sh"
b=$T_TOP/${MT_BUILD:-build}
if [ ! -x "$b/sim/simt_selftest" ]; then
    t_skip "simulator" "this build has no SIMT simulator (no CUDA headers)"
    exit 0
fi
selftest() {   # build, then lines of the self-test tagged
    "$1/sim/simt_selftest" >"$T_TMP/st.out" 2>"$T_TMP/st.err"
    local rc=$?
    sed -E "s/^(ok|not ok) - /\1 - sim-sanitizers.sh: $2: /" "$T_TMP/st.out" | grep -E '^(ok|not ok) '
    [ $rc -eq 0 ] || t_fail "$2: self-test exit status" "$rc: $(tail -3 "$T_TMP/st.err")"
}
selftest "$b" plain
"$b/sim/simt_selftest" deadlock >"$T_TMP/dl.out" 2>"$T_TMP/dl.err"
rc=$?
if [ $rc -ne 0 ] && grep -q 'deadlock' "$T_TMP/dl.err"; then t_pass "plain: a barrier/shuffle deadlock is reported"
else t_fail "plain: a barrier/shuffle deadlock is reported" "exit $rc: $(head -c 300 "$T_TMP/dl.err")"; fi

suite() {   # build tag: the conformance suite on the sim backend, fp32 and bf16
    local dt
    for dt in fp32 bf16; do
        MT_TEST_BACKEND=sim MT_TEST_DTYPE=$dt "$1/sim/test_kernels" >"$T_TMP/s.out" 2>"$T_TMP/s.err"
        local rc=$? n
        n=$(grep -c '^ok' "$T_TMP/s.out")
        if [ $rc -eq 0 ] && [ "$n" -ge 20 ] && ! grep -q '^not ok' "$T_TMP/s.out" && ! grep -qE 'Sanitizer' "$T_TMP/s.err"
        then t_pass "$2: conformance suite on sim, $dt ($n cases), no report"
        else t_fail "$2: conformance suite on sim, $dt" "exit $rc, $n ok: $(grep -m3 -E '^not ok|SUMMARY' "$T_TMP/s.out" "$T_TMP/s.err")"; fi
    done
}
expect_report() {   # binary mode pattern name
    "$1" "$2" >"$T_TMP/r.out" 2>"$T_TMP/r.err"
    local rc=$?
    if [ $rc -ne 0 ] && grep -qE "$3" "$T_TMP/r.err"; then t_pass "$4"
    else t_fail "$4" "exit $rc, no /$3/ in: $(head -c 300 "$T_TMP/r.err")"; fi
}

t=$T_TOP/build-tsan
if [ -x "$t/sim/simt_selftest" ] && [ -x "$t/sim/test_kernels" ]; then
    export TSAN_OPTIONS="halt_on_error=1 exitcode=66"
    selftest "$t" tsan
    suite "$t" tsan
    expect_report "$t/sim/simt_selftest" racy 'ThreadSanitizer: data race.*block_sum_kernel<true>' \
        "tsan: the block sum without its barrier is reported as a data race"
    SIMT_SCHED=lifo expect_report "$t/sim/simt_selftest" racy 'ThreadSanitizer: data race' \
        "tsan: the race is reported under another fiber order too"
    "$t/sim/simt_selftest" norace >"$T_TMP/n.out" 2>"$T_TMP/n.err"
    if [ $? -eq 0 ] && ! grep -q Sanitizer "$T_TMP/n.err"; then t_pass "tsan: the correct block sum is not reported"
    else t_fail "tsan: the correct block sum is not reported" "$(head -c 300 "$T_TMP/n.err")"; fi
    unset TSAN_OPTIONS
else
    # make check (build/) builds it with the simulator: missing there is a failure; other builds skip
    if [ "${MT_BUILD:-build}" = build ]; then t_fail "tsan build" "$t/sim missing (make check builds it)"
    else t_skip "tsan build" "$t/sim is built only with build/ (make check)"; fi
fi

a=$T_TOP/build-asan-sim
if [ -x "$a/sim/simt_selftest" ] && [ -x "$a/sim/test_kernels" ]; then
    export ASAN_OPTIONS=detect_leaks=1
    selftest "$a" asan
    suite "$a" asan
    expect_report "$a/sim/simt_selftest" oob 'AddressSanitizer: heap-buffer-overflow.*rows_kernel' \
        "asan: a read past a cudaMalloc'd buffer is reported"
    expect_report "$a/sim/simt_selftest" smem_oob 'AddressSanitizer: heap-buffer-overflow.*smem_oob_kernel' \
        "asan: a read past the dynamic shared memory is reported"
    unset ASAN_OPTIONS
else
    # make check (build/) builds it with the simulator: missing there is a failure; other builds skip
    if [ "${MT_BUILD:-build}" = build ]; then t_fail "asan build" "$a/sim missing (make check builds it)"
    else t_skip "asan build" "$a/sim is built only with build/ (make check)"; fi
fi
