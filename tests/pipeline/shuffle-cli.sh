#!/usr/bin/env bash
# shuffle-cli.sh: mt-shuffle end to end. Random Megatron datasets (written here with numpy), random
# splits, lengths, seeds, batch flags and blends of 1-5 datasets; the .npy caches mt-shuffle writes and
# the samples it prints are compared element for element with the numpy reference
# (tests/oracle/gpt_dataset_ref.py). Then the spec's test vector, cache reuse and staleness, and errors.
. "$(dirname "$0")/../lib.sh"
PY=/usr/bin/python3
if ! [ -x "$PY" ] || ! $PY -c 'import numpy' 2>/dev/null; then t_skip "mt-shuffle vs numpy" "no /usr/bin/python3 with numpy"; exit 0; fi

$PY - "$T_TMP" "$T_TOP/tests/oracle" <<'PYEOF'
import glob, math, os, random, subprocess, sys
import numpy as np
tmp = sys.argv[1]
sys.path.insert(0, sys.argv[2])
from gpt_dataset_ref import split_core, gpt, blend_sizes, blend_indices, fetch
import megatron_cache_names as mcn

rnd = random.Random(20261122)
fails = 0
def report(name, ok, why=""):
    global fails
    print(("ok - shuffle-cli.sh: %s" % name) if ok else ("not ok - shuffle-cli.sh: %s: %s" % (name, why)))
    fails += not ok

def write_dataset(prefix, sizes, vocab=50257):
    sizes = np.asarray(sizes, dtype=np.int32)
    toks = np.array([rnd.randrange(vocab) for _ in range(int(sizes.sum()))], dtype=np.uint16)
    ptr = np.zeros(len(sizes), dtype=np.int64)
    if len(sizes) > 1:
        ptr[1:] = np.cumsum(sizes[:-1].astype(np.int64)) * 2
    doc = np.arange(len(sizes) + 1, dtype=np.int64)
    with open(prefix + ".idx", "wb") as f:
        f.write(b"MMIDIDX\x00\x00" + np.uint64(1).tobytes() + np.uint8(8).tobytes()
                + np.uint64(len(sizes)).tobytes() + np.uint64(len(doc)).tobytes())
        f.write(sizes.tobytes() + ptr.tobytes() + doc.tobytes())
    toks.tofile(prefix + ".bin")
    return sizes, toks, ptr // 2

def run(args):
    p = subprocess.run(["mt-shuffle"] + args, capture_output=True, text=True)
    return p.returncode, p.stdout, p.stderr

def one(pattern):
    g = glob.glob(pattern)
    if len(g) != 1:
        raise AssertionError("expected one file for %s, found %d" % (os.path.basename(pattern), len(g)))
    return np.load(g[0])

def same(a, b):
    return a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a, b)

