#!/usr/bin/env bash
# megatron-read.sh: mt-ckpt-convert --from megatron against checkpoints laid out as Megatron-LM saves them
# (tests/oracle/megatron_write.py, torch 1.13: args Namespace, iteration, rng_state with numpy arrays,
# Transformer Engine's _extra_state buffers) from an mt-trained model's tensors:
# - at TP 1, TP 2 x PP 2 (legacy names) and TP 2 x PP 2 and TP 2 x PP 1 with Megatron-Core's names,
#   converted to TP 1 or PP 2, mt-eval gives the original model's loss exactly (also from
#   checkpoint_version 0 and 1, with their QKV orders and names); converted to TP 2 x PP 2 each rank's
#   tensors are mt's own resharding's;
# - a --bf16 or --fp16 run's checkpoint (tensors in that dtype) gives the loss of the same values in fp32;
# - iteration, consumed samples and the schedule are kept, and mt-train --load --no-load-optim continues
#   from that iteration with finite, falling losses;
# - Megatron-Core's optimizer state (fp32, bf16 and fp16 runs; and the distributed optimizer's, its
#   distrib_optim.pt at TP 2 x PP 2 with buckets and the split-off shared embeddings) is read as mt saved it,
#   and mt-train --load continues such a checkpoint exactly as the mt checkpoint it was made from;
# - the interleaved schedule's model chunks (model0, model1) are read byte for byte;
# - a missing rank, a missing key, a shape the args do not give, a missing or foreign distrib_optim.pt, an
#   expert_tensor_parallel_size not dividing the tensor size in the args: one line naming the
#   file and key, non-zero exit, nothing under --save;
# - experts over expert ranks (megatron_write.py --ep, mp_rank_TT[_PPP]_EEE; with --etp 1 --held each expert
#   whole and only the (tensor rank, expert rank) pairs a Megatron run saves; with --grouped TEGroupedMLP's
#   experts), with the ChainedOptimizer's
#   state (the dense parameters', the experts'): read into the mt checkpoint they came from byte for byte,
#   and mt-train --load continues them as it continues that checkpoint; so with the distributed optimizer
#   (--distrib: distrib_optim.pt's list of the dense and the expert buffers' states, None where the directory's
#   rank saves one not); a missing expert rank directory or distrib_optim.pt, a
#   tensor rank no held pair covers and a chained list of 3 are refused in one line naming the file.
# The runs to convert are trained first, then every Megatron checkpoint the checks read is written by one
# megatron_write.py --jobs call (torch imported once), each into a directory of its own.
. "$(dirname "$0")/../lib.sh"
PY=/usr/bin/python3
d=$T_TMP
export OMP_NUM_THREADS=2
# (found, not imported: the one oracle process below imports them)
if ! $PY -c 'import importlib.util as u, sys; sys.exit(not (u.find_spec("torch") and u.find_spec("numpy")))' 2>/dev/null; then t_skip "torch reference" "no /usr/bin/python3 with torch and numpy"; exit 0; fi
job() { printf '%q ' "$@" >>"$d/jobs"; echo >>"$d/jobs"; }   # SRC OUT FLAGS...: one megatron_write.py job
oracle_ok() { grep -qxF "ok $1" "$d/oracle.out"; }               # OUT: that job wrote its checkpoint
oracle_why() { grep -F "failed $1:" "$d/oracle.out"; }           # OUT: why that job failed
err1() { "$@" >"$d/o" 2>"$d/e"; local rc=$?; [ $rc != 0 ] && [ "$(wc -l <"$d/e")" -eq 1 ]; }

$PY "$T_TOP/tests/oracle/prose.py" 900 >"$d/train.jsonl"   # a fixed corpus, not the docs
mt-tokenize --vocab-file "$GPT2_VOCAB" --merge-file "$GPT2_MERGES" --append-eod --quiet --input "$d/train.jsonl" \
    | mt-index --output-prefix "$d/data" 2>"$d/index.err" || { t_fail "dataset" "$(cat "$d/index.err")"; exit 0; }
# vocabulary rows padded to 256: Megatron's padding (128) at tensor size 2, so every layout has the same rows
train=(--num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 64 --max-position-embeddings 64
       --micro-batch-size 4 --global-batch-size 8 --lr 5e-3 --min-lr 5e-4 --lr-decay-style cosine --log-interval 1
       --eval-iters 0 --split 100,0,0 --seed 5 --make-vocab-size-divisible-by 256 --vocab-file "$GPT2_VOCAB"
       --merge-file "$GPT2_MERGES" --data-path "$d/data_text_document" --data-cache-path "$d/cache")
