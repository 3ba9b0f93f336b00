#!/usr/bin/env bash
# index.sh: mt-index end to end. Token streams are made here with Python's struct (the documented pipe
# format, mt-formats.5); the datasets are read back by an independent numpy reader that follows
# Megatron's _IndexReader (np.frombuffer at the header offsets) and compared with what was fed.
. "$(dirname "$0")/../lib.sh"
PY=/usr/bin/python3
if ! $PY -c 'import numpy' 2>/dev/null; then t_skip all "no numpy for /usr/bin/python3 (make deps)"; exit 0; fi

# gen.py OUT --vocab V --keys k1,k2 --docs N --seed S --expect FILE [--width W] [--no-trailer] [--bad-count]
cat >"$T_TMP/gen.py" <<'PY'
import argparse, json, random, struct
ap = argparse.ArgumentParser()
ap.add_argument("out"); ap.add_argument("--vocab", type=int, default=50257); ap.add_argument("--width", type=int)
ap.add_argument("--keys", default="text"); ap.add_argument("--docs", type=int, default=100)
ap.add_argument("--seed", type=int, default=1); ap.add_argument("--expect")
ap.add_argument("--no-trailer", action="store_true"); ap.add_argument("--bad-count", action="store_true")
a = ap.parse_args()
rng = random.Random(a.seed)
keys = a.keys.split(",")
width = a.width or (2 if a.vocab < 65500 else 4)
eod = a.vocab - 1
out = bytearray(b"MTTOKSv1" + struct.pack("<IIIiII", 1, width, a.vocab, eod, 0, len(keys)))
for k in keys:
    kb = k.encode(); out += struct.pack("<I", len(kb)) + kb
expect = {k: [] for k in keys}
ntok = 0
for d in range(a.docs):
    for ki, k in enumerate(keys):
        n = 0 if rng.random() < 0.1 else rng.randint(1, 40)
        ids = [rng.randrange(a.vocab) for _ in range(n)]
        if ids and rng.random() < 0.5: ids[-1] = eod
        if d == 0 and ki == 0 and n: ids[0] = a.vocab - 1  # the largest id appears
        out += b"D" + struct.pack("<II", ki, n) + struct.pack("<%d%s" % (n, "H" if width == 2 else "I"), *ids)
        expect[k].append(ids); ntok += n
if not a.no_trailer:
    out += b"E" + struct.pack("<QQ", a.docs * len(keys) + (1 if a.bad_count else 0), ntok)
open(a.out, "wb").write(out)
if a.expect: json.dump(expect, open(a.expect, "w"))
PY

# megatron_read.py PREFIX: prints a JSON object with dtype code, sizes, pointers, doc_idx and documents, read
# the way Megatron's _IndexReader / IndexedDataset do.
cat >"$T_TMP/megatron_read.py" <<'PY'
import json, struct, sys
import numpy as np
DT = {1: np.uint8, 2: np.int8, 3: np.int16, 4: np.int32, 5: np.int64, 6: np.float64, 7: np.float32, 8: np.uint16}
def read(prefix):
    with open(prefix + ".idx", "rb") as f:
        assert f.read(9) == b"MMIDIDX\x00\x00", "bad magic"
        assert struct.unpack("<Q", f.read(8)) == (1,), "bad version"
        code = struct.unpack("<B", f.read(1))[0]
        S = struct.unpack("<Q", f.read(8))[0]
        D = struct.unpack("<Q", f.read(8))[0]
        off = f.tell()
    buf = np.memmap(prefix + ".idx", mode="r", order="C")
    bv = memoryview(buf)
    sizes = np.frombuffer(bv, dtype=np.int32, count=S, offset=off)
    pointers = np.frombuffer(bv, dtype=np.int64, count=S, offset=off + sizes.nbytes)
    doc_idx = np.frombuffer(bv, dtype=np.int64, count=D, offset=off + sizes.nbytes + pointers.nbytes)
    assert sizes.shape[0] == doc_idx[-1], "len(sizes) != doc_idx[-1]"
    binbuf = np.memmap(prefix + ".bin", mode="r", order="C") if S and sizes.sum() else np.zeros(0, np.uint8)
    bb = memoryview(binbuf)
    seqs = [np.frombuffer(bb, dtype=DT[code], count=int(s), offset=int(p)) for s, p in zip(sizes, pointers)]
    docs = []
    for j in range(D - 1):
        parts = seqs[doc_idx[j]:doc_idx[j + 1]]
        docs.append([int(x) for x in (np.concatenate(parts) if parts else [])])
    return dict(code=code, S=S, D=D, sizes=sizes.tolist(), pointers=pointers.tolist(), doc_idx=doc_idx.tolist(),
                docs=docs, idx_bytes=len(buf), bin_bytes=len(binbuf))
