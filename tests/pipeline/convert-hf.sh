#!/usr/bin/env bash
# convert-hf.sh: mt-ckpt-convert against Hugging Face transformers (< 4.45, from PyPI into build/venv-hf
# over Debian's torch; skipped with a message only when PyPI cannot be reached). A model trained by
# mt-train, exported, is loaded by transformers with its tokenizer: the tokenizer gives mt-tokenize's ids
# and the logits equal mt-eval's to 1e-4 on real text, as do those of an independent float64 forward pass
# (tests/oracle/hf_ref.py); greedy mt-generate equals model.generate(do_sample=False) token for token for
# 64 tokens on several prompts. Models written by transformers' save_pretrained (fp32, fp16, sharded,
# without the "transformer." prefix) go Hugging Face -> mt -> Hugging Face byte for byte; mt-eval and
# mt-generate read such a directory directly and as a converted checkpoint alike; mt-train --finetune
# continues from a converted checkpoint. Bad input is a one-line error with nothing left under the final
# name.
. "$(dirname "$0")/../lib.sh"
PY=/usr/bin/python3
d=$T_TMP
export OMP_NUM_THREADS=2
if ! HPY=$("$T_TOP/tests/oracle/venv-hf.sh" 2>"$d/venv.err"); then
    t_skip "transformers" "unavailable: $(head -c 300 "$d/venv.err")"; exit 0
fi
export PYTHONPATH=$T_TOP/tests/oracle
oracle() { "$HPY" -W ignore "$T_TOP/tests/oracle/hf_oracle.py" "$@"; }
err1() { "$@" >"$d/o" 2>"$d/e"; local rc=$?; [ $rc != 0 ] && [ "$(wc -l <"$d/e")" -eq 1 ]; }

# ---- an mt-trained model, exported ----
# a fixed corpus of English-like paragraphs (tests/oracle/prose.py), a paragraph per document
$PY "$T_TOP/tests/oracle/prose.py" 1200 >"$d/train.jsonl"
mt-tokenize --vocab-file "$GPT2_VOCAB" --merge-file "$GPT2_MERGES" --append-eod --quiet --input "$d/train.jsonl" \
    | mt-index --output-prefix "$d/data" 2>"$d/index.err" || { t_fail "dataset" "$(cat "$d/index.err")"; exit 0; }
if mt-train --num-layers 2 --hidden-size 48 --num-attention-heads 4 --seq-length 96 --max-position-embeddings 96 \
        --micro-batch-size 4 --global-batch-size 8 --train-iters 40 --lr 5e-3 --log-interval 20 --eval-iters 0 \
        --split 100,0,0 --seed 5 --vocab-file "$GPT2_VOCAB" --merge-file "$GPT2_MERGES" \
        --data-path "$d/data_text_document" --data-cache-path "$d/cache" --save "$d/ck" >"$d/train.log" 2>"$d/train.err"
then t_pass "tiny GPT-2 model trained"
else t_fail "tiny GPT-2 model trained" "$(tail -2 "$d/train.err")"; exit 0; fi

t_ok "--to hf" mt-ckpt-convert --load "$d/ck" --to hf --out "$d/hf"
for f in model.safetensors config.json generation_config.json vocab.json merges.txt tokenizer_config.json; do
    [ -f "$d/hf/$f" ] || t_fail "--to hf writes $f" "absent"
done
ls -a "$d" | grep -q '\.tmp\.' && t_fail "no temporary left beside --out" "$(ls -a "$d")"

# documents of real text not trained on: the man page of mt(7) and the kernel README
$PY - "$T_TOP" >"$d/docs.jsonl" <<'PYEOF'
import json, sys
top = sys.argv[1]
for f in (top + "/man/mt.7", top + "/kernels/README.md", top + "/tests/oracle/hf_ref.py"):
    text = open(f, encoding="utf-8").read()
    for p in [p for p in text.split("\n\n") if len(p) > 80][:3]:
        print(json.dumps({"text": p[:160]}))
