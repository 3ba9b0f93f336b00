#!/usr/bin/env bash
# make-seeds.sh: writes the seed corpus of every fuzz target (fuzz/corpus/<target>/) from the programs'
# own outputs on tiny inputs, so that each seed is a valid input the fuzzer mutates from. Run from the
# top directory after `make` and `make fuzz-build`; the corpus is committed, this script says where it
# came from. Needs Debian's python3 with numpy.
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
PATH=$top/build/bin:$PATH
c=fuzz/corpus
t=$(mktemp -d)
trap 'rm -rf "$t"' EXIT
sep=$'\n--8<--\n'
join() { local out=$1 first=1; shift; : >"$out"; for f in "$@"; do [ $first = 1 ] || printf '%s' "$sep" >>"$out"; first=0; cat "$f" >>"$out"; done; }
mkdir -p $c/{jsonl,tokstream,indexed,npy,gpt_cache,safetensors,hf_dir,ckpt,bpe,tiktoken,flags,torch_ckpt,serve_request,chat_template}

# JSON lines: documents and prompts as the programs see them
printf '%s' '{"text": "def f(x):\n    return x"}' >$c/jsonl/doc
printf '%s' '{"text": "a\u0000b", "content": "\ud83d\ude00 \ud800"}' >$c/jsonl/escapes
printf '%s' '{"content": ["not", "a", "string"], "text": null}' >$c/jsonl/types
printf '%s' '[1, 2, {"text": "x"}]' >$c/jsonl/array

# mt-serve's request bodies: text, lists, token ids, a stream, and one of every kind of mistake
printf '%s' '{"prompt": "def add(a, b):", "max_tokens": 16, "temperature": 0}' >$c/serve_request/text
printf '%s' '{"prompt": ["import os", "x = 1"], "n": 2, "seed": 7, "top_k": 40, "top_p": 0.9, "stop": ["\n", "def"], "echo": true}' \
    >$c/serve_request/list
printf '%s' '{"prompt": [[4299, 277], [87]], "logprobs": 0, "max_tokens": 8, "model": "ck"}' >$c/serve_request/ids
printf '%s' '{"prompt": "caf\u00e9 \ud83d\ude00", "stream": true, "stream_options": {"include_usage": true}, "repetition_penalty": 1.2}' \
    >$c/serve_request/stream
printf '%s' '{"prompt": [1, "x"], "bogus": null, "temperature": "hot"}' >$c/serve_request/bad