print(json.dumps(read(sys.argv[1])))
PY

# same_docs PREFIX EXPECT_JSON KEY CODE: the numpy reader sees exactly the documents that were fed
same_docs() {
    $PY - "$1" "$2" "$3" "$4" "$T_TMP/megatron_read.py" <<'PY'
import json, subprocess, sys
prefix, expect, key, code, reader = sys.argv[1:]
got = json.loads(subprocess.check_output([sys.executable, reader, prefix]))
want = json.load(open(expect))[key]
assert got["code"] == int(code), "dtype code %d, expected %s" % (got["code"], code)
assert got["D"] == len(want) + 1, "D=%d for %d documents" % (got["D"], len(want))
assert got["docs"] == want, "documents differ"
# one sequence per non-empty document, none for an empty one (core's add_document)
assert got["sizes"] == [len(d) for d in want if d], "sizes differ"
assert got["S"] == sum(1 for d in want if d)
PY
}

gen() { $PY "$T_TMP/gen.py" "$@"; }
d=$T_TMP/ds; mkdir -p "$d"

# --- token stream -> datasets, two keys, uint16 --------------------------------------------------------
gen "$T_TMP/s1.toks" --keys text,title --docs 300 --seed 7 --expect "$T_TMP/s1.json"
t_ok "index two keys" mt-index --quiet --output-prefix "$d/run" "$T_TMP/s1.toks"
t_ok "text dataset equals input (numpy, Megatron's reader)" same_docs "$d/run_text_document" "$T_TMP/s1.json" text 8
t_ok "title dataset equals input" same_docs "$d/run_title_document" "$T_TMP/s1.json" title 8
t_ok "exactly the four output files" test "$(ls -A "$d" | tr '\n' ' ')" = \
    "run_text_document.bin run_text_document.idx run_title_document.bin run_title_document.idx "

# stdin and zstd give the same bytes
mkdir -p "$T_TMP/stdin"
mt-index --quiet --output-prefix "$T_TMP/stdin/run" <"$T_TMP/s1.toks" 2>"$T_TMP/err"
t_cmp "stdin: same .idx" "$d/run_text_document.idx" "$T_TMP/stdin/run_text_document.idx"
t_cmp "stdin: same .bin" "$d/run_text_document.bin" "$T_TMP/stdin/run_text_document.bin"
if command -v zstd >/dev/null; then
    zstd -q -o "$T_TMP/s1.toks.zst" "$T_TMP/s1.toks"
    mkdir -p "$T_TMP/zst"
    mt-index --quiet --output-prefix "$T_TMP/zst/run" "$T_TMP/s1.toks.zst"
    t_cmp "zstd input: same .bin" "$d/run_title_document.bin" "$T_TMP/zst/run_title_document.bin"
else
    t_skip "zstd input" "no zstd program"
fi

