#!/usr/bin/env bash
# reshard.sh: mt-ckpt-convert --target-tensor-parallel-size / --target-pipeline-parallel-size. A
# checkpoint resharded to tp 2 x pp 2, tp 4 and pp 2 holds Megatron's rank directories with each rank's
# slices; it resumes (on one rank, read back whole) with the losses of the uninterrupted run, its
# optimizer state included; back to one rank it is byte-identical to the original; mt-eval and the
# Hugging Face export read it as they read the original; a missing shard, a layout the model does not
# allow, and rank copies that disagree are one-line errors.
. "$(dirname "$0")/../lib.sh"
PY=/usr/bin/python3
d=$T_TMP
export OMP_NUM_THREADS=2
err1() { "$@" >"$d/o" 2>"$d/e"; local rc=$?; [ $rc != 0 ] && [ "$(wc -l <"$d/e")" -eq 1 ]; }

$PY - >"$d/train.jsonl" <<'PYEOF'
import json
for i in range(120):
    print(json.dumps({"text": "def g%d(a, b=%d):\n    return [a + b * k for k in range(%d)]\n" % (i, i % 5, i % 9)}))
PYEOF
mt-tokenize --vocab-file "$GPT2_VOCAB" --merge-file "$GPT2_MERGES" --append-eod --quiet --input "$d/train.jsonl" \
    | mt-index --output-prefix "$d/data" 2>/dev/null
train() { mt-train --num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 32 --max-position-embeddings 32 \
        --micro-batch-size 2 --global-batch-size 4 --train-iters 10 --lr 5e-3 --lr-decay-style cosine --log-interval 1 \
        --eval-iters 0 --split 100,0,0 --seed 9 --vocab-file "$GPT2_VOCAB" --merge-file "$GPT2_MERGES" \
        --data-path "$d/data_text_document" --data-cache-path "$d/cache" "$@"; }
losses() { grep -oE 'iteration +[0-9]+/ +10 \|.*lm loss: [0-9.E+-]+' "$1" | sed -E 's/iteration +([0-9]+).*lm loss: ([0-9.E+-]+)/\1 \2/'; }
train --save "$d/ck" --save-interval 5 >"$d/full.log" 2>"$d/full.err" || { t_fail "training" "$(tail -2 "$d/full.err")"; exit 0; }
losses "$d/full.log" | awk '$1 > 5' >"$d/want"
[ "$(wc -l <"$d/want")" = 5 ] || t_fail "the uninterrupted run logged iterations 6-10" "$(cat "$d/want")"

