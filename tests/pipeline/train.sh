#!/usr/bin/env bash
# train.sh: mt-train and mt-eval end to end on a tiny model and a synthetic learnable dataset:
# learning, exact resume after SIGKILL / SIGTERM / --exit-interval / a crash mid-save, finetune and
# no-load-optim, TensorBoard and metrics files, mt-eval against mt-train's own test evaluation,
# one-line errors for bad inputs.
. "$(dirname "$0")/../lib.sh"
py=/usr/bin/python3
d=$T_TMP

# A dataset of 61 token ids (NullTokenizer --vocab-size 60: ids 0..59, end of document 60): documents
# walk a fixed random permutation with occasional jumps, so a model can learn the successor rule.
PYTHONPATH=$T_TOP/tests/oracle $py - "$d/data" <<'EOF'
import sys, numpy as np
from indexed_write import write_indexed
from walk_data import walk_docs
toks = write_indexed(sys.argv[1], walk_docs(7, 400))
counts = np.bincount(toks, minlength=61).astype(float); p = counts[counts > 0] / counts.sum()
open(sys.argv[1] + ".entropy", "w").write("%.6f\n" % float(-(p * np.log(p)).sum()))
EOF

export OMP_NUM_THREADS=2
model="--num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 32 --max-position-embeddings 32
       --tokenizer-type NullTokenizer --vocab-size 60 --make-vocab-size-divisible-by 16"
sched="--micro-batch-size 4 --global-batch-size 8 --train-iters 60 --lr 3e-3 --min-lr 3e-4 --lr-decay-style cosine
       --lr-warmup-iters 5 --weight-decay 0.1 --clip-grad 1.0 --log-interval 5 --eval-interval 20 --eval-iters 2
       --split 90,5,5 --seed 77 --data-path $d/data --data-cache-path $d/cache"
# shellcheck disable=SC2086
train() { mt-train $model $sched "$@"; }
# the loss fields of the iteration lines (times and throughput differ run to run)
losses() { grep -E '^ *(\[.*\] )?iteration ' "$1" | sed -E 's/elapsed time per iteration \(ms\): [0-9.]+ \|//; s/tokens per second[^|]*\|//; s/^ *\[[^]]*\]//'; }
after() { losses "$1" | awk -v n="$2" '{ for (i = 1; i <= NF; i++) if ($i == "iteration") { split($(i+1), a, "/"); if (a[1] + 0 > n) print; break } }'; }

# 1. uninterrupted run, checkpoints every 20 iterations
if train --save "$d/A" --save-interval 20 --tensorboard-dir "$d/tb" --metrics-file "$d/metrics.jsonl" \
    >"$d/A.log" 2>"$d/A.err"; then t_pass "uninterrupted run"; else t_fail "uninterrupted run" "$(tail -3 "$d/A.err")"; fi
t_grep "iteration line" '^ *(\[[^]]*\])? iteration +60/ +60 \| consumed samples: +480 \| elapsed time per iteration \(ms\): [0-9.]+ \| learning rate: [0-9]\.[0-9]{6}E[-+][0-9]+ \| global batch size: +8 \| lm loss: [0-9]\.[0-9]{6}E[-+][0-9]+ \| loss scale: 1\.0 \| grad norm: [0-9]+\.[0-9]{3} \| number of skipped iterations: +0 \| number of nan iterations: +0 \|' "$d/A.log"
t_grep "validation block" '^ validation loss at iteration 20 \| lm loss value: [0-9]\.[0-9]{6}E[-+][0-9]+ \| lm loss PPL: [0-9]\.[0-9]{6}E[-+][0-9]+ \| $' "$d/A.log"
t_grep "test at the end" 'validation loss at iteration 60 on test set \|' "$d/A.log"
t_grep "tracker" '^60$' "$d/A/latest_checkpointed_iteration.txt"
[ -s "$d/A/iter_0000020/mp_rank_00/model.safetensors" ] && [ -s "$d/A/iter_0000060/mp_rank_00/optim.safetensors" ] \
    && t_pass "checkpoint directories" || t_fail "checkpoint directories" "$(ls -R "$d/A" | head)"