# --- large vocabulary -> int32; vocab 65500 is the first int32 size, 65499 still uint16 ------------------
gen "$T_TMP/big.toks" --vocab 100000 --docs 50 --seed 3 --expect "$T_TMP/big.json"
t_ok "index int32" mt-index --quiet --output-prefix "$d/big" "$T_TMP/big.toks"
t_ok "int32 dataset (code 4) equals input" same_docs "$d/big_text_document" "$T_TMP/big.json" text 4
gen "$T_TMP/edge.toks" --vocab 65500 --width 2 --docs 20 --seed 4 --expect "$T_TMP/edge.json"
mt-index --quiet --output-prefix "$d/edge" "$T_TMP/edge.toks"
t_ok "vocab 65500 in 2-byte ids -> int32" same_docs "$d/edge_text_document" "$T_TMP/edge.json" text 4
gen "$T_TMP/edge2.toks" --vocab 65499 --width 4 --docs 20 --seed 5 --expect "$T_TMP/edge2.json"
mt-index --quiet --output-prefix "$d/edge2" "$T_TMP/edge2.toks"
t_ok "vocab 65499 in 4-byte ids -> uint16" same_docs "$d/edge2_text_document" "$T_TMP/edge2.json" text 8

# --- truncated, corrupt and foreign streams: exit 1, offset named, nothing left behind -------------------
t1=$T_TMP/trunc; mkdir -p "$t1"
gen "$T_TMP/nt.toks" --docs 30 --seed 9 --no-trailer
len=$(stat -c %s "$T_TMP/nt.toks")
mt-index --quiet --output-prefix "$t1/x" "$T_TMP/nt.toks" 2>"$T_TMP/e1"; rc=$?
t_ok "no end record: exit 1" test $rc = 1
t_grep "no end record: message names byte $len" "truncated at byte $len after 30 documents" "$T_TMP/e1"
t_ok "no end record: no files at all" test -z "$(ls -A "$t1")"
head -c 1000 "$T_TMP/s1.toks" >"$T_TMP/cut.toks"
mt-index --quiet --output-prefix "$t1/x" "$T_TMP/cut.toks" 2>"$T_TMP/e1"; rc=$?
t_ok "cut mid-record: exit 1" test $rc = 1
t_grep "cut mid-record: message names byte 1000" "cut.toks: truncated input at byte 1000" "$T_TMP/e1"
t_ok "cut mid-record: no files at all" test -z "$(ls -A "$t1")"
head -c 1000 "$T_TMP/s1.toks" | mt-index --quiet --output-prefix "$t1/x" 2>"$T_TMP/err"
t_grep "cut stdin: named <stdin>" "<stdin>: truncated input at byte 1000" "$T_TMP/err"
t_ok "cut stdin: no files at all" test -z "$(ls -A "$t1")"
gen "$T_TMP/bad.toks" --docs 10 --bad-count
t_fails "end record count mismatch fails" mt-index --quiet --output-prefix "$t1/x" "$T_TMP/bad.toks"
t_grep "count mismatch message" "end record says 11 documents" "$T_TMP/err"
printf '{"text": "not a token stream"}\n' >"$T_TMP/foreign.jsonl"
t_fails "foreign input fails" mt-index --output-prefix "$t1/x" "$T_TMP/foreign.jsonl"
t_grep "foreign input message" "not an mt token stream" "$T_TMP/err"
t_fails "empty input fails" mt-index --output-prefix "$t1/x" /dev/null
t_ok "failures left no files" test -z "$(ls -A "$t1")"
# killed while reading: the signal handler removes the temp files
{ head -c 2000 "$T_TMP/s1.toks"; sleep 5; } | mt-index --quiet --output-prefix "$t1/x" 2>/dev/null &
pid=$!
for _ in $(seq 600); do [ "$(ls -A "$t1" | wc -l)" -ge 2 ] && break; sleep 0.05; done
temps=$(ls -A "$t1" | wc -l)
kill -TERM $pid; wait $pid 2>/dev/null
t_ok "temp files exist while running" test "$temps" -ge 2
t_ok "SIGTERM leaves no files" test -z "$(ls -A "$t1")"

# --- progress ---------------------------------------------------------------------------------------------
mt-index --log-interval 100 --output-prefix "$T_TMP/stdin/p" "$T_TMP/s1.toks" 2>"$T_TMP/err"
t_grep "--log-interval lines" "^Processed 100 documents \([0-9.]+ docs/s, [0-9.]+ MB/s\)\." "$T_TMP/err"
t_grep "summary line" "wrote .*/p_text_document.bin/.idx: 300 documents" "$T_TMP/err"
mt-index --quiet --log-interval 100 --output-prefix "$T_TMP/stdin/q" "$T_TMP/s1.toks" 2>"$T_TMP/err"
t_ok "--quiet is silent" test ! -s "$T_TMP/err"