PYEOF
mt-tokenize --vocab-file "$GPT2_VOCAB" --merge-file "$GPT2_MERGES" --quiet --input "$d/docs.jsonl" \
    | mt-index --output-prefix "$d/docs" 2>/dev/null && mt-index --dump "$d/docs_text_document" >"$d/ids.txt"
mt-eval --load "$d/ck" --score --logits "$d/logits.f32" <"$d/docs.jsonl" >"$d/score.jsonl" 2>"$d/eval.err" \
    || t_fail "mt-eval --score --logits" "$(cat "$d/eval.err")"
if oracle logits "$d/hf" "$d/docs.jsonl" "$d/logits.f32" "$d/ids.txt" >"$d/logits.txt" 2>"$d/logits.err"; then
    t_pass "transformers loads the export: tokenizer ids = mt-tokenize's, logits = mt-eval's and an independent forward's to 1e-4 ($(cat "$d/logits.txt"))"
else t_fail "transformers: logits and tokenizer" "$(tail -3 "$d/logits.err") $(cat "$d/logits.txt")"; fi

# the export against transformers' own names and values: every tensor of the mt checkpoint equals the
# tensor of the model transformers loads that the converter's table (spec 6.3, written in the oracle)
# maps it to
if oracle mapping "$d/hf" "$d/ck/iter_0000040" >"$d/map.txt" 2>"$d/map.err"; then
    t_pass "mt -> HF: every mt tensor equals the transformers tensor it maps to ($(cat "$d/map.txt"))"
else t_fail "mt -> HF: every mt tensor equals the transformers tensor it maps to" "$(tail -1 "$d/map.err")"; fi

# greedy generation: 64 tokens, several prompts
printf '%s\n' "The tokenizer" "mt-train reads" "Checkpoints are written" "def main():" >"$d/prompts.txt"
oracle generate "$d/hf" 64 <"$d/prompts.txt" >"$d/hf-gen.jsonl" 2>"$d/hf-gen.err" || t_fail "model.generate ran" "$(tail -2 "$d/hf-gen.err")"
mt-generate --load "$d/ck" --greedy --max-new-tokens 64 --json --batch-size 1 <"$d/prompts.txt" >"$d/mt-gen.jsonl" 2>"$d/mt-gen.err" \
    || t_fail "mt-generate ran" "$(cat "$d/mt-gen.err")"
mt-generate --load "$d/hf" --greedy --max-new-tokens 64 --json --batch-size 1 <"$d/prompts.txt" >"$d/mt-gen-hf.jsonl" 2>"$d/e" \
    || t_fail "mt-generate --load HF directory ran" "$(cat "$d/e")"
cmpgen() {
    $PY - "$1" "$2" <<'PYEOF'
import json, sys
a = [json.loads(l) for l in open(sys.argv[1])]
b = [json.loads(l) for l in open(sys.argv[2])]
assert len(a) == len(b) == 4, (len(a), len(b))
n = 0
for x, y in zip(a, b):
    assert x["prompt_ids"] == y["prompt_ids"], (x["prompt_ids"], y["prompt_ids"])
    want = y["tokens"]
    if 50256 in want:                       # transformers keeps the end of text it stops at
        want = want[:want.index(50256)]
    assert x["tokens"] == want, (x["prompt_ids"], x["tokens"], want)
    n += len(want)
print("%d tokens" % n)
PYEOF
}
if cmpgen "$d/mt-gen.jsonl" "$d/hf-gen.jsonl" >"$d/c" 2>&1; then t_pass "greedy mt-generate = model.generate(do_sample=False), 64 tokens x 4 prompts ($(cat "$d/c"))"
else t_fail "greedy mt-generate = model.generate" "$(tail -2 "$d/c")"; fi
if cmpgen "$d/mt-gen-hf.jsonl" "$d/hf-gen.jsonl" >"$d/c" 2>&1; then t_pass "mt-generate on the HF directory = model.generate"
else t_fail "mt-generate on the HF directory = model.generate" "$(tail -2 "$d/c")"; fi
mt-generate --load "$d/hf" --seed 7 --top-k 20 --temperature 0.9 --max-new-tokens 32 <"$d/prompts.txt" >"$d/s1" 2>/dev/null
mt-generate --load "$d/hf" --seed 7 --top-k 20 --temperature 0.9 --max-new-tokens 32 <"$d/prompts.txt" >"$d/s2" 2>/dev/null
mt-generate --load "$d/hf" --seed 8 --top-k 20 --temperature 0.9 --max-new-tokens 32 <"$d/prompts.txt" >"$d/s3" 2>/dev/null
if [ -s "$d/s1" ] && cmp -s "$d/s1" "$d/s2" && ! cmp -s "$d/s1" "$d/s3"; then t_pass "seeded sampling from the HF directory repeats, another seed differs"
else t_fail "seeded sampling from the HF directory repeats" "s1/s2/s3"; fi

