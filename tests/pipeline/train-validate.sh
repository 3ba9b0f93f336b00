#!/usr/bin/env bash
# train-validate.sh: mt-train refuses what would silently train, resume or save wrongly: a resume with
# another schedule, a --save that cannot be written, impossible optimizer values, a NaN loss or grad
# norm, NaN weights in a checkpoint, and out-of-range numbers in a checkpoint's meta.json (also where
# mt-eval reads the model's shape and the data order from its args).
. "$(dirname "$0")/../lib.sh"
py=/usr/bin/python3
d=$T_TMP

# 120 documents over ids 0..59 (NullTokenizer --vocab-size 60; end of document 60)
PYTHONPATH=$T_TOP/tests/oracle $py - "$d/data" <<'EOF'
import sys, numpy as np
from indexed_write import write_indexed
rs = np.random.RandomState(3)
write_indexed(sys.argv[1], [list(rs.randint(0, 60, rs.randint(20, 60))) + [60] for _ in range(120)])
EOF

export OMP_NUM_THREADS=2
# shellcheck disable=SC2086
train() {
    mt-train --num-layers 1 --hidden-size 16 --num-attention-heads 2 --seq-length 16 --max-position-embeddings 16 \
        --tokenizer-type NullTokenizer --vocab-size 60 --make-vocab-size-divisible-by 16 --micro-batch-size 2 \
        --global-batch-size 4 --lr 1e-3 --train-iters 10 --log-interval 1 --eval-iters 0 --split 98,1,1 \
        --seed 5 --data-path "$d/data" --data-cache-path "$d/cache" "$@"
}
# the learning rate printed for iteration N
lr_at() { grep -E "iteration +$2/" "$1" | sed -E 's/.*learning rate: ([^ ]+) .*/\1/'; }
# exit non-zero with a message of one line on stderr
err1() { "$@" >"$d/o" 2>"$d/e"; local rc=$?; [ $rc != 0 ] && [ "$(wc -l <"$d/e")" -eq 1 ]; }

# 1. resume with another schedule: every scheduler field is compared, as Megatron's _check_and_set does
train --lr-decay-style cosine >"$d/cos.log" 2>&1
train >"$d/lin.log" 2>&1
train --lr-decay-style cosine --save "$d/ck" --exit-interval 5 >"$d/ck.log" 2>&1
err1 train --load "$d/ck" && t_grep "resume with another decay style: error" \
    'learning rate decay style \(cosine\) differs from this run.s \(linear\); pass --override-opt_param-scheduler' "$d/e" \
    || t_fail "resume with another decay style: error" "$(cat "$d/o" "$d/e" | tail -3)"
err1 train --load "$d/ck" --lr-decay-style cosine --weight-decay 0.02 \
    && t_grep "resume with another weight decay: error" 'start weight decay \(0.01\) differs from this run.s \(0.02\)' "$d/e" \
    || t_fail "resume with another weight decay: error" "$(tail -2 "$d/e")"
err1 train --load "$d/ck" --lr-decay-style cosine --lr-warmup-init 1e-4 \
    && t_grep "resume with another warmup init: error" 'warmup initial learning rate' "$d/e" \
    || t_fail "resume with another warmup init: error" "$(tail -2 "$d/e")"
train --load "$d/ck" --use-checkpoint-opt_param-scheduler >"$d/use.log" 2>&1
want=$(lr_at "$d/cos.log" 6) got=$(lr_at "$d/use.log" 6)
[ -n "$want" ] && [ "$want" = "$got" ] && [ "$(lr_at "$d/lin.log" 6)" != "$want" ] \
    && t_pass "--use-checkpoint-opt_param-scheduler goes on with the checkpoint's cosine (lr $got)" \
    || t_fail "--use-checkpoint-opt_param-scheduler" "iteration 6: cosine $want, resumed $got"
