#!/usr/bin/env bash
# cache-names.sh: index caches are shared with Megatron-Core under its names. A cache written as Megatron
# writes it (tests/oracle: description.txt = json.dumps of its description, name = its MD5, arrays from the
# numpy reference, no mt description) is loaded by mt-shuffle and mt-train, for one dataset and a blend,
# without writing anything; a cache under mt's earlier names is loaded too; mt-train reuses mt-shuffle's.
. "$(dirname "$0")/../lib.sh"
py=/usr/bin/python3
d=$T_TMP
export OMP_NUM_THREADS=2
if ! $py -c 'import numpy' 2>/dev/null; then t_fail "setup" "no /usr/bin/python3 with numpy"; exit 1; fi

# two datasets over ids 0..59 (NullTokenizer --vocab-size 60, end of document 60)
PYTHONPATH=$T_TOP/tests/oracle $py - "$d" <<'PYEOF' || t_fail "setup" "datasets not written"
import sys, numpy as np
from indexed_write import write_indexed
rs = np.random.RandomState(3)
write_indexed(sys.argv[1] + "/a", [list(rs.randint(0, 60, rs.randint(10, 50))) + [60] for _ in range(120)])
write_indexed(sys.argv[1] + "/b", [list(rs.randint(0, 60, rs.randint(10, 50))) + [60] for _ in range(80)])
PYEOF

# megatron_writes DIR PREFIXES WEIGHTS N VOCAB MERGES: the train split's caches as Megatron-Core writes
# them (split 100,0,0, seq length 16, seed 1234; WEIGHTS "-" for one dataset); prints the file names
megatron_writes() {
    PYTHONPATH=$T_TOP/tests/oracle $py - "$@" <<'PYEOF'
import os, sys, numpy as np
import megatron_cache_names as m
from gpt_dataset_ref import split_core, gpt, blend_sizes, blend_indices
d, prefixes, weights, N = sys.argv[1], sys.argv[2].split(","), sys.argv[3], int(sys.argv[4])
vocab, merges = sys.argv[5] or None, sys.argv[6] or None
os.makedirs(d, exist_ok=True)
def sizes(p):
    with open(p + ".idx", "rb") as f:
        f.seek(18); n = int(np.frombuffer(f.read(8), np.uint64)[0]); f.seek(34)
        return np.frombuffer(f.read(4 * n), np.int32)
def save_gpt(p, n):
    s = sizes(p); lo, hi = split_core("100,0,0", len(s))[0]
    plan, doc, samp, shuf = gpt(s, lo, hi, n, 16, 1, 1234, True)
    u = m.gpt_identifiers(p, n, 0, 1234, 16, "100,0,0", vocab, merges)
    text, files = m.gpt_files(u)
    with open(os.path.join(d, files["description.txt"]), "wt") as f: f.write(text)
    for k, a in (("document_index.npy", doc), ("sample_index.npy", samp), ("shuffle_index.npy", shuf)):
        np.save(os.path.join(d, files[k]), a, allow_pickle=True)
    return u, plan
if weights == "-":
    save_gpt(prefixes[0], N)
else:
    ws = [float(x) for x in weights.split(",")]
    w, per, size = blend_sizes(ws, N, 0.005)
    ids = [save_gpt(p, n)[0] for p, n in zip(prefixes, per)]
    di, dsi, cur = blend_indices(w, size)
    text, files = m.blend_files(m.blend_identifiers(ids, 0, ws, size))
    with open(os.path.join(d, files["description.txt"]), "wt") as f: f.write(text)
    np.save(os.path.join(d, files["dataset_index.npy"]), di, allow_pickle=True)
    np.save(os.path.join(d, files["dataset_sample_index.npy"]), dsi, allow_pickle=True)
PYEOF
}
listing() { (cd "$1" && ls -l --time-style=+%s.%N | sort); }
shuffle() {  # DIR ARGS...: mt-shuffle of the train split as above, 40 samples
    local dir=$1; shift
    mt-shuffle --split 100,0,0 --seq-length 16 --train-samples 40 --global-batch-size 4 --eval-iters 0 \
        --data-cache-path "$dir" "$@"
}

# 1. one dataset: Megatron's files load, nothing is written (mt-shuffle, then mt-train)
megatron_writes "$d/m1" "$d/a" - 40 vocab.json merges.txt || t_fail "megatron_writes" "one dataset"
before=$(listing "$d/m1")
shuffle "$d/m1" --data-path "$d/a" --vocab-file vocab.json --merge-file merges.txt 2>"$d/e1" >/dev/null
t_grep "mt-shuffle loads Megatron's GPTDataset cache" 'a train: [0-9]+ samples.*cached' "$d/e1"
[ "$before" = "$(listing "$d/m1")" ] && t_pass "and writes nothing" || t_fail "and writes nothing" "the directory changed"
shuffle "$d/m1" --data-path "$d/a" --vocab-file other.json --merge-file merges.txt 2>"$d/e1b" >/dev/null
t_grep "another tokenizer path is another cache (as in Megatron)" 'a train: [0-9]+ samples.*built' "$d/e1b"

