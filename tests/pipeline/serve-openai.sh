#!/usr/bin/env bash
# serve-openai.sh: OpenAI's own Python client (the `openai` package of build/venv-serve) against mt-serve
# on serve.sh's tiny model: models.list; completions greedy and seeded (top_k through extra_body), for a
# list of prompts and n > 1, whose texts, token counts and log-probabilities are mt-generate's; streamed
# completions whose chunks put together are the same texts; chat.completions.create greedy, seeded with
# n 2 and streamed, whose contents are mt-generate's continuations of the prompt the chat template makes of
# the messages; the client's exceptions for a bad field (BadRequestError naming it) and another model
# (NotFoundError, model_not_found).
. "$(dirname "$0")/../lib.sh"
d=$T_TMP
export OMP_NUM_THREADS=2
if ! SPY=$("$T_TOP/tests/oracle/venv-serve.sh" 2>"$d/venv.err"); then
    t_skip "openai" "unavailable: $(head -c 300 "$d/venv.err")"; exit 0
fi
if why=$(t_serve_model "$d"); then t_pass "tiny GPT-2-vocabulary model trained"
else t_fail "tiny GPT-2-vocabulary model trained" "$why"; exit 0; fi
trap 'rc=$?; kill -9 $T_SERVE_PID 2>/dev/null; (exit $rc); t_cleanup' EXIT
# a chat template: each message as "role: content" and the end-of-document text, then "assistant:"
cat >"$d/chat.jinja" <<'EOF'
{% for m in messages %}{{ m['role'] + ': ' + m['content'] + eos_token }}
{% endfor %}{% if add_generation_prompt %}assistant:{% endif %}
EOF
chat_prompt=$'user: def f3(x<|endoftext|>\nassistant:'
if t_serve_start "$d/serve.err" --load "$d/ck" --max-batch-size 4 --chat-template "$d/chat.jinja"; then t_pass "mt-serve starts"
else t_fail "mt-serve starts" "$(tail -3 "$d/serve.err")"; exit 0; fi

prompts=("def f3(x" "def f4(y" "import os")
gen() { mt-generate --load "$d/ck" --json "$@" 2>>"$d/gen.err"; }
gen --greedy --max-new-tokens 20 "${prompts[@]}" >"$d/ref-greedy.jsonl"
gen --seed 5 --top-k 40 --top-p 0.95 --temperature 1.2 --max-new-tokens 24 "${prompts[@]}" >"$d/ref-seeded.jsonl"
gen --seed 7 --temperature 1 --max-new-tokens 12 "def f3(x" "def f3(x" "def f3(x" >"$d/ref-n.jsonl"
gen --greedy --max-new-tokens 12 "$chat_prompt" >"$d/ref-chat.jsonl"
gen --seed 11 --top-k 20 --temperature 1.1 --max-new-tokens 12 "$chat_prompt" "$chat_prompt" >"$d/ref-chat-seeded.jsonl"

