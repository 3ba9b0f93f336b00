#!/usr/bin/env bash
# tokenize-families.sh: the tokenizers beyond GPT-2. tests/oracle/bpe-families-oracle.py compares mt's
# encoder (build/tests/test_bpe --encode-lines) with tiktoken on cl100k_base and o200k_base (and
# Megatron's v1/v2 patterns) and with HF tokenizers on tokenizer.json files it trains (Llama 3, Qwen2 and
# GPT-NeoX pre-tokenizers, both merges formats, added tokens, a BOS template), over the test documents
# of tests/golden and seeded random strings. Then mt-tokenize | mt-index end to end against transformers'
# AutoTokenizer (what Megatron's HuggingFaceTokenizer calls: BOS from the template, eos_token as EOD) and
# tiktoken (ids >= 65500: an int32 dataset that mt-shuffle reads), an added token whose id leaves a gap
# against transformers, a Qwen2 style tokenizer.json with the NFC normalizer against HF tokenizers, the
# ids that tokenizer.json and tiktoken files give their tokens (tests/oracle/tok-id-rules.py: added tokens
# with gaps or repeats, a token listed twice, ...) against the same two, and the refusals of what mt does
# not support. Skips when PyPI is unreachable. MT_SOAK=1 runs more strings.
. "$(dirname "$0")/../lib.sh"
T=$T_TMP
helper=$T_TOP/${MT_BUILD:-build}/tests/test_bpe
docs=$T_TOP/tests/golden/gpt2.jsonl
if ! py=$("$T_TOP/tests/oracle/venv.sh" 2>"$T/venv.err"); then
    t_skip "oracles" "tiktoken/tokenizers/bpe-openai unavailable: $(head -c 200 "$T/venv.err")"
    exit 0
fi
if [ ! -x "$helper" ]; then t_fail "helper" "$helper not built (make tests)"; exit 0; fi
count=2000
[ -n "${MT_SOAK:-}" ] && count=50000
mkdir -p "$T/w"
if ! "$py" "$T_TOP/tests/oracle/bpe-families-oracle.py" "$helper" "$T/w" "$count" 5 "$docs" >"$T/o" 2>"$T/e"; then
    t_fail "oracle" "oracle script failed: $(tail -c 400 "$T/e")"
    exit 0
fi
while IFS= read -r line; do
    case $line in
    PASS\ *) t_pass "${line#PASS }" ;;
    FAIL\ *) t_fail "${line#FAIL }" "mismatching strings on stderr" ;;
    esac
done <"$T/o"
cat "$T/e" >&2

# --- the id rules of tokenizer.json and tiktoken files (gaps, repeats, holes), against tokenizers and tiktoken
if "$py" "$T_TOP/tests/oracle/tok-id-rules.py" "$helper" "$T/ids" >"$T/ids.out" 2>"$T/ids.err"; then
    while IFS= read -r line; do
        case $line in
        PASS\ *) t_pass "${line#PASS }" ;;
        FAIL\ *) t_fail "${line#FAIL }" "mt against the reference" ;;
        esac
    done <"$T/ids.out"
else
    t_fail "id rules" "oracle script failed: $(tail -c 400 "$T/ids.err")"
fi

# --- mt-tokenize | mt-index with the Llama 3 style tokenizer.json, against transformers -----------------
l3=$T/w/llama3
tok_hf() { mt-tokenize --tokenizer-type HuggingFaceTokenizer --tokenizer-model "$@"; }
tok_hf "$l3" --append-eod --workers 2 --quiet "$docs" | mt-index --output-prefix "$T/l3" 2>/dev/null
tok_hf "$l3/tokenizer.json" --append-eod --quiet "$docs" > "$T/l3file.toks"
tok_hf "$l3" --append-eod --quiet "$docs" > "$T/l3dir.toks"
t_cmp "tokenizer.json by its directory or by its path: same stream" "$T/l3dir.toks" "$T/l3file.toks"
mt-index --dump "$T/l3_text_document" > "$T/l3.ids"
mt-index --info "$T/l3_text_document" > "$T/l3.info"
t_grep "a 3000-token vocabulary is stored as uint16" "dtype +uint16" "$T/l3.info"
if hfpy=$("$T_TOP/tests/oracle/venv-hf.sh" 2>"$T/venvhf.err"); then
    # transformers 4.44's tokenizers reads "a b" merges only: the same file with the merges as strings
    mkdir -p "$T/l3s"
    cp "$l3/tokenizer_config.json" "$T/l3s/"
    "$py" -c 'import json, sys; j = json.load(open(sys.argv[1])); j["model"]["merges"] = [" ".join(m) for m in j["model"]["merges"]]; json.dump(j, open(sys.argv[2], "w"))' \
        "$l3/tokenizer.json" "$T/l3s/tokenizer.json"
    cat > "$T/hf.py" <<'EOF'
