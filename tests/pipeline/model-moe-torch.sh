#!/usr/bin/env bash
# model-moe-torch.sh: mt-train's mixture of experts (--num-experts 4 --moe-router-topk 2, aux loss 1e-2, z loss
# 1e-3, on the LLaMA-style model of model-llama-torch.sh: 2 layers, hidden 64, 32 tokens, batches of 4 in
# micro-batches of 2, init std 0.1) against the independent float64 PyTorch reference of Megatron-Core's MoE
# layer (tests/oracle/moe_torch.py), step for step:
#   - the reference is first checked on its own (its losses and routing against plain loops, the kept choices
#     against Megatron's top capacity per expert, its gradients against finite differences);
#   - each variant starts from mt's initial weights (the checkpoint of iteration 1, learning rate 0 in the
#     warmup), takes Megatron's sample order and schedule, clips at 1.0 and steps AdamW in float64, the
#     objective the micro-batches' mean of lm loss plus every MoE layer's aux and z losses; all 10
#     iterations' lm loss, grad norm, load_balancing_loss (seq_load_balancing_loss) and z_loss agree to TOL
#     relative. Variants: dropless; --moe-expert-capacity-factor 1.0 (the reference counts the choices
#     dropped: there must be some); the same with --moe-token-drop-policy position and
#     --moe-pad-expert-input-to-capacity, an expert keeping the choices of the earliest tokens in Megatron's
#     token order [s, b] (position, then sequence: the ends of all the sequences are dropped, not the last
#     sequences; torch.topk of the routing map keeps the lowest indices among its equal values);
#     --moe-router-pre-softmax with --moe-layer-freq 2 (layer 1 dense);
#     sigmoid scores with seq_aux_loss and --moe-router-topk-scaling-factor 2.5; a shared expert of 48 with
#     its gate and experts of --moe-ffn-hidden-size 32; capacity 1.0 on 2 tensor ranks with
#     --sequence-parallel, where Megatron routes each rank's shard of the positions (16 of the 32, of both
#     sequences) on its own, with a capacity of ceil(2 x 16 x 2 / 4) = 16 per shard and expert (the
#     reference does the same per shard; the one-rank capacity of 32 over whole sequences gives other losses);
#     the same with --expert-tensor-parallel-size 1, each tensor rank routing a whole sequence and its experts
#     whole, the capacity still each shard's of the positions;
#     FP8 (--fp8-format; the reference's products through fp8_torch.py's delayed scaling, each expert's own
#     input, weight and gradient scales): hybrid; e4m3 with the shared expert and its gate; hybrid with EP 2
#     on 2 ranks, where a rank's expert j shares its scales with expert j of the other rank (Transformer
#     Engine reduces a GroupedLinear's amaxes by the GEMM's place: the reference's experts e in slots e mod 2)
#     and the two data-parallel ranks' micro-batches are one round of passes (the state updated after both).
#     The FP8 scales and amax histories mt saved at iteration 2 equal the reference's to 1e-4 relative
#     (measured 6.9e-7); iterations 1 and 2 agree to 1e-5 (measured 6e-8), and the 10 iterations to 5e-2
#     (measured 2e-2 in the grad norm: from iteration 3 or 4 on an element near an FP8 rounding tie rounds
#     as the fp32 or float64 value has it, and the runs drift apart, as model-torch.sh's dense FP8 runs).
#   - the checkpoint holds exactly the tensors of the variant (router, experts, shared expert and gate by
#     Megatron's names, the dense MLP in dense layers).
#   - no routing decision is a near tie: the smallest gap between a token's K-th and (K+1)-th score and, with
#     capacity, between an expert's last kept and first dropped prob, over all steps, is above 1e-6 (measured
#     3.6e-5 and 6.8e-5), so that mt's fp32 routes as float64 does. The data is walk_data's seed 2, whose walk
#     has no fixed point: seed 3's maps 6 to itself, and its runs of 6 have hidden states equal to 1e-16,
#     whose order under a capacity is then arbitrary (in Megatron too).
#   The measured gaps are at most 6.5e-8 (lm loss), 1.4e-7 (grad norm), 5.8e-8 (load balancing loss) and
#   1.4e-7 (z loss): TOL = 1e-6 is 7x those. At iteration 1 alone, the aux loss's gradient without its 1 / K
#   moves the grad norm by 4e-5 to 1.4e-3, the z loss's gradient not scaled by 1 / micro-batches by 1.1e-4 to
#   6e-4 (tests/mutants/list has these and the other planted bugs this test kills).
. "$(dirname "$0")/../lib.sh"
PY=/usr/bin/python3
d=$T_TMP
if ! [ -x "$PY" ] || ! $PY -c 'import numpy, torch' 2>/dev/null; then
    t_skip "torch reference" "no /usr/bin/python3 with numpy and torch (make deps installs python3-torch)"; exit 0
