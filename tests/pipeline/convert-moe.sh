#!/usr/bin/env bash
# convert-moe.sh: mt-ckpt-convert between Hugging Face's mixtures of experts (MixtralForCausalLM,
# Qwen2MoeForCausalLM) and mt checkpoints, against transformers (< 4.45, build/venv-hf; skipped with a
# message only when PyPI cannot be reached). Random models made by transformers (3 layers, 4 heads in 2
# query groups, 4 experts of 48, top 2; Qwen2-MoE with its shared expert of 40 and its gate, q/k/v biases,
# layer 1 dense through mlp_only_layers, norm_topk_prob false and true) with a byte-level BPE tokenizer.json
# trained on the project's test documents:
#   - go HF -> mt -> HF byte for byte, and transformers loads the export with no missing or unexpected key
#     and the same logits;
#   - the mt checkpoint's args are Megatron's MoE flags for the config (experts, top-k, ffn sizes, the layer
#     list, pre-softmax for norm_topk_prob false, the shared expert and its gate, --add-qkv-bias);
#   - mt-eval --score --logits of the converted checkpoint and of the HF directory equal transformers'
#     logits to 1e-5 of the largest, and greedy mt-generate equals model.generate token for token;
#   - the load-balancing loss mt-train logs for one step (--finetune of the converted Mixtral, learning rate 0,
#     one sequence of 128 tokens; the sample its MT_TRACE_SAMPLES names, in Megatron's order) against
#     transformers' router on the same tokens (output_router_logits=True, no attention mask; mt's lm loss
#     equals transformers' cross entropy, so the tokens are the same). The definitions: mt logs Megatron's
#     aux loss over its coefficient, E / (K N^2) sum_e count_e P_e per MoE layer over the N tokens (count_e
#     the tokens whose top K has e, P_e their softmax scores of e summed), averaged over the layers;
#     transformers' router_aux_loss (load_balancing_loss_func) is E / T^2 sum_e count_e P_e, without the
#     1 / K, over the T = layers x N tokens of all the layers' router logits taken as one set. So with one
#     MoE layer (a model made with 1 layer) mt = router_aux_loss / K: measured equal (0 relative, float32
#     in both); with the 3-layer model mt = the mean over the layers of load_balancing_loss_func of each
#     layer's logits / K (6.7e-8 relative), while router_aux_loss / K, with its cross terms between layers,
#     is 15% away (the test requires more than 1e-3). Tolerance 1e-5 relative; the lm losses agree to
#     2.6e-8, and the smallest gap between a token's K-th and (K+1)-th router logits is 5e-4 (above 1e-5
#     required, so that float32 routes as torch does);
#   - Mixtral onto 2 expert ranks (--target-expert-model-parallel-size 2: mp_rank_00_000, _001) and back
#     byte for byte;
#   - a model of neither kind (a shared expert without QKV biases) is refused naming the classes.
. "$(dirname "$0")/../lib.sh"
PY=/usr/bin/python3
d=$T_TMP
if ! HPY=$("$T_TOP/tests/oracle/venv-hf.sh" 2>"$d/venv.err"); then
    t_skip "transformers" "unavailable: $(head -c 300 "$d/venv.err")"; exit 0
fi
oracle() { "$HPY" -W ignore "$T_TOP/tests/oracle/llama_oracle.py" "$@"; }
export OMP_NUM_THREADS=1

docs=$T_TOP/tests/golden/gpt2.jsonl
"$HPY" - "$docs" >"$d/docs.jsonl" <<'PYEOF'
import json, sys, unicodedata
for l in open(sys.argv[1], encoding="utf-8"):
    t = json.loads(l)["text"]
    if all(unicodedata.category(c) != "Cn" for c in t):
        print(json.dumps({"text": t}))
PYEOF
printf '%s\n' "The quick brown fox" "def fib(n: int) -> int:" "SELECT id FROM users" >"$d/prompts.txt"
cmpgen() {   # MT HF: the prompts' ids and new tokens
    $PY - "$1" "$2" <<'PYEOF'
import json, sys
a = [json.loads(l) for l in open(sys.argv[1])]
b = [json.loads(l) for l in open(sys.argv[2])]
assert len(a) == len(b) > 0, (len(a), len(b))
for x, y in zip(a, b):
    assert x["prompt_ids"] == y["prompt_ids"], (x["prompt_ids"], y["prompt_ids"])
    assert x["tokens"] == y["tokens"], (x["prompt_ids"], x["tokens"], y["tokens"])
print("%d prompts, %d tokens" % (len(a), sum(len(x["tokens"]) for x in a)))
PYEOF
}

