#!/usr/bin/env bash
# serve-api.sh: mt-serve's PUT /api, Megatron's older text generation interface, on serve.sh's tiny
# model. Greedy (top_k 1), seeded top-k and seeded top-p answers are mt-generate's continuations after the
# prompts (text, tokens, segments, log-probabilities of the new tokens); the prompts' own
# log-probabilities are what generating those same tokens gives (a prompt scored with tokens_to_generate
# 0 that holds a continuation gets that continuation's log-probabilities back), and equal in a scored and
# a generating request; add_BOS puts the end-of-document token first (the continuation of that id
# sequence through /v1/completions); stop_on_eol and stop_on_double_eol end after the first new token
# holding a newline (two); each of Megatron's refusals is 400 {"message": ...}; POST /api is 405.
. "$(dirname "$0")/../lib.sh"
PY=/usr/bin/python3
d=$T_TMP
export OMP_NUM_THREADS=2
command -v curl >/dev/null || { t_skip "mt-serve" "curl is not installed (make deps)"; exit 0; }
curl() { command curl --max-time 120 "$@"; }
if why=$(t_serve_model "$d"); then t_pass "tiny GPT-2-vocabulary model trained"
else t_fail "tiny GPT-2-vocabulary model trained" "$why"; exit 0; fi
trap 'rc=$?; kill -9 $T_SERVE_PID 2>/dev/null; (exit $rc); t_cleanup' EXIT
if t_serve_start "$d/serve.err" --load "$d/ck" --max-batch-size 4 --max-prefill-tokens 5 --max-tokens-limit 40; then
    t_pass "mt-serve starts"
else t_fail "mt-serve starts" "$(tail -3 "$d/serve.err")"; exit 0; fi
url=$T_SERVE_URL

prompts=("def f3(x" "def f4(y" "import os")
plist=$($PY -c 'import json, sys; print(json.dumps(sys.argv[1:]))' "${prompts[@]}")
gen() { mt-generate --load "$d/ck" --json "$@" 2>>"$d/gen.err"; }
gen --greedy --max-new-tokens 20 "${prompts[@]}" >"$d/ref-greedy.jsonl"
gen --seed 5 --top-k 40 --temperature 1.2 --max-new-tokens 24 "${prompts[@]}" >"$d/ref-topk.jsonl"
gen --seed 9 --top-p 0.9 --temperature 0.8 --max-new-tokens 24 "${prompts[@]}" >"$d/ref-topp.jsonl"
# put BODY NAME: the answer in $d/NAME.json, its status printed
put() { curl -s -X PUT -o "$d/$2.json" -w '%{http_code}' "$url/api" -H 'Content-Type: application/json' --data-binary "$1"; }
# check NAME PYTHON ARGS...: PYTHON (statements over r, the answer, and a, the ARGS) raises nothing
check() { t_json_check "$@"; }
# the answer of a request of these prompts is REF's continuations after them; logprobs: the new tokens'
same='
ref = [json.loads(l) for l in open(a[1])]
assert set(r) == {"text", "tokens", "segments", "logprobs"}, sorted(r)
for i, g in enumerate(ref):
    n = len(g["prompt_ids"])
    assert r["text"][i] == g["prompt"] + g["text"], (r["text"][i], g["text"])
    assert r["tokens"][i] == g["prompt_ids"] + g["tokens"], (r["tokens"][i], g["tokens"])
    seg = r["segments"][i][:-1] if r["tokens"][i][-1] == 50256 else r["segments"][i]   # the end is no text
    assert "".join(seg) == r["text"][i], r["segments"][i]
    assert len(r["logprobs"][i]) == len(r["tokens"][i]) - 1, len(r["logprobs"][i])
    lp = r["logprobs"][i][n - 1:]
    assert max(abs(x - y) for x, y in zip(lp, g["logprobs"])) < 1e-4, (lp, g["logprobs"])
    assert all(x < 0 for x in r["logprobs"][i]), r["logprobs"][i]
'
s=$(put '{"prompts": '"$plist"', "tokens_to_generate": 20, "top_k": 1, "logprobs": true}' greedy)
[ "$s" = 200 ] && check "greedy (top_k 1): mt-generate's continuations, tokens, segments and log-probabilities" "$same" \
    "$d/greedy.json" "$d/ref-greedy.jsonl" || t_fail "greedy" "status $s: $(head -c 300 "$d/greedy.json")"