fi
export OMP_NUM_THREADS=1
dseed=2
PYTHONPATH=$T_TOP/tests/oracle $PY "$T_TOP/tests/oracle/moe_torch.py" "$T_FILE: the reference on its own"
PYTHONPATH=$T_TOP/tests/oracle $PY "$T_TOP/tests/oracle/walk_data.py" "$d/data" $dseed 200
base="--num-layers 2 --hidden-size 64 --num-attention-heads 4 --group-query-attention --num-query-groups 2
      --ffn-hidden-size 96 --normalization RMSNorm --position-embedding-type rope --rotary-base 500000 --swiglu
      --untie-embeddings-and-output-weights --disable-bias-linear --seq-length 32 --max-position-embeddings 32
      --tokenizer-type NullTokenizer --vocab-size 60 --make-vocab-size-divisible-by 16 --micro-batch-size 2
      --global-batch-size 4 --train-iters 10 --lr 3e-3 --lr-decay-style cosine --lr-warmup-iters 2
      --weight-decay 0.1 --clip-grad 1.0 --log-interval 1 --seed 5 --hidden-dropout 0 --attention-dropout 0
      --init-method-std 0.1 --eval-interval 1000 --eval-iters 0 --split 100,0,0
      --data-path $d/data --data-cache-path $d/cache
      --num-experts 4 --moe-router-topk 2 --moe-aux-loss-coeff 1e-2 --moe-z-loss-coeff 1e-3"
common='"num_layers": 2, "hidden_size": 64, "num_heads": 4, "num_query_groups": 2, "ffn_hidden_size": 96,
        "eps": 1e-5, "rotary_base": 500000, "rotary_percent": 1.0, "ndocs": 200, "iters": 10,
        "gbs": 4, "mbs": 2, "seq": 32, "seed": 5, "lr": 3e-3, "warmup": 2, "wd": 0.1, "clip": 1.0,
        "num_experts": 4, "topk": 2, "aux_coeff": 1e-2, "z_coeff": 1e-3'

