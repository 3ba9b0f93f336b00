#!/usr/bin/env bash
# train-tiktoken.sh: Megatron's TikTokenizer end to end. Ranks files made here from cl100k_base and
# o200k_base (bytes first in byte order, then merged tokens by rank, as Megatron's JSON wants them), as
# Megatron's JSON list and as a tiktoken file in shuffled line order: mt-tokenize | mt-index gives the same
# .bin from both, and the ids of an independent computation of Megatron's CustomTikTokenizer (the tiktoken
# package over the ranks cut to --vocab-size less the special tokens and shifted behind them; </s> as
# eod) for the default 1000 special tokens, a custom list of 16, Megatron's default vocabulary of 131072
# (o200k's ranks cut) and --tiktoken-num-special-tokens 0 (the ranks as ids); bad JSON entries and a
# vocabulary the file cannot fill are one-line errors. Then mt-train on the dataset with the same flags
# (padded vocabulary = Megatron's for them, recorded in the checkpoint), mt-eval --score counting the
# reference's tokens, and mt-generate from the checkpoint alone: prompt ids are the reference's and the
# text is the reference's decoding of the generated ids.
. "$(dirname "$0")/../lib.sh"
d=$T_TMP
export OMP_NUM_THREADS=2
if ! py=$("$T_TOP/tests/oracle/venv.sh" 2>"$d/venv.err"); then
    t_skip "oracles" "tiktoken/bpe-openai unavailable: $(head -c 200 "$d/venv.err")"
    exit 0
fi

# --- ranks files, corpus and the reference ids ------------------------------------------------------------
cat >"$d/ref.py" <<'EOF'
import base64, gzip, json, os, random, sys
import bpe_openai, tiktoken
from tiktoken.load import load_tiktoken_bpe

V1 = r"[^\r\n\p{L}\p{N}]?+\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]++[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+"
V2 = ("[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+|[^\\r\\n\\p{L}\\p{N}]?"
      "[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|"
      "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+")
PATS = {"v1": V1, "v2": V2}

def megatron(entries, pattern, n_special, specials, vocab):
    """Megatron's CustomTikTokenizer as its source describes it: the JSON list cut to vocab - n_special
    entries, rank r as id n_special + r, the special tokens (then <SPECIAL_i>) as ids 0..n_special-1."""
    if n_special == 0:   # mt's extension: tiktoken's own numbering
        ranks = {base64.b64decode(x["token_bytes"]): x["rank"] for x in entries}
        return tiktoken.Encoding("plain", pat_str=PATS[pattern], mergeable_ranks=ranks, special_tokens={}), None
    names = specials + ["<SPECIAL_%d>" % i for i in range(len(specials), n_special)]
    ranks = {base64.b64decode(x["token_bytes"]): n_special + x["rank"] for x in entries[:vocab - n_special]}
    assert set(ranks.values()) | set(range(n_special)) == set(range(vocab))
    enc = tiktoken.Encoding("megatron", pat_str=PATS[pattern], mergeable_ranks=ranks,
                            special_tokens={t: i for i, t in enumerate(names)})
    return enc, names.index("</s>")

def make(work):
    data = os.path.join(os.path.dirname(bpe_openai.__file__), "data")
    for name, out, count in (("cl100k_base", "small", 2000), ("o200k_base", "big", None)):
        src = os.path.join(work, name + ".tiktoken")
        with gzip.open(os.path.join(data, name + ".tiktoken.gz")) as f, open(src, "wb") as g:
            g.write(f.read())
        merged = sorted((r, t) for t, r in load_tiktoken_bpe(src).items() if len(t) > 1)
        toks = [bytes([i]) for i in range(256)] + [t for _, t in merged]
        toks = toks[:count] if count else toks
        entries = [{"rank": i, "token_bytes": base64.b64encode(t).decode(), "token_str": t.decode("utf-8", "replace")}
                   for i, t in enumerate(toks)]
        json.dump(entries, open(os.path.join(work, out + ".json"), "w"))
        lines = ["%s %d\n" % (x["token_bytes"], x["rank"]) for x in entries]
        random.Random(5).shuffle(lines)
        open(os.path.join(work, out + ".tiktoken"), "w").write("".join(lines))
    docs = ["The quick brown fox jumps over the lazy dog %d times." % i for i in range(30)]
    docs += ["def f%d(x, y=%d):\n    return x * y + %d\n" % (i, i % 7, i * i) for i in range(40)]
    docs += ["Ünïcödé ✓ 東京 %d — naïve café; <s> and </s> are text here, 12345678." % i for i in range(10)]
    docs += ["", "   \n\n  spaces\tand\ttabs  ", "ALLCAPS lowercase MiXeD 3.14159"]
    with open(os.path.join(work, "docs.jsonl"), "w") as f:
        for t in docs: f.write(json.dumps({"text": t}) + "\n")

