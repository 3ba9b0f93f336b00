#!/usr/bin/env bash
# serve.sh: mt-serve on a tiny GPT-2-vocabulary model (lib.sh's t_serve_model), asked with curl on a free
# port of 127.0.0.1. /health and /v1/models; completions equal mt-generate's --json continuations (text, the
# number of tokens and each token's log-probability), greedy and seeded, for a list of prompts, for token
# id prompts, and for n > 1 (choice k seeded as mt-generate's k-th prompt, the n choices split over
# --max-batch-size batches); echo; stop strings (one spanning two tokens, in a list); each bad request
# gets its status and OpenAI's error shape, and the server goes on; 429 with Retry-After while a long
# request runs and another waits (--max-queue 1); a stream's chunks put together are the text of the same
# request unstreamed, ending with [DONE]; a streaming client that disconnects frees its request at its
# next token; SIGTERM lets a running stream finish and exits 0; with 8 sequences at once and prompts read 3
# tokens a step (continuous batching), ten requests sent at once each get mt-generate's continuation.
. "$(dirname "$0")/../lib.sh"
PY=/usr/bin/python3
d=$T_TMP
export OMP_NUM_THREADS=2
command -v curl >/dev/null || { t_skip "mt-serve" "curl is not installed (make deps)"; exit 0; }
# no request waits for ever, whatever a broken server does
curl() { command curl --max-time 120 "$@"; }

if why=$(t_serve_model "$d"); then t_pass "tiny GPT-2-vocabulary model trained"
else t_fail "tiny GPT-2-vocabulary model trained" "$why"; exit 0; fi

# the server: a free port; at most 2 sequences a batch, 1 request waiting, max_tokens 64, bodies of 4 KiB
mt-serve --load "$d/ck" --port 0 --max-batch-size 2 --max-queue 1 --max-tokens-limit 64 --max-body-bytes 4096 \
    2>"$d/serve.err" &
sp=$!
trap 'rc=$?; kill -9 $sp 2>/dev/null; (exit $rc); t_cleanup' EXIT   # a check that ends the script early
# wait_line FILE PATTERN [TENTHS]: FILE has a line matching PATTERN, within 120 s, and while mt-serve runs
wait_line() {
    local _
    for _ in $(seq "${3:-1200}"); do
        grep -q -- "$2" "$1" 2>/dev/null && return 0
        kill -0 $sp 2>/dev/null || return 1
        sleep 0.1
    done
    return 1
}
if ! wait_line "$d/serve.err" 'serving ck (48 positions) on http://127.0.0.1:[0-9]'; then
    t_fail "mt-serve starts on a free port" "$(cat "$d/serve.err")"
    kill $sp 2>/dev/null
    exit 0
fi
port=$(sed -n 's|.* on http://127.0.0.1:\([0-9][0-9]*\)$|\1|p' "$d/serve.err" | head -1)
url=http://127.0.0.1:$port
t_pass "mt-serve starts on a free port ($port)"
# post PATH BODY NAME: the response in $d/NAME.json, its headers in $d/NAME.h, its status printed
post() { curl -s -o "$d/$3.json" -D "$d/$3.h" -w '%{http_code}' "$url$1" -H 'Content-Type: application/json' --data-binary "$2"; }
# check NAME PYTHON ARGS...: PYTHON (a body of statements over r, the parsed response, and a the ARGS)
# raises no assertion
check() { t_json_check "$@"; }

# 1. /health and /v1/models
s=$(curl -s -o "$d/health.json" -w '%{http_code}' "$url/health")
[ "$s" = 200 ] && check "GET /health: 200 {\"status\": \"ok\"}" 'assert r == {"status": "ok"}, r' "$d/health.json" \
    || t_fail "GET /health" "status $s"
curl -s -o "$d/models.json" "$url/v1/models"
check "GET /v1/models: OpenAI's list, the checkpoint's name" \
    'assert r["object"] == "list" and [m["id"] for m in r["data"]] == ["ck"] and r["data"][0]["object"] == "model", r' "$d/models.json"

