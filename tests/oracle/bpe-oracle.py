#!/usr/bin/env python3
# bpe-oracle.py: compares mt's BPE encoder with tiktoken and HF tokenizers on seeded random Unicode
# strings. Usage:  bpe-oracle.py HELPER VOCAB MERGES COUNT SEED
#                  bpe-oracle.py HELPER VOCAB MERGES all-code-points   (every scalar value in context;
#                                                                       about a minute)
# HELPER is build/tests/test_bpe (its --encode-lines mode). Prints one "PASS name" or
# "FAIL name: why" line per check; up to five mismatching strings go to stderr, escaped.
import json
import os
import random
import subprocess
import sys
import tempfile

import tiktoken
from tiktoken.load import data_gym_to_mergeable_bpe_ranks
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

PAT = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
EOD = "<|endoftext|>"

SPACES = [" ", " ", " ", "\t", "\n", "\r", "\r\n", "\x0b", "\x0c", "\x85", "\xa0", "\u1680", "\u2000", "\u2005",
          "\u200a", "\u2028", "\u2029", "\u202f", "\u205f", "\u3000", "\u180e", "\u200b", "\u2060", "\ufeff",
          "\x1c", "\x1d", "\x1e", "\x1f"]
CONTRACTIONS = ["'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'T", "'RE", "'Ve", "'M", "'LL", "'D", "'",
                "''", "'''", "\u2019s", "'x", "'r", "'l", "'v"]
# letters and digits of many scripts (ranges, inclusive), Unicode 16 additions among them
SCRIPT_RANGES = [(0x41, 0x5A), (0x61, 0x7A), (0xC0, 0x24F), (0x370, 0x3FF), (0x400, 0x4FF), (0x531, 0x587),
                 (0x5D0, 0x5EA), (0x620, 0x64A), (0x660, 0x669), (0x6F0, 0x6F9), (0x900, 0x97F), (0x980, 0x9FF),
                 (0xE01, 0xE5B), (0x10A0, 0x10FF), (0x1100, 0x11FF), (0x1200, 0x137C), (0x16A0, 0x16F8),
                 (0x2160, 0x2188), (0x2460, 0x24FF), (0x3041, 0x30FF), (0x4E00, 0x9FFF), (0xAC00, 0xD7A3),
                 (0xFF10, 0xFF5A), (0x10400, 0x1044F), (0x10D40, 0x10D8F), (0x105C0, 0x105F3),
                 (0x16D40, 0x16D79), (0x1E5D0, 0x1E5FA), (0x1D400, 0x1D7FF), (0x20000, 0x2A6DF),
                 (0x30000, 0x3134A), (0x31350, 0x323AF)]
MARKS = [(0x300, 0x36F), (0x483, 0x489), (0x591, 0x5BD), (0x64B, 0x65F), (0x93A, 0x94F), (0x1AB0, 0x1ACE),
         (0x20D0, 0x20F0), (0xFE00, 0xFE0F), (0xE0100, 0xE01EF)]
SYMBOLS = [(0x21, 0x2F), (0x3A, 0x40), (0x5B, 0x60), (0x7B, 0x7E), (0xA1, 0xBF), (0x2010, 0x205E),
           (0x2190, 0x23FF), (0x2500, 0x27BF), (0x1F300, 0x1F64F), (0x1F680, 0x1F6FF), (0x1F900, 0x1F9FF)]
WORDS = ["the", "The", "hello", "world", "don", "I", "x", "foo_bar", "3", "42", "2024", "0x1F", "3.14", "def",
         "return", "{", "}", "(", ")", "==", "->", "//", "#", "\"", "``", "...", "!", "?", "http://a.b/c?d=1"]


def rand_cp(r, ranges):
    lo, hi = r.choice(ranges)
    return chr(r.randint(lo, hi))


def any_cp(r):
    while True:
        cp = r.randint(0, 0x10FFFF) if r.random() < 0.7 else r.randint(0, 0x2FFFF)
        if not 0xD800 <= cp <= 0xDFFF:
            return chr(cp)


def fragment(r, with_eod):
    k = r.random()
    if k < 0.22:
        return "".join(r.choice(SPACES) for _ in range(r.randint(1, 4)))
    if k < 0.40:
        return (" " if r.random() < 0.5 else "") + r.choice(WORDS)
    if k < 0.55:
        return "".join(rand_cp(r, SCRIPT_RANGES) for _ in range(r.randint(1, 6)))
    if k < 0.65:
        return r.choice(CONTRACTIONS)
    if k < 0.72:
        return "".join(rand_cp(r, MARKS) for _ in range(r.randint(1, 3)))
    if k < 0.82:
        return "".join(rand_cp(r, SYMBOLS) for _ in range(r.randint(1, 3)))
    if k < 0.95:
        return "".join(any_cp(r) for _ in range(r.randint(1, 3)))
    if k < 0.97:  # long pieces (base64-like, one letter repeated) reach the heap-based merge loop
        alpha = r.choice(["ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/", "a", "ab", "0123456789",
                          "\u00e9\u00e8a", "-=", "\u4e00\u4e8c"])
        return "".join(r.choice(alpha) for _ in range(r.randint(50, 400)))
    return EOD if with_eod else "<|"


