#!/usr/bin/env bash
# serve-chat.sh: mt-serve's /v1/chat/completions on a tiny GPT-2-vocabulary model, asked with curl on a
# free port of 127.0.0.1. With --chat-template FILE: the answers, greedy and seeded (n 2), streamed and
# not, are mt-generate's --json continuations of the prompt the template makes of the messages (written
# out here in Python: the template's text with <|endoftext|> as eos_token, which both tokenize alike),
# their log-probabilities and usage too; a stream starts each choice with the assistant's role, its
# content chunks put together are the unstreamed answer, a finish_reason ends it, the usage chunk and
# [DONE] follow; content as a list of text parts; /chat/completions. Refused with OpenAI's error shape:
# bad messages, a chat template's raise_exception (its message carried), fields chat does not have. A
# server without a template answers chat requests 501 naming --chat-template (completions still work); a
# checkpoint's tokenizer_config.json whose template mt cannot parse: a one-line warning, and 501 naming
# the reason; one it can: its template, and its eos_token as {"content": ...}; --chat-template given a
# tokenizer_config.json; --chat-template FILE that does not parse: mt-serve exits with one line naming
# FILE and the line.
. "$(dirname "$0")/../lib.sh"
PY=/usr/bin/python3
d=$T_TMP
export OMP_NUM_THREADS=2
command -v curl >/dev/null || { t_skip "mt-serve chat" "curl is not installed (make deps)"; exit 0; }
curl() { command curl --max-time 120 "$@"; }

$PY - >"$d/train.jsonl" <<'PYEOF'
import json
for i in range(80):
    print(json.dumps({"text": "user: def f%d(x, y=%d):\nassistant:    return x * y + %d\n" % (i, i % 7, i * i)}))
PYEOF
mt-tokenize --vocab-file "$GPT2_VOCAB" --merge-file "$GPT2_MERGES" --append-eod --input "$d/train.jsonl" \
    | mt-index --output-prefix "$d/data" 2>"$d/index.err" || { t_fail "dataset" "$(cat "$d/index.err")"; exit 0; }
if mt-train --num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 32 --max-position-embeddings 96 \
        --micro-batch-size 4 --global-batch-size 8 --train-iters 30 --lr 1e-2 --log-interval 10 --eval-iters 0 \
        --init-method-std 0.1 --split 100,0,0 --seed 3 --vocab-file "$GPT2_VOCAB" --merge-file "$GPT2_MERGES" \
        --data-path "$d/data_text_document" --data-cache-path "$d/cache" --save "$d/ck" >"$d/train.log" 2>"$d/train.err"
then t_pass "tiny GPT-2-vocabulary model trained"
else t_fail "tiny GPT-2-vocabulary model trained" "$(tail -2 "$d/train.err")"; exit 0; fi

