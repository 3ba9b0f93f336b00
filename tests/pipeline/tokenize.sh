#!/usr/bin/env bash
# tokenize.sh: mt-tokenize as a user drives it: JSON lines and plain text in, token stream out,
# decoding back, worker-count independence, zstd input, and every bad-input error path.
. "$(dirname "$0")/../lib.sh"
T=$T_TMP
tok() { mt-tokenize --vocab-file "$GPT2_VOCAB" --merge-file "$GPT2_MERGES" "$@"; }
PY=/usr/bin/python3

# A small corpus with code, several languages, escapes and awkward whitespace.
$PY - "$T/c.jsonl" <<'EOF'
import json, sys, random
rnd = random.Random(7)
docs = ["def hello_world():\n    print('Hello, world!')\n", "Grüße aus Köln — naïve café", "日本語のテキスト。中文文本。",
        "tabs\tand\r\nCRLF  \n\n  spaces   ", "<|endoftext|> is plain text here", "", "emoji 👩‍👩‍👧 and \u00a0nbsp",
        "I'M sure it's 2024年", "x" * 5000]
words = ["the", " model", "\n", "  ", "def", "(", "))", "é", "ß", "数", "42", "'s", "\t"]
for i in range(300):
    docs.append("".join(rnd.choice(words) for _ in range(rnd.randint(0, 60))))
with open(sys.argv[1], "w", encoding="utf-8") as f:
    for i, d in enumerate(docs):
        f.write(json.dumps({"id": i, "text": d, "meta": {"n": i}}, ensure_ascii=(i % 2 == 0)) + "\n")
EOF

t_ok "tokenize JSON lines" tok "$T/c.jsonl" --json-keys text
cp "$T_TMP/out" "$T/w1.toks"
t_ok "tokenize with 4 workers" tok --workers 4 --input "$T/c.jsonl" --json-keys text
t_cmp "output identical for 1 and 4 workers" "$T/w1.toks" "$T_TMP/out"
tok --json-keys text --workers 3 < "$T/c.jsonl" > "$T/stdin.toks" 2>/dev/null
t_cmp "stdin gives the same stream as a file" "$T/w1.toks" "$T/stdin.toks"
zstd -q -19 "$T/c.jsonl" -o "$T/c.data"   # compressed, and not named .zst
t_ok "zstd input detected by content" tok --workers 2 "$T/c.data"
t_cmp "zstd input gives the same stream" "$T/w1.toks" "$T_TMP/out"

# Round trip: decode --json gives back exactly the texts.
tok --decode --json < "$T/w1.toks" > "$T/back.jsonl" 2>"$T/err"
if $PY - "$T/c.jsonl" "$T/back.jsonl" <<'EOF'
import json, sys
a = [json.loads(l)["text"] for l in open(sys.argv[1], encoding="utf-8")]
b = [json.loads(l)["text"] for l in open(sys.argv[2], encoding="utf-8")]
sys.exit(0 if a == b else 1)
EOF
then t_pass "decode --json round-trips every document"; else t_fail "decode --json round-trips every document" "texts differ"; fi

# Known ids (tiktoken's encode_ordinary of these strings), and EOD handling.
printf '{"text": "hello world"}\n{"text": ""}\n{"text": "a\\n\\nb"}\n' > "$T/k.jsonl"
tok --append-eod "$T/k.jsonl" > "$T/k.toks" 2>/dev/null
$PY - "$T/k.toks" > "$T/k.ids" <<'EOF'
import struct, sys
b = open(sys.argv[1], "rb").read()
assert b[:8] == b"MTTOKSv1"
ver, width, vocab, eod, flags, nkeys = struct.unpack_from("<IIIiII", b, 8)
p = 32
for _ in range(nkeys):
    n, = struct.unpack_from("<I", b, p); p += 4 + n
while b[p:p+1] == b"D":
    key, n = struct.unpack_from("<II", b, p + 1); p += 9
    print(" ".join(str(x) for x in struct.unpack_from("<%dH" % n, b, p))); p += 2 * n