# learning: the last logged loss is well below the first and the validation loss below the unigram entropy
first=$(losses "$d/A.log" | head -1 | sed -E 's/.*lm loss: ([^ ]+) .*/\1/')
last=$(losses "$d/A.log" | tail -1 | sed -E 's/.*lm loss: ([^ ]+) .*/\1/')
val=$(grep 'on validation set' "$d/A.log" | sed -E 's/.*lm loss value: ([^ ]+) .*/\1/')
ent=$(cat "$d/data.entropy")
awk -v a="$first" -v b="$last" -v v="$val" -v h="$ent" 'BEGIN { exit !(b < a - 1.0 && v < h - 0.5) }' \
    && t_pass "loss falls ($first -> $last; validation $val < unigram entropy $ent)" \
    || t_fail "loss falls" "first $first last $last validation $val entropy $ent"

# With no OpenMP wait setting in the environment mt-train re-executes itself (same pid) with its own,
# a short spin (ompenv.h); a setting given is kept
wait_env() {   # the GOMP/OMP_WAIT variables of a run of mt-train with the given environment, once re-executed
    # the variables lib.sh sets are unset before env starts, so no process before mt-train's own re-execution
    # shows them in /proc/PID/environ
    (unset GOMP_SPINCOUNT OMP_WAIT_POLICY; exec env "$@" mt-train $model $sched >/dev/null 2>&1) &
    local pid=$! seen=
    for _ in $(seq 1000); do
        seen=$(tr '\0' '\n' <"/proc/$pid/environ" 2>/dev/null | grep -E '^(GOMP_SPINCOUNT|OMP_WAIT_POLICY)=' | tr '\n' ' ')
        [ -n "$seen" ] && break
        kill -0 $pid 2>/dev/null || break
        sleep 0.01
    done
    kill $pid 2>/dev/null; wait $pid 2>/dev/null
    echo "$seen"
}
w=$(wait_env -u GOMP_SPINCOUNT -u OMP_WAIT_POLICY)
[ "$w" = "GOMP_SPINCOUNT=1000 " ] && t_pass "OpenMP wait default: GOMP_SPINCOUNT=1000" || t_fail "OpenMP wait default" "'$w'"
w=$(wait_env -u GOMP_SPINCOUNT OMP_WAIT_POLICY=passive)
[ "$w" = "OMP_WAIT_POLICY=passive " ] && t_pass "OMP_WAIT_POLICY given: kept" || t_fail "OMP_WAIT_POLICY given" "'$w'"

# --train-samples with the schedule in samples is the same run as --train-iters
# shellcheck disable=SC2086
mt-train $model $(echo "$sched" | sed 's/--train-iters 60/--train-samples 480/; s/--lr-warmup-iters 5/--lr-warmup-samples 40/') \
    >"$d/S.log" 2>"$d/S.err"
diff <(losses "$d/A.log") <(losses "$d/S.log") >/dev/null && t_pass "--train-samples 480 = --train-iters 60" \
    || t_fail "--train-samples" "$(tail -2 "$d/S.err")"

# 2. killed with SIGKILL after the checkpoint at 20, resumed: identical loss lines for the rest
# shellcheck disable=SC2086
(exec mt-train $model $sched --save "$d/B" --load "$d/B" --save-interval 20) >"$d/B1.log" 2>"$d/B1.err" &
pid=$!
for _ in $(seq 6000); do
    [ "$(cat "$d/B/latest_checkpointed_iteration.txt" 2>/dev/null)" = 20 ] && break
    kill -0 $pid 2>/dev/null || break
    sleep 0.05
done
kill -9 $pid 2>/dev/null; wait $pid 2>/dev/null
at=$(cat "$d/B/latest_checkpointed_iteration.txt" 2>/dev/null || echo none)
train --save "$d/B" --load "$d/B" --save-interval 20 >"$d/B2.log" 2>"$d/B2.err"
if [ "$at" != none ] && [ -s "$d/B2.log" ] && diff <(after "$d/A.log" "$at") <(losses "$d/B2.log") >"$d/B.diff"; then
    t_pass "SIGKILL at iteration $at + resume: identical loss lines"
else t_fail "SIGKILL + resume" "checkpoint $at: $(head -c 600 "$d/B.diff") $(tail -2 "$d/B2.err")"; fi
diff <(grep -A1 'on validation set' "$d/A.log") <(grep -A1 'on validation set' "$d/B2.log") >/dev/null \
    && t_pass "resumed run: same final validation" || t_fail "resumed run: same final validation" "differs"

