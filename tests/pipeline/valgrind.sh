#!/usr/bin/env bash
# valgrind.sh: mt-train (save, exit, resume with --load), mt-eval (split mode and --score), mt-generate's
# input errors and mt-serve (requests of each kind, a client gone mid-stream, SIGTERM) under valgrind's
# memcheck on a tiny model: no invalid reads or writes, no uses of uninitialized values and no definite or
# indirect leaks. Blocks "possibly lost" in a thread pool's stacks are not errors here.
# Skipped when valgrind is not installed, and for sanitizer builds (make asan).
. "$(dirname "$0")/../lib.sh"
py=/usr/bin/python3
d=$T_TMP
if ! command -v valgrind >/dev/null 2>&1; then t_skip "memcheck" "valgrind is not installed"; exit 0; fi
# memcheck cannot run sanitizer builds (make asan checks those itself)
if ldd "$(command -v mt-train)" 2>/dev/null | grep -q 'libasan\|libtsan\|libubsan'; then
    t_skip "memcheck" "the programs under test are built with a sanitizer"; exit 0
fi

# memcheck reads the symbols of every library a program links when it starts it: with the CUDA libraries
# (cuBLAS, cuBLASLt, NCCL: over 0.6 GB) that is 20 s a run, most of this file's time. The programs run on
# the cpu backend here, so they are linked once more without the CUDA backends (the same host objects, no
# CUDA libraries; make builds them into $MT_BUILD/vg/ with the tests, and compiles only the two sources
# that differ) and run from there. A failed build is a failure.
b=${MT_BUILD:-build}
vgb=$T_TOP/$b/vg
if ! make -s -C "$T_TOP" B="$b" "$b/vg/bin/mt-train" "$b/vg/bin/mt-eval" "$b/vg/bin/mt-generate" "$b/vg/bin/mt-serve" \
        >"$d/build.out" 2>&1; then
    t_fail "the programs without the CUDA backends" "$(tail -5 "$d/build.out")"; exit 0
fi
if ldd "$vgb/bin/mt-train" | grep -q 'libcu\|libnccl'; then t_fail "the build for memcheck links no CUDA library" "$(ldd "$vgb/bin/mt-train" | grep 'libcu\|libnccl')"; fi
PATH=$vgb/bin:$PATH
# One thread: OpenMP and OpenBLAS start no pools, and memcheck runs the programs as they run in tests.
export OMP_NUM_THREADS=1
vg() { valgrind -q --error-exitcode=97 --leak-check=full --errors-for-leak-kinds=definite,indirect "$@"; }
check() {   # NAME LOG: the command ran (exit status in $rc) and memcheck reported nothing
    if [ "$rc" = 0 ] && ! grep -q '^==[0-9]*==' "$2"; then t_pass "$1"
    else t_fail "$1" "exit $rc: $(grep -m 12 -E '^==[0-9]+== +(at|by|Invalid|Conditional|[0-9,]+ bytes)|^[a-z-]+: ' "$2" | tr '\n' ' ' | head -c 900)"; fi
}

# A NullTokenizer dataset (ids 0..59, end of document 60): 120 short documents.
PYTHONPATH=$T_TOP/tests/oracle $py - "$d/data" <<'EOF'
import sys, numpy as np
from indexed_write import write_indexed
rs = np.random.RandomState(3)
docs = [list(rs.randint(0, 60, rs.randint(8, 40))) + [60] for _ in range(120)]
write_indexed(sys.argv[1], docs)
EOF

model="--num-layers 1 --hidden-size 16 --num-attention-heads 2 --seq-length 16 --max-position-embeddings 16
       --tokenizer-type NullTokenizer --vocab-size 60 --make-vocab-size-divisible-by 16"
sched="--micro-batch-size 2 --global-batch-size 4 --train-iters 4 --lr 1e-3 --lr-warmup-iters 1
       --lr-decay-style cosine --log-interval 1 --eval-interval 2 --eval-iters 1 --split 80,10,10 --seed 5
       --data-path $d/data --data-cache-path $d/cache"

# shellcheck disable=SC2086
vg mt-train $model $sched --save "$d/ck" --exit-interval 2 --tensorboard-dir "$d/tb" --metrics-file "$d/m.jsonl" \
    >"$d/t1.out" 2>"$d/t1.err"; rc=$?
