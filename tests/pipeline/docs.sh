#!/usr/bin/env bash
# docs.sh: every program has --help and a man page, and the man page documents every flag --help lists.
. "$(dirname "$0")/../lib.sh"
for p in "$T_TOP"/cmd/mt-*.c; do
    name=$(basename "$p" .c)
    man=$T_TOP/man/$name.1
    if ! "$name" --help > "$T_TMP/help" 2>&1; then t_fail "$name --help" "exit non-zero"; continue; fi
    t_pass "$name --help"
    if [ ! -f "$man" ]; then t_fail "$name has a man page" "no $man"; continue; fi
    t_pass "$name has a man page"
    # the exit status of mt(7): 0 for --help and --version, 1 with one line on stderr for a bad flag
    grep -q '^\.SH EXIT STATUS' "$man" && t_pass "$name(1) has an EXIT STATUS section" || t_fail "$name(1) EXIT STATUS" "absent"
    "$name" --version >/dev/null 2>&1 && t_pass "$name --version: exit 0" || t_fail "$name --version" "exit $?"
    "$name" --no-such-flag </dev/null >"$T_TMP/o" 2>"$T_TMP/e"; rc=$?
    [ $rc = 1 ] && [ "$(wc -l <"$T_TMP/e")" = 1 ] && [ ! -s "$T_TMP/o" ] && t_pass "$name --no-such-flag: exit 1, one line" \
        || t_fail "$name --no-such-flag: exit 1, one line" "exit $rc: $(head -c 200 "$T_TMP/e")"
    missing=""
    for f in $(grep -oE -- '--[a-z][a-z0-9-]+' "$T_TMP/help" | sort -u); do
        # roff writes "\-\-flag"; accept either spelling
        grep -qE -- "(\\\\-\\\\-|--)${f#--}([^a-z0-9-]|$)" "$man" || missing="$missing $f"
    done
    if [ -z "$missing" ]; then t_pass "$name.1 documents every flag of --help"
    else t_fail "$name.1 documents every flag of --help" "missing:$missing"; fi
done
