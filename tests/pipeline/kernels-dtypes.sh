#!/usr/bin/env bash
# kernels-dtypes.sh: the kernel conformance suite (test_kernels, which tests/run runs in fp32) again with
# bf16 and fp16 activation storage on the same backend (MT_TEST_BACKEND, default cpu). Its ok / not ok
# lines pass through, tagged with the dtype.
. "$(dirname "$0")/../lib.sh"
bin=$T_TOP/${MT_BUILD:-build}/tests/test_kernels
[ -x "$bin" ] || { t_fail "test_kernels built" "$bin missing"; exit 1; }
for dt in bf16 fp16; do
    MT_TEST_DTYPE=$dt "$bin" >"$T_TMP/$dt.out" 2>"$T_TMP/$dt.err"
    rc=$?
    sed -E "s/^(ok|not ok) - test_kernels: /\1 - kernels-dtypes.sh: $dt: /" "$T_TMP/$dt.out" | grep -E '^(ok|not ok) '
    [ "$rc" -eq 0 ] && [ -s "$T_TMP/$dt.out" ] || t_fail "$dt: test_kernels exit status" "$rc: $(tail -3 "$T_TMP/$dt.err")"
done