if mt-train "${train[@]}" --train-iters 20 --lr-decay-iters 40 --save "$d/ck" >"$d/train.log" 2>"$d/train.err"
then t_pass "tiny GPT-2 model trained"
else t_fail "tiny GPT-2 model trained" "$(tail -2 "$d/train.err")"; exit 0; fi
src=$d/ck/iter_0000020/mp_rank_00

loss() {   # LOAD: the loss of the first 32 sequences of the whole dataset (any changed weight changes it)
    mt-eval --load "$1" --data-path "$d/data_text_document" --data-cache-path "$d/cache" --eval-split all --eval-iters 16 \
        --seed 1234 --micro-batch-size 2 --json 2>"$d/le" | $PY -c 'import json,sys; print(repr(json.load(sys.stdin)["loss"]))'
}
want=$(loss "$d/ck")
[ -n "$want" ] || { t_fail "mt-eval of the original" "$(head -c 300 "$d/le")"; exit 0; }
orig=$want

# ---- the other runs to convert (their failures reported where they are used), and every Megatron
# checkpoint of the checks below, written by one megatron_write.py call ----
declare -A trained
for dt in bf16 fp16; do
    mt-train "${train[@]}" --$dt --train-iters 20 --lr-decay-iters 40 --save "$d/ck-$dt" >/dev/null 2>"$d/t$dt.err"
    trained[$dt]=$?
done
mt-train "${train[@]}" --num-layers 4 --train-iters 4 --lr-decay-iters 40 --save "$d/ck4" >/dev/null 2>"$d/t4.err"
trained[4]=$?
# a mixture of experts (a dense layer, then an MoE layer of 4 experts and a shared expert)
moe=(--num-experts 4 --moe-router-topk 2 --moe-shared-expert-intermediate-size 64 --moe-layer-freq "[0,1]"
     --moe-aux-loss-coeff 0.01 --disable-bias-linear)
mt-train "${train[@]}" "${moe[@]}" --train-iters 4 --lr-decay-iters 40 --save "$d/ckmoe" >/dev/null 2>"$d/tmoe.err"
trained[moe]=$?
smoe=$d/ckmoe/iter_0000004/mp_rank_00
s4=$d/ck4/iter_0000004/mp_rank_00
: >"$d/jobs"
job "$src" "$d/meg-tp1" --divisible-by 256
job "$src" "$d/meg-tp2pp2" --tp 2 --pp 2 --divisible-by 128
job "$src" "$d/meg-v0" --tp 2 --divisible-by 128 --checkpoint-version 0
job "$src" "$d/meg-v1" --tp 2 --divisible-by 128 --checkpoint-version 1
job "$src" "$d/meg-core21" --tp 2 --divisible-by 128 --core
job "$src" "$d/meg-core22" --tp 2 --pp 2 --divisible-by 256 --core
for dt in bf16 fp16; do
    job "$src" "$d/meg-$dt" --tp 2 --divisible-by 128 --dtype $dt
    job "$src" "$d/meg-$dt-r" --tp 2 --divisible-by 128 --round $dt
done
job "$src" "$d/meg-opt-fp32" --tp 2 --divisible-by 128 --core --optim
job "$d/ck-bf16/iter_0000020/mp_rank_00" "$d/meg-opt-bf16" --tp 2 --divisible-by 128 --core --optim --dtype bf16
job "$d/ck-fp16/iter_0000020/mp_rank_00" "$d/meg-opt-fp16" --tp 2 --divisible-by 128 --core --optim --dtype fp16
job "$d/ck-bf16/iter_0000020/mp_rank_00" "$d/meg-opt-bf16-distrib" --tp 2 --divisible-by 128 --core --optim \
    --dtype bf16 --pp 2 --distrib --bucket-size 100
