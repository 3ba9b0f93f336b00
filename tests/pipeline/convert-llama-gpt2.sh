#!/usr/bin/env bash
# convert-llama-gpt2.sh: a LLaMA-architecture model trained with GPT-2's tokenizer goes to Hugging Face
# with that tokenizer (vocab.json, merges.txt, a tokenizer_config.json naming GPT2Tokenizer): transformers'
# AutoTokenizer (< 4.45, build/venv-hf; skipped with a message only when PyPI cannot be reached) gives
# mt-tokenize's ids, and mt-eval of the directory gives the checkpoint's loss exactly, as does the
# checkpoint converted back. --from hf of a Llama directory whose tokenizer mt cannot read (none, or a
# tokenizer.json mt does not support) is one line and writes nothing; mt-eval and mt-generate use
# --vocab-file/--merge-file given with such a directory. --to hf of a partial-rotary checkpoint is refused
# naming --rotary-percent, and of a tokenizer that would not come with it (NullTokenizer, a missing
# tokenizer.json) naming that, nothing written.
. "$(dirname "$0")/../lib.sh"
PY=/usr/bin/python3
d=$T_TMP
export OMP_NUM_THREADS=2
if ! HPY=$("$T_TOP/tests/oracle/venv-hf.sh" 2>"$d/venv.err"); then
    t_skip "transformers" "unavailable: $(head -c 300 "$d/venv.err")"; exit 0
fi
err1() { "$@" >"$d/o" 2>"$d/e"; local rc=$?; [ $rc != 0 ] && [ "$(wc -l <"$d/e")" -eq 1 ]; }

# ---- a Llama model trained on GPT-2 tokens (the vocabulary unpadded, so that HF's rows are the model's) ----
$PY - "$T_TOP" >"$d/docs.jsonl" <<'PYEOF'
import json, sys
top = sys.argv[1]
paras = [p.strip() for p in open(top + "/README.md", encoding="utf-8").read().split("\n\n") if len(p.strip()) > 40]
for p in paras[:60]:
    print(json.dumps({"text": p}))
print(json.dumps({"text": "Grüße aus Köln, l'été — naïve café 你好 tabs\tand  spaces"}))
PYEOF
mt-tokenize --vocab-file "$GPT2_VOCAB" --merge-file "$GPT2_MERGES" --append-eod --quiet --input "$d/docs.jsonl" \
    | mt-index --output-prefix "$d/data" 2>"$d/e" || { t_fail "dataset" "$(cat "$d/e")"; exit 0; }
llama="--normalization RMSNorm --position-embedding-type rope --rotary-base 10000 --swiglu --ffn-hidden-size 48
       --group-query-attention --num-query-groups 2 --untie-embeddings-and-output-weights --disable-bias-linear"
# shellcheck disable=SC2086
if mt-train --num-layers 2 --hidden-size 32 --num-attention-heads 4 $llama --seq-length 64 --max-position-embeddings 64 \
        --micro-batch-size 2 --global-batch-size 4 --train-iters 4 --lr 1e-3 --log-interval 2 --eval-iters 0 \
        --split 100,0,0 --make-vocab-size-divisible-by 1 --vocab-file "$GPT2_VOCAB" --merge-file "$GPT2_MERGES" \
        --data-path "$d/data_text_document" --data-cache-path "$d/cache" --save "$d/ck" >"$d/train.log" 2>"$d/e"
then t_pass "Llama model trained with GPT-2's tokenizer"
else t_fail "Llama model trained with GPT-2's tokenizer" "$(tail -2 "$d/e")"; exit 0; fi

# ---- --to hf: the tokenizer goes with it ----
t_ok "--to hf" mt-ckpt-convert --load "$d/ck" --to hf --out "$d/hf"
for f in vocab.json merges.txt; do t_cmp "--to hf writes GPT-2's $f" "$T_TOP/share/gpt2/$f" "$d/hf/$f"; done
mt-tokenize --vocab-file "$GPT2_VOCAB" --merge-file "$GPT2_MERGES" --quiet --input "$d/docs.jsonl" \
    | mt-index --output-prefix "$d/docs" 2>/dev/null && mt-index --dump "$d/docs_text_document" >"$d/ids.txt"
if "$HPY" -W ignore - "$d/hf" "$d/docs.jsonl" "$d/ids.txt" >"$d/c" 2>&1 <<'PYEOF'
import json, sys
from transformers import AutoConfig, AutoTokenizer
hf, docs, ids = sys.argv[1:]
assert AutoConfig.from_pretrained(hf).model_type == "llama"
tok = AutoTokenizer.from_pretrained(hf)
want = [[int(x) for x in l.split()] for l in open(ids)]
texts = [json.loads(l)["text"] for l in open(docs, encoding="utf-8")]
assert len(want) == len(texts) > 0, (len(want), len(texts))
for t, w in zip(texts, want):
    got = tok(t)["input_ids"]
    assert got == w, (t[:60], got[:10], w[:10])
