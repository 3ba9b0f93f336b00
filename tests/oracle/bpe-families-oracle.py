#!/usr/bin/env python3
# bpe-families-oracle.py: mt's tokenizers beyond GPT-2 against their reference implementations on the
# seeded random strings of bpe-oracle.py and the project's test documents:
#   tiktoken for cl100k_base and o200k_base (ranks from the bpe-openai wheel, as mt reads them), and for
#     Megatron's TikTokenizer patterns v1/v2 over the same ranks;
#   HF tokenizers for tokenizer.json files made here: a byte-level BPE trained with Llama 3's Split regex
#     and added tokens (merges written as [a, b] pairs, as current tokenizers does), the same with Qwen2's
#     regex and "a b" merges, and GPT-NeoX style (ByteLevel with its own regex, no post-processor);
#   transformers' AutoTokenizer (what Megatron's HuggingFaceTokenizer calls) for the BOS of the first.
# Usage: bpe-families-oracle.py HELPER WORKDIR COUNT SEED [DOCS.jsonl...]
# Prints "PASS name" / "FAIL name: why"; up to five mismatching strings go to stderr.
import gzip
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import importlib.util

spec = importlib.util.spec_from_file_location("bpe_oracle", os.path.join(os.path.dirname(__file__), "bpe-oracle.py"))
bo = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bo)

import regex as pyregex
import tiktoken
from tiktoken.load import load_tiktoken_bpe
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers, processors, trainers

CL100K = r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+|\s++$|\s*[\r\n]|\s+(?!\S)|\s"""
O200K = "|".join([
    r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
    r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
    r"""\p{N}{1,3}""", r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""", r"""\s*[\r\n]+""", r"""\s+(?!\S)""", r"""\s+"""])
V1 = r"[^\r\n\p{L}\p{N}]?+\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]++[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+"
V2 = ("[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+|[^\\r\\n\\p{L}\\p{N}]?"
      "[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+"
      "|\\s+(?!\\S)|\\s+")
LLAMA3 = r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
QWEN2 = r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
LLAMA3_SPECIALS = ["<|begin_of_text|>", "<|end_of_text|>", "<|reserved_special_token_0|>", "<|eot_id|>"]

# strings that exercise what tells the families apart
EDGES = ["I'M here", "it'S", "'ſ x", "'ſx", "'ſtop it'ſ", "IT'ſ", "x'Ll", "don'T", "HELLOworld", "ÀBCdef", "ABC", "a\u0301b", "\u0301", " \u0301x",
         "x  \n  ", "\n  ", "a\n\n  b", "  \n", "abc  ", "12345678", " 2024年", "a/b\n/", "x!!\r\n\r\ny", "\t\tx",
         "\u00a0word", "\u3000字", "'s'S'ſ", "hello's world'LL", "CamelCaseWord", "ǅungla", "ʰa", "<|begin_of_text|>x",
         "a<|end_of_text|><|eot_id|>", "<|begin_of_text|><|begin_of_text|>", "<|endoftext|> a", "<|fim_prefix|>",
         "", " ", "\r\n", "1 2 3", "١٢٣٤", "Ⅻ", "x\u2028y", "x \u0085 y"]


def run_helper(helper, kind, path, strings, special=False):
    import subprocess
    args = [helper, "--encode-lines"] + (["--special"] if special else []) + [kind, path]
    inp = "".join(json.dumps(s, ensure_ascii=True) + "\n" for s in strings)
    p = subprocess.run(args, input=inp.encode(), capture_output=True)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(args)}: exit {p.returncode}: {p.stderr.decode(errors='replace')[:300]}")
    return [[int(x) for x in ln.split()] for ln in p.stdout.decode().split("\n")[:-1]]


def ranks_file(work, name):
    import bpe_openai
    src = os.path.join(os.path.dirname(bpe_openai.__file__), "data", name + ".tiktoken.gz")
    dst = os.path.join(work, name + ".tiktoken")
    if not os.path.exists(dst):
        with open(dst, "wb") as f:
            f.write(gzip.open(src).read())
    return dst