# the template: role, content and eos_token per message; a tool turn refused by raise_exception
cat >"$d/chat.jinja" <<'EOF'
{% for m in messages %}
{% if m.role == 'tool' %}{{ raise_exception('no tool turns here, turn ' ~ loop.index) }}{% endif %}
{{ m.role }}: {{ m.content }}{{ eos_token }}
{% endfor %}
{% if add_generation_prompt %}assistant:{% endif %}
EOF
# render MESSAGES-JSON: the template's text, in Python
render() { $PY -c 'import json, sys
print("".join("%s: %s<|endoftext|>\n" % (m["role"], m["content"]) for m in json.loads(sys.argv[1])) + "assistant:", end="")' "$1"; }

sp=
trap 'rc=$?; [ -n "$sp" ] && kill -9 $sp 2>/dev/null; (exit $rc); t_cleanup' EXIT
# serve LOG ARGS...: starts mt-serve on a free port (sp, url); 1 when it does not start
serve() {
    local log=$1 _
    shift
    mt-serve --load "$d/ck" --port 0 --max-batch-size 4 --max-tokens-limit 64 "$@" 2>"$log" &
    sp=$!
    for _ in $(seq 1200); do
        if grep -q 'serving ck (96 positions) on http://127.0.0.1:[0-9]' "$log"; then
            url=http://127.0.0.1:$(sed -n 's|.* on http://127.0.0.1:\([0-9][0-9]*\)$|\1|p' "$log" | head -1)
            return 0
        fi
        kill -0 $sp 2>/dev/null || return 1
        sleep 0.1
    done
    return 1
}
stop() { kill -TERM $sp; wait $sp; sp=; }
# post PATH BODY NAME: the response in $d/NAME.json, its status printed
post() { curl -s -o "$d/$3.json" -w '%{http_code}' "$url$1" -H 'Content-Type: application/json' --data-binary "$2"; }
# check NAME PYTHON ARGS...: PYTHON (statements over r, the parsed response, and a, the ARGS) asserts
check() { t_json_check "$@"; }

if ! serve "$d/serve.err" --chat-template "$d/chat.jinja"; then
    t_fail "mt-serve --chat-template starts" "$(cat "$d/serve.err")"
    exit 0
fi
t_pass "mt-serve --chat-template starts"

# 1. against mt-generate: the rendered prompt, greedy and seeded (choice k: mt-generate's k-th prompt)
msgs='[{"role": "system", "content": "be brief"}, {"role": "user", "content": "def f3(x"}]'
prompt=$(render "$msgs")
gen() { mt-generate --load "$d/ck" --json "$@" 2>>"$d/gen.err"; }
gen --greedy --max-new-tokens 20 "$prompt" >"$d/ref-greedy.jsonl"
gen --seed 5 --top-k 40 --top-p 0.95 --temperature 1.2 --max-new-tokens 24 "$prompt" "$prompt" >"$d/ref-seeded.jsonl"
# same RESPONSE REF.jsonl: choice k is line k of REF: its content, tokens, log-probabilities, finish
same='
ref = [json.loads(l) for l in open(a[1])]
ch = r["choices"]
assert r["object"] == "chat.completion" and r["id"].startswith("chatcmpl-") and r["model"] == "ck", r
assert [c["index"] for c in ch] == list(range(len(ref))), [c["index"] for c in ch]
for c, g in zip(ch, ref):
    assert c["message"] == {"role": "assistant", "content": g["text"]}, (c["message"], g["text"])
    lp = c["logprobs"]["content"]
    assert len(lp) == len(g["tokens"]), (len(lp), len(g["tokens"]))
    assert max(abs(x["logprob"] - y) for x, y in zip(lp, g["logprobs"])) < 1e-4, (lp, g["logprobs"])
    text_lp = lp[:-1] if g["stop"] == "eod" else lp   # the end of document ends the text, not in it
    assert b"".join(bytes(x["bytes"]) for x in text_lp).decode("utf-8", "replace") == g["text"], lp
    assert c["finish_reason"] == {"length": "length", "eod": "stop", "stop": "stop"}[g["stop"]], (c, g["stop"])
u = r["usage"]
assert u["prompt_tokens"] == len(ref[0]["prompt_ids"]), (u, len(ref[0]["prompt_ids"]))
assert u["completion_tokens"] == sum(len(g["tokens"]) for g in ref), u
assert u["total_tokens"] == u["prompt_tokens"] + u["completion_tokens"], u
'
s=$(post /v1/chat/completions '{"messages": '"$msgs"', "max_tokens": 20, "temperature": 0, "logprobs": true}' greedy)
[ "$s" = 200 ] && check "greedy: mt-generate's continuation of the rendered prompt, token for token" "$same" "$d/greedy.json" "$d/ref-greedy.jsonl" \
    || t_fail "greedy" "status $s: $(head -c 300 "$d/greedy.json")"
s=$(post /v1/chat/completions '{"messages": '"$msgs"', "max_completion_tokens": 24, "temperature": 1.2, "top_k": 40,
    "top_p": 0.95, "seed": 5, "n": 2, "logprobs": true, "model": "ck"}' seeded)
[ "$s" = 200 ] && check "seeded, n 2: mt-generate's continuations with the same --seed" "$same" "$d/seeded.json" "$d/ref-seeded.jsonl" \
    || t_fail "seeded, n 2" "status $s: $(head -c 300 "$d/seeded.json")"
parts='[{"role": "system", "content": [{"type": "text", "text": "be"}, {"type": "text", "text": "brief"}]},
        {"role": "user", "content": "def f3(x"}]'