def counts(ti, gbs, ei, ek):
    return [ti * gbs, (ti // ei + 1) * ek * gbs, ek * gbs]

case = 0
n_cases = 40
while case < n_cases:
    K = rnd.choice([1, 1, 1, 2, 3, 5])
    form = "single" if K == 1 and rnd.random() < 0.7 else rnd.choice(["weighted", "weighted", "unweighted"])
    if K == 1 and form == "unweighted":
        form = "single"
    case += 1
    d = os.path.join(tmp, "c%03d" % case)
    os.makedirs(d)
    dss = []
    for k in range(K):
        n = rnd.choice([3, 10, 40, 200])
        sizes = [rnd.choice([0, 1, 5, 30, 200, 900]) if rnd.random() < 0.3 else rnd.randint(1, 300) for _ in range(n)]
        prefix = os.path.join(d, "ds%d_text_document" % k)
        dss.append((prefix,) + write_dataset(prefix, sizes))
    split = rnd.choice(["969,30,1", "98,2,0", "80,10,10", "1,1,1", "100,0,0"])
    L = rnd.choice([1, 4, 16, 64, 100])
    seed = rnd.choice([1234, 0, 42, 2**32 - 1, rnd.randrange(2**32)])
    gbs = rnd.choice([1, 4, 8, 32])
    ti = rnd.randint(1, 60)
    ei = rnd.randint(1, 30)
    ek = rnd.randint(0, 3)
    ws = [round(rnd.uniform(0.05, 3), 3) for _ in range(K)]
    if form == "single":
        dp = [dss[0][0]]
    elif form == "weighted":
        dp = [x for k in range(K) for x in ("%g" % ws[k], dss[k][0])]
    else:
        dp = [x[0] for x in dss]
    cache = os.path.join(d, "cache")
    args = ["--data-path"] + dp + ["--split", split, "--seq-length", str(L), "--train-iters", str(ti),
            "--global-batch-size", str(gbs), "--eval-interval", str(ei), "--eval-iters", str(ek),
            "--seed", str(seed), "--data-cache-path", cache, "--quiet"]
    # the tokenizer files are only named (in Megatron's cache description), never read here
    vocab, merges = random.Random(case).choice([(None, None), ("vocab.json", "merges.txt"),
                                (os.path.join(d, "gpt2 \u00e9\U0001f600/vocab.json"), d + '/m"\\\t.txt')])
    if vocab:
        args += ["--vocab-file", vocab, "--merge-file", merges]
    rc, out, err = run(args)
    N = counts(ti, gbs, ei, ek)
    name = "case %d: %s K=%d split %s L=%d seed %d" % (case, form, K, split, L, seed)
    # The reference, split by split; an error in the reference must be an error in mt-shuffle.
    try:
        ref = []
        for si in range(3):
            ranges = [split_core(split, len(x[1]))[si] for x in dss]
            if ranges[0] is None:
                ref.append(None)
                continue
            # zero samples asked of a split whose sequences hold no tokens: nothing is built (an unweighted
            # blend takes whole epochs and builds as before)
            if form != "unweighted" and N[si] == 0 and sum(int(np.sum(x[1][r[0]:r[1]])) for x, r in zip(dss, ranges)) == 0:
                ref.append(None)
                continue
            if form == "single":
                g = gpt(dss[0][1], ranges[0][0], ranges[0][1], N[si], L, 1, seed, True)
                ref.append(([g], None, None, [N[si]]))
            elif form == "weighted":
                w, per, size = blend_sizes(ws, N[si], 0.005)
                built = [gpt(x[1], r[0], r[1], p, L, 1, seed, True) for x, r, p in zip(dss, ranges, per)]
                di, dsi, cur = blend_indices(w, size)
                if any(cur[k] > built[k][0][3] for k in range(K)):
                    raise ValueError("dataset too small for its share")
                ref.append((built, di, dsi, per))
            else:
                built = [gpt(x[1], r[0], r[1], None, L, 1, seed, True) for x, r in zip(dss, ranges)]
                lens = [b[0][3] for b in built]
                # core's BlendedDataset asserts every weight (here a length; -1 for an empty split at L=1) > 0
                if any(n <= 0 for n in lens):
                    raise ValueError("a dataset without samples in a blend without weights")
                w = (np.array(lens, dtype=np.float64) / np.sum(np.array(lens, dtype=np.float64))).tolist()
                size = min(N[si], sum(lens))
                di, dsi, cur = blend_indices(w, size)
                if any(cur[k] > lens[k] for k in range(K)):
                    raise ValueError("dataset too small for its share")
                ref.append((built, di, dsi, ["all"] * K))
    except (ValueError, AssertionError, ZeroDivisionError, IndexError) as ex:
        report(name + ": fails like the reference (%s)" % ex, rc != 0 and err.strip().count("\n") == 0,
               "rc %d, stderr %r" % (rc, err[:300]))
        continue
    if rc != 0:
        report(name, False, "mt-shuffle failed (%d): %s" % (rc, err.strip()))
        continue
    try:
        ok = True
        for si, sname in enumerate(["train", "valid", "test"]):
            if ref[si] is None:
                ok &= not glob.glob(os.path.join(cache, "*-%s-*" % sname))
                continue
            built, di, dsi, per = ref[si]
            # files under Megatron-Core's names, description.txt byte for byte (tests/oracle/megatron_cache_names.py)
            ids = []
            for k, (plan, doc, samp, shuf) in enumerate(built):
                ids.append(mcn.gpt_identifiers(dss[k][0], None if per[k] == "all" else per[k], si, seed, L, split,
                                               vocab, merges))
                text, files = mcn.gpt_files(ids[-1])
                with open(os.path.join(cache, files["description.txt"]), "rb") as f:
                    ok &= f.read() == text.encode()
                ok &= same(one(os.path.join(cache, files["document_index.npy"])), doc)
                ok &= same(one(os.path.join(cache, files["sample_index.npy"])), samp)
                ok &= same(one(os.path.join(cache, files["shuffle_index.npy"])), shuf)
            if di is not None:
                if form == "weighted":
                    u = mcn.blend_identifiers(ids, si, [float("%g" % w) for w in ws], len(di))
                else:
                    u = mcn.blend_identifiers(ids, si, [b[0][3] for b in built], len(di), weighted=False)
                text, files = mcn.blend_files(u)
                with open(os.path.join(cache, files["description.txt"]), "rb") as f:
                    ok &= f.read() == text.encode()
                ok &= same(one(os.path.join(cache, files["dataset_index.npy"])), di)
                ok &= same(one(os.path.join(cache, files["dataset_sample_index.npy"])), dsi)
            # A few samples through --show-sample, against the reference fetch.
            length = len(di) if di is not None else built[0][0][3]
            for i in sorted(set(rnd.randrange(length) for _ in range(3))) if length else []:
                rc2, out2, err2 = run(args + ["--show-sample", str(i), "--show-split", sname])
                k, j = (int(di[i]), int(dsi[i])) if di is not None else (0, i)
                _, doc, samp, shuf = built[k]
                want = fetch(dss[k][2], dss[k][3], dss[k][1], doc, samp, shuf, L, 1, j)
                got = np.array([int(x) for x in out2.split()], dtype=np.int64) if rc2 == 0 else None
                ok &= got is not None and same(got, want)
        report(name, ok, "arrays or samples differ from the reference")
    except Exception as ex:
        report(name, False, repr(ex))
print("# %d mt-shuffle cases" % case, file=sys.stderr)
PYEOF

# ---- the spec's test vector (seed 1234, L=4, sizes [5,3,7,2,9,4]) through the command line ----
$PY - "$T_TMP/tv" <<'PYEOF'
import sys, numpy as np
p = sys.argv[1]
sizes = np.array([5, 3, 7, 2, 9, 4], dtype=np.int32)
ptr = np.concatenate(([0], np.cumsum(sizes[:-1]))).astype(np.int64) * 2
with open(p + ".idx", "wb") as f:
    f.write(b"MMIDIDX\x00\x00" + np.uint64(1).tobytes() + np.uint8(8).tobytes() + np.uint64(6).tobytes() + np.uint64(7).tobytes())
    f.write(sizes.tobytes() + ptr.tobytes() + np.arange(7, dtype=np.int64).tobytes())
np.arange(30, dtype=np.uint16).tofile(p + ".bin")
PYEOF
tv() { mt-shuffle --data-path "$T_TMP/tv" --split 1,0,0 --seq-length 4 --train-samples "$1" --global-batch-size 1 \
    --eval-iters 0 --data-cache-path "$T_TMP/tvc" --quiet "${@:2}"; }
# tvfile SEED WHAT: the file Megatron-Core names for the train split of these runs (9 samples)
tvfile() {
    echo "$T_TMP/tvc/$($PY -c 'import sys; sys.path.insert(0, sys.argv[1]); import megatron_cache_names as m
print(m.gpt_files(m.gpt_identifiers(sys.argv[2], 9, 0, int(sys.argv[3]), 4, "1,0,0"))[1][sys.argv[4]])' \
        "$T_TOP/tests/oracle" "$T_TMP/tv" "$1" "$2")"
}
tv 9 >/dev/null 2>&1
$PY - "$(tvfile 1234 document_index.npy)" "$(tvfile 1234 sample_index.npy)" "$(tvfile 1234 shuffle_index.npy)" \
    > "$T_TMP/tv.txt" 2>&1 <<'PYEOF'
import sys, numpy as np
def g(s): return np.load(sys.argv[1 + ["document_index", "sample_index", "shuffle_index"].index(s)]).tolist()
print(g("document_index")); print(g("sample_index")); print(g("shuffle_index"))
PYEOF
cat > "$T_TMP/tv.want" <<'EOF'
[2, 1, 5, 0, 4, 3, 0, 4, 3, 2, 5, 1]
[[0, 0], [0, 4], [1, 1], [2, 2], [3, 2], [4, 1], [4, 5], [5, 0], [6, 2], [7, 1], [7, 5], [8, 0], [9, 2], [9, 6], [10, 3]]
[1, 0, 3, 2, 5, 4, 6, 9, 10, 12, 8, 11, 13, 7]
EOF
t_cmp "spec test vector n=9 (two epochs, last shuffled separately)" "$T_TMP/tv.want" "$T_TMP/tv.txt"
# Sample 0 is row 1 after shuffling: sequence 2 (tokens 8..14) from offset 4, then the first 2 tokens of
# sequence 1 (5, 6); the .bin holds each token's global position as its id.
tv 9 --show-sample 0 > "$T_TMP/s0" 2>&1
echo "12 13 14 5 6" > "$T_TMP/s0.want"
t_cmp "spec test vector: sample 0 tokens" "$T_TMP/s0.want" "$T_TMP/s0"

# ---- cache reuse and staleness ----
tv 9 2>"$T_TMP/again" >/dev/null; t_ok "second run succeeds" tv 9
mt-shuffle --data-path "$T_TMP/tv" --split 1,0,0 --seq-length 4 --train-samples 9 --global-batch-size 1 --eval-iters 0 \
    --data-cache-path "$T_TMP/tvc" 2>"$T_TMP/again"
t_grep "existing cache is reused" 'train: 14 samples.*cached' "$T_TMP/again"
f=$(tvfile 1234 shuffle_index.npy)
head -c 100 "$f" > "$T_TMP/cut" && cat "$T_TMP/cut" > "$f"
mt-shuffle --data-path "$T_TMP/tv" --split 1,0,0 --seq-length 4 --train-samples 9 --global-batch-size 1 --eval-iters 0 \
    --data-cache-path "$T_TMP/tvc" 2>"$T_TMP/again"
t_grep "a truncated cache file is rebuilt, not used" 'train: 14 samples.*built' "$T_TMP/again"
tv 9 >/dev/null 2>&1
$PY -c 'import numpy as np,sys; a=np.load(sys.argv[1]); sys.exit(0 if a.tolist()==[1,0,3,2,5,4,6,9,10,12,8,11,13,7] else 1)' "$(tvfile 1234 shuffle_index.npy)" \
    && t_pass "rebuilt cache has the right contents" || t_fail "rebuilt cache has the right contents" "differs"
# The dataset changes (same name, other sizes): the old cache must not be used.
$PY - "$T_TMP/tv" <<'PYEOF'
import sys, numpy as np
p = sys.argv[1]
sizes = np.array([5, 3, 7, 2, 9, 5], dtype=np.int32)
ptr = np.concatenate(([0], np.cumsum(sizes[:-1]))).astype(np.int64) * 2
with open(p + ".idx", "wb") as f:
    f.write(b"MMIDIDX\x00\x00" + np.uint64(1).tobytes() + np.uint8(8).tobytes() + np.uint64(6).tobytes() + np.uint64(7).tobytes())
    f.write(sizes.tobytes() + ptr.tobytes() + np.arange(7, dtype=np.int64).tobytes())
np.arange(31, dtype=np.uint16).tofile(p + ".bin")
PYEOF
mt-shuffle --data-path "$T_TMP/tv" --split 1,0,0 --seq-length 4 --train-samples 9 --global-batch-size 1 --eval-iters 0 \
    --data-cache-path "$T_TMP/tvc" 2>"$T_TMP/again"
t_grep "a changed dataset invalidates the cache" 'train: 15 samples.*built' "$T_TMP/again"
t_ok "another seed gets its own files" tv 9 --seed 7
f7=$(tvfile 7 shuffle_index.npy); n=$(ls "${f7%-shuffle_index.npy}"-*.npy | wc -l); [ "$n" = 3 ] && t_pass "seed 7 cache files" || t_fail "seed 7 cache files" "$n files"
# A temporary of a killed build (kill -KILL runs no handler) is removed by the next run even when the cache
# is complete and nothing is written; a live process's temporary and other names are kept.
dead=$(sh -c 'echo $$')
sleep 60 & live=$!
for f in ".x-7s.npy.tmp.$dead.0" ".x-7s.npy.tmp.$live.0" "x.npy.tmp.$dead.0"; do : >"$T_TMP/tvc/$f"; done
t_ok "a run on a complete cache" tv 9 --seed 7
left=$(cd "$T_TMP/tvc" && ls -A | grep 'tmp' | sort | tr '\n' ' ')
[ "$left" = ".x-7s.npy.tmp.$live.0 x.npy.tmp.$dead.0 " ] && t_pass "it removed the dead process's temporary only" \
    || t_fail "it removed the dead process's temporary only" "left: $left"
kill "$live"; wait "$live" 2>/dev/null
t_ok "--inspect writes nothing" mt-shuffle --data-path "$T_TMP/tv" --split 1,0,0 --seq-length 4 --train-samples 9 \
    --global-batch-size 1 --data-cache-path "$T_TMP/none" --inspect
[ ! -e "$T_TMP/none" ] && t_pass "--inspect left no cache directory" || t_fail "--inspect left no cache directory" "exists"
t_grep "--inspect shows the epochs" 'tv: sequences \[0, 6\), 31 tokens per epoch, 2 epochs \(last shuffled separately\)' "$T_TMP/out"

# ---- errors: one line, non-zero exit ----
err1() {  # NAME PATTERN ARGS...
    local name=$1 pat=$2; shift 2
    if mt-shuffle "$@" >/dev/null 2>"$T_TMP/e"; then t_fail "$name" "exit 0"; return; fi
    if [ "$(wc -l < "$T_TMP/e")" = 1 ] && grep -Eq -- "$pat" "$T_TMP/e"; then t_pass "$name"
    else t_fail "$name" "$(head -c 300 "$T_TMP/e")"; fi
}
B="--seq-length 4 --global-batch-size 1 --data-cache-path $T_TMP/ec"
err1 "missing dataset" 'nothere.idx' --data-path "$T_TMP/nothere" $B --train-iters 1
err1 "both iters and samples" 'exactly one of' --data-path "$T_TMP/tv" $B --train-iters 1 --train-samples 4
err1 "seed out of range" 'seed' --data-path "$T_TMP/tv" $B --train-iters 1 --seed 4294967296
err1 "--vocab-file without --merge-file" 'go together' --data-path "$T_TMP/tv" $B --train-iters 1 --vocab-file v.json
err1 "--decode without --show-sample" 'decode' --data-path "$T_TMP/tv" $B --train-iters 1 --decode
err1 "bad weight pairs" 'data-path' --data-path 0.5 "$T_TMP/tv" 0.5 $B --train-iters 1
err1 "zero weights" 'weight' --data-path 0 "$T_TMP/tv" 0 "$T_TMP/tv" $B --train-iters 1
printf 'MMIDIDX\0\0garbage' > "$T_TMP/bad.idx"; : > "$T_TMP/bad.bin"
err1 "corrupt .idx named" 'bad.idx' --data-path "$T_TMP/bad" $B --train-iters 1
err1 "sample out of range" 'out of range' --data-path "$T_TMP/tv" --split 1,0,0 $B --train-samples 9 --show-sample 999
# A blend without weights needs samples of every dataset in every split it builds (Megatron-Core's BlendedDataset
# asserts every weight, a component's length, is positive). An empty one used to be blended with weight 0: with
# --seq-length 1 and the empty dataset second the blend rule never picked it and the run succeeded; every
# dataset empty said only "blend weights sum to 0".
$PY - "$T_TMP/empty" <<'PYEOF'
import sys, numpy as np
p = sys.argv[1]
with open(p + ".idx", "wb") as f:
    f.write(b"MMIDIDX\x00\x00" + np.uint64(1).tobytes() + np.uint8(8).tobytes() + np.uint64(2).tobytes() + np.uint64(3).tobytes())
    f.write(np.zeros(2, dtype=np.int32).tobytes() + np.zeros(2, dtype=np.int64).tobytes() + np.arange(3, dtype=np.int64).tobytes())
open(p + ".bin", "wb").close()
PYEOF
U="--global-batch-size 1 --train-iters 3 --eval-iters 0 --data-cache-path $T_TMP/ec --quiet"
err1 "no weights, an empty dataset after a full one" '/empty: no samples in the train split \(a blend without weights' \
    --data-path "$T_TMP/tv" "$T_TMP/empty" --split 1,0,0 --seq-length 1 $U
err1 "no weights, an empty dataset first" '/empty: no samples in the train split' \
    --data-path "$T_TMP/empty" "$T_TMP/tv" --split 1,0,0 --seq-length 4 $U
err1 "no weights, every dataset empty" '/empty: no samples in the train split' \
    --data-path "$T_TMP/empty" "$T_TMP/empty" --split 1,0,0 --seq-length 4 $U
err1 "no weights, a split too short for one sequence" '/tv: no samples in the valid split' \
    --data-path "$T_TMP/tv" "$T_TMP/tv" --split 5,1,0 --seq-length 5 $U --eval-interval 1   # (its last document: 5 tokens)
