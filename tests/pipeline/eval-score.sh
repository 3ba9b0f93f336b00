#!/usr/bin/env bash
# eval-score.sh: mt-eval --score against the independent float64 PyTorch reference (tests/oracle/gpt_torch.py).
# A tiny GPT-2-vocabulary model is trained a few iterations; three documents are scored: a short one, one
# longer than the sequence length (scored in several windows, the last one partial) and one with non-ASCII
# text. The reference reads model.safetensors with json + numpy, takes the ids mt-tokenize writes for the
# same documents (no BPE of its own), rebuilds mt-eval's windows (the first input of the first window is
# <|endoftext|>, the first input of each later window is the token before it) and sums the log-probabilities.
# Token counts must be equal and log-probabilities agree to 1e-4 relative; for the documents with several
# windows the reference must also be at least 10x closer than the rule that restarts each window from
# <|endoftext|> (so the comparison does tell the two apart).
. "$(dirname "$0")/../lib.sh"
PY=/usr/bin/python3
d=$T_TMP
if ! [ -x "$PY" ]; then t_skip "mt-eval --score" "no /usr/bin/python3"; exit 0; fi
has_torch=1
$PY -c 'import numpy, torch' 2>/dev/null || has_torch=
export OMP_NUM_THREADS=1
tok() { mt-tokenize --vocab-file "$GPT2_VOCAB" --merge-file "$GPT2_MERGES" "$@"; }

# Training data: short Python-like documents.
$PY - >"$d/train.jsonl" <<'EOF'
import json
for i in range(60):
    print(json.dumps({"text": "def f%d(x, y=%d):\n    \"\"\"Scale x by %d.\"\"\"\n    return x * y + %d\n" % (i, i % 7, i, i * i)}))
EOF
tok --append-eod --input "$d/train.jsonl" | mt-index --output-prefix "$d/data" 2>"$d/index.err" \
    || { t_fail "dataset" "$(cat "$d/index.err")"; exit 0; }
if mt-train --num-layers 1 --hidden-size 16 --num-attention-heads 2 --seq-length 16 --max-position-embeddings 16 \
        --micro-batch-size 2 --global-batch-size 4 --train-iters 40 --lr 1e-2 --log-interval 10 --eval-iters 0 \
        --split 80,10,10 --seed 11 --vocab-file "$GPT2_VOCAB" --merge-file "$GPT2_MERGES" \
        --data-path "$d/data_text_document" --data-cache-path "$d/cache" --save "$d/ck" >"$d/train.log" 2>"$d/train.err"
then t_pass "tiny GPT-2-vocabulary model trained"
else t_fail "tiny GPT-2-vocabulary model trained" "$(tail -2 "$d/train.err")"; exit 0; fi

$PY - >"$d/docs.jsonl" <<'EOF'
import json
print(json.dumps({"text": "import os"}))
print(json.dumps({"text": "def mean(xs):\n    total = 0\n    for x in xs:\n        total += x\n"
                          "    return total / len(xs)\n\nprint(mean([1, 2, 3, 4]))\n"}))
print(json.dumps({"text": "# caf\u00e9 na\u00efve \u2014 \u65e5\u672c\u8a9e \u2713 \U0001F600\nx = '\u00fcber'\n"}))
EOF
if mt-eval --load "$d/ck" --score <"$d/docs.jsonl" >"$d/scores.jsonl" 2>"$d/eval.err"
then t_pass "mt-eval --score ran"
else t_fail "mt-eval --score ran" "$(cat "$d/eval.err")"; exit 0; fi
# the documents as a FILE argument, as "-" (standard input) and zstd-compressed: the same scores
mt-eval --load "$d/ck" --score - <"$d/docs.jsonl" >"$d/dash.jsonl" 2>/dev/null
t_cmp "--score -: standard input" "$d/scores.jsonl" "$d/dash.jsonl"
zstd -q -c "$d/docs.jsonl" >"$d/docs.jsonl.zst"
mt-eval --load "$d/ck" --score "$d/docs.jsonl.zst" >"$d/file.jsonl" 2>/dev/null
t_cmp "--score FILE (zstd)" "$d/scores.jsonl" "$d/file.jsonl"
tok --input "$d/docs.jsonl" >"$d/docs.toks" 2>"$d/tok.err" || { t_fail "mt-tokenize" "$(cat "$d/tok.err")"; exit 0; }