# --- merge --------------------------------------------------------------------------------------------------
m=$T_TMP/parts; mkdir -p "$m"
gen "$T_TMP/p1.toks" --docs 40 --seed 11; mt-index --quiet --output-prefix "$T_TMP/p1" "$T_TMP/p1.toks"
gen "$T_TMP/p2.toks" --docs 25 --seed 12; mt-index --quiet --output-prefix "$T_TMP/p2" "$T_TMP/p2.toks"
gen "$T_TMP/p3.toks" --docs 33 --seed 13; mt-index --quiet --output-prefix "$T_TMP/p3" "$T_TMP/p3.toks"
# sorted (Python string) order is Z < a < b, not the order of creation
for pair in "p1 b" "p2 Z" "p3 a"; do
    set -- $pair
    cp "$T_TMP/$1_text_document.bin" "$m/$2.bin"; cp "$T_TMP/$1_text_document.idx" "$m/$2.idx"
done
t_ok "merge --input DIR" mt-index --quiet --merge --input "$m" --output-prefix "$T_TMP/merged"
cat "$m/Z.bin" "$m/a.bin" "$m/b.bin" >"$T_TMP/concat.bin"
t_cmp "merged .bin is the inputs' .bin in sorted order" "$T_TMP/concat.bin" "$T_TMP/merged.bin"
check_merge() {
    $PY - "$T_TMP/megatron_read.py" "$@" <<'PY'
import json, subprocess, sys
import numpy as np
reader, out, *parts = sys.argv[1:]
rd = lambda p: json.loads(subprocess.check_output([sys.executable, reader, p]))
got, ins = rd(out), [rd(p) for p in parts]
# merge_datasets.py: sizes concatenated; doc_idx += (len(sizes) + other.doc_idx)[1:]
sizes, doc_idx = [], [0]
for x in ins:
    doc_idx += list((len(sizes) + np.array(x["doc_idx"], dtype=np.int64))[1:])
    sizes += x["sizes"]
assert got["sizes"] == sizes, "sizes"
assert got["doc_idx"] == [int(v) for v in doc_idx], "doc_idx"
assert got["pointers"] == [int(v) for v in np.concatenate([[0], np.cumsum(np.array(sizes, np.int64) * 2)[:-1]])] if sizes else [], "pointers"
assert got["docs"] == sum((x["docs"] for x in ins), []), "documents"
PY
}
t_ok "merged sizes/doc_idx/documents match numpy concatenation" check_merge "$T_TMP/merged" "$m/Z" "$m/a" "$m/b"
t_ok "merge of an explicit list, in the given order" \
    mt-index --quiet --merge --output-prefix "$T_TMP/merged2" "$m/b" "$m/Z" "$m/b"
t_ok "explicit list matches numpy concatenation" check_merge "$T_TMP/merged2" "$m/b" "$m/Z" "$m/b"
rm "$m/a.idx"
t_fails "merge: missing partner fails" mt-index --quiet --merge --input "$m" --output-prefix "$T_TMP/m3"
t_grep "missing partner message" "\.idx file not provided for .*/a" "$T_TMP/err"
t_ok "merge failure left nothing" test -z "$(ls "$T_TMP" | grep '^m3')"
cp "$d/big_text_document.bin" "$m/a.bin"; cp "$d/big_text_document.idx" "$m/a.idx"
t_fails "merge: dtype mismatch fails" mt-index --quiet --merge --input "$m" --output-prefix "$T_TMP/m3"
t_grep "dtype mismatch names both" "cannot merge .*/a \(dtype int32\) into .*m3 \(dtype uint16, from .*/Z\)" "$T_TMP/err"
t_ok "dtype mismatch left nothing" test -z "$(ls -A "$T_TMP" | grep 'm3')"
t_fails "merge: --input not a directory" mt-index --merge --input "$T_TMP/s1.toks" --output-prefix "$T_TMP/m4"
t_fails "merge: empty directory" mt-index --merge --input "$T_TMP/stdin/../trunc" --output-prefix "$T_TMP/m4"
t_grep "empty directory message" "no datasets" "$T_TMP/err"

