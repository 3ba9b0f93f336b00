#!/usr/bin/env bash
# serve-logprobs.sh: mt-serve's log-probabilities against Hugging Face transformers (build/venv-hf) running
# the same tiny model exported with mt-ckpt-convert --to hf. A prompt scored as evaluation harnesses ask
# (echo, max_tokens 0, logprobs 5): each token's log-probability after the ones before it and its five
# likeliest alternatives are transformers' log-softmax; a greedy continuation with echo and logprobs 3: the
# prompt's and the new tokens' log-probabilities are transformers' over the whole sequence, and each new
# token is its position's likeliest; chat completions' top_logprobs likewise list the likeliest first.
. "$(dirname "$0")/../lib.sh"
d=$T_TMP
export OMP_NUM_THREADS=2
command -v curl >/dev/null || { t_skip "mt-serve" "curl is not installed (make deps)"; exit 0; }
curl() { command curl --max-time 120 "$@"; }
if ! HPY=$("$T_TOP/tests/oracle/venv-hf.sh" 2>"$d/venv.err"); then
    t_skip "transformers" "unavailable: $(head -c 300 "$d/venv.err")"; exit 0
fi
if why=$(t_serve_model "$d"); then t_pass "tiny GPT-2-vocabulary model trained"
else t_fail "tiny GPT-2-vocabulary model trained" "$why"; exit 0; fi
t_ok "mt-ckpt-convert --to hf" mt-ckpt-convert --load "$d/ck" --to hf --out "$d/hf"
trap 'rc=$?; kill -9 $T_SERVE_PID 2>/dev/null; (exit $rc); t_cleanup' EXIT
printf '{%% for m in messages %%}{{ m.role }}: {{ m.content }}\n{%% endfor %%}assistant:' >"$d/chat.jinja"
if t_serve_start "$d/serve.err" --load "$d/ck" --max-batch-size 4 --chat-template "$d/chat.jinja"; then t_pass "mt-serve starts"
else t_fail "mt-serve starts" "$(tail -3 "$d/serve.err")"; exit 0; fi
url=$T_SERVE_URL

texts='["def f3(x, y=3):\n    return x * y + 9\n", "import os\nx = 1", "caf\u00e9 \u00fcber na\u00efve"]'
curl -s -o "$d/score.json" "$url/v1/completions" --data-binary '{"prompt": '"$texts"', "max_tokens": 0, "echo": true, "logprobs": 5}'
curl -s -o "$d/greedy.json" "$url/v1/completions" --data-binary '{"prompt": ["def f3(x", "import"], "max_tokens": 10,
    "temperature": 0, "echo": true, "logprobs": 3}'
curl -s -o "$d/chat.json" "$url/v1/chat/completions" --data-binary '{"messages": [{"role": "user", "content": "def f3(x"}],
    "max_tokens": 6, "temperature": 0, "logprobs": true, "top_logprobs": 4}'

# oracle NAME CASE: the check CASE below, in transformers' Python
oracle() {
    if "$HPY" -W ignore - "$d" "$2" "$texts" >"$d/$2.out" 2>&1 <<'PYEOF'
import json, sys
import torch
from transformers import GPT2LMHeadModel, GPT2TokenizerFast
d, case, texts = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
tok = GPT2TokenizerFast.from_pretrained(d + "/hf")
model = GPT2LMHeadModel.from_pretrained(d + "/hf").eval()
TOL = 2e-4   # fp32 on both sides; measured worst 2e-6

def logsoftmax(ids):
    with torch.no_grad():
        return torch.log_softmax(model(torch.tensor([ids])).logits[0].double(), -1)

def check(lp, ids, first):
    """lp: a choice's logprobs object over ids; positions from first on are compared"""
    ls = logsoftmax(ids)
    assert lp["tokens"] == [tok.decode([i]) for i in ids], (lp["tokens"], ids)
    assert lp["token_logprobs"][0] is None and (lp["top_logprobs"] is None or lp["top_logprobs"][0] is None), lp
    worst = 0
    for t in range(max(first, 1), len(ids)):
        want = ls[t - 1, ids[t]].item()
        worst = max(worst, abs(lp["token_logprobs"][t] - want))
        if lp["top_logprobs"] is not None:
            alt = lp["top_logprobs"][t]
            vals, top = ls[t - 1].topk(len(alt))
            assert list(alt) == [tok.decode([i]) for i in top.tolist()], (t, alt, top)
            worst = max([worst] + [abs(a - v) for a, v in zip(alt.values(), vals.tolist())])
    assert worst < TOL, worst
    return worst

r = json.load(open(d + "/" + case + ".json"))
if case == "score":
    assert len(r["choices"]) == 3 and r["usage"]["completion_tokens"] == 0, r["usage"]
    worst = 0
    for c, text in zip(r["choices"], texts):
        ids = tok(text)["input_ids"]
        assert c["text"] == text and c["finish_reason"] == "length", c
        assert all(len(a) == 5 for a in c["logprobs"]["top_logprobs"][1:]), c["logprobs"]["top_logprobs"]
        worst = max(worst, check(c["logprobs"], ids, 1))
    print("worst %.1e" % worst)
elif case == "greedy":
    worst = 0
    for c, p in zip(r["choices"], ["def f3(x", "import"]):
        ids = tok(c["text"])["input_ids"]
        n = len(tok(p)["input_ids"])
        worst = max(worst, check(c["logprobs"], ids, 1))
        for t in range(n, len(ids)):   # greedy: each new token is the likeliest
            alt = c["logprobs"]["top_logprobs"][t]
            assert next(iter(alt)) == c["logprobs"]["tokens"][t] and len(alt) == 3, (t, alt)
    print("worst %.1e" % worst)
elif case == "chat":
    content = r["choices"][0]["logprobs"]["content"]
    ids = tok("user: def f3(x\nassistant:")["input_ids"]
    worst = 0
    for e in content:
        ls = logsoftmax(ids)[-1]
        vals, top = ls.topk(4)
        assert [a["token"] for a in e["top_logprobs"]] == [tok.decode([i]) for i in top.tolist()], e
        assert e["top_logprobs"][0]["token"] == e["token"], e
        worst = max([worst, abs(e["logprob"] - vals[0].item())] + [abs(a["logprob"] - v) for a, v in zip(e["top_logprobs"], vals.tolist())])
        ids = ids + [top[0].item()]
    assert len(content) == 6 and worst < TOL, (len(content), worst)
    print("worst %.1e" % worst)
PYEOF
    then t_pass "$1 ($(tail -1 "$d/$2.out"))"; else t_fail "$1" "$(tail -1 "$d/$2.out" | head -c 600)"; fi
}
oracle "echo, max_tokens 0, logprobs 5: each prompt token's log-probability and five alternatives are transformers'" score
oracle "a greedy continuation with echo and logprobs 3: transformers' over prompt and new tokens; each new token the likeliest" greedy
oracle "chat top_logprobs 4: transformers' likeliest tokens, the chosen one first" chat
kill -TERM $T_SERVE_PID
wait $T_SERVE_PID && t_pass "SIGTERM: exit 0" || t_fail "SIGTERM: exit 0" "$(tail -3 "$d/serve.err")"
