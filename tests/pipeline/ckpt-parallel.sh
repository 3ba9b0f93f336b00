#!/usr/bin/env bash
# ckpt-parallel.sh: the parallel save and load of mt-train(1) on 8 CPU ranks under mpirun (DP 2 x TP 2 x
# PP 2), with and without --use-distributed-optimizer (bf16 with it: the shards then hold the fp32 master).
# Each rank's bytes written (MT_CKPT_STATS) are the sizes of the files it owns in the checkpoint, whose data
# are exactly its share computed here from the layout (GPT-2's tensors, the padded vocabulary, the even
# split of a (tensor rank, stage)'s flat buffer over the data-parallel ranks); every rank's peak RSS during
# the save stays within its RSS before it plus the stated staging bound (3 MiB; a funnel to rank 0 would add
# every rank's state, 4x more than rank 0's own). A resume on the same layout reads exactly its own slices
# (parameters and its part of the moments) and logs the uninterrupted run's losses bit for bit; a resume at
# TP 1 x PP 2 x DP 4 or TP 2 x PP 1 x DP 4 reads its own (other) slices and logs the same losses within
# 1e-5. --async-save logs when the background write began and ended and gives the synchronous run's losses
# and checkpoint files byte for byte. A rank that dies or fails during a save leaves the previous
# checkpoint the latest.
. "$(dirname "$0")/../lib.sh"
py=/usr/bin/python3
d=$T_TMP
if ! command -v mpirun >/dev/null; then t_fail "mpirun" "openmpi-bin is not installed (make deps)"; exit 1; fi
t_mpi_env
export MT_CKPT_STATS=1

PYTHONPATH=$T_TOP/tests/oracle $py "$T_TOP/tests/oracle/walk_data.py" "$d/data" 7 300
H=256 L=4 V=1000 S=32 DIV=128
base="--num-layers $L --hidden-size $H --num-attention-heads 4 --seq-length $S --max-position-embeddings $S
      --tokenizer-type NullTokenizer --vocab-size $V --make-vocab-size-divisible-by $DIV
      --micro-batch-size 2 --global-batch-size 8 --lr 3e-3 --min-lr 3e-4 --lr-decay-style cosine
      --lr-warmup-iters 2 --weight-decay 0.1 --clip-grad 1.0 --log-interval 1 --eval-iters 0
      --split 100,0,0 --seed 77 --data-path $d/data --data-cache-path $d/cache"
# shellcheck disable=SC2086
mt-train $base --train-iters 1 >/dev/null 2>&1   # the index cache, once
# run NAME TP PP ITERS FLAGS...: 8 ranks (a job that hangs is stopped after 300 s)
run() {
    local n=$1 tp=$2 pp=$3 it=$4
    shift 4
    # shellcheck disable=SC2086
    timeout 300 mpirun $T_MPI_ROOT --oversubscribe -np 8 mt-train $base --tensor-model-parallel-size "$tp" \
        --pipeline-model-parallel-size "$pp" --train-iters "$it" --metrics-file "$d/$n.jsonl" "$@" >"$d/$n.log" 2>"$d/$n.err"
}