# --- temporaries of killed runs ------------------------------------------------------------------------------
# SIGKILL runs no handler: the next run writing beside the orphan removes it (its PID is dead); a merge
# of a directory holding one ignores it.
k=$T_TMP/killed; mkdir -p "$k"
{ head -c 4000 "$T_TMP/p1.toks"; sleep 30; } | mt-index --quiet --output-prefix "$k/part" &
ipid=$!
for _ in $(seq 1200); do ls -A "$k" | grep -q "\.tmp\.[a-z]*\.$ipid\." && break; sleep 0.05; done
kill -KILL "$ipid"; wait "$ipid" 2>/dev/null
orphans=$(ls -A "$k" | grep -c "^\.part_text_document\.[a-z]*\.tmp\.[a-z]\{8\}\.$ipid\.[0-9]*$")
[ "$orphans" -ge 1 ] && t_pass "kill -KILL of mt-index leaves a temporary ($orphans)" \
    || t_fail "kill -KILL of mt-index leaves a temporary" "$(ls -A "$k")"
# its name's tag is this host's; a temporary of another host (another tag) is never removed here, even when
# its PID is dead on this machine: that process may be writing on another node of a shared file system
tag=$(ls -A "$k" | sed -n "s/^\.part_text_document\.[a-z]*\.tmp\.\([a-z]\{8\}\)\.$ipid\.[0-9]*$/\1/p" | head -1)
other=otherhst; [ "$tag" = $other ] && other=anotherh
sleep 60 & live=$!
: >"$k/.other.bin.tmp.$live.0"
: >"$k/.other.bin.tmp.$other.$ipid.0"; : >"$k/.mine.bin.tmp.$tag.$ipid.0"; : >"$k/.old.bin.tmp.$ipid.0"
cp "$m/Z.bin" "$m/Z.idx" "$k/"   # a dataset to merge beside the temporaries
t_ok "merge --input ignores temporaries in the directory" \
    mt-index --quiet --merge --input "$k" --output-prefix "$T_TMP/kmerged"
t_cmp "merge with temporaries beside: the one dataset" "$m/Z.bin" "$T_TMP/kmerged.bin"
: >"$k/.other.bin.tmp.$ipid.0.keep"; : >"$k/other.bin.tmp.$ipid.0"   # not the pattern: never removed
t_ok "the next run writing there" mt-index --quiet --output-prefix "$k/again" "$T_TMP/p2.toks"
ls -A "$k" | sort >"$T_TMP/left"
printf '%s\n' ".other.bin.tmp.$ipid.0.keep" ".other.bin.tmp.$live.0" Z.bin Z.idx again_text_document.bin \
    again_text_document.idx "other.bin.tmp.$ipid.0" ".other.bin.tmp.$other.$ipid.0" | sort >"$T_TMP/left.want"
t_cmp "it removed the dead run's temporaries (this host's, untagged), nothing else (a live PID's, another host's, other names kept)" \
    "$T_TMP/left.want" "$T_TMP/left"
kill "$live"; wait "$live" 2>/dev/null