def make_strings(count, seed):
    r = random.Random(seed)
    out = []
    for i in range(count):
        s = "".join(fragment(r, True) for _ in range(r.randint(1, 24)))
        out.append(s)
    return out


def run_helper(helper, vocab, merges, strings, special):
    args = [helper, "--encode-lines"] + (["--special"] if special else []) + [vocab, merges]
    inp = "".join(json.dumps(s, ensure_ascii=True) + "\n" for s in strings)
    p = subprocess.run(args, input=inp.encode(), capture_output=True)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(args)}: exit {p.returncode}: {p.stderr.decode(errors='replace')[:300]}")
    lines = p.stdout.decode().split("\n")[:-1]
    return [[int(x) for x in ln.split()] for ln in lines]


def report(name, strings, got, want):
    bad = [i for i in range(len(strings)) if got[i] != want[i]]
    if len(got) != len(want):
        print(f"FAIL {name}: {len(got)} output lines for {len(want)} strings")
    elif not bad:
        print(f"PASS {name}")
    else:
        print(f"FAIL {name}: {len(bad)} of {len(strings)} strings differ")
        for i in bad[:5]:
            print(f"    {ascii(strings[i])}\n      mt:     {got[i]}\n      oracle: {want[i]}", file=sys.stderr)
    return not bad


def all_code_points():
    # each scalar value next to a letter, a space, a digit, NBSP, itself and a double space
    out = []
    for cp in range(0x110000):
        if not 0xD800 <= cp <= 0xDFFF:
            x = chr(cp)
            out.append("a" + x + " " + x + "1 " + x + "\u00a0" + x + x + "  " + x)
    return out


def main():
    helper, vocab, merges = sys.argv[1:4]
    if sys.argv[4] == "all-code-points":
        strings = all_code_points()
    else:
        strings = make_strings(int(sys.argv[4]), int(sys.argv[5]))
    tt = tiktoken.Encoding("gpt2-local", pat_str=PAT,
                           mergeable_ranks=data_gym_to_mergeable_bpe_ranks(merges, vocab),
                           special_tokens={EOD: 50256})
    hf = Tokenizer(models.BPE.from_file(vocab, merges))
    hf.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    hf.decoder = decoders.ByteLevel()

    mt = run_helper(helper, vocab, merges, strings, False)
    report("mt == tiktoken encode_ordinary", strings, mt, [tt.encode_ordinary(s) for s in strings])
    report("mt == HF tokenizers ByteLevel BPE", strings, mt,
           [e.ids for e in hf.encode_batch(strings, add_special_tokens=False)])
    dec = [hf.decode(ids) for ids in mt]
    report("HF ByteLevel decoder restores the text from mt's ids", strings, dec, strings)

    mt_sp = run_helper(helper, vocab, merges, strings, True)
    report("mt special == tiktoken encode(allowed_special=all)", strings, mt_sp,
           [tt.encode(s, allowed_special="all") for s in strings])
    hf.add_special_tokens([EOD])
    report("mt special == HF with <|endoftext|> added as special", strings, mt_sp,
           [e.ids for e in hf.encode_batch(strings, add_special_tokens=False)])
    if len(strings) < 200000:
        trained_vocab(helper, strings)


def trained_vocab(helper, strings):
    # a vocabulary unlike GPT-2's: trained here by HF on the strings themselves, <|endoftext|> = id 0,
    # byte symbols in HF's order, merge results not at 256 + rank
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    trainer = trainers.BpeTrainer(vocab_size=2000, special_tokens=[EOD], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(strings[: len(strings) // 2], trainer)
    with tempfile.TemporaryDirectory() as d:
        vocab, merges = tok.model.save(d)
        hf = Tokenizer(models.BPE.from_file(vocab, merges))
        hf.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
        mt = run_helper(helper, vocab, merges, strings, False)
        report("trained vocab: mt == HF tokenizers", strings, mt,
               [e.ids for e in hf.encode_batch(strings, add_special_tokens=False)])
        hf.add_special_tokens([EOD])
        mt = run_helper(helper, vocab, merges, strings, True)
        report("trained vocab: mt special == HF with <|endoftext|> special", strings, mt,
               [e.ids for e in hf.encode_batch(strings, add_special_tokens=False)])


if __name__ == "__main__":
    main()
