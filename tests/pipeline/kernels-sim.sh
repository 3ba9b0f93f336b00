#!/usr/bin/env bash
# kernels-sim.sh: the kernel conformance suite (test_kernels) on the "sim" backend: the CUDA kernels of
# kernels/cuda running under the SIMT simulator, in fp32, bf16 and fp16, and once more in fp32 with the
# fibers picked in random order by three worker threads (a missing barrier shows up as wrong results).
# The suite's shapes are odd on purpose (not multiples of the block size or of the 16-byte packs).
# Its ok / not ok lines pass through, tagged with the run.
. "$(dirname "$0")/../lib.sh"
bin=$T_TOP/${MT_BUILD:-build}/tests/test_kernels
[ -x "$bin" ] || { t_fail "test_kernels built" "$bin missing"; exit 1; }
if ! t_has_sim; then
    t_skip "sim backend" "this build has no SIMT simulator (no CUDA headers)"
    exit 0
fi
run() {   # tag, then environment assignments
    local tag=$1; shift
    env MT_TEST_BACKEND=sim "$@" "$bin" >"$T_TMP/$tag.out" 2>"$T_TMP/$tag.err"
    local rc=$?
    sed -E "s/^(ok|not ok) - test_kernels: /\1 - kernels-sim.sh: $tag: /" "$T_TMP/$tag.out" | grep -E '^(ok|not ok) '
    [ "$rc" -eq 0 ] && [ -s "$T_TMP/$tag.out" ] || t_fail "$tag: test_kernels exit status" "$rc: $(tail -3 "$T_TMP/$tag.err")"
}
run fp32 MT_TEST_DTYPE=fp32
run bf16 MT_TEST_DTYPE=bf16
run fp16 MT_TEST_DTYPE=fp16
run fp32-random MT_TEST_DTYPE=fp32 SIMT_SCHED=random SIMT_SEED=7 SIMT_WORKERS=3