def ids(work, jsonfile, pattern, n_special, specials, vocab, eod, out):
    entries = json.load(open(os.path.join(work, jsonfile)))
    enc, eos = megatron(entries, pattern, n_special, specials, vocab)
    with open(out, "w") as f:
        for line in open(os.path.join(work, "docs.jsonl"), encoding="utf-8"):
            t = enc.encode_ordinary(json.loads(line)["text"])
            if t and eod: t = t + [eos]   # preprocess_data.py --append-eod: tokenizer.eod is </s>
            f.write(" ".join(map(str, t)) + "\n")

if __name__ == "__main__":
    if sys.argv[1] == "make": make(sys.argv[2])
    else:
        work, jf, pat, n, vocab, eod, out = sys.argv[2:9]
        ids(work, jf, pat, int(n), json.loads(sys.argv[9]), int(vocab), eod == "1", out)
EOF
if ! "$py" "$d/ref.py" make "$d" 2>"$d/make.err"; then t_fail "ranks files" "$(tail -c 300 "$d/make.err")"; exit 0; fi
ref() { PYTHONPATH=$d "$py" "$d/ref.py" ids "$d" "$@" 2>>"$d/ref.err" || t_fail "reference $*" "$(tail -c 300 "$d/ref.err")"; }
ref small.json v1 1000 3000 1 "$d/small.want" '["<unk>", "<s>", "</s>"]'
ref small.json v1 16 2016 1 "$d/small16.want" '["<pad>", "</s>", "<unk>", "<s>"]'
ref big.json v2 100 131072 1 "$d/big.want" '["<unk>", "<s>", "</s>"]'
ref small.json v1 0 0 0 "$d/small0.want" '[]'

tok() { mt-tokenize --tokenizer-type TikTokenizer --quiet "$@"; }
dataset() { # PREFIX mt-tokenize-args...: tokenize docs.jsonl into PREFIX_text_document, dump its ids
    local p=$1; shift
    if tok "$@" --input "$d/docs.jsonl" 2>"$d/tok.err" | mt-index --output-prefix "$d/$p" 2>"$d/index.err"; then
        mt-index --dump "$d/${p}_text_document" >"$d/$p.ids"
        mt-index --info "$d/${p}_text_document" >"$d/$p.info"
    else
        t_fail "dataset $p" "$(cat "$d/tok.err" "$d/index.err" | head -c 300)"
    fi
}

# --- tokenization against the reference ---------------------------------------------------------------------
flags=(--tiktoken-pattern v1 --vocab-size 3000)
dataset sj --tokenizer-model "$d/small.json" "${flags[@]}" --append-eod
dataset st --tokenizer-model "$d/small.tiktoken" "${flags[@]}" --append-eod
t_cmp "Megatron's JSON and the tiktoken file give the same .bin" "$d/sj_text_document.bin" "$d/st_text_document.bin"
t_cmp "... and the same .idx" "$d/sj_text_document.idx" "$d/st_text_document.idx"
t_cmp "ids == Megatron's TikTokenizer (1000 special tokens, rank r = id 1000 + r, eod </s> = 2)" "$d/small.want" "$d/sj.ids"
t_grep "a 3000-id vocabulary is stored as uint16" "dtype +uint16" "$d/sj.info"
dataset s16 --tokenizer-model "$d/small.json" --tiktoken-pattern v1 --vocab-size 2016 --append-eod \
    --tiktoken-num-special-tokens 16 --tiktoken-special-tokens "<pad>" "</s>" "<unk>" "<s>"