import json, sys
from transformers import AutoTokenizer
t = AutoTokenizer.from_pretrained(sys.argv[1])
for line in open(sys.argv[2], encoding="utf-8"):
    ids = t(json.loads(line)["text"]).input_ids   # Megatron's HuggingFaceTokenizer.tokenize
    if ids:
        ids.append(t.eos_token_id)                  # --append-eod: tokenizer.eod = eos_token_id
    print(" ".join(map(str, ids)))
EOF
    "$hfpy" "$T/hf.py" "$T/l3s" "$docs" > "$T/l3.want" 2>"$T/hf.err"
    t_cmp "mt-tokenize HuggingFaceTokenizer --append-eod == transformers AutoTokenizer + eos (Megatron)" "$T/l3.want" "$T/l3.ids"
    # an added token whose id leaves a gap (99999 in the file), made the eos_token: transformers numbers it
    # as tokenizers does (the next free id), and so does mt, in the text and as the end of document
    mkdir -p "$T/gap"
    "$py" -c 'import json, sys; j = json.load(open(sys.argv[1])); j["added_tokens"].append({"id": 99999, "content": "<|gap|>", "single_word": False, "lstrip": False, "rstrip": False, "normalized": False, "special": True}); json.dump(j, open(sys.argv[2], "w")); c = json.load(open(sys.argv[3])); c["eos_token"] = "<|gap|>"; json.dump(c, open(sys.argv[4], "w"))' \
        "$T/l3s/tokenizer.json" "$T/gap/tokenizer.json" "$T/l3s/tokenizer_config.json" "$T/gap/tokenizer_config.json"
    { head -n 20 "$docs"; printf '{"text": "a<|gap|>b <|gap|><|gap|>"}\n'; } > "$T/gap.jsonl"
    "$hfpy" "$T/hf.py" "$T/gap" "$T/gap.jsonl" > "$T/gap.want" 2>>"$T/hf.err"
    tok_hf "$T/gap" --append-eod --quiet "$T/gap.jsonl" | mt-index --output-prefix "$T/gapds" 2>/dev/null
    mt-index --dump "$T/gapds_text_document" > "$T/gap.ids"
    t_cmp "an added token whose id leaves a gap: mt-tokenize == transformers (the next free id)" "$T/gap.want" "$T/gap.ids"
else
    t_skip "transformers" "$(head -c 200 "$T/venvhf.err")"
fi

# --- the NFC normalizer (Qwen2 style tokenizer.json): mt-tokenize against HF tokenizers -------------------
q=$T/w/qwen2nfc
tok_hf "$q" --quiet "$T/w/qwen2nfc.jsonl" | mt-index --output-prefix "$T/q" 2>/dev/null
mt-index --dump "$T/q_text_document" > "$T/q.ids"
t_cmp "mt-tokenize with the NFC normalizer == HF tokenizers (test documents, decomposed text)" "$T/w/qwen2nfc.want" "$T/q.ids"
mkdir -p "$T/qseq"
"$py" -c 'import json, sys; j = json.load(open(sys.argv[1])); j["normalizer"] = {"type": "Sequence", "normalizers": [j["normalizer"], {"type": "Sequence", "normalizers": [j["normalizer"]]}]}; json.dump(j, open(sys.argv[2], "w"))' \
    "$q/tokenizer.json" "$T/qseq/tokenizer.json"
tok_hf "$T/qseq" --quiet "$T/w/qwen2nfc.jsonl" | mt-index --output-prefix "$T/qseq" 2>/dev/null
mt-index --dump "$T/qseq_text_document" > "$T/qseq.ids"
t_cmp "a Sequence of NFC normalizers is NFC" "$T/w/qwen2nfc.want" "$T/qseq.ids"

