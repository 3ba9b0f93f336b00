#!/usr/bin/env bash
# generate.sh: mt-generate on a tiny GPT-2-vocabulary model. Greedy continuations (batched and not) equal
# token for token those of an independent float64 reference that recomputes the whole sequence at every
# step (tests/oracle/generate_ref.py over tests/oracle/gpt_torch.py, reading model.safetensors itself,
# from the prompt ids mt-generate reports), with log-probabilities to 1e-4; greedy's choice on the device
# equals the host sampler's bit for bit (cpu); the streamed text equals the
# --json text; seeded sampling repeats and another seed differs; --stop ends a continuation before the
# stop string; the repetition penalty of one prompt does not reach another; bad input is a one-line error
# (after the continuations of the prompts before it); prompts written into an open input (a FIFO, a
# pseudo-terminal) are answered at once, whatever --batch-size.
. "$(dirname "$0")/../lib.sh"
PY=/usr/bin/python3
d=$T_TMP
export OMP_NUM_THREADS=2

$PY - >"$d/train.jsonl" <<'PYEOF'
import json
for i in range(80):
    print(json.dumps({"text": "def f%d(x, y=%d):\n    return x * y + %d\n" % (i, i % 7, i * i)}))
PYEOF
mt-tokenize --vocab-file "$GPT2_VOCAB" --merge-file "$GPT2_MERGES" --append-eod --input "$d/train.jsonl" \
    | mt-index --output-prefix "$d/data" 2>"$d/index.err" || { t_fail "dataset" "$(cat "$d/index.err")"; exit 0; }
if mt-train --num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 32 --max-position-embeddings 48 \
        --micro-batch-size 4 --global-batch-size 8 --train-iters 30 --lr 1e-2 --log-interval 10 --eval-iters 0 \
        --init-method-std 0.1 --split 100,0,0 --seed 3 --vocab-file "$GPT2_VOCAB" --merge-file "$GPT2_MERGES" \
        --data-path "$d/data_text_document" --data-cache-path "$d/cache" --save "$d/ck" >"$d/train.log" 2>"$d/train.err"
then t_pass "tiny GPT-2-vocabulary model trained"
else t_fail "tiny GPT-2-vocabulary model trained" "$(tail -2 "$d/train.err")"; exit 0; fi
gen() { mt-generate --load "$d/ck" "$@"; }
err1() { "$@" >"$d/o" 2>"$d/e"; local rc=$?; [ $rc != 0 ] && [ "$(wc -l <"$d/e")" -eq 1 ]; }

# 1. greedy against the reference; the two prompts of equal length run as one batch, and alone
prompts=("def f3(x" "def f4(y" "import os" "x = 1" "y = 2")   # lengths 5 5 2 3 3: two batches of two
gen --greedy --max-new-tokens 20 --json "${prompts[@]}" >"$d/greedy.jsonl" 2>"$d/g.err" \
    && t_pass "greedy --json ran" || t_fail "greedy --json ran" "$(cat "$d/g.err")"
gen --greedy --max-new-tokens 20 --json --batch-size 1 "${prompts[@]}" >"$d/greedy1.jsonl" 2>/dev/null
# the same tokens; log-probabilities to rounding (a batch's products are blocked otherwise)
$PY -c 'import json, sys
a = [json.loads(l) for l in open(sys.argv[1])]; b = [json.loads(l) for l in open(sys.argv[2])]
ok = len(a) == len(b) == 5 and all(x["tokens"] == y["tokens"] and x["text"] == y["text"] and
     max(abs(p - q) for p, q in zip(x["logprobs"], y["logprobs"])) < 1e-5 for x, y in zip(a, b))
sys.exit(not ok)' "$d/greedy1.jsonl" "$d/greedy.jsonl" && t_pass "batched prompts give the unbatched continuations" \
    || t_fail "batched prompts give the unbatched continuations" "differ"
