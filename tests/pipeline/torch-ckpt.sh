#!/usr/bin/env bash
# torch-ckpt.sh: the C reader and writer of torch.save files (libcommon/ckpt/torch_*.h) against torch
# itself: (a) checkpoints torch.save writes, shaped like Megatron-LM's model_optim_rng.pt, listed by
# test_torch_ckpt --dump exactly as the same listing made here from torch.load's objects (values, tensor
# views and bytes, shared storages); (b) the C writer's file (test_torch_ckpt --write) read back by
# torch.load to the listing the writer printed, its zip checked by Python's zipfile; (c) a pickle that
# would run os.system refused by name and nothing run; (d) cut and damaged archives refused in one line.
. "$(dirname "$0")/../lib.sh"
PY=/usr/bin/python3
BIN=$T_TOP/${MT_BUILD:-build}/tests/test_torch_ckpt
if ! [ -x "$PY" ] || ! $PY -c 'import torch' 2>/dev/null; then t_skip "torch reference" "no /usr/bin/python3 with torch"; exit 0; fi
[ -x "$BIN" ] || { t_fail "torch reference" "$BIN not built"; exit 0; }
# Megatron's enum module, as a checkpoint's args name it
mkdir -p "$T_TMP/py/megatron/core"
: >"$T_TMP/py/megatron/__init__.py"; : >"$T_TMP/py/megatron/core/__init__.py"
printf 'import enum\nclass ModelType(enum.Enum):\n    encoder_or_decoder = 1\n    encoder_and_decoder = 2\n' \
    >"$T_TMP/py/megatron/core/enums.py"
PYTHONPATH=$T_TMP/py $PY - "$T_TMP" "$BIN" "$T_FILE" <<'PYEOF'
import argparse, collections, enum, io, os, pickle, struct, subprocess, sys, zipfile
import numpy, random
import torch
from megatron.core.enums import ModelType

tmp, binary, tfile = sys.argv[1], sys.argv[2], sys.argv[3]
failed = 0
def check(name, cond, why=""):
    global failed
    if cond:
        print("ok - %s: %s" % (tfile, name))
    else:
        failed += 1
        print("not ok - %s: %s: %s" % (tfile, name, " ".join(str(why).split())[:600]))

DT = {torch.float32: "F32", torch.bfloat16: "BF16", torch.float16: "F16", torch.int64: "I64", torch.float64: "F64",
      torch.int32: "I32", torch.int16: "I16", torch.int8: "I8", torch.uint8: "U8", torch.bool: "BOOL"}
def esc(s):
    return "".join(chr(c) if 0x20 < c < 0x7f and c != 0x5c else "\\x%02x" % c for c in s.encode("utf-8"))

def listing(root):
    out, sids = [], []
    def key(k):
        return esc(k) if isinstance(k, str) else "#%d" % k if isinstance(k, int) and not isinstance(k, bool) else "?"
    def val(path, v):
        if v is None: out.append(path + " none")
        elif isinstance(v, bool): out.append("%s bool %d" % (path, v))
        elif isinstance(v, enum.Enum):
            out.append("%s enum %s.%s %s" % (path, type(v).__module__, type(v).__qualname__, esc(v.name)))
        elif isinstance(v, int): out.append("%s int %s" % (path, hex(v)))
        elif isinstance(v, float): out.append("%s float %s" % (path, struct.pack(">d", v).hex()))
        elif isinstance(v, str): out.append("%s str %s" % (path, esc(v)))
        elif isinstance(v, bytes): out.append("%s bytes %s" % (path, v.hex()))
        elif isinstance(v, torch.dtype): out.append("%s global %s" % (path, v))
        elif v is numpy.ndarray: out.append("%s global numpy.ndarray" % path)
        elif isinstance(v, (numpy.ndarray, numpy.dtype)):   # as pickle saw it: function, arguments, state
            f, a, st = v.__reduce__()
            out.append("%s opaque %s.%s" % (path, f.__module__, f.__name__))
            val(path + "()", a)
            val(path + "~", st)
        elif isinstance(v, (list, tuple)):
            out.append("%s %s %d" % (path, "list" if isinstance(v, list) else "tuple", len(v)))
            for i, x in enumerate(v): val("%s[%d]" % (path, i), x)
        elif isinstance(v, dict):
            out.append("%s %s %d" % (path, "odict" if isinstance(v, collections.OrderedDict) else "dict", len(v)))
            for k, x in v.items(): val(path + "/" + key(k), x)
            attrs = getattr(v, "__dict__", {})
            if attrs: val(path + "@", attrs)
        elif isinstance(v, argparse.Namespace):
            d = vars(v)
            out.append("%s object argparse.Namespace %d" % (path, len(d)))
            for k, x in d.items(): val(path + "." + key(k), x)
        elif isinstance(v, torch.Tensor):
            st = v.storage()
            if st.data_ptr() not in sids: sids.append(st.data_ptr())
            raw = v.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes().hex() if v.numel() else "-"
            out.append("%s tensor %s sid=%d numel=%d off=%d shape=[%s] stride=[%s] rg=%d %s" % (
                path, DT[v.dtype], sids.index(st.data_ptr()), st.size(), v.storage_offset(),
                ",".join(map(str, v.shape)), ",".join(map(str, v.stride())), v.requires_grad, raw))
        else: out.append("%s ? %r" % (path, type(v)))
    val("$", root)
    return out