job "$s4" "$d/meg-vp-0" --tp 2 --pp 2 --vp 2 --divisible-by 128
job "$s4" "$d/meg-vp-1" --tp 2 --pp 2 --vp 2 --divisible-by 128 --core --optim
job "$s4" "$d/meg-vp-2" --tp 2 --pp 2 --vp 2 --divisible-by 128 --core --optim --distrib --bucket-size 100
job "$src" "$d/meg-bad-rank" --tp 2 --pp 2 --divisible-by 128
job "$src" "$d/meg-bad-key" --drop layers.1.mlp.dense_4h_to_h.weight --divisible-by 256
job "$src" "$d/meg-bad-shape" --tp 2 --pp 2 --divisible-by 128 --bad-ffn
job "$src" "$d/meg-bad-extra" --extra layers.0.extra.weight --divisible-by 256
job "$src" "$d/meg-bad-distrib" --tp 2 --pp 2 --divisible-by 128 --core --optim --distrib
job "$src" "$d/meg-bad-buckets" --tp 2 --pp 2 --divisible-by 128 --core --optim --distrib --bucket-size 100 --args-bucket-size 5000
job "$src" "$d/meg-bad-per-bucket" --divisible-by 256 --core --optim --distrib --per-bucket
job "$src" "$d/meg-bad-version" --checkpoint-version 1.5 --divisible-by 256
job "$src" "$d/meg-bad-etp" --tp 2 --divisible-by 128 --args-etp 3
# experts over expert ranks: TP 2 x EP 2 (every pair), and TP 2 x PP 2 x EP 2 with each expert whole (ETP 1)
# and only the pairs a Megatron run of 2 ranks per stage saves
job "$smoe" "$d/meg-ep" --tp 2 --ep 2 --divisible-by 128 --core --optim
job "$smoe" "$d/meg-ep-etp1" --tp 2 --pp 2 --ep 2 --etp 1 --held --divisible-by 128 --core --optim
job "$smoe" "$d/meg-bad-ep-rank" --tp 2 --ep 2 --divisible-by 128 --core --optim
job "$smoe" "$d/meg-bad-held" --tp 2 --ep 2 --etp 1 --held --divisible-by 128 --core
job "$smoe" "$d/meg-bad-chain" --tp 2 --ep 2 --divisible-by 128 --core --optim --chain-len 3
# and with the distributed optimizer (distrib_optim.pt: the list of the dense and the expert buffers' states)
job "$smoe" "$d/meg-epd" --tp 2 --ep 2 --divisible-by 128 --core --optim --distrib --bucket-size 100
job "$smoe" "$d/meg-epd-etp1" --tp 2 --pp 2 --ep 2 --etp 1 --held --divisible-by 128 --core --optim --distrib
# TEGroupedMLP's experts (experts.linear_fc1.weightJ, every fc1 registered first), non-distributed and distributed
job "$smoe" "$d/meg-epg" --tp 2 --ep 2 --divisible-by 128 --core --optim --grouped
job "$smoe" "$d/meg-epdg" --tp 2 --pp 2 --ep 2 --divisible-by 128 --core --optim --grouped --distrib --bucket-size 100
job "$smoe" "$d/meg-bad-epd" --tp 2 --ep 2 --divisible-by 128 --core --optim --distrib
job "$smoe" "$d/meg-bad-dist-len" --tp 2 --ep 2 --divisible-by 128 --core --optim --distrib --dist-len 1
$PY -W ignore "$T_TOP/tests/oracle/megatron_write.py" --jobs "$d/jobs" --vocab-file "$GPT2_VOCAB" \
    --merge-file "$GPT2_MERGES" >"$d/oracle.out" 2>"$d/oracle.err"