check "mt-train: 2 iterations, checkpoint, --exit-interval" "$d/t1.err"
# shellcheck disable=SC2086
vg mt-train $model $sched --save "$d/ck" --load "$d/ck" --tensorboard-dir "$d/tb" --metrics-file "$d/m.jsonl" \
    >"$d/t2.out" 2>"$d/t2.err"; rc=$?
check "mt-train --load: resume to iteration 4, final validation and test" "$d/t2.err"
t_grep "resumed run reached iteration 4" '^4$' "$d/ck/latest_checkpointed_iteration.txt"

vg mt-eval --load "$d/ck" --eval-split valid --eval-iters 2 >"$d/e1.out" 2>"$d/e1.err"; rc=$?
check "mt-eval split mode" "$d/e1.err"
vg mt-eval --load "$d/ck" --ckpt-step 2 --eval-split test --eval-iters 1 --json >"$d/e2.out" 2>"$d/e2.err"; rc=$?
check "mt-eval --ckpt-step --json" "$d/e2.err"

# --score needs a GPT-2-vocabulary checkpoint: trained without valgrind (one iteration), scored under it.
$py - >"$d/docs.jsonl" <<'EOF'
import json
for i in range(24):
    print(json.dumps({"text": "def f%d(x):\n    return x * %d  # caf\u00e9\n" % (i, i)}))
EOF
mt-tokenize --vocab-file "$GPT2_VOCAB" --merge-file "$GPT2_MERGES" --append-eod --input "$d/docs.jsonl" \
    | mt-index --output-prefix "$d/gpt" 2>/dev/null
# shellcheck disable=SC2086
mt-train $(echo "$model" | sed 's/--tokenizer-type NullTokenizer --vocab-size 60 --make-vocab-size-divisible-by 16//') \
    --vocab-file "$GPT2_VOCAB" --merge-file "$GPT2_MERGES" --micro-batch-size 1 --train-iters 1 --lr 1e-3 \
    --eval-iters 0 --split 80,10,10 --data-path "$d/gpt_text_document" --data-cache-path "$d/cache" --save "$d/gck" \
    >"$d/g.out" 2>"$d/g.err" || t_fail "GPT-2 vocabulary checkpoint" "$(tail -2 "$d/g.err")"
$py - >"$d/score.jsonl" <<'EOF'
import json
print(json.dumps({"text": "x = 1"}))
print(json.dumps({"text": "def g(a, b):\n    return [a + i for i in range(b)]\n" * 3}))
print(json.dumps({"text": "na\u00efve r\u00e9sum\u00e9 \u2713 \u65e5\u672c"}))
print(json.dumps({"text": ""}))
EOF
# the errors of --json-keys: a field that is not a string, a missing key, a line that is not JSON; each
# exits 1 with a one-line message and leaves nothing allocated
for bad in '{"q": 5}' '{"p": "x"}' '[1, 2]'; do
    printf '%s\n' '{"q": "def f(x):"}' "$bad" | vg mt-generate --load "$d/gck" --greedy --max-new-tokens 1 --json-keys q \
        >"$d/jk.out" 2>"$d/jk.err"; rc=$?
    if [ $rc = 1 ] && [ "$(grep -vc '^==' "$d/jk.err")" = 1 ] && ! grep -q '^==[0-9]*==' "$d/jk.err"; then
        t_pass "mt-generate --json-keys, line 2 $bad: one-line error, nothing leaked"
    else t_fail "mt-generate --json-keys, line 2 $bad" "exit $rc: $(grep -m 8 -E '^==[0-9]+== +(at|by|[0-9,]+ bytes)|^mt-' "$d/jk.err" | tr '\n' ' ' | head -c 900)"; fi
done
vg mt-eval --load "$d/gck" --score <"$d/score.jsonl" >"$d/s.out" 2>"$d/s.err"; rc=$?
check "mt-eval --score (windows, non-ASCII, empty document)" "$d/s.err"
[ "$(grep -c '"logprob"' "$d/s.out")" = 4 ] && t_pass "--score: one line per document" \
    || t_fail "--score: one line per document" "$(cat "$d/s.out")"