def c_dump(path):
    r = subprocess.run([binary, "--dump", path], capture_output=True)
    return r.returncode, r.stdout.decode("utf-8", "replace").splitlines(), r.stderr.decode("utf-8", "replace")

def first_diff(a, b):
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y: return "line %d:\n got  %s\n want %s" % (i, x[:200], y[:200])
    return "lengths %d and %d" % (len(a), len(b))

# ---- (a) torch.save's files read by C ----
g = torch.Generator().manual_seed(5)
base = torch.randn(40, generator=g)
sd = collections.OrderedDict()
sd["language_model.embedding.word_embeddings.weight"] = torch.randn(8, 6, generator=g)
sd["layers.0.attention.query_key_value.weight"] = torch.randn(3, 5, generator=g).to(torch.bfloat16)
sd["layers.0.mlp.dense_h_to_4h.bias"] = torch.randn(7, generator=g).to(torch.float16)
sd["view"] = base[10:22].view(3, 4)            # storage offset 10
sd["shared"] = base[30:34]                      # same storage, another view
sd["position_ids"] = torch.arange(-3, 9, dtype=torch.int64).reshape(2, 6)
sd["scalar"] = torch.tensor(2.5, dtype=torch.float64)
sd["empty"] = torch.zeros(0, 4)
sd["flags"] = torch.tensor([True, False, True])
sd._metadata = collections.OrderedDict([("", {"version": 1}), ("language_model", {"version": 1})])
args = argparse.Namespace(num_layers=2, hidden_size=6, lr=3e-4, min_lr=0.0, tokenizer_type="GPT2BPETokenizer",
                          split="969,30,1", data_path=["1.0", "/data/x_text_document"], load=None, bf16=True,
                          fp16=False, params_dtype=torch.bfloat16, model_type=ModelType.encoder_or_decoder,
                          seed=1234, weird="\u00fcn\u00efcode \u2713 \\ q")
state = {"args": args, "checkpoint_version": 3.0, "iteration": 2000, "model": sd,
         "opt_param_scheduler": {"max_lr": 3e-4, "num_steps": 64000, "decay_style": "cosine"},
         "nested": {"a": {"b": [1, (2, 3.5), {"c": None}]}, 7: "int key", -1: -2**31 - 1},
         "rng_state": [{"random_rng_state": random.Random(3).getstate(),
                        "np_rng_state": numpy.random.RandomState(3).get_state(),
                        "torch_rng_state": torch.Generator().manual_seed(3).get_state()}],
         "np_f32": numpy.arange(6, dtype=numpy.float32).reshape(2, 3),
         "big": 2**70 + 12345, "neg_big": -(2**64), "max": 2**63 - 1, "min": -2**63, "bytes": b"\x00\xffraw"}
for name, kw in (("default", {}), ("protocol-4", {"pickle_protocol": 4})):
    p = os.path.join(tmp, "torch-%s.pt" % name)
    torch.save(state, p, **kw)
    want = listing(torch.load(p))
    rc, got, err = c_dump(p)
    check("C reads torch.save's %s file as torch.load does (%d values)" % (name, len(want)),
          rc == 0 and got == want, err if rc else first_diff(got, want))
# a whole model's state dict with requires_grad parameters
m = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.LayerNorm(3))
p = os.path.join(tmp, "module.pt")
torch.save({"model": m.state_dict(keep_vars=True), "params": list(m.parameters())}, p)
want = listing(torch.load(p))
rc, got, err = c_dump(p)
check("C reads nn.Parameters and a module's state dict", rc == 0 and got == want, err if rc else first_diff(got, want))

