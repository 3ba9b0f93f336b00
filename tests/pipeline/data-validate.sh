#!/usr/bin/env bash
# data-validate.sh: the data path refuses what would train or evaluate on wrong data: a negative token
# id in a dataset (one rule for mt-train, mt-eval, mt-shuffle and mt-index --dump), index caches whose
# arrays were damaged or edited (another split's documents, a shuffle index that is no permutation,
# sample rows that go backwards), and a dataset named with its .bin/.idx suffix; a split with no tokens
# and no samples asked of it is simply not built.
. "$(dirname "$0")/../lib.sh"
py=/usr/bin/python3
d=$T_TMP
export OMP_NUM_THREADS=2

# 150 documents over ids 0..59 (NullTokenizer --vocab-size 60; end of document 60), as int32; a copy
# with -5 at token 17 of sequence 3.
PYTHONPATH=$T_TOP/tests/oracle $py - "$d" <<'PYEOF'
import sys, numpy as np
from indexed_write import write_indexed
rs = np.random.RandomState(11)
docs = [list(rs.randint(0, 60, rs.randint(20, 60))) + [60] for _ in range(150)]
write_indexed(sys.argv[1] + "/good", docs, dtype="int32")
docs[3][17] = -5
write_indexed(sys.argv[1] + "/neg", docs, dtype="int32")
# 200 documents for the empty-split case: 969,30,1 leaves the test split no sequence
write_indexed(sys.argv[1] + "/small", [list(rs.randint(0, 60, 64)) + [60] for _ in range(200)])
PYEOF

# shellcheck disable=SC2086
train() {
    mt-train --num-layers 1 --hidden-size 16 --num-attention-heads 2 --seq-length 16 --max-position-embeddings 16 \
        --tokenizer-type NullTokenizer --vocab-size 60 --make-vocab-size-divisible-by 16 --micro-batch-size 2 \
        --global-batch-size 4 --lr 1e-3 --train-iters 200 --log-interval 50 --eval-iters 0 --split 98,1,1 \
        --seed 5 --data-cache-path "$d/cache" "$@"
}
# exit non-zero with a message of one line on stderr
err1() { "$@" >"$d/o" 2>"$d/e"; local rc=$?; [ $rc != 0 ] && [ "$(wc -l <"$d/e")" -eq 1 ]; }

# 1. a negative token id is an error naming the dataset and the position, in every reader
neg='neg: sequence 3, token 17 \(byte [0-9]+ of the \.bin\): -5 is not a token id'
err1 train --data-path "$d/neg" && t_grep "mt-train: negative id named with its dataset and position" "$neg" "$d/e" \
    || t_fail "mt-train: negative id named with its dataset and position" "$(cat "$d/e" | tail -2)"
train --data-path "$d/good" --train-iters 2 --save "$d/ck" --split 90,5,5 >/dev/null 2>&1
err1 mt-eval --load "$d/ck" --data-path "$d/neg" --eval-split train --data-cache-path "$d/cache" \
    && t_grep "mt-eval: negative id named" "$neg" "$d/e" || t_fail "mt-eval: negative id named" "$(tail -2 "$d/e")"
all=$(mt-shuffle --data-path "$d/neg" --split 100,0,0 --seq-length 16 --train-iters 100 --global-batch-size 4 \
      --eval-iters 0 --data-cache-path "$d/cache" --show-sample 0 --show-count 400 --show-split train 2>&1 >/dev/null | tail -1)
echo "$all" | grep -Eq "$neg" && t_pass "mt-shuffle --show-sample: negative id named" \
    || t_fail "mt-shuffle --show-sample: negative id named" "$all"
t_fails "mt-index --dump: negative id refused" mt-index --dump --sequences --range 3:4 "$d/neg"

# 2. index caches: arrays that match their description but do not hold together are an error naming
#    the file; the untouched cache is used as it is (a cache directory of its own, one train split in it)
train --data-path "$d/good" --train-iters 20 --split 80,20,0 --data-cache-path "$d/c2" >"$d/ok.log" 2>&1 && t_pass "a fresh cache trains" \
    || t_fail "a fresh cache trains" "$(tail -2 "$d/ok.log")"