assert tok.eos_token_id == 50256, tok.eos_token_id
print("%s, %d documents, %d ids" % (type(tok).__name__, len(texts), sum(map(len, want))))
PYEOF
then t_pass "AutoTokenizer of the export gives mt-tokenize's ids ($(tail -1 "$d/c"))"
else t_fail "AutoTokenizer of the export gives mt-tokenize's ids" "$(tail -1 "$d/c")"; fi

loss() {   # LOAD [FLAGS...]: the whole dataset's loss
    local load=$1; shift
    mt-eval --load "$load" --data-path "$d/data_text_document" --data-cache-path "$d/cache" --eval-split all \
        --seed 1234 --micro-batch-size 2 --json "$@" 2>"$d/le" | $PY -c 'import json,sys; print(repr(json.load(sys.stdin)["loss"]))'
}
want=$(loss "$d/ck")
got=$(loss "$d/hf")
[ -n "$want" ] && [ "$want" = "$got" ] && t_pass "mt-eval --load of the export: the checkpoint's loss ($got)" \
    || t_fail "mt-eval --load of the export" "checkpoint $want, export $got: $(head -c 300 "$d/le")"

# ---- and back: the checkpoint uses GPT-2's files, and goes out again the same ----
t_ok "--from hf of the export" mt-ckpt-convert --from hf --in "$d/hf" --save "$d/ck2"
$PY - "$d/ck2/release/mp_rank_00/meta.json" >"$d/c" 2>&1 <<'PYEOF' && t_pass "meta.json: GPT2BPETokenizer with the copies of vocab.json and merges.txt" || t_fail "meta.json of the import" "$(tail -1 "$d/c")"
import json, sys
a = json.load(open(sys.argv[1]))["args"]
assert a["tokenizer-type"] == "GPT2BPETokenizer" and a["normalization"] == "RMSNorm", a
assert a["vocab-file"].endswith("ck2/vocab.json") and a["merge-file"].endswith("ck2/merges.txt"), a
PYEOF
got=$(loss "$d/ck2")
[ -n "$want" ] && [ "$want" = "$got" ] && t_pass "mt-eval of the checkpoint converted back: the same loss" \
    || t_fail "mt-eval of the checkpoint converted back" "$want vs $got: $(head -c 300 "$d/le")"
if mt-ckpt-convert --load "$d/ck2" --to hf --out "$d/hf2" 2>"$d/e"; then
    for f in model.safetensors config.json vocab.json merges.txt tokenizer_config.json; do
        t_cmp "HF -> mt -> HF: $f the same" "$d/hf/$f" "$d/hf2/$f"
    done
else t_fail "HF -> mt -> HF" "$(cat "$d/e")"; fi

# ---- a directory whose tokenizer mt cannot read: refused before anything is written ----
mkdir "$d/bare"
cp "$d/hf/config.json" "$d/hf/model.safetensors" "$d/bare/"
if err1 mt-ckpt-convert --from hf --in "$d/bare" --save "$d/x-bare" && grep -q 'no tokenizer' "$d/e" && [ ! -e "$d/x-bare" ]
then t_pass "--from hf without a tokenizer: one line, nothing written ($(cat "$d/e"))"
else t_fail "--from hf without a tokenizer: refused, nothing written" "$(cat "$d/e"); $(ls "$d/x-bare" 2>&1)"; fi
# a tokenizer.json of SentencePiece's kind (byte fallback), which mt does not read
cp -r "$d/bare" "$d/sp"
"$HPY" -W ignore - "$d/hf" "$d/sp" >"$d/c" 2>&1 <<'PYEOF' || t_fail "a byte_fallback tokenizer.json" "$(tail -1 "$d/c")"
import json, os, sys
from transformers import GPT2TokenizerFast
GPT2TokenizerFast.from_pretrained(sys.argv[1]).backend_tokenizer.save(os.path.join(sys.argv[2], "tokenizer.json"))
p = os.path.join(sys.argv[2], "tokenizer.json")
j = json.load(open(p)); j["model"]["byte_fallback"] = True
json.dump(j, open(p, "w"))
PYEOF
if err1 mt-ckpt-convert --from hf --in "$d/sp" --save "$d/x-sp" && grep -q "$d/sp" "$d/e" && grep -q 'HuggingFaceTokenizer' "$d/e" &&
    [ ! -e "$d/x-sp" ]