t_cmp "ids == Megatron's with 16 special tokens of a custom list (eod </s> = 1)" "$d/small16.want" "$d/s16.ids"
dataset big --tokenizer-model "$d/big.json" --tiktoken-pattern v2 --tiktoken-num-special-tokens 100 --append-eod
t_cmp "ids == Megatron's default vocabulary of 131072: o200k's 199998 ranks cut to 130972, pattern v2" "$d/big.want" "$d/big.ids"
t_grep "the 131072-id vocabulary is stored as int32" "dtype +int32" "$d/big.info"
dataset s0 --tokenizer-model "$d/small.json" --tiktoken-pattern v1 --tiktoken-num-special-tokens 0
t_cmp "--tiktoken-num-special-tokens 0: the ranks are the ids (tiktoken's own numbering)" "$d/small0.want" "$d/s0.ids"

# --- refusals: one line naming the file and entry, or the flag ---------------------------------------------
refuse() { # NAME EXPECTED-REGEX mt-tokenize-args...
    local name=$1 re=$2; shift 2
    if echo '{"text": "a"}' | tok "$@" >/dev/null 2>"$d/bad.err"; then t_fail "$name" "accepted"
    elif [ "$(wc -l <"$d/bad.err")" = 1 ] && grep -Eq -- "$re" "$d/bad.err"; then t_pass "$name ($(cat "$d/bad.err"))"
    else t_fail "$name" "message: $(head -c 300 "$d/bad.err")"; fi
}
edit() { "$py" -c "import json, sys; j = json.load(open(sys.argv[1])); $1; json.dump(j, open(sys.argv[2], 'w'))" "$d/small.json" "$d/$2"; }
edit 'j[300]["rank"], j[301]["rank"] = 301, 300' order.json
refuse "a rank out of order" "TikTokenizer: $d/order.json: entry 300: rank 301 out of order" \
    --tokenizer-model "$d/order.json" "${flags[@]}"
edit 'j[500]["token_bytes"] = "@@@@"' b64.json
refuse "bad base64" "TikTokenizer: $d/b64.json: entry 500 \(rank 500\): token_bytes is not .*base64" \
    --tokenizer-model "$d/b64.json" "${flags[@]}"
edit 'j[700]["token_bytes"] = j[600]["token_bytes"]' dup.json
refuse "a token given twice" "$d/dup.json: entry 700 \(rank 700\): the same token_bytes as rank 600" \
    --tokenizer-model "$d/dup.json" "${flags[@]}"
edit 'j[65]["token_bytes"] = "Qg=="' bytes.json
refuse "the first 256 ranks are the bytes in order" "$d/bytes.json: entry 65 \(rank 65\): the first 256 ranks" \
    --tokenizer-model "$d/bytes.json" "${flags[@]}"
edit 'del j[9]["token_str"]' keys.json
refuse "an entry without token_str" "$d/keys.json: entry 9: expected an object of exactly" \
    --tokenizer-model "$d/keys.json" "${flags[@]}"
refuse "a file too small for Megatron's default vocabulary says which --vocab-size fits" \
    "$d/small.json: 2000 ranks and 1000 special tokens are fewer than the 131072 ids .*give --vocab-size 3000" \
    --tokenizer-model "$d/small.json" --tiktoken-pattern v1
refuse "a vocabulary beyond the ranks" "give --vocab-size 3000" \
    --tokenizer-model "$d/small.tiktoken" --tiktoken-pattern v1 --vocab-size 3001
refuse "special tokens without </s>" "^mt-tokenize: .*--tiktoken-special-tokens: </s> missing" \
    --tokenizer-model "$d/small.json" "${flags[@]}" --tiktoken-special-tokens "<unk>" "<s>" "<eos>"