# 2. a blend: Megatron's component and BlendedDataset files load
megatron_writes "$d/m2" "$d/a,$d/b" 0.3,0.7 40 "v é.json" m.txt || t_fail "megatron_writes" "blend"
before=$(listing "$d/m2")
shuffle "$d/m2" --data-path 0.3 "$d/a" 0.7 "$d/b" --vocab-file "v é.json" --merge-file m.txt 2>"$d/e2" >/dev/null
t_grep "mt-shuffle loads Megatron's BlendedDataset cache" 'blend train: 40 samples from 2 datasets, cached' "$d/e2"
n=$(grep -c 'train: .*cached' "$d/e2"); [ "$n" = 3 ] && t_pass "and both components'" || t_fail "and both components'" "$(cat "$d/e2")"
[ "$before" = "$(listing "$d/m2")" ] && t_pass "and writes nothing (blend)" || t_fail "and writes nothing (blend)" "the directory changed"

# 3. mt-train reuses what mt-shuffle wrote (NullTokenizer: no tokenizer in the description), Megatron's too
train() {
    mt-train --num-layers 1 --hidden-size 16 --num-attention-heads 2 --seq-length 16 --max-position-embeddings 16 \
        --tokenizer-type NullTokenizer --vocab-size 60 --micro-batch-size 4 --global-batch-size 4 --lr 1e-3 \
        --train-iters 10 --log-interval 5 --eval-iters 0 --split 100,0,0 --seed 1234 "$@"
}
shuffle "$d/m3" --data-path "$d/a" 2>/dev/null >/dev/null
before=$(listing "$d/m3")
train --data-path "$d/a" --data-cache-path "$d/m3" >"$d/t3.log" 2>&1 && t_pass "mt-train on mt-shuffle's cache" \
    || t_fail "mt-train on mt-shuffle's cache" "$(tail -2 "$d/t3.log")"
[ "$before" = "$(listing "$d/m3")" ] && t_pass "mt-train loads mt-shuffle's cache" || t_fail "mt-train loads mt-shuffle's cache" "the directory changed"
megatron_writes "$d/m3b" "$d/a" - 40 "" "" || t_fail "megatron_writes" "no tokenizer"
before=$(listing "$d/m3b")
train --data-path "$d/a" --data-cache-path "$d/m3b" >"$d/t3b.log" 2>&1 && [ "$before" = "$(listing "$d/m3b")" ] \
    && t_pass "mt-train loads Megatron's cache" || t_fail "mt-train loads Megatron's cache" "$(tail -2 "$d/t3b.log")"
cmp -s <(grep -o 'lm loss: [^|]*' "$d/t3.log") <(grep -o 'lm loss: [^|]*' "$d/t3b.log") && grep -q 'lm loss' "$d/t3.log" \
    && t_pass "with the same losses" || t_fail "with the same losses" "differ"

# 4. caches under mt's earlier names (<prefix base>-<split>-<n>ns-<L>sl-<seed>s-<hash>-..., description.json
#    holding mt's description) still load: made from a fresh cache by renaming, Megatron's description removed
shuffle "$d/c4" --data-path 0.3 "$d/a" 0.7 "$d/b" 2>/dev/null >/dev/null
$py - "$d/c4" "$d/a" "$d/b" <<'PYEOF' || t_fail "renaming to the earlier names" "failed"
import glob, os, sys
d, pa, pb = sys.argv[1:]
def fnv(s):
    h = 0xcbf29ce484222325
    for c in s.encode():
        h = ((h ^ c) * 0x100000001b3) & 0xffffffffffffffff
    return h
n_seq = {pa: 120, pb: 80}
for desc in glob.glob(d + "/*-mt_description.json"):
    base = desc[:-len("mt_description.json")]
    text = open(desc).read()
    if "-BlendedDataset-" in base:
        old = "%s/a-blend2-train-40ns-%08x-" % (d, fnv(text) & 0xffffffff)
        arrays = ["dataset_index.npy", "dataset_sample_index.npy"]
    else:
        p = pa if '"path": "%s"' % pa in text else pb
        ns = text.split('"num_samples": ')[1].split(",")[0]
        ident = "%s\n%s\n%d %d\n1 1" % (p, "100,0,0", 0, n_seq[p])
        old = "%s/%s-train-%sns-16sl-1234s-%08x-" % (d, os.path.basename(p), ns, fnv(ident) >> 32)
        arrays = ["document_index.npy", "sample_index.npy", "shuffle_index.npy"]
    os.rename(desc, old + "description.json")
    for a in arrays:
        os.rename(base + a, old + a)
    os.unlink(base + "description.txt")
PYEOF
before=$(listing "$d/c4")
shuffle "$d/c4" --data-path 0.3 "$d/a" 0.7 "$d/b" 2>"$d/e4" >/dev/null
n=$(grep -c 'train: .*cached' "$d/e4"); [ "$n" = 3 ] && t_pass "caches under the earlier names load (blend and components)" \
    || t_fail "caches under the earlier names load (blend and components)" "$(cat "$d/e4")"
[ "$before" = "$(listing "$d/c4")" ] && t_pass "and nothing is rewritten" || t_fail "and nothing is rewritten" "the directory changed"
