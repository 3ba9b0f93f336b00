#!/usr/bin/env bash
# kernels-fp8-numpy.sh: the FP8 emulation (mtk_fp8_qdq) of the cpu backend and of the CUDA kernels under the
# simulator against tests/oracle/fp8_ref.py, a numpy reference written from the formats' bit layouts, over
# every bf16 bit pattern and random fp32 values, both formats, six scales: bit for bit, and the amax.
. "$(dirname "$0")/../lib.sh"
PY=/usr/bin/python3
if ! $PY -c 'import numpy' 2>/dev/null; then
    t_fail "numpy reference" "no /usr/bin/python3 with numpy (make deps installs python3-numpy)"; exit 0
fi
t_kernel_dumps --dump-fp8
for be in $T_DUMPED; do
    $PY "$T_TOP/tests/oracle/fp8_ref.py" "$T_TMP/$be" "$T_FILE: $be" || T_FAILED=1
done
