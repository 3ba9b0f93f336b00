#!/usr/bin/env bash
# kill.sh: SIGKILL at random points. mt-train on one rank, TP=2 under mpirun, PP=2 under mt-train -n 2,
# DP=2 x TP=2 with the distributed optimizer under mpirun (a parallel save: every rank writes its own
# shard) and DP=2 x PP=2 with it and --async-save under mt-train -n 4 (a kill during the background write)
# is killed (the one rank, one rank of several, or the launcher) at seeded random delays, mid-save included;
# each time the job ends within 10 s with no rank left, every checkpoint under its final name is complete
# (its files all parse) and the tracker names one, and the next run loads it and logs the uninterrupted
# run's losses and grad norms bit for bit. mt-index, mt-shuffle's caches and mt-ckpt-convert --to hf killed
# mid-write leave their outputs absent or complete, and a rerun writes the same bytes. A file-size limit
# (a full disk) makes mt-index and mt-train --save fail with one line naming the file, leaving the previous
# results intact. KILL_SEED=N repeats a run's kill points; KILL_ROUNDS=N kills training N times (default 10).
# shellcheck disable=SC2046   # $(rankdirs L): the rank directory names, split on purpose
. "$(dirname "$0")/../lib.sh"
py=/usr/bin/python3
d=$T_TMP
if ! command -v mpirun >/dev/null; then t_fail "mpirun" "openmpi-bin is not installed (make deps)"; exit 1; fi
t_mpi_env
seed=${KILL_SEED:-$(( $(date +%s%N) / 1000 % 32768 ))}
RANDOM=$seed
echo "# kill points from seed $seed (KILL_SEED=$seed repeats them)"
rounds=${KILL_ROUNDS:-10}
[ -n "${MT_SOAK:-}" ] && [ -z "${KILL_ROUNDS:-}" ] && rounds=60

PYTHONPATH=$T_TOP/tests/oracle $py "$T_TOP/tests/oracle/walk_data.py" "$d/data" 7 300
base="--num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 32 --max-position-embeddings 32
      --tokenizer-type NullTokenizer --vocab-size 60 --make-vocab-size-divisible-by 16
      --micro-batch-size 2 --global-batch-size 8 --train-iters 30 --lr 3e-3 --min-lr 3e-4 --lr-decay-style cosine
      --lr-warmup-iters 5 --weight-decay 0.1 --clip-grad 1.0 --log-interval 1 --eval-interval 10 --eval-iters 1
      --split 90,5,5 --seed 77 --data-path $d/data --data-cache-path $d/cache --save-interval 2"
# shellcheck disable=SC2086
mt-train $base --train-iters 1 --eval-iters 0 >/dev/null 2>&1   # the index cache, once

# job LAYOUT CKPT METRICS: starts the layout's job in the background (its launcher's pid in $job)
#   one: mt-train on one rank   tp: mpirun -np 2, --tensor-model-parallel-size 2   pp: mt-train -n 2, --pipeline-model-parallel-size 2
#   dist: mpirun -np 4, TP 2, --use-distributed-optimizer   async: mt-train -n 4, PP 2, the same and --async-save
job() {
    local a="$base --save $2 --load $2 --metrics-file $3"
    # shellcheck disable=SC2086
    case $1 in
        one) mt-train $a >"$3.log" 2>"$3.err" & ;;
        tp) mpirun $T_MPI_ROOT --oversubscribe -np 2 mt-train $a --tensor-model-parallel-size 2 >"$3.log" 2>"$3.err" & ;;
        pp) mt-train -n 2 $a --pipeline-model-parallel-size 2 >"$3.log" 2>"$3.err" & ;;
        dist) mpirun $T_MPI_ROOT --oversubscribe -np 4 mt-train $a --tensor-model-parallel-size 2 --use-distributed-optimizer \
                  >"$3.log" 2>"$3.err" & ;;
        async) mt-train -n 4 $a --pipeline-model-parallel-size 2 --use-distributed-optimizer --async-save >"$3.log" 2>"$3.err" & ;;
    esac
    job=$!
}
ntmp() { compgen -G "$1/*.tmp-*" | wc -l; }   # a save's temporaries in CKPT
ranks_of() { pgrep -f "^([^ ]*/)?mt-train .*--save $1 "; }
rankdirs() { case $1 in one) echo mp_rank_00 ;; tp | dist) echo mp_rank_00 mp_rank_01 ;; pp | async) echo mp_rank_00_000 mp_rank_00_001 ;; esac; }
# the files of a rank directory (check.py's KILL_FILES)
rankfiles() { case $1 in dist | async) echo distrib_optim_000.safetensors,distrib_optim_001.safetensors,meta.json,model.safetensors ;;
              *) echo meta.json,model.safetensors,optim.safetensors ;; esac; }

