# lib.sh: helpers for pipeline tests (sourced). Each check prints "ok - <file>: <name>" or
# "not ok - <file>: <name>: <why>"; tests/run counts them. Scratch files go under $T_TMP, never a fixed path,
# so that tests/run can run files in parallel. Programs are on PATH from build/bin.
#   t_ok NAME CMD...          CMD exits 0
#   t_fails NAME CMD...       CMD exits non-zero
#   t_cmp NAME EXPECTED GOT   files equal (a diff is shown when not)
#   t_grep NAME PATTERN FILE  FILE has a line matching the extended regex PATTERN
#   t_skip NAME WHY
#   t_same_losses NAME A B [TOL]   two runs' metrics files agree (see below)
set -u
T_FILE=$(basename "$0")
T_TMP=$(mktemp -d "${TMPDIR:-/tmp}/mt-test.XXXXXX")
T_FAILED=0
# The scratch directory goes when the script ends, unless a check failed or the script exited non-zero:
# then it stays and its path is printed. Under tests/run (MT_TEST_KEEP_TMP=1) the runner decides, also
# for failures reported by a script's own Python.
t_cleanup() {
    local rc=$?
    if [ -n "${MT_TEST_KEEP_TMP:-}" ]; then return; fi
    if [ "$T_FAILED" != 0 ] || [ "$rc" != 0 ]; then echo "# scratch kept: $T_TMP" >&2; else rm -rf "$T_TMP"; fi
}
trap t_cleanup EXIT
T_TOP=${MT_TOP:-$(cd "$(dirname "$0")/../.." && pwd)}
PATH="$T_TOP/${MT_BUILD:-build}/bin:$PATH"
export PATH
# mt-train, mt-eval and mt-generate set OpenMP's wait policy by executing themselves again when the
# environment sets none (util/ompenv.h): a second start of a program that links the CUDA libraries, about
# 0.1 s of CPU each time, and the tests start them many times (every rank under mpirun). The tests set the
# policy mt-train would choose; train.sh checks the default and the re-execution itself (env -u).
[ -n "${OMP_WAIT_POLICY+set}${GOMP_SPINCOUNT+set}" ] || export GOMP_SPINCOUNT=1000
GPT2_VOCAB=$T_TOP/share/gpt2/vocab.json
GPT2_MERGES=$T_TOP/share/gpt2/merges.txt

