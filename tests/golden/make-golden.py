#!/usr/bin/env python3
# make-golden.py: writes tests/golden/gpt2.jsonl, the expected GPT-2 ids of a multilingual, code and
# edge-case corpus, as computed by tiktoken's encode_ordinary with an Encoding built from
# share/gpt2/{vocab.json,merges.txt}. test_bpe's golden_ids case compares mt against it offline.
# Regenerate (needs PyPI once, for tests/oracle/venv.sh):
#   $(tests/oracle/venv.sh) tests/golden/make-golden.py
import json
import os
import sys

import tiktoken
from tiktoken.load import data_gym_to_mergeable_bpe_ranks

TOP = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
PAT = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""

CORPUS = [
    # English prose, contractions in every case
    "The quick brown fox jumps over the lazy dog. It's 3:45pm and we're late!",
    "I'm sure you'll agree: they've done what he'd said, and that's that. Don't, won't, can't.",
    "I'M SURE YOU'LL AGREE: THEY'VE DONE WHAT HE'D SAID. DON'T! It'S mIxEd'Ll'Ve'Re'D'M'T",
    "'s 't 're 've 'm 'll 'd 'S 'T 'RE 'VE 'M 'LL 'D ''s '''t 'steal 'realm 'do",
    "rock 'n' roll, the '90s, O'Neil's \"quotes\" and \u2018curly\u2019 \u201cquotes\u201d, it\u2019s",
    "Hello world\n\nSecond paragraph.\n\n\n\nFourth.   Trailing spaces   \nend   ",
    # German, French, Russian, Greek
    "Gr\u00fc\u00dfe aus K\u00f6ln! Die Stra\u00dfe ist \u00fcberf\u00fcllt, \u00c4rger \u00fcber \u00d6l und \u00dcbermut. Fu\u00dfg\u00e4nger\u00fcberweg.",
    "L'\u00e9t\u00e9 dernier, j'ai vu na\u00efvement l'\u0153uvre \u00e0 c\u00f4t\u00e9 du ch\u00e2teau \u2014 \u00ab\u00a0Quelle fa\u00e7on\u00a0!\u00a0\u00bb",
    "\u041f\u0440\u0438\u0432\u0435\u0442, \u043c\u0438\u0440! \u042d\u0442\u043e \u0442\u0435\u0441\u0442 \u0442\u043e\u043a\u0435\u043d\u0438\u0437\u0430\u0442\u043e\u0440\u0430: \u0401\u0436\u0438\u043a \u0432 \u0442\u0443\u043c\u0430\u043d\u0435, 2024 \u0433\u043e\u0434.",
    "\u0393\u03b5\u03b9\u03ac \u03c3\u03bf\u03c5 \u039a\u03cc\u03c3\u03bc\u03b5! \u0391\u03c5\u03c4\u03cc \u03b5\u03af\u03bd\u03b1\u03b9 \u03ad\u03bd\u03b1 \u03c4\u03b5\u03c3\u03c4; \u03a8\u03c5\u03c7\u03ae \u03ba\u03b1\u03b9 \u03bb\u03cc\u03b3\u03bf\u03c2.",
    # Arabic, Hebrew (with marks), Hindi
    "\u0645\u0631\u062d\u0628\u0627 \u0628\u0627\u0644\u0639\u0627\u0644\u0645! \u0647\u0630\u0627 \u0627\u062e\u062a\u0628\u0627\u0631 \u0661\u0662\u0663 \u0648\u064e\u0627\u0644\u0633\u0651\u064e\u0644\u0627\u0645\u064f",
    "\u05e9\u05b8\u05c1\u05dc\u05d5\u05b9\u05dd \u05e2\u05d5\u05dc\u05dd! \u05d6\u05d4 \u05de\u05d1\u05d7\u05df.",
    "\u0928\u092e\u0938\u094d\u0924\u0947 \u0926\u0941\u0928\u093f\u092f\u093e! \u092f\u0939 \u090f\u0915 \u092a\u0930\u0940\u0915\u094d\u0937\u0923 \u0939\u0948\u0964 \u0967\u0968\u0969",
    # Chinese, Japanese, Korean, Thai
    "\u4f60\u597d\uff0c\u4e16\u754c\uff01\u8fd9\u662f\u4e00\u4e2a\u6d4b\u8bd5\u3002\u6211\u4eec\u57282024\u5e74\u5b66\u4e60\u81ea\u7136\u8bed\u8a00\u5904\u7406\u3002",
    "\u3053\u3093\u306b\u3061\u306f\u4e16\u754c\uff01\u30ab\u30bf\u30ab\u30ca\u3068\u3072\u3089\u304c\u306a\u3001\u6f22\u5b57\u3002\uff8a\uff9d\uff76\uff78\u3000\u5168\u89d2\u30b9\u30da\u30fc\u30b9",
    "\uc548\ub155\ud558\uc138\uc694 \uc138\uacc4! \ud55c\uad6d\uc5b4 \ud14c\uc2a4\ud2b8\uc785\ub2c8\ub2e4. \u1112\u1161\u11ab\u1100\u1173\u11af",
    "\u0e2a\u0e27\u0e31\u0e2a\u0e14\u0e35\u0e0a\u0e32\u0e27\u0e42\u0e25\u0e01 \u0e19\u0e35\u0e48\u0e04\u0e37\u0e2d\u0e01\u0e32\u0e23\u0e17\u0e14\u0e2a\u0e2d\u0e1a \u0e51\u0e52\u0e53",
    # emoji: ZWJ sequences, skin tones, flags, keycaps, variation selectors
    "\U0001F469\U0001F3FD\u200d\U0001F4BB \U0001F468\u200d\U0001F469\u200d\U0001F467\u200d\U0001F466 \U0001F44D\U0001F3FF \U0001F1E9\U0001F1EA 1\ufe0f\u20e3 \u2764\ufe0f \U0001F600!",
    "emoji\U0001F680rocket \U0001F680 \U0001F680\U0001F680 a\U0001F600b",
    # combining marks
    "e\u0301 e\u0301\u0301\u0301 a\u0308o\u0308u\u0308 \u0915\u093f Z\u0351\u036b\u0343\u036a\u0302\u036b\u033d\u034f\u0334\u0319\u0324\u031e\u0349\u035a\u032f\u031e\u0320\u034dA\u036b\u0357\u0334\u0362\u0335\u031c\u0330\u0354L\u0368\u0367\u0369\u0358\u0320G\u0311\u0357\u030e\u0305\u035b\u0341\u0334\u033b\u0348\u034d\u0354\u0339O\u0342\u030c\u030c\u0358\u0328\u0335\u0339\u033b\u031d\u0333",
    " \u0301x \u0301 \u0301\u0301",
    # numbers in many scripts and number-like symbols
    "0123456789 1,234,567.89 3.14159e-10 0x1F 0b1010 1_000_000 \u0660\u0661\u0662 \u06f1\u06f2 \u0966\u0967 \u09e6\u09e7 \u0e50\u0e51 \uff11\uff12\uff13",
    "\u2160\u2161\u2162 \u00bd\u00bc\u00be \u00b2\u00b3\u00b9 \u2460\u2461 \u3007\u4e00\u4e8c \U00010107 \U0001D7CE\U0001D7CF 12\u00bd x\u00b2",
    " 2024\u5e74 2024 \u5e74 v1.2.3 3rd 21st 100% $5 \u20ac10 \u00a35 \u00a5100",
    # whitespace of every kind
    "a\tb\t\tc \td\t e",
    "line1\r\nline2\r\n\r\nline4\rline5\n",
    "nbsp\u00a0word \u00a0word\u00a0\u00a0word",
    "ideo\u3000space\u3000\u3000x \u3000y",
    "ls\u2028ps\u2029nel\u0085vt\u000bff\u000cfs\u001cgs\u001drs\u001eus\u001f",
    "zwsp\u200bword\ufeffbom\u180emvs\u2060wj \u200b \ufeff",
    "ogham\u1680space en\u2000em\u2001thin\u2009hair\u200anarrow\u202fmath\u205fend",
    "   \n\n   \t\t  \u00a0 \u3000\n",
    " ", "  ", "\n", "\n\n\n", "\t", "\u00a0", " \u00a0", "\u00a0 ", " a", "a ", "a  ", "  a", " \n a",
    "x \n\ny", "x\n \ny", "x \u00a0y", "x\u00a0 y", "x\t y", "x \ty", "x  \u3000 y",
    # code
    "def fib(n: int) -> int:\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n    if n < 2:\n        return n\n    return fib(n - 1) + fib(n - 2)\n",
    "class Foo(Bar):\n\tdef __init__(self, *args, **kwargs):\n\t\tsuper().__init__(*args, **kwargs)  # noqa: E501\n\t\tself._x = {'a': [1, 2, 3]}\n",
    "#include <stdio.h>\n\nint main(int argc, char **argv)\n{\n    for (int i = 0; i < argc; i++) printf(\"%s\\n\", argv[i]);\n    return 0;\n}\n",
    "const f = async (x) => { await fetch(`/api/${x}?q=1&r=2`); return x ?? null; }; // arrow\nlet y = x?.a?.[0] || [];",
    "#!/bin/sh\nset -eu\nfor f in *.txt; do\n  grep -c 'foo' \"$f\" | awk '{s+=$1} END {print s}' >> \"${OUT:-/dev/null}\" 2>&1\ndone\n",
    "SELECT id, name FROM users WHERE age >= 18 AND name LIKE '%son' ORDER BY id DESC;",
    "<html><body><div class=\"x\">Hello &amp; welcome&nbsp;!</div></body></html>",
    "{\"key\": \"value\", \"n\": [1, 2.5, -3e8, true, null], \"nested\": {\"a\": \"\\u00e9\\n\"}}",
    "    \n        \n    x = 1\n\n\n    y = 2\n",
    "if(a&&b||!c){x+=1;}else{y-=2;}/*comment*/ i++; j--; k<<=3; m>>=1; p->q; r::s;",
    # base64, URLs, hashes
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==",
    "U29tZSB0ZXh0IHRvIGVuY29kZSB3aXRoIGJhc2U2NCwgYW5kIHNvbWUgbW9yZSB0ZXh0Lg+/==",
    "https://example.com/path/to/page?query=a%20b&x=1#frag http://user:pass@host:8080/ mailto:a.b@c.de",
    "sha256: e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855 uuid 123e4567-e89b-12d3-a456-426614174000",
    # punctuation runs and symbols
    "!!! ??? ... --- === +++ *** ### @@@ $$$ %%% ^^^ &&& ||| ~~~ ``` ''' \"\"\" ;;; ::: ,,,",
    "\u2014\u2013\u2026 \u00a9\u00ae\u2122 \u00b0C \u00b1 \u00d7\u00f7 \u2260\u2264\u2265 \u221e \u2211\u220f\u222b \u2192\u2190\u2191\u2193 \u2605\u2606 \u266a",
    "<|endoftext|> text <|endoftext|><|endoftext|>",
    "control\u0000nul\u0001soh\u007fdel\u0080pad\u009fapc\u00adshy",
    # letters from many scripts, incl. Unicode 16 additions (Garay, Todhri, Ol Onal, Kirat Rai)
    "\u10e5\u10d0\u10e0\u10d7\u10e3\u10da\u10d8 \u0540\u0561\u0575\u0565\u0580\u0565\u0576 \u12a0\u121b\u122d\u129b \u1780\u17d2\u1798\u17c2\u179a \u0dc3\u0dd2\u0d82\u0dc4\u0dbd \u0f56\u0f7c\u0f51\u0f0b\u0f61\u0f72\u0f42",
    "\U00010D50\U00010D51 \U00010D40\U00010D41 \U000105C0\U000105C1 \U0001E5D0\U0001E5D1 \U00016D40\U00016D41 \U0001E5F1",
    "\U00020000\U0002A6D6 \U00030000 \U00031350 \U0001F130 \U0001D400\U0001D401 \U00010400\U00010428",
    "Mixed\u0440\u0443\u0441\u0441\u043a\u0438\u0439English\u4e2d\u6587123\u0661\u0662abc",
    "\ue000\uf8ff \U000F0000 \U0010FFFD \U000E0041\U000E0042 \ufffd \ufffe\uffff",
    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
    "1234567890123456789012345678901234567890123456789012345678901234567890",
    "--------------------------------------------------------------------------------",
    "                                                                        x",
]


def main():
    gpt2 = os.path.join(TOP, "share", "gpt2")
    ranks = data_gym_to_mergeable_bpe_ranks(os.path.join(gpt2, "merges.txt"), os.path.join(gpt2, "vocab.json"))
    enc = tiktoken.Encoding("gpt2-local", pat_str=PAT, mergeable_ranks=ranks,
                            special_tokens={"<|endoftext|>": 50256})
    out = os.path.join(TOP, "tests", "golden", "gpt2.jsonl")
    with open(out, "w", encoding="ascii") as f:
        for text in CORPUS:
            f.write(json.dumps({"text": text, "ids": enc.encode_ordinary(text)}, ensure_ascii=True) + "\n")
    print(f"{out}: {len(CORPUS)} lines", file=sys.stderr)


if __name__ == "__main__":
    main()