train --load "$d/ck" --override-opt_param-scheduler >"$d/ovr.log" 2>&1
want=$(lr_at "$d/lin.log" 6) got=$(lr_at "$d/ovr.log" 6)
[ -n "$want" ] && [ "$want" = "$got" ] && t_pass "--override-opt_param-scheduler: this run's schedule from the saved step" \
    || t_fail "--override-opt_param-scheduler" "iteration 6: linear $want, resumed $got"

# 2. a --save that cannot be used fails at start, before any training
touch "$d/afile"
err1 train --save "$d/afile" && t_grep "--save a regular file: error at start" "--save: .*afile.*not a directory" "$d/e" \
    || t_fail "--save a regular file" "$(tail -2 "$d/e")"
grep -q 'iteration' "$d/o" && t_fail "--save checked before training" "$(grep -c iteration "$d/o") iteration lines" \
    || t_pass "--save checked before training"
err1 train --save "$d/afile/sub" && t_grep "--save under a regular file: error at start" "--save: .*afile" "$d/e" \
    || t_fail "--save under a regular file" "$(tail -2 "$d/e")"
# a directory this process cannot write in (root writes anywhere but in /proc)
ro=$d/ro
if [ "$(id -u)" = 0 ]; then ro=/proc; else mkdir "$ro" && chmod 555 "$ro"; fi
err1 train --save "$ro" && t_grep "--save not writable: error at start" "--save: $ro: cannot write there" "$d/e" \
    || t_fail "--save not writable" "$(tail -2 "$d/e")"
[ "$ro" = /proc ] || chmod 755 "$ro"
train --save "$d/new/deeper" --train-iters 1 >"$d/o" 2>"$d/e" && [ -s "$d/new/deeper/iter_0000001/mp_rank_00/meta.json" ] \
    && [ -z "$(ls "$d/new/deeper" | grep probe)" ] && t_pass "--save is created when missing, no probe left" \
    || t_fail "--save created" "$(tail -2 "$d/e")"

# 3. impossible optimizer values; a NaN loss or grad norm stops the run, and no NaN is ever saved
for bad in "--adam-beta1 1" "--adam-beta2 1" "--adam-eps 0"; do
    # shellcheck disable=SC2086
    err1 train $bad && t_grep "$bad rejected" "${bad%% *} .*must be" "$d/e" || t_fail "$bad rejected" "$(tail -2 "$d/e")"
done
err1 train --global-batch-size 10000 --lr-decay-iters 1000000000000000 \
    && t_grep "decay iterations x batch beyond 2^53 samples rejected" 'exceed 2\^53 samples' "$d/e" \
    || t_fail "decay iterations x batch beyond 2^53 samples" "$(tail -2 "$d/e")"