# --- TikTokenizer on cl100k_base: int32 dataset, against tiktoken; mt-shuffle reads it -------------------
cl=$T/w/cl100k_base.tiktoken
# --tiktoken-num-special-tokens 0: tiktoken's own ids (the ranks), not Megatron's layout (train-tiktoken.sh)
tik() { mt-tokenize --tokenizer-type TikTokenizer --tiktoken-num-special-tokens 0 "$@"; }
tik --tokenizer-model "$cl" --append-eod --quiet "$docs" | mt-index --output-prefix "$T/cl" 2>/dev/null
mt-index --info "$T/cl_text_document" > "$T/cl.info"
t_grep "cl100k ids are stored as int32" "dtype +int32" "$T/cl.info"
mt-index --dump "$T/cl_text_document" > "$T/cl.ids"
"$py" - "$cl" "$docs" > "$T/cl.want" <<'EOF'
import json, sys, tiktoken
from tiktoken.load import load_tiktoken_bpe
pat = r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+|\s++$|\s*[\r\n]|\s+(?!\S)|\s"""
enc = tiktoken.Encoding("cl100k_base", pat_str=pat, mergeable_ranks=load_tiktoken_bpe(sys.argv[1]),
                        special_tokens={"<|endoftext|>": 100257})
for line in open(sys.argv[2], encoding="utf-8"):
    ids = enc.encode_ordinary(json.loads(line)["text"])
    print(" ".join(map(str, ids + [100257] if ids else [])))
EOF
t_cmp "mt-tokenize TikTokenizer cl100k --append-eod == tiktoken encode_ordinary + <|endoftext|>" "$T/cl.want" "$T/cl.ids"
t_ok "mt-shuffle reads the int32 dataset" mt-shuffle --data-path "$T/cl_text_document" --split 100,0,0 \
    --seq-length 64 --train-samples 8 --global-batch-size 4 --data-cache-path "$T/cache" --show-sample 0
tik --tokenizer-model "$cl" --quiet "$docs" > "$T/cl.toks"
tik --tokenizer-model "$cl" --decode --json < "$T/cl.toks" > "$T/cl.back"
if "$py" -c 'import json, sys; a = [json.loads(l)["text"] for l in open(sys.argv[1])]; b = [json.loads(l)["text"] for l in open(sys.argv[2])]; sys.exit(a != b)' \
    "$docs" "$T/cl.back"; then t_pass "--decode gives back the documents (cl100k)"; else t_fail "--decode cl100k" "texts differ"; fi

# --- refusals: one line naming the tokenizer type and file, non-zero exit ---------------------------------
refuse() { # NAME EDIT-PYTHON EXPECTED-REGEX
    mkdir -p "$T/bad"
    "$py" -c "import json, sys; j = json.load(open(sys.argv[1])); $2; json.dump(j, open(sys.argv[2], 'w'))" \
        "$l3/tokenizer.json" "$T/bad/tokenizer.json"
    if echo '{"text": "a"}' | tok_hf "$T/bad" >/dev/null 2>"$T/bad.err"; then
        t_fail "$1" "accepted"
    elif [ "$(wc -l < "$T/bad.err")" = 1 ] && grep -q "HuggingFaceTokenizer: $T/bad/tokenizer.json: .*$3" "$T/bad.err"; then
        t_pass "$1"
    else
        t_fail "$1" "message: $(head -c 300 "$T/bad.err")"
    fi
}
refuse "Unigram model refused" 'j["model"]["type"] = "Unigram"' "model type Unigram is not supported"
refuse "byte_fallback refused" 'j["model"]["byte_fallback"] = True' "byte_fallback"
refuse "Lowercase normalizer refused" 'j["normalizer"] = {"type": "Lowercase"}' "normalizer Lowercase is not supported"
refuse "NFKC in a Sequence with NFC refused" \
    'j["normalizer"] = {"type": "Sequence", "normalizers": [{"type": "NFC"}, {"type": "NFKC"}]}' "normalizer NFKC is not supported"
refuse "unknown Split regex refused" 'j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = r"\p{L}+|\s+"' \
    "regex .* is not one mt knows"
refuse "Metaspace pre-tokenizer refused" 'j["pre_tokenizer"] = {"type": "Metaspace"}' "pre_tokenizer Metaspace"
printf 'not base64 at all\n' > "$T/bad.tiktoken"
if echo '{"text": "a"}' | tik --tokenizer-model "$T/bad.tiktoken" >/dev/null 2>"$T/bad.err"; then
    t_fail "bad tiktoken file refused" "accepted"
else
    t_grep "bad tiktoken file refused naming the file" "TikTokenizer: $T/bad.tiktoken: line 1" "$T/bad.err"
fi
# a token listed twice: tiktoken would keep its later rank; mt names both lines
{ cat "$cl"; head -n 1 "$cl" | sed 's/ [0-9]*$/ 100256/'; } > "$T/dup.tiktoken"
if echo '{"text": "a"}' | tik --tokenizer-model "$T/dup.tiktoken" >/dev/null 2>"$T/bad.err"; then
    t_fail "tiktoken file with a token listed twice refused" "accepted"
else
    t_grep "tiktoken file with a token listed twice refused naming the file and both lines" \
        "TikTokenizer: $T/dup.tiktoken: line 100257: the token of line 1 again" "$T/bad.err"
fi
rm -f "$l3/tokenizer_config.json"
if tok_hf "$l3" --append-eod < "$docs" >/dev/null 2>"$T/bad.err"; then t_fail "--append-eod without eos_token" "accepted"
else t_grep "--append-eod without an eos_token is an error" "append-eod: .*no eos_token" "$T/bad.err"; fi