# 2. completions against mt-generate: greedy, seeded, n > 1, token ids, echo
prompts=("def f3(x" "def f4(y" "import os" "x = 1" "y = 2")
plist=$($PY -c 'import json, sys; print(json.dumps(sys.argv[1:]))' "${prompts[@]}")
gen() { mt-generate --load "$d/ck" --json "$@" 2>>"$d/gen.err"; }
gen --greedy --max-new-tokens 20 "${prompts[@]}" >"$d/ref-greedy.jsonl"
gen --seed 5 --top-k 40 --top-p 0.95 --temperature 1.2 --max-new-tokens 24 "${prompts[@]}" >"$d/ref-seeded.jsonl"
gen --seed 7 --temperature 1 --max-new-tokens 12 "def f3(x" "def f3(x" "def f3(x" "import os" "import os" "import os" \
    >"$d/ref-n.jsonl"
# same RESPONSE REF.jsonl: choice k is line k of REF: its text, token count, log-probabilities, finish reason
same='
ref = [json.loads(l) for l in open(a[1])]
ch = r["choices"]
assert r["object"] == "text_completion" and r["id"].startswith("cmpl-") and r["model"] == "ck", r
assert [c["index"] for c in ch] == list(range(len(ref))), [c["index"] for c in ch]
for c, g in zip(ch, ref):
    assert c["text"] == g["text"], (c["text"], g["text"])
    lp = c["logprobs"]["token_logprobs"]
    assert len(lp) == len(g["tokens"]), (len(lp), len(g["tokens"]))
    assert max(abs(x - y) for x, y in zip(lp, g["logprobs"])) < 1e-4, (lp, g["logprobs"])
    assert c["finish_reason"] == {"length": "length", "eod": "stop", "stop": "stop"}[g["stop"]], (c, g["stop"])
u = r["usage"]
assert u["completion_tokens"] == sum(len(g["tokens"]) for g in ref), u
assert u["prompt_tokens"] + u["completion_tokens"] == u["total_tokens"], u
'
s=$(post /v1/completions '{"prompt": '"$plist"', "max_tokens": 20, "temperature": 0, "logprobs": 0}' greedy)
[ "$s" = 200 ] && check "greedy: mt-generate's continuations, token for token" "$same" "$d/greedy.json" "$d/ref-greedy.jsonl" \
    || t_fail "greedy" "status $s: $(head -c 300 "$d/greedy.json")"
check "usage counts the prompts' tokens" '
ref = [json.loads(l) for l in open(a[1])]
assert r["usage"]["prompt_tokens"] == sum(len(g["prompt_ids"]) for g in ref), r["usage"]' "$d/greedy.json" "$d/ref-greedy.jsonl"
s=$(post /v1/completions '{"prompt": '"$plist"', "max_tokens": 24, "temperature": 1.2, "top_k": 40, "top_p": 0.95,
    "seed": 5, "logprobs": 0}' seeded)
[ "$s" = 200 ] && check "seeded sampling: mt-generate's continuations with the same --seed" "$same" "$d/seeded.json" "$d/ref-seeded.jsonl" \
    || t_fail "seeded sampling" "status $s: $(head -c 300 "$d/seeded.json")"
s=$(post /v1/completions '{"prompt": ["def f3(x", "import os"], "n": 3, "max_tokens": 12, "temperature": 1, "seed": 7,
    "logprobs": 0}' n3)
[ "$s" = 200 ] && check "n 3 of 2 prompts (batches of 2): mt-generate's prompts each given 3 times" "$same" "$d/n3.json" "$d/ref-n.jsonl" \
    || t_fail "n 3" "status $s: $(head -c 300 "$d/n3.json")"