# ---- (b) the C writer's file read by torch ----
p = os.path.join(tmp, "c.pt")
r = subprocess.run([binary, "--write", p], capture_output=True)
check("C writer runs", r.returncode == 0, r.stderr)
if r.returncode == 0:
    want = r.stdout.decode("utf-8").splitlines()
    got = listing(torch.load(p))
    check("torch.load reads the C writer's file to what it wrote (%d values)" % len(want), got == want, first_diff(got, want))
    z = zipfile.ZipFile(p)
    check("zipfile: CRCs and sizes", z.testzip() is None)
    infos = z.infolist()
    raw = open(p, "rb").read()
    offs = [i.header_offset + 30 + sum(struct.unpack("<HH", raw[i.header_offset + 26:i.header_offset + 30])) for i in infos]
    check("entries stored, data at multiples of 64, names under one archive name",
          all(i.compress_type == 0 for i in infos) and all(o % 64 == 0 for o in offs) and
          len({i.filename.split("/")[0] for i in infos}) == 1 and z.read("fixed/version") == b"3\n",
          [(i.filename, o) for i, o in zip(infos, offs)])
    check("no temporary left beside it", sorted(x for x in os.listdir(tmp) if x.startswith(".")) == [])

# ---- (c) a pickle that would run code ----
flag = os.path.join(tmp, "ran")
class Evil:
    def __reduce__(self):
        return (os.system, ("touch " + flag,))
def torch_zip(path, pkl, prefix="archive", method=zipfile.ZIP_STORED):
    with zipfile.ZipFile(path, "w", method) as z:
        z.writestr(prefix + "/data.pkl", pkl)
        z.writestr(prefix + "/version", "3\n")
p = os.path.join(tmp, "evil.pt")
torch_zip(p, pickle.dumps({"model": Evil()}, protocol=2))
rc, got, err = c_dump(p)
check("a pickle calling os.system is refused naming it, nothing run",
      rc != 0 and "pickle global posix.system is not allowed" in err and not os.path.exists(flag), "rc=%d %s" % (rc, err))
torch_zip(p, b"\x80\x02cbuiltins\neval\nX\x04\x00\x00\x001+1q\x00\x85R.")
rc, got, err = c_dump(p)
check("builtins.eval refused", rc != 0 and "pickle global builtins.eval is not allowed" in err, err)

# ---- (d) damaged archives: one line naming the file, no crash ----
good = open(os.path.join(tmp, "torch-default.pt"), "rb").read()
n, bad, cases = len(good), [], [0]
q = os.path.join(tmp, "bad.pt")
def refused(name, data, want=""):
    cases[0] += 1
    open(q, "wb").write(data)
    rc, got, err = c_dump(q)
    lines = err.strip().splitlines()
    if not (rc == 1 and len(lines) == 1 and lines[0].startswith("test_torch_ckpt: " + q + ": ") and want in err):
        bad.append("%s: rc=%d %s" % (name, rc, err.strip()[:200]))
for cut in sorted({0, 1, 21, 22, 100, n // 3, n // 2, n - 200, n - 100, n - 57, n - 22, n - 21, n - 1}):
    refused("cut at %d" % cut, good[:cut])
eocd = good.rfind(b"PK\x05\x06")
refused("central directory offset past the end", good[:eocd + 16] + struct.pack("<I", n + 10) + good[eocd + 20:])
loc = good.rfind(b"PK\x06\x07")
e64 = struct.unpack("<Q", good[loc + 8:loc + 16])[0]
z64 = good[:e64 + 48] + struct.pack("<Q", 1 << 40) + good[e64 + 56:]
refused("zip64 central directory offset past the end", z64[:eocd + 16] + b"\xff" * 4 + z64[eocd + 20:],
        "central directory")
refused("end records that disagree", z64, "disagree")
refused("zip64 end record offset wrong", good[:loc + 8] + struct.pack("<Q", 3) + good[loc + 16:], "zip64 end record")
cz = os.path.join(tmp, "deflated.pt")
torch_zip(cz, pickle.dumps({"a": 1}, protocol=2), method=zipfile.ZIP_DEFLATED)
refused("a compressed entry", open(cz, "rb").read(), "is compressed (method 8)")
i = good.find(b"data.pkl") + 100
refused("a flipped byte in data.pkl", good[:i] + bytes([good[i] ^ 0x40]) + good[i + 1:], "CRC-32")
refused("not a zip", b"\x80\x02}q\x00." * 10, "not a zip archive")
check("%d damaged archives refused in one line naming the file" % cases[0], not bad, "; ".join(bad))
sys.exit(0)
PYEOF
