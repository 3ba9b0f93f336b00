#!/usr/bin/env bash
# dist-optim.sh: the distributed optimizer at Megatron's memory in bf16 and fp16 runs: each data-parallel
# rank holds the fp32 master of its own shard only (6 + 12/DP bytes per parameter), and training is the
# plain optimizer's to the bit. On CPU ranks under mpirun: DP=2 and DP=2 x TP=2 with
# --use-distributed-optimizer give every lm loss (train and validation) of the same run without it,
# bit for bit, and its grad and params norms to 1e-12 (the sums of squares are added per shard, in
# another order); the memory line's parameters (the bf16 working copy plus the biases' and norms' fp32
# values) and optimizer state (master and two moments of the shard) equal what the test computes from
# the checkpoint's tensors; the parameter all-gather sends the working copy's 2 bytes per parameter,
# not 4; a checkpoint saved from the shards resumes bit for bit.
. "$(dirname "$0")/../lib.sh"
py=/usr/bin/python3
d=$T_TMP
if ! command -v mpirun >/dev/null; then t_fail "mpirun" "openmpi-bin is not installed (make deps)"; exit 1; fi
t_mpi_env

PYTHONPATH=$T_TOP/tests/oracle $py "$T_TOP/tests/oracle/walk_data.py" "$d/data" 7 300
args="--num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 32 --max-position-embeddings 32
      --tokenizer-type NullTokenizer --vocab-size 60 --make-vocab-size-divisible-by 16
      --micro-batch-size 2 --global-batch-size 8 --train-iters 20 --lr 3e-3 --min-lr 3e-4 --lr-decay-style cosine
      --lr-warmup-iters 5 --weight-decay 0.1 --clip-grad 1.0 --log-interval 1 --eval-interval 10 --eval-iters 2
      --split 90,5,5 --seed 77 --log-params-norm --data-path $d/data --data-cache-path $d/cache"
# shellcheck disable=SC2086
mt-train $args --train-iters 1 --eval-iters 0 >/dev/null 2>&1   # the index cache, once

# same NAME A.jsonl B.jsonl: every lm loss equal, grad and params norms within 1e-12 relative (fp16's
# skipped iterations have neither), at least 10 iterations updated
same() {
    if $py - "$2" "$3" >"$d/same.out" 2>&1 <<'PYEOF'
import json, sys
def load(p):
    return [(r["type"], r["iteration"], r.get("lm_loss"), r.get("grad_norm"), r.get("params_norm"))
            for r in map(json.loads, open(p))]
a, b = load(sys.argv[1]), load(sys.argv[2])
assert len(a) == len(b) >= 20, (len(a), len(b))
assert sum(x[3] is not None for x in a) >= 10, "fewer than 10 updates"
worst = 0
for x, y in zip(a, b):
    assert x[:3] == y[:3], ("loss", x, y)
    for u, v in zip(x[3:], y[3:]):
        if u is not None: worst = max(worst, abs(u - v) / abs(u))
assert worst < 1e-12, worst
print("%d losses equal, norms within %.1g" % (len(a), worst))
PYEOF
    then t_pass "$1 ($(cat "$d/same.out"))"; else t_fail "$1" "$(tail -2 "$d/same.out")"; fi
}

# fp16 with a dynamic loss scale from 2^16: its first iterations overflow and are skipped, then it trains
for c in "2 --bf16" "2 --fp16 --initial-loss-scale 65536" "4 --bf16 --tensor-model-parallel-size 2 --sequence-parallel"; do
    set -- $c
    n=$1; shift
    tag=$(echo "$n$*" | tr -dc 'a-z0-9')
    # shellcheck disable=SC2086
    mpi "$n" mt-train $args "$@" --metrics-file "$d/p$tag.jsonl" >"$d/p$tag.log" 2>"$d/p$tag.err" ||
        t_fail "$n ranks $*: plain optimizer" "$(tail -3 "$d/p$tag.err")"
    # shellcheck disable=SC2086
    if mpi "$n" mt-train $args "$@" --use-distributed-optimizer --metrics-file "$d/o$tag.jsonl" --save "$d/c$tag" \
        --save-interval 10 >"$d/o$tag.log" 2>"$d/o$tag.err"; then
        same "$n ranks $* --use-distributed-optimizer: the plain optimizer's run" "$d/p$tag.jsonl" "$d/o$tag.jsonl"
    else t_fail "$n ranks $* --use-distributed-optimizer" "$(tail -3 "$d/o$tag.err")"; fi
