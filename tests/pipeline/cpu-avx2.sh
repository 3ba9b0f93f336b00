#!/usr/bin/env bash
# cpu-avx2.sh: the cpu backend on a CPU without AVX-512, whatever CPU runs the suite: the programs run
# under qemu-x86_64 -cpu EPYC-Milan (user-mode emulation of AMD Zen 3: AVX2 and FMA, no AVX-512, as
# some of the machines this project is built and tested on), so CPUID says what a Zen 3 says and every
# run-time choice (oneDNN's ISA, the kernels' target clones, glibc's) is the one made there; an AVX-512
# instruction run without a check would end the program (SIGILL). There oneDNN has no bf16 matmul: the
# bf16 reduced-precision suite passes on the fp32 products of the bf16 values (test_cpu_lowp), mt-train
# --bf16 says so once and trains, its losses and grad norms those of the same run natively with
# MT_CPU_BF16=fp32 (the same path with AVX-512 kernels: the fp32 sums in another order, which bf16's
# roundings of the activations carry on) within 3e-4 relative: the measured gap is 3.4e-5 (the test
# loss; grad norms 1.5e-5), the bound about 9x that. --fp16 too, which always takes this path. The fp32
# kernels' unit tests and the sampler's pass there too (the AVX2 paths of generation's few-row product).
. "$(dirname "$0")/../lib.sh"
py=/usr/bin/python3
d=$T_TMP
q=$(command -v qemu-x86_64) || { t_fail "qemu-x86_64" "qemu-user is not installed (make deps)"; exit 1; }
emu() { "$q" -cpu EPYC-Milan "$@" 2> >(grep -v "TCG doesn't support requested feature" >&2); }
# mt-train sets OpenMP's wait policy by running itself again (util/ompenv.c) when none is set: that exec
# would leave the emulator, so the policy is set here
export OMP_WAIT_POLICY=passive
unset GOMP_SPINCOUNT   # lib.sh's: passive here, in the emulator and natively
if ! emu /bin/true; then t_fail "qemu-x86_64 -cpu EPYC-Milan" "does not run /bin/true"; exit 1; fi
grep -q avx512f /proc/cpuinfo && echo "# this CPU has AVX-512; the emulated one has not"

# the reduced-precision suite on the emulated CPU: every case of bf16 (which takes the fp32 products
# there, so the suite's forced MT_CPU_BF16=fp32 pass would repeat it and is not run) and fp16
emu "$T_TOP/${MT_BUILD:-build}/tests/test_cpu_lowp" >"$d/lowp" 2>"$d/lowp.err"
rc=$? nok=$(grep -c '^ok' "$d/lowp") nbad=$(grep -c '^not ok' "$d/lowp")
if [ $rc = 0 ] && [ "$nbad" = 0 ] && [ "$nok" -ge 10 ]; then t_pass "test_cpu_lowp without AVX-512: $nok cases"
else t_fail "test_cpu_lowp without AVX-512" "exit $rc, $nok ok, $(grep -m3 '^not ok' "$d/lowp" | tr '\n' ' ') $(tail -c 300 "$d/lowp.err")"; fi
t_grep "test_cpu_lowp: bf16 through fp32 products there" '^# bf16: products through oneDNN.s fp32 SGEMM of the bf16 values \(oneDNN has no bf16 matmul on this CPU\)$' "$d/lowp"
t_grep "test_cpu_lowp: its MT_CPU_BF16=fp32 pass is that first pass there" '^# bf16 \(fp32 products\): the bf16 cases above ran on this path$' "$d/lowp"

# the fp32 kernels and the sampler there: the few-row product's AVX2 tiles, the attention rows' AVX2 clones
for u in test_kernels test_sample; do
    emu "$T_TOP/${MT_BUILD:-build}/tests/$u" >"$d/$u" 2>"$d/$u.err"
    rc=$? nok=$(grep -c '^ok' "$d/$u") nbad=$(grep -c '^not ok' "$d/$u")
    if [ $rc = 0 ] && [ "$nbad" = 0 ] && [ "$nok" -ge 8 ]; then t_pass "$u without AVX-512: $nok cases"
    else t_fail "$u without AVX-512" "exit $rc, $nok ok, $(grep -m3 '^not ok' "$d/$u" | tr '\n' ' ') $(tail -c 300 "$d/$u.err")"; fi
done

# mt-train --bf16 and --fp16, a few steps of a small GPT
PYTHONPATH=$T_TOP/tests/oracle $py "$T_TOP/tests/oracle/walk_data.py" "$d/data" 7 100
args="--num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 32 --max-position-embeddings 32
      --tokenizer-type NullTokenizer --vocab-size 60 --make-vocab-size-divisible-by 16 --micro-batch-size 2
      --global-batch-size 4 --train-iters 6 --lr 3e-3 --lr-decay-style cosine --lr-warmup-iters 2
      --weight-decay 0.1 --clip-grad 1.0 --log-interval 1 --eval-interval 6 --eval-iters 1 --split 90,5,5
      --seed 5 --threads 2 --data-path $d/data --data-cache-path $d/cache"
# shellcheck disable=SC2086
mt-train $args --train-iters 1 --eval-iters 0 >/dev/null 2>&1   # the index cache, natively
for p in bf16 fp16; do
    [ $p = fp16 ] && args="$args --initial-loss-scale 4096"
    # shellcheck disable=SC2086
    MT_CPU_BF16=fp32 mt-train $args --$p --metrics-file "$d/n-$p.jsonl" >"$d/n-$p.log" 2>"$d/n-$p.err" \
        || t_fail "--$p natively" "$(tail -3 "$d/n-$p.err")"
    # shellcheck disable=SC2086
    if emu "$T_TOP/${MT_BUILD:-build}/bin/mt-train" $args --$p --metrics-file "$d/e-$p.jsonl" >"$d/e-$p.log" 2>"$d/e-$p.err"; then
        $py - "$d/n-$p.jsonl" "$d/e-$p.jsonl" >"$d/cmp-$p" 2>&1 <<'PYEOF' \
            && t_pass "--$p without AVX-512: the native losses and grad norms ($(cat "$d/cmp-$p"))" \
            || t_fail "--$p without AVX-512: the native losses" "$(tail -3 "$d/cmp-$p")"
import json, sys
load = lambda p: {(r["type"], r["iteration"]): (r["lm_loss"], r.get("grad_norm", r["lm_loss"])) for r in map(json.loads, open(p))}
a, b = load(sys.argv[1]), load(sys.argv[2])
assert sorted(a) == sorted(b) and len(a) >= 7, (sorted(a), sorted(b))
w = max(abs(x - y) / abs(x) for k in a for x, y in zip(a[k], b[k]))
assert w < 3e-4, "worst relative difference %.3g" % w
print("worst %.2g" % w)
PYEOF
    else t_fail "--$p without AVX-512" "exit $?: $(tail -3 "$d/e-$p.err")"; fi
done
t_grep "--bf16 without AVX-512 says its path" '^> --bf16: products through oneDNN.s fp32 SGEMM of the bf16 values \(oneDNN has no bf16 matmul on this CPU\)$' "$d/e-bf16.log"
t_grep "--fp16 says its path" '^> --fp16: products through oneDNN.s fp32 SGEMM of the fp16 values$' "$d/e-fp16.log"