s=$(put '{"prompts": '"$plist"', "tokens_to_generate": 24, "top_k": 40, "temperature": 1.2, "random_seed": 5,
    "logprobs": true}' topk)
[ "$s" = 200 ] && check "top_k 40 with random_seed 5: mt-generate's with --seed 5 (prompt k seeded 5 + k)" "$same" \
    "$d/topk.json" "$d/ref-topk.jsonl" || t_fail "top_k sampling" "status $s: $(head -c 300 "$d/topk.json")"
s=$(put '{"prompts": '"$plist"', "tokens_to_generate": 24, "top_p": 0.9, "temperature": 0.8, "random_seed": 9,
    "logprobs": true}' topp)
[ "$s" = 200 ] && check "top_p 0.9 with random_seed 9: mt-generate's with --seed 9" "$same" "$d/topp.json" "$d/ref-topp.jsonl" \
    || t_fail "top_p sampling" "status $s: $(head -c 300 "$d/topp.json")"
s=$(put '{"prompts": '"$plist"', "tokens_to_generate": 20, "top_k": 1}' nolp)
[ "$s" = 200 ] && check "without logprobs: the same text and tokens, no logprobs" '
g = json.load(open(a[1]))
assert "logprobs" not in r and r["text"] == g["text"] and r["tokens"] == g["tokens"], r' "$d/nolp.json" "$d/greedy.json" \
    || t_fail "without logprobs" "status $s"

# scoring: each prompt followed by its greedy continuation, tokens_to_generate 0 (read a token a step);
# the log-probabilities of the continuation's tokens are those generation gave them
full=$($PY -c 'import json, sys; print(json.dumps([g["prompt"] + g["text"] for g in map(json.loads, open(sys.argv[1]))]))' "$d/ref-greedy.jsonl")
s=$(put '{"prompts": '"$full"', "tokens_to_generate": 0, "logprobs": true}' score)
[ "$s" = 200 ] && check "tokens_to_generate 0 scores a prompt: the log-probabilities generation gave its tokens" '
ref = [json.loads(l) for l in open(a[1])]
for i, g in enumerate(ref):
    n, toks = len(g["prompt_ids"]), r["tokens"][i]
    assert toks[:n] == g["prompt_ids"], "the continuation retokenized differently: pick another prompt"
    body = [t for t in g["tokens"] if t != 50256]
    assert toks[n:] == body, (toks[n:], body)
    lp = r["logprobs"][i][n - 1:]
    assert len(lp) == len(body) and max(abs(x - y) for x, y in zip(lp, g["logprobs"])) < 1e-4, (lp, g["logprobs"])
    assert r["text"][i] == g["prompt"] + g["text"]' "$d/score.json" "$d/ref-greedy.jsonl" \
    || t_fail "tokens_to_generate 0" "status $s: $(head -c 300 "$d/score.json")"
check "a prompt's log-probabilities are the same scored alone and before generating" '
g = json.load(open(a[1]))
for i in range(3):
    n = len(json.loads(open(a[2]).readlines()[i])["prompt_ids"])
    assert max(abs(x - y) for x, y in zip(r["logprobs"][i][:n - 1], g["logprobs"][i][:n - 1])) < 1e-5
' "$d/score.json" "$d/greedy.json" "$d/ref-greedy.jsonl"

# add_BOS: the end-of-document id first, then the prompt; its continuation is that of those ids
s=$(put '{"prompts": ["def f3(x"], "tokens_to_generate": 12, "top_k": 1, "add_BOS": true}' bos)
ids=$($PY -c 'import json, sys; print(json.dumps([50256] + json.loads(open(sys.argv[1]).readline())["prompt_ids"]))' "$d/ref-greedy.jsonl")
curl -s -o "$d/bos-ref.json" "$url/v1/completions" --data-binary '{"prompt": '"$ids"', "max_tokens": 12, "temperature": 0}'
[ "$s" = 200 ] && check "add_BOS: <|endoftext|> first; the continuation of those ids (as /v1/completions gives it)" '
ids = json.loads(a[2])
c = json.load(open(a[1]))["choices"][0]["text"]
assert r["tokens"][0][:len(ids)] == ids and r["text"][0] == "def f3(x" + c, (r, c)' "$d/bos.json" "$d/bos-ref.json" "$ids" \
    || t_fail "add_BOS" "status $s: $(head -c 300 "$d/bos.json")"