# ---- each layout, converted, gives the original's loss ----
check_layout() {   # NAME KEY CONVERT-FLAGS: $d/meg-KEY (its job above) converted into $d/out-KEY
    local name=$1 key=$2; shift 2
    local cf=("$@")
    if ! oracle_ok "$d/meg-$key"; then t_fail "$name: oracle" "$(oracle_why "$d/meg-$key")"; return; fi
    if ! mt-ckpt-convert --from megatron --load "$d/meg-$key" --save "$d/out-$key" "${cf[@]}" 2>"$d/ce-$key"; then
        t_fail "$name: converted" "$(cat "$d/ce-$key")"; return
    fi
    local got
    got=$(loss "$d/out-$key")
    [ -n "$got" ] && [ "$got" = "$want" ] && t_pass "$name: mt-eval gives the original's loss ($got)" \
        || t_fail "$name: mt-eval gives the original's loss" "original $want, converted $got: $(head -c 300 "$d/le")"
}
check_layout "Megatron TP 1 -> mt TP 1" tp1
check_layout "Megatron TP 2 x PP 2 -> mt TP 1" tp2pp2
# older checkpoints: version 0 held QKV rows as [3, np, hn], version 1 as [np, hn, 3], both under the names
# language_model.transformer and layers.N.attention
check_layout "checkpoint_version 0 (TP 2, QKV [3, np, hn]) -> mt TP 1" v0
check_layout "checkpoint_version 1 (TP 2, QKV [np, hn, 3]) -> mt TP 1" v1
check_layout "Megatron TP 2 x PP 1 (Megatron-Core names) -> mt TP 1 x PP 2" core21 --target-pipeline-parallel-size 2
# a tensor-parallel target: every rank's tensors as mt's own resharding of the original writes them (mt-eval
# of a TP 2 checkpoint pads the vocabulary for one rank, so the loss is compared with the reshard's). Megatron
# at TP 2 with 256 pads as mt's TP 2 reshard of a run with 256 does, and the target keeps its rows.
mt-ckpt-convert --load "$d/ck" --save "$d/ck22" --target-tensor-parallel-size 2 --target-pipeline-parallel-size 2 2>/dev/null
want=$(loss "$d/ck22")
check_layout "Megatron TP 2 x PP 2 (Megatron-Core names) -> mt TP 2 x PP 2" core22 \
    --target-tensor-parallel-size 2 --target-pipeline-parallel-size 2
bad=
for r in mp_rank_00_000 mp_rank_01_000 mp_rank_00_001 mp_rank_01_001; do
    cmp -s "$d/out-core22/iter_0000020/$r/model.safetensors" "$d/ck22/iter_0000020/$r/model.safetensors" || bad="$bad $r"
done
[ -z "$bad" ] && t_pass "TP 2 x PP 2 target: every rank's model.safetensors is the reshard's, byte for byte" \
    || t_fail "TP 2 x PP 2 target: every rank's model.safetensors is the reshard's" "differ:$bad"

# a --bf16 / --fp16 run's checkpoint (the model's tensors in that dtype): read exactly, so the loss is that of
# the same values stored in fp32 (and not the fp32 original's)
for dt in bf16 fp16; do
    if oracle_ok "$d/meg-$dt" && oracle_ok "$d/meg-$dt-r" &&
        mt-ckpt-convert --from megatron --load "$d/meg-$dt" --save "$d/out-$dt" 2>"$d/ce" &&
        mt-ckpt-convert --from megatron --load "$d/meg-$dt-r" --save "$d/out-$dt-r" 2>>"$d/ce"; then
        a=$(loss "$d/out-$dt") b=$(loss "$d/out-$dt-r") o=$orig
        [ -n "$a" ] && [ "$a" = "$b" ] && [ "$a" != "$o" ] &&
            t_pass "Megatron TP 2 in $dt -> mt: the loss of the same values in fp32 ($a; the fp32 original's $o)" ||
            t_fail "Megatron TP 2 in $dt" "$dt $a, rounded fp32 $b, original $o: $(tail -c 200 "$d/ce")"
    else t_fail "Megatron TP 2 in $dt: oracle and conversion" "$(oracle_why "$d/meg-$dt"; oracle_why "$d/meg-$dt-r"; tail -2 "$d/ce")"; fi
done

# ---- the state: iteration, consumed samples, the schedule; the message says what is not kept (of the
# TP 2 x PP 2 layout's conversion above, $d/out-tp2pp2) ----
c1=$d/out-tp2pp2
if $PY - "$src/meta.json" "$c1/iter_0000020/mp_rank_00/meta.json" "$c1/latest_checkpointed_iteration.txt" >"$d/st" 2>&1 <<'PYEOF'
import json, sys
a, b = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
assert open(sys.argv[3]).read().strip() == "20"
for k in ("iteration", "consumed_train_samples", "consumed_valid_samples", "opt_param_scheduler"):
    assert a[k] == b[k], (k, a[k], b[k])
assert "optimizer" not in b and b["converted_from"]["format"] == "megatron"
print("iteration %d, %d samples" % (b["iteration"], b["consumed_train_samples"]))
PYEOF
then t_pass "iteration, consumed samples and the schedule kept, no optimizer state ($(cat "$d/st"))"
else t_fail "iteration, consumed samples and the schedule kept" "$(tail -2 "$d/st")"; fi
grep -q "no optimizer state" "$d/ce-tp2pp2" && t_pass "the message says the optimizer state is not converted" \
    || t_fail "the message says the optimizer state is not converted" "$(cat "$d/ce-tp2pp2")"