# name | mt-train flags | the reference's settings | ranks:their parallel flags (the initial weights are
# the same in every layout: that run is on one rank)
variants=(
"dropless||"
"capacity 1.0|--moe-expert-capacity-factor 1.0|\"capacity_factor\": 1.0, \"must_drop\": true"
"capacity 1.0, position, padded|--moe-expert-capacity-factor 1.0 --moe-token-drop-policy position
 --moe-pad-expert-input-to-capacity|\"capacity_factor\": 1.0, \"drop_policy\": \"position\", \"must_drop\": true"
"pre-softmax, every 2nd layer|--moe-router-pre-softmax --moe-layer-freq 2|\"pre_softmax\": true, \"moe_layer_freq\": 2"
"sigmoid, seq aux, scaling 2.5|--moe-router-score-function sigmoid --moe-router-load-balancing-type seq_aux_loss
 --moe-router-topk-scaling-factor 2.5|\"score\": \"sigmoid\", \"aux_type\": \"seq_aux_loss\", \"scaling\": 2.5"
"shared expert and gate|--moe-shared-expert-intermediate-size 48 --moe-shared-expert-gate --moe-ffn-hidden-size 32
 |\"shared_size\": 48, \"shared_gate\": true"
"capacity 1.0, TP 2 + SP|--moe-expert-capacity-factor 1.0|\"capacity_factor\": 1.0, \"shards\": 2, \"must_drop\": true
 |2:--tensor-model-parallel-size 2 --sequence-parallel"
"capacity 1.0, TP 2 + SP, etp 1|--moe-expert-capacity-factor 1.0|\"capacity_factor\": 1.0, \"shards\": 2, \"must_drop\": true
 |2:--tensor-model-parallel-size 2 --sequence-parallel --expert-tensor-parallel-size 1"
"FP8 hybrid|--fp8-format hybrid|\"fp8\": \"hybrid\""
"FP8 e4m3, shared expert and gate|--fp8-format e4m3 --moe-shared-expert-intermediate-size 48 --moe-shared-expert-gate
 --moe-ffn-hidden-size 32|\"fp8\": \"e4m3\", \"shared_size\": 48, \"shared_gate\": true"
"FP8 hybrid, EP 2|--fp8-format hybrid|\"fp8\": \"hybrid\", \"local_experts\": 2, \"dp\": 2|2:--expert-model-parallel-size 2"
)
i=0
for v in "${variants[@]}"; do
    IFS='|' read -r name flags extra par <<<"$(echo "$v" | tr '\n' ' ' | sed 's/ *$//')"
    i=$((i + 1)) r=$d/v$i
    run=(mt-train)
    # shellcheck disable=SC2206
    [ -n "$par" ] && run=(mt-train -n "${par%%:*}" ${par#*:})
    more=()   # FP8: the state at iteration 2, for the reference's
    [[ $extra == *'"fp8"'* ]] && more=(--save "$r.ck" --save-interval 2)
    # shellcheck disable=SC2086
    if ! mt-train $base $flags --exit-interval 1 --save "$r.init" >"$r.init.log" 2>&1 ||
        ! "${run[@]}" $base $flags "${more[@]}" --metrics-file "$r.jsonl" >"$r.log" 2>&1; then
        t_fail "$name: mt-train" "$(tail -3 "$r.init.log" "$r.log")"; continue
    fi
    $PY - "$T_TOP/tests/oracle" "$r.init/iter_0000001/mp_rank_00/model.safetensors" "$r.jsonl" \
        "{$common, \"data_seed\": $dseed${extra:+, $extra}}" "$T_FILE" "$name" "$r.ck" <<'PYEOF'
import glob, json, sys
import numpy as np
import torch

sys.path.insert(0, sys.argv[1])
import gpt_dataset_ref as gd
import llama_torch
import lr_schedule_ref as lrs
import moe_torch as ref
import walk_data

weights, metrics, a, me, name, ck = sys.argv[2], sys.argv[3], json.loads(sys.argv[4]), sys.argv[5], sys.argv[6], sys.argv[7]
TOL = 1e-6   # 7x the largest gap measured (the header)
TOL_FREE = TOL   # from iteration 3 on
TOL_STATE = 1e-4
if a.get("fp8"):   # the header's measured gaps
    TOL, TOL_FREE = 1e-5, 5e-2
torch.set_num_threads(1)

def report(what, ok, detail):
    print("%s - %s: %s: %s: %s" % ("ok" if ok else "not ok", me, name, what, detail))

try:
    W = llama_torch.read_safetensors(weights)
    want = ref.expected_names(a)
    report("tensors", sorted(W) == sorted(want), "%d tensors" % len(W) if sorted(W) == sorted(want) else
           "extra %s, missing %s" % (sorted(set(W) - set(want)), sorted(set(want) - set(W))))
    docs = walk_data.walk_docs(a["data_seed"], a["ndocs"])
    sizes = np.array([len(x) for x in docs], np.int32)
    tokens = np.concatenate(docs).astype(np.int64)
    ptr = np.concatenate(([0], np.cumsum(sizes.astype(np.int64))[:-1]))
    I, G, M, T = a["iters"], a["gbs"], a["mbs"], a["seq"]
    _, doc, samp, shuf = gd.gpt(sizes, 0, len(sizes), I * G, T, 1, a["seed"], True)
    sched = lrs.Schedule(lr=a["lr"], global_batch_size=G, train_iters=I, lr_warmup_iters=a["warmup"],
                         lr_decay_style="cosine", weight_decay=a["wd"])
    trainer = ref.Trainer(a, llama_torch.params(W))
    rows = [r for r in map(json.loads, open(metrics)) if r["type"] == "train"]
    assert [r["iteration"] for r in rows] == list(range(1, I + 1)), "iterations %s" % [r["iteration"] for r in rows]
    keys = ["lm_loss", "grad_norm"]
    worst, bad, dropped, choices, margins = {}, [], 0, 0, [float("inf"), float("inf")]
    for it in range(1, I + 1):
        mbs = []
        for m in range(G // M):
            s = np.stack([gd.fetch(tokens, ptr, sizes, doc, samp, shuf, T, 1, (it - 1) * G + m * M + j)
                          for j in range(M)])
            mbs.append((torch.tensor(s[:, :-1]), torch.tensor(s[:, 1:]), torch.ones(M, T, dtype=torch.float64)))
        loss, norm = trainer.step(mbs, sched.lr((it - 1) * G), sched.wd((it - 1) * G), a["clip"])
        if a.get("fp8") and it == 2:   # the FP8 state mt saved at iteration 2 (every rank directory's)
            want_st, metas = trainer.fp8.flat(), sorted(glob.glob(ck + "/iter_0000002/mp_rank_*/meta.json"))
            gaps = [float(np.max(np.abs(np.array(json.load(open(f))["fp8"]["state"]) - want_st) /
                                 np.maximum(np.abs(want_st), 1e-30))) for f in metas]
            report("FP8 scales and amax histories at iteration 2", metas and max(gaps) <= TOL_STATE,
                   "%d floats, %d rank directories, worst relative %s" % (len(want_st), len(metas),
                                                                         ", ".join("%.2g" % g for g in gaps)))
        want = {"lm_loss": loss, "grad_norm": norm, **trainer.logs}
        if it == 1:
            keys += sorted(trainer.logs)
        dropped, choices = dropped + trainer.dropped, choices + trainer.choices
        margins = [min(margins[0], trainer.topk_margin), min(margins[1], trainer.drop_margin)]
        r = rows[it - 1]
        errs = {k: abs(r[k] - want[k]) / abs(want[k]) if k in r else float("inf") for k in keys}
        for k in keys:
            worst[k] = max(worst.get(k, 0.0), errs[k])
        tol = TOL if it <= 2 else TOL_FREE
        if max(errs.values()) >= tol:
            bad.append("iteration %d: %s" % (it, ", ".join("%s %s vs %.9g" % (k, r.get(k, "missing"), want[k])
                                                        for k in keys if errs[k] >= tol)))
    within = "%g" % TOL if TOL == TOL_FREE else "%g (iterations 1 and 2), %g" % (TOL, TOL_FREE)
    report("%d iterations of %s = float64 torch within %s" % (I, ", ".join(keys), within), not bad,
           "; ".join(bad[:3]) if bad else "worst relative differences %s; lm loss %.4f -> %.4f"
           % (", ".join("%.2g" % worst[k] for k in keys), rows[0]["lm_loss"], rows[-1]["lm_loss"]))
    report("no routing decision is a near tie", min(margins) > 1e-6, "smallest margins: top-k %.2g, capacity %.2g "
           "(above 1e-6, so that fp32 decides as float64)" % (margins[0], margins[1]))
    if a.get("must_drop"):
        report("capacity drops choices", dropped > 0, "%d of %d choices dropped over the %d iterations"
               % (dropped, choices, I))
except Exception as ex:
    report("reference", False, repr(ex))
PYEOF
done
