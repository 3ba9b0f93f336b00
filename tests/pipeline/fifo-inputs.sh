#!/usr/bin/env bash
# fifo-inputs.sh: a FIFO (or other non-regular file) where a program expects a file is refused at once
# with "FILE: not a regular file" and a non-zero exit, never waited on: the .idx of mt-index --info and
# mt-shuffle, a checkpoint's tracker, meta.json and model.safetensors (mt-train --load, mt-eval), and the
# vocab.json / merges.txt of mt-tokenize. Each run has 20 s; a wait shows as exit 124.
. "$(dirname "$0")/../lib.sh"
d=$T_TMP
PYTHONPATH=$T_TOP/tests/oracle /usr/bin/python3 "$T_TOP/tests/oracle/walk_data.py" "$d/data" 7 100
args="--num-layers 1 --hidden-size 32 --num-attention-heads 4 --seq-length 32 --max-position-embeddings 32
      --tokenizer-type NullTokenizer --vocab-size 60 --micro-batch-size 2 --global-batch-size 2 --lr 1e-3
      --log-interval 1 --eval-iters 0 --split 100,0,0 --data-path $d/data --data-cache-path $d/cache"
# shellcheck disable=SC2086
mt-train $args --train-iters 2 --save "$d/ck" >/dev/null 2>"$d/t.err" || t_fail "a checkpoint to break" "$(tail -2 "$d/t.err")"
refused() {   # NAME FILE CMD...: CMD fails at once naming FILE as not a regular file
    local name=$1 file=$2; shift 2
    timeout -k 2 20 "$@" >"$d/o" 2>"$d/e"
    local rc=$?
    if [ $rc != 0 ] && [ $rc != 124 ] && [ $rc != 137 ] && grep -qF "$file: not a regular file" "$d/e"; then t_pass "$name"
    else t_fail "$name" "exit $rc: $(head -c 300 "$d/e")"; fi
}
fifo() { rm -f "$1" && mkfifo "$1"; }
# the dataset's index
mkdir -p "$d/f" && cp "$d/data.bin" "$d/f/x.bin" && fifo "$d/f/x.idx"
refused "mt-index --info: .idx is a FIFO" "$d/f/x.idx" mt-index --info "$d/f/x"
refused "mt-shuffle: .idx is a FIFO" "$d/f/x.idx" mt-shuffle --data-path "$d/f/x" --split 100,0,0 --seq-length 32 \
    --train-iters 2 --global-batch-size 2 --eval-iters 0 --data-cache-path "$d/f/cache"
# a checkpoint's files
for f in latest_checkpointed_iteration.txt iter_0000002/mp_rank_00/meta.json iter_0000002/mp_rank_00/model.safetensors; do
    rm -rf "$d/c" && cp -r "$d/ck" "$d/c" && fifo "$d/c/$f"
    # shellcheck disable=SC2086
    refused "mt-train --load: $(basename "$f") is a FIFO" "$d/c/$f" mt-train $args --train-iters 3 --load "$d/c"
done
rm -rf "$d/c" && cp -r "$d/ck" "$d/c" && fifo "$d/c/iter_0000002/mp_rank_00/meta.json"
refused "mt-eval --load: meta.json is a FIFO" "$d/c/iter_0000002/mp_rank_00/meta.json" mt-eval --load "$d/c" \
    --data-path "$d/data" --data-cache-path "$d/cache" --split 100,0,0 --eval-iters 1
# the tokenizer's files
fifo "$d/vocab.json"
refused "mt-tokenize: vocab.json is a FIFO" "$d/vocab.json" mt-tokenize --vocab-file "$d/vocab.json" --merge-file "$GPT2_MERGES" </dev/null
fifo "$d/merges.txt"
refused "mt-tokenize: merges.txt is a FIFO" "$d/merges.txt" mt-tokenize --vocab-file "$GPT2_VOCAB" --merge-file "$d/merges.txt" </dev/null