t_ok "--dtype bf16" mt-ckpt-convert --load "$d/ck" --to hf --out "$d/hf-bf16" --dtype bf16
$PY - "$d/hf-bf16/model.safetensors" "$d/hf/config.json" "$d/hf-bf16/config.json" <<'PYEOF' >"$d/c" 2>&1 && t_pass "bf16 export: BF16 tensors, torch_dtype bfloat16" || t_fail "bf16 export" "$(tail -1 "$d/c")"
import json, struct, sys
h = json.loads(open(sys.argv[1], "rb").read()[8:8 + struct.unpack("<Q", open(sys.argv[1], "rb").read(8))[0]])
assert all(v["dtype"] == "BF16" for k, v in h.items() if k != "__metadata__")
assert json.load(open(sys.argv[3]))["torch_dtype"] == "bfloat16" and json.load(open(sys.argv[2]))["torch_dtype"] == "float32"
PYEOF

# ---- Hugging Face -> mt -> Hugging Face, byte for byte ----
rt() {   # NAME SRC: --from hf, then --to hf with the defaults; model.safetensors byte-identical
    local name=$1 src=$2
    rm -rf "$d/rt-ck" "$d/rt-hf"
    if mt-ckpt-convert --from hf --in "$src" --save "$d/rt-ck" 2>"$d/e" && mt-ckpt-convert --load "$d/rt-ck" --to hf --out "$d/rt-hf" 2>>"$d/e"; then
        local want=$src/model.safetensors
        if [ -f "$want" ]; then t_cmp "$name: HF -> mt -> HF model.safetensors byte-identical" "$want" "$d/rt-hf/model.safetensors"
        else   # sharded: the tensors equal
            "$HPY" -W ignore - "$src" "$d/rt-hf" >"$d/c" 2>&1 <<'PYEOF' && t_pass "$name: HF -> mt -> HF tensors bit-identical" || t_fail "$name: HF -> mt -> HF tensors bit-identical" "$(tail -1 "$d/c")"
import sys, torch
from transformers import AutoModelForCausalLM
a = AutoModelForCausalLM.from_pretrained(sys.argv[1]).state_dict(); b = AutoModelForCausalLM.from_pretrained(sys.argv[2]).state_dict()
assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a), "differ"
PYEOF
        fi
    else t_fail "$name: HF -> mt -> HF" "$(cat "$d/e")"; fi
}
oracle make-model "$d/gpt2-a" "$GPT2_VOCAB" "$GPT2_MERGES" 2 64 4 128 1 >/dev/null 2>"$d/e" || t_fail "make-model" "$(tail -1 "$d/e")"
rt "fp32" "$d/gpt2-a"
# --from hf into a tensor-parallel layout: GPT-2's 50257 tokens padded for TP=2 (50432 rows, the added
# rows zero), every rank's slices those of the one-rank conversion resharded by Megatron's partitioning
# (megatron_split.py), and back to Hugging Face byte for byte
rm -rf "$d/tp2-ck" "$d/tp2-hf" "$d/tp1-ck"
if mt-ckpt-convert --from hf --in "$d/gpt2-a" --save "$d/tp2-ck" --target-tensor-parallel-size 2 2>"$d/e" &&
    mt-ckpt-convert --from hf --in "$d/gpt2-a" --save "$d/tp1-ck" 2>>"$d/e"; then
    t_pass "--from hf --target-tensor-parallel-size 2"
    if /usr/bin/python3 "$T_TOP/tests/oracle/megatron_split.py" check "$d/tp1-ck/release" "$d/tp2-ck/release" 2 1 >"$d/c" 2>&1
    then t_pass "--from hf at TP=2: Megatron's slices, the vocabulary padded for TP=2 ($(tail -1 "$d/c"))"
    else t_fail "--from hf at TP=2: Megatron's slices" "$(tail -3 "$d/c")"; fi
    if mt-ckpt-convert --load "$d/tp2-ck" --to hf --out "$d/tp2-hf" 2>"$d/e"; then
        t_cmp "--from hf at TP=2, then --to hf: model.safetensors byte-identical" "$d/gpt2-a/model.safetensors" "$d/tp2-hf/model.safetensors"
    else t_fail "TP=2 checkpoint --to hf" "$(cat "$d/e")"; fi
