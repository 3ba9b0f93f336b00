#!/usr/bin/env bash
# tensorboard.sh: an event file written by libcommon/report/tensorboard.c (test_tensorboard --write DIR)
# read back by an independent pure-Python TFRecord/protobuf decoder: file name, every length and data
# CRC32C (bitwise implementation), the file_version record, and each event's wall time, step, tag and
# float32 value (or text tensor) against the list the writer was asked to write; and TensorBoard's own
# EventAccumulator (the tensorboard package of tests/oracle/venv.sh, which make deps installs; skipped
# only when PyPI cannot be reached) reads the same scalars.
. "$(dirname "$0")/../lib.sh"
PY=/usr/bin/python3
BIN=$T_TOP/${MT_BUILD:-build}/tests/test_tensorboard
if ! [ -x "$PY" ]; then t_skip "event file decoder" "no /usr/bin/python3"; exit 0; fi
[ -x "$BIN" ] || { t_fail "event file decoder" "$BIN not built"; exit 0; }
TBPY=$("$T_TOP/tests/oracle/venv.sh" 2>"$T_TMP/venv.err") || TBPY=
$PY - "$BIN" "$T_TMP/logs" "$TBPY" "$(head -c 200 "$T_TMP/venv.err")" <<'PYEOF'
import math, os, re, socket, struct, subprocess, sys, time

binary, logdir = sys.argv[1], sys.argv[2]
T = "tensorboard.sh"
def ok(name): print("ok - %s: %s" % (T, name))
def bad(name, why): print("not ok - %s: %s: %s" % (T, name, why))

t0 = time.time()
p = subprocess.run([binary, "--write", logdir], capture_output=True, text=True)
t1 = time.time()
if p.returncode != 0:
    bad("write", "exit %d: %s" % (p.returncode, p.stderr[:300])); sys.exit(0)
_, pid, path = p.stdout.split()
files = os.listdir(logdir)
m = re.fullmatch(r"events\.out\.tfevents\.(\d{10})\.(.+)\.(\d+)\.(\d+)", os.path.basename(path))
if files == [os.path.basename(path)] and m and m.group(2) == socket.gethostname() and m.group(3) == pid \
        and m.group(4) == "0" and int(t0) <= int(m.group(1)) <= int(t1):
    ok("file name events.out.tfevents.<secs>.<host>.<pid>.0")
else:
    bad("file name", "%s in %s" % (path, files))

# ---- CRC32C, bit by bit (independent of the C table code) ----
def crc32c(data):
    c = 0xFFFFFFFF
    for b in data:
        c ^= b
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
    return c ^ 0xFFFFFFFF
