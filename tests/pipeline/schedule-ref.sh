#!/usr/bin/env bash
# schedule-ref.sh: the learning-rate and weight-decay schedule (libcommon/train/schedule.c) against the
# independent Python reference tests/oracle/lr_schedule_ref.py over many seeded random option sets:
# same accept/reject decision, and bit-identical lr and wd at boundary and random step counts.
. "$(dirname "$0")/../lib.sh"
PY=/usr/bin/python3
BIN=$T_TOP/${MT_BUILD:-build}/tests/test_schedule
if ! [ -x "$PY" ]; then t_skip "python reference" "no /usr/bin/python3"; exit 0; fi
[ -x "$BIN" ] || { t_fail "python reference" "$BIN not built"; exit 0; }
$PY - "$BIN" "${MT_SOAK:-0}" "$T_TOP/tests/oracle" <<'PYEOF'
import random, subprocess, sys
sys.path.insert(0, sys.argv[3])
from lr_schedule_ref import Schedule, ConfigError

binary, soak = sys.argv[1], sys.argv[2] != "0"
rnd = random.Random(0x5C4ED)
n_cases = 20000 if soak else 3000

def rand_lr():
    return rnd.choice([1e-3, 6e-4, 1.5e-4, 3e-4, 1.0, rnd.uniform(1e-6, 1e-2), 10 ** rnd.uniform(-7, 0)])