# 3. SIGTERM with --exit-signal-handler: save at the current iteration, exit 0, resume identically
# (signalled as its second iteration line comes out of the pipe: the whole run takes a tenth of a second)
# shellcheck disable=SC2086
(echo "$BASHPID" >"$d/C1.pid"; exec mt-train $model $sched --save "$d/C" --load "$d/C" --save-interval 1000 \
    --exit-signal-handler --log-interval 1) 2>"$d/C1.err" | {
    sent=
    while IFS= read -r l; do
        printf '%s\n' "$l"
        if [ -z "$sent" ] && [[ $l =~ \ iteration\ +2/ ]]; then kill -TERM "$(cat "$d/C1.pid")"; sent=1; fi
    done
} >"$d/C1.log"
rc=${PIPESTATUS[0]}
at=$(cat "$d/C/latest_checkpointed_iteration.txt" 2>/dev/null || echo none)
[ "$rc" = 0 ] && [ "$at" != none ] && grep -q 'SIGTERM' "$d/C1.err" && t_pass "SIGTERM: saved at $at, exit 0" \
    || t_fail "SIGTERM" "rc $rc, checkpoint $at: $(tail -2 "$d/C1.err")"
train --save "$d/C" --load "$d/C" >"$d/C2.log" 2>"$d/C2.err"
# the first line after a resume averages a partial interval (as in Megatron): compare from the next boundary
up=$(( (at + 4) / 5 * 5 ))
[ "$at" != none ] && diff <(after "$d/A.log" "$up") <(after "$d/C2.log" "$up") >/dev/null \
    && t_pass "SIGTERM resume: identical loss lines" || t_fail "SIGTERM resume" "$(tail -2 "$d/C2.err")"

# 4. --exit-interval 30: checkpoint at 30 and exit
train --save "$d/D" --exit-interval 30 >"$d/D.log" 2>"$d/D.err"
t_grep "--exit-interval saves at 30" '^30$' "$d/D/latest_checkpointed_iteration.txt"

# 5. a crash in the middle of a save leaves the previous checkpoint usable
MT_CKPT_CRASH_AFTER=1 train --save "$d/D" --load "$d/D" --train-iters 60 --save-interval 40 >"$d/D2.log" 2>"$d/D2.err"
rc=$?
t_grep "crash mid-save: tracker still 30" '^30$' "$d/D/latest_checkpointed_iteration.txt"
train --save "$d/D" --load "$d/D" >"$d/D3.log" 2>"$d/D3.err"
[ "$rc" != 0 ] && diff <(after "$d/A.log" 30) <(losses "$d/D3.log") >/dev/null \
    && t_pass "crash mid-save: resume from 30 identical" || t_fail "crash mid-save resume" "rc $rc $(tail -2 "$d/D3.err")"

# 6. --finetune: weights only, iteration 0; --no-load-optim: continues the iteration count
train --load "$d/A" --finetune --train-iters 5 --lr-warmup-iters 1 --log-interval 1 >"$d/F.log" 2>"$d/F.err"
t_grep "--finetune starts at iteration 1" 'iteration +1/ +5 \| consumed samples: +8 \|' "$d/F.log"
# a longer run changes the weight-decay steps (train iters x batch): Megatron wants a scheduler flag
train --load "$d/D" --no-load-optim --train-iters 65 --lr-decay-iters 60 --override-opt_param-scheduler --log-interval 1 \
    >"$d/G.log" 2>"$d/G.err"
t_grep "--no-load-optim resumes the count" 'iteration +61/ +65 \|' "$d/G.log"
train --load "$d/D" --train-iters 65 --log-interval 1 >"$d/G2.log" 2>"$d/G2.err"
t_grep "changed schedule without --override-opt_param-scheduler: error" 'decay steps \(480\) differs from this run.s \(520\)' "$d/G2.err"

# 7. TensorBoard events and the metrics file
PYTHONPATH=$T_TOP/tests/oracle $py - "$d/tb" "$d/metrics.jsonl" "$d/A.log" <<'EOF' && t_pass "TensorBoard and metrics agree with the log" || t_fail "TensorBoard/metrics" "see stderr"
import sys, os, json, glob, re
from tfevents import scalars as read_scalars
assert len(glob.glob(os.path.join(sys.argv[1], "events.out.tfevents.*"))) == 1
scalars = read_scalars(sys.argv[1])
for tag in ("lm loss", "learning-rate", "grad-norm", "lm loss validation"):
    assert tag in scalars, (tag, sorted(scalars))
