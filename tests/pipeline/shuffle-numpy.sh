#!/usr/bin/env bash
# shuffle-numpy.sh: GPT sample indices against an independent numpy reference of Megatron's algorithms
# (RandomState shuffles, core/legacy split rounding, epochs and final-epoch separation, document index,
# build_sample_idx, shuffle index, core >= v0.12 blend sizes and build_blending_indices, sample fetch),
# over many seeded random cases, compared element for element with the C code (test_gpt_index --dump).
. "$(dirname "$0")/../lib.sh"
PY=/usr/bin/python3
BIN=$T_TOP/${MT_BUILD:-build}/tests/test_gpt_index
if ! [ -x "$PY" ] || ! $PY -c 'import numpy' 2>/dev/null; then t_skip "numpy reference" "no /usr/bin/python3 with numpy"; exit 0; fi
[ -x "$BIN" ] || { t_fail "numpy reference" "$BIN not built"; exit 0; }
$PY - "$T_TMP" "$BIN" "${MT_SOAK:-0}" "$T_TOP/tests/oracle" <<'PYEOF'
import math, os, random, re, subprocess, sys
import numpy as np

tmp, binary, soak = sys.argv[1], sys.argv[2], sys.argv[3] != "0"
rnd = random.Random(0x5EED)
U32MAX = 2**32 - 1

sys.path.insert(0, sys.argv[4])
from gpt_dataset_ref import *

# ---- random cases ----
def rand_sizes():
    n = rnd.choice([1, 2, 3, 7, 20, 50, 100, 300, 1000])
    kind = rnd.random()
    if kind < 0.25:
        a = [rnd.randint(0, 40) for _ in range(n)]
    elif kind < 0.45:
        a = [0 if rnd.random() < 0.6 else rnd.randint(1, 30) for _ in range(n)]
    elif kind < 0.65:
        a = [int(rnd.expovariate(1 / 200)) for _ in range(n)]
    elif kind < 0.8:
        a = [rnd.choice([1, 2, 5000]) for _ in range(n)]
    else:
        a = [rnd.randint(1, 3) for _ in range(n)]
    return np.array(a, dtype=np.int32)

def rand_split():
    return rnd.choice(["969,30,1", "1,1,1", "98,2,0", "100,0,0", "0,100,0", "90/5/5", "7", "80,20",
                       "%.3f,%.2f,%.1f" % (rnd.random() * 9, rnd.random(), rnd.random()),
                       "%d,%d,%d" % (rnd.randint(0, 9), rnd.randint(0, 9), rnd.randint(1, 9))])

def rand_seed():
    return rnd.choice([0, 1, 1234, 42, U32MAX, rnd.randint(0, U32MAX)])

manifest, checks = [], []
case_no = [0]
def new_out(tag):
    case_no[0] += 1
    return os.path.join(tmp, "%s%04d" % (tag, case_no[0]))

def save_sizes(a):
    p = new_out("sizes") + ".npy"; np.save(p, a); return p