# client CASE: one case of the script below, run with OpenAI's client
client() {
    "$SPY" - "$T_SERVE_URL/v1" "$d" "$1" >"$d/$1.out" 2>&1 <<'PYEOF'
import json, sys
import openai
base, d, case = sys.argv[1:]
c = openai.OpenAI(base_url=base, api_key="unused", max_retries=0, timeout=120)
prompts = ["def f3(x", "def f4(y", "import os"]
finish = {"length": "length", "eod": "stop", "stop": "stop"}

def same(r, ref_file):
    ref = [json.loads(l) for l in open(ref_file)]
    assert r.object == "text_completion" and r.model == "ck" and len(r.choices) == len(ref), r
    for ch, g in sorted(((ch, ref[ch.index]) for ch in r.choices), key=lambda x: x[0].index):
        assert ch.text == g["text"], (ch.text, g["text"])
        assert ch.finish_reason == finish[g["stop"]], (ch.finish_reason, g["stop"])
        if ch.logprobs is not None:
            lp = ch.logprobs.token_logprobs
            assert len(lp) == len(g["tokens"]) and max(abs(x - y) for x, y in zip(lp, g["logprobs"])) < 1e-4, (lp, g)
    assert r.usage.completion_tokens == sum(len(g["tokens"]) for g in ref), r.usage

def streamed(stream, ref_file):
    ref = [json.loads(l) for l in open(ref_file)]
    text, end = {}, {}
    for chunk in stream:
        for ch in chunk.choices:
            text[ch.index] = text.get(ch.index, "") + ch.text
            if ch.finish_reason:
                end[ch.index] = ch.finish_reason
    assert [text[k] for k in range(len(ref))] == [g["text"] for g in ref], (text, ref)
    assert [end[k] for k in range(len(ref))] == [finish[g["stop"]] for g in ref], end

if case == "models":
    assert [m.id for m in c.models.list()] == ["ck"]
elif case == "greedy":
    same(c.completions.create(model="ck", prompt=prompts, max_tokens=20, temperature=0, logprobs=0), d + "/ref-greedy.jsonl")
elif case == "seeded":
    same(c.completions.create(model="ck", prompt=prompts, max_tokens=24, temperature=1.2, top_p=0.95, seed=5,
                              logprobs=0, extra_body={"top_k": 40}), d + "/ref-seeded.jsonl")
elif case == "n":
    same(c.completions.create(model="ck", prompt="def f3(x", n=3, max_tokens=12, temperature=1, seed=7),
         d + "/ref-n.jsonl")
elif case == "stream":
    streamed(c.completions.create(model="ck", prompt=prompts, max_tokens=20, temperature=0, stream=True),
             d + "/ref-greedy.jsonl")
elif case == "stream-seeded":
    streamed(c.completions.create(model="ck", prompt=prompts, max_tokens=24, temperature=1.2, top_p=0.95, seed=5,
                                  stream=True, extra_body={"top_k": 40}), d + "/ref-seeded.jsonl")
elif case in ("chat", "chat-seeded", "chat-stream"):
    msgs = [{"role": "user", "content": "def f3(x"}]
    ref = [json.loads(l) for l in open(d + ("/ref-chat-seeded.jsonl" if case == "chat-seeded" else "/ref-chat.jsonl"))]
    if case == "chat-stream":
        text, end, role = "", None, None
        for chunk in c.chat.completions.create(model="ck", messages=msgs, max_tokens=12, temperature=0, stream=True):
            assert chunk.object == "chat.completion.chunk", chunk
            for ch in chunk.choices:
                role = ch.delta.role or role
                text += ch.delta.content or ""
                end = ch.finish_reason or end
        assert (role, text, end) == ("assistant", ref[0]["text"], finish[ref[0]["stop"]]), (role, text, end, ref[0])
    else:
        kw = dict(n=2, seed=11, temperature=1.1, extra_body={"top_k": 20}) if case == "chat-seeded" else dict(temperature=0)
        r = c.chat.completions.create(model="ck", messages=msgs, max_tokens=12, **kw)
        assert r.object == "chat.completion" and r.id.startswith("chatcmpl-") and len(r.choices) == len(ref), r
        for ch in r.choices:
            g = ref[ch.index]
            assert ch.message.role == "assistant" and ch.message.content == g["text"], (ch.message, g["text"])
            assert ch.finish_reason == finish[g["stop"]], (ch.finish_reason, g["stop"])
        assert r.usage.prompt_tokens == len(ref[0]["prompt_ids"]), (r.usage, ref[0]["prompt_ids"])
elif case == "bad-field":
    try:
        c.completions.create(model="ck", prompt="x", temperature=-1)
        raise AssertionError("accepted")
    except openai.BadRequestError as e:
        assert e.status_code == 400 and e.body["param"] == "temperature" and e.body["message"], e.body
elif case == "other-model":
    try:
        c.completions.create(model="gpt-4", prompt="x")
        raise AssertionError("accepted")
    except openai.NotFoundError as e:
        assert e.status_code == 404 and e.code == "model_not_found", e.body
print("ok")
PYEOF
}
check() { if client "$1"; then t_pass "$2"; else t_fail "$2" "$(tail -1 "$d/$1.out" | head -c 600)"; fi; }
check models "models.list: the served model"
check greedy "completions.create, greedy, 3 prompts: mt-generate's texts, token counts and log-probabilities"
check seeded "completions.create, seeded (top_k in extra_body): mt-generate's with the same --seed"
check n "completions.create with n 3: mt-generate's prompt given 3 times"
check stream "completions.create(stream=True), greedy: the chunks put together are mt-generate's texts"
check stream-seeded "completions.create(stream=True), seeded: the same"
check chat "chat.completions.create, greedy: mt-generate's continuation of the templated prompt"
check chat-seeded "chat.completions.create, seeded, n 2: mt-generate's continuations with the same --seed"
check chat-stream "chat.completions.create(stream=True): the assistant's role, then deltas making the same content"
check bad-field "a bad field: the client raises BadRequestError naming it"
check other-model "another model: the client raises NotFoundError, model_not_found"
kill -TERM $T_SERVE_PID
wait $T_SERVE_PID && t_pass "SIGTERM: exit 0" || t_fail "SIGTERM: exit 0" "$(tail -3 "$d/serve.err")"