else t_fail "--from hf --target-tensor-parallel-size 2" "$(cat "$d/e")"; fi
oracle make-model "$d/gpt2-h" "$GPT2_VOCAB" "$GPT2_MERGES" 2 64 4 128 2 --dtype fp16 >/dev/null 2>&1
rt "fp16" "$d/gpt2-h"
oracle make-model "$d/gpt2-s" "$GPT2_VOCAB" "$GPT2_MERGES" 3 64 4 128 3 --shard 4000000 >/dev/null 2>&1
[ -f "$d/gpt2-s/model.safetensors.index.json" ] || t_fail "a sharded model was made" "$(ls "$d/gpt2-s")"
rt "sharded" "$d/gpt2-s"
oracle make-model "$d/gpt2-b" "$GPT2_VOCAB" "$GPT2_MERGES" 2 64 4 128 4 --base >/dev/null 2>&1
rm -rf "$d/b-ck"
if mt-ckpt-convert --from hf --in "$d/gpt2-b" --save "$d/b-ck" 2>"$d/e"; then t_pass "keys without transformer. (GPT2Model) convert"
else t_fail "keys without transformer. (GPT2Model) convert" "$(cat "$d/e")"; fi

# HF -> mt against transformers' names and values: a model made by transformers with every parameter
# random (biases and norms included, so that two tensors of one shape cannot stand in for each other),
# converted in; every mt tensor equals the transformers tensor the converter's table maps it to
oracle make-model "$d/gpt2-r" "$GPT2_VOCAB" "$GPT2_MERGES" 2 64 4 128 5 --randomize >/dev/null 2>"$d/e" || t_fail "make-model --randomize" "$(tail -1 "$d/e")"
if mt-ckpt-convert --from hf --in "$d/gpt2-r" --save "$d/r-ck" 2>"$d/e" &&
    oracle mapping "$d/gpt2-r" "$d/r-ck/release" >"$d/map.txt" 2>"$d/map.err"; then
    t_pass "HF -> mt: every mt tensor equals the transformers tensor it maps to ($(cat "$d/map.txt"))"
else t_fail "HF -> mt: every mt tensor equals the transformers tensor it maps to" "$(cat "$d/e") $(tail -1 "$d/map.err")"; fi

# the same model read directly and as a converted checkpoint
mt-ckpt-convert --from hf --in "$d/gpt2-a" --save "$d/a-ck" 2>/dev/null
mt-eval --load "$d/gpt2-a" --score <"$d/docs.jsonl" >"$d/sa" 2>"$d/ea"
mt-eval --load "$d/a-ck" --score <"$d/docs.jsonl" >"$d/sb" 2>"$d/eb"
if [ -s "$d/sa" ]; then t_cmp "mt-eval: the HF directory and its conversion score alike" "$d/sa" "$d/sb"
else t_fail "mt-eval: the HF directory and its conversion score alike" "no score: $(cat "$d/ea")"; fi
grep -q '"make-vocab-size-divisible-by": 1,' "$d/a-ck/release/mp_rank_00/meta.json" \
    && t_pass "converted GPT-2: vocabulary not padded (no zero rows in the softmax)" \
    || t_fail "converted GPT-2: vocabulary not padded" "$(grep divisible "$d/a-ck/release/mp_rank_00/meta.json")"