# check.py CKPT RANKDIRS... : every iter_NNNNNNN under its final name holds exactly these rank directories,
# each with the files $KILL_FILES names (a model and an optimizer safetensors file, or the optimizer's
# shards), each safetensors file's header parsing and its data ending at the file's end, and a meta.json
# that parses; the tracker (if any) names one of them. Prints the tracker's iteration.
cat >"$d/check.py" <<'PYEOF'
import json, os, re, struct, sys
ck, want = sys.argv[1], sorted(sys.argv[2:])
files = sorted(os.environ["KILL_FILES"].split(","))
if not os.path.isdir(ck): print(0); sys.exit(0)
for name in os.listdir(ck):
    if not re.fullmatch(r"iter_\d{7}", name): continue
    it = os.path.join(ck, name)
    assert sorted(os.listdir(it)) == want, "%s holds %s" % (it, sorted(os.listdir(it)))
    for r in want:
        rd = os.path.join(it, r)
        assert sorted(os.listdir(rd)) == files, "%s: %s" % (rd, os.listdir(rd))
        json.load(open(os.path.join(rd, "meta.json")))
        for f in (f for f in files if f.endswith(".safetensors")):
            p = os.path.join(rd, f)
            b = open(p, "rb").read()
            n = struct.unpack("<Q", b[:8])[0]
            h = json.loads(b[8:8 + n])
            end = max(v["data_offsets"][1] for k, v in h.items() if k != "__metadata__")
            assert 8 + n + end == len(b), "%s: data ends at %d, file has %d bytes" % (p, 8 + n + end, len(b))
t = os.path.join(ck, "latest_checkpointed_iteration.txt")
if not os.path.exists(t): print(0); sys.exit(0)
i = int(open(t).read())
assert os.path.isdir(os.path.join(ck, "iter_%07d" % i)), "tracker names %d, absent" % i
print(i)
PYEOF
# same.py REF RUN FROM: the run's train iterations (complete lines) start at FROM + 1 and have REF's lm_loss
# and grad_norm exactly; prints the last one
cat >"$d/same.py" <<'PYEOF'
import json, os, sys
def load(p):
    out = {}
    if not os.path.exists(p): return out   # killed before it opened the file
    for l in open(p):
        try: r = json.loads(l)
        except ValueError: continue
        if r["type"] == "train": out[r["iteration"]] = (r["lm_loss"], r["grad_norm"])
    return out
a, b, f = load(sys.argv[1]), load(sys.argv[2]), int(sys.argv[3])
if b: assert min(b) == f + 1, "first iteration %d after a checkpoint at %d" % (min(b), f)
assert sorted(b) == list(range(f + 1, f + 1 + len(b))), sorted(b)
bad = [i for i in b if a[i] != b[i]]
assert not bad, "iteration %d: %r, uninterrupted %r" % (bad[0], b[bad[0]], a[bad[0]])
print(max(b) if b else f)
PYEOF

# uninterrupted runs
for l in one tp pp dist async; do
    job $l "$d/ref-$l" "$d/ref-$l.jsonl"; wait $job
    n=$($py "$d/same.py" "$d/ref-$l.jsonl" "$d/ref-$l.jsonl" 0 2>&1)
    [ "$n" = 30 ] && t_pass "$l: uninterrupted run, 30 iterations" || t_fail "$l: uninterrupted run" "$n $(tail -3 "$d/ref-$l.jsonl.err")"
done
$py - "$d/ref-one.jsonl" "$d/ref-tp.jsonl" "$d/ref-pp.jsonl" "$d/ref-dist.jsonl" "$d/ref-async.jsonl" <<'PYEOF' && t_pass "the five layouts' uninterrupted losses agree (1e-5)" || t_fail "layouts agree" "see stderr"
import json, sys
L = [{r["iteration"]: r["lm_loss"] for r in map(json.loads, open(p)) if r["type"] == "train"} for p in sys.argv[1:]]
assert all(abs(m[i] - L[0][i]) <= 1e-5 * abs(L[0][i]) for m in L for i in L[0]), "differ"
PYEOF