ids=$($PY -c 'import json, sys; print(json.dumps([json.loads(l)["prompt_ids"] for l in open(sys.argv[1])]))' "$d/ref-greedy.jsonl")
s=$(post /v1/completions '{"prompt": '"$ids"', "max_tokens": 20, "temperature": 0, "logprobs": 0}' ids)
[ "$s" = 200 ] && check "prompts as lists of token ids: the same continuations" "$same" "$d/ids.json" "$d/ref-greedy.jsonl" \
    || t_fail "prompts as token ids" "status $s: $(head -c 300 "$d/ids.json")"
id0=$($PY -c 'import json, sys; print(json.dumps(json.loads(open(sys.argv[1]).readline())["prompt_ids"]))' "$d/ref-greedy.jsonl")
head -1 "$d/ref-greedy.jsonl" >"$d/ref-greedy0.jsonl"
s=$(post /v1/completions '{"prompt": '"$id0"', "max_tokens": 20, "temperature": 0, "logprobs": 0}' id0)
[ "$s" = 200 ] && check "a prompt as one list of token ids" "$same" "$d/id0.json" "$d/ref-greedy0.jsonl" \
    || t_fail "a prompt as one list of token ids" "status $s"
s=$(post /completions '{"prompt": "def f3(x", "max_tokens": 20, "temperature": 0, "echo": true}' echo)
[ "$s" = 200 ] && check "POST /completions with echo: the prompt, then the continuation" '
g = json.loads(open(a[1]).readline())
assert r["choices"][0]["text"] == "def f3(x" + g["text"], r' "$d/echo.json" "$d/ref-greedy.jsonl" \
    || t_fail "POST /completions with echo" "status $s"

