#!/usr/bin/env bash
# save-lock.sh: one writer per checkpoint directory. While an mt-train job writes a --save directory, a
# second job pointed at it stops before training with a message naming the holder, and the first job's
# checkpoints are untouched; a job killed with SIGKILL leaves no lock behind, so the next run goes ahead.
. "$(dirname "$0")/../lib.sh"
d=$T_TMP
PYTHONPATH=$T_TOP/tests/oracle /usr/bin/python3 "$T_TOP/tests/oracle/walk_data.py" "$d/data" 7 300
args="--num-layers 1 --hidden-size 32 --num-attention-heads 4 --seq-length 32 --max-position-embeddings 32
      --tokenizer-type NullTokenizer --vocab-size 60 --micro-batch-size 2 --global-batch-size 2 --lr 1e-3
      --log-interval 1 --eval-iters 0 --split 100,0,0 --data-path $d/data --data-cache-path $d/cache
      --save $d/ck --save-interval 1000000"
export OMP_NUM_THREADS=1
# shellcheck disable=SC2086
mt-train $args --train-iters 1000000 >"$d/a.log" 2>"$d/a.err" &
a=$!
if t_wait_line "$d/a.log" ' iteration  *1/'; then t_pass "the first job trains"
else t_fail "the first job trains" "$(tail -3 "$d/a.err")"; fi
# shellcheck disable=SC2086
if mt-train $args --train-iters 2 >"$d/b.log" 2>"$d/b.err"; then t_fail "a second job on the same --save" "exit 0"
elif grep -q "another mt-train job (host .*, pid $a) is writing checkpoints there" "$d/b.err" && ! grep -q ' iteration ' "$d/b.log"
then t_pass "a second job on the same --save is refused before training, naming the holder"
else t_fail "a second job on the same --save" "$(head -c 300 "$d/b.err")"; fi
kill -0 "$a" 2>/dev/null && t_pass "the first job goes on" || t_fail "the first job goes on" "it ended"
kill -KILL "$a"; wait "$a" 2>/dev/null
# shellcheck disable=SC2086
if mt-train $args --train-iters 2 >"$d/c.log" 2>"$d/c.err" && [ "$(cat "$d/ck/latest_checkpointed_iteration.txt")" = 2 ]
then t_pass "after the holder was killed (SIGKILL) the next job trains and saves"
else t_fail "after SIGKILL of the holder" "$(tail -3 "$d/c.err")"; fi
