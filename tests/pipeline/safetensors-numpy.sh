#!/usr/bin/env bash
# safetensors-numpy.sh: the C safetensors code against an independent reader and writer written here with
# json + numpy: files the C writer makes (test_safetensors --write) are parsed and their header bytes and
# values checked; files written here (fixed and random, unpadded headers, unaligned data, any order) are read
# by the C reader (test_safetensors --read) and its listing compared; damaged files must be refused.
. "$(dirname "$0")/../lib.sh"
PY=/usr/bin/python3
BIN=$T_TOP/${MT_BUILD:-build}/tests/test_safetensors
if ! [ -x "$PY" ] || ! $PY -c 'import numpy' 2>/dev/null; then t_skip "numpy reference" "no /usr/bin/python3 with numpy"; exit 0; fi
[ -x "$BIN" ] || { t_fail "numpy reference" "$BIN not built"; exit 0; }
$PY - "$T_TMP" "$BIN" "$T_FILE" <<'PYEOF'
import json, os, random, struct, subprocess, sys
import numpy as np

tmp, binary, tfile = sys.argv[1], sys.argv[2], sys.argv[3]
failed = 0
def check(name, cond, why=""):
    global failed
    if cond:
        print("ok - %s: %s" % (tfile, name))
    else:
        failed += 1
        why = " ".join(str(why).split())   # one line, bounded
        print("not ok - %s: %s: %s" % (tfile, name, why[:400]))

NP = {"F64": "<f8", "F32": "<f4", "F16": "<f2", "I64": "<i8", "I32": "<i4", "I16": "<i2", "U8": "u1", "I8": "i1"}