# mt-serve: a greedy request, a seeded one of n 2 with logprobs, a stream, bad requests, PUT /api (with
# the prompts' log-probabilities), three requests at once, /metrics, a stream whose
# client goes after its first chunks, then SIGTERM: no memcheck error and nothing leaked (the jobs, their
# streams, the connections, the queue); the threads of the server run under memcheck too
if command -v curl >/dev/null; then
    # --fair-sched: memcheck runs one thread at a time, and without it the engine's thread keeps the CPU while
    # a connection's thread waits to send (a stream's first chunks reached the client seconds late)
    (exec valgrind -q --fair-sched=yes --error-exitcode=97 --leak-check=full --errors-for-leak-kinds=definite,indirect \
        mt-serve --load "$d/gck" --port 0 --max-batch-size 1 2>"$d/sv.err") &
    svp=$!   # valgrind itself, which the signal must reach
    if t_wait_line "$d/sv.err" 'on http://127.0.0.1:[0-9]' 1200; then
        u=http://127.0.0.1:$(sed -n 's|.* on http://127.0.0.1:\([0-9][0-9]*\)$|\1|p' "$d/sv.err" | head -1)/v1/completions
        {
            curl -s --max-time 300 "$u" -d '{"prompt": "def f(x):", "max_tokens": 4, "temperature": 0}'
            curl -s --max-time 300 "$u" -d '{"prompt": ["x = 1"], "max_tokens": 3, "n": 2, "seed": 3, "logprobs": 0, "stop": ["\n"]}'
            curl -s --max-time 300 "$u" -d '{"prompt": [[87, 796]], "max_tokens": 4, "temperature": 0, "stream": true, "echo": true}'
            curl -s --max-time 300 "$u" -d '{"prompt": "x", "bogus": 1}'
            curl -s --max-time 300 "$u" -d '{"prompt": '
            # Megatron's PUT /api: generating with the prompts' log-probabilities, and scoring only
            curl -s --max-time 300 -X PUT "${u%/v1/completions}/api" -d '{"prompts": ["x = 1", ""], "tokens_to_generate": 3,
                "logprobs": true, "add_BOS": true, "stop_on_eol": true}'
            curl -s --max-time 300 -X PUT "${u%/v1/completions}/api" -d '{"prompts": ["x = 1"], "tokens_to_generate": 0, "logprobs": true}'
            # three at once (they queue)
            cps=()
            for k in 1 2 3; do
                curl -s --max-time 300 "$u" -d '{"prompt": "y = '$k'", "max_tokens": 3}' >"$d/sv$k.out" &
                cps+=($!)
            done
            wait "${cps[@]}"   # (not the server)
            cat "$d/sv1.out" "$d/sv2.out" "$d/sv3.out"
            curl -s --max-time 300 "${u%/v1/completions}/metrics"
        } >"$d/sv.out"
        # 4 x 15 sampled tokens, one sequence at a time: it runs for seconds after its client has gone
        curl -sN --max-time 300 "$u" -d '{"prompt": "x", "max_tokens": 15, "n": 4, "seed": 1, "stream": true}' \
            | head -c 250 >/dev/null
        t_wait_line "$d/sv.err" 'the client has gone' 1200 || t_fail "mt-serve under memcheck: a client gone" "$(tail -3 "$d/sv.err")"
        [ "$(grep -o '"text_completion"' "$d/sv.out" | wc -l)" -ge 6 ] && grep -q '"param":"bogus"' "$d/sv.out" \
            && [ "$(grep -o '"segments"' "$d/sv.out" | wc -l)" = 2 ] && grep -q 'mt_serve_generation_tokens_total [1-9]' "$d/sv.out" \
            && t_pass "mt-serve under memcheck: the answers" || t_fail "mt-serve under memcheck: the answers" "$(head -c 600 "$d/sv.out")"
    else t_fail "mt-serve under memcheck starts" "$(tail -3 "$d/sv.err")"; fi
    kill -TERM $svp
    wait $svp; rc=$?
    check "mt-serve: requests of each kind, a client gone, SIGTERM" "$d/sv.err"
else t_skip "mt-serve under memcheck" "curl is not installed"; fi