# chat templates (tests/golden/chat), each with a NUL and messages of its own, one content not a string
for f in tests/golden/chat/*.jinja; do
    { cat "$f"; printf '\0%s' '[{"role": "user", "content": "a"}, {"role": "assistant", "content": " b "}, {"role": "user", "content": [1]}]'; } \
        >$c/chat_template/"$(basename "$f" .jinja)"
done

# the token stream and the indexed dataset it becomes
printf '%s\n' '{"text": "hello world"}' '{"text": ""}' '{"text": "the cat sat on the mat"}' >"$t/docs.jsonl"
mt-tokenize --vocab-file share/gpt2/vocab.json --merge-file share/gpt2/merges.txt --json-keys text --append-eod \
    <"$t/docs.jsonl" >$c/tokstream/gpt2
zstd -q -c $c/tokstream/gpt2 >$c/tokstream/gpt2.zst
mt-index --output-prefix "$t/ds" <$c/tokstream/gpt2 >/dev/null
join $c/indexed/gpt2 "$t/ds_text_document.idx" "$t/ds_text_document.bin"

# .npy files of the shapes and dtypes the caches use, and numpy's other header versions
/usr/bin/python3 - "$c/npy" <<'PY'
import sys, numpy as np, io
d = sys.argv[1]
np.save(f"{d}/i4.npy", np.arange(7, dtype="<i4"))
np.save(f"{d}/i8x2.npy", np.arange(10, dtype="<i8").reshape(5, 2))
np.save(f"{d}/u4.npy", np.arange(3, dtype="<u4"))
np.save(f"{d}/fortran.npy", np.asfortranarray(np.arange(6, dtype="<i4").reshape(2, 3)))
b = io.BytesIO(); np.lib.format.write_array(b, np.arange(4, dtype="<i4"), version=(2, 0))
open(f"{d}/v2.npy", "wb").write(b.getvalue())
PY

# the index cache of a fixed dataset (the target writes its own valid seed)
MT_FUZZ_SEED=$c/gpt_cache/valid build-fuzz/fuzz/fuzz_gpt_cache

# a tiny checkpoint (NullTokenizer) and a tiny Hugging Face GPT-2 directory, whole and sharded
PYTHONPATH=tests/oracle /usr/bin/python3 tests/oracle/walk_data.py "$t/walk" 1 20
mt-train --num-layers 1 --hidden-size 8 --num-attention-heads 2 --seq-length 8 --max-position-embeddings 8 \
    --tokenizer-type NullTokenizer --vocab-size 60 --make-vocab-size-divisible-by 4 --micro-batch-size 1 \
    --global-batch-size 1 --lr 1e-3 --train-iters 1 --eval-iters 0 --split 100,0,0 --data-path "$t/walk" \
    --data-cache-path "$t/cache" --save "$t/ck" >/dev/null 2>&1
r=$t/ck/iter_0000001/mp_rank_00
join $c/ckpt/iter1 "$t/ck/latest_checkpointed_iteration.txt" "$r/meta.json" "$r/model.safetensors"
cp "$r/model.safetensors" $c/safetensors/ckpt-model
cp "$r/optim.safetensors" $c/safetensors/ckpt-optim
/usr/bin/python3 - "$t/hf" "$c/safetensors" <<'PY'
import sys, json, struct, numpy as np
d, sd = sys.argv[1], sys.argv[2]
import os; os.makedirs(d, exist_ok=True)
def st(path, tensors, dt="F32"):
    hdr, off, blobs = {"__metadata__": {"format": "pt"}}, 0, []
    for name, a in tensors.items():
        a = np.ascontiguousarray(a, dtype={"F32": "<f4", "F16": "<f2"}[dt]); b = a.tobytes()
        hdr[name] = {"dtype": dt, "shape": list(a.shape), "data_offsets": [off, off + len(b)]}
        off += len(b); blobs.append(b)
    h = json.dumps(hdr, separators=(",", ":")).encode(); h += b" " * (-len(h) % 8)
    open(path, "wb").write(struct.pack("<Q", len(h)) + h + b"".join(blobs))
rs = np.random.RandomState(0)
L, H, V, P = 1, 8, 16, 8
t = {"wte.weight": rs.randn(V, H), "wpe.weight": rs.randn(P, H)}
for i in range(L):
    p = f"h.{i}."
    t.update({p + "ln_1.weight": np.ones(H), p + "ln_1.bias": np.zeros(H),
              p + "attn.c_attn.weight": rs.randn(H, 3 * H), p + "attn.c_attn.bias": rs.randn(3 * H),
              p + "attn.c_proj.weight": rs.randn(H, H), p + "attn.c_proj.bias": rs.randn(H),
              p + "ln_2.weight": np.ones(H), p + "ln_2.bias": np.zeros(H),
              p + "mlp.c_fc.weight": rs.randn(H, 4 * H), p + "mlp.c_fc.bias": rs.randn(4 * H),
              p + "mlp.c_proj.weight": rs.randn(4 * H, H), p + "mlp.c_proj.bias": rs.randn(H)})
t.update({"ln_f.weight": np.ones(H), "ln_f.bias": np.zeros(H)})
cfg = {"activation_function": "gelu_new", "architectures": ["GPT2LMHeadModel"], "bos_token_id": 15,
       "eos_token_id": 15, "layer_norm_epsilon": 1e-05, "model_type": "gpt2", "n_embd": H, "n_head": 2,
       "n_inner": None, "n_layer": L, "n_positions": P, "vocab_size": V, "tie_word_embeddings": True}
json.dump(cfg, open(f"{d}/config.json", "w"), indent=2)
st(f"{d}/model.safetensors", t)
st(f"{sd}/hf-f16", t, "F16")
names = list(t); half = len(names) // 2
parts = [{k: t[k] for k in names[:half]}, {"transformer." + k: t[k] for k in names[half:]}]
wm = {}
for i, part in enumerate(parts):
    fn = f"model-0000{i + 1}-of-00002.safetensors"
    st(f"{d}/{fn}", part)
    wm.update({k: fn for k in part})
json.dump({"metadata": {"total_size": 0}, "weight_map": wm}, open(f"{d}/index.json", "w"), indent=2)
PY
: >"$t/empty"
join $c/hf_dir/whole "$t/hf/config.json" "$t/empty" "$t/hf/model.safetensors"
join $c/hf_dir/sharded "$t/hf/config.json" "$t/hf/index.json" "$t/hf/model-00001-of-00002.safetensors" \
    "$t/hf/model-00002-of-00002.safetensors"

# a byte-level BPE tokenizer of a few merges, and a text
/usr/bin/python3 - "$t" <<'PY'
import sys, json
d = sys.argv[1]
bs = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256)); cs = bs[:]; n = 0
for b in range(256):
    if b not in bs: bs.append(b); cs.append(256 + n); n += 1
sym = {b: chr(c) for b, c in zip(bs, cs)}
vocab = {sym[b]: b for b in range(256)}
merges = ["\u0120 t", "h e", "\u0120t he", "a t", "\u0120 c"]
for m in merges:
    vocab.setdefault(m.replace(" ", ""), len(vocab))
vocab["<|endoftext|>"] = len(vocab)
json.dump(vocab, open(f"{d}/vocab.json", "w"), ensure_ascii=False)
open(f"{d}/merges.txt", "w").write("#version: 0.2\n" + "\n".join(merges) + "\n")
open(f"{d}/text", "w").write("the cat ate the hat<|endoftext|> \u00e9\u4e2d 123\n\n")
PY
join $c/bpe/tiny "$t/vocab.json" "$t/merges.txt" "$t/text"

# Megatron's TikTokenizer JSON ranks (the 256 bytes, then a few merged tokens) and a text
/usr/bin/python3 - "$t" <<'PY'
import base64, json, sys
d = sys.argv[1]
toks = [bytes([i]) for i in range(256)] + [b"th", b"the", b" the", b"at", b" c", b" cat", "\u00e9".encode()]
json.dump([{"rank": i, "token_bytes": base64.b64encode(t).decode(), "token_str": t.decode("utf-8", "replace")}
           for i, t in enumerate(toks)], open(f"{d}/ranks.json", "w"))
PY
join $c/tiktoken/tiny "$t/ranks.json" "$t/text"

# command lines (NUL-separated words)
printf '%s\0' --num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 32 --max-position-embeddings 32 \
    --micro-batch-size 2 --global-batch-size 8 --lr 1e-3 --train-iters 10 --split 969,30,1 --data-path 0.3 a 0.7 b \
    --tokenizer-type NullTokenizer --vocab-size 60 >$c/flags/train
printf '%s\0' --num-layers=1 --hidden-size=8 --num-attention-heads=2 --seq-length=8 --max-position-embeddings=8 \
    --micro-batch-size=1 --global-batch-size=1 --lr=0.1 --train-samples=100 --split=1,0,0 --data-path=x --bf16 \
    --lr-decay-style cosine --lr-warmup-fraction .01 --tensor-model-parallel-size 2 >$c/flags/equals

# torch.save files: one written by torch (a Megatron-like state dict; Debian's python3-torch, with a stand-in
# for Megatron's enum module), its data.pkl alone, and the C writer's (test_torch_ckpt --write)
mkdir -p "$t/py/megatron/core"
: >"$t/py/megatron/__init__.py"; : >"$t/py/megatron/core/__init__.py"
printf 'import enum\nclass ModelType(enum.Enum):\n    encoder_or_decoder = 1\n' >"$t/py/megatron/core/enums.py"
PYTHONPATH=$t/py /usr/bin/python3 - "$c/torch_ckpt" <<'PY'
import sys, torch, argparse, collections, zipfile
from megatron.core.enums import ModelType
d = sys.argv[1]
base = torch.arange(12, dtype=torch.float32)
sd = collections.OrderedDict(w=base[2:8].view(2, 3), b=torch.ones(3, dtype=torch.bfloat16),
                             h=torch.tensor(1.5, dtype=torch.float16), i=torch.arange(3))
sd._metadata = collections.OrderedDict([("", {"version": 1})])
args = argparse.Namespace(num_layers=2, lr=3e-4, load=None, bf16=True, params_dtype=torch.bfloat16,
                          model_type=ModelType.encoder_or_decoder, split=[969, 30, 1], name="x")
torch.save({"args": args, "checkpoint_version": 3.0, "iteration": 20, "model": sd, "big": 2**70, "b": b"\x00\xff"},
           d + "/torch-save.pt")
# transposed views of one storage and args in a types.SimpleNamespace, as transformers' converter toward
# Megatron saves them, and a Transformer Engine _extra_state (an io.BytesIO)
import io, types
m = torch.arange(24, dtype=torch.float32).view(4, 6)
buf = io.BytesIO()
torch.save(None, buf)
torch.save({"args": types.SimpleNamespace(num_layers=1, params_dtype=torch.float32), "checkpoint_version": 3.0,
            "model": {"a": m.t(), "b": torch.chunk(m.t(), 2, dim=1)[1], "c._extra_state": buf}}, d + "/views.pt")
# the distributed optimizer's distrib_optim.pt: int keys, a tuple of dtypes as a key, flat tensors
w = torch.arange(8, dtype=torch.float32)
torch.save({"buckets_coalesced": True, 0: {(torch.bfloat16, torch.float32): {"param": w, "exp_avg": w * 2,
            "exp_avg_sq": w * 3, "numel_unpadded": 8}}}, d + "/distrib_optim.pt")
z = zipfile.ZipFile(d + "/torch-save.pt")
open(d + "/data.pkl", "wb").write(z.read([n for n in z.namelist() if n.endswith("/data.pkl")][0]))
PY
build/tests/test_torch_ckpt --write $c/torch_ckpt/c-writer.pt >/dev/null