# greedy decoding chooses on the device (mtk_greedy) unless MT_GREEDY_ON_HOST=1 asks for the host's sampler:
# on the cpu backend the same tokens and log-probabilities, bit for bit
MT_GREEDY_ON_HOST=1 gen --greedy --max-new-tokens 20 --json "${prompts[@]}" >"$d/greedy-host.jsonl" 2>/dev/null
if [ -s "$d/greedy-host.jsonl" ] && cmp -s "$d/greedy.jsonl" "$d/greedy-host.jsonl"; then
    t_pass "greedy chosen on the device: the host sampler's output, bit for bit"
else t_fail "greedy chosen on the device" "differs from MT_GREEDY_ON_HOST=1's: $(diff "$d/greedy.jsonl" "$d/greedy-host.jsonl" | head -c 300)"; fi
if $PY -c 'import torch, numpy' 2>/dev/null; then
    $PY -c 'import json, sys
for l in open(sys.argv[1]):
    r = json.loads(l); print(json.dumps({"ids": r["prompt_ids"], "n": len(r["tokens"])}))' "$d/greedy.jsonl" \
        | PYTHONPATH=$T_TOP/tests/oracle $PY "$T_TOP/tests/oracle/generate_ref.py" "$d/ck/iter_0000030/mp_rank_00" 50257 \
        >"$d/ref.jsonl" 2>"$d/ref.err"
    if $PY - "$d/greedy.jsonl" "$d/ref.jsonl" >"$d/cmp.txt" 2>&1 <<'PYEOF'
import json, sys
got = [json.loads(l) for l in open(sys.argv[1])]
ref = [json.loads(l) for l in open(sys.argv[2])]
assert len(got) == len(ref) == 5, (len(got), len(ref))
worst = 0
for g, r in zip(got, ref):
    assert len(g["tokens"]) == 20 and g["stop"] == "length", g
    assert g["tokens"] == r["tokens"], (g["prompt"], g["tokens"], r["tokens"])
    worst = max([worst] + [abs(a - b) for a, b in zip(g["logprobs"], r["logprobs"])])
assert worst < 1e-4, worst
print("largest log-probability difference %.2g" % worst)
PYEOF
    then t_pass "greedy equals the float64 reference token for token ($(cat "$d/cmp.txt"))"
    else t_fail "greedy equals the float64 reference token for token" "$(tail -3 "$d/cmp.txt") $(tail -2 "$d/ref.err")"; fi
else
    t_skip "greedy against the reference" "Debian's python3-torch is not installed"
fi

# 2. streamed text is the --json text, one line per prompt; prompts from stdin and from JSON lines
gen --greedy --max-new-tokens 20 "${prompts[@]}" >"$d/plain.txt" 2>/dev/null
$PY -c 'import json, sys
[sys.stdout.write(json.loads(l)["text"] + "\n") for l in open(sys.argv[1])]' "$d/greedy.jsonl" >"$d/want.txt"
t_cmp "streamed text equals the --json text" "$d/want.txt" "$d/plain.txt"
printf '%s\n' "${prompts[@]}" | gen --greedy --max-new-tokens 20 >"$d/stdin.txt" 2>/dev/null
t_cmp "prompts from stdin lines" "$d/want.txt" "$d/stdin.txt"
printf '{"q": "%s"}\n' "${prompts[@]}" | gen --greedy --max-new-tokens 20 --json-keys q >"$d/jk.txt" 2>/dev/null
t_cmp "prompts from JSON lines (--json-keys)" "$d/want.txt" "$d/jk.txt"
# a prompt is all of its bytes: a NUL from JSON's \u0000 does not cut it; --json stays valid JSON for a
# prompt of invalid UTF-8 (U+FFFD in "prompt", as the tokenizer reads it)
printf '{"text": "a\\u0000bcdefgh"}\n' | gen --greedy --max-new-tokens 2 --json --json-keys text >"$d/nul.jsonl" 2>"$d/nul.err"
printf 'caf\xe9 au lait\n' | gen --greedy --max-new-tokens 2 --json >"$d/bad8.jsonl" 2>"$d/bad8.err"
if $PY -c 'import json, sys
a = json.loads(open(sys.argv[1], encoding="utf-8", errors="strict").read())
assert a["prompt"] == "a\x00bcdefgh" and len(a["prompt_ids"]) >= 3, a
b = json.loads(open(sys.argv[2], encoding="utf-8", errors="strict").read())
assert b["prompt"] == "caf\ufffd au lait", b["prompt"]' "$d/nul.jsonl" "$d/bad8.jsonl" 2>"$d/pj.err"
then t_pass "a NUL inside a prompt keeps the rest; --json is valid JSON for a prompt of invalid UTF-8"
else t_fail "NUL and invalid UTF-8 prompts" "$(tail -1 "$d/pj.err") $(cat "$d/nul.err" "$d/bad8.err" | head -c 200)"; fi