# ---- mt-train continues at iteration 20 ----
if mt-train "${train[@]}" --train-iters 26 --lr-decay-iters 40 --load "$c1" --no-load-optim \
        --use-checkpoint-opt_param-scheduler --save "$c1" \
        --metrics-file "$d/m.jsonl" >"$d/t2.log" 2>"$d/t2.err" && $PY - "$d/m.jsonl" >"$d/tc" 2>&1 <<'PYEOF'
import json, math, sys
r = [json.loads(l) for l in open(sys.argv[1])]
tr = [(x["iteration"], x["lm_loss"]) for x in r if x["type"] == "train"]
assert [i for i, _ in tr] == list(range(21, 27)), tr
ls = [l for _, l in tr]
assert all(math.isfinite(l) for l in ls), ls
assert sum(ls[3:]) < sum(ls[:3]), ls
print("iterations 21..26, loss %.4f -> %.4f" % (ls[0], ls[-1]))
PYEOF
then t_pass "mt-train --load --no-load-optim continues from iteration 20 ($(cat "$d/tc"))"
else t_fail "mt-train --load --no-load-optim continues from iteration 20" "$(tail -2 "$d/t2.err") $(tail -2 "$d/tc")"; fi

# ---- the optimizer's state (Megatron-Core's non-distributed optimizer, megatron_write.py --optim): read
# into mt's own moments and (bf16, fp16: from fp32_from_fp16_params) weights byte for byte, with Adam's step
# and the loss scaler, so mt-train --load continues exactly as from the mt checkpoint it came from; and the
# distributed optimizer's (megatron_write.py --distrib: its param groups, distrib_optim.pt per rank) of a bf16
# run at TP 2 x PP 2, with 100-element buckets (the first stage's bucket ends fall after 48-element QKV biases,
# so dropping their padding moves what follows) and the shared embeddings in buckets of their own ----
metrics() {   # FILE: iteration, loss, grad norm of each train line (None, None: an iteration the fp16 loss scaler skipped)
    $PY -c 'import json,sys; [print(r["iteration"], repr(r.get("lm_loss")), repr(r.get("grad_norm"))) for r in map(json.loads, open(sys.argv[1])) if r["type"] == "train"]' "$1"
}
continues() {   # NAME MT.jsonl CONVERTED.jsonl N ERR: both hold the same N train iterations, bit for bit
    local a b
    a=$(metrics "$2" 2>/dev/null) b=$(metrics "$3" 2>/dev/null)
    [ "$(echo "$a" | wc -l)" = "$4" ] && [ "$a" = "$b" ] \
        && t_pass "$1: mt-train --load continues the converted checkpoint as the mt one: iterations equal ($(echo $b | cut -d' ' -f1-3) ...)" \
        || t_fail "$1: continued as the mt checkpoint" "mt: $a / converted: $b $(tail -1 "$5")"
}
for v in fp32 bf16 fp16 bf16-distrib; do   # the runs trained and the checkpoints written above
    dt=${v%-distrib} flag=()
    [ $dt != fp32 ] && flag=(--$dt)
    s=$src
    if [ $dt != fp32 ]; then
        s=$d/ck-$dt/iter_0000020/mp_rank_00
        [ "${trained[$dt]}" = 0 ] || { t_fail "$dt: a run to convert" "$(tail -2 "$d/t$dt.err")"; continue; }
    fi
    if ! oracle_ok "$d/meg-opt-$v" ||
        ! mt-ckpt-convert --from megatron --load "$d/meg-opt-$v" --save "$d/co-$v" 2>"$d/ce"; then
        t_fail "$v: Megatron-Core optimizer state converted" "$(oracle_why "$d/meg-opt-$v"; tail -2 "$d/ce")"; continue
    fi
    c=$d/co-$v/iter_0000020/mp_rank_00
    if cmp -s "$c/optim.safetensors" "$s/optim.safetensors" && cmp -s "$c/model.safetensors" "$s/model.safetensors" &&
        $PY -c 'import json,sys; a,b=(json.load(open(f)) for f in sys.argv[1:3]); sys.exit(a["optimizer"]["step"]!=b["optimizer"]["step"] or (sys.argv[3]=="fp16" and a["loss_scaler"]!=b["loss_scaler"]))' \
            "$c/meta.json" "$s/meta.json" $dt; then
        t_pass "$v: Megatron-Core's optimizer state read: moments, weights, step$([ $dt = fp16 ] && echo ', loss scaler') as mt saved them ($(grep -o 'Adam step [0-9]*' "$d/ce"))"
    else t_fail "$v: Megatron-Core's optimizer state read as mt saved it" "$(cat "$d/ce")"; fi
    rm -f "$d/mb.jsonl"
    cont=("${train[@]}" "${flag[@]}" --train-iters 24 --lr-decay-iters 40 --use-checkpoint-opt_param-scheduler)
    # the mt checkpoint's own continuation: once per run (bf16 and bf16-distrib come from the same one)
    [ -e "$d/ma-$dt.jsonl" ] ||
        mt-train "${cont[@]}" --load "${s%/iter_*}" --metrics-file "$d/ma-$dt.jsonl" >/dev/null 2>"$d/ta.err"
    mt-train "${cont[@]}" --load "$d/co-$v" --metrics-file "$d/mb.jsonl" >/dev/null 2>"$d/tb.err"
    continues "$v" "$d/ma-$dt.jsonl" "$d/mb.jsonl" 4 "$d/tb.err"