gen --greedy --max-new-tokens 20 "$(render '[{"role": "system", "content": "be\nbrief"}, {"role": "user", "content": "def f3(x"}]')" \
    >"$d/ref-parts.jsonl"
s=$(post /chat/completions '{"messages": '"$parts"', "max_tokens": 20, "temperature": 0, "logprobs": true}' parts)
[ "$s" = 200 ] && check "POST /chat/completions, content as text parts (joined by newlines)" "$same" "$d/parts.json" "$d/ref-parts.jsonl" \
    || t_fail "content as text parts" "status $s: $(head -c 300 "$d/parts.json")"
s=$(post /v1/chat/completions '{"messages": '"$msgs"', "temperature": 0}' dflt)
[ "$s" = 200 ] && check "no max_tokens: up to the model's positions" '
ref = json.loads(open(a[1]).readline())
c = r["choices"][0]
assert c["message"]["content"].startswith(ref["text"]) and c["logprobs"] is None, c
assert r["usage"]["completion_tokens"] == 64 or (c["finish_reason"] == "stop" or
    r["usage"]["total_tokens"] == 96), r["usage"]' "$d/dflt.json" "$d/ref-greedy.jsonl" \
    || t_fail "no max_tokens" "status $s: $(head -c 300 "$d/dflt.json")"

# 2. streams: each choice's role first, its content chunks put together are the unstreamed message, a
# chunk with its finish_reason ends it; the usage chunk, then [DONE]
stream_same() {
    $PY - "$1" "$2" >"$d/st.out" 2>&1 <<'PYEOF'
import json, sys
ev = open(sys.argv[1], encoding="utf-8").read().split("\n\n")
assert ev[-1] == "" and ev[-2] == "data: [DONE]", ev[-3:]
chunks = [json.loads(e[6:]) for e in ev[:-2]]
want = json.load(open(sys.argv[2]))
text, state = {}, {}
for c in chunks:
    assert c["object"] == "chat.completion.chunk" and c["id"].startswith("chatcmpl-"), c
    if not c["choices"]:
        assert c is chunks[-1] and c["usage"] == want["usage"], ("the usage chunk, last", c)
        continue
    ch = c["choices"][0]
    i, delta = ch["index"], ch["delta"]
    if i not in state:
        assert delta == {"role": "assistant", "content": ""} and ch["finish_reason"] is None, ("the role first", c)
        state[i], text[i] = "open", ""
        continue
    assert state[i] == "open", ("a chunk after the finish", c)
    if ch["finish_reason"] is None:
        assert set(delta) == {"content"} and delta["content"], c
        text[i] += delta["content"]
    else:
        assert delta == {}, c
        assert ch["finish_reason"] == want["choices"][i]["finish_reason"], (c, want["choices"][i])
        state[i] = "done"
assert sorted(text) == list(range(len(want["choices"]))), sorted(text)
for w in want["choices"]:
    assert text[w["index"]] == w["message"]["content"], (text[w["index"]], w["message"])
    assert state[w["index"]] == "done", state
assert chunks[-1]["choices"] == [], "no usage chunk"
assert len(chunks) > 4 * len(want["choices"]), "a chunk per piece of text"
PYEOF
}
curl -sN -o "$d/st-greedy.txt" "$url/v1/chat/completions" --data-binary '{"messages": '"$msgs"', "max_tokens": 20,
    "temperature": 0, "stream": true, "stream_options": {"include_usage": true}}'
stream_same "$d/st-greedy.txt" "$d/greedy.json" && t_pass "a greedy stream: role, content chunks, finish, usage, [DONE]" \
    || t_fail "a greedy stream" "$(tail -1 "$d/st.out")"
curl -sN -o "$d/st-seeded.txt" "$url/v1/chat/completions" --data-binary '{"messages": '"$msgs"', "max_tokens": 24,
    "temperature": 1.2, "top_k": 40, "top_p": 0.95, "seed": 5, "n": 2, "stream": true, "stream_options": {"include_usage": true}}'
stream_same "$d/st-seeded.txt" "$d/seeded.json" && t_pass "a seeded stream of n 2: the same choices as unstreamed" \
    || t_fail "a seeded stream of n 2" "$(tail -1 "$d/st.out")"

