#!/usr/bin/env bash
# fuzz.sh: the fuzz targets of fuzz/ (libFuzzer, ASan + UBSan, built into build-fuzz/ by make check when
# clang is installed): every regression input of fuzz/regress/<target>/ (each one crashed, leaked or ran
# out of memory before its fix) runs clean, then each target fuzzes for MT_FUZZ_SECONDS (default 4) from
# its committed corpus, with new inputs kept in scratch. A crash, leak, timeout (10 s) or an allocation
# over 1 GiB fails the target, showing libFuzzer's summary; the input is kept with the scratch.
# make fuzz runs the same targets for minutes each (fuzz/run).
. "$(dirname "$0")/../lib.sh"
fb=$T_TOP/${MT_FUZZ_BUILD:-build-fuzz}
secs=${MT_FUZZ_SECONDS:-4}
if ! command -v clang >/dev/null 2>&1 && [ ! -d "$fb/fuzz" ]; then
    t_skip "fuzz targets" "clang is not installed (make check builds them with it)"; exit 0
fi
limits=(-timeout=10 -malloc_limit_mb=1024 -rss_limit_mb=1024)
for src in "$T_TOP"/fuzz/fuzz_*.c; do
    t=$(basename "$src" .c); t=${t#fuzz_}
    bin=$fb/fuzz/fuzz_$t
    if [ ! -x "$bin" ]; then t_fail "fuzz_$t" "$bin is not built (make fuzz-build)"; continue; fi
    if [ -d "$T_TOP/fuzz/regress/$t" ]; then
        n=$(find "$T_TOP/fuzz/regress/$t" -type f | wc -l)
        # inputs given as files are checked for leaks only at exit, and only with LeakSanitizer asked for
        if ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=1" "$bin" "${limits[@]}" "$T_TOP/fuzz/regress/$t"/* \
            >"$T_TMP/$t.regress" 2>&1; then
            t_pass "fuzz_$t: its $n regression inputs run clean"
        else
            t_fail "fuzz_$t: its $n regression inputs run clean" "$(grep -m2 -E 'ERROR|SUMMARY|Running:' "$T_TMP/$t.regress" | tr '\n' ' ')"
        fi
    fi
    mkdir -p "$T_TMP/corpus/$t"
    "$bin" "${limits[@]}" -max_total_time="$secs" -print_final_stats=1 -artifact_prefix="$T_TMP/$t-" \
        "$T_TMP/corpus/$t" "$T_TOP/fuzz/corpus/$t" >"$T_TMP/$t.log" 2>&1
    rc=$?
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$T_TMP/$t.log" | tail -1)
    if [ $rc = 0 ] && [ "${execs:-0}" -gt 0 ]; then
        t_pass "fuzz_$t: ${secs} s, $execs executions, nothing found"
    else
        t_fail "fuzz_$t: ${secs} s without a finding" "exit $rc: $(grep -m3 -E 'ERROR|SUMMARY|Test unit written' "$T_TMP/$t.log" | tr '\n' ' ')"
    fi
done
