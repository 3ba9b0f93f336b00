#!/usr/bin/env bash
# walkthrough.sh: the README's Walkthrough block, run as it stands (under bash -eu -o pipefail, in an
# empty directory, MT the checkout), then its outputs checked: the three corpora hold every file of the
# demo corpus once, each dataset is its token stream, training learned, mt-eval scored each test split,
# TensorBoard events were written, and transformers' greedy continuation of the converted model is
# mt-generate's. Then share/examples/data.mk re-runs only what a change touches: one corpus (its
# tokenize and index, and the shuffle), the mt-index program (every index and the shuffle, no tokenize),
# the schedule (the shuffle alone), nothing (nothing).
. "$(dirname "$0")/../lib.sh"
w=$T_TMP/walk
mkdir -p "$w"
awk '/^## Walkthrough/ { on = 1 } on && /^```sh$/ { inb = 1; next } inb && /^```$/ { exit } inb' \
    "$T_TOP/README.md" > "$T_TMP/walk.sh"
[ "$(wc -l < "$T_TMP/walk.sh")" -gt 10 ] && t_pass "README has the Walkthrough block" \
    || { t_fail "README has the Walkthrough block" "$(wc -l < "$T_TMP/walk.sh") lines"; exit 0; }
# transformers comes from PyPI (make deps); offline, the block runs without its lines
if ! "$T_TOP/tests/oracle/venv-hf.sh" > /dev/null 2> "$T_TMP/venv.err"; then
    t_skip "load in transformers" "unavailable: $(head -c 300 "$T_TMP/venv.err")"
    sed -i '/venv-hf/,/tee generate-hf.txt/d' "$T_TMP/walk.sh"
fi
if (cd "$w" && MT=$T_TOP timeout -k 5 480 bash -eu -o pipefail "$T_TMP/walk.sh") > "$T_TMP/walk.out" 2> "$T_TMP/walk.err"
then t_pass "the Walkthrough runs"
else t_fail "the Walkthrough runs" "exit $?: $(tail -c 400 "$T_TMP/walk.err")"; exit 0; fi

# corpus: every document of the demo corpus in exactly one of the three datasets
n=$("$T_TOP/share/make-demo-corpus.sh" | wc -l)
got=$(cd "$w" && mt-index --info --json data/modules_content_document data/packages_content_document \
    data/web_content_document | /usr/bin/python3 -c 'import json, sys; print(sum(json.loads(l)["documents"] for l in sys.stdin))')
[ "$n" -gt 100 ] && [ "$got" = "$n" ] && t_pass "three corpora, $n documents in all" \
    || t_fail "three corpora hold the demo corpus" "$got documents, corpus has $n"
# tokenize -> index: each dataset holds its token stream, document for document
for c in modules packages web; do
    mt-tokenize --vocab-file "$GPT2_VOCAB" --merge-file "$GPT2_MERGES" --json-keys content --append-eod --quiet \
        "$w/corpora/$c.jsonl.zst" | mt-index --output-prefix "$T_TMP/ref_$c" 2>/dev/null
    t_cmp "data/${c}_content_document.bin is its corpus tokenized" "$T_TMP/ref_${c}_content_document.bin" \
        "$w/data/${c}_content_document.bin"
done
# train: 100 iterations from the shuffle's indices; the last validation loss far below the first loss
t_grep "mt-train ran 100 iterations" 'iteration +100/ +100 \|' "$w/train.log"
first=$(grep -m1 -oE 'lm loss: [0-9.E+-]+' "$w/train.log" | awk '{ print $3 + 0 }')
last=$(grep -oE 'validation loss at iteration 100 \| lm loss value: [0-9.E+-]+' "$w/train.log" | awk '{ print $NF + 0 }')
awk -v a="$first" -v b="$last" 'BEGIN { exit !(a > 9 && b > 0 && b < 6) }' \
    && t_pass "training learned: loss $first at iteration 10, validation $last at 100" \
    || t_fail "training learned" "first '$first', last validation '$last'"