done

# ---- the interleaved schedule's model chunks (model0, model1 per rank: a 4-layer model at PP 2 with 2 chunks
# per stage, TP 2): read into the mt checkpoint they came from, weights and (Megatron-Core) optimizer state
# byte for byte ----
if [ "${trained[4]}" = 0 ]; then   # the 4-layer run trained above; its jobs meg-vp-0, -1, -2
    i=0
    for of in "" "--core --optim" "--core --optim --distrib --bucket-size 100"; do
        if oracle_ok "$d/meg-vp-$i" &&
            mt-ckpt-convert --from megatron --load "$d/meg-vp-$i" --save "$d/c4-$i" 2>"$d/ce" &&
            cmp -s "$d/c4-$i/iter_0000004/mp_rank_00/model.safetensors" "$s4/model.safetensors" &&
            { [ -z "$of" ] || cmp -s "$d/c4-$i/iter_0000004/mp_rank_00/optim.safetensors" "$s4/optim.safetensors"; }
        then t_pass "TP 2 x PP 2 x 2 model chunks${of:+ ($of)} -> mt: the original's tensors byte for byte"
        else t_fail "TP 2 x PP 2 x 2 model chunks${of:+ ($of)} -> mt" "$(oracle_why "$d/meg-vp-$i"; tail -2 "$d/ce")"; fi
        i=$((i + 1))
    done
else t_fail "a 4-layer run" "$(tail -2 "$d/t4.err")"; fi

# ---- experts over expert ranks (mp_rank_TT[_PPP]_EEE, each rank's local experts, the ChainedOptimizer's
# dense and expert states): read into the mt checkpoint they came from byte for byte, weights and moments,
# and mt-train --load continues them exactly as it continues that checkpoint ----
if [ "${trained[moe]}" = 0 ]; then
    for k in ep ep-etp1 epd epd-etp1 epg epdg; do
        if oracle_ok "$d/meg-$k" && mt-ckpt-convert --from megatron --load "$d/meg-$k" --save "$d/cm-$k" 2>"$d/ce" &&
            cmp -s "$d/cm-$k/iter_0000004/mp_rank_00/model.safetensors" "$smoe/model.safetensors" &&
            cmp -s "$d/cm-$k/iter_0000004/mp_rank_00/optim.safetensors" "$smoe/optim.safetensors"
        then t_pass "experts, $k ($(ls "$d/meg-$k/iter_0000004" | tr '\n' ' ')) -> mt: the original's weights and moments byte for byte"
        else t_fail "experts, $k -> mt: the original's weights and moments" "$(oracle_why "$d/meg-$k"; tail -2 "$d/ce")"; continue; fi
        cont=("${train[@]}" "${moe[@]}" --train-iters 6 --lr-decay-iters 40 --use-checkpoint-opt_param-scheduler)
        [ -e "$d/ma-moe.jsonl" ] || mt-train "${cont[@]}" --load "$d/ckmoe" --metrics-file "$d/ma-moe.jsonl" >/dev/null 2>"$d/ta.err"
        rm -f "$d/mb.jsonl"
        mt-train "${cont[@]}" --load "$d/cm-$k" --metrics-file "$d/mb.jsonl" >/dev/null 2>"$d/tb.err"
        continues "experts, $k" "$d/ma-moe.jsonl" "$d/mb.jsonl" 2 "$d/tb.err"
    done
