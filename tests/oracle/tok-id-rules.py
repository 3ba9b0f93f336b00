#!/usr/bin/env python3
# tok-id-rules.py: the rules by which tokenizer.json and tiktoken files give tokens their ids, mt against
# the references. Each case is a small file made to test one rule (gaps and repeats among the added
# tokens, vocab ids with holes, a token or rank listed twice, an empty token, ...), read by the reference
# (HF tokenizers, tiktoken) and by mt (build/tests/test_bpe --encode-lines). A case says what mt must do:
# "follow": load it and give the reference's ids on the case's texts; "refuse": exit non-zero with one line
# on stderr naming the file (and, for a tiktoken file, the line), where the reference fails too or reads
# the file into something mt does not take (what the reference did is part of the PASS line).
# Usage: tok-id-rules.py HELPER WORKDIR
# Prints "PASS name" / "FAIL name: why".
import base64
import json
import os
import subprocess
import sys

os.environ["TIKTOKEN_CACHE_DIR"] = ""  # tiktoken caches files by path: these change under one path
os.environ["RUST_BACKTRACE"] = "0"  # tiktoken panics on some cases: its message, not a backtrace
import tiktoken
from tiktoken.load import load_tiktoken_bpe
from tokenizers import Tokenizer

GPT2 = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""


def byte_symbols():
    keep = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
    sym, n = {}, 0
    for b in range(256):
        if b in keep:
            sym[b] = chr(b)
        else:
            sym[b] = chr(256 + n)
            n += 1
    return sym


def tokenizer_json(added=(), vocab=None, normalizer=None, template=None):
    """The 256 byte symbols (id = byte), "ab" 256, "bc" 257 and vocab's entries; added: (id, content,
    normalized, special); template: {special token: ids} put before the sequence."""
    sym = byte_symbols()
    v = {sym[b]: b for b in range(256)}
    v.update({"ab": 256, "bc": 257})
    v.update(vocab or {})
    pp = None
    if template:
        single = [{"SpecialToken": {"id": k, "type_id": 0}} for k in template] + [{"Sequence": {"id": "A", "type_id": 0}}]
        pp = {"type": "TemplateProcessing", "single": single, "pair": single + [{"Sequence": {"id": "B", "type_id": 1}}],
              "special_tokens": {k: {"id": k, "ids": ids, "tokens": [k] * len(ids)} for k, ids in template.items()}}
    return {"version": "1.0", "truncation": None, "padding": None,
            "added_tokens": [{"id": i, "content": c, "single_word": False, "lstrip": False, "rstrip": False,
                              "normalized": nz, "special": sp} for i, c, nz, sp in added],
            "normalizer": normalizer,
            "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
            "post_processor": pp, "decoder": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                                              "use_regex": True},
            "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                      "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                      "vocab": v, "merges": ["a b", "b c"]}}


def b64(s):
    return base64.b64encode(s).decode()


def tiktoken_lines(more):
    return "".join(f"{b64(bytes([c]))} {c}\n" for c in range(256)) + "".join(m + "\n" for m in more)