# A kill point, drawn at random: at start-up (0 to 300 ms after the launch), 0 to 20 ms after iteration K
# is in the metrics file, or as soon as the save of iteration K (even) has its temporary directory (then a
# rank is the victim: killing the launcher, the ranks may finish the save before they notice).
# Events, not times, so that a loaded machine moves the kill points but not their phases.
waitfor() {   # METRICS K: until iteration K is logged (300 s at most) or the job has ended
    local _
    for _ in $(seq 30000); do grep -q "\"iteration\":$2," "$1" 2>/dev/null && return 0; kill -0 $job 2>/dev/null || return 1; sleep 0.01; done
}
killpoint() {   # METRICS CKPT FROM: sleeps until the point, describes it in $point
    local k=$(( $3 + 1 + RANDOM % (29 - $3) )) ms=$((RANDOM % 300)) _
    atsave=0
    case $((RANDOM % 3)) in
        0) point="$ms ms after the launch"; sleep "0.$(printf %03d $ms)" ;;
        1) ms=$((RANDOM % 20)); point="$ms ms after iteration $k"; waitfor "$1" $k && sleep "0.0$(printf %02d $ms)" ;;
        2) k=$(( (k + 1) / 2 * 2 )); atsave=1; point="at the save of iteration $k"
           while kill -0 $job 2>/dev/null; do compgen -G "$2/iter_$(printf %07d $k).tmp-*" >/dev/null && break; done ;;
    esac
}