# --- info ---------------------------------------------------------------------------------------------------
t_ok "--info" mt-index --info "$d/run_text_document"
cp "$T_TMP/out" "$T_TMP/info.txt"
t_grep "--info dtype" "^  dtype +uint16 \(code 8\)$" "$T_TMP/info.txt"
t_grep "--info documents" "^  documents +300$" "$T_TMP/info.txt"
t_ok "--info --json agrees with numpy" sh -c "mt-index --info --json '$d/run_text_document' '$d/big_text_document' >'$T_TMP/info.json'"
t_ok "--info --json fields" $PY - "$T_TMP/info.json" "$T_TMP/megatron_read.py" "$d/run_text_document" "$d/big_text_document" <<'PY'
import json, subprocess, sys
lines = open(sys.argv[1]).read().splitlines()
assert len(lines) == 2
for line, prefix in zip(lines, sys.argv[3:]):
    j = json.loads(line)
    r = json.loads(subprocess.check_output([sys.executable, sys.argv[2], prefix]))
    assert j["prefix"] == prefix
    assert j["dtype_code"] == r["code"] and j["sequences"] == r["S"] and j["documents"] == r["D"] - 1
    assert j["tokens"] == sum(r["sizes"]) and j["min_length"] == min(r["sizes"]) and j["max_length"] == max(r["sizes"])
    assert abs(j["mean_length"] - sum(r["sizes"]) / len(r["sizes"])) < 1e-5
    assert j["idx_bytes"] == r["idx_bytes"] and j["bin_bytes"] == r["bin_bytes"] and j["multimodal"] is False
PY
# a .bin with one extra EOD per non-empty document: Megatron's 2022-11..2023-08 --append-eod bug
$PY - "$T_TMP/megatron_read.py" "$d/run_title_document" "$T_TMP/eodbug" <<'PY'
import json, shutil, subprocess, sys
import numpy as np
r = json.loads(subprocess.check_output([sys.executable, sys.argv[1], sys.argv[2]]))
shutil.copy(sys.argv[2] + ".idx", sys.argv[3] + ".idx")
toks = []
for d in r["docs"]:
    toks += d + ([50256] if d else [])
np.array(toks, dtype=np.uint16).tofile(sys.argv[3] + ".bin")
PY
t_fails "--info on an EOD-bug dataset fails" mt-index --info "$T_TMP/eodbug"
t_grep "EOD-bug diagnosis" "append-eod length bug" "$T_TMP/err"
printf 'junk' >"$T_TMP/junk.idx"; : >"$T_TMP/junk.bin"
t_fails "--info on a broken index fails" mt-index --info "$T_TMP/junk"
t_grep "broken index names the file" "junk.idx: truncated: 4 bytes" "$T_TMP/err"
t_fails "--info on a missing dataset fails" mt-index --info "$T_TMP/nothing"
t_grep "missing dataset names the file" "nothing.idx: No such file" "$T_TMP/err"

# --- dump ---------------------------------------------------------------------------------------------------
t_ok "--dump" sh -c "mt-index --dump '$d/run_text_document' >'$T_TMP/dump.txt'"
t_ok "--dump lines are the documents" $PY - "$T_TMP/dump.txt" "$T_TMP/s1.json" <<'PY'
import json, sys
got = open(sys.argv[1]).read().split("\n")
assert got[-1] == ""
want = [" ".join(map(str, d)) for d in json.load(open(sys.argv[2]))["text"]]
assert got[:-1] == want, "dump differs"
PY
mt-index --dump --range 5:9 "$d/run_text_document" >"$T_TMP/r.txt"
sed -n '6,9p' "$T_TMP/dump.txt" >"$T_TMP/r.want"
t_cmp "--dump --range 5:9" "$T_TMP/r.want" "$T_TMP/r.txt"
mt-index --dump --range 298: "$d/run_text_document" >"$T_TMP/r.txt"
sed -n '299,300p' "$T_TMP/dump.txt" >"$T_TMP/r.want"
t_cmp "--dump --range 298:" "$T_TMP/r.want" "$T_TMP/r.txt"
mt-index --dump --range 7 "$d/run_text_document" >"$T_TMP/r.txt"
sed -n '8p' "$T_TMP/dump.txt" >"$T_TMP/r.want"
t_cmp "--dump --range N" "$T_TMP/r.want" "$T_TMP/r.txt"
mt-index --dump --sequences "$d/run_text_document" >"$T_TMP/r.txt"
grep -v '^$' "$T_TMP/dump.txt" >"$T_TMP/r.want"
t_cmp "--dump --sequences: one line per sequence" "$T_TMP/r.want" "$T_TMP/r.txt"
t_fails "--range past the end" mt-index --dump --range 0:301 "$d/run_text_document"
t_grep "--range past the end message" "only 300 documents" "$T_TMP/err"
t_fails "--range backwards" mt-index --dump --range 5:2 "$d/run_text_document"
t_fails "--range junk" mt-index --dump --range a:b "$d/run_text_document"

