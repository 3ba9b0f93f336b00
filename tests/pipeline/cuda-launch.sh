#!/usr/bin/env bash
# cuda-launch.sh: every kernel launch in a .cu file goes through LAUNCH(k, grid, block, smem, stream),
# so that the SIMT simulator can run it (kernels/sim/simt_sim.h): no raw <<< >>> launch anywhere, and no
# dynamic shared memory declared other than through DYN_SHARED, and every LAUNCH in kernels/cuda names
# launch_stream(k), which counts it (mtk_stats). The checks themselves are shown to catch a planted raw
# launch and a planted uncounted one.
. "$(dirname "$0")/../lib.sh"
raw_launches() {   # files and lines with a raw launch or extern __shared__
    grep -nE '<<<|>>>|extern[[:space:]]+__shared__' "$@" | grep -v '^kernels/sim/simt_sim.h:'
}
cd "$T_TOP" || exit 1
files=$(find kernels tests -name '*.cu' | sort)
[ -n "$files" ] || { t_fail "there are .cu files" "none found"; exit 0; }
found=$(raw_launches $files)
if [ -z "$found" ]; then t_pass "no raw <<<>>> launch or extern __shared__ in $(echo "$files" | wc -l) .cu files"
else t_fail "no raw <<<>>> launch or extern __shared__" "$found"; fi
n=$(grep -c 'LAUNCH(' $files | awk -F: '{s += $2} END {print s}')
if [ "$n" -gt 0 ]; then t_pass "launches go through LAUNCH ($n)"; else t_fail "launches go through LAUNCH" "none found"; fi
printf '__global__ void k(float *x) { x[0] = 1; }\nvoid f(float *x) { k<<<1, 32>>>(x); }\n' > "$T_TMP/planted.cu"
if [ -n "$(raw_launches "$T_TMP/planted.cu")" ]; then t_pass "a planted raw launch is caught"
else t_fail "a planted raw launch is caught" "the check missed it"; fi
uncounted() {   # LAUNCH lines that do not name launch_stream(k)
    grep -n 'LAUNCH(' "$@" | grep -v 'launch_stream(k))' | grep -v '#define'
}
found=$(uncounted kernels/cuda/*.cu)
if [ -z "$found" ]; then t_pass "every launch in kernels/cuda is counted (launch_stream)"
else t_fail "every launch in kernels/cuda is counted (launch_stream)" "$found"; fi
printf 'void f(mtk *k) { LAUNCH(kern, 1, 32, 0, stream(k))(x); }\n' > "$T_TMP/uncounted.cu"
if [ -n "$(uncounted "$T_TMP/uncounted.cu")" ]; then t_pass "a planted uncounted launch is caught"
else t_fail "a planted uncounted launch is caught" "the check missed it"; fi
