#!/bin/sh
# demo.sh: what `make demo` runs: builds a corpus that needs no download (the Python standard library
# sources on this machine, as CodeParrot-style JSON lines, zstd-compressed) and runs every step of the
# mt pipeline that exists: tokenize + index, sample indices (shuffle), training a small GPT on the CPU,
# evaluation and scoring, generation, conversion, serving over HTTP, and inspects the results.
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
# MT_DEMO_ITERS shortens the run (the test suite runs the whole script with a few iterations).
iters=${MT_DEMO_ITERS:-600}
SCHED="--split 969,30,1 --seq-length 128 --train-iters $iters --global-batch-size 8 --eval-interval $(( (iters + 2) / 3 ))
       --eval-iters 10 --seed 1234"
# A small GPT-2 (4 layers, hidden 64: 3.4M parameters, most of them the 50304-row embedding).
MODEL="--num-layers 4 --hidden-size 64 --num-attention-heads 4 --max-position-embeddings 128 --micro-batch-size 8
       --lr 3e-3 --min-lr 3e-4 --lr-decay-style cosine --lr-warmup-iters $(( (iters + 19) / 20 )) --weight-decay 0.1 --clip-grad 1.0
       --hidden-dropout 0 --attention-dropout 0 --log-interval 10"


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

step "train: mt-train, $iters iterations of 8 x 128 tokens on the CPU -> $out/ckpt (log: $out/train.log)"
# --load resumes from the last checkpoint when the demo is run again (or was interrupted).
# shellcheck disable=SC2086
{ "$bin/mt-train" $MODEL $SCHED --data-path "$data" --data-cache-path "$out/data/index-cache" \
    --vocab-file "$vocab" --merge-file "$merges" --save "$out/ckpt" --load "$out/ckpt" --save-interval $(( (iters + 2) / 3 )) \
    --tensorboard-dir "$out/tb" --metrics-file "$out/metrics.jsonl" --exit-signal-handler; echo $? > "$out/.train.rc"; } | tee "$out/train.log"
[ "$(cat "$out/.train.rc")" = 0 ] || { echo "demo: mt-train failed" >&2; exit 1; }

step "evaluate: mt-eval on the test split"
"$bin/mt-eval" --load "$out/ckpt" --eval-split test

step "score: mt-eval --score, log-probability of two snippets"
printf '%s\n' '{"text": "def add(a, b):\n    return a + b\n"}' '{"text": "add(a, b): def\n b + a return\n"}' \
    | "$bin/mt-eval" --load "$out/ckpt" --score

step "learning: validation loss against the unigram entropy of the corpus (nats per token)"
"$bin/mt-index" --dump "$data" | awk '{ for (i = 1; i <= NF; i++) c[$i]++; n += NF }
    END { for (t in c) { p = c[t] / n; h -= p * log(p) } printf "unigram entropy of the corpus: %.3f\n", h }' >&2
grep -E 'validation loss at iteration [0-9]+ \|' "$out/train.log" \
    | sed -E 's/.*at (iteration [0-9]+).*lm loss value: ([^ ]+).*/validation loss at \1: \2/' >&2

step "generate: mt-generate, a greedy and a sampled continuation of two prompts (KV cache)"
p1=$(printf 'def read_file(path):\n    with open(path) as f:\n        return')
p2=$(printf 'import os\nimport sys\n\n\ndef main(')
printf '%s' "$p1"; "$bin/mt-generate" --load "$out/ckpt" --greedy --max-new-tokens 40 "$p1"
echo "-----"
printf '%s' "$p2"; "$bin/mt-generate" --load "$out/ckpt" --temperature 0.7 --top-p 0.9 --repetition-penalty 1.2 --seed 1 \
    --max-new-tokens 40 "$p2"

step "convert: mt-ckpt-convert -> $out/hf, a Hugging Face GPT2LMHeadModel directory with its tokenizer"
rm -rf "$out/hf"
"$bin/mt-ckpt-convert" --load "$out/ckpt" --to hf --out "$out/hf"
ls -l "$out/hf" >&2
echo "(in Python: AutoModelForCausalLM.from_pretrained(\"$out/hf\"), AutoTokenizer.from_pretrained(\"$out/hf\"))" >&2

step "generate from the Hugging Face directory: mt-generate --load $out/hf"
p3=$(printf 'class Config:\n    def __init__(self')
printf '%s' "$p3"; "$bin/mt-generate" --load "$out/hf" --top-k 40 --temperature 0.8 --seed 2 --max-new-tokens 48 "$p3"

step "serve: mt-serve on a free port of 127.0.0.1, asked once with curl, then stopped with SIGTERM"
if command -v curl >/dev/null; then
    : >"$out/serve.log"   # there before the loop below reads it (the server's shell opens it when it runs)
    "$bin/mt-serve" --load "$out/ckpt" --port 0 2>"$out/serve.log" &
    serve_pid=$!
    trap 'kill $serve_pid 2>/dev/null' EXIT
    port=""
    for _ in $(seq 600); do   # the first line on stderr names the port once the model is loaded
        port=$(sed -n 's|.* on http://127.0.0.1:\([0-9][0-9]*\)$|\1|p' "$out/serve.log")
        [ -n "$port" ] || ! kill -0 $serve_pid 2>/dev/null && break
        sleep 0.1
    done
    [ -n "$port" ] || { cat "$out/serve.log" >&2; echo "demo: mt-serve did not start" >&2; exit 1; }
    body='{"prompt": "def add(a, b):", "max_tokens": 24, "temperature": 0}'
    echo "curl -s 127.0.0.1:$port/v1/completions -d '$body'" >&2
    curl -sS "127.0.0.1:$port/v1/completions" -d "$body"
    echo
    kill -TERM $serve_pid
    wait $serve_pid || { cat "$out/serve.log" >&2; echo "demo: mt-serve did not exit 0 after SIGTERM" >&2; exit 1; }
    trap - EXIT
    cat "$out/serve.log" >&2
else
    echo "(curl is not installed: make deps installs it)" >&2
fi

printf '\n\ndemo finished: outputs in %s\n' "$out" >&2