if [ -z "$has_torch" ]; then
    t_skip "torch reference" "no /usr/bin/python3 with numpy and torch (make deps installs python3-torch)"
else $PY - "$d/ck" "$d/docs.toks" "$d/scores.jsonl" "$T_TOP/tests/oracle" "$T_FILE" <<'PYEOF'
import json, os, struct, sys
import numpy as np
import torch

ck, toks, scores, oracle, me = sys.argv[1:6]
sys.path.insert(0, oracle)
import gpt_torch as ref

TOL = 1e-4
def report(name, ok, detail):
    print("%s - %s: %s: %s" % ("ok" if ok else "not ok", me, name, detail))

# the checkpoint: meta.json for the shape, model.safetensors read by hand
it = open(os.path.join(ck, "latest_checkpointed_iteration.txt")).read().strip()
rank = os.path.join(ck, "iter_%07d" % int(it), "mp_rank_00")
args = json.load(open(os.path.join(rank, "meta.json")))["args"]
raw = open(os.path.join(rank, "model.safetensors"), "rb").read()
hlen = struct.unpack("<Q", raw[:8])[0]
header = json.loads(raw[8:8 + hlen])
def tensor(name):
    t = header[name]
    assert t["dtype"] == "F32", (name, t["dtype"])
    a, b = t["data_offsets"]
    return np.frombuffer(raw, np.float32, (b - a) // 4, 8 + hlen + a).reshape(t["shape"])
wte = tensor("language_model.embedding.word_embeddings.weight")
cfg = {"num_layers": args["num-layers"], "hidden_size": args["hidden-size"], "num_heads": args["num-attention-heads"],
       "ffn_hidden_size": args["ffn-hidden-size"], "max_position_embeddings": args["max-position-embeddings"],
       "padded_vocab_size": wte.shape[0], "layernorm_epsilon": args["layernorm-epsilon"]}
T = args["seq-length"]
assert not args["no-bias-gelu-fusion"], "the reference implements the tanh GeLU only"
flat = np.concatenate([tensor(name).reshape(-1) for name, _, _ in ref.layout(cfg)])
P = ref.unflatten(cfg, flat)
for p in P.values():
    p.requires_grad_(False)

# the ids mt-tokenize writes (token stream: header, then one 'D' record per document)
b = open(toks, "rb").read()
assert b[:8] == b"MTTOKSv1"
width, vocab, eod, flags, nkeys = struct.unpack_from("<IIiII", b, 12)
p = 32
for _ in range(nkeys):
    p += 4 + struct.unpack_from("<I", b, p)[0]
docs = []
while b[p:p + 1] == b"D":
    _, n = struct.unpack_from("<II", b, p + 1); p += 9
    docs.append(np.frombuffer(b, np.uint16 if width == 2 else np.uint32, n, p).astype(np.int64)); p += width * n
assert b[p:p + 1] == b"E"
got = [json.loads(l) for l in open(scores)]
report("one score line per document", len(got) == len(docs) == 3, "%d lines, %d documents" % (len(got), len(docs)))

def logprob(ids, restart=False):
    """mt-eval's windows: predictions pos..pos+m-1 from inputs eod/ids[pos-1], ids[pos..pos+m-2].
    restart: every window's first input is <|endoftext|> (the rule mt-eval must not follow)."""
    lp, windows = 0.0, 0
    for pos in range(0, len(ids), T):
        m = min(T, len(ids) - pos)
        inp = np.concatenate([[eod] if pos == 0 or restart else ids[pos - 1:pos], ids[pos:pos + m - 1]])
        tgt = ids[pos:pos + m]
        with torch.no_grad():
            _, tl = ref.forward(cfg, P, torch.tensor(inp).view(1, m), torch.tensor(tgt).view(1, m),
                                torch.ones(1, m, dtype=torch.float64), ref.Dropout(None, 0, 0))
        lp -= tl.sum().item()
        windows += 1
    return lp, windows

torch.set_num_threads(1)
names = ("short document", "document longer than --seq-length", "non-ASCII document")
for name, ids, g in zip(names, docs, got):
    lp, w = logprob(ids)
    rel = abs(g["logprob"] - lp) / abs(lp)
    ok = g["tokens"] == len(ids) and rel < TOL and abs(g["loss"] - (-lp / len(ids))) <= TOL * abs(lp / len(ids))
    report(name, ok, "%d tokens in %d window%s: mt-eval %.9g, torch %.9g, relative error %.2e"
           % (len(ids), w, "s" if w > 1 else "", g["logprob"], lp, rel) if ok else
           "tokens %s vs %d, logprob %.9g vs %.9g (relative %.2e), loss %.9g"
           % (g["tokens"], len(ids), g["logprob"], lp, rel, g["loss"]))
    if w > 1:   # the comparison tells the window rules apart: the other rule is much further off
        alt = abs(g["logprob"] - logprob(ids, restart=True)[0])
        report(name + ": later windows start from the token before them", abs(g["logprob"] - lp) * 10 < alt,
               "restarting from <|endoftext|> would be off by %.3g, the reference is off by %.3g" % (alt, abs(g["logprob"] - lp)))
PYEOF
fi

# Bad input on stdin: one line naming the line, non-zero exit, and the documents before it scored.
printf '%s\n' '{"text": "ok"}' '{"text": "ok", }' | mt-eval --load "$d/ck" --score >"$d/bad.out" 2>"$d/bad.err"
rc=$?
[ $rc != 0 ] && [ "$(wc -l <"$d/bad.err")" = 1 ] && grep -q '<stdin>: line 2: ' "$d/bad.err" && [ "$(wc -l <"$d/bad.out")" = 1 ] \
    && t_pass "--score: malformed JSON line is a one-line error naming the line" \
    || t_fail "--score: malformed JSON" "rc $rc: $(cat "$d/bad.err")"
printf '%s\n' '{"content": "x"}' | mt-eval --load "$d/ck" --score >/dev/null 2>"$d/bad.err"
grep -q "<stdin>: line 1: missing key 'text'" "$d/bad.err" && t_pass "--score: missing key named" || t_fail "--score: missing key" "$(cat "$d/bad.err")"

# The input rules of mt-tokenize (one JSON-lines reader): blank lines are no documents, a lone surrogate
# escape is U+FFFD, bad lines give mt-tokenize's messages, a runaway line is bounded by --max-line-bytes.
printf '{"text": "ab"}\n\n  \r\n{"text": "a\\ud800b"}\n{"text": "a\xef\xbf\xbdb"}\n' >"$d/rules.jsonl"
if mt-eval --load "$d/ck" --score <"$d/rules.jsonl" >"$d/rules.out" 2>"$d/rules.err"
then t_pass "--score: blank lines and a lone surrogate escape are accepted"
else t_fail "--score: blank lines and a lone surrogate escape" "$(cat "$d/rules.err")"; fi
[ "$(wc -l <"$d/rules.out")" = 3 ] && [ "$(sed -n 2p "$d/rules.out")" = "$(sed -n 3p "$d/rules.out")" ] \
    && t_pass "--score: one line per document, blank lines skipped, \\ud800 scored as U+FFFD" \
    || t_fail "--score: blank lines skipped, \\ud800 as U+FFFD" "$(cat "$d/rules.out")"
tok --input "$d/rules.jsonl" 2>/dev/null | tok --decode >"$d/rules.tok" 2>/dev/null
[ "$(wc -l <"$d/rules.tok")" = 3 ] && t_pass "mt-tokenize reads the same three documents" \
    || t_fail "mt-tokenize reads the same three documents" "$(cat "$d/rules.tok")"
for input in '{"text": 12}' '[1]' '{"text": "x"' ; do
    printf '%s\n' "$input" >"$d/one.jsonl"
    tok --input "$d/one.jsonl" 2>&1 >/dev/null | sed 's/^mt-tokenize: [^:]*: //' >"$d/tok.msg"
    mt-eval --load "$d/ck" --score <"$d/one.jsonl" 2>&1 >/dev/null | sed 's/^mt-eval: [^:]*: //' >"$d/eval.msg"
    [ -s "$d/eval.msg" ] && cmp -s "$d/tok.msg" "$d/eval.msg" && t_pass "--score: $input: mt-tokenize's message" \
        || t_fail "--score: $input: mt-tokenize's message" "mt-eval '$(cat "$d/eval.msg")', mt-tokenize '$(cat "$d/tok.msg")'"
done
printf '{"text": "a"}\n{"content": "x"}\n' | mt-eval --load "$d/ck" --score --json-key content >"$d/key.out" 2>"$d/key.err"
grep -q "<stdin>: line 1: missing key 'content'" "$d/key.err" && t_pass "--json-key: missing key named with its line" \
    || t_fail "--json-key: missing key" "$(cat "$d/key.err")"
mt-eval --load "$d/ck" --score --max-line-bytes 4096 </dev/zero >/dev/null 2>"$d/zero.err"
rc=$?
[ $rc = 1 ] && [ "$(wc -l <"$d/zero.err")" = 1 ] && grep -q '<stdin>: line 1: longer than 4096 bytes' "$d/zero.err" \
    && t_pass "--score --max-line-bytes: a runaway line is a one-line error" \
    || t_fail "--score --max-line-bytes" "rc $rc: $(head -c 300 "$d/zero.err")"

# NaN weights: the loss is NaN, written as null (JSON has no NaN), as --metrics-file does.
cp -r "$d/ck" "$d/cknan"
$PY - "$d/cknan" <<'EOF'
import json, os, struct, sys
ck = sys.argv[1]
it = open(os.path.join(ck, "latest_checkpointed_iteration.txt")).read().strip()
path = os.path.join(ck, "iter_%07d" % int(it), "mp_rank_00", "model.safetensors")
raw = bytearray(open(path, "rb").read())
hlen = struct.unpack("<Q", raw[:8])[0]
a, b = json.loads(raw[8:8 + hlen])["language_model.encoder.final_layernorm.weight"]["data_offsets"]
raw[8 + hlen + a:8 + hlen + b] = struct.pack("<f", float("nan")) * ((b - a) // 4)
open(path, "wb").write(raw)
EOF
strict_json() { $PY -c '
import json, sys
def no(c): raise ValueError("not JSON: " + c)
for l in open(sys.argv[1]):
    o = json.loads(l, parse_constant=no)
    assert o["loss"] is None and o["ppl"] is None, o
' "$1"; }
printf '{"text": "import os"}\n' | mt-eval --load "$d/cknan" --score >"$d/nan.out" 2>"$d/nan.err"
strict_json "$d/nan.out" 2>"$d/nan.py" && t_pass "--score: NaN loss written as null" \
    || t_fail "--score: NaN loss written as null" "$(cat "$d/nan.out" "$d/nan.err") $(tail -1 "$d/nan.py")"
mt-eval --load "$d/cknan" --eval-split all --json >"$d/nan.out" 2>"$d/nan.err"
strict_json "$d/nan.out" 2>"$d/nan.py" && t_pass "--json: NaN loss written as null" \
    || t_fail "--json: NaN loss written as null" "$(cat "$d/nan.out" "$d/nan.err") $(tail -1 "$d/nan.py")"