n_gpt = 1500 if soak else 500
while sum(1 for c in checks if c[0] == "gpt") < n_gpt:
    sizes = rand_sizes()
    split = rand_split()
    legacy = int(rnd.random() < 0.25)
    si = rnd.randint(0, 2) if rnd.random() < 0.5 else 0
    try:
        rng = (split_legacy if legacy else split_core)(split, len(sizes))[si]
    except (ValueError, ZeroDivisionError):
        continue
    L = rnd.choice([1, 2, 3, 4, 7, 16, 64, 100])
    E = 1 if rnd.random() < 0.85 else 0
    drop = rnd.random() < 0.85
    if rng is not None:
        lo, hi = rng
        if lo < 0 or hi < lo:
            continue
        T = int(sizes[lo:hi].sum())
        if T == 0 and rnd.random() < 0.8:
            continue
        per_epoch = max(T // L, 1)
        r = rnd.random()
        if r < 0.1:
            n = None
        elif r < 0.15:
            n = 0
        elif r < 0.4 and T > E:
            # around the separate-final-epoch threshold of epoch e: n_before + int(0.8 * n_per_epoch) + d
            e = rnd.randint(2, 4)
            n = ((e - 1) * T - E) // L + int(0.80 * ((T - E) // L)) + rnd.choice([-2, -1, 0, 1])
            n = max(n, 0)
        else:
            n = rnd.randint(1, max(1, int(per_epoch * rnd.choice([0.5, 1, 1.2, 1.9, 3.5, 6]))))
        if T == 0 and n is None:
            continue
        if (n or per_epoch) * L > 60000 or (hi - lo) * 8 > 200000:
            continue
    else:
        n = rnd.randint(1, 100)
    seed = rand_seed()
    out = new_out("gpt")
    manifest.append("gpt %s %s %s %d %d %d %d %d %d %d" % (out, save_sizes(sizes), split, legacy, si,
                    -1 if n is None else n, L, E, seed, int(drop)))
    checks.append(("gpt", out, sizes, rng, n, L, E, seed, drop, split, legacy, si))

# sample fetch over real token values (uint16 and int32 .bin)
for c in range(12):
    sizes = rand_sizes()
    if sizes.sum() == 0 or sizes.sum() > 100000:
        continue
    dt = rnd.choice([np.uint16, np.int32])
    tokens = np.array([rnd.randint(0, 65535 if dt == np.uint16 else 2**31 - 1) for _ in range(int(sizes.sum()))], dtype=dt)
    tp = new_out("tokens") + ".npy"; np.save(tp, tokens)
    L = rnd.choice([1, 3, 8, 33]); E = 1
    T = int(sizes.sum()); n = rnd.randint(1, max(1, 3 * T // L))
    if n * L > 60000:
        continue
    drop = rnd.random() < 0.7
    seed = rand_seed()
    out = new_out("fetch")
    manifest.append("fetch %s %s %s 100,0,0 %d %d %d %d %d" % (out, save_sizes(sizes), tp, n, L, E, seed, int(drop)))
    checks.append(("fetch", out, sizes, tokens, n, L, E, seed, drop))

for c in range(30):
    seed = rand_seed()
    mx = rnd.choice([0, 1, 2, 3, 1000, 2**31, 2**32 - 2, 2**32 - 1, 2**32, 2**40 + 7, 2**63 + 5, 2**64 - 1,
                     rnd.randint(0, 2**64 - 1)])
    out = new_out("interval")
    manifest.append("interval %s %d %d %d" % (out, seed, mx, 2000))
    checks.append(("interval", out, seed, mx, 2000))

for c in range(25):
    seed = rand_seed(); n = rnd.choice([0, 1, 2, 3, 10, 624, 625, 1000, 70000])
    out = new_out("shuffle")
    manifest.append("shuffle %s %d %d" % (out, seed, n))
    checks.append(("shuffle", out, seed, n))

for c in range(40):
    k = rnd.choice([1, 2, 3, 4, 5, 12])
    ws = [rnd.choice([rnd.random(), float(rnd.randint(1, 100)), 0.3, 0.7, 1e-3]) for _ in range(k)]
    n = rnd.choice([0, 1, 10, 999, rnd.randint(1, 20000)])
    surplus = rnd.choice([0.005, 0.005, 0.0, 0.05])
    out = new_out("blend")
    manifest.append("blend %s %d %r %d %s" % (out, n, surplus, k, " ".join(repr(w) for w in ws)))
    checks.append(("blend", out, ws, n, surplus))

for c in range(15):
    k = rnd.randint(1, 5)
    counts = [rnd.choice([0, 1, 5, rnd.randint(1, 500)]) for _ in range(k)]
    if sum(counts) == 0:
        continue
    out = new_out("exh")
    manifest.append("exh %s %d %s" % (out, k, " ".join(map(str, counts))))
    checks.append(("exh", out, counts))

n_bg = 0
while n_bg < 25:
    k = rnd.randint(2, 5)
    dss = []
    for i in range(k):
        s = rand_sizes()
        while s.sum() < 50:
            s = rand_sizes()
        dss.append(s)
    split = rnd.choice(["969,30,1", "90,5,5", "1,1,1", "100,0,0"])
    si = 0
    ranges = [split_core(split, len(s))[si] for s in dss]
    if any(r is None or int(s[r[0]:r[1]].sum()) == 0 for r, s in zip(ranges, dss)):
        continue
    L = rnd.choice([2, 8, 32]); seed = rand_seed(); surplus = rnd.choice([0.005, 0.0])
    N = rnd.randint(1, 3000)
    ws = [rnd.choice([rnd.random() + 0.01, float(rnd.randint(1, 9))]) for _ in range(k)]
    out = new_out("blendgpt")
    args = " ".join("%r %s" % (w, save_sizes(s)) for w, s in zip(ws, dss))
    manifest.append("blendgpt %s %s %d %d %d %d %r %d %s" % (out, split, si, N, L, seed, surplus, k, args))
    checks.append(("blendgpt", out, ws, dss, ranges, N, L, seed, surplus))
    n_bg += 1

mpath = os.path.join(tmp, "manifest")
with open(mpath, "w") as f:
    f.write("\n".join(manifest) + "\n")
r = subprocess.run([binary, "--dump", mpath], capture_output=True, text=True)
if r.returncode != 0:
    print("not ok - shuffle-numpy.sh: C dump run: exit %d: %s" % (r.returncode, r.stderr[-300:]))
    sys.exit(0)

# ---- compare ----
stats = {}
def report(kind, ok, why=""):
    st = stats.setdefault(kind, [0, 0])
    if ok:
        st[0] += 1
    else:
        st[1] += 1
        if st[1] <= 5:
            print("not ok - shuffle-numpy.sh: %s: %s" % (kind, why))

def err_of(out):
    return open(out + ".err").read() if os.path.exists(out + ".err") else None

def same(a, b):
    return a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a, b)

for c in checks:
    kind, out = c[0], c[1]
    try:
        if kind == "gpt":
            _, _, sizes, rng, n, L, E, seed, drop, split, legacy, si = c
            desc = "%s split=%s legacy=%d idx=%d n=%s L=%d E=%d seed=%d drop=%d nseq=%d" % (
                os.path.basename(out), split, legacy, si, n, L, E, seed, drop, len(sizes))
            if rng is None:
                report(kind, os.path.exists(out + ".absent"), desc + ": split should be absent")
                continue
            try:
                plan, d, s, sh = gpt(sizes, rng[0], rng[1], n, L, E, seed, drop)
            except (AssertionError, ValueError) as ex:
                report(kind, err_of(out) is not None, desc + ": reference raised %r, C did not" % ex)
                continue
            if err_of(out) is not None:
                report(kind, False, desc + ": C failed: " + err_of(out)); continue
            cplan = tuple(int(x) for x in open(out + ".plan").read().split())
            ok = cplan == plan
            cd, cs, csh = (np.load(out + x) for x in (".doc.npy", ".sample.npy", ".shuffle.npy"))
            bad = [nm for nm, a, b in (("document_index", cd, d), ("sample_index", cs, s), ("shuffle_index", csh, sh))
                   if not same(a, b)]
            report(kind, ok and not bad, desc + ": plan C %s ref %s; differs: %s" % (cplan, plan, bad))
        elif kind == "fetch":
            _, _, sizes, tokens, n, L, E, seed, drop = c
            plan, d, s, sh = gpt(sizes, 0, len(sizes), n, L, E, seed, drop)
            ptr = np.concatenate(([0], np.cumsum(sizes.astype(np.int64))[:-1])).tolist()
            want = np.array([fetch(tokens, ptr, sizes.tolist(), d, s, sh, L, E, i) for i in range(plan[3])],
                            dtype=np.int64).reshape(plan[3], L + E)
            got = np.load(out + ".tok.npy") if err_of(out) is None else None
            report(kind, got is not None and same(got, want), "%s: samples differ (%s)" % (os.path.basename(out), err_of(out)))
        elif kind == "interval":
            _, _, seed, mx, cnt = c
            want = np.random.RandomState(seed).randint(0, mx + 1, size=cnt, dtype=np.uint64) if mx < 2**64 - 1 else \
                np.random.RandomState(seed).randint(0, 2**64, size=cnt, dtype=np.uint64)
            report(kind, same(np.load(out + "..npy"), want), "seed %d max %d" % (seed, mx))
        elif kind == "shuffle":
            _, _, seed, n = c
            ok = True
            for dt, ext in ((np.uint32, ".u32.npy"), (np.int64, ".i64.npy")):
                a = np.arange(n, dtype=dt); np.random.RandomState(seed).shuffle(a)
                ok = ok and same(np.load(out + ext), a)
            report(kind, ok, "seed %d n %d" % (seed, n))
        elif kind == "blend":
            _, _, ws, n, surplus = c
            w, per, size = blend_sizes(ws, n, surplus)
            di, dsi, _ = blend_indices(w, size)
            ok = same(np.load(out + ".sizes.npy"), np.array(per + [size], dtype=np.int64)) and \
                same(np.load(out + ".di.npy"), di) and same(np.load(out + ".dsi.npy"), dsi)
            report(kind, ok, "%s weights %r n %d" % (os.path.basename(out), ws, n))
        elif kind == "exh":
            _, _, counts = c
            di, dsi = exhaustive(counts)
            report(kind, same(np.load(out + ".di.npy"), di) and same(np.load(out + ".dsi.npy"), dsi), "counts %r" % counts)
        elif kind == "blendgpt":
            _, _, ws, dss, ranges, N, L, seed, surplus = c
            w, per, size = blend_sizes(ws, N, surplus)
            built = [gpt(s, r[0], r[1], p, L, 1, seed, True) for s, r, p in zip(dss, ranges, per)]
            di, dsi, cur = blend_indices(w, size)
            if any(cur[k] > built[k][0][3] for k in range(len(ws))):
                report(kind, err_of(out) is not None, "reference: dataset too small, C did not fail"); continue
            rows = np.zeros((size, 4), dtype=np.int64)
            for t in range(size):
                k = int(di[t]); j = int(built[k][3][dsi[t]])
                rows[t] = (k, j, built[k][2][j][0], built[k][2][j][1])
            ok = err_of(out) is None and same(np.load(out + ".sizes.npy"), np.array(per + [size], dtype=np.int64)) \
                and same(np.load(out + ".rows.npy"), rows)
            report(kind, ok, "%s: K=%d N=%d (%s)" % (os.path.basename(out), len(ws), N, err_of(out)))
    except Exception as ex:  # a missing or unreadable C output is a failure, not a crash
        report(kind, False, "%s: %r" % (os.path.basename(out), ex))

seps = [c for c in checks if c[0] == "gpt" and os.path.exists(c[1] + ".plan")]
plans = [tuple(map(int, open(c[1] + ".plan").read().split())) for c in seps]
print("# gpt cases: %d built, %d multi-epoch, %d separate final epoch, %d absent splits, %d errors" % (
    len(plans), sum(p[1] > 1 for p in plans), sum(p[2] for p in plans),
    sum(os.path.exists(c[1] + ".absent") for c in checks), sum(os.path.exists(c[1] + ".err") for c in checks)),
    file=sys.stderr)
for kind, (p, f) in stats.items():
    if f == 0:
        print("ok - shuffle-numpy.sh: %s: %d cases identical to numpy" % (kind, p))
PYEOF
