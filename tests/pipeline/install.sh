#!/usr/bin/env bash
# install.sh: `make install PREFIX=...` puts programs, man pages and the GPT-2 vocabulary in place,
# and the installed programs run from there; `make uninstall` removes all of it. Plain make installs
# nothing: a missing build package is named with the command that installs it; and parallel goals
# (make -j2 all tests) build libmt.a once.
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
t_ok "make uninstall PREFIX=..." make -s -C "$T_TOP" uninstall PREFIX="$dest"
left=$(find "$dest" -type f | sed "s|^$dest/||")
[ -z "$left" ] && t_pass "make uninstall removes every file make install put in place" \
    || t_fail "make uninstall removes every file make install put in place" "left: $(echo $left | head -c 300)"
MT_BUILD_PKGS="libzstd-dev mt-no-such-package" "$T_TOP/share/install-deps.sh" --check >"$T_TMP/o" 2>"$T_TMP/e"; rc=$?
[ $rc = 1 ] && grep -q 'packages: mt-no-such-package$' "$T_TMP/e" && grep -q 'make deps' "$T_TMP/e" \
    && t_pass "a missing build package: named, with make deps to install it, nothing installed" \
    || t_fail "a missing build package is named" "exit $rc: $(cat "$T_TMP/e")"
n=$(make -C "$T_TOP" -nB all tests 2>/dev/null | grep -c '^ar rcs build/libmt.a')
[ "$n" = 1 ] && t_pass "make -j2 all tests: one make builds libmt.a once" || t_fail "make all tests builds libmt.a once" "$n times"