cp -r "$d/ck" "$d/nan"
$py - "$d/nan/iter_0000005/mp_rank_00/model.safetensors" <<'EOF'
import sys, json, struct
p = sys.argv[1]; b = bytearray(open(p, "rb").read())
n = struct.unpack("<Q", b[:8])[0]; h = json.loads(b[8:8 + n])
a, z = h["language_model.encoder.final_layernorm.weight"]["data_offsets"]
b[8 + n + a:8 + n + z] = struct.pack("<f", float("nan")) * ((z - a) // 4)
open(p, "wb").write(b)
EOF
train --load "$d/nan" --save "$d/nan" --lr-decay-style cosine >"$d/o" 2>"$d/e"; rc=$?
[ $rc != 0 ] && grep -q 'iteration 6: the lm loss is nan; stopping before the optimizer step' "$d/e" \
    && t_pass "a NaN loss stops the run (exit $rc)" || t_fail "a NaN loss stops the run" "rc $rc: $(tail -2 "$d/e")"
t_grep "no checkpoint after a NaN loss" '^5$' "$d/nan/latest_checkpointed_iteration.txt"
train --load "$d/nan" --save "$d/nan" --lr-decay-style cosine --no-check-for-nan-in-loss-and-grad >"$d/o" 2>"$d/e"; rc=$?
[ $rc != 0 ] && grep -q 'not saving iteration 10: language_model.encoder.final_layernorm.weight holds a non-finite value' "$d/e" \
    && grep -Eq 'number of nan iterations: +1 ' "$d/o" && t_pass "--no-check-for-nan-in-loss-and-grad skips, then refuses to save NaN" \
    || t_fail "--no-check-for-nan-in-loss-and-grad" "rc $rc: $(tail -2 "$d/e")"
t_grep "no NaN checkpoint with the check off" '^5$' "$d/nan/latest_checkpointed_iteration.txt"

# 6. numbers in meta.json are checked (type and range) before use, naming the file and the field
edit_meta() {   # edit_meta FIELD VALUE: a copy of ck in t whose FIELD (a.b) is the JSON VALUE
    rm -rf "$d/t" && cp -r "$d/ck" "$d/t"
    $py - "$d/t/iter_0000005/mp_rank_00/meta.json" "$1" "$2" <<'EOF'
import sys, json
p, field, value = sys.argv[1:]
m = json.load(open(p)); o = m; keys = field.split(".")
for k in keys[:-1]: o = o[k]
o[keys[-1]] = json.loads(value)
open(p, "w").write(json.dumps(m))
EOF
}
tamper() {   # tamper NAME FIELD VALUE PATTERN: mt-train --load with FIELD set to VALUE fails matching PATTERN
    edit_meta "$2" "$3"
    if err1 train --load "$d/t" --lr-decay-style cosine; then t_grep "$1" "$4" "$d/e"
    else t_fail "$1" "$(cat "$d/o" "$d/e" | tail -2)"; fi
}
m='iter_0000005/mp_rank_00/meta.json: '
tamper "optimizer.step -1" optimizer.step -1 "$m\"optimizer.step\" is -1, outside \[0, 5\]"
tamper "optimizer.step above the iteration" optimizer.step 6 "\"optimizer.step\" is 6, outside"
tamper "num_steps -5" opt_param_scheduler.num_steps -5 "$m\"opt_param_scheduler.num_steps\" is -5, outside \[0, 20\]"
tamper "num_steps 1e18" opt_param_scheduler.num_steps 1000000000000000000 "\"opt_param_scheduler.num_steps\" is 1000000000000000000, outside"
tamper "num_steps 1e300" opt_param_scheduler.num_steps 1e300 "\"opt_param_scheduler.num_steps\" is 1.0000000000000001e\+300, not an integer"
tamper "num_steps 2.5" opt_param_scheduler.num_steps 2.5 "\"opt_param_scheduler.num_steps\" is 2.5, not an integer"
tamper "lr_decay_steps 1e300" opt_param_scheduler.lr_decay_steps 1e300 "\"opt_param_scheduler.lr_decay_steps\" is 1.0000000000000001e\+300, not an integer"
tamper "lr_decay_steps 0" opt_param_scheduler.lr_decay_steps 0 "\"opt_param_scheduler.lr_decay_steps\" is 0, outside"
tamper "max_lr a string" opt_param_scheduler.max_lr '"x"' "\"opt_param_scheduler.max_lr\" is not a number"
tamper "min_lr negative" opt_param_scheduler.min_lr -1 "\"opt_param_scheduler.min_lr\" is -1, outside"
tamper "unknown decay style" opt_param_scheduler.lr_decay_style '"bogus"' "\"opt_param_scheduler.lr_decay_style\" is not a known style"
tamper "iteration missing" iteration null "\"iteration\" is not an integer"
tamper "consumed_train_samples -8" consumed_train_samples -8 "\"consumed_train_samples\" is -8, outside"
tamper "consumed_valid_samples -1" consumed_valid_samples -1 "\"consumed_valid_samples\" is -1, outside"
tamper "flops negative" num_floating_point_operations_so_far -1 "\"num_floating_point_operations_so_far\" is -1, outside"

# 7. mt-eval opens the model the same way: the args it reads (model sizes, seed, surplus, ...) are
# checked for type and against the range of their mt-train flag, naming the file and the field
evaluate() { mt-eval --load "$d/t" --eval-split train --eval-iters 1; }
edit_meta iteration 5
evaluate >"$d/o" 2>"$d/e" && t_grep "mt-eval of the untouched checkpoint" 'lm loss value' "$d/o" \
    || t_fail "mt-eval of the untouched checkpoint" "$(tail -2 "$d/e")"
tamper_eval() {   # as tamper, for mt-eval
    edit_meta "$2" "$3"
    if err1 evaluate; then t_grep "mt-eval: $1" "$4" "$d/e"
    else t_fail "mt-eval: $1" "$(cat "$d/o" "$d/e" | tail -2)"; fi
}
tamper_eval "num-layers 0" args.num-layers 0 "$m\"args.num-layers\" is 0, outside \[1, 100000\]"
tamper_eval "hidden-size 1e300" args.hidden-size 1e300 "$m\"args.hidden-size\" is 1.0000000000000001e\+300, not an integer"
tamper_eval "micro-batch-size 2.5" args.micro-batch-size 2.5 "\"args.micro-batch-size\" is 2.5, not an integer"
tamper_eval "num-attention-heads missing" args.num-attention-heads null "\"args.num-attention-heads\" is not an integer"
tamper_eval "seed -1" args.seed -1 "$m\"args.seed\" is -1, outside \[0, 4294967295\]"
tamper_eval "seed a string" args.seed '"x"' "\"args.seed\" is not an integer"
tamper_eval "surplus negative" args.mid-level-dataset-surplus -1 "\"args.mid-level-dataset-surplus\" is -1, outside"
tamper_eval "norm-epsilon a string" args.norm-epsilon '"x"' "\"args.norm-epsilon\" is not a number"
tamper_eval "vocab-size 0" args.vocab-size 0 "\"args.vocab-size\" is 0, outside"

# mt-eval of a checkpoint trained on a blend of two datasets (weighted, and whole epochs): the test split
# and the whole dataset evaluate (they asked a weighted blend for -1 samples, or allocated 2^64 bytes for
# the unweighted one); the whole of two copies of the data is twice one copy's samples
cp "$d/data.bin" "$d/twin.bin"; cp "$d/data.idx" "$d/twin.idx"
for blend in "0.3 $d/data 0.7 $d/twin" "$d/data $d/twin"; do
    rm -rf "$d/bl"
    if ! train --train-iters 2 --data-path $blend --save "$d/bl" >"$d/bl.log" 2>&1; then t_fail "train on a blend ($blend)" "$(tail -2 "$d/bl.log")"; continue; fi
    # (micro-batches of one: every sample of the split counts)
    mt-eval --load "$d/bl" --eval-split test --json >"$d/bt.json" 2>"$d/bt.err" &&
        mt-eval --load "$d/bl" --eval-split all --micro-batch-size 1 --json >"$d/ba.json" 2>"$d/ba.err" &&
        mt-eval --load "$d/bl" --eval-split all --micro-batch-size 1 --data-path "$d/data" --json >"$d/b1.json" 2>"$d/b1.err"
    if $py - "$d/bt.json" "$d/ba.json" "$d/b1.json" >"$d/bc" 2>&1 <<'PYEOF'
import json, sys
t, a, one = (json.load(open(p)) for p in sys.argv[1:])
assert t["samples"] > 0 and a["samples"] == 2 * one["samples"], (t, a, one)
print("%d samples of the whole blend" % a["samples"])
PYEOF
    then t_pass "mt-eval of a checkpoint trained on the blend $(echo "$blend" | sed "s|$d/||g"): test split and whole data ($(cat "$d/bc"))"
    else t_fail "mt-eval of a blend-trained checkpoint ($blend)" "$(tail -1 "$d/bt.err" "$d/ba.err" "$d/b1.err" "$d/bc" 2>/dev/null | head -c 400)"; fi
done
t_cleanup