t_pass() { echo "ok - $T_FILE: $1"; }
t_fail() { T_FAILED=1; echo "not ok - $T_FILE: $1: $2"; }
t_skip() { echo "skip - $T_FILE: $1: $2"; }
t_ok() {
    local name=$1; shift
    if "$@" >"$T_TMP/out" 2>"$T_TMP/err"; then t_pass "$name"
    else t_fail "$name" "exit $? from: $* :: $(head -c 300 "$T_TMP/err")"; fi
}
t_fails() {
    local name=$1; shift
    if "$@" >"$T_TMP/out" 2>"$T_TMP/err"; then t_fail "$name" "expected failure, got exit 0 from: $*"
    else t_pass "$name"; fi
}
t_cmp() {
    if cmp -s "$2" "$3"; then t_pass "$1"
    else t_fail "$1" "files differ: $2 $3"; diff <(od -An -tx1 -v "$2" | head -c 2000) <(od -An -tx1 -v "$3" | head -c 2000) | head -20 >&2; fi
}
t_grep() {
    if grep -Eq -- "$2" "$3"; then t_pass "$1"
    else t_fail "$1" "no line matching /$2/ in $3: $(head -c 300 "$3")"; fi
}
# t_wait_line FILE PATTERN [TENTHS]: wait until FILE has a line matching PATTERN (default at most 300 s:
# an event, not a time; the bound only ends a test whose event never comes, also on a loaded machine)
t_wait_line() {
    local _
    for _ in $(seq "${3:-3000}"); do grep -q -- "$2" "$1" 2>/dev/null && return 0; sleep 0.1; done
    return 1
}
# t_sigterm_stop NAME CKPT RCFILE ERRFILE: what a two-rank mt-train --exit-signal-handler run stopped by
# SIGTERM must show: exit status 0 in RCFILE, the tracker of CKPT naming a saved iteration, and both
# ranks' "exiting program after receiving SIGTERM" in ERRFILE
t_sigterm_stop() {
    local it
    it=$(cat "$2/latest_checkpointed_iteration.txt" 2>/dev/null)
    if [ "$(cat "$3" 2>/dev/null)" = 0 ] && [ -n "$it" ] && [ -d "$2/iter_$(printf %07d "$it")" ] &&
        [ "$(grep -c 'exiting program after receiving SIGTERM' "$4")" = 2 ]; then
        t_pass "$1: both ranks stop at iteration $it, one checkpoint, exit 0"
    else t_fail "$1" "rc $(cat "$3" 2>/dev/null), tracker '$it': $(tail -c 300 "$4")"; fi
}
# t_has_sim: whether this build's test_kernels runs on the sim backend (a build without CUDA headers has no
# SIMT simulator)
t_has_sim() {
    MT_TEST_BACKEND=sim "$T_TOP/${MT_BUILD:-build}/tests/test_kernels" 2>&1 | grep -q '^ok - test_kernels: matmul_fwd'
}
# t_kernel_dumps FLAG: test_kernels FLAG DIR on cpu, and on sim where built (fp32), each into $T_TMP/BACKEND;
# sets T_DUMPED to the backends whose dump succeeded (a failed dump fails the test)
t_kernel_dumps() {
    local be bin=$T_TOP/${MT_BUILD:-build}/tests/test_kernels backends=cpu
    T_DUMPED=""
    [ -x "$bin" ] || { t_fail "$1" "$bin not built"; return; }
    if t_has_sim; then backends="cpu sim"; fi
    for be in $backends; do
        mkdir -p "$T_TMP/$be"
        if MT_TEST_BACKEND=$be MT_TEST_DTYPE=fp32 "$bin" "$1" "$T_TMP/$be" >"$T_TMP/$be.out" 2>&1; then
            T_DUMPED="$T_DUMPED $be"
        else t_fail "$be: dump" "test_kernels $1 failed: $(head -c 300 "$T_TMP/$be.out")"; fi
    done
}
# t_sim_setup THREADS: the start of a test of mt-train on the sim backend: the script ends with a skip
# where this build has no SIMT simulator; else walk_data's corpus of 3 x 200 documents is written to
# $T_TMP/data (a --data-path prefix) and the CPU side runs THREADS OpenMP threads.
t_sim_setup() {
    if ! t_has_sim; then
        t_skip "sim backend" "this build has no SIMT simulator (no CUDA headers: make deps)"
        exit 0
    fi
    PYTHONPATH=$T_TOP/tests/oracle /usr/bin/python3 "$T_TOP/tests/oracle/walk_data.py" "$T_TMP/data" 3 200
    export OMP_NUM_THREADS=$1
}
# t_mpi_env: CPU ranks one thread each under mpirun on a shared machine (yield while waiting), scratch
# under T_TMP; then mpi N CMD... runs N ranks (180 s at most).
t_mpi_env() {
    export OMP_NUM_THREADS=1 OMPI_MCA_mpi_yield_when_idle=1 OMPI_MCA_btl_base_warn_component_unused=0 TMPDIR=$T_TMP
    export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
    T_MPI_ROOT=""; [ "$(id -u)" = 0 ] && T_MPI_ROOT=--allow-run-as-root
}
mpi() { local n=$1; shift; timeout -k 5 180 mpirun $T_MPI_ROOT --oversubscribe -np "$n" "$@"; }
# t_moe_walk: walk_data's corpus of 7 x 300 documents in $T_TMP/data, one OpenMP thread, and in T_MOE the
# flags of the small LLaMA-style mixture of experts the MoE training tests share (4 layers, 3 of them MoE
# with 4 experts, top 2, a gated shared expert, the aux and z losses; 10 iterations of 8 sequences of 32,
# dropout on, validation at 5 and 10) over it, its index cache built.
t_moe_walk() {
    PYTHONPATH=$T_TOP/tests/oracle /usr/bin/python3 "$T_TOP/tests/oracle/walk_data.py" "$T_TMP/data" 7 300
    export OMP_NUM_THREADS=1
    T_MOE="--num-layers 4 --hidden-size 32 --num-attention-heads 4 --group-query-attention --num-query-groups 2
      --ffn-hidden-size 48 --normalization RMSNorm --position-embedding-type rope --swiglu
      --untie-embeddings-and-output-weights --disable-bias-linear --seq-length 32 --max-position-embeddings 32
      --tokenizer-type NullTokenizer --vocab-size 60 --make-vocab-size-divisible-by 16
      --micro-batch-size 2 --global-batch-size 8 --train-iters 10 --lr 3e-3 --min-lr 3e-4 --lr-decay-style cosine
      --lr-warmup-iters 3 --weight-decay 0.1 --clip-grad 1.0 --log-interval 1 --eval-interval 5 --eval-iters 2
      --split 90,5,5 --seed 77 --data-path $T_TMP/data --data-cache-path $T_TMP/cache
      --num-experts 4 --moe-router-topk 2 --moe-ffn-hidden-size 24 --moe-layer-freq [1,0,1,1]
      --moe-aux-loss-coeff 1e-2 --moe-z-loss-coeff 1e-3 --moe-shared-expert-intermediate-size 16
      --moe-shared-expert-gate --log-params-norm"
    # shellcheck disable=SC2086
    (set -f; mt-train $T_MOE --train-iters 1 --eval-iters 0 >/dev/null 2>&1)
}
# t_moe_check NAME JSONL TOL [FIRST [REF]] (after t_moe_walk): the train iterations FIRST..10 (default 1) of
# JSONL have the lm_loss, grad_norm, load_balancing_loss (or seq_load_balancing_loss), z_loss and params_norm
# (where both log it) of REF
# (default $T_TMP/ref.jsonl, the one-rank run) within TOL relative (0: the same bits), and with FIRST 1 the
# validation losses too
t_moe_check() {
    if /usr/bin/python3 - "${5:-$T_TMP/ref.jsonl}" "$2" "$3" "${4:-1}" >"$T_TMP/cmp.out" 2>&1 <<'PYEOF'
import json, sys
keys = ("lm_loss", "grad_norm", "load_balancing_loss", "z_loss", "params_norm")
def load(p):
    rows = [json.loads(l) for l in open(p)]
    return ({r["iteration"]: [r.get(k, r.get("seq_" + k, float("nan"))) for k in keys] for r in rows if r["type"] == "train"},
            [(r["type"], r["iteration"], r["lm_loss"]) for r in rows if r["type"] != "train"])
(a, ea), (b, eb) = load(sys.argv[1]), load(sys.argv[2])
tol, first = float(sys.argv[3]), int(sys.argv[4])
assert sorted(b) == list(range(first, 11)), "iterations %s" % sorted(b)
w = max(abs(x - y) / abs(x) for i in b for x, y in zip(a[i], b[i]) if x == x and y == y)
assert all(y == y for i in b for y in b[i][:4]), "a loss or norm missing"
assert w <= tol, "worst relative difference %g" % w
if first == 1:
    assert len(ea) == len(eb) >= 3, (ea, eb)
    for x, y in zip(ea, eb):
        assert x[:2] == y[:2] and abs(x[2] - y[2]) <= tol * abs(x[2]), (x, y)
print("worst %.2g" % w)
PYEOF
    then t_pass "$1 ($(cat "$T_TMP/cmp.out"))"
    else t_fail "$1" "$(tail -2 "$T_TMP/cmp.out")"; fi
}
# t_moe_layout LABEL STEM N REF FLAGS...: mt-train on N ranks with FLAGS (metrics in $T_TMP/STEM.jsonl, its
# output in STEM.log and STEM.err) gives REF's losses and norms to 1e-5 ("LABEL: the one-rank losses")
t_moe_layout() {
    local label=$1 stem=$T_TMP/$2 n=$3 ref=$4
    shift 4
    if mt-train -n "$n" "$@" --metrics-file "$stem.jsonl" >"$stem.log" 2>"$stem.err"; then
        t_moe_check "$label: the one-rank losses" "$stem.jsonl" 1e-5 1 "$ref"
    else t_fail "$label" "$(tail -3 "$stem.err")"; fi
}
# t_plan_as_run NAME PLAN RUN: the dry run's (PLAN, mt-train --dry-run's output) rank 0 parameters and memory
# line are the run's (RUN, its log)
t_plan_mem() { grep -E "$2" "$1" | head -1 | sed -E 's/.*(parameters: [^|]*\| gradients: [^|]*\| optimizer: [^|]*\| activations: [^|]*\| total: [0-9.]*).*/\1/'; }
t_plan_as_run() {
    local pat a b
    for pat in 'number of parameters on' 'memory \(MB\)'; do
        a=$(t_plan_mem "$2" "$pat") b=$(t_plan_mem "$3" "$pat")
        if [ -n "$a" ] && [ "$a" = "$b" ]; then t_pass "$1: $pat as the run's ($a)"
        else t_fail "$1: $pat" "plan '$a', run '$b'"; fi
    done
}
# t_mpi_walk: the start of a test of mt-train on CPU ranks: mpirun present (else a failure, and the script
# ends), t_mpi_env, walk_data's corpus of 7 x 300 documents in $T_TMP/data, and in T_WALK the flags of the
# small model the training tests share (2 layers, hidden size 32, 4 heads, sequences of 32, 20 iterations
# of 8 sequences, a cosine schedule, dropout on, validation at 10 and 20) over it, its index cache built.
t_mpi_walk() {
    if ! command -v mpirun >/dev/null; then t_fail "mpirun" "openmpi-bin is not installed (make deps)"; exit 1; fi
    t_mpi_env
    PYTHONPATH=$T_TOP/tests/oracle /usr/bin/python3 "$T_TOP/tests/oracle/walk_data.py" "$T_TMP/data" 7 300
    T_WALK="--num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 32 --max-position-embeddings 32
      --tokenizer-type NullTokenizer --vocab-size 60 --make-vocab-size-divisible-by 16
      --micro-batch-size 2 --global-batch-size 8 --train-iters 20 --lr 3e-3 --min-lr 3e-4 --lr-decay-style cosine
      --lr-warmup-iters 5 --weight-decay 0.1 --clip-grad 1.0 --log-interval 1 --eval-interval 10 --eval-iters 2
      --split 90,5,5 --seed 77 --data-path $T_TMP/data --data-cache-path $T_TMP/cache"
    # shellcheck disable=SC2086
    mt-train $T_WALK --train-iters 1 --eval-iters 0 >/dev/null 2>&1
}
# t_resumed_losses NAME REF.jsonl NEW.jsonl [TOL]: NEW (a run resumed at iteration 10) holds iterations
# 11..20 with REF's lm_loss and grad_norm within TOL relative (default 1e-5; 0: bit for bit)
t_resumed_losses() {
    if /usr/bin/python3 - "$2" "$3" "${4:-1e-5}" >"$T_TMP/cmp.out" 2>&1 <<'PYEOF'
import json, sys
load = lambda p: {r["iteration"]: (r["lm_loss"], r["grad_norm"]) for r in map(json.loads, open(p)) if r["type"] == "train"}
a, b = load(sys.argv[1]), load(sys.argv[2])
assert sorted(b) == list(range(11, 21)), "iterations %s" % sorted(b)
w, tol = max(abs(x - y) / abs(x) for i in b for x, y in zip(a[i], b[i])), float(sys.argv[3])
assert w < tol or w == tol == 0, "worst relative difference %g" % w
print("worst %.2g" % w)
PYEOF
    then t_pass "$1 ($(cat "$T_TMP/cmp.out"))"; else t_fail "$1" "$(tail -2 "$T_TMP/cmp.out")"; fi
}
# t_same_losses NAME A.jsonl B.jsonl [TOL]: two --metrics-file logs of 20 iterations: every train
# iteration's lm_loss and grad_norm within TOL (default 1e-5; 0: bit for bit) relative, and the validation
# losses too
# t_job_done NAME RC T0 DIR: after a multi-rank job started at T0 (date +%s.%N) ended with status RC, its
# status in DIR/NAME.rc and its seconds in DIR/NAME.s; then checks that no rank of it is left running
# (every rank's command line holds DIR)
t_job_done() {
    local name=$1 rc=$2 t0=$3 dir=$4 t1
    echo "$rc" >"$dir/$name.rc"
    t1=$(date +%s.%N)
    awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f\n", b - a }' >"$dir/$name.s"
    sleep 0.5
    if pgrep -f "mt-train .*$dir/" >"$dir/$name.left"; then t_fail "$name: no rank left running" "$(cat "$dir/$name.left")"
    else t_pass "$name: no rank left running"; fi
}
t_same_losses() {
    if /usr/bin/python3 - "$2" "$3" "${4:-1e-5}" >"$T_TMP/cmp.out" 2>&1 <<'PYEOF'
import json, sys
def load(p):
    rows = [json.loads(l) for l in open(p)]
    tr = {r["iteration"]: (r["lm_loss"], r["grad_norm"]) for r in rows if r["type"] == "train"}
    ev = [(r["type"], r["iteration"], r["lm_loss"]) for r in rows if r["type"] != "train"]
    return tr, ev
(a, ea), (b, eb) = load(sys.argv[1]), load(sys.argv[2])
tol = float(sys.argv[3])
assert sorted(a) == list(range(1, 21)), "iterations %s" % sorted(a)
assert sorted(b) == sorted(a), "iterations %s vs %s" % (sorted(b), sorted(a))
worst = 0
for i in a:
    for x, y in zip(a[i], b[i]):
        worst = max(worst, abs(x - y) / abs(x))
assert worst < tol or worst == tol == 0, "worst relative difference %g" % worst
assert len(ea) == len(eb) and len(ea) >= 3, (ea, eb)
for x, y in zip(ea, eb):
    assert x[:2] == y[:2] and (abs(x[2] - y[2]) / abs(x[2]) < tol or x[2] == y[2] and tol == 0), (x, y)
print("worst %.2g" % worst)
PYEOF
    then t_pass "$1 ($(cat "$T_TMP/cmp.out"))"; else t_fail "$1" "$(tail -3 "$T_TMP/cmp.out")"; fi
}
# t_serve_model DIR: the tiny GPT-2-vocabulary model the mt-serve tests ask (2 layers, 48 positions, 30
# iterations on short Python functions), trained into DIR/ck; 1 with the reason on stdout when it cannot.
t_serve_model() {
    /usr/bin/python3 -c '
import json
for i in range(80):
    print(json.dumps({"text": "def f%d(x, y=%d):\n    return x * y + %d\n" % (i, i % 7, i * i)}))' >"$1/train.jsonl"
    mt-tokenize --vocab-file "$GPT2_VOCAB" --merge-file "$GPT2_MERGES" --append-eod --input "$1/train.jsonl" \
        | mt-index --output-prefix "$1/data" 2>"$1/index.err" || { cat "$1/index.err"; return 1; }
    mt-train --num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 32 --max-position-embeddings 48 \
        --micro-batch-size 4 --global-batch-size 8 --train-iters 30 --lr 1e-2 --log-interval 10 --eval-iters 0 \
        --init-method-std 0.1 --split 100,0,0 --seed 3 --vocab-file "$GPT2_VOCAB" --merge-file "$GPT2_MERGES" \
        --data-path "$1/data_text_document" --data-cache-path "$1/cache" --save "$1/ck" >"$1/train.log" 2>"$1/train.err" \
        || { tail -2 "$1/train.err"; return 1; }
}
# t_serve_start ERRFILE ARGS...: starts mt-serve ARGS --port 0 in the background, its stderr in ERRFILE;
# once it listens, T_SERVE_PID is its pid and T_SERVE_URL its http://127.0.0.1:PORT; 1 when it does not
# start within 120 s.
t_serve_start() {
    local err=$1 _
    shift
    mt-serve "$@" --port 0 2>"$err" &
    T_SERVE_PID=$!
    for _ in $(seq 1200); do
        T_SERVE_URL=$(sed -n 's|.* on \(http://127.0.0.1:[0-9][0-9]*\)$|\1|p' "$err" | head -1)
        [ -n "$T_SERVE_URL" ] && return 0
        kill -0 $T_SERVE_PID 2>/dev/null || return 1
        sleep 0.1
    done
    return 1
}
# t_json_check NAME PYTHON ARGS...: a check of a JSON file: PYTHON (statements over r, the parsed first
# ARG, and a, the ARGS) raises nothing; else its last line is the failure's reason
t_json_check() {
    local name=$1 code=$2; shift 2
    if /usr/bin/python3 - "$@" >"$T_TMP/check.out" 2>&1 <<PYEOF
import json, sys
a = sys.argv[1:]
r = json.load(open(a[0], encoding="utf-8"))
$code
PYEOF
    then t_pass "$name"; else t_fail "$name" "$(tail -1 "$T_TMP/check.out" | head -c 600)"; fi
}