# (name, mode, file text, texts); the tokenizer.json ones as a dict, or as text where JSON objects repeat keys
HF = [
    ("added token whose id leaves a gap: the next free id", "follow",
     tokenizer_json([(300, "<x>", False, True)]), ["a<x>b", "<x><x>"]),
    ("added tokens numbered in the order of the list, not by the ids written", "follow",
     tokenizer_json([(259, "<x>", False, True), (258, "<y>", False, True)]), ["<x><y>", "<y>"]),
    ("added token given twice with the same flags: one token", "follow",
     tokenizer_json([(258, "<x>", False, True), (259, "<x>", False, True), (260, "<y>", False, True)]), ["<x><y>"]),
    ("added token given twice with other flags (the reference takes the later ones)", "refuse",
     tokenizer_json([(258, "<x>", False, True), (258, "<x>", True, False)]), ["<x>"]),
    ("added token equal to a vocab entry with another id: the vocab's id", "follow",
     tokenizer_json([(300, "ab", False, True), (301, "<x>", False, True)]), ["xab<x>", "ab"]),
    ("added token that is a vocab entry in byte symbols: matched as those characters", "follow",
     tokenizer_json([(258, "\u0120ab", False, True)], vocab={"\u0120ab": 258}), ["x ab \u0120ab", "\u0120ab ab"]),
    ("vocab ids with holes: added tokens after the number of entries", "follow",
     tokenizer_json([(400, "<x>", False, True), (401, "<y>", False, True)], vocab={"bc": 270}), ["<x>bc<y>"]),
    ("vocab ids with holes: an added token numbered as a vocab entry (the reference gives both one id)", "refuse",
     tokenizer_json([(258, "<x>", False, True), (259, "<y>", False, True)], vocab={"bc": 259}), ["<y>bc"]),
    ("two vocab entries with one id", "refuse", tokenizer_json(vocab={"bc": 256}), ["abc"]),
    ("vocab key given twice: the later id, counted once before the added tokens", "follow",
     json.dumps(tokenizer_json([(0, "<x>", False, True)])).replace('"ab": 256', '"ab": 256, "ab": 300'),
     ["ab", "abc<x>"]),
    ("added token with a negative id", "refuse", tokenizer_json([(-1, "<x>", False, True)]), ["<x>"]),
    ("added token with empty content (the reference skips it)", "refuse", tokenizer_json([(258, "", False, True)]), ["a"]),
    ("post_processor special token id beyond the vocabulary (the reference emits an id no token has)", "refuse",
     tokenizer_json([(258, "<s>", False, True)], template={"<s>": [300]}), ["a"]),
    ("post_processor special token id of an added token: as written", "follow",
     tokenizer_json([(300, "<s>", False, True)], template={"<s>": [258]}), ["a<s>"]),
]
AB, BC = b64(b"ab"), b64(b"bc")
TIKTOKEN = [
    ("tiktoken token listed twice with two ranks (tiktoken keeps the later rank)", "refuse",
     tiktoken_lines([f"{AB} 256", f"{BC} 257", f"{AB} 258"]), ["abc ab"]),
    ("tiktoken token listed twice with one rank", "refuse", tiktoken_lines([f"{AB} 256", f"{AB} 256"]), ["ab"]),
    ("tiktoken single byte listed again with another rank", "refuse", tiktoken_lines([f"{b64(b'a')} 256"]), ["ab"]),
    ("tiktoken rank given to two tokens", "refuse", tiktoken_lines([f"{AB} 256", f"{BC} 256"]), ["abc"]),
    ("tiktoken line without a token", "refuse", tiktoken_lines([f"{AB} 256", " 257"]), ["ab"]),
    ("tiktoken empty token (all padding)", "refuse", tiktoken_lines([f"{AB} 256", "==== 257"]), ["ab"]),
    ("tiktoken token and rank separated by a tab (tiktoken splits at any blank)", "refuse",
     tiktoken_lines([f"{AB}\t256"]), ["ab"]),
    ("tiktoken rank written 2_56 (Python's int reads 256)", "refuse", tiktoken_lines([f"{AB} 2_56"]), ["ab"]),
    ("tiktoken ranks with holes: the ranks as ids", "follow",
     tiktoken_lines([f"{AB} 300", f"{b64(b'abc')} 280", f"{BC} 290"]), ["abc ab bc", "xbcab"]),
]


def run_mt(helper, kind, path, texts, special):
    args = [helper, "--encode-lines"] + (["--special"] if special else []) + [kind, path]
    inp = "".join(json.dumps(s) + "\n" for s in texts).encode()
    p = subprocess.run(args, input=inp, capture_output=True)
    ids = [[int(x) for x in ln.split()] for ln in p.stdout.decode().split("\n")[:-1]]
    return p.returncode, ids, p.stderr.decode(errors="replace")


def reference(kind, path, texts):
    """(ids, None) or (None, what went wrong)."""
    try:
        if kind == "hf":
            t = Tokenizer.from_file(path)
            return [t.encode(s).ids for s in texts], None
        enc = tiktoken.Encoding("t", pat_str=GPT2, mergeable_ranks=load_tiktoken_bpe(path), special_tokens={})
        return [enc.encode_ordinary(s) for s in texts], None
    except BaseException as e:  # tiktoken's Rust panics are BaseExceptions
        return None, f"{type(e).__name__}: {str(e).splitlines()[0][:120]}"


def check(helper, work, n, name, mode, content, texts, kind):
    path = os.path.join(work, f"case{n}" + (".json" if kind == "hf" else ".tiktoken"))
    with open(path, "w", encoding="utf-8") as f:
        f.write(content if isinstance(content, str) else json.dumps(content))
    want, err = reference(kind, path, texts)
    rc, got, msg = run_mt(helper, "hf" if kind == "hf" else "tiktoken:gpt2", path, texts, kind == "hf")
    ref = f"reference: {err}" if err else f"reference ids {want}"
    if mode == "follow":
        if err:
            return f"FAIL {name}: the reference fails ({err})"
        if rc:
            return f"FAIL {name}: mt refuses: {msg.strip()[:200]}"
        if got != want:
            return f"FAIL {name}: mt ids {got}, {ref}"
        return f"PASS {name} (ids {want})"
    lines = msg.strip().split("\n")
    if rc == 0:
        return f"FAIL {name}: mt accepts it (ids {got}; {ref})"
    if len(lines) != 1 or path not in lines[0] or (kind == "tiktoken" and ": line " not in lines[0]):
        return f"FAIL {name}: mt's message is not one line naming the file{' and line' if kind != 'hf' else ''}: {msg[:300]}"
    said = lines[0][len("test_bpe: "):].replace(path, os.path.basename(path))
    return f"PASS {name}: mt refuses ({said[:200]}); {ref}"


def main():
    helper, work = sys.argv[1], sys.argv[2]
    os.makedirs(work, exist_ok=True)
    n = 0
    for kind, cases in (("hf", HF), ("tiktoken", TIKTOKEN)):
        for name, mode, content, texts in cases:
            n += 1
            print(check(helper, work, n, name, mode, content, texts, kind), flush=True)


if __name__ == "__main__":
    main()