ls "$w"/data/cache/*.npy > "$T_TMP/npy.before"
[ "$(ls "$w"/data/cache/*.npy | wc -l)" -gt 10 ] && t_pass "the shuffle's indices in data/cache" \
    || t_fail "indices in data/cache" "$(cat "$T_TMP/npy.before")"
# eval: one JSON line per corpus with a finite loss
[ "$(grep -cE '^\{"split": "test", "samples": [1-9][0-9]*, "tokens": [0-9]+, "loss": [0-9.]+' "$T_TMP/walk.out")" = 3 ] \
    && t_pass "mt-eval: the test split of each corpus" \
    || t_fail "mt-eval: the test split of each corpus" "$(grep '"split"' "$T_TMP/walk.out" | head -3)"
# TensorBoard: an event file with the loss scalars
ev=$(ls "$w"/tb/events.out.tfevents.* 2>/dev/null | head -1)
[ -n "$ev" ] && grep -aq 'lm loss' "$ev" && t_pass "TensorBoard events with the lm loss" \
    || t_fail "TensorBoard events" "no event file with 'lm loss' in $w/tb"
# convert -> transformers: its greedy continuation is mt-generate's
t_ok "Hugging Face directory" test -s "$w/hf/model.safetensors" -a -s "$w/hf/config.json"
if [ -f "$w/generate-hf.txt" ]; then
    if [ "$(cat "$w/generate-hf.txt")" = "$(printf 'import os\ndef main(%s' "$(cat "$w/generate-mt.txt")")" ] &&
        [ "$(wc -c < "$w/generate-mt.txt")" -gt 5 ]; then
        t_pass "transformers' greedy continuation is mt-generate's"
    else t_fail "transformers' greedy continuation is mt-generate's" "hf: $(head -c 200 "$w/generate-hf.txt") mt: $(head -c 200 "$w/generate-mt.txt")"; fi
fi

# data.mk: what runs again after a change (make -n, then the mtimes of a real run)
eval "$(grep -m1 '^SCHED=' "$T_TMP/walk.sh")"
mkdir -p "$T_TMP/bin"
cp -p "$T_TOP/${MT_BUILD:-build}"/bin/mt-{tokenize,index,shuffle} "$T_TMP/bin/"
dmk() { (cd "$w" && make -j2 -f "$T_TOP/share/examples/data.mk" BIN="$T_TMP/bin" SCHEDULE="$SCHED" "$@"); }
stamp() { (cd "$w" && stat -c '%n %Y.%y' data/tok/*.toks data/*.idx data/cache/shuffle.log) > "$1"; }
changed() { diff "$1" "$2" | sed -n 's/^> \([^ ]*\) .*/\1/p' | sort | tr '\n' ' '; }
# runs: the commands make -n prints, as "tokenize:NAME index:NAME shuffle"
runs() { dmk -n 2>/dev/null | sed -nE 's/.*mt-tokenize .* corpora\/([a-z]+)\.jsonl\.zst.*/tokenize:\1/p;
    s/.*mt-index --output-prefix data\/([a-z]+) .*/index:\1/p; s/.*mt-shuffle .*/shuffle/p' | sort | tr '\n' ' '; }
dmk > /dev/null 2>&1   # the walkthrough's own tools were build/bin's: this BIN's copies start here
stamp "$T_TMP/s0"
sleep 1.1
[ "$(runs)" = "" ] && t_pass "data.mk: nothing to do when nothing changed" || t_fail "data.mk: nothing changed" "runs: $(runs)"
touch "$w/corpora/packages.jsonl.zst"
r=$(runs)
[ "$r" = "index:packages shuffle tokenize:packages " ] && t_pass "data.mk -n: one corpus touched, its chain and the shuffle" \
    || t_fail "data.mk -n: one corpus touched" "runs: $r"
dmk > "$T_TMP/mk.out" 2>&1 || t_fail "data.mk after a touch" "$(tail -c 300 "$T_TMP/mk.out")"
stamp "$T_TMP/s1"
c=$(changed "$T_TMP/s0" "$T_TMP/s1")
[ "$c" = "data/cache/shuffle.log data/packages_content_document.idx data/tok/packages.toks " ] \
    && t_pass "data.mk -j2: one corpus touched, only its files and the shuffle are new" || t_fail "data.mk -j2: one corpus touched" "new: $c"
sleep 1.1
touch "$T_TMP/bin/mt-index"
r=$(runs)
[ "$r" = "index:modules index:packages index:web shuffle " ] && t_pass "data.mk -n: mt-index newer, every index and the shuffle" \
    || t_fail "data.mk -n: mt-index newer" "runs: $r"
dmk > /dev/null 2>&1
SCHED="$SCHED --seed 7"
r=$(runs)
[ "$r" = "shuffle " ] && t_pass "data.mk -n: a new schedule, the shuffle alone" || t_fail "data.mk -n: a new schedule" "runs: $r"
dmk > /dev/null 2>&1 && [ "$(runs)" = "" ] && grep -q -- '--seed 7' "$w/data/cache/shuffle.args" \
    && t_pass "data.mk: the new schedule's indices built" || t_fail "data.mk: the new schedule" "$(cat "$w/data/cache/shuffle.args")"