# finetuning from the converted checkpoint
ft() { mt-train --num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 64 --max-position-embeddings 128 \
        --micro-batch-size 4 --global-batch-size 8 --train-iters 4 --lr 1e-3 --log-interval 1 --eval-iters 0 \
        --split 100,0,0 --vocab-file "$GPT2_VOCAB" --merge-file "$GPT2_MERGES" --data-path "$d/data_text_document" \
        --data-cache-path "$d/cache" "$@"; }
if ft --load "$d/a-ck" --finetune --make-vocab-size-divisible-by 1 --save "$d/ft" >"$d/ft.log" 2>"$d/ft.err"; then
    t_pass "mt-train --load converted --finetune trains"
else t_fail "mt-train --load converted --finetune trains" "$(tail -2 "$d/ft.err")"; fi
grep -q "loading checkpoint from $d/a-ck" "$d/ft.log" && t_pass "--finetune loaded the converted weights" \
    || t_fail "--finetune loaded the converted weights" "$(head -5 "$d/ft.log")"
# the model trained is the converted one: one step at learning rate 0 (no update, no decay) saves exactly
# the converted checkpoint's weights, every tensor (a --finetune that ignored them would save its init)
if ft --load "$d/a-ck" --finetune --make-vocab-size-divisible-by 1 --train-iters 1 --lr 0 --min-lr 0 --seed 2 \
        --save "$d/ft0" >"$d/ft0.log" 2>"$d/ft0.err" &&
    PYTHONPATH=$T_TOP/tests/oracle $PY - "$d/a-ck/release/mp_rank_00/model.safetensors" "$d/ft0/iter_0000001/mp_rank_00/model.safetensors" >"$d/c" 2>&1 <<'PYEOF'
import sys, torch, hf_ref
a = hf_ref.read_safetensors(sys.argv[1], strip=None); b = hf_ref.read_safetensors(sys.argv[2], strip=None)
assert sorted(a) == sorted(b), sorted(set(a) ^ set(b))[:4]
diff = [k for k in a if not torch.equal(a[k], b[k])]
assert not diff, "differ from the converted weights: %s" % diff[:3]
print("%d tensors" % len(a))
PYEOF
then t_pass "--finetune trains the converted weights: a step at lr 0 saves them unchanged ($(cat "$d/c"))"
else t_fail "--finetune trains the converted weights" "$(tail -2 "$d/ft0.err") $(tail -1 "$d/c")"; fi
err1 ft --load "$d/gpt2-a" --finetune --save "$d/ft2" && grep -q 'convert it first' "$d/e" \
    && t_pass "mt-train --load of an HF directory: error naming the conversion" || t_fail "mt-train --load HF dir" "$(cat "$d/e")"

# ---- bad input ----
# a conversion never writes into a directory that holds a checkpoint: refused before anything changes
# (the tracker, the tokenizer files and the iterations stay as they were)
snap() { (cd "$1" && find . -type f -exec md5sum {} + | sort); }
snap "$d/tp1-ck" >"$d/snap0"
err1 mt-ckpt-convert --from hf --in "$d/gpt2-h" --save "$d/tp1-ck" && grep -q 'already holds a checkpoint' "$d/e" &&
    snap "$d/tp1-ck" | cmp -s - "$d/snap0" && t_pass "--from hf into a checkpoint directory: refused, nothing changed" ||
    t_fail "--from hf into a checkpoint directory" "$(cat "$d/e")"
err1 mt-ckpt-convert --load "$d/tp2-ck" --save "$d/tp1-ck" --target-tensor-parallel-size 1 && grep -q 'already holds a checkpoint' "$d/e" &&
    snap "$d/tp1-ck" | cmp -s - "$d/snap0" && t_pass "resharding into a checkpoint directory: refused, nothing changed" ||
    t_fail "resharding into a checkpoint directory" "$(cat "$d/e")"