# 3. stop strings: one that spans two tokens of the greedy continuation, in a list with one that never
# appears; the continuation ends before it
stop=$($PY -c 'import json, sys
c = json.load(open(sys.argv[1]))["choices"][0]
t, toks = c["text"], c["logprobs"]["tokens"]
for i in range(2, len(toks) - 1):   # the last character of a token and the first of the next
    s = toks[i][-1:] + toks[i + 1][:1]
    at = len("".join(toks[:i + 1])) - 1
    if len(s) == 2 and t.find(s) == at:
        print(json.dumps(s)); break' "$d/greedy.json")
if [ -n "$stop" ]; then
    s=$(post /v1/completions '{"prompt": "def f3(x", "max_tokens": 20, "temperature": 0, "stop": ["@@never@@", '"$stop"']}' stop)
    [ "$s" = 200 ] && check "a stop string spanning two tokens ends the text before it (finish_reason stop)" '
full = json.load(open(a[1]))["choices"][0]["text"]
stop = json.loads(a[2])
c = r["choices"][0]
assert c["finish_reason"] == "stop" and c["text"] == full[:full.index(stop)], (c, stop)' "$d/stop.json" "$d/greedy.json" "$stop" \
        || t_fail "stop strings" "status $s"
    s=$(post /v1/completions '{"prompt": "def f3(x", "max_tokens": 20, "temperature": 0, "stream": true, "stop": '"$stop"'}' stopstream)
    $PY - "$d/stopstream.json" "$d/stop.json" >"$d/ss.out" 2>&1 <<'PYEOF' && t_pass "a streamed stop: no piece of the stop string is sent" || t_fail "a streamed stop" "$(tail -1 "$d/ss.out")"
import json, sys
ev = open(sys.argv[1], encoding="utf-8").read().split("\n\n")
assert ev[-1] == "" and ev[-2] == "data: [DONE]", ev[-3:]
chunks = [json.loads(e[6:]) for e in ev[:-2]]
assert "".join(c["choices"][0]["text"] for c in chunks) == json.load(open(sys.argv[2]))["choices"][0]["text"]
assert chunks[-1]["choices"][0]["finish_reason"] == "stop", chunks[-1]
PYEOF
else t_fail "stop strings" "no two tokens to span in $(head -c 300 "$d/greedy.json")"; fi

# 4. bad requests: status, OpenAI's error shape, the field at fault; the server goes on
# bad NAME STATUS PARAM BODY [curl args]: PARAM "-" for null
bad() {
    local name=$1 want=$2 param=$3 body=$4 s
    shift 4
    s=$(curl -s -o "$d/bad.json" -D "$d/bad.h" -w '%{http_code}' "$@" --data-binary "$body" "$url/v1/completions")
    if [ "$s" != "$want" ]; then t_fail "$name: $want" "status $s: $(head -c 300 "$d/bad.json")"; return; fi
    check "$name: $want, OpenAI's error shape" '
e = r["error"]
assert set(r) == {"error"} and set(e) == {"message", "type", "param", "code"}, r
assert e["type"] == "invalid_request_error" and e["code"] is None and e["message"], e
assert e["param"] == (None if a[1] == "-" else a[1]), e' "$d/bad.json" "$param"
}
bad "malformed JSON" 400 - '{"prompt": "x",'
bad "not an object" 400 - '["x"]'
bad "a wrong type" 400 temperature '{"prompt": "x", "temperature": "hot"}'
bad "a wrong type in the prompt list" 400 prompt '{"prompt": ["x", 3]}'
bad "an unknown field" 400 max_new_tokens '{"prompt": "x", "max_new_tokens": 3}'
bad "a duplicate field" 400 - '{"prompt": "x", "prompt": "y"}'
bad "invalid UTF-8" 400 - "$(printf '{"prompt": "caf\xe9"}')"
# JSON's own message names the bytes where it stopped: part of a character here, sent back as U+FFFD
bad "a broken escape before a two-byte character" 400 - "$(printf '{"prompt": "\\ud8\xce\x99"}')"
bad "max_tokens above --max-tokens-limit" 400 max_tokens '{"prompt": "x", "max_tokens": 65}'
bad "a token id outside the vocabulary" 400 prompt '{"prompt": [50257]}'
bad "an empty prompt" 400 prompt '{"prompt": ""}'
bad "a prompt that leaves no position" 400 prompt "{\"prompt\": $($PY -c 'print(list(range(48)))')}"
bad "logprobs above 5" 400 logprobs '{"prompt": "x", "logprobs": 6}'
big=$($PY -c 'print("{\"prompt\": \"" + "x " * 3000 + "\"}")')
bad "a body above --max-body-bytes (Content-Length)" 413 - "$big"
bad "a body above --max-body-bytes (chunked)" 413 - "$big" -H 'Transfer-Encoding: chunked'
s=$(curl -s -o "$d/404.json" -w '%{http_code}' "$url/v1/nothing")
[ "$s" = 404 ] && check "an unknown path: 404, the error shape" 'assert r["error"]["type"] == "invalid_request_error", r' "$d/404.json" \
    || t_fail "an unknown path: 404" "status $s"
s=$(curl -s -o "$d/405.json" -D "$d/405.h" -w '%{http_code}' "$url/v1/completions")
[ "$s" = 405 ] && grep -qi '^Allow: POST' "$d/405.h" && check "GET /v1/completions: 405 with Allow: POST, the error shape" \
    'assert r["error"]["type"] == "invalid_request_error", r' "$d/405.json" || t_fail "a wrong method: 405" "status $s"
s=$(post /v1/completions '{"prompt": "x", "model": "other"}' model)
[ "$s" = 404 ] && check "another model: 404 model_not_found" 'assert r["error"]["code"] == "model_not_found", r' "$d/model.json" \
    || t_fail "another model: 404" "status $s"
s=$(post /v1/completions '{"prompt": '"$plist"', "max_tokens": 20, "temperature": 0, "logprobs": 0}' after)
[ "$s" = 200 ] && cmp -s <($PY -c 'import json,sys; print([c["text"] for c in json.load(open(sys.argv[1]))["choices"]])' "$d/after.json") \
    <($PY -c 'import json,sys; print([c["text"] for c in json.load(open(sys.argv[1]))["choices"]])' "$d/greedy.json") \
    && t_pass "after the bad requests the server still answers, the same" || t_fail "after the bad requests" "status $s"

# 5. streams: the chunks of each choice put together are the unstreamed text; [DONE] last; usage
# stream_same STREAM RESPONSE: the events' texts per index equal RESPONSE's choices, each ends with its
# finish_reason
stream_same() {
    $PY - "$1" "$2" >"$d/st.out" 2>&1 <<'PYEOF'
import json, sys
ev = open(sys.argv[1], encoding="utf-8").read().split("\n\n")
assert ev[-1] == "" and ev[-2] == "data: [DONE]", ev[-3:]
assert all(e.startswith("data: {") for e in ev[:-2]), ev
chunks = [json.loads(e[6:]) for e in ev[:-2]]
want = json.load(open(sys.argv[2]))["choices"]
text, last = {}, {}
for c in chunks:
    if not c["choices"]:
        continue
    assert c["object"] == "text_completion" and len(c["choices"]) == 1, c
    ch = c["choices"][0]
    assert ch["index"] not in last or last[ch["index"]] is None, ("a chunk after the last", c)
    text[ch["index"]] = text.get(ch["index"], "") + ch["text"]
    last[ch["index"]] = ch["finish_reason"]
assert sorted(text) == list(range(len(want))), sorted(text)
for w in want:
    assert text[w["index"]] == w["text"], (text[w["index"]], w["text"])
    assert last[w["index"]] == w["finish_reason"], (last, w)
assert len(chunks) > 2 * len(want), "a chunk per piece of text, not one per choice"
PYEOF
}
curl -sN -o "$d/st-greedy.txt" "$url/v1/completions" --data-binary '{"prompt": '"$plist"', "max_tokens": 20, "temperature": 0, "stream": true}'
stream_same "$d/st-greedy.txt" "$d/greedy.json" && t_pass "a greedy stream: its chunks put together are the text, then [DONE]" \
    || t_fail "a greedy stream" "$(tail -1 "$d/st.out")"
curl -sN -o "$d/st-n.txt" "$url/v1/completions" --data-binary '{"prompt": ["def f3(x", "import os"], "n": 3, "max_tokens": 12,
    "temperature": 1, "seed": 7, "stream": true, "stream_options": {"include_usage": true}}'
