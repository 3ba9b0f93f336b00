#!/usr/bin/env bash
# train-flops.sh: the model FLOPs of mt-train (--log-throughput's TFLOP/s/GPU, the metrics file's
# tflops_per_gpu, the checkpoint's num_floating_point_operations_so_far) against Megatron's
# num_floating_point_operations as it counts them since March 2025, written out here from its terms: per
# token 12 L h^2 ((1 + ng/np + T/(2h)) + (f/h) s) + 6 h V, the attention matrix's term counted for its
# causal half, for a GPT-2 model and a LLaMA one (grouped-query attention, SwiGLU): the checkpoint's total
# is iterations x the count of one global batch, and every logged iteration's throughput is that count /
# its time / 1e12 / the ranks (per GPU, as Megatron divides by the world size; checked on 2 ranks too).
. "$(dirname "$0")/../lib.sh"
py=/usr/bin/python3
d=$T_TMP
export OMP_NUM_THREADS=1
PYTHONPATH=$T_TOP/tests/oracle $py "$T_TOP/tests/oracle/walk_data.py" "$d/data" 7 300

common="--seq-length 32 --max-position-embeddings 32 --tokenizer-type NullTokenizer --vocab-size 60
        --micro-batch-size 2 --global-batch-size 4 --train-iters 3 --lr 1e-3 --log-interval 1 --eval-iters 0
        --split 90,5,5 --seed 3 --data-path $d/data --data-cache-path $d/cache --log-throughput --save-interval 3"
gpt="--num-layers 2 --hidden-size 64 --num-attention-heads 4"
# (one line each: the table below splits its rows at newlines)
llama="--num-layers 3 --hidden-size 64 --num-attention-heads 4 --normalization RMSNorm --position-embedding-type rope"
llama+=" --swiglu --ffn-hidden-size 96 --group-query-attention --num-query-groups 2"
llama+=" --untie-embeddings-and-output-weights --disable-bias-linear"
if ! command -v mpirun >/dev/null; then t_fail "mpirun" "openmpi-bin is not installed (make deps)"; exit 1; fi
t_mpi_env
# name | ranks | flags | layers hidden heads query-groups ffn swiglu
for c in "gpt2|1|$gpt|2 64 4 4 256 0" "llama|1|$llama|3 64 4 2 96 1" "gpt2 on 2 ranks|2|$gpt|2 64 4 4 256 0"; do
    IFS='|' read -r name n flags shape <<< "$c"
    s=$d/${name// /-}
    run=(mt-train); [ "$n" -gt 1 ] && run=(mpi "$n" mt-train)
    # shellcheck disable=SC2086
    if ! "${run[@]}" $flags $common --metrics-file "$s.jsonl" --save "$s.ckpt" >"$s.log" 2>"$s.err"; then
        t_fail "$name: training" "$(tail -2 "$s.err")"
        continue
    fi
    # shellcheck disable=SC2086
    if $py - "$s.log" "$s.jsonl" "$s.ckpt/iter_0000003/mp_rank_00/meta.json" "$n" $shape >"$s.cmp" 2>&1 <<'PYEOF'
import json, re, sys
log, metrics, meta, world = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
L, h, heads, groups, ffn, swiglu = map(int, sys.argv[5:11])
B, T, iters = 4, 32, 3
V = int(re.search(r"> padded vocab \(size: \d+\) with \d+ dummy tokens \(new size: (\d+)\)", open(log).read()).group(1))
# Megatron's num_floating_point_operations (dense GPT, no MoE, no MTP): 3 (forward + 2 backward) x 2 (FMA)
# x 2 (QKV/dense and the two attention products, or the MLP's two matrices), the attention matrix's
# T / h term halved for the causal mask
gate = 1.5 if swiglu else 1.0
per_token = 12 * L * h * h * ((1 + groups / heads + T / h / 2) + ffn / h * gate) + 6 * h * V
flops = B * T * per_token
total = json.load(open(meta))["num_floating_point_operations_so_far"]
assert abs(total - iters * flops) <= 1e-12 * iters * flops, ("checkpoint total", total, iters * flops)
rows = [r for r in map(json.loads, open(metrics)) if r["type"] == "train"]
assert len(rows) == iters, len(rows)
for r in rows:
    want = flops / (r["elapsed_ms"] / 1e3) / 1e12 / world
    assert abs(r["tflops_per_gpu"] - want) <= 1e-9 * want, ("iteration", r["iteration"], r["tflops_per_gpu"], want)
print("%.6g FLOPs per iteration" % flops)
PYEOF
    then t_pass "$name: the checkpoint's FLOPs and each iteration's TFLOP/s/GPU are Megatron's causal count ($(cat "$s.cmp"))"
    else t_fail "$name: FLOPs" "$(tail -1 "$s.cmp")"; fi
done
t_grep "the iteration line carries the throughput" ' throughput per GPU \(TFLOP/s/GPU\): [0-9]+\.[0-9] \| learning rate' "$d/gpt2.log"
t_cleanup
