#!/usr/bin/env bash
# chat-template-oracle.sh: mt's chat template renderer (serve/chat_template.h) against jinja2 configured as
# transformers configures it for apply_chat_template (build/venv-hf; skipped with a message only when PyPI
# cannot be reached): the templates of tests/golden/chat on several message lists, with and without
# add_generation_prompt, give the same text or raise the same raise_exception message
# (tests/oracle/chat_template_ref.py drives build/tests/test_chat_template --render).
. "$(dirname "$0")/../lib.sh"
helper=$T_TOP/${MT_BUILD:-build}/tests/test_chat_template
if ! py=$("$T_TOP/tests/oracle/venv-hf.sh" 2>"$T_TMP/venv.err"); then
    t_skip "jinja2 oracle" "jinja2 unavailable: $(head -c 200 "$T_TMP/venv.err")"
    exit 0
fi
if [ ! -x "$helper" ]; then t_fail "helper" "$helper not built (make tests)"; exit 0; fi
if ! "$py" "$T_TOP/tests/oracle/chat_template_ref.py" "$helper" "$T_TOP"/tests/golden/chat/*.jinja \
    >"$T_TMP/out" 2>"$T_TMP/err"; then
    t_fail "jinja2 oracle" "the oracle script failed: $(tail -c 400 "$T_TMP/err")"
    exit 0
fi
[ -s "$T_TMP/out" ] || t_fail "jinja2 oracle" "no comparisons made"
while IFS= read -r line; do
    case $line in
    PASS\ *) t_pass "as jinja2: ${line#PASS }" ;;
    FAIL\ *) t_fail "as jinja2: ${line#FAIL }" "$(grep -A2 -F -- "--- ${line#FAIL }" "$T_TMP/err" | tail -2 | head -c 600)" ;;
    esac
done <"$T_TMP/out"