stream_same "$d/st-n.txt" "$d/n3.json" && t_pass "a seeded stream of n 3: the same choices as unstreamed" \
    || t_fail "a seeded stream of n 3" "$(tail -1 "$d/st.out")"
$PY -c 'import json, sys
ev = open(sys.argv[1]).read().split("\n\n")
u = json.loads(ev[-3][6:])
assert u["choices"] == [] and u["usage"] == json.load(open(sys.argv[2]))["usage"], u' "$d/st-n.txt" "$d/n3.json" 2>"$d/u.err" \
    && t_pass "stream_options include_usage: the usage before [DONE]" || t_fail "include_usage" "$(tail -1 "$d/u.err")"

# 6. a full queue: while a long stream runs and one request waits, another is answered 429 with
# Retry-After; the waiting one is answered after it
# (96 choices of 40 tokens, two at a time: some 2000 steps, seconds where the sleep below is half of one)
long='{"prompt": "x", "n": 12, "max_tokens": 40, "temperature": 1, "seed": 1, "stream": true}'
curl -sN -o "$d/long.txt" "$url/v1/completions" --data-binary "${long/\"n\": 12/\"n\": 96}" &
lp=$!
wait_line "$d/long.txt" '^data: {' || t_fail "a long stream starts" "$(tail -3 "$d/serve.err")"
post /v1/completions '{"prompt": "x", "max_tokens": 2}' waiting >"$d/waiting.s" &
wp=$!
sleep 0.5
s=$(post /v1/completions '{"prompt": "x", "max_tokens": 2}' full)
running=1
grep -q DONE "$d/long.txt" && running=0
if [ "$s" = 429 ] && grep -qi '^Retry-After: [0-9]' "$d/full.h"; then
    check "a full queue: 429 with Retry-After, OpenAI's error shape" 'assert r["error"]["message"] and r["error"]["code"] is None, r' "$d/full.json"
