#!/usr/bin/env bash
# pipeline.sh: the README's data preparation end to end, as a user runs it: mt-tokenize | mt-index on a
# code corpus, the result read back by an independent reader (numpy, following Megatron's _IndexReader)
# and compared with the ids of the stream; a truncated pipe leaves no files; the demo script runs
# (shortened to a few training iterations).
. "$(dirname "$0")/../lib.sh"
T=$T_TMP
PY=/usr/bin/python3
tok() { mt-tokenize --vocab-file "$GPT2_VOCAB" --merge-file "$GPT2_MERGES" "$@"; }

# A slice of the demo corpus (Python sources as CodeParrot-style JSON lines), compressed.
"$T_TOP/share/make-demo-corpus.sh" | head -n 60 > "$T/code.jsonl"
zstd -q "$T/code.jsonl" -o "$T/code.jsonl.zst"
mkdir -p "$T/data"
if zstdcat "$T/code.jsonl.zst" | tok --json-keys content --append-eod --workers 2 \
        | mt-index --output-prefix "$T/data/codeparrot" 2> "$T/err"; then
    t_pass "zstdcat | mt-tokenize | mt-index"
else t_fail "zstdcat | mt-tokenize | mt-index" "$(cat "$T/err")"; fi
t_ok "Megatron's output names" test -s "$T/data/codeparrot_content_document.bin" -a -s "$T/data/codeparrot_content_document.idx"
tok --input "$T/code.jsonl" --json-keys content --append-eod > "$T/code.toks"

# Independent check: parse .idx as Megatron does and compare every document with the stream's ids.
if $PY - "$T/data/codeparrot_content_document" "$T/code.toks" > "$T/check" 2>&1 <<'EOF'
import struct, sys
import numpy as np
prefix, stream = sys.argv[1:3]
idx = open(prefix + ".idx", "rb").read()
assert idx[:9] == b"MMIDIDX\x00\x00", "magic"
version, = struct.unpack_from("<Q", idx, 9); assert version == 1
code, = struct.unpack_from("<B", idx, 17); assert code == 8, "GPT-2 must be uint16 (code 8)"
S, D = struct.unpack_from("<QQ", idx, 18)
sizes = np.frombuffer(idx, np.int32, S, 34)
pointers = np.frombuffer(idx, np.int64, S, 34 + 4 * S)
doc_idx = np.frombuffer(idx, np.int64, D, 34 + 12 * S)
assert len(idx) == 34 + 12 * S + 8 * D, "idx size"
assert doc_idx[0] == 0 and doc_idx[-1] == S and D == S + 1
assert (pointers == np.concatenate([[0], np.cumsum(sizes[:-1].astype(np.int64) * 2)])).all()
data = np.memmap(prefix + ".bin", np.uint16, mode="r")
assert data.size == int(sizes.sum())
b = open(stream, "rb").read(); p = 32 + 4 + len("content")
docs = []
while b[p:p+1] == b"D":
    key, n = struct.unpack_from("<II", b, p + 1); p += 9
    docs.append(np.frombuffer(b, np.uint16, n, p)); p += 2 * n
assert len(docs) == S, (len(docs), S)
for i, d in enumerate(docs):
    got = data[pointers[i] // 2: pointers[i] // 2 + sizes[i]]
    assert (got == d).all(), "document %d differs" % i
    assert len(d) == 0 or d[-1] == 50256, "EOD"
print("ok", S, int(sizes.sum()))
EOF
then t_pass "numpy reader (Megatron's layout) reads back every document"
else t_fail "numpy reader (Megatron's layout) reads back every document" "$(tail -3 "$T/check")"; fi

# Round trip through the files: dump --decode gives back the contents (the appended EOD is dropped).
mt-index --dump "$T/data/codeparrot_content_document" --decode --vocab-file "$GPT2_VOCAB" \
    --merge-file "$GPT2_MERGES" > "$T/dump.jsonl" 2> "$T/err"
if $PY - "$T/code.jsonl" "$T/dump.jsonl" <<'EOF'
import json, sys
a = [json.loads(l)["content"] for l in open(sys.argv[1], encoding="utf-8")]
b = [json.loads(l)["text"] for l in open(sys.argv[2], encoding="utf-8")]
sys.exit(0 if a == b else 1)
EOF
then t_pass "mt-index --dump --decode gives back the corpus"
else t_fail "mt-index --dump --decode gives back the corpus" "$(head -c 300 "$T/err")"; fi

# A producer that dies mid-stream: mt-index fails and leaves nothing under the output names.
head -c 5000 "$T/code.toks" | mt-index --output-prefix "$T/data/cut" 2> "$T/cut.err"
rc=$?
if [ $rc -ne 0 ] && grep -q "truncated" "$T/cut.err"; then t_pass "truncated stream: error"
else t_fail "truncated stream: error" "rc=$rc $(cat "$T/cut.err")"; fi
if ls -A "$T/data" | grep -q cut; then t_fail "truncated stream: no files left" "$(ls -A "$T/data")"
else t_pass "truncated stream: no files left"; fi
# A bad line upstream: the whole pipeline fails and nothing is written.
printf '{"content": "ok"}\n{"content": 5}\n' | tok --json-keys content | mt-index --output-prefix "$T/data/bad" 2>/dev/null
if ls -A "$T/data" | grep -q bad; then t_fail "bad input upstream: no files" "$(ls -A "$T/data")"
else t_pass "bad input upstream: no files"; fi

# The README's first command, with a 6-iteration training run.
if MT_DEMO_DIR=$T/demo MT_DEMO_ITERS=6 "$T_TOP/share/demo.sh" > "$T/demo.out" 2> "$T/demo.err"; then t_pass "make demo's script runs"
else t_fail "make demo's script runs" "$(tail -5 "$T/demo.err")"; fi
if command -v curl >/dev/null; then
    t_grep "make demo asks mt-serve once with curl" '^\{"id":"cmpl-.*"object":"text_completion"' "$T/demo.out"
    t_grep "make demo stops mt-serve with SIGTERM" 'mt-serve: stopped' "$T/demo.err"
fi