def tokenizer_json(work, strings, name, regex, pairs_merges, specials, bos):
    tok = Tokenizer(models.BPE(ignore_merges=True))
    if regex:
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(pattern=Regex(regex), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    else:
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=3000, show_progress=False, initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(strings, trainer)
    tok.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in specials])
    tok.add_tokens([AddedToken("  ", normalized=True)])  # GPT-NeoX has such whitespace tokens
    if bos:
        tok.post_processor = processors.TemplateProcessing(single=f"{bos} $A", pair=f"{bos} $A {bos} $B",
                                                           special_tokens=[(bos, tok.token_to_id(bos))])
    d = os.path.join(work, name)
    os.makedirs(d, exist_ok=True)
    path = os.path.join(d, "tokenizer.json")
    tok.save(path)
    j = json.load(open(path))
    m = j["model"]["merges"]
    if pairs_merges != isinstance(m[0], list):
        j["model"]["merges"] = [x.split(" ", 1) for x in m] if pairs_merges else [" ".join(x) for x in m]
        json.dump(j, open(path, "w"), ensure_ascii=False)
    if specials:
        json.dump({"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": bos, "eos_token": specials[min(1, len(specials) - 1)]},
                  open(os.path.join(d, "tokenizer_config.json"), "w"))
    return d, Tokenizer.from_file(path)


def main():
    helper, work, count, seed = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    docs = []
    for p in sys.argv[5:]:
        docs += [json.loads(l)["text"] for l in open(p, encoding="utf-8") if l.strip()]
    strings = EDGES + docs + bo.make_strings(count, seed)

    # the pre-tokenizers alone against the regex module (tiktoken's own dependency) on the patterns' sources:
    # what the ranks of a vocabulary may hide (cl100k's \s++$ changes pieces but, with cl100k's ranks, no ids).
    # The regex module follows a newer Unicode than tiktoken and HF tokenizers (16.0, as mt): only strings of
    # characters assigned in this Python's Unicode (14.0 or later), whose classes have not changed since.
    import unicodedata
    stable = [s for s in strings if all(unicodedata.category(c) != "Cn" for c in s)]
    for patname, pat in (("cl100k", CL100K), ("llama3", LLAMA3), ("qwen2", QWEN2), ("o200k", O200K), ("v1", V1),
                         ("v2", V2)):
        want = [[len(p.encode()) for p in pyregex.findall(pat, s)] for s in stable]
        inp = "".join(json.dumps(s, ensure_ascii=True) + "\n" for s in stable)
        import subprocess
        got = subprocess.run([helper, "--pretok-lines", patname], input=inp.encode(), capture_output=True,
                             check=True).stdout.decode().split("\n")[:-1]
        bo.report(f"{patname} pieces == the regex module's findall ({len(stable)} strings)", stable,
                  [[int(x) for x in g.split()] for g in got], want)

    for name, pat, patname, specials in (
            ("cl100k_base", CL100K, None, {"<|endoftext|>": 100257, "<|fim_prefix|>": 100258,
                                           "<|fim_middle|>": 100259, "<|fim_suffix|>": 100260,
                                           "<|endofprompt|>": 100276}),
            ("o200k_base", O200K, None, {"<|endoftext|>": 199999, "<|endofprompt|>": 200018}),
            ("cl100k_base", V1, "v1", {}), ("o200k_base", V2, "v2", {})):
        path = ranks_file(work, name)
        enc = tiktoken.Encoding(name, pat_str=pat, mergeable_ranks=load_tiktoken_bpe(path), special_tokens=specials)
        kind = "tiktoken" + (":" + patname if patname else "")
        label = f"{name}{' pattern ' + patname if patname else ''}"
        bo.report(f"{label}: mt == tiktoken encode_ordinary", strings, run_helper(helper, kind, path, strings),
                  [enc.encode_ordinary(s) for s in strings])

    train = docs + bo.make_strings(2000, seed + 100)
    for name, regex, pairs, specials, bos in (("llama3", LLAMA3, True, LLAMA3_SPECIALS, "<|begin_of_text|>"),
                                              ("qwen2", QWEN2, False, ["<|endoftext|>", "<|im_end|>"], None),
                                              ("neox", None, False, ["<|endoftext|>"], None)):
        d, hf = tokenizer_json(work, train, name, regex, pairs, specials, bos)
        mt = run_helper(helper, "hf", d, strings, special=True)
        bo.report(f"{name} tokenizer.json: mt == HF tokenizers encode", strings, mt,
                  [e.ids for e in hf.encode_batch(strings)])
        dec = [hf.decode(ids, skip_special_tokens=False) for ids in mt]
        want = [(bos or "") + s for s in strings]
        bo.report(f"{name} tokenizer.json: HF decodes mt's ids back to the text", strings, dec, want)
        if name == "llama3":
            llama3_dir, llama3_strings, llama3_mt = d, strings, mt
    with open(os.path.join(work, "llama3.expected"), "w") as f:
        json.dump({"dir": llama3_dir, "strings": llama3_strings, "ids": llama3_mt}, f)


if __name__ == "__main__":
    main()