else t_fail "a full queue: 429 with Retry-After" "status $s: $(cat "$d/full.h" "$d/full.json" | head -c 300)"; fi
[ $running = 1 ] && t_pass "the long stream was still running when the queue was full" \
    || t_fail "the long stream was still running when the queue was full" "it had ended before the answer"
wait $wp
[ "$(cat "$d/waiting.s")" = 200 ] && t_pass "the request that waited is answered" || t_fail "the request that waited" "status $(cat "$d/waiting.s")"
wait $lp
tail -c 20 "$d/long.txt" | grep -q '^data: \[DONE\]$' && t_pass "the long stream ends with [DONE]" || t_fail "the long stream" "$(tail -c 200 "$d/long.txt")"

# 7. a client gone mid-stream: its request stops at its next token (of 12 x 40), and the server goes on
curl -sN "$url/v1/completions" --data-binary "$long" | head -c 300 >/dev/null
if wait_line "$d/serve.err" 'the client has gone: stopped after' 300; then
    n=$(sed -n 's/.*the client has gone: stopped after \([0-9]*\) new tokens/\1/p' "$d/serve.err" | tail -1)
    [ "$n" -lt 240 ] && t_pass "a client gone mid-stream: its request stopped after $n of 480 tokens" \
        || t_fail "a client gone mid-stream: its request stopped early" "after $n tokens"
else t_fail "a client gone mid-stream: its request stops" "$(tail -3 "$d/serve.err")"; fi
# a client that closes its connection while its unstreamed answer is made: seen on its socket, its request
# stopped at its next token
before=$(grep -c 'the client has gone' "$d/serve.err")
$PY - "$port" <<'PYEOF'
import json, socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
b = json.dumps({"prompt": "x", "n": 12, "max_tokens": 40, "temperature": 1, "seed": 2}).encode()
s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
          b"Content-Length: %d\r\n\r\n" % len(b) + b)
s.close()
PYEOF
for _ in $(seq 1200); do [ "$(grep -c 'the client has gone' "$d/serve.err")" -gt "$before" ] && break; sleep 0.1; done
n=$(sed -n 's/.*the client has gone: stopped after \([0-9]*\) new tokens/\1/p' "$d/serve.err" | tail -1)
[ "$(grep -c 'the client has gone' "$d/serve.err")" -gt "$before" ] && [ "$n" -lt 240 ] \
    && t_pass "a client gone before its unstreamed answer: its request stopped after $n of 480 tokens" \
    || t_fail "a client gone before its unstreamed answer: its request stops" "$(tail -2 "$d/serve.err")"
s=$(curl -s -o /dev/null -w '%{http_code}' "$url/health")
[ "$s" = 200 ] && t_pass "and the server goes on" || t_fail "the server goes on after a client is gone" "status $s"

# 8. SIGTERM while a stream runs: no new connections, the stream finishes, exit 0
curl -sN -o "$d/drain.txt" "$url/v1/completions" --data-binary "$long" &
lp=$!
wait_line "$d/drain.txt" '^data: {' || t_fail "a stream before SIGTERM starts" "$(tail -3 "$d/serve.err")"
kill -TERM $sp
wait_line "$d/serve.err" 'SIGTERM: draining'
sleep 0.3
curl -s -o /dev/null "$url/health" && t_fail "no new connections after SIGTERM" "one was accepted" \
    || t_pass "no new connections after SIGTERM"
