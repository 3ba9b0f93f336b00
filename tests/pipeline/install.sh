#!/usr/bin/env bash
# install.sh: `make install PREFIX=...` puts programs, man pages and the GPT-2 vocabulary in place,
# and the installed programs run from there.
. "$(dirname "$0")/../lib.sh"
dest=$T_TMP/prefix
t_ok "make install PREFIX=..." make -s -C "$T_TOP" install PREFIX="$dest"
for p in "$T_TOP"/cmd/mt-*.c; do
    name=$(basename "$p" .c)
    t_ok "$name installed and runs" "$dest/bin/$name" --help
    if [ -f "$dest/share/man/man1/$name.1" ]; then t_pass "$name.1 installed"; else t_fail "$name.1 installed" "missing"; fi
done
for m in "$T_TOP"/man/*.[157]; do
    if ! command -v groff >/dev/null; then t_skip "$(basename "$m") renders cleanly" "groff not installed"; continue; fi
    groff -t -man -ww -z "$m" > "$T_TMP/groff.err" 2>&1
    if [ -s "$T_TMP/groff.err" ]; then t_fail "$(basename "$m") renders cleanly" "$(head -3 "$T_TMP/groff.err")"
    else t_pass "$(basename "$m") renders cleanly"; fi
done
t_ok "GPT-2 vocabulary installed" cmp "$T_TOP/share/gpt2/vocab.json" "$dest/share/mt/gpt2/vocab.json"
