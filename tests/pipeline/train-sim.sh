#!/usr/bin/env bash
# train-sim.sh: a few training steps of a tiny GPT on the sim backend (the CUDA kernels under the SIMT
# simulator, MT_DEVICE=sim) give the cpu backend's numbers, read at full precision from --metrics-file:
# every iteration's lm loss and pre-clip grad norm, and the validation and test losses; mt-eval of the
# saved checkpoint gives the same loss on both (--json, the forward pass alone). mt-generate is not run
# here: the model has no BPE vocabulary (NullTokenizer), which mt-generate needs. Dropout is on (Megatron's default 0.1), so the two backends must also draw the same masks.
# Tolerances (relative): the measured clean gaps sim - cpu on this model are 0 for the training losses
# (equal to the last bit), 1.3e-9 for the test loss and 3.5e-8 for the grad norms; the limits, 1e-7 for
# losses and 1e-6 for grad norms, are 30-80x those. A LayerNorm weight gradient that misses a row of each
# chunk on sim moves the losses by 8.5e-6.
# The same again with the LLaMA family's options (RMSNorm, rope base 500000 on half of each head, SwiGLU,
# 4 heads in 2 key/value groups, no biases, an untied output layer): measured gaps 0 for the training
# losses, 6.1e-9 for the validation and test losses and 6.4e-9 for the grad norms, the same limits (16-150x);
# a rope backward on sim that turns the wrong way moves the losses by 5.5e-6 and the grad norms by 2.2e-5.
. "$(dirname "$0")/../lib.sh"
py=/usr/bin/python3
d=$T_TMP
t_sim_setup 2
args="--num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 24 --max-position-embeddings 32
      --tokenizer-type NullTokenizer --vocab-size 60 --make-vocab-size-divisible-by 16
      --micro-batch-size 3 --global-batch-size 6 --train-iters 6 --lr 3e-3 --lr-decay-style cosine
      --lr-warmup-iters 2 --weight-decay 0.1 --clip-grad 1.0 --log-interval 1 --eval-interval 3 --eval-iters 1
      --split 90,5,5 --seed 5 --data-path $d/data --data-cache-path $d/cache"
# the LLaMA family's options: 4 heads in 2 key/value groups, rope base 500000 on half of each head
llama="--normalization RMSNorm --position-embedding-type rope --rotary-base 500000 --rotary-percent 0.5 --swiglu
       --group-query-attention --num-query-groups 2 --ffn-hidden-size 48 --untie-embeddings-and-output-weights
       --disable-bias-linear"
train() {   # PREFIX EXTRA-FLAGS: the run on cpu and on sim, checkpoints in $d/PREFIX{cpu,sim}
    for dev in cpu sim; do
        # shellcheck disable=SC2086
        MT_DEVICE=$dev mt-train $args $2 --save "$d/$1$dev" --save-interval 6 --metrics-file "$d/$1$dev.jsonl" \
            >"$d/$1$dev.log" 2>"$d/$1$dev.err" || t_fail "$1$dev run" "$(tail -3 "$d/$1$dev.err")"
    done
}
compare() {   # NAME KIND FIELD TOLERANCE: every row of type KIND (train, or validation/test) of the runs $m{cpu,sim}
              # has FIELD within TOL
    if $py - "$d/${m}cpu.jsonl" "$d/${m}sim.jsonl" "$2" "$3" "$4" >"$d/cmp" 2>&1 <<'PYEOF'
import json, sys
a, b, kinds, field, tol = sys.argv[1], sys.argv[2], sys.argv[3].split("/"), sys.argv[4], float(sys.argv[5])
rows = lambda p: [(r["type"], r["iteration"], r[field]) for r in map(json.loads, open(p)) if r["type"] in kinds]
x, y = rows(a), rows(b)
assert len(x) == len(y) and len(x) >= 2 and [r[:2] for r in x] == [r[:2] for r in y], (x, y)
worst = max(abs(p[2] - q[2]) / abs(p[2]) for p, q in zip(x, y))
assert worst <= tol, "worst relative difference %.3g > %g: cpu %s sim %s" % (worst, tol, [r[2] for r in x], [r[2] for r in y])
print("%d values, worst %.2g" % (len(x), worst))
PYEOF
    then t_pass "$1: sim = cpu within $4 ($(cat "$d/cmp"))"
    else t_fail "$1" "$(tail -1 "$d/cmp")"; fi
}
evaluate() {   # NAME: mt-eval of the cpu run's checkpoint $d/${m}cpu on both backends
    for dev in cpu sim; do
        MT_DEVICE=$dev mt-eval --load "$d/${m}cpu" --data-path "$d/data" --data-cache-path "$d/cache" --split 90,5,5 \
            --eval-iters 2 --eval-split test --json >"$d/eval.$dev" 2>"$d/eval.$dev.err" || t_fail "$1 on $dev" "$(tail -2 "$d/eval.$dev.err")"
    done
    if $py - "$d/eval.cpu" "$d/eval.sim" >"$d/cmp" 2>&1 <<'PYEOF'
import json, sys
a, b = (json.load(open(p))["loss"] for p in sys.argv[1:3])
assert abs(a - b) <= 1e-7 * abs(a), (a, b)
print("%.9g, %.9g" % (a, b))
PYEOF
    then t_pass "$1: sim = cpu within 1e-7 ($(cat "$d/cmp"))"; else t_fail "$1: sim = cpu" "$(tail -1 "$d/cmp")"; fi
}
m=gpt-; train $m ""
compare "training lm loss, every iteration" train lm_loss 1e-7
compare "grad norm, every iteration" train grad_norm 1e-6
compare "validation/test lm loss" valid/test lm_loss 1e-7
evaluate "mt-eval"
m=llama-; train $m "$llama"
compare "Llama options: training lm loss, every iteration" train lm_loss 1e-7
compare "Llama options: grad norm, every iteration" train grad_norm 1e-6
compare "Llama options: validation/test lm loss" valid/test lm_loss 1e-7
evaluate "Llama options: mt-eval"

# --async-save on sim: the state is copied aside into the backend's pinned host memory (mtk_host_alloc) and
# written in the background; the checkpoint files are the synchronous sim run's (gpt-sim) byte for byte
# shellcheck disable=SC2086
if MT_DEVICE=sim mt-train $args --save "$d/async-sim" --save-interval 6 --async-save >"$d/async.log" 2>"$d/async.err"; then
    n=0 bad=0
    for f in $(cd "$d/gpt-sim" && find . -name '*.safetensors'); do
        n=$((n + 1)); cmp -s "$d/gpt-sim/$f" "$d/async-sim/$f" || bad=$((bad + 1))
    done
    [ "$n" -gt 0 ] && [ "$bad" = 0 ] && grep -q "background" "$d/async.log" &&
        t_pass "sim --async-save: the synchronous run's $n checkpoint files byte for byte" ||
        t_fail "sim --async-save" "$bad of $n files differ; $(grep -i save "$d/async.log" | head -3)"
else t_fail "sim --async-save" "$(tail -3 "$d/async.err")"; fi