done

# a checkpoint of the sharded master (DP=2 bf16), resumed at 10: the uninterrupted run to the bit
rm -rf "$d/r" && cp -r "$d/c2bf16" "$d/r" && printf 10 >"$d/r/latest_checkpointed_iteration.txt" && rm -rf "$d/r/iter_0000020"
# shellcheck disable=SC2086
if mpi 2 mt-train $args --bf16 --use-distributed-optimizer --metrics-file "$d/r.jsonl" --load "$d/r" --save "$d/r" \
    >"$d/r.log" 2>"$d/r.err"; then t_resumed_losses "DP=2 bf16 sharded master resumed at 10: the same losses" "$d/o2bf16.jsonl" "$d/r.jsonl" 1e-300
else t_fail "DP=2 bf16 sharded master resume" "$(tail -3 "$d/r.err")"; fi

# the memory line at DP=2 bf16, in bytes computed here from the checkpoint's tensors: parameters 2 per
# parameter (the working copy) + 4 per element of a 1-D tensor (biases, norm weights: kept in fp32);
# optimizer 12 per parameter of the shard (rank 0's: the first half, rounded up); gradients 4 per
# parameter. The parameter all-gather: rank 0 sends its shard's working copy (2 bytes each) and its
# 1-D values; the gradients' reduce-scatter the other half's 4 bytes each; plus two doubles (the loss
# sums and the grad norm's squares, 8 bytes each... as the line counts them): bytes sent below
# 4 (n/2) + 2 (n/2) + 4 k/2 + 64, where an fp32 all-gather would send 4 (n/2) more.
big="${args/--hidden-size 32/--hidden-size 128} --train-iters 1 --lr-warmup-iters 0 --eval-iters 0 --bf16"
# shellcheck disable=SC2086
mpi 2 mt-train $big --use-distributed-optimizer --save "$d/mem" --save-interval 1 >"$d/mem.log" 2>"$d/mem.err" ||
    t_fail "DP=2 bf16 memory run" "$(tail -3 "$d/mem.err")"
if $py - "$d/mem.log" "$d/mem/iter_0000001/mp_rank_00/model.safetensors" >"$d/mem.out" 2>&1 <<'PYEOF'
import json, re, struct, sys
log = open(sys.argv[1]).read()
f = open(sys.argv[2], "rb")
hdr = json.loads(f.read(struct.unpack("<Q", f.read(8))[0]))
n = k = 0
for name, t in hdr.items():
    if name == "__metadata__": continue
    size = 1
    for s in t["shape"]: size *= s
    n += size
    if len(t["shape"]) == 1: k += size
m = re.search(r"memory \(MB\) \| parameters: ([\d.]+) \| gradients: ([\d.]+) \| optimizer: ([\d.]+) \|", log)
got = [float(x) for x in m.groups()]
shard = (n + 1) // 2
want = [(2 * n + 4 * k) / 2**20, 4 * n / 2**20, 12 * shard / 2**20]
assert all(abs(g - w) <= 0.05 for g, w in zip(got, want)), (got, want)
sent = int(re.search(r"data-parallel communication per iteration \| bytes sent: (\d+)", log).group(1))
half = n - shard
assert 4 * half + 2 * shard <= sent <= 4 * half + 2 * shard + 4 * k + 64, (sent, n, k)
print("%d parameters, %d in 1-D tensors: parameters %.1f, gradients %.1f, optimizer %.1f MB; %d bytes sent"
      % (n, k, got[0], got[1], got[2], sent))
PYEOF
then t_pass "DP=2 bf16 distributed optimizer: memory and traffic per rank as computed ($(cat "$d/mem.out"))"
else t_fail "DP=2 bf16 distributed optimizer memory" "$(tail -2 "$d/mem.out")"; fi
t_cleanup