else t_fail "an MoE run" "$(tail -2 "$d/tmoe.err")"; fi

# ---- errors: one line naming the file and key, nothing under --save ----
refused() {   # NAME WANT KEY: $d/meg-bad-KEY (its job above), less $REMOVE, converted
    local name=$1 want=$2 meg=$d/meg-bad-$3
    rm -rf "$d/bad"
    [ -n "$REMOVE" ] && rm -rf "$meg"/iter_*/"$REMOVE"
    if err1 mt-ckpt-convert --from megatron --load "$meg" --save "$d/bad" && grep -q -- "$want" "$d/e" && ! [ -e "$d/bad/latest_checkpointed_iteration.txt" ] \
        && [ -z "$(ls -A "$d/bad" 2>/dev/null)" ]
    then t_pass "$name: refused in one line ($(cut -c1-150 "$d/e"))"
    else t_fail "$name: refused in one line, nothing written" "$(cat "$d/e") $(ls -A "$d/bad" 2>/dev/null)"; fi
}
REMOVE=mp_rank_01_000 refused "a missing rank" "mp_rank_01_000/model_optim_rng.pt: missing" rank
REMOVE= refused "a missing key" "mp_rank_00/model_optim_rng.pt: no tensor 'language_model.encoder.layers.1.mlp.dense_4h_to_h.weight'" key
REMOVE= refused "a shape the args do not give" "mp_rank_00_000/model_optim_rng.pt: tensor 'language_model.encoder.layers.0.mlp.dense_h_to_4h.weight' has shape \[64, 32\], the args give \[68, 32\]" \
    shape
REMOVE= refused "an extra tensor" "model tensor 'language_model.encoder.layers.0.extra.weight' is not one of this model's" extra
REMOVE=mp_rank_00_001/distrib_optim.pt refused "a missing distrib_optim.pt" \
    "mp_rank_00_001/distrib_optim.pt: missing: the distributed optimizer's state" distrib
REMOVE= refused "distrib_optim.pt laid out with other buckets than the args say" \
    "mp_rank_00_000/distrib_optim.pt: buffer 0 holds 815568 elements (numel_unpadded); the model's parameters in Megatron-Core's buffer layout take 815616" \
    buckets
REMOVE= refused "distrib_optim.pt of before February 2024 (per-bucket tensors)" \
    "mp_rank_00/distrib_optim.pt: no 'buckets_coalesced'" per-bucket
REMOVE= refused "checkpoint_version 1.5 (no such version)" "checkpoint_version 1.5: not a version Megatron-LM wrote" version
REMOVE= refused "an expert tensor size not dividing tp in the args" \
    "mp_rank_00/model_optim_rng.pt: args: expert_tensor_parallel_size 3 does not divide tensor_model_parallel_size 2" etp
REMOVE=mp_rank_01_001 refused "a missing expert rank directory" "mp_rank_01_001/model_optim_rng.pt: missing" ep-rank
REMOVE=mp_rank_01_001 refused "ETP 1, held pairs, no directory of tensor rank 1 (nor expert rank 1)" \
    "mp_rank_01_000/model_optim_rng.pt: missing: no file of tensor rank 1" held
REMOVE=mp_rank_00_001/distrib_optim.pt refused "an expert rank's missing distrib_optim.pt" \
    "mp_rank_00_001/distrib_optim.pt: missing: the distributed optimizer's state" epd
REMOVE= refused "distrib_optim.pt's list of 1 (a ChainedOptimizer saves 2)" \
    "mp_rank_00_000/distrib_optim.pt: not a list of the two optimizers' states a ChainedOptimizer saves" dist-len
REMOVE= refused "a ChainedOptimizer's list of 3" \
    "mp_rank_00_000/model_optim_rng.pt: optimizer: a ChainedOptimizer's list of 3 states; Megatron's holds 2" chain
mkdir -p "$d/notmeg" && echo 3 >"$d/notmeg/latest_checkpointed_iteration.txt"
err1 mt-ckpt-convert --from megatron --load "$d/notmeg" --save "$d/bad2" && ! [ -e "$d/bad2" ] \
    && t_pass "a directory without model_optim_rng.pt refused ($(cat "$d/e"))" \
    || t_fail "a directory without model_optim_rng.pt refused" "$(cat "$d/e")"