bad() {   # NAME DIR PATTERN: --from hf fails with one line matching PATTERN, nothing under --save (no
          # tracker, no tokenizer files)
    rm -rf "$d/bad-ck"
    if err1 mt-ckpt-convert --from hf --in "$2" --save "$d/bad-ck" && grep -Eq -- "$3" "$d/e" && [ ! -e "$d/bad-ck/latest_checkpointed_iteration.txt" ] &&
        [ ! -e "$d/bad-ck/vocab.json" ] && [ ! -e "$d/bad-ck/merges.txt" ]; then
        t_pass "$1"
    else t_fail "$1" "$(cat "$d/e")"; fi
}
cp -r "$d/gpt2-a" "$d/x"; sed -i 's/"model_type": "gpt2"/"model_type": "bert"/' "$d/x/config.json"
bad "another architecture" "$d/x" "config.json: model_type is 'bert'; only GPT-2 \(gpt2\), Llama \(llama\), Mixtral \(mixtral\) and Qwen2-MoE \(qwen2_moe\)"
rm -rf "$d/x"; cp -r "$d/gpt2-a" "$d/x"; sed -i 's/"activation_function": "gelu_new"/"activation_function": "relu"/' "$d/x/config.json"
bad "unsupported activation" "$d/x" "activation_function 'relu'"
rm -rf "$d/x"; cp -r "$d/gpt2-a" "$d/x"; sed -i 's/"n_layer": 2/"n_layer": 3/' "$d/x/config.json"
bad "missing tensor" "$d/x" "missing tensor 'transformer.h.2"
rm -rf "$d/x"; cp -r "$d/gpt2-a" "$d/x"; sed -i 's/"n_embd": 64/"n_embd": 32/' "$d/x/config.json"
bad "tensor of another shape" "$d/x" "has shape \[[0-9]+, 64\], config.json needs \[[0-9]+, 32\]"
rm -rf "$d/x"; cp -r "$d/gpt2-a" "$d/x"; truncate -s -100 "$d/x/model.safetensors"
bad "truncated safetensors" "$d/x" "model.safetensors: .*(truncated|run past)"
rm -rf "$d/x"; cp -r "$d/gpt2-a" "$d/x"
$PY - "$d/x/model.safetensors" <<'PYEOF'
import json, struct, sys
p = sys.argv[1]; b = open(p, "rb").read(); n = struct.unpack("<Q", b[:8])[0]; h = json.loads(b[8:8 + n])
h["transformer.ln_f.bias"]["data_offsets"][1] += 4          # a header that lies about an offset
s = json.dumps(h, separators=(",", ":")).encode(); s += b" " * (-len(s) % 8)
open(p, "wb").write(struct.pack("<Q", len(s)) + s + b[8 + n:])
PYEOF
bad "header lying about offsets" "$d/x" "ln_f.bias': data_offsets"
rm -rf "$d/x"; cp -r "$d/gpt2-a" "$d/x"
$PY - "$d/x/model.safetensors" <<'PYEOF'
import json, struct, sys
p = sys.argv[1]; b = open(p, "rb").read(); n = struct.unpack("<Q", b[:8])[0]; h = json.loads(b[8:8 + n])
h["transformer.ln_f.bias"]["dtype"] = "F16"                  # a header that lies about a dtype
s = json.dumps(h, separators=(",", ":")).encode(); s += b" " * (-len(s) % 8)
open(p, "wb").write(struct.pack("<Q", len(s)) + s + b[8 + n:])
PYEOF
bad "header lying about a dtype" "$d/x" "ln_f.bias': data_offsets .* do not match shape"
rm -rf "$d/x"; cp -r "$d/gpt2-a" "$d/x"
"$HPY" -W ignore - "$d/x" <<'PYEOF'
import sys, torch
from safetensors.torch import load_file, save_file
p = sys.argv[1] + "/model.safetensors"; t = load_file(p)
t["lm_head.weight"] = t["transformer.wte.weight"] + 1       # untied output layer
t["transformer.extra.weight"] = torch.zeros(2)
save_file(t, p, metadata={"format": "pt"})
PYEOF
bad "untied lm_head" "$d/x" "lm_head.weight differs from the word embeddings"
rm -f "$d/x/config.json"
bad "no config.json" "$d/x" "not a Hugging Face model directory"
# non-finite weights: refused by --from hf and by mt-generate reading the directory, naming the tensor
for v in nan inf; do
    rm -rf "$d/x"; cp -r "$d/gpt2-a" "$d/x"
    "$HPY" -W ignore - "$d/x" "$v" <<'PYEOF'