def rand_case():
    c = {}
    c["lr"] = rand_lr()
    r = rnd.random()
    c["min_lr"] = 0.0 if r < 0.3 else (c["lr"] * rnd.choice([0.1, 0.01, rnd.random()]) if r < 0.9 else c["lr"] * 1.5)
    if rnd.random() < 0.3:
        c["lr_warmup_init"] = c["lr"] * rnd.choice([0.0, 0.1, rnd.random(), 1.0, 2.0])
    c["lr_decay_style"] = rnd.choice(["constant", "linear", "cosine", "cosine", "inverse-square-root", "WSD"])
    c["lr_wsd_decay_style"] = rnd.choice(["exponential", "linear", "cosine", "minus_sqrt"])
    c["global_batch_size"] = rnd.choice([1, 2, 8, 32, 96, 192, 512, 1536, rnd.randint(1, 4096)])
    by_iters = rnd.random() < 0.6
    if by_iters:
        c["train_iters"] = rnd.choice([1, 2, 10, 100, 1000, rnd.randint(1, 500000)])
        if rnd.random() < 0.3:
            c["lr_decay_iters"] = rnd.choice([1, c["train_iters"] // 2 + 1, rnd.randint(1, 2 * c["train_iters"] + 1)])
        w = rnd.random()
        if w < 0.3:
            c["lr_warmup_fraction"] = rnd.choice([0.01, 0.1, 0.5, 0.0, rnd.random(), 0.999])
        elif w < 0.8:
            c["lr_warmup_iters"] = rnd.choice([0, 1, rnd.randint(0, c["train_iters"])])
        if rnd.random() < 0.5:
            c["lr_wsd_decay_iters"] = rnd.randint(1, c.get("lr_decay_iters", c["train_iters"]) + 5)
    else:
        c["train_samples"] = rnd.choice([1, 100, 10000, rnd.randint(1, 10**9)])
        if rnd.random() < 0.3:
            c["lr_decay_samples"] = rnd.choice([1, c["train_samples"] // 2 + 1, rnd.randint(1, 2 * c["train_samples"] + 1)])
        w = rnd.random()
        if w < 0.3:
            c["lr_warmup_fraction"] = rnd.choice([0.01, 0.1, 0.5, 0.0, rnd.random(), 0.999])
        elif w < 0.8:
            c["lr_warmup_samples"] = rnd.choice([0, 1, rnd.randint(0, c["train_samples"])])
        if rnd.random() < 0.5:
            c["lr_wsd_decay_samples"] = rnd.randint(1, c.get("lr_decay_samples", c["train_samples"]) + 5)
    s = rnd.random()
    if s < 0.5:
        c["weight_decay_incr_style"] = "constant"
        c["weight_decay"] = rnd.choice([0.0, 0.01, 0.1, rnd.random()])
    else:
        c["weight_decay_incr_style"] = rnd.choice(["linear", "cosine"])
        c["start_weight_decay"] = rnd.choice([0.0, 0.01, rnd.random() * 0.1])
        c["end_weight_decay"] = c["start_weight_decay"] + rnd.choice([0.0, 0.1, rnd.random()])
    # a few deliberately inconsistent option sets
    if rnd.random() < 0.08:
        k = rnd.choice(["train_iters", "train_samples", "lr_decay_iters", "lr_decay_samples", "lr_warmup_iters",
                        "lr_warmup_samples", "start_weight_decay", "lr_warmup_fraction"])
        c[k] = rnd.random() * 0.5 if k in ("start_weight_decay", "lr_warmup_fraction") else rnd.randint(1, 1000)
    if rnd.random() < 0.03:
        del c["global_batch_size"]
        c["global_batch_size"] = 0
    return c

def steps_for(sched):
    pts = {0, 1, 2}
    if sched is not None:
        for b in (sched.warmup, sched.decay, sched.wd_steps) + ((sched.decay - sched.wsd,) if sched.wsd else ()):
            b = int(b)
            pts.update(x for x in (b - 1, b, b + 1, 2 * b) if x >= 0)
        hi = int(max(sched.decay, sched.wd_steps)) * 2 + 2
        pts.update(rnd.randint(0, hi) for _ in range(12))
    return sorted(pts)

def fmt(v):
    return repr(float(v)) if isinstance(v, float) else str(v)

cases = []
lines = []
for _ in range(n_cases):
    c = rand_case()
    try:
        ref = Schedule(**c)
    except ConfigError:
        ref = None
    steps = steps_for(ref)
    cases.append((c, ref, steps))
    lines.append(" ".join("%s=%s" % (k, fmt(v)) for k, v in c.items()) + " steps=" + ",".join(map(str, steps)))

p = subprocess.run([binary, "--dump"], input="\n".join(lines) + "\n", capture_output=True, text=True)
if p.returncode != 0:
    print("not ok - schedule-ref.sh: dump: exit %d: %s" % (p.returncode, p.stderr[:300]))
    sys.exit(0)
out = p.stdout.splitlines()
if len(out) != len(cases):
    print("not ok - schedule-ref.sh: dump: %d lines for %d cases" % (len(out), len(cases)))
    sys.exit(0)

bad_decision, bad_value, n_ok, n_err, n_vals = [], [], 0, 0, 0
for (c, ref, steps), line, src in zip(cases, out, lines):
    f = line.split()
    if ref is None:
        n_err += 1
        if f[0] != "err":
            bad_decision.append("C accepted, reference rejected: " + src)
        continue
    if f[0] != "ok":
        bad_decision.append("C rejected (%s), reference accepted: %s" % (line, src))
        continue
    n_ok += 1
    got = [float(x) for x in f[1:]]
    for i, n in enumerate(steps):
        want_lr, want_wd = ref.lr(n), ref.wd(n)
        n_vals += 1
        if got[2 * i] != want_lr or got[2 * i + 1] != want_wd:
            bad_value.append("step %d: lr %r wd %r, expected %r %r: %s" % (n, got[2 * i], got[2 * i + 1], want_lr, want_wd, src))
            break

def report(name, bad):
    if bad:
        print("not ok - schedule-ref.sh: %s: %d cases differ, first: %s" % (name, len(bad), bad[0][:600]))
    else:
        print("ok - schedule-ref.sh: %s" % name)

report("accept/reject decisions (%d accepted, %d rejected)" % (n_ok, n_err), bad_decision)
report("lr and wd bit-identical (%d values)" % n_vals, bad_value)
if n_ok < n_cases // 2 or n_err < 20:
    print("not ok - schedule-ref.sh: case mix: only %d accepted, %d rejected" % (n_ok, n_err))
PYEOF