# 3. refusals: status, OpenAI's error shape, the field at fault, what the message says
# bad NAME STATUS PARAM TEXT BODY: PARAM "-" for null; TEXT a piece of the message
bad() {
    local name=$1 want=$2 param=$3 text=$4 body=$5 s
    s=$(post /v1/chat/completions "$body" bad)
    if [ "$s" != "$want" ]; then t_fail "$name: $want" "status $s: $(head -c 300 "$d/bad.json")"; return; fi
    check "$name: $want, OpenAI's error shape" '
e = r["error"]
assert set(r) == {"error"} and set(e) == {"message", "type", "param", "code"}, r
assert e["type"] == "invalid_request_error" and e["message"], e
assert e["param"] == (None if a[1] == "-" else a[1]), e
assert a[2] in e["message"], (a[2], e["message"])' "$d/bad.json" "$param" "$text"
}
bad "no messages" 400 messages '"messages" is required' '{"max_tokens": 2}'
bad "messages not a list" 400 messages 'non-empty list' '{"messages": "hi"}'
bad "an empty list of messages" 400 messages 'non-empty list' '{"messages": []}'
bad "a message without a role" 400 messages 'messages[0].role' '{"messages": [{"content": "x"}]}'
bad "content of another type" 400 messages 'messages[1].content' '{"messages": [{"role": "user", "content": "x"}, {"role": "user", "content": 3}]}'
bad "an image part" 400 messages 'image_url' '{"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]}'
bad "a message field not supported" 400 messages 'tool_calls' '{"messages": [{"role": "assistant", "content": "x", "tool_calls": []}]}'
bad "raise_exception in the template" 400 messages 'no tool turns here, turn 2' '{"messages": [{"role": "user", "content": "x"}, {"role": "tool", "content": "y"}]}'
bad "echo is not a chat field" 400 echo 'unknown field' '{"messages": [{"role": "user", "content": "x"}], "echo": true}'
bad "prompt is not a chat field" 400 prompt 'unknown field' '{"messages": [{"role": "user", "content": "x"}], "prompt": "x"}'
bad "max_completion_tokens above the limit" 400 max_completion_tokens 'limit of 64' '{"messages": [{"role": "user", "content": "x"}], "max_completion_tokens": 65}'
bad "top_logprobs above 20" 400 top_logprobs "outside" '{"messages": [{"role": "user", "content": "x"}], "logprobs": true, "top_logprobs": 21}'
bad "a prompt that leaves no position" 400 messages 'no room' "{\"messages\": [{\"role\": \"user\", \"content\": \"$($PY -c 'print("x " * 100)')\"}]}"
s=$(post /v1/chat/completions '{"messages": [{"role": "user", "content": "x"}], "model": "other"}' model)
[ "$s" = 404 ] && check "another model: 404 model_not_found" 'assert r["error"]["code"] == "model_not_found", r' "$d/model.json" \
    || t_fail "another model: 404" "status $s"
s=$(curl -s -o /dev/null -D "$d/405.h" -w '%{http_code}' "$url/v1/chat/completions")
[ "$s" = 405 ] && grep -qi '^Allow: POST' "$d/405.h" && t_pass "GET /v1/chat/completions: 405 with Allow: POST" \
    || t_fail "GET /v1/chat/completions: 405" "status $s"
s=$(post /v1/chat/completions '{"messages": '"$msgs"', "max_tokens": 20, "temperature": 0, "logprobs": true}' after)
[ "$s" = 200 ] && check "after the refusals the server answers the same" "$same" "$d/after.json" "$d/ref-greedy.jsonl" \
    || t_fail "after the refusals" "status $s"
stop

# 4. no template: chat is refused with 501 naming --chat-template; completions go on
if serve "$d/serve2.err"; then
    s=$(post /v1/chat/completions '{"messages": [{"role": "user", "content": "x"}]}' none)
    [ "$s" = 501 ] && check "no chat template: 501 naming --chat-template" '
e = r["error"]
assert "no chat template" in e["message"] and "--chat-template FILE" in e["message"] and e["code"] == "chat_template_unavailable", e' \
        "$d/none.json" || t_fail "no chat template: 501" "status $s: $(head -c 300 "$d/none.json")"
    s=$(post /v1/completions '{"prompt": "x", "max_tokens": 2}' cmpl)
    [ "$s" = 200 ] && t_pass "no chat template: completions still answered" || t_fail "no chat template: completions" "status $s"
    stop
else t_fail "mt-serve without a chat template starts" "$(cat "$d/serve2.err")"; fi

# 5. the checkpoint's tokenizer_config.json: a template mt cannot parse (a warning, 501 naming why), then
# one it can, with its eos_token as {"content": ...}
$PY -c 'import json, sys; json.dump({"chat_template": "{% for m in messages %}\n{{ m.content | wordwrap(5) }}{% endfor %}",
    "eos_token": {"content": "</s>"}}, open(sys.argv[1], "w"))' "$d/ck/tokenizer_config.json"