# share.py CKPT ITER TP PP DP DIST PARAM STATS_FILE KIND: checks every rank's stats line of KIND (save or
# load) against the layout: save, the sizes of its files in iter ITER and their data; load, its slices.
cat >"$d/share.py" <<'PYEOF'
import json, os, re, struct, sys
ck, it, TP, PP, DP, dist, param, err, kind = sys.argv[1], int(sys.argv[2]), *map(int, sys.argv[3:8]), sys.argv[8], sys.argv[9]
H, L, V, S, DIV = (int(os.environ[k]) for k in ("H", "L", "V", "S", "DIV"))
pv = -(-V // (DIV * TP)) * DIV * TP   # the vocabulary padded for TP
def numel(t, p):   # floats of tensor rank t, stage p: GPT-2's layout
    n = 0
    if p == 0: n += pv // TP * H + S * H
    per = L // PP
    n += per * (2 * H + 3 * H // TP * H + 3 * H // TP + H * H // TP + H + 2 * H + 4 * H // TP * H + 4 * H // TP + H * 4 * H // TP + H)
    if p == PP - 1:
        n += 2 * H
        if PP > 1: n += pv // TP * H   # word_embeddings_for_head
    return n
def shard(n, r): return n // DP + (r < n % DP)
def data_bytes(path):
    b = open(path, "rb").read()
    hl = struct.unpack("<Q", b[:8])[0]
    h = json.loads(b[8:8 + hl])
    return len(b) - 8 - hl, sum(v["data_offsets"][1] - v["data_offsets"][0] for k, v in h.items() if k != "__metadata__")
stats = {}
for l in open(err):
    m = re.match(r"ckpt stats \| rank (\d+) \| %s iteration (\d+) \| bytes (?:written|read) (\d+) \|.*?(?:rss before (\d+) \| peak rss (\d+))?$" % kind, l.strip())
    if m and int(m.group(2)) == it: stats[int(m.group(1))] = [int(x) if x else 0 for x in m.groups()[2:]]
assert sorted(stats) == list(range(8)), "stats of ranks %s" % sorted(stats)
worst = 0
for r in range(8):
    t, dp, p = r % TP, r // TP % DP, r // (TP * DP)
    n = numel(t, p)
    lo = sum(shard(n, q) for q in range(dp)); cnt = shard(n, dp)
    rd = os.path.join(ck, "iter_%07d" % it, "mp_rank_%02d" % t + ("_%03d" % p if PP > 1 else ""))
    if kind == "save":
        files = (["model.safetensors", "meta.json"] + ([] if dist else ["optim.safetensors"]) if dp == 0 else []) + \
                (["distrib_optim_%03d.safetensors" % dp] if dist else [])
        size = sum(os.path.getsize(os.path.join(rd, f)) for f in files)
        assert stats[r][0] == size, "rank %d wrote %d bytes, its files hold %d" % (r, stats[r][0], size)
        want = (n * 4 * (1 if dist else 3) if dp == 0 else 0) + (cnt * 4 * (3 if param else 2) if dist else 0)
        got = sum(data_bytes(os.path.join(rd, f))[0] for f in files if f.endswith(".safetensors"))
        assert got == want, "rank %d: %d data bytes, its share is %d" % (r, got, want)
        grew = stats[r][2] - stats[r][1]
        assert 0 < stats[r][1] and grew <= 3 * 1024, "rank %d: peak RSS %d kB over %d kB before the save (bound 3072)" % (r, grew, stats[r][1])
        worst = max(worst, grew)
    else:
        want = n * 4 + (cnt if dist else n) * 8
        assert stats[r][0] == want, "rank %d read %d bytes, its slices are %d" % (r, stats[r][0], want)
print("8 ranks; most RSS growth %d kB; rank 0 state %d kB" % (worst, numel(0, 0) * 4 * (1 + (2 / DP if dist else 2)) // 1024))
PYEOF
same() {   # A B FROM TOL: B's iterations after FROM have A's losses (exactly with TOL 0)
    $py - "$d/$1.jsonl" "$d/$2.jsonl" "$3" "$4" <<'PYEOF'
import json, sys
ld = lambda p: {r["iteration"]: (r["lm_loss"], r["grad_norm"]) for r in map(json.loads, open(p)) if r["type"] == "train"}
a, b, f, tol = ld(sys.argv[1]), ld(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
assert sorted(b) == list(range(f + 1, max(a) + 1)), sorted(b)
for i in b:
    if tol == 0: assert a[i] == b[i], "iteration %d: %r, uninterrupted %r" % (i, b[i], a[i])
    else: assert abs(a[i][0] - b[i][0]) <= tol * abs(a[i][0]), "iteration %d: %r, uninterrupted %r" % (i, b[i], a[i])
print(len(b))
PYEOF
}
export H L V S DIV
for mode in plain dist; do
    fl="" dist=0 param=0
    [ $mode = dist ] && fl="--use-distributed-optimizer --bf16" dist=1 param=1
    # shellcheck disable=SC2086
    if run $mode 2 2 6 $fl --save "$d/ck-$mode" --save-interval 3; then t_pass "$mode: DP 2 x TP 2 x PP 2 trains and saves"
    else t_fail "$mode: train and save" "$(tail -3 "$d/$mode.err")"; continue; fi
    out=$($py "$d/share.py" "$d/ck-$mode" 3 2 2 2 $dist $param "$d/$mode.err" save 2>&1) \
        && t_pass "$mode: each rank wrote its own share, peak RSS within the 3 MiB staging bound ($out)" \
        || t_fail "$mode: each rank's share" "$out"
    # the same layout from iteration 3
    echo 3 >"$d/ck-$mode/latest_checkpointed_iteration.txt"
    # shellcheck disable=SC2086
    run $mode-r 2 2 6 $fl --load "$d/ck-$mode" || t_fail "$mode: resume" "$(tail -3 "$d/$mode-r.err")"
    out=$($py "$d/share.py" "$d/ck-$mode" 3 2 2 2 $dist $param "$d/$mode-r.err" load 2>&1) \
        && t_pass "$mode: a resume reads its own slices only" || t_fail "$mode: bytes read at load" "$out"
    out=$(same $mode $mode-r 3 0 2>&1) && t_pass "$mode: resumed on the same layout, losses and grad norms bit for bit ($out iterations)" \
        || t_fail "$mode: bit-exact resume" "$out"
    # a rank that dies during the save of iteration 6 (rank 5 only: test hook MT_CKPT_CRASH_AFTER=1, after its
    # first file), or whose write fails (rank 5 under a 200 kB file-size limit, SIGXFSZ ignored: EFBIG) while
    # the others write theirs: nothing is committed, the tracker still names 3
    if [ $mode = plain ]; then
        for how in dies fails; do
            rm -rf "$d/ck-die"; cp -a "$d/ck-$mode" "$d/ck-die"
            echo 3 >"$d/ck-die/latest_checkpointed_iteration.txt"
            rm -rf "$d/ck-die/iter_0000006"
            one="$base --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 --train-iters 6 --load $d/ck-die --save $d/ck-die --save-interval 3"
            victim="env MT_CKPT_CRASH_AFTER=1 mt-train"
            [ $how = fails ] && victim="bash -c 'ulimit -f 200; trap \"\" XFSZ; exec mt-train \"\$@\"' mt-train"
            # shellcheck disable=SC2086
            eval timeout 300 mpirun $T_MPI_ROOT --oversubscribe -np 5 mt-train $one : -np 1 $victim $one : \
                -np 2 mt-train $one >"$d/die.log" 2>"$d/die.err"
            [ "$(cat "$d/ck-die/latest_checkpointed_iteration.txt")" = 3 ] && [ ! -e "$d/ck-die/iter_0000006" ] &&
                { [ $how = dies ] || grep -q "iter_0000006.tmp-.*File too large" "$d/die.err"; } \
                && t_pass "$mode: rank 5 $how mid-save: iteration 6 is not committed, the tracker names 3" \
                || t_fail "$mode: a rank $how mid-save" "tracker $(cat "$d/ck-die/latest_checkpointed_iteration.txt"), $(ls "$d/ck-die"), $(grep -v '^ckpt' "$d/die.err" | head -3)"
        done
    fi
    # other layouts: TP 1 x PP 2 x DP 4 and TP 2 x PP 1 x DP 4 (fp32 only: bf16 runs of two layouts differ by
    # more than 1e-5)
    if [ $mode = plain ]; then
        for x in "1 2" "2 1"; do
            read -r xt xp <<<"$x"
            run $mode-x$xt$xp "$xt" "$xp" 6 --load "$d/ck-$mode" || t_fail "$mode: resume at TP $xt PP $xp DP 4" "$(tail -3 "$d/$mode-x$xt$xp.err")"
            out=$($py "$d/share.py" "$d/ck-$mode" 3 "$xt" "$xp" 4 0 0 "$d/$mode-x$xt$xp.err" load 2>&1) \
                && t_pass "$mode: at TP $xt x PP $xp x DP 4 a rank reads its own slices of the TP 2 x PP 2 checkpoint" \
                || t_fail "$mode: bytes read at TP $xt PP $xp" "$out"
            out=$(same $mode $mode-x$xt$xp 3 1e-5 2>&1) && t_pass "$mode: resumed at TP $xt x PP $xp x DP 4 with the same losses (1e-5)" \
                || t_fail "$mode: resume at TP $xt PP $xp" "$out"
        done
    fi
    # --async-save: the same losses and checkpoint files as the synchronous run
    # shellcheck disable=SC2086
    run $mode-a 2 2 6 $fl --save "$d/ck-$mode-a" --save-interval 3 --async-save || t_fail "$mode: --async-save" "$(tail -3 "$d/$mode-a.err")"
    out=$(same $mode $mode-a 0 0 2>&1) && t_pass "$mode: --async-save gives the synchronous run's losses bit for bit" || t_fail "$mode: --async-save losses" "$out"
    diffs=0
    for f in $(cd "$d/ck-$mode" && find iter_0000003 iter_0000006 -name '*.safetensors'); do cmp -s "$d/ck-$mode/$f" "$d/ck-$mode-a/$f" || diffs=$((diffs + 1)); done
    nf=$(cd "$d/ck-$mode" && find iter_0000003 iter_0000006 -name '*.safetensors' | wc -l)
    [ "$diffs" = 0 ] && [ "$nf" -gt 8 ] && [ "$(cat "$d/ck-$mode-a/latest_checkpointed_iteration.txt")" = 6 ] \
        && t_pass "$mode: --async-save writes the synchronous run's $nf files byte for byte" || t_fail "$mode: --async-save files" "$diffs of $nf differ"
    grep -q "saving checkpoint at iteration       3 to .* in the background" "$d/$mode-a.log" &&
        grep -q "background write of iteration 3 ended" "$d/$mode-a.log" &&
        t_pass "$mode: --async-save logs when the write began and ended" || t_fail "$mode: --async-save log" "$(grep -i save "$d/$mode-a.log")"
done
t_cleanup
