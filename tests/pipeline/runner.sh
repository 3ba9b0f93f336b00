#!/usr/bin/env bash
# runner.sh: tests/run itself, on a small tree of made-up tests (passing, failing, failing from Python,
# slow, crashing, a t.h unit binary): files run in parallel with -j, the final counts are exact, a failed
# file's scratch directory is kept and printed, a passing one's removed, --failed reruns only the
# failures, and lib.sh and t.h keep their scratch on failure when run on their own.
. "$(dirname "$0")/../lib.sh"
unset MT_TEST_KEEP_TMP MT_JOBS
top=$T_TMP/top
mkdir -p "$top/tests/pipeline" "$top/tests/unit" "$top/build/tests"
cp "$T_TOP/tests/run" "$T_TOP/tests/lib.sh" "$top/tests/"
cp "$T_TOP/tests/unit/t.h" "$top/tests/unit/"
p=$top/tests/pipeline
cat > "$p/pass.sh" <<'EOF'
. "$(dirname "$0")/../lib.sh"
echo "# tmp: $T_TMP"
echo x > "$T_TMP/made"
t_pass one; t_pass two; t_skip three "not here"
EOF
cat > "$p/fail.sh" <<'EOF'
. "$(dirname "$0")/../lib.sh"
echo evidence > "$T_TMP/evidence"
t_pass one; t_fail two "wrong"
EOF
cat > "$p/pyfail.sh" <<'EOF'
. "$(dirname "$0")/../lib.sh"
echo evidence > "$T_TMP/evidence"
echo "ok - pyfail.sh: one"
echo "not ok - pyfail.sh: two: reported by the script's own checker"
EOF
for s in slow1 slow2 slow3; do
    printf '. "$(dirname "$0")/../lib.sh"\nsleep 2\nt_pass %s\n' "$s" > "$p/$s.sh"
done
printf '#!/bin/sh\necho "ok - test_crash: first"\nexit 3\n' > "$top/build/tests/test_crash"
chmod +x "$top/build/tests/test_crash"
cat > "$T_TMP/test_tmp.c" <<'EOF'
#include <stdlib.h>
#include "t.h"
TEST(writes_scratch)
{
    FILE *f = fopen(t_path("evidence"), "w");
    T_CHECK(f != NULL);
    if (f) fclose(f);
    fprintf(stderr, "# tmp: %s\n", t_tmp);
    T_CHECK(!getenv("T_FAIL"));
}
T_MAIN_BEGIN("test_tmp")
t_tmpdir();
RUN(writes_scratch);
t_tmpdir_remove();
T_MAIN_END
EOF
if cc -std=c11 -D_GNU_SOURCE -I"$top/tests/unit" -o "$top/build/tests/test_tmp" "$T_TMP/test_tmp.c" -lm 2>"$T_TMP/cc.err"
then t_pass "t.h test program builds"
else t_fail "t.h test program builds" "$(head -c 300 "$T_TMP/cc.err")"; fi
logs=$top/build/test-logs
run() { (cd "$top" && MT_BUILD=build T_FAIL=1 TMPDIR=$T_TMP "$@"); }

# Every file once, four at a time.
t0=$(date +%s.%N)
run tests/run -j 4 > "$T_TMP/run1" 2>&1
rc=$?
t1=$(date +%s.%N)
if [ $rc -ne 0 ]; then t_pass "failures: non-zero exit"; else t_fail "failures: non-zero exit" "exit 0"; fi
# pass 2+1 slow*3 crash 1 test_tmp 0 fail 1 pyfail 1 = 8; failed fail pyfail crash test_tmp = 4; skipped 1
t_cmp "last line: exact counts" <(echo "8 passed, 4 failed, 1 skipped") <(tail -1 "$T_TMP/run1")
n=$(grep -cE '^[a-z0-9_.]+ +[0-9]+ ok +[0-9]+ failed' "$T_TMP/run1")
if [ "$n" = 8 ]; then t_pass "a summary line per file"; else t_fail "a summary line per file" "$n lines: $(cat "$T_TMP/run1")"; fi
if awk -v a="$t0" -v b="$t1" 'BEGIN { exit !(b - a < 5.5) }'; then t_pass "-j 4: three 2 s files overlap"
else t_fail "-j 4: three 2 s files overlap" "took $(awk -v a="$t0" -v b="$t1" 'BEGIN { print b - a }') s"; fi
t_grep "a crash without 'not ok' is a failure" '^not ok - test_crash: exited with status 3' "$T_TMP/run1"
for f in fail.sh pyfail.sh test_tmp; do
    d=$(sed -n "s|^ *# scratch kept: \(.*/$f\)\$|\1|p" "$T_TMP/run1")
    if [ -n "$d" ] && [ -n "$(find "$d" -name evidence)" ]; then t_pass "$f: scratch kept and printed"
    else t_fail "$f: scratch kept and printed" "'$d': $(grep -A3 "$f" "$T_TMP/run1" | head -c 300)"; fi