for lay in "2 2" "4 1" "1 2"; do
    set -- $lay; t=$1 p=$2 name=tp$1pp$2
    if mt-ckpt-convert --load "$d/ck" --iteration 5 --save "$d/$name" --target-tensor-parallel-size "$t" \
            --target-pipeline-parallel-size "$p" 2>"$d/e"; then t_pass "$name: resharded"
    else t_fail "$name: resharded" "$(cat "$d/e")"; continue; fi
    want_dirs=$($PY -c "
t, p = $t, $p
print(' '.join(sorted(('mp_rank_%02d_%03d' % (i, j)) if p > 1 else 'mp_rank_%02d' % i for i in range(t) for j in range(p))))")
    [ "$(ls "$d/$name/iter_0000005" | tr '\n' ' ' | sed 's/ $//')" = "$want_dirs" ] && t_pass "$name: Megatron's rank directories" \
        || t_fail "$name: Megatron's rank directories" "$(ls "$d/$name/iter_0000005")"
    cp -r "$d/$name" "$d/$name-run"
    train --load "$d/$name-run" --save "$d/$name-run" >"$d/$name.log" 2>"$d/$name.err"
    losses "$d/$name.log" >"$d/got"
    if [ -s "$d/got" ] && cmp -s "$d/want" "$d/got"; then t_pass "$name: resumes with the uninterrupted run's losses (iterations 6-10)"
    else t_fail "$name: resumes with the uninterrupted run's losses" "$(paste "$d/want" "$d/got" | head -3) $(tail -1 "$d/$name.err")"; fi
done

# every rank's slices against Megatron's partition as tests/oracle/megatron_split.py states it from the spec
# (whole heads of q/k/v rows, column- and row-parallel splits, padded vocabulary rows, the head copy of the
# tied embeddings on the last stage): names, shapes and every value, the AdamW moments too
for lay in "2 2" "4 1" "1 2"; do
    set -- $lay
    if $PY "$T_TOP/tests/oracle/megatron_split.py" check "$d/ck/iter_0000005" "$d/tp$1pp$2/iter_0000005" "$1" "$2" >"$d/c" 2>&1
    then t_pass "tp$1pp$2: every rank's tensors are Megatron's slices ($(cat "$d/c"))"
    else t_fail "tp$1pp$2: every rank's tensors are Megatron's slices" "$(tail -1 "$d/c")"; fi
done
# and read back: slices written by the oracle (not by mt) gather into the original checkpoint's tensors
cp -r "$d/tp2pp2" "$d/oracle22"
$PY "$T_TOP/tests/oracle/megatron_split.py" write "$d/ck/iter_0000005" "$d/oracle22/iter_0000005" 2 2 2>"$d/e" \
    && mt-ckpt-convert --load "$d/oracle22" --save "$d/oracle-back" 2>>"$d/e" \
    && t_cmp "Megatron's tp2pp2 slices (from the oracle) -> tp1pp1: model.safetensors byte-identical to the original" \
        "$d/ck/iter_0000005/mp_rank_00/model.safetensors" "$d/oracle-back/iter_0000005/mp_rank_00/model.safetensors" \
    || t_fail "Megatron's tp2pp2 slices (from the oracle) -> tp1pp1" "$(tail -2 "$d/e")"

# slices: tp 2 x pp 2 holds half of the QKV rows of a layer on its stage, the head copy on the last stage
$PY - "$d/tp2pp2/iter_0000005" <<'PYEOF' >"$d/c" 2>&1 && t_pass "tp2pp2: each rank holds its slices" || t_fail "tp2pp2: slices" "$(tail -1 "$d/c")"
import json, struct, sys
def head(p):
    b = open(p, "rb").read(8 + 100000); n = struct.unpack("<Q", b[:8])[0]
    h = json.loads(b[8:8 + n]); h.pop("__metadata__", None); return h
a = head(sys.argv[1] + "/mp_rank_01_000/model.safetensors")
z = head(sys.argv[1] + "/mp_rank_00_001/model.safetensors")
assert a["language_model.encoder.layers.0.self_attention.query_key_value.weight"]["shape"] == [48, 32], a
assert a["language_model.embedding.word_embeddings.weight"]["shape"] == [50432 // 2, 32]   # padded for tp 2
assert "language_model.embedding.position_embeddings.weight" not in z
assert z["word_embeddings_for_head.weight"]["shape"] == [50432 // 2, 32], sorted(z)
assert "language_model.encoder.layers.0.input_layernorm.weight" in z      # stage 1's layer 1, local index 0
PYEOF

# back to one rank: byte-identical; the same evaluation and Hugging Face export
mt-ckpt-convert --load "$d/tp2pp2" --save "$d/back" 2>/dev/null
for f in model.safetensors optim.safetensors; do
    t_cmp "tp2pp2 -> tp1pp1: $f byte-identical to the original" "$d/ck/iter_0000005/mp_rank_00/$f" "$d/back/iter_0000005/mp_rank_00/$f"
done
printf '%s\n' '{"text": "def g3(a, b=3):\n    return a"}' >"$d/doc.jsonl"
mt-eval --load "$d/ck" --ckpt-step 5 --score <"$d/doc.jsonl" >"$d/s1" 2>"$d/e1"
mt-eval --load "$d/tp2pp2" --score <"$d/doc.jsonl" >"$d/s2" 2>"$d/e2"
if [ -s "$d/s1" ]; then t_cmp "mt-eval reads tp2pp2 as the original" "$d/s1" "$d/s2"
else t_fail "mt-eval reads tp2pp2 as the original" "no score: $(cat "$d/e1")"; fi
mt-ckpt-convert --load "$d/ck" --iteration 5 --to hf --out "$d/hf1" 2>/dev/null
mt-ckpt-convert --load "$d/tp2pp2" --to hf --out "$d/hf2" 2>/dev/null
t_cmp "--to hf from tp2pp2 = from one rank" "$d/hf1/model.safetensors" "$d/hf2/model.safetensors"

# errors
# a source holding a tensor of another model: the error comes before the new checkpoint is installed, so
# --save holds no tracker and no iteration (both were installed, then exit 1)
rm -rf "$d/odd" "$d/odd-out"; cp -r "$d/ck" "$d/odd"
$PY - "$d/odd/iter_0000005/mp_rank_00/model.safetensors" <<'PYEOF'
import json, struct, sys
p = sys.argv[1]; b = open(p, "rb").read(); n = struct.unpack("<Q", b[:8])[0]; h = json.loads(b[8:8 + n])
end = max(v["data_offsets"][1] for k, v in h.items() if k != "__metadata__")
h["extra.weight"] = {"dtype": "F32", "shape": [2], "data_offsets": [end, end + 8]}
s = json.dumps(h, separators=(",", ":")).encode(); s += b" " * (-len(s) % 8)
open(p, "wb").write(struct.pack("<Q", len(s)) + s + b[8 + n:] + b"\0" * 8)
PYEOF
if err1 mt-ckpt-convert --load "$d/odd" --iteration 5 --save "$d/odd-out" --target-tensor-parallel-size 2 &&
    grep -q "unexpected tensor 'extra.weight'" "$d/e" && [ -z "$(ls -A "$d/odd-out" 2>/dev/null)" ]; then
    t_pass "resharding a source with a foreign tensor: one-line error, nothing under --save (no tracker)"
else t_fail "resharding a source with a foreign tensor" "$(cat "$d/e"); --save holds: $(ls -A "$d/odd-out" 2>&1)"; fi
err1 mt-ckpt-convert --load "$d/ck" --save "$d/bad" --target-tensor-parallel-size 3 && grep -q 'tensor' "$d/e" \
    && t_pass "tp 3 of 4 heads: one-line error" || t_fail "tp 3 of 4 heads" "$(cat "$d/e")"
err1 mt-ckpt-convert --load "$d/ck" --save "$d/bad" --target-pipeline-parallel-size 3 && grep -q 'pipeline' "$d/e" \
    && t_pass "pp 3 of 2 layers: one-line error" || t_fail "pp 3 of 2 layers" "$(cat "$d/e")"
[ ! -e "$d/bad/latest_checkpointed_iteration.txt" ] || t_fail "nothing saved after an error" "$(ls "$d/bad")"
cp -r "$d/tp2pp2" "$d/miss"; rm -r "$d/miss/iter_0000005/mp_rank_01_001"
err1 mt-eval --load "$d/miss" --score <"$d/doc.jsonl" && grep -q 'mp_rank_01_001' "$d/e" \
    && t_pass "a missing shard: one-line error naming it" || t_fail "a missing shard" "$(cat "$d/e")"
cp -r "$d/tp2pp2" "$d/diff"
$PY - "$d/diff/iter_0000005/mp_rank_01_001/model.safetensors" <<'PYEOF'
import json, struct, sys
p = sys.argv[1]; b = bytearray(open(p, "rb").read()); n = struct.unpack("<Q", b[:8])[0]
h = json.loads(b[8:8 + n]); o = h["language_model.encoder.final_layernorm.weight"]["data_offsets"][0]
b[8 + n + o] ^= 1                                         # tensor rank 1's copy of a replicated tensor
open(p, "wb").write(b)
PYEOF
err1 mt-eval --load "$d/diff" --score <"$d/doc.jsonl" && grep -q "final_layernorm.weight' differs" "$d/e" \
    && t_pass "replicated copies that differ: one-line error" || t_fail "replicated copies that differ" "$(cat "$d/e")"

# the distributed optimizer's shards (2 data-parallel ranks) become each rank's optim.safetensors
if command -v mpirun >/dev/null; then
    export OMPI_MCA_mpi_yield_when_idle=1 OMPI_MCA_btl_base_warn_component_unused=0
    export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
    if OMP_NUM_THREADS=1 TMPDIR=$d timeout -k 5 180 mt-train -n 2 --use-distributed-optimizer --num-layers 2 --hidden-size 32 \
            --num-attention-heads 4 --seq-length 32 --max-position-embeddings 32 --micro-batch-size 2 --global-batch-size 4 \
            --train-iters 10 --lr 5e-3 --lr-decay-style cosine --log-interval 1 --eval-iters 0 --split 100,0,0 --seed 9 \
            --vocab-file "$GPT2_VOCAB" --merge-file "$GPT2_MERGES" --data-path "$d/data_text_document" \
            --data-cache-path "$d/cache" --save "$d/dist" --save-interval 5 >"$d/dist.log" 2>"$d/dist.err"; then
        ls "$d/dist/iter_0000005/mp_rank_00" | grep -q distrib_optim_001 && t_pass "DP=2 distributed-optimizer checkpoint" \
            || t_fail "DP=2 distributed-optimizer checkpoint" "$(ls "$d/dist/iter_0000005/mp_rank_00")"
        losses "$d/dist.log" | awk '$1 > 5' >"$d/want-dist"
        mt-ckpt-convert --load "$d/dist" --iteration 5 --save "$d/dist-tp2" --target-tensor-parallel-size 2 2>"$d/e" \
            || t_fail "reshard the distributed-optimizer checkpoint" "$(cat "$d/e")"
        grep -q 'with optimizer state' "$d/e" && [ -f "$d/dist-tp2/iter_0000005/mp_rank_01/optim.safetensors" ] \
            && t_pass "its moments resharded into optim.safetensors" || t_fail "its moments resharded" "$(cat "$d/e")"
        train --load "$d/dist-tp2" --save "$d/dist-tp2" >"$d/dist-tp2.log" 2>"$d/e"
        losses "$d/dist-tp2.log" >"$d/got"
        if [ -s "$d/got" ] && cmp -s "$d/want-dist" "$d/got"; then t_pass "resumed on one rank from tp2: the DP=2 run's losses (6-10)"
        else t_fail "resumed on one rank from tp2: the DP=2 run's losses" "$(paste "$d/want-dist" "$d/got" | head -3) $(tail -1 "$d/e")"; fi
    else t_fail "DP=2 distributed-optimizer training" "$(tail -2 "$d/dist.err")"; fi
else t_skip "distributed optimizer" "mpirun is not installed"; fi

# flag errors of mt-ckpt-convert and mt-eval --logits: one line, non-zero, nothing written
err1 mt-ckpt-convert --load "$d/ck" && grep -q 'nothing to do' "$d/e" \
    && t_pass "mt-ckpt-convert without a mode: one-line error" || t_fail "mt-ckpt-convert without a mode" "$(cat "$d/e")"
err1 mt-ckpt-convert --load "$d/ck" --to hf --out "$d/x-hf" --target-tensor-parallel-size 2 && [ ! -e "$d/x-hf" ] \
    && t_pass "--to hf with a target size: one-line error, nothing written" || t_fail "--to hf with a target size" "$(cat "$d/e")"
err1 mt-ckpt-convert --load "$d/ck" --to hf && grep -q -- '--out' "$d/e" \
    && t_pass "--to hf without --out: one-line error" || t_fail "--to hf without --out" "$(cat "$d/e")"
err1 mt-ckpt-convert --from hf --in "$d/ck" --save "$d/x-ck" --dtype bf16 && [ ! -e "$d/x-ck" ] \
    && t_pass "--from hf with --dtype: one-line error, nothing written" || t_fail "--from hf with --dtype" "$(cat "$d/e")"
err1 mt-ckpt-convert --load "$d/ck" --to hf --out "$d/x-hf" --dtype fp8 && [ ! -e "$d/x-hf" ] \
    && t_pass "--dtype fp8: one-line error" || t_fail "--dtype fp8" "$(cat "$d/e")"
err1 mt-eval --load "$d/ck" --logits "$d/x.f32" <"$d/doc.jsonl" && grep -q -- '--logits goes with --score' "$d/e" \
    && [ ! -e "$d/x.f32" ] && t_pass "mt-eval --logits without --score: one-line error" || t_fail "mt-eval --logits without --score" "$(cat "$d/e")"
err1 mt-eval --load "$d/ck" --score --logits "$d/no/such/dir/x.f32" <"$d/doc.jsonl" && grep -q 'no/such/dir' "$d/e" \
    && t_pass "mt-eval --logits into a missing directory: one-line error naming it" || t_fail "mt-eval --logits into a missing directory" "$(cat "$d/e")"
mt-eval --load "$d/ck" --score --logits "$d/ok.f32" <"$d/doc.jsonl" >/dev/null 2>&1
n=$(( $(stat -c %s "$d/ok.f32") / 4 / 50257 )); toks=$(mt-eval --load "$d/ck" --score <"$d/doc.jsonl" 2>/dev/null | grep -oE '"tokens": [0-9]+' | grep -oE '[0-9]+')
[ -n "$toks" ] && [ "$n" = "$toks" ] && [ $(( $(stat -c %s "$d/ok.f32") % (4 * 50257) )) = 0 ] \
    && t_pass "mt-eval --logits: one row of 50257 floats per scored token ($n)" || t_fail "mt-eval --logits rows" "$n rows, $toks tokens"