assert b[p:p+1] == b"E"
print("header", ver, width, vocab, eod, flags, nkeys)
EOF
printf '31373 995 50256\n\n64 198 198 65 50256\nheader 1 2 50257 50256 1 1\n' > "$T/k.want"
t_cmp "known ids, EOD only after non-empty documents, header fields" "$T/k.want" "$T/k.ids"

printf '{"text": "a<|endoftext|>"}\n' | tok --parse-special-tokens > "$T/s.toks" 2>/dev/null
printf '64 50256\n' > "$T/s.want"
$PY -c "
import struct,sys
b=open('$T/s.toks','rb').read(); p=32+4+4
key,n=struct.unpack_from('<II',b,p+1); print(' '.join(map(str,struct.unpack_from('<%dH'%n,b,p+9))))" > "$T/s.got"
t_cmp "--parse-special-tokens maps <|endoftext|> to 50256" "$T/s.want" "$T/s.got"

# Several keys: one dataset per key, records in input order.
printf '{"a": "x", "b": "y z"}\n{"a": "", "b": "w"}\n' > "$T/m.jsonl"
tok "$T/m.jsonl" --json-keys a b | tok --decode --json > "$T/m.out" 2>"$T/err"
printf '{"a":"x"}\n{"b":"y z"}\n{"a":""}\n{"b":"w"}\n' > "$T/m.want"
t_cmp "several --json-keys: one record per key per line" "$T/m.want" "$T/m.out"

# Plain-text modes.
printf 'first line\nsecond \xff line\n' > "$T/p.txt"
tok --input-format lines "$T/p.txt" | tok --decode > "$T/p.out" 2>"$T/err"
printf 'first line\nsecond \xef\xbf\xbd line\n' > "$T/p.want"
t_cmp "lines mode: one document per line, invalid UTF-8 -> U+FFFD" "$T/p.want" "$T/p.out"
printf 'crlf\r\nmid\rdle\r\n\r\nlast\r' | tok --input-format lines | tok --decode --json > "$T/crlf.out" 2>"$T/err"
printf '{"text":"crlf"}\n{"text":"mid\\rdle"}\n{"text":""}\n{"text":"last"}\n' > "$T/crlf.want"
t_cmp "lines mode: a CRLF line's \\r is stripped (Python's universal newlines), others kept" "$T/crlf.want" "$T/crlf.out"
printf 'doc one\nstill one\n' > "$T/d1.txt"; printf 'doc two' > "$T/d2.txt"
tok --input-format document "$T/d1.txt" "$T/d2.txt" | tok --decode --json > "$T/d.out" 2>"$T/err"
printf '{"text":"doc one\\nstill one\\n"}\n{"text":"doc two"}\n' > "$T/d.want"
t_cmp "document mode: one document per file" "$T/d.want" "$T/d.out"
printf '50256 31373\n[64, 198]\n' | tok --decode > "$T/i.out" 2>"$T/err"
printf '<|endoftext|>hello\na\n\n' > "$T/i.want"
t_cmp "--decode of id lines" "$T/i.want" "$T/i.out"

