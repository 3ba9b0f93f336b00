#!/usr/bin/env bash
# index.sh: mt-index's modes as a user drives them: int32 streams, --merge (a directory, as Megatron's
# merge_datasets.py, checked against numpy concatenation), --info, --dump ranges, and its error paths.
. "$(dirname "$0")/../lib.sh"
T=$T_TMP
PY=/usr/bin/python3
mkdir -p "$T/shards" "$T/merged"

# Streams written with python's struct (independent of mt-tokenize): a wide vocabulary (int32 tokens).
mkstream() { # file vocab ndocs seed
    $PY - "$@" <<'EOF'
import random, struct, sys
path, vocab, ndocs, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
r = random.Random(seed); w = 2 if vocab < 65500 else 4
out = bytearray(b"MTTOKSv1" + struct.pack("<IIIiII", 1, w, vocab, vocab - 1, 0, 1) + struct.pack("<I", 4) + b"text")
tot = 0
for d in range(ndocs):
    ids = [r.randrange(vocab) for _ in range(r.randrange(0, 50))]
    out += b"D" + struct.pack("<II", 0, len(ids)) + struct.pack("<%d%s" % (len(ids), "H" if w == 2 else "I"), *ids)
    tot += len(ids)
out += b"E" + struct.pack("<QQ", ndocs, tot)
open(path, "wb").write(out)
EOF
}
mkstream "$T/a.toks" 100000 40 1
mkstream "$T/b.toks" 100000 25 2
mkstream "$T/c.toks" 100000 0 3
t_ok "int32 stream from a file argument" mt-index --output-prefix "$T/shards/b" "$T/b.toks"
mt-index --output-prefix "$T/shards/a" < "$T/a.toks"
mt-index --output-prefix "$T/shards/c" < "$T/c.toks"
t_ok "--info --json" mt-index --info --json "$T/shards/a_text_document"
t_grep "--info reports int32 and the document count" '"dtype": "int32", "dtype_code": 4, "sequences": [0-9]+, "documents": 40' "$T_TMP/out"
t_ok "--merge --input DIR" mt-index --merge --input "$T/shards" --output-prefix "$T/merged/all"
if $PY - "$T/shards" "$T/merged/all" <<'EOF'
import struct, sys
import numpy as np
def load(p):
    idx = open(p + ".idx", "rb").read()
    S, D = struct.unpack_from("<QQ", idx, 18)
    sizes = np.frombuffer(idx, np.int32, S, 34); doc = np.frombuffer(idx, np.int64, D, 34 + 12 * S)
    return sizes, doc, np.fromfile(p + ".bin", np.int32)
parts = [load(sys.argv[1] + "/" + n + "_text_document") for n in ("a", "b", "c")]   # sorted stem order
sizes, doc, data = load(sys.argv[2])
assert (sizes == np.concatenate([p[0] for p in parts])).all()
assert (data == np.concatenate([p[2] for p in parts])).all()
want = [0]; base = 0
for s, d, _ in parts:
    want += list(base + d[1:]); base += len(s)
assert list(doc) == want, (list(doc), want)
EOF
then t_pass "merge equals numpy concatenation (sizes, doc_idx offsets, tokens)"; else t_fail "merge equals numpy concatenation" "mismatch"; fi
mt-index --dump "$T/merged/all" --range 40:42 > "$T/two" 2>&1
mt-index --dump "$T/shards/b_text_document" --range :2 > "$T/two.want"
t_cmp "--dump --range selects documents across merged parts" "$T/two.want" "$T/two"

bad() { # name regex args...
    local name=$1 re=$2; shift 2
    if mt-index "$@" > "$T/bad.out" 2> "$T/bad.err"; then t_fail "$name" "exit 0"; return; fi
    if grep -Eq -- "$re" "$T/bad.err"; then t_pass "$name"; else t_fail "$name" "stderr: $(cat "$T/bad.err")"; fi
}
printf '{"text": "not a stream"}\n' > "$T/foreign"
bad "foreign input" "not an mt token stream" --output-prefix "$T/merged/x" "$T/foreign"
bad "missing dataset" "nope.idx: No such file" --info "$T/nope"
bad "bad --range" "--range: 'x:1' is not A:B" --dump "$T/merged/all" --range x:1
bad "modes are exclusive" "separate modes" --info --dump "$T/merged/all"
bad "merge needs inputs" "nothing to merge" --merge --output-prefix "$T/merged/y"
cp "$T/merged/all.idx" "$T/short.idx"; head -c 100 "$T/merged/all.bin" > "$T/short.bin"
bad "truncated .bin" "short.bin: 100 bytes, but the index describes" --info "$T/short"
head -c 50 "$T/merged/all.idx" > "$T/cut.idx"; cp "$T/merged/all.bin" "$T/cut.bin"
bad "truncated .idx" "cut.idx: .*(truncated|cannot fit)" --info "$T/cut"
if ls -A "$T/merged" | grep -q '^x\|^\.'; then t_fail "no output after a failed build" "$(ls -A "$T/merged")"
else t_pass "no output after a failed build"; fi