refuse "more special tokens than --tiktoken-num-special-tokens" "--tiktoken-num-special-tokens 2: fewer than the 3" \
    --tokenizer-model "$d/small.json" "${flags[@]}" --tiktoken-num-special-tokens 2
echo '{"model": {"type": "BPE"}}' >"$d/obj.json"
refuse "a tokenizer.json is not Megatron's JSON" "$d/obj.json: a JSON object" --tokenizer-model "$d/obj.json" "${flags[@]}"

# --- training, evaluation and generation with the same flags --------------------------------------------------
tflags=(--tokenizer-type TikTokenizer --tokenizer-model "$d/small.json" "${flags[@]}")
if mt-train --num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 32 --max-position-embeddings 48 \
        --micro-batch-size 4 --global-batch-size 8 --train-iters 40 --lr 1e-2 --log-interval 10 --eval-interval 40 \
        --eval-iters 2 --init-method-std 0.1 --split 90,10,0 --seed 3 "${tflags[@]}" \
        --data-path "$d/sj_text_document" --data-cache-path "$d/cache" --save "$d/ck" >"$d/train.log" 2>"$d/train.err"
then t_pass "mt-train on the TikTokenizer dataset"
else t_fail "mt-train on the TikTokenizer dataset" "$(tail -c 300 "$d/train.err")"; exit 0; fi
padded=$("$py" -c 'import math; print(math.ceil(3000 / (128 * 1)) * 128)')   # Megatron's _vocab_size_with_padding
t_grep "padded vocabulary = Megatron's for --vocab-size 3000 ($padded)" \
    "padded vocab \(size: 3000\) with $((padded - 3000)) dummy tokens \(new size: $padded\)" "$d/train.log"
meta=$d/ck/iter_0000040/mp_rank_00
if "$py" - "$meta" "$padded" >"$d/meta.out" 2>&1 <<'EOF'
import json, struct, sys
meta = json.load(open(sys.argv[1] + "/meta.json"))["args"]
assert meta["tokenizer-type"] == "TikTokenizer" and meta["tiktoken-num-special-tokens"] == 1000, meta
assert meta["vocab-size"] == 3000 and meta["tiktoken-pattern"] == "v1" and meta["tiktoken-special-tokens"] == [], meta
raw = open(sys.argv[1] + "/model.safetensors", "rb").read()
hdr = json.loads(raw[8:8 + struct.unpack("<Q", raw[:8])[0]])
rows = [v["shape"][0] for k, v in hdr.items() if k.endswith("word_embeddings.weight")]
assert rows == [int(sys.argv[2])], rows
print("embedding rows %d" % rows[0])
EOF
then t_pass "the checkpoint records the tokenizer flags and has Megatron's padded rows ($(cat "$d/meta.out"))"
else t_fail "checkpoint tokenizer args and rows" "$(tail -c 300 "$d/meta.out")"; fi
first=$(grep -oE 'lm loss: [0-9.E+-]+' "$d/train.log" | head -1 | awk '{print $3}')
last=$(grep -oE 'lm loss: [0-9.E+-]+' "$d/train.log" | tail -1 | awk '{print $3}')
"$py" -c "import sys; sys.exit(not float('$last') < float('$first') - 1.0)" \
    && t_pass "the loss falls while training ($first -> $last)" || t_fail "the loss falls" "$first -> $last"

head -n 75 "$d/docs.jsonl" | tail -n 6 >"$d/score.jsonl"
if mt-eval --load "$d/ck" --score "$d/score.jsonl" >"$d/score.out" 2>"$d/score.err"; then
    "$py" -c 'import json, sys
want = [len(l.split()) - 1 for l in open(sys.argv[1]).read().splitlines()[69:75]]   # without the eod
got = [json.loads(l)["tokens"] for l in open(sys.argv[2])]
sys.exit(want != got or print(got))' "$d/small.want" "$d/score.out" >"$d/score.cmp" 2>&1 \
        && t_pass "mt-eval --score counts the reference's tokens ($(cat "$d/score.cmp"))" \
        || t_fail "mt-eval --score token counts" "$(cat "$d/score.cmp" "$d/score.out" | head -c 300)"