if serve "$d/serve3.err"; then
    grep -q "warning: chat completions are off: .*tokenizer_config.json: chat template line 2: filter 'wordwrap' is not supported" "$d/serve3.err" \
        && [ "$(grep -c warning "$d/serve3.err")" = 1 ] && t_pass "a checkpoint template mt cannot parse: one warning line, and it starts" \
        || t_fail "a checkpoint template mt cannot parse: a warning" "$(cat "$d/serve3.err")"
    s=$(post /v1/chat/completions '{"messages": [{"role": "user", "content": "x"}]}' unusable)
    [ "$s" = 501 ] && check "and chat requests: 501 naming the reason" '
assert "filter '"'wordwrap'"' is not supported" in r["error"]["message"], r' "$d/unusable.json" \
        || t_fail "a checkpoint template mt cannot parse: 501" "status $s: $(head -c 300 "$d/unusable.json")"
    stop
else t_fail "mt-serve with a template it cannot parse starts" "$(cat "$d/serve3.err")"; fi
$PY -c 'import json, sys; json.dump({"chat_template": open(sys.argv[2]).read(), "eos_token": {"content": "</s>"},
    "bos_token": "<s>"}, open(sys.argv[1], "w"))' "$d/ck/tokenizer_config.json" "$d/chat.jinja"
if serve "$d/serve4.err"; then
    gen --greedy --max-new-tokens 12 "$(render "$msgs" | sed 's/<|endoftext|>/<\/s>/g')" >"$d/ref-cfg.jsonl"
    s=$(post /v1/chat/completions '{"messages": '"$msgs"', "max_tokens": 12, "temperature": 0, "logprobs": true}' cfg)
    [ "$s" = 200 ] && check "the checkpoint's template and eos_token: mt-generate's continuation" "$same" "$d/cfg.json" "$d/ref-cfg.jsonl" \
        || t_fail "the checkpoint's template" "status $s: $(head -c 300 "$d/cfg.json")"
    stop
else t_fail "mt-serve with the checkpoint's template starts" "$(cat "$d/serve4.err")"; fi

# 6. --chat-template given a tokenizer_config.json: its template, bos_token and eos_token (over the
# checkpoint's)
rm "$d/ck/tokenizer_config.json"
$PY -c 'import json, sys; json.dump({"chat_template": open(sys.argv[2]).read(), "eos_token": "<eos>"},
    open(sys.argv[1], "w"))' "$d/other_config.json" "$d/chat.jinja"
if serve "$d/serve5.err" --chat-template "$d/other_config.json"; then
    gen --greedy --max-new-tokens 12 "$(render "$msgs" | sed 's/<|endoftext|>/<eos>/g')" >"$d/ref-json.jsonl"
    s=$(post /v1/chat/completions '{"messages": '"$msgs"', "max_tokens": 12, "temperature": 0, "logprobs": true}' json)
    [ "$s" = 200 ] && check "--chat-template tokenizer_config.json: its template and eos_token" "$same" "$d/json.json" "$d/ref-json.jsonl" \
        || t_fail "--chat-template tokenizer_config.json" "status $s: $(head -c 300 "$d/json.json")"
    stop
else t_fail "mt-serve --chat-template tokenizer_config.json starts" "$(cat "$d/serve5.err")"; fi

# 7. --chat-template FILE that does not parse, or is not there: mt-serve exits with one line
printf 'ok\n{%% for m in messages %%}\n{%% macro x() %%}{%% endmacro %%}{%% endfor %%}\n' >"$d/badt.jinja"
if mt-serve --load "$d/ck" --port 0 --chat-template "$d/badt.jinja" >"$d/badt.out" 2>"$d/badt.err"; then
    t_fail "--chat-template FILE that does not parse: refused" "it started"
else grep -q "badt.jinja: chat template line 3: tag 'macro' is not supported" "$d/badt.err" && [ "$(wc -l <"$d/badt.err")" = 1 ] \
    && t_pass "--chat-template FILE that does not parse: one line naming FILE and the line" \
    || t_fail "--chat-template FILE that does not parse: one line" "$(cat "$d/badt.err")"; fi
if mt-serve --load "$d/ck" --port 0 --chat-template "$d/nothing.jinja" >"$d/nof.out" 2>"$d/nof.err"; then
    t_fail "--chat-template FILE that is not there: refused" "it started"
else grep -q "nothing.jinja" "$d/nof.err" && [ "$(wc -l <"$d/nof.err")" = 1 ] \
    && t_pass "--chat-template FILE that is not there: one line naming it" || t_fail "--chat-template FILE that is not there" "$(cat "$d/nof.err")"; fi
