#!/usr/bin/env bash
# train-sim.sh: a few training steps of a tiny GPT on the sim backend (the CUDA kernels under the SIMT
# simulator, MT_DEVICE=sim) give the cpu backend's losses: every logged lm loss and the validation and
# test losses to 1e-5 relative (fp32), the grad norms to their printed digits; mt-eval of the saved
# checkpoint gives the same loss on both, and mt-generate the same greedy tokens (the KV-cache path).
# Dropout is on (Megatron's default 0.1), so the two backends must also draw the same masks.
. "$(dirname "$0")/../lib.sh"
py=/usr/bin/python3
d=$T_TMP
if ! MT_TEST_BACKEND=sim "$T_TOP/${MT_BUILD:-build}/tests/test_kernels" 2>&1 | grep -q '^ok - test_kernels: matmul_fwd'; then
    t_skip "sim backend" "this build has no SIMT simulator (no CUDA headers)"
    exit 0
fi
PYTHONPATH=$T_TOP/tests/oracle $py "$T_TOP/tests/oracle/walk_data.py" "$d/data" 3 200
export OMP_NUM_THREADS=2
args="--num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 24 --max-position-embeddings 32
      --tokenizer-type NullTokenizer --vocab-size 60 --make-vocab-size-divisible-by 16
      --micro-batch-size 3 --global-batch-size 6 --train-iters 6 --lr 3e-3 --lr-decay-style cosine
      --lr-warmup-iters 2 --weight-decay 0.1 --clip-grad 1.0 --log-interval 1 --eval-interval 3 --eval-iters 1
      --split 90,5,5 --seed 5 --data-path $d/data --data-cache-path $d/cache"
# shellcheck disable=SC2086
mt-train $args --device cpu --save "$d/cpu" --save-interval 6 >"$d/cpu.log" 2>"$d/cpu.err" \
    || t_fail "cpu run" "$(tail -3 "$d/cpu.err")"
# shellcheck disable=SC2086
MT_DEVICE=sim mt-train $args --save "$d/sim" --save-interval 6 >"$d/sim.log" 2>"$d/sim.err" \
    || t_fail "sim run" "$(tail -3 "$d/sim.err")"
field() { grep -oE "$2: +[-0-9.E+]+" "$1" | sed -E 's/.*: +//'; }
compare() {   # name, field regex, tolerance (relative; 0: exact text)
    field "$d/cpu.log" "$2" >"$d/a"
    field "$d/sim.log" "$2" >"$d/b"
    local n
    n=$(wc -l <"$d/a")
    if [ "$n" -gt 0 ] && [ "$n" = "$(wc -l <"$d/b")" ] && paste "$d/a" "$d/b" | awk -v t="$3" '
        { d = $1 - $2; if (d < 0) d = -d; m = $1 < 0 ? -$1 : $1; if (d > t * m) bad = 1 } END { exit bad }'
    then t_pass "$1: $n values, sim = cpu (tolerance $3)"
    else t_fail "$1" "cpu: $(tr '\n' ' ' <"$d/a") sim: $(tr '\n' ' ' <"$d/b")"; fi
}
compare "training lm loss" 'lm loss' 1e-5
compare "validation/test lm loss" 'lm loss value' 1e-5
compare "grad norm" 'grad norm' 2e-3
for dev in cpu sim; do
    MT_DEVICE=$dev mt-eval --load "$d/cpu" --data-path "$d/data" --data-cache-path "$d/cache" --split 90,5,5 \
        --eval-iters 2 --eval-split test >"$d/eval.$dev" 2>"$d/eval.$dev.err" || t_fail "mt-eval on $dev" "$(tail -2 "$d/eval.$dev.err")"
done
a=$(field "$d/eval.cpu" 'lm loss value'); b=$(field "$d/eval.sim" 'lm loss value')
awk -v a="$a" -v b="$b" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(a != "" && d <= 1e-5 * a) }' \
    && t_pass "mt-eval: sim = cpu ($a)" || t_fail "mt-eval: sim = cpu" "cpu '$a' sim '$b'"