# ---- independent reader ----
def read_st(path):
    b = open(path, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    raw = b[8:8 + n]
    hdr = json.loads(raw.decode("utf-8"))
    meta = hdr.pop("__metadata__", {})
    buf = b[8 + n:]
    out = {}
    for name, info in hdr.items():
        s, e = info["data_offsets"]
        out[name] = np.frombuffer(buf[s:e], dtype=NP[info["dtype"]]).reshape(info["shape"])
    return n, raw, hdr, meta, out, len(b)

# ---- the values test_safetensors --write uses ----
M = 2**64
def lcg(seed, count):
    s, out = seed, []
    for _ in range(count):
        s = (s * 6364136223846793005 + 1442695040888963407) % M
        out.append(s)
    return out

FIXED = [("language_model.embedding.word_embeddings.weight", "F32", [7, 5]), ("scalar", "F32", []),
         ("empty", "F32", [0, 3]), ("ids", "I64", [4]), ("counts", "I32", [2, 3]), ("bytes", "U8", [9]),
         ("big", "F32", [3, 4, 5, 2])]
def fixed_values(i, dt, shape):
    n = int(np.prod(shape)) if shape else 1
    xs = lcg(i + 1, n)
    if dt == "F32":
        a = np.array([((x >> 40) - 2**23) / 4096.0 for x in xs], dtype=np.float32)
    elif dt == "I64":
        a = np.array([x - M if x >= 2**63 else x for x in xs], dtype=np.int64)
    elif dt == "I32":
        a = np.array([x >> 32 for x in xs], dtype=np.uint64).astype(np.uint32).view(np.int32)
    else:
        a = np.array([x >> 56 for x in xs], dtype=np.uint8)
    return a.reshape(shape)

# ---- 1. the C writer ----
path = os.path.join(tmp, "c.safetensors")
r = subprocess.run([binary, "--write", path], capture_output=True, text=True)
check("C writer runs", r.returncode == 0, r.stderr)
if r.returncode == 0:
    n, raw, hdr, meta, got, size = read_st(path)
    check("header length is a multiple of 8, padded with spaces", n % 8 == 0 and
          raw.rstrip(b" ").endswith(b"}") and set(raw[len(raw.rstrip(b" ")):]) <= {0x20}, repr(raw[-16:]))
    # reference layout: __metadata__ first, compact JSON, tensors by dtype (wider first) then name, packed
    rank = {"I64": 20, "F32": 17, "I32": 15, "U8": 4}
    size_of = {"I64": 8, "F32": 4, "I32": 4, "U8": 1}
    want = {"__metadata__": {"format": "pt", "note": "\u00fcn\u00efcode \u2713 \"q\""}}
    off = 0
    for name, dt, shape in sorted(FIXED, key=lambda t: (-rank[t[1]], t[0].encode())):
        nb = (int(np.prod(shape)) if shape else 1) * size_of[dt]
        want[name] = {"dtype": dt, "shape": shape, "data_offsets": [off, off + nb]}
        off += nb
    want_bytes = json.dumps(want, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    check("header bytes as the reference writer's", raw.rstrip(b" ") == want_bytes,
          "\n got  %r\n want %r" % (raw.rstrip(b" ")[:300], want_bytes[:300]))
    check("file size is 8 + header + data", size == 8 + n + off, "%d != %d" % (size, 8 + n + off))
    check("metadata", meta == want["__metadata__"], repr(meta))
    for i, (name, dt, shape) in enumerate(FIXED):
        a = got.get(name)
        w = fixed_values(i, dt, shape)
        check("values of %s %s %s" % (name, dt, shape),
              a is not None and a.dtype == w.dtype and list(a.shape) == shape and np.array_equal(a, w),
              "got %r want %r" % (a, w))

# ---- 2. files written here, read by C ----
def write_st(path, tensors, meta=None, order=None, pretty=False, pad=False):
    """tensors: list of (name, dtype string, ndarray); order: list of names for the data layout."""
    names = order or [t[0] for t in tensors]
    by = {t[0]: t for t in tensors}
    hdr, data, off = {}, b"", 0
    for name in names:
        _, dt, a = by[name]
        bts = np.ascontiguousarray(a, dtype=NP[dt]).tobytes()
        hdr[name] = {"dtype": dt, "shape": list(a.shape), "data_offsets": [off, off + len(bts)]}
        data += bts
        off += len(bts)
    items = list(hdr.items())
    random.Random(len(items)).shuffle(items)   # header order is free
    h = dict(items)
    if meta is not None:
        h["__metadata__"] = meta
    text = json.dumps(h, indent=1 if pretty else None).encode("utf-8")
    if pad:
        text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + data)

def fmt(dt, a):
    vals = []
    for v in a.reshape(-1):
        if dt == "F32":
            vals.append("%.9g" % float(v))
        elif dt == "F64":
            vals.append("%.17g" % float(v))
        elif dt in ("I64", "I32", "U8"):
            vals.append("%d" % int(v))
        else:
            vals.append("?")
    return vals

def expected_listing(tensors, meta):
    lines = ["meta %s=%s" % kv for kv in (meta or {}).items()]
    for name, dt, a in sorted(tensors, key=lambda t: t[0].encode()):
        lines.append(" ".join(["tensor", name, dt, "[" + ", ".join(str(d) for d in a.shape) + "]"] + fmt(dt, a)))
    return lines

def c_read(path):
    r = subprocess.run([binary, "--read", path], capture_output=True)
    return r.returncode, r.stdout.decode("utf-8").splitlines(), r.stderr.decode("utf-8", "replace").strip()

fixed_py = [("b.u8", "U8", np.arange(5, dtype=np.uint8)),
            ("a.f32", "F32", np.array([[1.5, -2.25, 3e-38], [np.inf, -0.0, 7]], dtype=np.float32)),
            ("c.f64", "F64", np.array([np.pi, -1e300], dtype=np.float64)),
            ("d.i64", "I64", np.array([-(2**63), 2**63 - 1, 0], dtype=np.int64)),
            ("e.i32", "I32", np.zeros((0, 4), dtype=np.int32)),
            ("f.f16", "F16", np.array(0.5, dtype=np.float16)),
            ("g\u00e9", "F32", np.array([1], dtype=np.float32))]
meta = {"format": "np", "k\u00e9y": "v\u00e4lue"}
p = os.path.join(tmp, "py.safetensors")
write_st(p, fixed_py, meta, order=["b.u8", "a.f32", "e.i32", "c.f64", "f.f16", "d.i64", "g\u00e9"], pretty=True)
rc, lines, err = c_read(p)
check("C reads an unpadded, pretty, unaligned file", rc == 0 and lines == expected_listing(fixed_py, meta),
      "rc=%d %s\n got  %r\n want %r" % (rc, err, lines[:3], expected_listing(fixed_py, meta)[:3]))

rnd = random.Random(0x5AFE)
dts = ["F32", "F64", "I64", "I32", "U8"]
bad = 0
for case in range(60):
    ts = []
    for k in range(rnd.randint(0, 6)):
        dt = rnd.choice(dts)
        shape = tuple(rnd.choice([0, 1, 2, 3, 5]) for _ in range(rnd.randint(0, 4)))
        n = int(np.prod(shape)) if shape else 1
        if dt in ("F32", "F64"):
            a = np.array([rnd.uniform(-1e6, 1e6) for _ in range(n)], dtype=NP[dt]).reshape(shape)
        else:
            info = np.iinfo(NP[dt])
            a = np.array([rnd.randint(int(info.min), int(info.max)) for _ in range(n)], dtype=NP[dt]).reshape(shape)
        ts.append(("t%d.%s" % (k, rnd.choice(["weight", "bias", "x"])), dt, a))
    m = {"format": "pt"} if rnd.random() < 0.5 else None
    order = [t[0] for t in ts]
    rnd.shuffle(order)
    write_st(p, ts, m, order=order, pretty=rnd.random() < 0.3, pad=rnd.random() < 0.5)
    rc, lines, err = c_read(p)
    if rc != 0 or lines != expected_listing(ts, m):
        bad += 1
        if bad == 1:
            print("# case %d: rc=%d %s" % (case, rc, err), file=sys.stderr)
check("C reads 60 random files written here", bad == 0, "%d cases differ" % bad)

# ---- 3. damaged files written here are refused with the file named ----
def raw_file(path, header_bytes, data, hlen=None):
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(header_bytes) if hlen is None else hlen) + header_bytes + data)