s=$(put '{"prompts": [""], "tokens_to_generate": 4, "top_k": 1, "add_BOS": true}' bos-empty)
[ "$s" = 200 ] && check "add_BOS with an empty prompt" 'assert r["tokens"][0][0] == 50256 and len(r["tokens"][0]) == 5, r' "$d/bos-empty.json" \
    || t_fail "add_BOS with an empty prompt" "status $s"

# stop_on_eol / stop_on_double_eol: the greedy continuation up to its first token holding "\n" ("\n\n")
for kind in eol double_eol; do
    s=$(put '{"prompts": '"$plist"', "tokens_to_generate": 20, "top_k": 1, "stop_on_'$kind'": true}' $kind)
    [ "$s" = 200 ] && check "stop_on_$kind: the greedy continuation up to its first token holding a newline$([ $kind = double_eol ] && echo ' pair')" '
g = json.load(open(a[1]))
ref = [json.loads(l) for l in open(a[2])]
nl = "\n\n" if a[3] == "double_eol" else "\n"
stopped = 0
for i, p in enumerate(ref):
    n, seg = len(p["prompt_ids"]), g["segments"][i]
    end = next((j + 1 for j in range(n, len(seg)) if nl in seg[j]), len(seg))
    stopped += end < len(seg)
    assert r["tokens"][i] == g["tokens"][i][:end], (i, r["tokens"][i], g["tokens"][i])
assert stopped or a[3] == "double_eol", "no continuation holds a newline: the test proves nothing"' \
        "$d/$kind.json" "$d/greedy.json" "$d/ref-greedy.jsonl" $kind || t_fail "stop_on_$kind" "status $s"
done

# Megatron's refusals: 400 {"message": ...}
refused() {
    local name=$1 body=$2 want=$3 s
    s=$(put "$body" refused)
    [ "$s" = 400 ] && check "$name: 400, {\"message\": ...}" 'assert list(r) == ["message"] and a[1] in r["message"], (r, a[1])' \
        "$d/refused.json" "$want" || t_fail "$name: 400" "status $s: $(head -c 300 "$d/refused.json")"
}
refused "no prompts" '{"tokens_to_generate": 4}' "prompts argument required"
refused "prompts not a list" '{"prompts": "x"}' "not a list of strings"
refused "no prompt" '{"prompts": []}' "prompts is empty"
refused "an empty prompt without add_BOS" '{"prompts": [""]}' "Empty prompts require add_BOS"
refused "tokens_to_generate 0 without logprobs" '{"prompts": ["x"], "tokens_to_generate": 0}' "implies logprobs"
refused "both top_k and top_p" '{"prompts": ["x"], "top_k": 2, "top_p": 0.5}' "cannot set both"
refused "temperature 0" '{"prompts": ["x"], "temperature": 0}' "temperature must be a number in (0, 100]"
refused "tokens_to_generate above --max-tokens-limit" '{"prompts": ["x"], "tokens_to_generate": 41}' "tokens_to_generate must be an integer"
refused "max_len (retired)" '{"prompts": ["x"], "max_len": 4}' "use tokens_to_generate"
refused "an unknown field" '{"prompts": ["x"], "max_tokens": 4}' 'unknown field "max_tokens"'
refused "malformed JSON" '{"prompts": ["x"' "malformed JSON"
s=$(curl -s -o /dev/null -D "$d/405.h" -w '%{http_code}' -X POST "$url/api" --data-binary '{"prompts": ["x"]}')
[ "$s" = 405 ] && grep -qi '^Allow: PUT' "$d/405.h" && t_pass "POST /api: 405, Allow: PUT" || t_fail "POST /api: 405" "status $s"
kill -TERM $T_SERVE_PID
wait $T_SERVE_PID && t_pass "SIGTERM: exit 0" || t_fail "SIGTERM: exit 0" "$(tail -3 "$d/serve.err")"