# 3. seeded sampling repeats; another seed, or no top-k, differs
s1=$(gen --seed 5 --top-k 40 --top-p 0.95 --temperature 1.2 --max-new-tokens 24 --json "${prompts[@]}" 2>/dev/null)
s2=$(gen --seed 5 --top-k 40 --top-p 0.95 --temperature 1.2 --max-new-tokens 24 --json "${prompts[@]}" 2>/dev/null)
s3=$(gen --seed 6 --top-k 40 --top-p 0.95 --temperature 1.2 --max-new-tokens 24 --json "${prompts[@]}" 2>/dev/null)
[ -n "$s1" ] && [ "$s1" = "$s2" ] && t_pass "seeded sampling repeats" || t_fail "seeded sampling repeats" "differs"
[ "$s1" != "$s3" ] && t_pass "another seed samples otherwise" || t_fail "another seed samples otherwise" "same"
# sampling does not depend on the batching: each prompt draws from its own stream (--seed + its place)
gen --seed 5 --top-k 40 --temperature 1.2 --max-new-tokens 24 --json "${prompts[@]}" >"$d/sb.jsonl" 2>/dev/null
gen --seed 5 --top-k 40 --temperature 1.2 --max-new-tokens 24 --json --batch-size 1 "${prompts[@]}" >"$d/s1.jsonl" 2>/dev/null
$PY -c 'import json, sys
a = [json.loads(l) for l in open(sys.argv[1])]; b = [json.loads(l) for l in open(sys.argv[2])]
sys.exit(not (len(a) == len(b) == 5 and all(x["tokens"] == y["tokens"] for x, y in zip(a, b))))' "$d/sb.jsonl" "$d/s1.jsonl" &&
    t_pass "sampled continuations do not depend on --batch-size" || t_fail "sampled continuations do not depend on --batch-size" "differ"
# top-k 1 is greedy whatever the temperature
gen --top-k 1 --temperature 3 --max-new-tokens 20 --json "${prompts[@]}" >"$d/k1.jsonl" 2>/dev/null
$PY -c 'import json, sys
a = [json.loads(l)["tokens"] for l in open(sys.argv[1])]; b = [json.loads(l)["tokens"] for l in open(sys.argv[2])]
sys.exit(a != b)' "$d/k1.jsonl" "$d/greedy.jsonl" && t_pass "--top-k 1 is greedy" || t_fail "--top-k 1 is greedy" "differs"

# 4. --stop: the continuation ends before the stop string
stopstr=$($PY -c 'import json, sys; t = json.loads(open(sys.argv[1]).readline())["text"]; print(t[6:9])' "$d/greedy.jsonl")
gen --greedy --max-new-tokens 20 --json --stop "$stopstr" "${prompts[0]}" >"$d/stop.jsonl" 2>/dev/null
$PY - "$d/stop.jsonl" "$d/greedy.jsonl" "$stopstr" <<'PYEOF' && t_pass "--stop ends before the stop string" || t_fail "--stop ends before the stop string" "$(cat "$d/stop.jsonl")"
import json, sys
s, g, stop = json.loads(open(sys.argv[1]).readline()), json.loads(open(sys.argv[2]).readline()), sys.argv[3]
full = g["text"]
assert s["stop"] == "stop" and s["text"] == full[:full.index(stop)], (s, stop)
PYEOF

