#!/usr/bin/env bash
# convert-llama.sh: mt-ckpt-convert between Hugging Face LlamaForCausalLM and mt checkpoints, against
# transformers (< 4.45, build/venv-hf; skipped with a message only when PyPI cannot be reached). Random
# Llama models made by transformers (3 layers, 4 heads in 2 query groups, rope_theta 500000, untied or
# tied, fp32 / bf16 / fp16, one file or sharded, with a byte-level BPE tokenizer.json) go HF -> mt -> HF
# byte for byte (sharded: tensor for tensor), transformers loads the export with no missing or unexpected
# key and its logits equal the original's; every tensor of the mt checkpoint, at TP=1 and TP=2, equals an
# independent numpy derivation of Megatron's layout from the HF tensors (tests/oracle/llama_oracle.py:
# grouped QKV rows, [gate; up] with each rank's share of both halves), so a swapped gate/up or a wrong
# group order fails here even though the round trip would undo it; resharding TP=2 -> TP=1 equals the
# direct conversion; PP=3 goes back byte for byte. Unsupported config.json settings are one-line errors
# naming the key, nothing left under --save; the model's programs refuse the options by name.
. "$(dirname "$0")/../lib.sh"
PY=/usr/bin/python3
d=$T_TMP
if ! HPY=$("$T_TOP/tests/oracle/venv-hf.sh" 2>"$d/venv.err"); then
    t_skip "transformers" "unavailable: $(head -c 300 "$d/venv.err")"; exit 0
fi
oracle() { "$HPY" -W ignore "$T_TOP/tests/oracle/llama_oracle.py" "$@"; }
err1() { "$@" >"$d/o" 2>"$d/e"; local rc=$?; [ $rc != 0 ] && [ "$(wc -l <"$d/e")" -eq 1 ]; }

oracle make "$d/a" --tokenizer >/dev/null 2>"$d/e" || { t_fail "make a Llama model (fp32, untied, GQA)" "$(tail -1 "$d/e")"; exit 0; }
oracle make "$d/bf" --tokenizer --dtype bf16 --seed 2 >/dev/null 2>"$d/e" || t_fail "make a bf16 Llama model" "$(tail -1 "$d/e")"
oracle make "$d/sh" --tokenizer --dtype fp16 --shard 40000 --tie --seed 3 >/dev/null 2>"$d/e" || t_fail "make a sharded tied fp16 Llama model" "$(tail -1 "$d/e")"
[ -f "$d/sh/model.safetensors.index.json" ] || t_fail "the fp16 model is sharded" "no index"

# ---- HF -> mt: Megatron's layout ----
layout() {   # NAME HF CKPT TP
    if oracle layout "$2" "$3/release" "$4" >"$d/c" 2>&1; then t_pass "$1: every tensor is Megatron's layout of the HF tensors ($(tail -1 "$d/c"))"
    else t_fail "$1: every tensor is Megatron's layout of the HF tensors" "$(tail -1 "$d/c")"; fi
}
t_ok "--from hf (fp32, untied, 2 query groups)" mt-ckpt-convert --from hf --in "$d/a" --save "$d/ck-a"
layout "TP=1" "$d/a" "$d/ck-a" 1
$PY - "$d/ck-a/release/mp_rank_00/meta.json" >"$d/c" 2>&1 <<'PYEOF' && t_pass "meta.json args: Megatron's flags for the config" || t_fail "meta.json args" "$(tail -1 "$d/c")"
import json, sys
a = json.load(open(sys.argv[1]))["args"]
want = {"normalization": "RMSNorm", "position-embedding-type": "rope", "rotary-base": 500000, "rotary-percent": 1.0,
        "swiglu": True, "group-query-attention": True, "num-query-groups": 2, "untie-embeddings-and-output-weights": True,
        "disable-bias-linear": True, "ffn-hidden-size": 96, "norm-epsilon": 1e-5, "tokenizer-type": "HuggingFaceTokenizer",
        "vocab-size": 301, "make-vocab-size-divisible-by": 1}
bad = {k: (a.get(k), v) for k, v in want.items() if a.get(k) != v}
assert not bad, bad
assert a["tokenizer-model"].endswith("ck-a"), a["tokenizer-model"]
PYEOF
for f in tokenizer.json tokenizer_config.json special_tokens_map.json; do
    t_cmp "the checkpoint holds a copy of $f" "$d/a/$f" "$d/ck-a/$f"
done