# --decode: GPT-2 ids 15496 995 are "Hello world"; a final EOD is dropped unless --keep-eod
$PY - "$T_TMP/hello.toks" <<'PY'
import struct, sys
docs = [[15496, 995, 50256], [], [1, 9, 10]]
h = b"MTTOKSv1" + struct.pack("<IIIiIII", 1, 2, 50257, 50256, 1, 1, 4) + b"text"
body = b"".join(b"D" + struct.pack("<II", 0, len(d)) + struct.pack("<%dH" % len(d), *d) for d in docs)
open(sys.argv[1], "wb").write(h + body + b"E" + struct.pack("<QQ", 3, 6))
PY
mt-index --quiet --output-prefix "$T_TMP/hello" "$T_TMP/hello.toks"
if mt-index --dump --decode --vocab-file "$GPT2_VOCAB" --merge-file "$GPT2_MERGES" "$T_TMP/hello_text_document" \
    >"$T_TMP/dec.txt" 2>"$T_TMP/err"; then
    printf '%s\n' '{"text": "Hello world"}' '{"text": ""}' '{"text": "\"*+"}' >"$T_TMP/dec.want"
    t_cmp "--decode JSON lines" "$T_TMP/dec.want" "$T_TMP/dec.txt"
    mt-index --dump --decode --keep-eod --range 0 --vocab-file "$GPT2_VOCAB" --merge-file "$GPT2_MERGES" \
        "$T_TMP/hello_text_document" >"$T_TMP/dec.txt"
    printf '%s\n' '{"text": "Hello world<|endoftext|>"}' >"$T_TMP/dec.want"
    t_cmp "--decode --keep-eod" "$T_TMP/dec.want" "$T_TMP/dec.txt"
elif grep -q "not built into this mt" "$T_TMP/err"; then
    t_skip "--decode" "the BPE tokenizer is not in this build yet"
else
    t_fail "--decode" "$(cat "$T_TMP/err")"
fi
t_fails "--decode without the BPE files" mt-index --dump --decode "$T_TMP/hello_text_document"
t_grep "--decode without the BPE files message" "needs --vocab-file and --merge-file" "$T_TMP/err"

# --- flags --------------------------------------------------------------------------------------------------
sed 's/\\-/-/g' "$T_TOP/man/mt-index.1" >"$T_TMP/man.txt"
t_ok "--help" mt-index --help
for f in --output-prefix --merge --input --multimodal --info --json --dump --range --sequences --decode \
    --vocab-file --merge-file --keep-eod --log-interval --quiet; do
    t_grep "--help lists $f" "^  $f( |$)" "$T_TMP/out"
    t_grep "man page documents $f" "^\.BI? $f( |$)" "$T_TMP/man.txt"
done
t_fails "unknown flag" mt-index --bogus
t_grep "unknown flag message" "unknown option '--bogus'" "$T_TMP/err"
t_fails "no --output-prefix" mt-index "$T_TMP/s1.toks"
t_grep "no --output-prefix message" "output-prefix is required" "$T_TMP/err"
t_fails "two modes" mt-index --info --dump "$d/run_text_document"
t_fails "--range without --dump" mt-index --range 1:2 --info "$d/run_text_document"
t_grep "--range without --dump message" "--range does not apply here" "$T_TMP/err"
t_fails "--log-interval 0" mt-index --log-interval 0 --output-prefix "$T_TMP/x" "$T_TMP/s1.toks"
t_fails "two input streams" mt-index --output-prefix "$T_TMP/x" "$T_TMP/s1.toks" "$T_TMP/s1.toks"
t_fails "output directory missing" mt-index --output-prefix "$T_TMP/no/such/x" "$T_TMP/s1.toks"
t_grep "output directory missing names the file" "no/such/x_text_document.bin" "$T_TMP/err"
exit 0