else t_fail "mt-eval --score" "$(tail -c 300 "$d/score.err")"; fi
mt-eval --load "$d/ck" --eval-split valid --json >"$d/eval.out" 2>"$d/eval.err" \
    && "$py" -c 'import json, math, sys; r = json.load(open(sys.argv[1])); sys.exit(not (r["tokens"] > 0 and r["loss"] < math.log(3000) - 1))' "$d/eval.out" \
    && t_pass "mt-eval of the validation split: $(cat "$d/eval.out")" || t_fail "mt-eval validation split" "$(cat "$d/eval.out" "$d/eval.err" | head -c 300)"

prompts=("def f3(x" "The quick brown" "Ünïcödé ✓")
if mt-generate --load "$d/ck" --greedy --max-new-tokens 24 --json "${prompts[@]}" >"$d/gen.jsonl" 2>"$d/gen.err"; then
    if PYTHONPATH=$d "$py" - "$d" "$d/gen.jsonl" >"$d/gen.cmp" 2>&1 <<'EOF'
import json, sys
import ref
enc, eos = ref.megatron(json.load(open(sys.argv[1] + "/small.json")), "v1", 1000, ["<unk>", "<s>", "</s>"], 3000)
rows = [json.loads(l) for l in open(sys.argv[2])]
assert len(rows) == 3
for r in rows:
    assert r["prompt_ids"] == enc.encode_ordinary(r["prompt"]), (r["prompt"], r["prompt_ids"])
    assert r["tokens"] and all(1000 <= t < 3000 or t == eos for t in r["tokens"]), r["tokens"]
    text_ids = r["tokens"][:-1] if r["stop"] == "eod" else r["tokens"]   # the text ends before the eod
    assert r["stop"] != "eod" or r["tokens"][-1] == eos, r
    want = enc.decode_bytes(text_ids).decode("utf-8", "replace")
    assert r["text"] == want, (r["text"], want)
print("; ".join(repr(r["prompt"] + r["text"]) for r in rows))
EOF
    then t_pass "mt-generate encodes and decodes with the checkpoint's TikTokenizer: $(head -c 300 "$d/gen.cmp")"
    else t_fail "mt-generate with the checkpoint's TikTokenizer" "$(tail -c 400 "$d/gen.cmp")"; fi
else t_fail "mt-generate" "$(tail -c 300 "$d/gen.err")"; fi

# a checkpoint written before mt followed Megatron's layout (no --tiktoken-num-special-tokens in its args)
# was trained on the ranks as ids: it is read with 0 special tokens
cp -r "$d/ck" "$d/ck-old"
"$py" -c 'import json, sys
p = sys.argv[1] + "/iter_0000040/mp_rank_00/meta.json"; m = json.load(open(p))
del m["args"]["tiktoken-num-special-tokens"], m["args"]["tiktoken-special-tokens"]; json.dump(m, open(p, "w"))' "$d/ck-old"
if mt-generate --load "$d/ck-old" --greedy --max-new-tokens 2 --json "The quick brown" >"$d/old.jsonl" 2>"$d/old.err" &&
    PYTHONPATH=$d "$py" -c 'import json, sys, ref
enc, _ = ref.megatron(json.load(open(sys.argv[1] + "/small.json")), "v1", 0, [], 0)
r = json.loads(open(sys.argv[2]).readline()); sys.exit(r["prompt_ids"] != enc.encode_ordinary(r["prompt"]))' "$d" "$d/old.jsonl"
then t_pass "a checkpoint without the flag in its args is read with the ranks as ids ($(head -c 80 "$d/old.jsonl"))"
else t_fail "a checkpoint without --tiktoken-num-special-tokens" "$(cat "$d/old.err" "$d/old.jsonl" | head -c 300)"; fi