# ---- mt -> HF: byte for byte, loadable, same logits ----
t_ok "--to hf" mt-ckpt-convert --load "$d/ck-a" --to hf --out "$d/a-back"
t_cmp "fp32: HF -> mt -> HF model.safetensors byte-identical" "$d/a/model.safetensors" "$d/a-back/model.safetensors"
for f in tokenizer.json tokenizer_config.json special_tokens_map.json; do t_cmp "$f copied back" "$d/a/$f" "$d/a-back/$f"; done
$PY - "$d/a/config.json" "$d/a-back/config.json" "$d/a-back/generation_config.json" >"$d/c" 2>&1 <<'PYEOF' && t_pass "config.json: the model's fields as transformers wrote them" || t_fail "config.json" "$(tail -1 "$d/c")"
import json, sys
a, b, g = (json.load(open(p)) for p in sys.argv[1:])
keys = ["architectures", "model_type", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
        "num_key_value_heads", "rms_norm_eps", "rope_theta", "rope_scaling", "max_position_embeddings", "tie_word_embeddings",
        "vocab_size", "attention_bias", "mlp_bias", "hidden_act", "bos_token_id", "eos_token_id", "torch_dtype"]
bad = {k: (a.get(k), b.get(k)) for k in keys if a.get(k) != b.get(k)}
assert not bad, bad
assert g["bos_token_id"] == 1 and g["eos_token_id"] == 2, g
PYEOF
if oracle logits "$d/a" "$d/a-back" >"$d/c" 2>&1; then t_pass "transformers loads the export (no missing or unexpected keys), logits equal the original's ($(tail -1 "$d/c"))"
else t_fail "transformers loads the export, logits equal" "$(tail -1 "$d/c")"; fi

rt() {   # NAME SRC: --from hf then --to hf with the defaults
    local name=$1 src=$2
    rm -rf "$d/rt-ck" "$d/rt-hf"
    if mt-ckpt-convert --from hf --in "$src" --save "$d/rt-ck" 2>"$d/e" && mt-ckpt-convert --load "$d/rt-ck" --to hf --out "$d/rt-hf" 2>>"$d/e"; then
        if [ -f "$src/model.safetensors" ]; then t_cmp "$name: HF -> mt -> HF model.safetensors byte-identical" "$src/model.safetensors" "$d/rt-hf/model.safetensors"
        elif oracle logits "$src" "$d/rt-hf" >"$d/c" 2>&1; then t_pass "$name: HF -> mt -> HF loads with every tensor, logits equal ($(tail -1 "$d/c"))"
        else t_fail "$name: HF -> mt -> HF loads, logits equal" "$(tail -1 "$d/c")"; fi
    else t_fail "$name: HF -> mt -> HF" "$(cat "$d/e")"; fi
}
rt "bf16" "$d/bf"
rt "fp16, sharded, tied" "$d/sh"
"$HPY" -W ignore - "$d/sh" "$d/rt-hf" >"$d/c" 2>&1 <<'PYEOF' && t_pass "sharded: the one model.safetensors holds the shards' tensors bit for bit, no lm_head (tied)" || t_fail "sharded: tensors bit-identical" "$(tail -1 "$d/c")"
import json, os, sys, torch
from safetensors.torch import load_file
src = {}
for f in set(json.load(open(os.path.join(sys.argv[1], "model.safetensors.index.json")))["weight_map"].values()):
    src.update(load_file(os.path.join(sys.argv[1], f)))
out = load_file(os.path.join(sys.argv[2], "model.safetensors"))
assert set(src) == set(out) and "lm_head.weight" not in out, sorted(set(src) ^ set(out))
bits = lambda t: t.contiguous().view(torch.int16)   # fp16: compare the bits
assert all(src[k].dtype == out[k].dtype == torch.float16 and torch.equal(bits(src[k]), bits(out[k])) for k in src)
PYEOF

# ---- tensor and pipeline layouts ----
t_ok "--from hf --target-tensor-parallel-size 2" mt-ckpt-convert --from hf --in "$d/a" --save "$d/ck-tp2" --target-tensor-parallel-size 2
layout "TP=2 (the vocabulary 301 padded to 302, groups and gate/up rows split)" "$d/a" "$d/ck-tp2" 2
if mt-ckpt-convert --load "$d/ck-tp2" --to hf --out "$d/a-tp2" 2>"$d/e"; then
    t_cmp "TP=2 -> HF: model.safetensors byte-identical" "$d/a/model.safetensors" "$d/a-tp2/model.safetensors"