then t_pass "--from hf with a tokenizer.json mt does not read: one line, nothing written ($(cat "$d/e"))"
else t_fail "--from hf with an unsupported tokenizer.json: refused, nothing written" "$(cat "$d/e"); $(ls "$d/x-sp" 2>&1)"; fi
err1 mt-eval --load "$d/bare" --score <"$d/docs.jsonl" && grep -q 'no tokenizer' "$d/e" \
    && t_pass "mt-eval --load of it without --vocab-file: one line ($(cat "$d/e"))" || t_fail "mt-eval of a directory without a tokenizer" "$(cat "$d/e")"
t_ok "--from hf without a tokenizer, given --vocab-file and --merge-file" \
    mt-ckpt-convert --from hf --in "$d/bare" --save "$d/ck-given" --vocab-file "$GPT2_VOCAB" --merge-file "$GPT2_MERGES"

# ---- --vocab-file/--merge-file given with a Hugging Face directory are used ----
mt-eval --load "$d/hf" --score <"$d/docs.jsonl" >"$d/sc-hf.jsonl" 2>"$d/e" || t_fail "mt-eval --score of the export" "$(cat "$d/e")"
for src in bare sp; do
    if mt-eval --load "$d/$src" --vocab-file "$GPT2_VOCAB" --merge-file "$GPT2_MERGES" --score <"$d/docs.jsonl" >"$d/sc-$src.jsonl" 2>"$d/e"
    then t_cmp "mt-eval --score --vocab-file --merge-file of $src: the export's scores" "$d/sc-hf.jsonl" "$d/sc-$src.jsonl"
    else t_fail "mt-eval --score --vocab-file --merge-file of $src" "$(cat "$d/e")"; fi
done
got=$(loss "$d/bare" --vocab-file "$GPT2_VOCAB" --merge-file "$GPT2_MERGES")
[ -n "$want" ] && [ "$want" = "$got" ] && t_pass "mt-eval --data-path --vocab-file of bare: the checkpoint's loss" \
    || t_fail "mt-eval --data-path --vocab-file of bare" "$want vs $got: $(head -c 300 "$d/le")"
printf '%s\n' "The tokenizer" "Grüße aus Köln" "def main():" >"$d/prompts.txt"
mt-generate --load "$d/ck" --greedy --max-new-tokens 16 --json <"$d/prompts.txt" >"$d/g-ck.jsonl" 2>"$d/e" || t_fail "mt-generate --load ck" "$(cat "$d/e")"
for src in bare sp; do
    if mt-generate --load "$d/$src" --vocab-file "$GPT2_VOCAB" --merge-file "$GPT2_MERGES" --greedy --max-new-tokens 16 --json \
        <"$d/prompts.txt" >"$d/g-$src.jsonl" 2>"$d/e"
    then t_cmp "mt-generate --vocab-file --merge-file of $src: the checkpoint's tokens and text" "$d/g-ck.jsonl" "$d/g-$src.jsonl"
    else t_fail "mt-generate --vocab-file --merge-file of $src" "$(cat "$d/e")"; fi
done

# ---- --to hf of what LlamaForCausalLM or its tokenizers cannot hold: one line naming it, nothing written ----
outrefused() {   # NAME ARGS-JSON WORD: the checkpoint with meta.json's args updated by ARGS-JSON is refused naming WORD
    rm -rf "$d/rf" "$d/x-rf"
    cp -r "$d/ck" "$d/rf"
    for m in "$d"/rf/iter_*/mp_rank_*/meta.json; do
        $PY - "$m" "$2" <<'PYEOF'
import json, sys
m = json.load(open(sys.argv[1])); m["args"].update(json.loads(sys.argv[2]))
json.dump(m, open(sys.argv[1], "w"))
PYEOF
    done
    if err1 mt-ckpt-convert --load "$d/rf" --to hf --out "$d/x-rf" && grep -q -- "$3" "$d/e" && [ ! -e "$d/x-rf" ]
    then t_pass "--to hf refused: $1 ($(cat "$d/e"))"
    else t_fail "--to hf refused: $1, nothing written" "$(cat "$d/e"); $(ls "$d/x-rf" 2>&1)"; fi
}
# partial rotary: transformers' LlamaForCausalLM rotates every channel of a head
outrefused "--rotary-percent 0.5" '{"rotary-percent": 0.5}' '--rotary-percent 0.5: .*no partial rotary'
outrefused "NullTokenizer" '{"tokenizer-type": "NullTokenizer", "vocab-size": 50256}' '--tokenizer-type NullTokenizer'
outrefused "HuggingFaceTokenizer without its tokenizer.json" \
    "{\"tokenizer-type\": \"HuggingFaceTokenizer\", \"vocab-size\": 50257, \"tokenizer-model\": \"$d/nowhere\"}" "$d/nowhere"