done
d=$(sed -n 's/^# tmp: //p' "$logs/pass.sh.log")
if [ -n "$d" ] && ! [ -e "$d" ]; then t_pass "passing file: scratch removed"
else t_fail "passing file: scratch removed" "'$d' is still there"; fi
t_cmp "failed files listed" <(printf '%s\n' build/tests/test_crash build/tests/test_tmp tests/pipeline/fail.sh tests/pipeline/pyfail.sh) \
    <(sort "$logs/failed")

# --failed: only those again.
run tests/run --failed -j 2 > "$T_TMP/run2" 2>&1
t_cmp "--failed: last line" <(echo "3 passed, 4 failed") <(tail -1 "$T_TMP/run2")
if grep -qE '^(pass|slow1)\.sh ' "$T_TMP/run2"; then t_fail "--failed: passing files not rerun" "$(cat "$T_TMP/run2")"
else t_pass "--failed: passing files not rerun"; fi
# a pattern, one job at a time, and MT_JOBS
run env MT_JOBS=1 tests/run slow1 > "$T_TMP/run3" 2>&1
t_cmp "pattern with MT_JOBS=1" <(echo "1 passed, 0 failed") <(tail -1 "$T_TMP/run3")
t_fails "-j 0 is an error" run tests/run -j 0
t_grep "-j 0: says why" 'not a positive number' "$T_TMP/err"
run tests/run --failed slow > "$T_TMP/run4" 2>&1
t_grep "--failed with nothing to rerun" 'no failures recorded' "$T_TMP/run4"

# On their own (not under tests/run), lib.sh and t.h keep a failed run's scratch and say where.
(cd "$top" && TMPDIR=$T_TMP bash tests/pipeline/fail.sh > /dev/null 2> "$T_TMP/alone.err")
d=$(sed -n 's/^# scratch kept: //p' "$T_TMP/alone.err")
if [ -n "$d" ] && [ -f "$d/evidence" ]; then t_pass "lib.sh alone: failed scratch kept"
else t_fail "lib.sh alone: failed scratch kept" "$(head -c 300 "$T_TMP/alone.err")"; fi
(cd "$top" && TMPDIR=$T_TMP bash tests/pipeline/pass.sh > "$T_TMP/alone.out" 2>&1)
d=$(sed -n 's/^# tmp: //p' "$T_TMP/alone.out")
if [ -n "$d" ] && ! [ -e "$d" ]; then t_pass "lib.sh alone: passing scratch removed"
else t_fail "lib.sh alone: passing scratch removed" "'$d' is still there"; fi
(cd "$top" && T_FAIL=1 TMPDIR=$T_TMP build/tests/test_tmp > /dev/null 2> "$T_TMP/alone.err")
d=$(sed -n 's/^# scratch kept: //p' "$T_TMP/alone.err")
if [ -n "$d" ] && [ -f "$d/evidence" ]; then t_pass "t.h alone: failed scratch kept"
else t_fail "t.h alone: failed scratch kept" "$(head -c 300 "$T_TMP/alone.err")"; fi
(cd "$top" && TMPDIR=$T_TMP build/tests/test_tmp > /dev/null 2> "$T_TMP/alone.err")
d=$(sed -n 's/^# tmp: //p' "$T_TMP/alone.err")
if [ -n "$d" ] && ! [ -e "$d" ]; then t_pass "t.h alone: passing scratch removed"
else t_fail "t.h alone: passing scratch removed" "'$d' is still there"; fi