else t_fail "TP=2 -> HF" "$(cat "$d/e")"; fi
if mt-ckpt-convert --load "$d/ck-tp2" --save "$d/ck-tp1" 2>"$d/e"; then
    t_cmp "TP=2 resharded to TP=1 equals the direct conversion" "$d/ck-a/release/mp_rank_00/model.safetensors" "$d/ck-tp1/release/mp_rank_00/model.safetensors"
else t_fail "TP=2 resharded to TP=1" "$(cat "$d/e")"; fi
t_ok "bf16 tied --from hf at TP=2" mt-ckpt-convert --from hf --in "$d/sh" --save "$d/ck-sh2" --target-tensor-parallel-size 2
layout "tied, TP=2" "$d/sh" "$d/ck-sh2" 2
if mt-ckpt-convert --from hf --in "$d/a" --save "$d/ck-pp3" --target-pipeline-parallel-size 3 2>"$d/e" &&
    mt-ckpt-convert --load "$d/ck-pp3" --to hf --out "$d/a-pp3" 2>>"$d/e"; then
    t_cmp "PP=3 (a layer a stage) -> HF: byte-identical" "$d/a/model.safetensors" "$d/a-pp3/model.safetensors"
else t_fail "PP=3" "$(cat "$d/e")"; fi
if err1 mt-ckpt-convert --from hf --in "$d/a" --save "$d/ck-tp4" --target-tensor-parallel-size 4 && grep -q -- "--num-query-groups (2)" "$d/e" && [ ! -e "$d/ck-tp4/release" ]
then t_pass "TP=4 over 2 query groups: one-line error naming --num-query-groups, nothing written"
else t_fail "TP=4 over 2 query groups" "$(cat "$d/e")"; fi

# ---- refusals ----
refuse() {   # NAME KEY=JSON WORD: the config.json setting is refused naming WORD, nothing saved
    rm -rf "$d/bad" "$d/ck-bad"
    cp -r "$d/bf" "$d/bad"
    "$HPY" - "$d/bad/config.json" "$2" <<'PYEOF'
import json, sys
c = json.load(open(sys.argv[1])); k, v = sys.argv[2].split("=", 1); c[k] = json.loads(v)
json.dump(c, open(sys.argv[1], "w"), indent=2)
PYEOF
    if err1 mt-ckpt-convert --from hf --in "$d/bad" --save "$d/ck-bad" && grep -q -- "$3" "$d/e" && [ ! -e "$d/ck-bad/release" ]
    then t_pass "refused: $1 ($(cat "$d/e"))"
    else t_fail "refused: $1" "$(cat "$d/e")"; fi
}
refuse "rope_scaling" 'rope_scaling={"rope_type": "llama3", "factor": 8.0}' '"rope_scaling"'
refuse "head_dim" 'head_dim=32' '"head_dim"'
refuse "attention_bias" 'attention_bias=true' '"attention_bias"'
refuse "mlp_bias" 'mlp_bias=true' '"mlp_bias"'
refuse "hidden_act" 'hidden_act="gelu"' '"hidden_act"'
refuse "rope_theta not an integer" 'rope_theta=10000.5' '"rope_theta"'
refuse "num_key_value_heads" 'num_key_value_heads=3' '"num_key_value_heads"'
refuse "architectures" 'architectures=["LlamaModel"]' 'architectures'
refuse "tied config, lm_head of its own" 'tie_word_embeddings=true' 'lm_head.weight differs'


# ---- the model's programs with its tokenizer.json ----
# a Llama model whose tokenizer.json is of Llama 3's kind (Split regex, ByteLevel, <s> put first by the
# post-processor), trained on the project's test documents; the documents scored are those whose
# characters this Python's Unicode assigns (the tokenizers library follows an older Unicode than mt's 16.0),
# and a long one from the README, scored in windows of the model's 128 positions
docs=$T_TOP/tests/golden/gpt2.jsonl
oracle make "$d/t" --tokenizer --corpus "$docs" --vocab 1000 --positions 128 --seed 4 >/dev/null 2>"$d/e" \
    || t_fail "make a Llama model with a trained tokenizer.json" "$(tail -1 "$d/e")"
"$HPY" - "$docs" "$T_TOP/README.md" >"$d/docs.jsonl" <<'PYEOF'
import json, sys, unicodedata
for l in open(sys.argv[1], encoding="utf-8"):
    t = json.loads(l)["text"]
    if all(unicodedata.category(c) != "Cn" for c in t):
        print(json.dumps({"text": t}))