import sys
from safetensors.torch import load_file, save_file
p = sys.argv[1] + "/model.safetensors"; t = load_file(p)
t["transformer.h.1.mlp.c_fc.weight"][3, 5] = float(sys.argv[2])
save_file(t, p, metadata={"format": "pt"})
PYEOF
    bad "a weight $v: --from hf refuses it" "$d/x" "model.safetensors: tensor 'transformer.h.1.mlp.c_fc.weight' holds a non-finite value \\(-?$v at element 773\\)"
done
err1 mt-generate --load "$d/x" --max-new-tokens 2 "hello" && grep -q "c_fc.weight' holds a non-finite value" "$d/e" \
    && t_pass "a weight inf: mt-generate refuses the directory" || t_fail "mt-generate, a weight inf" "$(cat "$d/e")"
# one tensor spelled twice ("transformer.X" and "X"), and an index whose weight_map disagrees with the
# shards: refused naming the file and the tensor (one copy was taken silently)
rm -rf "$d/x"; cp -r "$d/gpt2-a" "$d/x"
"$HPY" -W ignore - "$d/x" <<'PYEOF'
import sys
from safetensors.torch import load_file, save_file
p = sys.argv[1] + "/model.safetensors"; t = load_file(p)
t["ln_f.bias"] = t["transformer.ln_f.bias"] + 1
save_file(t, p, metadata={"format": "pt"})
PYEOF
bad "both transformer.ln_f.bias and ln_f.bias" "$d/x" "model.safetensors: holds both tensor 'transformer.ln_f.bias' and 'ln_f.bias'"
rm -rf "$d/x"; cp -r "$d/gpt2-s" "$d/x"
$PY - "$d/x/model.safetensors.index.json" <<'PYEOF'
import json, sys
p = sys.argv[1]; ix = json.load(open(p)); wm = ix["weight_map"]
shards = sorted(set(wm.values())); k = next(k for k, v in wm.items() if v == shards[0])
wm[k] = shards[1]; json.dump(ix, open(p, "w"))
print(k, shards[0], shards[1])
PYEOF
bad "an index that puts a tensor in the wrong shard" "$d/x" "model.safetensors.index.json: weight_map puts tensor '[^']+' in model-0000[0-9]-of-0000[0-9].safetensors, which does not hold it"
rm -rf "$d/x"; cp -r "$d/gpt2-s" "$d/x"
$PY - "$d/x/model.safetensors.index.json" <<'PYEOF'
import json, sys
p = sys.argv[1]; ix = json.load(open(p)); wm = ix["weight_map"]
del wm[sorted(wm)[0]]; json.dump(ix, open(p, "w"))
PYEOF
bad "a shard's tensor missing from the index" "$d/x" "safetensors: tensor '[^']+' is not in the weight_map of .*model.safetensors.index.json"
# hostile sizes in config.json: checked against the files before anything of that size is allocated (an
# abort before), and a model of 100000 layers in a small file refused at once (minutes before)
for kv in "n_embd 1048576 has shape \\[[0-9]+, 64\\], config.json needs \\[[0-9]+, 1048576\\]" \
          "vocab_size 1073741824 wte.weight' has shape \\[[0-9]+, 64\\], config.json needs \\[1073741824, 64\\]" \
          "n_layer 100000 missing tensor 'transformer.h.2"; do
    set -- $kv; k=$1 v=$2; shift 2
    rm -rf "$d/x"; cp -r "$d/gpt2-a" "$d/x"; sed -i "s/\"$k\": [0-9]*/\"$k\": $v/" "$d/x/config.json"
    rm -rf "$d/bad-ck"
    if timeout 20 mt-ckpt-convert --from hf --in "$d/x" --save "$d/bad-ck" >"$d/o" 2>"$d/e"; then rc=0; else rc=$?; fi
    if [ $rc = 1 ] && [ "$(wc -l <"$d/e")" = 1 ] && grep -Eq -- "$*" "$d/e" && [ ! -e "$d/bad-ck/vocab.json" ]; then
        t_pass "config.json $k $v: a one-line error at once, nothing left"
    else t_fail "config.json $k $v" "exit $rc: $(head -c 300 "$d/e")"; fi