# Bad input: one clear line naming file and line, non-zero exit.
bad() { # name, expected message regex, args...
    local name=$1 re=$2; shift 2
    if tok "$@" > "$T/bad.out" 2> "$T/bad.err"; then t_fail "$name" "exit 0"; return; fi
    if [ "$(wc -l < "$T/bad.err")" -eq 1 ] && grep -Eq -- "$re" "$T/bad.err"; then t_pass "$name"
    else t_fail "$name" "stderr: $(cat "$T/bad.err")"; fi
}
printf '{"text": "ok"}\n{"text": "broken\n{"text": "ok"}\n' > "$T/b1.jsonl"
bad "malformed JSON names file and line" "^mt-tokenize: .*b1.jsonl: line 2: column [0-9]+: malformed JSON" "$T/b1.jsonl"
printf '{"text": "ok"}\n{"other": "x"}\n' > "$T/b2.jsonl"
bad "missing key" "b2.jsonl: line 2: missing key 'text'" "$T/b2.jsonl"
printf '{"text": 12}\n' > "$T/b3.jsonl"
bad "non-string value" "b3.jsonl: line 1: key 'text' is a number, expected a string" "$T/b3.jsonl"
printf '{"text": "ok \xc3\x28"}\n' > "$T/b4.jsonl"
bad "invalid UTF-8 in JSON" "b4.jsonl: line 1: .*(UTF-8|decode byte)" "$T/b4.jsonl"
printf '[1, 2]\n' > "$T/b5.jsonl"
bad "not an object" "b5.jsonl: line 1: expected a JSON object" "$T/b5.jsonl"
head -c 3000 "$T/c.data" > "$T/trunc.zst"
bad "truncated zstd input" "trunc.zst: truncated zstd" "$T/trunc.zst"
bad "missing input file" "nope.jsonl: No such file" "$T/nope.jsonl"
# Corruption inside a zstd file is reported at its compressed offset (the block ending there), not byte 0.
$PY - "$T/c.data" "$T/corrupt.zst" <<'EOF'
import sys
b = bytearray(open(sys.argv[1], "rb").read())
for i in range(len(b) // 2, len(b) // 2 + 64):
    b[i] ^= 0x5A
open(sys.argv[2], "wb").write(b)
EOF
bad "corrupt zstd input is one line" "corrupt.zst: corrupt zstd input near compressed byte [0-9]+" "$T/corrupt.zst"
at=$(sed -n 's/.*near compressed byte \([0-9]*\).*/\1/p' "$T/bad.err")
size=$(wc -c < "$T/corrupt.zst")
if [ -n "$at" ] && [ "$at" -ge $((size / 2)) ] && [ "$at" -le "$size" ]; then t_pass "corrupt zstd input: offset at or after the damage"
else t_fail "corrupt zstd input: offset at or after the damage" "damage at $((size / 2)) of $size, reported '${at}'"; fi

# One input line is bounded (--max-line-bytes): a runaway line is a one-line error naming file and line.
printf '{"text": "abc"}\n' > "$T/ml.jsonl"   # 15 bytes before the newline
t_ok "--max-line-bytes: a line of exactly N bytes is read" tok --max-line-bytes 15 "$T/ml.jsonl"
bad "--max-line-bytes: a line of N+1 bytes is an error" "ml.jsonl: line 1: longer than 14 bytes \(--max-line-bytes\)" \
    --max-line-bytes 14 "$T/ml.jsonl"
bad "--max-line-bytes: /dev/zero as JSON lines" "^mt-tokenize: /dev/zero: line 1: longer than 65536 bytes" \
    --max-line-bytes 65536 /dev/zero
bad "--max-line-bytes: /dev/zero as lines" "^mt-tokenize: /dev/zero: line 1: longer than 65536 bytes" \
    --input-format lines --max-line-bytes 65536 /dev/zero
bad "--max-line-bytes: /dev/zero as a document" "^mt-tokenize: /dev/zero: document longer than 65536 bytes" \
    --input-format document --max-line-bytes 65536 /dev/zero
# With no limit, memory that runs out is the same kind of error (exit 1), not an abort.
if (ulimit -v 400000 && mt-tokenize --help) >/dev/null 2>&1; then
    for fmt in jsonl lines; do
        (ulimit -v 400000; exec mt-tokenize --vocab-file "$GPT2_VOCAB" --merge-file "$GPT2_MERGES" \
            --input-format $fmt --max-line-bytes 0 /dev/zero) >/dev/null 2>"$T/oom.err"
        rc=$?
        if [ $rc = 1 ] && [ "$(wc -l < "$T/oom.err")" = 1 ] && grep -q '/dev/zero: line 1: out of memory' "$T/oom.err"
        then t_pass "--input-format $fmt: allocation failure on a long line is a one-line error, exit 1"
        else t_fail "--input-format $fmt: allocation failure on a long line" "exit $rc: $(head -c 300 "$T/oom.err")"; fi
    done
else t_skip "allocation failure on a long line" "ulimit -v does not work with this build (sanitizers)"; fi
printf '{"a": 1,\n' > "$T/v.json"
if mt-tokenize --vocab-file "$T/v.json" --merge-file "$GPT2_MERGES" < "$T/k.jsonl" > /dev/null 2> "$T/bad.err"; then
    t_fail "bad vocab file" "exit 0"
else t_grep "bad vocab file names the file and line" "v.json.*line [0-9]+" "$T/bad.err"; fi
mt-tokenize --vocab-file "$T/no-vocab.json" --merge-file "$GPT2_MERGES" < "$T/k.jsonl" > /dev/null 2> "$T/bad.err"
t_grep "missing vocab file: No such file, naming it" "^mt-tokenize: [^ ]*no-vocab.json: No such file or directory$" "$T/bad.err"
mt-tokenize --vocab-file "$T" --merge-file "$GPT2_MERGES" < "$T/k.jsonl" > /dev/null 2> "$T/bad.err"
t_grep "a directory as vocab file: is a directory" "^mt-tokenize: $T: is a directory$" "$T/bad.err"
mt-tokenize --vocab-file "$GPT2_VOCAB" --merge-file "$T" < "$T/k.jsonl" > /dev/null 2> "$T/bad.err"
t_grep "a directory as merge file: is a directory" "^mt-tokenize: $T: is a directory$" "$T/bad.err"
bad "bad --workers value" "--workers: 'two' is not an integer" --workers two "$T/k.jsonl"
bad "--workers 0 rejected" "--workers: 0 is out of range" --workers 0 "$T/k.jsonl"
bad "an input file after --json-keys is caught" "--json-keys: '.*k.jsonl' is a file" --json-keys text "$T/k.jsonl"
bad "unknown flag" "unknown option '--frobnicate'" --frobnicate "$T/k.jsonl"
bad "sentence splitting refused clearly" "--split-sentences: .*not supported" --split-sentences "$T/k.jsonl"

# A bad line ends the stream without its end record, so mt-index cannot take a prefix for the whole.
tok "$T/b1.jsonl" > "$T/partial.toks" 2>/dev/null
if tail -c 17 "$T/partial.toks" | head -c 1 | grep -q E; then t_fail "no end record after an error" "found one"
else t_pass "no end record after an error"; fi

# --skip-bad-lines: bad lines are counted and reported, the rest is kept.
cat "$T/b1.jsonl" "$T/b2.jsonl" "$T/b3.jsonl" > "$T/mixed.jsonl"
tok --skip-bad-lines "$T/mixed.jsonl" 2> "$T/skip.err" | tok --decode > "$T/skip.out" 2>/dev/null
t_grep "--skip-bad-lines reports the count" "skipped 3 bad lines" "$T/skip.err"
t_grep "--skip-bad-lines names each bad line" "mixed.jsonl: line 2: .*skipped" "$T/skip.err"
printf 'ok\nok\nok\n' > "$T/skip.want"
t_cmp "--skip-bad-lines keeps the good documents" "$T/skip.want" "$T/skip.out"

# Lone surrogate escapes become U+FFFD (as Python json + tiktoken); a pair is one code point.
printf '{"text": "a\\ud83db"}\n{"text": "\\ud83d\\ude00"}\n' | tok | tok --decode > "$T/sur.out" 2>/dev/null
printf 'a\xef\xbf\xbdb\n\xf0\x9f\x98\x80\n' > "$T/sur.want"
t_cmp "lone surrogate -> U+FFFD, pair -> one code point" "$T/sur.want" "$T/sur.out"

# Progress: silent when stderr is not a TTY, Megatron's line with --log-interval.
tok "$T/c.jsonl" > /dev/null 2> "$T/quiet.err"
if [ -s "$T/quiet.err" ]; then t_fail "no progress output when stderr is not a TTY" "$(cat "$T/quiet.err")"
else t_pass "no progress output when stderr is not a TTY"; fi
tok --log-interval 100 "$T/c.jsonl" > /dev/null 2> "$T/prog.err"
t_grep "--log-interval prints Megatron's progress line" "^Processed 100 documents \([0-9.]+ docs/s, [0-9.]+ MB/s\)\." "$T/prog.err"
t_ok "--help" mt-tokenize --help
t_grep "--help lists --json-keys" "--json-keys" "$T_TMP/out"