print(json.dumps({"text": open(sys.argv[2], encoding="utf-8").read()[:1500]}))
PYEOF
t_ok "--from hf with the tokenizer.json" mt-ckpt-convert --from hf --in "$d/t" --save "$d/ck-t"
mt-tokenize --tokenizer-type HuggingFaceTokenizer --tokenizer-model "$d/t" --quiet "$d/docs.jsonl" \
    | mt-index --output-prefix "$d/docs" 2>/dev/null && mt-index --dump "$d/docs_text_document" >"$d/ids.txt"
for src in ck-t t; do
    if mt-eval --load "$d/$src" --score --logits "$d/lg-$src.f32" <"$d/docs.jsonl" >"$d/sc-$src.jsonl" 2>"$d/e" &&
        oracle score "$d/t" "$d/docs.jsonl" "$d/ids.txt" "$d/lg-$src.f32" "$d/sc-$src.jsonl" >"$d/c" 2>&1; then
        t_pass "mt-eval --score --logits --load $src: the ids of transformers = tokenizers = mt-tokenize, scored after the BOS; logits = transformers' to 1e-5 of the largest ($(tail -1 "$d/c"))"
    else t_fail "mt-eval --score --logits --load $src = transformers" "$(cat "$d/e") $(tail -1 "$d/c")"; fi
done

# greedy generation, 64 tokens on several prompts, token for token and decoded text (byte-level) alike
printf '%s\n' "The quick brown fox" "Grüße aus Köln, l'été" "def fib(n: int) -> int:" "你好，世界！" "SELECT id FROM users" >"$d/prompts.txt"
cmpgen() {   # MT HF: the prompts' ids, new tokens, stop reason and text
    $PY - "$1" "$2" <<'PYEOF'
import json, sys
a = [json.loads(l) for l in open(sys.argv[1])]
b = [json.loads(l) for l in open(sys.argv[2])]
assert len(a) == len(b) > 0, (len(a), len(b))
n = eos = 0
for x, y in zip(a, b):
    assert x["prompt_ids"] == y["prompt_ids"], (x["prompt_ids"], y["prompt_ids"])
    assert x["tokens"] == y["tokens"], (x["prompt_ids"], x["tokens"], y["tokens"])
    assert x["text"] == y["text"], (x["text"], y["text"])
    assert x["stop"] == ("eod" if len(y["tokens"]) < 64 else "length"), x["stop"]
    n += len(x["tokens"])
    eos += x["stop"] == "eod"
print("%d prompts, %d tokens, %d stopped at eos" % (len(a), n, eos))
PYEOF
}
gen() {   # NAME HF LOAD
    oracle generate "$2" 64 <"$d/prompts.txt" >"$d/hf-gen.jsonl" 2>"$d/e" || t_fail "$1: model.generate ran" "$(tail -1 "$d/e")"
    if mt-generate --load "$3" --greedy --max-new-tokens 64 --json --batch-size 1 <"$d/prompts.txt" >"$d/mt-gen.jsonl" 2>"$d/e" &&
        cmpgen "$d/mt-gen.jsonl" "$d/hf-gen.jsonl" >"$d/c" 2>&1; then
        t_pass "$1: greedy mt-generate = model.generate(do_sample=False), ids and decoded text ($(tail -1 "$d/c"))"
    else t_fail "$1: greedy mt-generate = model.generate" "$(cat "$d/e") $(tail -1 "$d/c")"; fi
}
gen "converted checkpoint" "$d/t" "$d/ck-t"
gen "HF directory" "$d/t" "$d/t"
# a moved checkpoint keeps its tokenizer: tokenizer.json of its own directory, not the path recorded
mv "$d/ck-t" "$d/ck-moved"
gen "moved checkpoint" "$d/t" "$d/ck-moved"
# the end of text: a token that greedy generation reaches made the eos (tokenizer_config.json's eos_token,
# the configs' eos_token_id); both stop there
cp -r "$d/t" "$d/te"
eos=$($PY -c 'import json, sys; print(json.loads(open(sys.argv[1]).readline())["tokens"][5])' "$d/hf-gen.jsonl")
oracle set-eos "$d/te" "$eos" >/dev/null
gen "eos_token $eos" "$d/te" "$d/te"
grep -q '"eod"' "$d/mt-gen.jsonl" || t_fail "eos_token $eos: a continuation stopped at it" "$(head -c 300 "$d/mt-gen.jsonl")"

