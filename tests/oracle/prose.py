"""prose.py: a fixed corpus of English-like paragraphs for the tests that train on GPT-2 tokens, independent
of the project's own files (a test whose data came from its README or man pages would train on other
tokens after every edit to them). Words are drawn with a seeded generator from the GPT-2 vocabulary's
whole-word tokens, with a Zipf-like weight so that frequent words recur, in sentences of 6 to 18 words.

`python3 prose.py N [SEED]` prints N paragraphs as JSON lines {"text": ...} (loose JSON for mt-tokenize).
"""
import json
import os
import random
import sys


def words(vocab_path):
    """The vocabulary's alphabetic whole-word tokens (a leading space, Ġ), by id: the earlier, the more frequent."""
    vocab = json.load(open(vocab_path, encoding="utf-8"))
    out = [t[1:] for t, _ in sorted(vocab.items(), key=lambda kv: kv[1]) if t.startswith("\u0120") and t[1:].isalpha()
           and t[1:].isascii()]
    return out[:4000]


def paragraphs(n, seed=1):
    top = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
    w = words(os.path.join(top, "share", "gpt2", "vocab.json"))
    weights = [1.0 / (i + 10) for i in range(len(w))]
    rng = random.Random(seed)
    for _ in range(n):
        sentences = []
        for _ in range(rng.randint(2, 6)):
            s = rng.choices(w, weights, k=rng.randint(6, 18))
            sentences.append(" ".join(s).capitalize() + rng.choice([".", ".", ".", "?", "!"]))
        yield " ".join(sentences)


if __name__ == "__main__":
    for p in paragraphs(int(sys.argv[1]), int(sys.argv[2]) if len(sys.argv) > 2 else 1):
        print(json.dumps({"text": p}))
