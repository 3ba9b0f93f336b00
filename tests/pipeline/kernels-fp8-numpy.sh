#!/usr/bin/env bash
# kernels-fp8-numpy.sh: the FP8 emulation (mtk_fp8_qdq) of the cpu backend and of the CUDA kernels under the
# simulator against tests/oracle/fp8_ref.py, a numpy reference written from the formats' bit layouts, over
# every bf16 bit pattern and random fp32 values, both formats, six scales: bit for bit, and the amax.
. "$(dirname "$0")/../lib.sh"
PY=/usr/bin/python3
BIN=$T_TOP/${MT_BUILD:-build}/tests/test_kernels
if ! [ -x "$PY" ] || ! $PY -c 'import numpy' 2>/dev/null; then
    t_skip "numpy reference" "no /usr/bin/python3 with numpy"; exit 0
fi
[ -x "$BIN" ] || { t_fail "numpy reference" "$BIN not built"; exit 0; }
backends=cpu
# (a build without the simulator: cpu only, as kernels-sim.sh skips)
if MT_TEST_BACKEND=sim "$BIN" 2>&1 | grep -q '^ok - test_kernels: matmul_fwd'; then backends="cpu sim"; fi
for be in $backends; do
    mkdir -p "$T_TMP/$be"
    if ! MT_TEST_BACKEND=$be MT_TEST_DTYPE=fp32 "$BIN" --dump-fp8 "$T_TMP/$be" >"$T_TMP/$be.out" 2>&1; then
        t_fail "$be: dump" "test_kernels --dump-fp8 failed: $(head -c 300 "$T_TMP/$be.out")"; continue
    fi
    $PY "$T_TOP/tests/oracle/fp8_ref.py" "$T_TMP/$be" "$T_FILE: $be" || T_FAILED=1
done