# 5. bad input: one line, non-zero exit
long=$($PY -c 'print(" ".join(["x"] * 60))')
err1 gen --greedy "$long" && t_grep "prompt longer than the context" 'leave no room in the model.s 48 positions' "$d/e" \
    || t_fail "prompt longer than the context" "$(cat "$d/e")"
err1 gen --temperature -1 "x" && t_pass "negative temperature refused" || t_fail "negative temperature refused" "$(cat "$d/e")"
err1 mt-generate "x" && t_grep "--load required" 'load is required' "$d/e" || t_fail "--load required" "$(cat "$d/e")"
err1 gen --load "$d/nowhere" "x" && t_pass "missing checkpoint: one line" || t_fail "missing checkpoint: one line" "$(cat "$d/e")"

# a line filter: each prompt's continuation comes out before the next line is written (standard input
# still open), and an endless input is generated line by line, not read whole first
mkfifo "$d/fifo"
gen --greedy --max-new-tokens 3 --batch-size 1 --json <"$d/fifo" >"$d/filter.out" 2>"$d/filter.err" &
gp=$!
exec 7>"$d/fifo"
echo "def f3(x" >&7
if t_wait_line "$d/filter.out" .; then
    echo "import os" >&7
    for _ in $(seq 3000); do [ "$(wc -l <"$d/filter.out")" -ge 2 ] && break; sleep 0.1; done
    [ "$(wc -l <"$d/filter.out")" = 2 ] \
        && t_pass "a line filter: each continuation before the next prompt is written" \
        || t_fail "a line filter: the second continuation" "$(cat "$d/filter.out" "$d/filter.err")"
else t_fail "a line filter: the first continuation before the input ends" "$(cat "$d/filter.out" "$d/filter.err")"; fi
exec 7>&-
wait $gp
# a prompt written into an input that stays open is answered at once whatever --batch-size: a batch is
# formed from the whole lines already there (two written together are one batch), never waiting for more;
# the first line is shorter than the zstd magic the reader looks for
mkfifo "$d/fifo8"
gen --greedy --max-new-tokens 3 --batch-size 8 --timing --json <"$d/fifo8" >"$d/i8.out" 2>"$d/i8.err" &
gp=$!
exec 8>"$d/fifo8"
echo "os" >&8
if t_wait_line "$d/i8.out" . 1200; then
    t_pass "--batch-size 8: a line is answered while the input stays open"
    # one write(2) of both lines (bash's printf builtin writes each line to a pipe on its own, and mt-generate then
    # rightly starts a batch from the first before the second arrives): cat of a file that holds them
    printf 'def f3(x\ndef f4(y\n' >"$d/two-lines"
    cat "$d/two-lines" >&8
    for _ in $(seq 1200); do [ "$(wc -l <"$d/i8.out")" -ge 3 ] && break; sleep 0.1; done
    [ "$(wc -l <"$d/i8.out")" = 3 ] && grep -q 'batch of 1 x 1 prompt' "$d/i8.err" && grep -q 'batch of 2 x 5 prompt' "$d/i8.err" \
        && t_pass "--batch-size 8: two lines that came together are answered as one batch, the input still open" \
        || t_fail "--batch-size 8: two lines that came together" "$(cat "$d/i8.out" "$d/i8.err")"
else t_fail "--batch-size 8: a line answered while the input stays open" "nothing in 120 s: $(cat "$d/i8.err")"; fi
exec 8>&-
wait $gp && t_pass "--batch-size 8 on an open input: exit 0 at its end" || t_fail "--batch-size 8 on an open input: exit status" "$(cat "$d/i8.err")"
# at a terminal (a pseudo-terminal as standard input, held open): a typed line is answered
if $PY - "$d" >"$d/pty.txt" 2>&1 <<'PYEOF'
import os, subprocess, sys, time
d = sys.argv[1]
master, slave = os.openpty()
out = open(d + "/pty.out", "wb")
p = subprocess.Popen(["mt-generate", "--load", d + "/ck", "--greedy", "--max-new-tokens", "3", "--batch-size", "8", "--json"],
                     stdin=slave, stdout=out, stderr=subprocess.PIPE)