assert len(scalars["lm loss"]) == 60
log = open(sys.argv[3]).read()
m = re.search(r"iteration +60/ +60 .*learning rate: (\S+) .*grad norm: (\S+) ", log)
assert abs(scalars["learning-rate"][60] - float(m.group(1))) <= 1e-6 * float(m.group(1)) + 1e-12, (scalars["learning-rate"][60], m.group(1))
assert abs(scalars["grad-norm"][60] - float(m.group(2))) < 2e-3
v = re.search(r"validation loss at iteration 20 \| lm loss value: (\S+)", log).group(1)
assert abs(scalars["lm loss validation"][20] - float(v)) < 1e-5 * float(v)
rows = [json.loads(l) for l in open(sys.argv[2])]
it = [r for r in rows if r.get("iteration") == 60 and "lm_loss" in r]
assert it, rows[-3:]
m = re.search(r"iteration +60/ +60 .*lm loss: (\S+) ", log)
assert abs(it[0]["lm_loss"] - float(m.group(1))) <= 1e-6 * float(m.group(1))
EOF

# 8. mt-eval reproduces mt-train's test evaluation (2 eval iterations x 2 micro-batches of 4)
want=$(grep 'on test set' "$d/A.log" | sed -E 's/.*lm loss value: ([^ ]+) .*/\1/')
mt-eval --load "$d/A" --eval-split test --eval-iters 4 --json >"$d/E.json" 2>"$d/E.err"
got=$($py -c 'import json,sys; print("%.6E" % json.load(open(sys.argv[1]))["loss"])' "$d/E.json" 2>/dev/null)
[ -n "$want" ] && [ "$want" = "$got" ] && t_pass "mt-eval test loss = mt-train's ($got)" \
    || t_fail "mt-eval test loss" "mt-train $want, mt-eval $got: $(cat "$d/E.err")"
mt-eval --load "$d/A" --eval-split valid >"$d/E2.log" 2>&1
t_grep "mt-eval validation block" '^ validation loss at valid set \| lm loss value: [0-9.E+-]+ \| lm loss PPL: [0-9.E+-]+ \| $' "$d/E2.log"
mt-eval --load "$d/A" --ckpt-step 20 --eval-split test --eval-iters 4 --json >"$d/E3.json" 2>"$d/E3.err"
cmp -s "$d/E.json" "$d/E3.json" && t_fail "mt-eval --ckpt-step" "iteration 20 scored like 60" || t_grep "mt-eval --ckpt-step 20" '"loss"' "$d/E3.json"

# 9. one-line errors, non-zero exit
err1() { "$@" >"$d/o" 2>"$d/e"; local rc=$?; [ $rc != 0 ] && [ "$(wc -l <"$d/e")" -le 2 ]; }
err1 train --num-query-groups 2 && t_grep "--num-query-groups without --group-query-attention refused" \
    "^mt-train: --num-query-groups goes with --group-query-attention" "$d/e" || t_fail "--num-query-groups refused" "$(cat "$d/e")"
# shellcheck disable=SC2086
err1 mt-train $model $sched --num-attention-heads 5 && t_grep "heads must divide hidden" 'num-attention-heads.*must divide.*hidden-size' "$d/e" || t_fail "heads/hidden" "$(cat "$d/e")"
err1 train --global-batch-size 6 && t_grep "gbs multiple of mbs" 'global-batch-size .6. must be a multiple' "$d/e" || t_fail "gbs/mbs" "$(cat "$d/e")"
err1 mt-train $(echo "$model" | sed 's/--hidden-size 32/--hidden-size 48/') $sched --load "$d/A" \
    && t_grep "other model's checkpoint" 'hidden-size 32, this run has --hidden-size 48' "$d/e" || t_fail "other model" "$(cat "$d/e")"
cp -r "$d/A" "$d/H" && rm "$d/H/iter_0000060/mp_rank_00/model.safetensors"
err1 train --load "$d/H" && t_grep "missing shard" 'iter_0000060/mp_rank_00/model.safetensors' "$d/e" || t_fail "missing shard" "$(cat "$d/e")"
err1 mt-train $(echo "$model" | sed 's/--vocab-size 60/--vocab-size 50/') $sched \
    && t_grep "token outside the vocabulary" 'data: token id [0-9]+ .*outside the vocabulary' "$d/e" || t_fail "vocab" "$(cat "$d/e")"
err1 train --lr-decay-style bogus && t_grep "bad choice" 'lr-decay-style: invalid choice' "$d/e" || t_fail "bad choice" "$(cat "$d/e")"
err1 train --ckpt-format torch_dist && t_grep "torch_dist rejected" 'ckpt-format torch_dist is not supported' "$d/e" || t_fail "torch_dist" "$(cat "$d/e")"
err1 mt-eval --load "$d/nothing" && t_grep "mt-eval without checkpoint" 'nothing' "$d/e" || t_fail "mt-eval missing" "$(cat "$d/e")"