def t(name, dtype, shape, offs):
    return {name: {"dtype": dtype, "shape": shape, "data_offsets": offs}}

damaged = [
    ("truncated data", json.dumps(t("x", "F32", [4], [0, 16])).encode(), b"\0" * 8, None, "run past the end"),
    ("header length beyond the file", b"{}", b"", 4096, "truncated: header length 4096"),
    ("huge header length", b"{}", b"", 2**62, "exceeds the limit"),
    ("bad JSON", b'{"x": {"dtype": "F32",', b"", None, "header JSON"),
    ("unknown dtype", json.dumps(t("x", "Q8", [1], [0, 1])).encode(), b"\0", None, "unknown dtype \"Q8\""),
    ("shape does not match offsets", json.dumps(t("x", "F32", [4, 4], [0, 12])).encode(), b"\0" * 12, None,
     "tensor 'x': data_offsets [0, 12] do not match shape [4, 4] F32 (64 bytes)"),
    ("overlapping tensors", json.dumps({**t("a", "F32", [2], [0, 8]), **t("b", "F32", [2], [4, 12])}).encode(),
     b"\0" * 12, None, "overlap"),
    ("gap between tensors", json.dumps({**t("a", "U8", [2], [0, 2]), **t("b", "U8", [2], [3, 5])}).encode(),
     b"\0" * 5, None, "leave a gap"),
    ("trailing bytes", json.dumps(t("a", "U8", [2], [0, 2])).encode(), b"\0" * 3, None, "1 bytes of data after"),
    ("duplicate names", b'{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}',
     b"\0", None, "duplicate"),
]
for name, hb, data, hlen, want in damaged:
    q = os.path.join(tmp, "bad-%s.safetensors" % name.replace(" ", "-"))
    raw_file(q, hb, data, hlen)
    rc, lines, err = c_read(q)
    check("refuses: " + name, rc != 0 and err.startswith(q + ": ") and want in err, "rc=%d err=%r" % (rc, err))
sys.exit(0)
PYEOF