done
# and in a checkpoint's meta.json, for every program that opens one
for kv in "hidden-size 1048576 word_embeddings.weight' has shape \\[[0-9]+, 48\\], this model needs \\[[0-9]+, 1048576\\]" \
          "num-layers 100000 missing tensor 'language_model.encoder.layers.2.input_layernorm.weight'"; do
    set -- $kv; k=$1 v=$2; shift 2
    rm -rf "$d/y" "$d/y-hf"; cp -r "$d/ck" "$d/y"
    $PY - "$d/y"/iter_*/mp_rank_00/meta.json "$k" "$v" <<'PYEOF'
import json, sys
p, k, v = sys.argv[1], sys.argv[2], int(sys.argv[3]); m = json.load(open(p)); m["args"][k] = v
json.dump(m, open(p, "w"))
PYEOF
    for cmd in "mt-ckpt-convert --load $d/y --to hf --out $d/y-hf" "mt-generate --load $d/y --max-new-tokens 1 hi"; do
        if timeout 20 $cmd >"$d/o" 2>"$d/e"; then rc=0; else rc=$?; fi
        if [ $rc = 1 ] && [ "$(wc -l <"$d/e")" = 1 ] && grep -Eq -- "$*" "$d/e" && [ ! -e "$d/y-hf" ]; then
            t_pass "meta.json $k $v: ${cmd%% *} gives a one-line error at once"
        else t_fail "meta.json $k $v: ${cmd%% *}" "exit $rc: $(head -c 300 "$d/e")"; fi
    done
done
# a weight beyond fp16's range: --to hf --dtype fp16 refuses it naming the tensor, fp32 keeps it
rm -rf "$d/big" "$d/big-hf"; cp -r "$d/ck" "$d/big"
"$HPY" -W ignore - "$d/big"/iter_*/mp_rank_00/model.safetensors <<'PYEOF'
import sys
from safetensors.torch import load_file, save_file
t = load_file(sys.argv[1])
t["language_model.encoder.final_layernorm.bias"][7] = 1e5
save_file(t, sys.argv[1], metadata={"format": "pt"})
PYEOF
if err1 mt-ckpt-convert --load "$d/big" --to hf --dtype fp16 --out "$d/big-hf" &&
    grep -q "final_layernorm.bias': 100000 (element 7 of transformer.ln_f.bias) overflows fp16 (largest 65504)" "$d/e" &&
    [ ! -e "$d/big-hf" ]; then t_pass "--to hf --dtype fp16: a weight of 1e5 is a one-line error naming the tensor, no --out"
else t_fail "--to hf --dtype fp16, a weight of 1e5" "$(cat "$d/e")"; fi
t_ok "--to hf --dtype fp32 keeps a weight of 1e5" mt-ckpt-convert --load "$d/big" --to hf --dtype fp32 --out "$d/big-hf"
mkdir -p "$d/full"; touch "$d/full/keep"
if err1 mt-ckpt-convert --load "$d/ck" --to hf --out "$d/full" && grep -q 'exists and is not empty' "$d/e" && [ "$(ls "$d/full")" = keep ]; then
    t_pass "--out not empty: error, left alone"
else t_fail "--out not empty" "$(cat "$d/e")"; fi
# a prompt longer than the context
long=$($PY -c 'print("word " * 200)')
err1 mt-generate --load "$d/hf" --max-new-tokens 4 "$long" && grep -q 'position' "$d/e" \
    && t_pass "mt-generate: a prompt longer than the context is a one-line error" || t_fail "prompt longer than the context" "$(cat "$d/e")"