# the kill rounds: layouts in turn; a run that ends before its kill starts that layout afresh
declare -A kills phases runsof
killed=0 failed=0 r=0 finished=0
while [ "$killed" -lt "$rounds" ] && [ "$failed" = 0 ]; do
    l=$(echo one tp pp dist async | cut -d' ' -f$((r % 5 + 1)))
    r=$((r + 1))
    ck=$d/ck-$l m=$d/run-$r-$l.jsonl
    from=$(KILL_FILES=$(rankfiles $l) $py "$d/check.py" "$ck" $(rankdirs $l) 2>&1)
    before=$(ntmp "$ck")
    [ "$from" -ge 28 ] && { rm -rf "$ck"; from=0; }   # too few iterations left to kill in: afresh
    job $l "$ck" "$m"
    killpoint "$m" "$ck" "$from"
    if ! kill -0 $job 2>/dev/null; then
        wait $job; rc=$?
        if [ "$rc" = 0 ] && last=$($py "$d/same.py" "$d/ref-$l.jsonl" "$m" "$from" 2>&1) && [ "$last" = 30 ]; then
            finished=$((finished + 1)); rm -rf "$ck"
            echo "# round $r: $l resumed from $from ran to the end before its kill ($point): the uninterrupted losses; starting afresh"
        else failed=1; t_fail "round $r: $l resumed from $from" "rc $rc: $last $(tail -2 "$m.err")"; fi
        continue
    fi
    victim=$job what=launcher
    if [ $l = one ]; then what=rank
    elif [ $((RANDOM % 2)) = 0 ] || [ $atsave = 1 ]; then   # a save is cut short by a rank's death
        mapfile -t rk < <(ranks_of "$ck" | grep -vx "$job")
        [ ${#rk[@]} -gt 0 ] && victim=${rk[RANDOM % ${#rk[@]}]} what="one rank of ${#rk[@]}"
    fi
    kill -KILL "$victim" 2>/dev/null
    t0=$(date +%s%N) left=x
    for _ in $(seq 100); do
        if ! kill -0 $job 2>/dev/null; then left=$(ranks_of "$ck" | tr '\n' ' '); [ -z "$left" ] && break; fi
        sleep 0.1
    done
    wait $job 2>/dev/null
    took=$(( ($(date +%s%N) - t0) / 1000000 ))
    killed=$((killed + 1))
    if [ -n "$left" ]; then
        failed=1; t_fail "round $r: $l, $what killed $point" "after 10 s still running: ${left:-the launcher}"
        kill -KILL "$job" $left 2>/dev/null; continue
    fi
    # the phase: mid-save when the kill left a save's temporary behind
    phase=training
    [ "$(ntmp "$ck")" -gt "$before" ] && phase=mid-save
    [ "$($py -c 'import sys; print(sum(1 for _ in open(sys.argv[1])))' "$m" 2>/dev/null || echo 0)" = 0 ] && [ $phase = training ] && phase=start-up
    if ! at=$(KILL_FILES=$(rankfiles $l) $py "$d/check.py" "$ck" $(rankdirs $l) 2>&1); then failed=1; t_fail "round $r: $l checkpoints after the kill" "$(echo "$at" | tail -1)"; continue; fi
    if ! got=$($py "$d/same.py" "$d/ref-$l.jsonl" "$m" "$from" 2>&1); then failed=1; t_fail "round $r: $l resumed from $from" "$(echo "$got" | tail -1)"; continue; fi
    kills[$l]=$((${kills[$l]:-0} + 1)); phases[$phase]=$((${phases[$phase]:-0} + 1)); runsof[$what]=$((${runsof[$what]:-0} + 1))
    echo "# round $r: $l from $from, $what SIGKILLed $point ($phase, iteration $got logged): all gone in $took ms, tracker $at"
done
if [ "$failed" = 0 ]; then
    t_pass "$killed SIGKILLs (one ${kills[one]:-0}, tp ${kills[tp]:-0}, pp ${kills[pp]:-0}, dist ${kills[dist]:-0}, async ${kills[async]:-0}; $(for p in "${!phases[@]}"; do printf '%s %s, ' "$p" "${phases[$p]}"; done)$(for w in "${!runsof[@]}"; do printf '%s %s, ' "$w" "${runsof[$w]}"; done)$finished ran to the end): each job gone within 10 s, every final-named checkpoint complete, each resumed run the uninterrupted losses bit for bit"
fi
# each layout finally runs to the end from its last checkpoint: iteration 30 with the uninterrupted losses
for l in one tp pp dist async; do
    ck=$d/ck-$l m=$d/end-$l.jsonl
    from=$(KILL_FILES=$(rankfiles $l) $py "$d/check.py" "$ck" $(rankdirs $l) 2>&1)
    job $l "$ck" "$m"; wait $job
    last=$($py "$d/same.py" "$d/ref-$l.jsonl" "$m" "$from" 2>&1)
    left=$(compgen -G "$ck/*.tmp-*" | head -3)
    [ "$last" = 30 ] && [ -z "$left" ] && t_pass "$l: resumed from $from to the end, the uninterrupted losses bit for bit, no temporary left" \
        || t_fail "$l: resumed from $from to the end" "$last; temporaries: $left $(tail -2 "$m.err")"
done

# A job much longer than the test: the launcher (mpirun, mt-train -n) or one rank SIGKILLed after its
# fifth iteration; the ranks cannot finish on their own, so none may be left 10 s later
for l in tp pp; do
    for what in launcher rank; do
        ck=$d/long-$l-$what m=$ck.jsonl
        base0=$base; base="$base --train-iters 100000"
        job $l "$ck" "$m"; base=$base0
        waitfor "$m" 5
        victim=$job; [ $what = rank ] && victim=$(ranks_of "$ck" | grep -vx "$job" | tail -1)
        kill -KILL "$victim"
        for _ in $(seq 100); do left=$(ranks_of "$ck" | tr '\n' ' '); [ -z "$left" ] && ! kill -0 $job 2>/dev/null && break; sleep 0.1; done
        wait $job 2>/dev/null
        n=$(grep -c '"type":"train"' "$m")
        [ -z "$left" ] && [ "$n" -lt 1000 ] 2>/dev/null && t_pass "$l, a long run: its $what SIGKILLed at iteration 5, no rank left within 10 s (iteration $n logged)" \
            || t_fail "$l, a long run: its $what SIGKILLed" "left: ${left:-none}, logged: $n"
        kill -KILL $left 2>/dev/null
    done
done

# ---- mt-index, mt-shuffle's caches, mt-ckpt-convert --to hf: killed at random points, outputs absent or
# complete (the uninterrupted run's bytes), a rerun the same bytes
$py - "$d/c.jsonl" <<'PYEOF'
import json, random, sys
random.seed(1)
w = ["".join(random.choice("abcdefghij") for _ in range(random.randint(2, 8))) for _ in range(3000)]
with open(sys.argv[1], "w") as f:
    for i in range(3000): f.write(json.dumps({"text": " ".join(random.choice(w) for _ in range(random.randint(20, 200)))}) + "\n")
PYEOF
mt-tokenize --vocab-file "$GPT2_VOCAB" --merge-file "$GPT2_MERGES" "$d/c.jsonl" >"$d/c.toks" || t_fail "mt-tokenize" "corpus"
mkdir -p "$d/ix-ref" && mt-index --quiet --output-prefix "$d/ix-ref/c" "$d/c.toks" || t_fail "mt-index" "uninterrupted"
# outputs DIR REFDIR: every name in DIR that is not a temporary (.NAME.tmp.*, NAME.tmp-*) is REFDIR's file,
# byte for byte; prints how many
outputs() {
    local n=0 f
    for f in "$1"/* "$1"/.[!.]*; do
        [ -e "$f" ] || continue
        case $(basename "$f") in .*.tmp.*|*.tmp-*|.mt-*.lock) continue ;; esac
        if [ -d "$f" ]; then diff -r -x '*.tmp*' "$f" "$2/$(basename "$f")" >/dev/null || { echo "$f differs"; return 1; }
        else cmp -s "$f" "$2/$(basename "$f")" || { echo "$f is not complete"; return 1; }; fi
        n=$((n + 1))
    done
    echo $n
}
# tool NAME ROUNDS REFDIR OUTDIR MS CMD...: ROUNDS times CMD (writing into OUTDIR) is SIGKILLed 0 to MS ms
# after its first temporary appears (one time in four: after its start), the outputs are checked, and CMD
# run again to the end must give REFDIR
tool() {
    local name=$1 n=$2 ref=$3 out=$4 hi=$5 ms got partial=0 whole=0 _; shift 5
    for _ in $(seq "$n"); do
        rm -rf "$out"; [ "$name" = "mt-ckpt-convert" ] || mkdir -p "$out"
        ms=$((RANDOM % hi))
        # in a process group of its own, so that the kill reaches the tool itself when CMD is a shell that
        # runs it (a killed wrapper alone would leave the tool writing on beside the checks and the rerun)
        set -m; "$@" >/dev/null 2>&1 & local p=$!; set +m
        if [ $((RANDOM % 4)) != 0 ]; then
            for _ in $(seq 20000); do compgen -G "$out/.*tmp*" >/dev/null || compgen -G "$out*tmp*" >/dev/null && break; kill -0 $p 2>/dev/null || break; done
        fi
        sleep "$(printf '%d.%03d' $((ms / 1000)) $((ms % 1000)))"; kill -KILL -- -$p 2>/dev/null; wait $p 2>/dev/null
        if ! got=$(outputs "$out" "$ref"); then t_fail "$name killed at $ms ms" "$got"; return; fi
        [ "$got" = 0 ] && partial=$((partial + 1)) || whole=$((whole + 1))
        [ "$name" = "mt-ckpt-convert" ] && [ "$got" != 0 ] && continue   # a complete --out stays as it is
        [ "$name" = "mt-ckpt-convert" ] && [ -d "$out" ] && { t_fail "$name killed at $ms ms" "--out left behind, empty"; return; }
        if ! "$@" >/dev/null 2>"$d/tool.err"; then t_fail "$name rerun after a kill at $ms ms" "$(head -c 300 "$d/tool.err")"; return; fi
        if ! diff -r -x '*.tmp*' -x '.mt-*.lock' "$ref" "$out" >/dev/null; then t_fail "$name rerun after a kill at $ms ms" "differs from the uninterrupted output"; return; fi
    done
    t_pass "$name SIGKILLed $n times ($partial before any output, $whole with some or all outputs complete): never a partial file under a final name, each rerun the same bytes"
}
slow() { $py -c 'import sys, time
b = open(sys.argv[1], "rb").read()
for i in range(0, len(b), 65536): sys.stdout.buffer.write(b[i:i + 65536]); sys.stdout.flush(); time.sleep(0.01)' "$d/c.toks"; }
# mt-index fed at about 6 MB/s (half a second): killed anywhere from start-up to just after the end
ixrun() { slow | mt-index --quiet --output-prefix "$d/ix/c"; }
mrounds=$(( rounds / 3 + 1 ))
tool mt-index "$mrounds" "$d/ix-ref" "$d/ix" 600 bash -c "$(declare -f slow ixrun); py=$py d=$d; ixrun"
# mt-shuffle: caches of 4000000 samples (48 MB)
shuf() { mt-shuffle --data-path "$d/data" --split 90,5,5 --seq-length 8 --train-samples 4000000 --global-batch-size 8 --eval-iters 2 --seed 5 --data-cache-path "$1"; }
t0=$(date +%s%N); shuf "$d/sh-ref" >/dev/null 2>&1 || t_fail "mt-shuffle" "uninterrupted"; t1=$(( ($(date +%s%N) - t0) / 2000000 + 5 ))   # half the run
tool mt-shuffle "$mrounds" "$d/sh-ref" "$d/sh" "$t1" bash -c "$(declare -f shuf); d=$d; shuf $d/sh"
# mt-ckpt-convert --to hf of a 4-layer, 128-wide GPT-2 vocabulary model (27 MB)
mt-train --num-layers 4 --hidden-size 128 --num-attention-heads 4 --seq-length 32 --max-position-embeddings 32 \
    --vocab-file "$GPT2_VOCAB" --merge-file "$GPT2_MERGES" --micro-batch-size 2 --global-batch-size 2 --train-iters 1 --lr 1e-3 \
    --eval-iters 0 --data-path "$d/data" --data-cache-path "$d/cache" --save "$d/big" >/dev/null 2>&1 || t_fail "mt-train" "the model to convert"
t0=$(date +%s%N); mt-ckpt-convert --load "$d/big" --to hf --out "$d/hf-ref" 2>"$d/cv.err" || t_fail "mt-ckpt-convert" "$(cat "$d/cv.err")"
t1=$(( ($(date +%s%N) - t0) / 4000000 + 2 ))   # a quarter of the run
mkdir -p "$d/hf-refdir"; cp -r "$d/hf-ref" "$d/hf-refdir/hf"
mkdir -p "$d/hfo"
tool mt-ckpt-convert "$mrounds" "$d/hf-refdir/hf" "$d/hfo/hf" "$t1" mt-ckpt-convert --load "$d/big" --to hf --out "$d/hfo/hf"

# ---- a full disk: a file-size limit (SIGXFSZ ignored, so a write fails with EFBIG)
full() { local kb=$1; shift; (ulimit -f "$kb"; trap '' XFSZ; exec "$@"); }
mkdir -p "$d/fx"; cp "$d/ix-ref/"* "$d/fx/"
if full 100 mt-index --quiet --output-prefix "$d/fx/c" "$d/c.toks" 2>"$d/fx.err"; then t_fail "mt-index, a full disk" "exit 0"
elif [ "$(wc -l <"$d/fx.err")" = 1 ] && grep -q "^mt-index: $d/fx/c_text_document\.bin: .*File too large$" "$d/fx.err" &&
    [ "$(outputs "$d/fx" "$d/ix-ref")" = 2 ] && ! compgen -G "$d/fx/*tmp*" >/dev/null && ! compgen -G "$d/fx/.*tmp*" >/dev/null; then
    t_pass "mt-index, a full disk: one line ($(cat "$d/fx.err")), the previous dataset intact, no temporary left"
else t_fail "mt-index, a full disk" "$(head -c 300 "$d/fx.err"); $(ls -A "$d/fx")"; fi
# shellcheck disable=SC2086
mt-train $base --save "$d/fs" --exit-interval 10 >/dev/null 2>&1; cp -r "$d/fs" "$d/fs0"
# shellcheck disable=SC2086
if full 40 mt-train $base --load "$d/fs" --save "$d/fs" 2>"$d/fs.err" >/dev/null; then t_fail "mt-train --save, a full disk" "exit 0"
elif [ "$(grep -c . "$d/fs.err")" = 1 ] && grep -q "^mt-train: $d/fs/iter_0000012\.tmp-[a-z]*-[0-9]*/mp_rank_00/model\.safetensors: .*File too large$" "$d/fs.err" &&
    diff -r -x '.mt-train.lock' "$d/fs0" "$d/fs" >/dev/null; then
    t_pass "mt-train --save, a full disk: one line ($(cat "$d/fs.err")), the checkpoints and tracker as they were"
else t_fail "mt-train --save, a full disk" "$(head -c 300 "$d/fs.err"); $(ls -A "$d/fs")"; fi