train --data-path "$d/good" --train-iters 20 --split 80,20,0 --data-cache-path "$d/c2" >"$d/ok2.log" 2>&1 && cmp -s \
    <(grep -o 'lm loss: [^|]*' "$d/ok.log") <(grep -o 'lm loss: [^|]*' "$d/ok2.log") \
    && t_pass "the cached run repeats the losses" || t_fail "the cached run repeats the losses" "differ"
tamper() {   # tamper KIND: edit the train split's cached array, run, restore
    cp -a "$d/c2" "$d/c2.orig"
    $py - "$d/c2" "$1" <<'PYEOF'
import sys, glob, numpy as np
d, kind = sys.argv[1], sys.argv[2]
name = {"dup": "shuffle_index", "doc": "document_index", "back": "sample_index"}[kind]
(f,) = glob.glob(d + "/*-GPTDataset-train-" + name + ".npy")
a = np.load(f)
if kind == "dup": a[5] = a[4]                       # a repeated sample
if kind == "doc": a[2] = 140                        # a validation sequence (the split is 80,20,0 of 150)
if kind == "back": a[3] = a[1]                      # a row that goes back
np.save(f, a)
PYEOF
    err1 train --data-path "$d/good" --train-iters 20 --split 80,20,0 --data-cache-path "$d/c2"
    local rc=$?
    rm -rf "$d/c2"; mv "$d/c2.orig" "$d/c2"
    return $rc
}
tamper dup && t_grep "shuffle index with a repeated entry: error naming it" \
    'shuffle_index\.npy: entry 5 repeats sample [0-9]+ \(not a permutation\)' "$d/e" \
    || t_fail "shuffle index with a repeated entry: error naming it" "$(cat "$d/e")"
tamper doc && t_grep "document index entry in the validation range: error naming it" \
    'document_index\.npy: entry 2 is sequence 140, outside this split.s sequences \[0, 120\)' "$d/e" \
    || t_fail "document index entry in the validation range: error naming it" "$(cat "$d/e")"
tamper back && t_grep "sample index going back: error naming it" 'sample_index\.npy: row 3 .* does not advance' "$d/e" \
    || t_fail "sample index going back: error naming it" "$(cat "$d/e")"

# 3. a split with no tokens: built for nothing when nothing is asked of it, an error when samples are
train --data-path "$d/small" --train-iters 10 --split 969,30,1 --eval-iters 0 >"$d/s.log" 2>&1 \
    && t_pass "969,30,1 of 200 sequences with --eval-iters 0 trains" \
    || t_fail "969,30,1 of 200 sequences with --eval-iters 0 trains" "$(tail -2 "$d/s.log")"
mt-shuffle --data-path "$d/small" --split 969,30,1 --seq-length 16 --train-iters 10 --global-batch-size 4 \
    --eval-iters 0 --data-cache-path "$d/cache" --inspect >"$d/i.txt" 2>&1
t_grep "mt-shuffle: the empty test split is absent" '^test: absent \(no tokens, and no samples asked of it\)' "$d/i.txt"
err1 train --data-path "$d/small" --train-iters 10 --split 969,30,1 --eval-iters 1 --eval-interval 5 \
    && t_grep "samples asked of a split with no tokens: error" 'test split: .* have no tokens but [0-9]+ samples were requested' "$d/e" \
    || t_fail "samples asked of a split with no tokens: error" "$(cat "$d/e")"

# 4. a dataset named with its suffix gets a hint
err1 train --data-path "$d/good.bin" && t_grep "--data-path with .bin: hint" 'without \.bin or \.idx \(try .*/good\)' "$d/e" \
    || t_fail "--data-path with .bin: hint" "$(cat "$d/e")"
err1 mt-index --info "$d/good.idx" && t_grep "mt-index --info with .idx: hint" 'without \.bin or \.idx' "$d/e" \
    || t_fail "mt-index --info with .idx: hint" "$(cat "$d/e")"