for v in "mixtral:--arch mixtral" "qwen:--arch qwen2_moe --mlp-only-layers 1" "qwen-norm:--arch qwen2_moe --norm-topk-prob"; do
    name=${v%%:*} opts=${v#*:} hf=$d/$name ck=$d/ck-$name
    # shellcheck disable=SC2086
    if ! oracle make "$hf" $opts --tokenizer --corpus "$docs" --vocab 1000 --positions 128 --seed 4 >/dev/null 2>"$d/e"; then
        t_fail "$name: make the model" "$(tail -1 "$d/e")"; continue
    fi
    t_ok "$name: --from hf" mt-ckpt-convert --from hf --in "$hf" --save "$ck"
    $PY - "$ck/release/mp_rank_00/meta.json" "$name" >"$d/c" 2>&1 <<'PYEOF' && t_pass "$name: meta.json args: Megatron's MoE flags" || t_fail "$name: meta.json args" "$(tail -1 "$d/c")"
import json, sys
a = json.load(open(sys.argv[1]))["args"]
qwen = sys.argv[2].startswith("qwen")
want = {"num-experts": 4, "moe-router-topk": 2, "moe-ffn-hidden-size": 48, "swiglu": True, "disable-bias-linear": True,
        "add-qkv-bias": qwen, "moe-router-pre-softmax": sys.argv[2] == "qwen",
        "moe-layer-freq": "[1,0,1]" if sys.argv[2] == "qwen" else "[1,1,1]"}
if qwen:
    want.update({"moe-shared-expert-intermediate-size": 40, "moe-shared-expert-gate": True, "ffn-hidden-size": 96})
bad = {k: (a.get(k), v) for k, v in want.items() if a.get(k) != v}
assert not bad, bad
PYEOF
    t_ok "$name: --to hf" mt-ckpt-convert --load "$ck" --to hf --out "$d/$name-back"
    t_cmp "$name: HF -> mt -> HF: model.safetensors byte for byte" "$hf/model.safetensors" "$d/$name-back/model.safetensors"
    if oracle logits "$hf" "$d/$name-back" >"$d/c" 2>&1; then t_pass "$name: transformers loads the export, the same logits ($(tail -1 "$d/c"))"
    else t_fail "$name: transformers loads the export" "$(tail -1 "$d/c")"; fi
    mt-tokenize --tokenizer-type HuggingFaceTokenizer --tokenizer-model "$hf" --quiet "$d/docs.jsonl" \
        | mt-index --output-prefix "$d/docs-$name" 2>/dev/null && mt-index --dump "$d/docs-${name}_text_document" >"$d/ids-$name.txt"
    for src in "$ck" "$hf"; do
        if mt-eval --load "$src" --score --logits "$d/lg.f32" <"$d/docs.jsonl" >"$d/sc.jsonl" 2>"$d/e" &&
            oracle score "$hf" "$d/docs.jsonl" "$d/ids-$name.txt" "$d/lg.f32" "$d/sc.jsonl" >"$d/c" 2>&1; then
            t_pass "$name: mt-eval --score --logits --load $(basename "$src") = transformers to 1e-5 of the largest ($(tail -1 "$d/c"))"
        else t_fail "$name: mt-eval --score --logits --load $(basename "$src") = transformers" "$(cat "$d/e") $(tail -1 "$d/c")"; fi
    done
    oracle generate "$hf" 32 <"$d/prompts.txt" >"$d/hf-gen.jsonl" 2>"$d/e" || t_fail "$name: model.generate ran" "$(tail -1 "$d/e")"
    if mt-generate --load "$ck" --greedy --max-new-tokens 32 --json --batch-size 1 <"$d/prompts.txt" >"$d/mt-gen.jsonl" 2>"$d/e" &&
        cmpgen "$d/mt-gen.jsonl" "$d/hf-gen.jsonl" >"$d/c" 2>&1; then
        t_pass "$name: greedy mt-generate = model.generate token for token ($(tail -1 "$d/c"))"
    else t_fail "$name: greedy mt-generate = model.generate" "$(cat "$d/e") $(tail -1 "$d/c")"; fi
done

# ---- the load-balancing loss of one forward pass against transformers' router_aux_loss ----
# mt-train --finetune of a converted checkpoint, one step at learning rate 0 on one sequence: its model flags
# are the checkpoint's meta.json args (true: the flag alone; false: none), one a line
ckflags() {
    $PY - "$1/release/mp_rank_00/meta.json" <<'PYEOF'
import json, sys
for k, v in json.load(open(sys.argv[1]))["args"].items():
    if v is not False:
        print("--" + k)
        if v is not True:
            print(v)
PYEOF
}
auxcheck() {   # WHAT HF CKPT DATA IDS
    local r fl
    r=$d/aux-$(basename "$3")
    mapfile -t fl < <(ckflags "$3")
    if ! MT_TRACE_SAMPLES=$r.trace mt-train "${fl[@]}" --load "$3" --finetune --train-iters 1 --lr 0 --min-lr 0 \
            --micro-batch-size 1 --global-batch-size 1 --hidden-dropout 0 --attention-dropout 0 --seq-length 128 \
            --seed 9 --log-interval 1 --eval-iters 0 --split 100,0,0 --data-path "$4" --data-cache-path "$d/cache" \
            --metrics-file "$r.jsonl" >"$r.log" 2>&1; then
        t_fail "$1: mt-train" "$(tail -2 "$r.log")"
    elif oracle aux "$2" "$5" "$r.trace.0" 128 9 "$r.jsonl" >"$r.c" 2>"$r.e"; then t_pass "$1 ($(tail -1 "$r.c"))"
    else t_fail "$1" "$(tail -1 "$r.e") ($(tail -1 "$r.c"))"; fi
}
if oracle make "$d/mix1" --arch mixtral --layers 1 --tokenizer --corpus "$docs" --vocab 1000 --positions 128 --seed 5 \
        >/dev/null 2>"$d/e" && mt-ckpt-convert --from hf --in "$d/mix1" --save "$d/ck-mix1" 2>"$d/e" &&
    mt-tokenize --tokenizer-type HuggingFaceTokenizer --tokenizer-model "$d/mix1" --quiet "$d/docs.jsonl" 2>"$d/e" \
        | mt-index --output-prefix "$d/docs-mix1" 2>/dev/null && mt-index --dump "$d/docs-mix1_text_document" >"$d/ids-mix1.txt"; then
    auxcheck "one MoE layer: load_balancing_loss = transformers' router_aux_loss / K" \
        "$d/mix1" "$d/ck-mix1" "$d/docs-mix1_text_document" "$d/ids-mix1.txt"
else t_fail "one MoE layer: make and convert the model" "$(tail -1 "$d/e")"; fi
auxcheck "three MoE layers: load_balancing_loss = the layers' mean of transformers' per-layer loss / K, not router_aux_loss / K" \
    "$d/mixtral" "$d/ck-mixtral" "$d/docs-mixtral_text_document" "$d/ids-mixtral.txt"

# expert-parallel checkpoints from and to Hugging Face: Mixtral onto 2 expert ranks and back, byte for byte
t_ok "mixtral: --from hf --target-expert-model-parallel-size 2" \
    mt-ckpt-convert --from hf --in "$d/mixtral" --save "$d/ck-ep" --target-expert-model-parallel-size 2
if [ "$(ls "$d/ck-ep/release" | tr '\n' ' ')" = "mp_rank_00_000 mp_rank_00_001 " ]; then t_pass "... mp_rank_00_000 and mp_rank_00_001"
else t_fail "... expert rank directories" "$(ls "$d/ck-ep/release" | tr '\n' ' ')"; fi
t_ok "mixtral: the EP 2 checkpoint --to hf" mt-ckpt-convert --load "$d/ck-ep" --to hf --out "$d/mixtral-ep-back"
t_cmp "mixtral: HF -> EP 2 -> HF: model.safetensors byte for byte" "$d/mixtral/model.safetensors" "$d/mixtral-ep-back/model.safetensors"

# a shared expert without QKV biases is neither Mixtral nor Qwen2-MoE
PYTHONPATH=$T_TOP/tests/oracle $PY "$T_TOP/tests/oracle/walk_data.py" "$d/data" 3 50
if mt-train --num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 16 --max-position-embeddings 16 \
    --normalization RMSNorm --position-embedding-type rope --swiglu --untie-embeddings-and-output-weights \
    --disable-bias-linear --num-experts 4 --moe-shared-expert-intermediate-size 16 --moe-shared-expert-gate \
    --tokenizer-type GPT2BPETokenizer --vocab-file "$GPT2_VOCAB" --merge-file "$GPT2_MERGES" --micro-batch-size 1 \
    --train-iters 1 --lr 1e-3 --split 100,0,0 --eval-iters 0 --data-path "$d/data" --data-cache-path "$d/cache" \
    --save "$d/ck-odd" >/dev/null 2>"$d/e"; then
    t_fails "a shared expert without QKV biases: refused" mt-ckpt-convert --load "$d/ck-odd" --to hf --out "$d/odd"
    t_grep "... naming the two classes" 'MixtralForCausalLM has .*Qwen2MoeForCausalLM has' "$T_TMP/err"
    [ ! -e "$d/odd" ] && t_pass "... nothing written" || t_fail "... nothing written" "$d/odd exists"
else t_fail "train the odd model" "$(tail -2 "$d/e")"; fi