os.write(master, b"x = 1\n")
end = time.time() + 120
while time.time() < end and not open(d + "/pty.out", "rb").read().endswith(b"\n"):
    time.sleep(0.1)
got = open(d + "/pty.out", "rb").read()
alive = p.poll() is None
os.write(master, b"\x04")   # end of input (^D on an empty line)
try:
    rc = p.wait(60)
except subprocess.TimeoutExpired:
    p.kill(); rc = "killed"
err = p.stderr.read().decode(errors="replace")
assert got.count(b"\n") == 1 and alive, (got, alive, err)
assert rc == 0, (rc, err)
PYEOF
then t_pass "a line typed on a terminal is answered while it stays open, --batch-size 8"
else t_fail "a line typed on a terminal is answered" "$(cat "$d/pty.txt")"; fi
n=$(yes "x = 1" | timeout 60 mt-generate --load "$d/ck" --greedy --max-new-tokens 1 2>/dev/null | head -n 40 | wc -l)
[ "$n" = 40 ] && t_pass "yes | mt-generate: continuations come while the input goes on" \
    || t_fail "yes | mt-generate: continuations while the input goes on" "$n lines in 60 s"
# the repetition penalty counts each prompt's own continuation only: the prompts together (batches of two
# and alone) give what each gives in a run of its own
gen --greedy --repetition-penalty 3 --max-new-tokens 20 --json "${prompts[@]}" >"$d/rp.jsonl" 2>"$d/rp.err"
for p in "${prompts[@]}"; do gen --greedy --repetition-penalty 3 --max-new-tokens 20 --json "$p"; done >"$d/rp1.jsonl" 2>>"$d/rp.err"
$PY -c 'import json, sys
a = [json.loads(l)["tokens"] for l in open(sys.argv[1])]; b = [json.loads(l)["tokens"] for l in open(sys.argv[2])]
g = [json.loads(l)["tokens"] for l in open(sys.argv[3])]
sys.exit(not (len(a) == len(b) == 5 and a == b and a != g))' "$d/rp.jsonl" "$d/rp1.jsonl" "$d/greedy.jsonl" \
    && t_pass "--repetition-penalty with several prompts: each as alone (and not plain greedy)" \
    || t_fail "--repetition-penalty with several prompts: each as alone" "$(cat "$d/rp.err") $(head -c 300 "$d/rp.jsonl")"
# a bad input line ends the run after the continuations of the prompts before it, waiting ones included
printf '{"q": "x = 1"}\n{"q": "y = 2"}\nnot json\n{"q": "x = 1"}\n' | gen --greedy --max-new-tokens 2 --json-keys q --json >"$d/o" 2>"$d/e"
rc=$?
[ $rc = 1 ] && [ "$(wc -l <"$d/o")" = 2 ] && [ "$(wc -l <"$d/e")" = 1 ] && grep -q 'line 3' "$d/e" \
    && t_pass "a bad line: the prompts before it answered, then one line naming it" \
    || t_fail "a bad line: the prompts before it answered" "exit $rc, $(wc -l <"$d/o") lines: $(cat "$d/e")"
# --timing: one line per batch on stderr, the continuation unchanged on stdout
gen --greedy --max-new-tokens 8 --timing "def f3(x" "def f4(y" >"$d/t.out" 2>"$d/t.err"
gen --greedy --max-new-tokens 8 "def f3(x" "def f4(y" >"$d/t2.out" 2>/dev/null
grep -Eq '^mt-generate: batch of 2 x [0-9]+ prompt tokens: first token after [0-9.]+ ms; [0-9]+ new tokens in [0-9.]+ ms' "$d/t.err" \
    && cmp -s "$d/t.out" "$d/t2.out" && t_pass "--timing: a line per batch, the same text" || t_fail "--timing" "$(cat "$d/t.err")"
