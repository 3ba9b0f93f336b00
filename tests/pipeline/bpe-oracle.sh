#!/usr/bin/env bash
# bpe-oracle.sh: mt's GPT-2 BPE against tiktoken and HF tokenizers on seeded random Unicode strings
# (tests/oracle/bpe-oracle.py drives build/tests/test_bpe --encode-lines). Skips when PyPI is
# unreachable. MT_SOAK=1 runs many more strings and every code point.
. "$(dirname "$0")/../lib.sh"
helper=$T_TOP/${MT_BUILD:-build}/tests/test_bpe
if ! py=$("$T_TOP/tests/oracle/venv.sh" 2>"$T_TMP/venv.err"); then
    t_skip "oracles" "tiktoken/tokenizers unavailable: $(head -c 200 "$T_TMP/venv.err")"
    exit 0
fi
if [ ! -x "$helper" ]; then t_fail "helper" "$helper not built (make tests)"; exit 0; fi
runs=("4000 1" "4000 2")
[ -n "${MT_SOAK:-}" ] && runs=("100000 3" "100000 4" "all-code-points")
for run in "${runs[@]}"; do
    case $run in *" "*) label="seed ${run#* }" ;; *) label=$run ;; esac
    # shellcheck disable=SC2086 # run is "COUNT SEED" or a mode word
    if ! "$py" "$T_TOP/tests/oracle/bpe-oracle.py" "$helper" "$GPT2_VOCAB" "$GPT2_MERGES" $run \
        >"$T_TMP/out" 2>"$T_TMP/err"; then
        t_fail "$label" "oracle script failed: $(tail -c 400 "$T_TMP/err")"
        continue
    fi
    while IFS= read -r line; do
        case $line in
        PASS\ *) t_pass "$label: ${line#PASS }" ;;
        FAIL\ *) t_fail "$label: ${line#FAIL }" "mismatching strings on stderr" ;;
        esac
    done <"$T_TMP/out"
    cat "$T_TMP/err" >&2
done