# mt-train on data tokenized with the same tokenizer.json: the vocabulary and end of document are the
# tokenizer's (992 ids, eos </s> = 2, appended by --append-eod)
mt-tokenize --tokenizer-type HuggingFaceTokenizer --tokenizer-model "$d/t" --append-eod --quiet "$d/docs.jsonl" "$docs" \
    | mt-index --output-prefix "$d/tr" 2>/dev/null
$PY - "$d/tr_text_document" <<'PYEOF' >"$d/c" 2>&1 || t_fail "mt-tokenize --append-eod puts </s> (2) after each document" "$(tail -1 "$d/c")"
import numpy as np, sys
ids = np.fromfile(sys.argv[1] + ".bin", np.uint16)
assert ids.max() < 992 and (ids == 2).sum() >= 150 and ids[0] == 1, (ids.max(), (ids == 2).sum(), ids[:3])
PYEOF
if mt-train --num-layers 2 --hidden-size 64 --num-attention-heads 4 --group-query-attention --num-query-groups 2 \
        --normalization RMSNorm --position-embedding-type rope --rotary-base 500000 --swiglu --ffn-hidden-size 96 \
        --untie-embeddings-and-output-weights --disable-bias-linear --seq-length 64 --max-position-embeddings 128 \
        --micro-batch-size 4 --global-batch-size 8 --train-iters 6 --lr 1e-3 --log-interval 2 --eval-iters 0 \
        --split 100,0,0 --make-vocab-size-divisible-by 32 --tokenizer-type HuggingFaceTokenizer --tokenizer-model "$d/t" \
        --data-path "$d/tr_text_document" --data-cache-path "$d/cache" --save "$d/ck-tr" >"$d/tr.log" 2>"$d/tr.err"
then t_pass "mt-train --tokenizer-type HuggingFaceTokenizer trains a Llama-architecture model"
else t_fail "mt-train --tokenizer-type HuggingFaceTokenizer" "$(tail -2 "$d/tr.err")"; fi
grep -q 'padded vocab (size: 992) with 0 dummy tokens (new size: 992)' "$d/tr.log" \
    && t_pass "mt-train: the vocabulary is the tokenizer's 992 ids" || t_fail "mt-train: the tokenizer's vocabulary" "$(grep 'padded vocab' "$d/tr.log")"
if mt-generate --load "$d/ck-tr" --greedy --max-new-tokens 8 --json "Grüße aus Köln" >"$d/c" 2>"$d/e" &&
    grep -q '"prompt_ids": \[1, ' "$d/c"; then t_pass "mt-generate from the trained checkpoint: its tokenizer.json from meta.json, BOS first"
else t_fail "mt-generate from the trained checkpoint" "$(cat "$d/e") $(head -c 200 "$d/c")"; fi
err1 mt-train --num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 64 --max-position-embeddings 128 \
    --micro-batch-size 4 --train-iters 1 --lr 1e-3 --tokenizer-type HuggingFaceTokenizer --data-path "$d/tr_text_document" \
    && grep -q -- '--tokenizer-model' "$d/e" && t_pass "mt-train HuggingFaceTokenizer without --tokenizer-model: one line" \
    || t_fail "mt-train HuggingFaceTokenizer without --tokenizer-model" "$(cat "$d/e")"

# unsupported tokenizers: one line naming the type and the file
cp -r "$d/t" "$d/sp"
$PY - "$d/sp/tokenizer.json" <<'PYEOF'
import json, sys
j = json.load(open(sys.argv[1])); j["model"]["byte_fallback"] = True   # SentencePiece-style BPE
json.dump(j, open(sys.argv[1], "w"))
PYEOF
err1 mt-generate --load "$d/sp" --max-new-tokens 4 "x" && grep -q 'HuggingFaceTokenizer' "$d/e" && grep -q "$d/sp/tokenizer.json" "$d/e" \
    && t_pass "refused: a byte_fallback tokenizer.json ($(cat "$d/e"))" || t_fail "refused: a byte_fallback tokenizer.json" "$(cat "$d/e")"
err1 mt-train --num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 64 --max-position-embeddings 128 \
    --micro-batch-size 4 --train-iters 1 --lr 1e-3 --tokenizer-type TikTokenizer --tokenizer-model "$d/sp/tokenizer.json" \
    --data-path "$d/tr_text_document" && grep -q 'TikTokenizer' "$d/e" && grep -q "$d/sp/tokenizer.json" "$d/e" \
    && t_pass "refused: TikTokenizer of a file that is not a ranks file ($(cat "$d/e"))" || t_fail "refused: TikTokenizer of a bad file" "$(cat "$d/e")"