def masked(data):
    c = crc32c(data)
    return ((((c >> 15) | (c << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF
assert crc32c(b"123456789") == 0xE3069283

# ---- TFRecord frames ----
raw = open(path, "rb").read()
records, pos, crc_errors = [], 0, []
while pos < len(raw):
    if pos + 12 > len(raw):
        crc_errors.append("truncated header at %d" % pos); break
    (n,) = struct.unpack_from("<Q", raw, pos)
    (lc,) = struct.unpack_from("<I", raw, pos + 8)
    if lc != masked(raw[pos:pos + 8]):
        crc_errors.append("length crc at %d" % pos)
    data = raw[pos + 12:pos + 12 + n]
    if len(data) != n or pos + 16 + n > len(raw):
        crc_errors.append("truncated record at %d" % pos); break
    (dc,) = struct.unpack_from("<I", raw, pos + 12 + n)
    if dc != masked(data):
        crc_errors.append("data crc at %d" % pos)
    records.append(data)
    pos += 16 + n
if crc_errors: bad("TFRecord framing and CRCs", "; ".join(crc_errors[:3]))
else: ok("TFRecord framing and CRCs (%d records)" % len(records))

# ---- protobuf wire format ----
def varint(b, i):
    v = s = 0
    while True:
        x = b[i]; i += 1
        v |= (x & 0x7F) << s; s += 7
        if not x & 0x80: return v, i
def fields(b):
    """list of (field number, wire type, value); raises on malformed input"""
    out, i = [], 0
    while i < len(b):
        key, i = varint(b, i)
        f, w = key >> 3, key & 7
        if w == 0: v, i = varint(b, i)
        elif w == 1: v = b[i:i + 8]; i += 8
        elif w == 5: v = b[i:i + 4]; i += 4
        elif w == 2:
            n, i = varint(b, i); v = b[i:i + n]; i += n
        else: raise ValueError("wire type %d" % w)
        if i > len(b): raise ValueError("overrun")
        out.append((f, w, v))
    return out
def s64(u): return u - (1 << 64) if u >= 1 << 63 else u

def decode_event(b):
    ev = {"wall_time": 0.0, "step": 0, "values": []}
    order = [f for f, _, _ in fields(b)]
    if order != sorted(order): raise ValueError("fields out of order %s" % order)
    for f, w, v in fields(b):
        if f == 1 and w == 1: ev["wall_time"] = struct.unpack("<d", v)[0]
        elif f == 2 and w == 0: ev["step"] = s64(v)
        elif f == 3 and w == 2: ev["file_version"] = v.decode()
        elif f == 5 and w == 2:
            for sf, sw, sv in fields(v):
                if sf != 1 or sw != 2: raise ValueError("summary field %d" % sf)
                val = {}
                for vf, vw, vv in fields(sv):
                    if vf == 1 and vw == 2: val["tag"] = vv.decode("utf-8")
                    elif vf == 2 and vw == 5: val["simple_value"] = struct.unpack("<f", vv)[0]
                    elif vf == 8 and vw == 2: val["tensor"] = fields(vv)
                    elif vf == 9 and vw == 2: val["metadata"] = vv
                    else: raise ValueError("value field %d/%d" % (vf, vw))
                ev["values"].append(val)
        else: raise ValueError("event field %d/%d" % (f, w))
    return ev

try:
    events = [decode_event(r) for r in records]
    ok("every record parses as an Event")
except Exception as ex:
    bad("every record parses as an Event", repr(ex)); sys.exit(0)

first = events[0]
if first.get("file_version") == "brain.Event:2" and not first["values"] and t0 - 1 <= first["wall_time"] <= t1 + 1:
    ok("first record: file_version brain.Event:2 and wall time")
else:
    bad("first record", repr(first))

# ---- expected events (same order as the writer) ----
f32 = lambda x: struct.unpack("<f", struct.pack("<f", x))[0] if math.isfinite(x) and abs(x) < 3.5e38 else x
want = [("text", "lr", 0, "0.0006"), ("text", "data_path", 0, "['/data/c\u00f6de \"x\"']")]
for i in range(1, 51):
    want += [("s", "learning-rate", i, 6e-4 * i / 50), ("s", "learning-rate vs samples", i * 512, 6e-4 * i / 50),
             ("s", "batch-size", i, 512), ("s", "lm loss", i, 11.0 - i * 0.1), ("s", "loss-scale", i, 4294967296.0),
             ("s", "grad-norm", i, 1.0 / i), ("s", "tokens-per-sec", i, 123456.75 + i)]
want += [("s", "lm loss validation", 50, 5.25), ("s", "lm loss validation ppl", 50, math.exp(5.25)),
         ("s", "special", 0, 0.0), ("s", "special", 1, -0.0), ("s", "special", 2, float("nan")),
         ("s", "special", 3, float("inf")), ("s", "special", 4, float("-inf")), ("s", "special", 5, 1e-45),
         ("s", "special", 6, 3.4028234663852886e38), ("s", "special", -1, -7.0), ("s", "special", 1 << 40, 0.1),
         ("s", "special", (1 << 63) - 1, 1e30), ("s", "\u00fcnicode/tag with spaces", 7, 2.5)]

def same_float(a, b):
    if math.isnan(a) or math.isnan(b): return math.isnan(a) and math.isnan(b)
    return a == b and math.copysign(1, a) == math.copysign(1, b)

errs, last_wall = [], first["wall_time"]
got = events[1:]
if len(got) != len(want):
    errs.append("%d events, expected %d" % (len(got), len(want)))
for k, (ev, w) in enumerate(zip(got, want)):
    kind, tag, step, value = w
    if ev["step"] != step: errs.append("event %d: step %d, expected %d" % (k, ev["step"], step))
    if not (last_wall <= ev["wall_time"] <= t1 + 1): errs.append("event %d: wall time %r" % (k, ev["wall_time"]))
    last_wall = ev["wall_time"]
    if len(ev["values"]) != 1: errs.append("event %d: %d values" % (k, len(ev["values"]))); continue
    v = ev["values"][0]
    if kind == "s":
        if v.get("tag") != tag or "simple_value" not in v or not same_float(v["simple_value"], f32(value)) \
                or "tensor" in v or "metadata" in v:
            errs.append("event %d: %r, expected %r = %r" % (k, v, tag, f32(value)))
    else:
        t = dict((f, val) for f, _, val in v.get("tensor", []))
        shape = fields(t.get(2, b""))
        dims = [fields(d) for f, _, d in shape if f == 2]
        meta = fields(v.get("metadata", b""))
        plugin = dict((f, val) for f, _, val in fields(meta[0][2])) if meta and meta[0][0] == 1 else {}
        if v.get("tag") != tag + "/text_summary" or t.get(1) != 7 or t.get(8, b"").decode("utf-8") != value \
                or dims != [[(1, 0, 1)]] or plugin.get(1) != b"text" or 2 in plugin:
            errs.append("event %d: text %r, expected %r = %r" % (k, v, tag, value))
if errs: bad("events decode to the written tags, steps and float32 values", "; ".join(errs[:3]))
else: ok("events decode to the written tags, steps and float32 values (%d)" % len(want))

tbpy, why = sys.argv[3], sys.argv[4]
if not tbpy:
    print("skip - %s: tensorboard EventAccumulator: the tensorboard package is unavailable: %s" % (T, why))
else:
    read = subprocess.run([tbpy, "-W", "ignore", "-c", '''
import sys
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
acc = EventAccumulator(sys.argv[1]); acc.Reload()
print(" ".join(sorted(acc.Tags()["scalars"])).replace(" ", ","))
for e in acc.Scalars("lm loss"): print(e.step, repr(e.value))
''', logdir], capture_output=True, text=True)
    lines = read.stdout.split("\n")
    tags = lines[0].split(",") if read.returncode == 0 else []
    loss = [(int(a), float(b)) for a, b in (l.split() for l in lines[1:] if l)] if read.returncode == 0 else []
    if "learning-rate" in tags and loss == [(i, f32(11.0 - i * 0.1)) for i in range(1, 51)]:
        ok("tensorboard EventAccumulator reads the scalars")
    else:
        bad("tensorboard EventAccumulator", "%r %r %s" % (tags, loss[:3], read.stderr[-300:]))
PYEOF
