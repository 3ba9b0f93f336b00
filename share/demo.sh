#!/bin/sh
# demo.sh: what `make demo` runs: builds a corpus that needs no download (the Python standard library
# sources on this machine, as CodeParrot-style JSON lines, zstd-compressed) and runs every step of the
# mt pipeline that exists: tokenize + index, sample indices (shuffle), and inspects the results.
# Outputs go to demo/ (or $MT_DEMO_DIR).
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
bin=$top/build/bin
out=${MT_DEMO_DIR:-$top/demo}
vocab=$top/share/gpt2/vocab.json
merges=$top/share/gpt2/merges.txt
mkdir -p "$out/data"
step() { printf '\n== %s\n' "$*" >&2; }
data=$out/data/codeparrot_content_document
# The training schedule: mt-shuffle precomputes the sample indices of exactly this run.
SCHED="--split 969,30,1 --seq-length 128 --train-iters 300 --global-batch-size 8 --eval-interval 100 --eval-iters 5 --seed 1234"


step "corpus: Python standard library sources -> $out/codeparrot.jsonl.zst"
if [ ! -s "$out/codeparrot.jsonl.zst" ]; then
    "$top/share/make-demo-corpus.sh" | zstd -q -3 -o "$out/.codeparrot.jsonl.zst.tmp" -f
    mv "$out/.codeparrot.jsonl.zst.tmp" "$out/codeparrot.jsonl.zst"
fi
ls -l "$out/codeparrot.jsonl.zst" >&2

step "tokenize + index: mt-tokenize | mt-index -> $out/data/codeparrot_content_document.{bin,idx}"
time_start=$(date +%s.%N)
"$bin/mt-tokenize" --vocab-file "$vocab" --merge-file "$merges" --json-keys content --append-eod --workers 2 \
    "$out/codeparrot.jsonl.zst" | "$bin/mt-index" --output-prefix "$out/data/codeparrot"
time_end=$(date +%s.%N)
awk -v a="$time_start" -v b="$time_end" 'BEGIN { printf "tokenized and indexed in %.1f s\n", b - a }' >&2

step "inspect: mt-index --info"
"$bin/mt-index" --info "$out/data/codeparrot_content_document" >&2

step "inspect: first 300 characters of document 0, decoded back to text"
"$bin/mt-index" --dump "$out/data/codeparrot_content_document" --range 0:1 --decode \
    --vocab-file "$vocab" --merge-file "$merges" | head -c 300 >&2

step "shuffle: mt-shuffle -> Megatron's document/sample/shuffle indices in $out/data/index-cache"
# shellcheck disable=SC2086
"$bin/mt-shuffle" --data-path "$data" $SCHED --data-cache-path "$out/data/index-cache"
step "inspect: training sample 0, as text (first 300 characters)"
# shellcheck disable=SC2086
"$bin/mt-shuffle" --data-path "$data" $SCHED --data-cache-path "$out/data/index-cache" --show-sample 0 --decode \
    --vocab-file "$vocab" --merge-file "$merges" | head -c 300 >&2

printf '\n\ndemo finished: outputs in %s\n' "$out" >&2
