#!/usr/bin/env python3
# bpe-families-oracle.py: mt's tokenizers beyond GPT-2 against their reference implementations on the
# seeded random strings of bpe-oracle.py and the project's test documents:
#   tiktoken for cl100k_base and o200k_base (ranks from the bpe-openai wheel, as mt reads them), and for
#     Megatron's TikTokenizer patterns v1/v2 over the same ranks;
#   HF tokenizers for tokenizer.json files made here: a byte-level BPE trained with Llama 3's Split regex
#     and added tokens (merges written as [a, b] pairs, as current tokenizers does), the same with Qwen2's
#     regex and "a b" merges, and GPT-NeoX style (ByteLevel with its own regex, no post-processor);
#   transformers' AutoTokenizer (what Megatron's HuggingFaceTokenizer calls) for the BOS of the first;
#   HF tokenizers on a Qwen2 style tokenizer.json with its NFC normalizer, on the same strings and on
#   decomposed text: every character with a canonical decomposition or a combining class (Python's
#   unicodedata) and those of libcommon/tok/nfc_tables.c, among combining marks, Hangul jamo sequences,
#   and added tokens next to marks or with content that NFC changes.
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


# decomposed text, singletons, marks out of canonical order, Hangul jamo (U+11A7 is no trailing consonant:
# U+11A8..U+11C2 are), characters newer than Unicode 9.0 (HF's NFC tables), marks next to added tokens
# (">" U+0338 is U+226F: the text between added tokens is normalized, not the whole), and added tokens
# whose content NFC changes
NFC_EDGES = ["e\u0301", "E\u0301\u0323", "e\u0323\u0301", "a\u0301\u0323\u0308b", "\u212b", "\u2126 \u212a",
             "A\u030a", "\u1e9b\u0323", "\u00c5\u0301", "\u0958", "\u0915\u093c", "\u0344", "\u0f73", "\u0dd9\u0dcf\u0dca",
             "\u1100\u1161\u11a8", "\u1100\u1161", "\uac00\u11a8", "\u1100\u1161\u11a7", "\uac00\u11a7", "\uac00\u11c2",
             "\uac00\u11c3", "\u1112\u1175\u11c2", "\u1113\u1161", "\u1112\u1176", "\u1100\u1100\u1161\u1161\u11a8\u11a8",
             "\uac01\u11a8", "\u110b\u1161\u11ab\u1102\u1167\u11bc", "\U00011935\U00011930", "a\u0316\u1dfa",
             "a\u1df6\u0316", "a\U00016ff0\u0301", "e\u0301\U0001e4ec\u0301", "<|endoftext|>\u0301", "x<|im_end|>\u0308a",
             "<|endoftext|>\u0338 a", "a<|im_end|>\u0338", "\u0301<|endoftext|>", "A\u030a<|endoftext|>A\u030a", "A\u030angstro\u0308m", "\u00c5ngstr\u00f6m",
             "\u212bngstr\u00f6m", "e\u0301t\u00e9", "\u00e9t\u00e9", "caf\u00e9 cafe\u0301 CAFE\u0301S", "\u0301\u0301",
             "\u3060 \u305f\u3099 \u30cf\u309a", "\u0627\u0653 \u0648\u0654", "\u1fb3\u0301 \u03b1\u0345\u0301",
             "\u00e9" * 40 + "e\u0301" * 40, "x\xff\u0301"]


def nfc_probes():
    """Strings of 16 probes (separated by spaces, so that they do not interact) around every character
    with a canonical decomposition or a combining class, and each of nfc_tables.c."""
    import re
    import unicodedata as ud
    cps = [cp for cp in range(0x80, 0x110000) if not 0xD800 <= cp <= 0xDFFF and
           (ud.combining(chr(cp)) or (ud.decomposition(chr(cp)) and not ud.decomposition(chr(cp)).startswith("<")))]
    inert = os.path.join(os.path.dirname(os.path.abspath(__file__)), "../../libcommon/tok/nfc_tables.c")
    cps += [int(x, 16) for x in re.findall(r"0x([0-9A-F]{5})", open(inert).read())]
    probes = []
    for cp in cps:
        c = chr(cp)
        probes += [c + "\u0316\u0301", "a\u0301" + c, "a" + c + "\u0316", "\u1100\u1161" + c]
        if ud.normalize("NFD", c) != c:
            probes.append(ud.normalize("NFD", c))
    for t in range(0x11A6, 0x11C4):  # Hangul: every trailing consonant and the edges, after LV and L V
        probes += ["\uac00" + chr(t), "\u1100\u1161" + chr(t)]
    for l in range(0x10FF, 0x1114):
        for v in (0x1160, 0x1161, 0x1175, 0x1176):
            probes.append(chr(l) + chr(v) + "\u11a8")
    return [" ".join(probes[i:i + 16]) for i in range(0, len(probes), 16)]


def tokenizer_json(work, strings, name, regex, pairs_merges, specials, bos, normalizer=None, added=()):
    tok = Tokenizer(models.BPE(ignore_merges=True))
    if normalizer:
        tok.normalizer = normalizer
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
    tok.add_tokens(list(added))
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

    # Qwen2's NFC normalizer; added tokens matched in the normalized text are matched as their content
    # normalized ("A\u030angstr\u00f6m" matches "\u00c5ngstr\u00f6m"), the others in the raw text only
    from tokenizers import normalizers
    nfc_strings = strings + NFC_EDGES + nfc_probes()
    d, hf = tokenizer_json(work, train + NFC_EDGES, "qwen2nfc", QWEN2, False, ["<|endoftext|>", "<|im_end|>"], None,
                           normalizers.NFC(), [AddedToken("A\u030angstr\u00f6m", normalized=True),
                                               AddedToken("e\u0301t\u00e9", normalized=False)])
    mt = run_helper(helper, "hf", d, nfc_strings, special=True)
    want = [e.ids for e in hf.encode_batch(nfc_strings)]
    bo.report(f"qwen2 tokenizer.json with the NFC normalizer: mt == HF tokenizers encode ({len(nfc_strings)} strings)",
              nfc_strings, mt, want)
    changed = sum(hf.normalizer.normalize_str(s) != s for s in nfc_strings)
    print(f"{'PASS' if changed > 800 else 'FAIL'} HF's NFC changes {changed} of those strings (over 800)")
    with open(os.path.join(work, "qwen2nfc.jsonl"), "w") as f, open(os.path.join(work, "qwen2nfc.want"), "w") as g:
        for t, ids in zip(docs + NFC_EDGES, hf.encode_batch(docs + NFC_EDGES)):
            f.write(json.dumps({"text": t}) + "\n")
            g.write(" ".join(map(str, ids.ids)) + "\n")


if __name__ == "__main__":
    main()