wait $lp
for _ in $(seq 1200); do kill -0 $sp 2>/dev/null || break; sleep 0.1; done
kill -0 $sp 2>/dev/null && { t_fail "SIGTERM: mt-serve ends" "still running after 120 s"; kill -9 $sp; }
wait $sp
rc=$?
[ $rc = 0 ] && t_pass "SIGTERM: exit 0" || t_fail "SIGTERM: exit 0" "exit $rc: $(tail -3 "$d/serve.err")"
tail -c 20 "$d/drain.txt" | grep -q '^data: \[DONE\]$' && [ "$(grep -c '"finish_reason":"' "$d/drain.txt")" = 12 ] \
    && t_pass "SIGTERM: the running stream finished, its 12 choices and [DONE]" \
    || t_fail "SIGTERM: the running stream finished" "$(tail -c 300 "$d/drain.txt")"

# 9. continuous batching: a server running 8 sequences at once and reading prompts 3 tokens a step (so
# prompts are read in chunks beside the others' decoded tokens); the five greedy and the five seeded
# requests of section 2, each prompt alone (seed 5 + k: mt-generate's k-th prompt), sent at once, some
# streamed: every answer is mt-generate's continuation of its prompt
mt-serve --load "$d/ck" --port 0 --max-batch-size 8 --max-prefill-tokens 3 2>"$d/serve2.err" &
sp=$!
if wait_line "$d/serve2.err" 'serving ck (48 positions) on http://127.0.0.1:[0-9]'; then
    url=http://127.0.0.1:$(sed -n 's|.* on http://127.0.0.1:\([0-9][0-9]*\)$|\1|p' "$d/serve2.err" | head -1)
    pids=()
    for k in 0 1 2 3 4; do
        p=$($PY -c 'import json, sys; print(json.dumps(sys.argv[1]))' "${prompts[$k]}")
        sed -n "$((k + 1))p" "$d/ref-greedy.jsonl" >"$d/ref-g$k.jsonl"
        sed -n "$((k + 1))p" "$d/ref-seeded.jsonl" >"$d/ref-s$k.jsonl"
        post /v1/completions '{"prompt": '"$p"', "max_tokens": 20, "temperature": 0, "logprobs": 0}' "cg$k" >"$d/cg$k.s" &
        pids+=($!)
        if [ $k -lt 3 ]; then
            post /v1/completions '{"prompt": '"$p"', "max_tokens": 24, "temperature": 1.2, "top_k": 40, "top_p": 0.95,
                "seed": '$((5 + k))', "logprobs": 0}' "cs$k" >"$d/cs$k.s" &
        else
            curl -sN -o "$d/cs$k.txt" "$url/v1/completions" --data-binary '{"prompt": '"$p"', "max_tokens": 24,
                "temperature": 1.2, "top_k": 40, "top_p": 0.95, "seed": '$((5 + k))', "stream": true}' &
        fi
        pids+=($!)
    done
    wait "${pids[@]}"
    bad=
    for k in 0 1 2 3 4; do
        check "at once, greedy prompt $k: mt-generate's" "$same" "$d/cg$k.json" "$d/ref-g$k.jsonl"
        if [ $k -lt 3 ]; then check "at once, seeded prompt $k: mt-generate's" "$same" "$d/cs$k.json" "$d/ref-s$k.jsonl"
        else check "at once, seeded prompt $k streamed: mt-generate's text" '
text = "".join(json.loads(e[6:])["choices"][0]["text"] for e in open(a[2]).read().split("\n\n") if e.startswith("data: {"))
assert text == json.loads(open(a[1]).readline())["text"], text' "$d/ref-s$k.jsonl" "$d/ref-s$k.jsonl" "$d/cs$k.txt"; fi
    done
    kill -TERM $sp
    wait $sp && t_pass "the batching server ends on SIGTERM with exit 0" || t_fail "the batching server's exit" "$(tail -3 "$d/serve2.err")"
else t_fail "a second mt-serve starts" "$(cat "$d/serve2.err")"; fi
# a KV cache smaller than one sequence of the model: refused in one line
if mt-serve --load "$d/ck" --port 0 --kv-cache-tokens 40 >"$d/kv.out" 2>"$d/kv.err"; then
    t_fail "--kv-cache-tokens below the model's positions refused" "it started"
else grep -q -- '--kv-cache-tokens 40: less than one sequence of the model.s 48 positions' "$d/kv.err" && [ "$(wc -l <"$d/kv.err")" = 1 ] \
    && t_pass "--kv-cache-tokens below the model's positions: refused in one line" \
    || t_fail "--kv-cache-tokens below the model's positions refused in one line" "$(cat "$d/kv.err")"; fi
