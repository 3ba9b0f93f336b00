"""gpu_report.py: the report of bench/gpu, from the files its runs left in a work directory.
  gpu_report.py row DIR NAME LAYERS HIDDEN HEADS SEQ BATCH VOCAB_PADDED WARMUP PEAK_TFLOPS
      one row: DIR/mt.log (mt-train's log), DIR/eager.out and DIR/compile.out (train_torch.py's line),
      DIR/SIDE.why (why SIDE was not measured), DIR/SIDE.mem (nvidia-smi's memory.used samples, MiB) or
      DIR/SIDE.rss (/usr/bin/time's peak RSS, KiB, on the CPU); prints the row and appends it to
      DIR/rows.jsonl. PEAK_TFLOPS empty: no MFU.
  gpu_report.py table DIR
      every row of DIR/rows.jsonl in one table, then why each n/a was n/a.
"""
import json
import os
import re
import sys

SIDES = ("mt", "eager", "compile")


def read(path):
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return ""


def median(xs):
    return sorted(xs)[len(xs) // 2]


def torch_line(text):
    """train_torch.py's line: {key: [values]} for params, loss, warmup_s, graphs, step_ms, peak_mb."""
    out, key = {}, None
    for t in text.split():
        if re.fullmatch(r"[a-z_]+", t):
            key = t
            out[key] = []
        elif key:
            out[key].append(float(t))
    return out


def side(d, name, warm):
    """{"ms": [...], "why": ..., "mem": ..., "extra": ...} for one side."""
    why = read(os.path.join(d, name + ".why")).strip()
    r = {"why": why, "ms": [], "extra": ""}
    if not why:
        if name == "mt":
            ms = [float(x) for x in re.findall(r"elapsed time per iteration \(ms\): ([0-9.]+)", read(os.path.join(d, "mt.log")))]
            r["ms"] = ms[warm:]
        else:
            t = torch_line(read(os.path.join(d, name + ".out")))
            r["ms"] = t.get("step_ms", [])
            if "warmup_s" in t:
                r["extra"] = ("compiled in %.0f s" if name == "compile" else "warm-up %.1f s") % t["warmup_s"][0]
                if t.get("graphs"):
                    r["extra"] += " (%d graphs)" % t["graphs"][0]
            if t.get("peak_mb"):
                r["alloc"] = t["peak_mb"][0]
        if not r["ms"]:
            r["why"] = "no step times in its output"
    mem = [float(x) for x in read(os.path.join(d, name + ".mem")).split() if re.fullmatch(r"[0-9.]+", x)]
    rss = read(os.path.join(d, name + ".rss")).split()
    if mem:
        r["mem"] = "%.0f MB" % max(mem)
    elif rss and rss[-1].isdigit():
        r["mem"] = "%.0f MB RSS" % (int(rss[-1]) / 1024)
    else:
        r["mem"] = "n/a"
    return r


def row(argv):
    d, name = argv[0], argv[1]
    L, h, nh, T, B, V, warm = (int(a) for a in argv[2:9])
    peak = float(argv[9]) * 1e12 if argv[9] else 0.0
    N = 12 * L * h * h + V * h
    flop_tok = 6 * N + 12 * L * T * h
    label = "%s mb %d" % (name, B)
    print("%s: %d layers, hidden %d, %d heads, seq %d, micro-batch %d: N = %.1fM, %.2f GFLOP per token"
          % (label, L, h, nh, T, B, N / 1e6, flop_tok / 1e9))
    rec = {"row": label}
    for s in SIDES:
        r = side(d, s, warm)
        if r["why"]:
            print("  %-8s n/a (%s)" % (s, r["why"]))
            rec[s] = {"why": r["why"]}
            continue
        tok = B * T * 1000.0 / median(r["ms"])
        mfu = 100 * tok * flop_tok / peak if peak else None
        alloc = " (allocated %.0f MB)" % r["alloc"] if "alloc" in r else ""
        print("  %-8s tokens/s %.0f | MFU %s | peak memory %s%s | %sstep ms %s"
              % (s, tok, "%.1f%%" % mfu if mfu is not None else "n/a (no measured peak)", r["mem"], alloc,
                 r["extra"] + "; " if r["extra"] else "", " ".join("%.0f" % x for x in r["ms"])))
        rec[s] = {"tok": tok, "mfu": mfu, "mem": r["mem"]}
    ratios = []
    for s in ("eager", "compile"):
        if "tok" in rec["mt"] and "tok" in rec[s]:
            rec["mt/" + s] = rec["mt"]["tok"] / rec[s]["tok"]
            ratios.append("mt / %s %.2fx" % (s, rec["mt/" + s]))
        else:
            ratios.append("mt / %s n/a" % s)
    print("  " + "   ".join(ratios))
    with open(os.path.join(d, "rows.jsonl"), "a") as f:
        f.write(json.dumps(rec) + "\n")


def table(argv):
    rows = [json.loads(l) for l in read(os.path.join(argv[0], "rows.jsonl")).splitlines() if l.strip()]
    if not rows:
        return
    cell = lambda r, s: ("%.0f" % r[s]["tok"]) if "tok" in r[s] else "n/a"
    mfu = lambda r, s: ("%.1f%%" % r[s]["mfu"]) if r[s].get("mfu") is not None else "n/a"
    mem = lambda r, s: r[s]["mem"].split()[0] if "mem" in r[s] else "n/a"
    ratio = lambda r, k: ("%.2fx" % r[k]) if k in r else "n/a"
    print()
    print("tokens/s, MFU, peak memory (MB; on the CPU RSS) per side; mt / eager and mt / compile in tokens/s")
    print("%-12s %9s %6s %7s | %9s %6s %7s | %9s %6s %7s | %8s %10s" % (
        "row", "mt", "MFU", "mem", "eager", "MFU", "mem", "compile", "MFU", "mem", "mt/eager", "mt/compile"))
    for r in rows:
        print("%-12s %9s %6s %7s | %9s %6s %7s | %9s %6s %7s | %8s %10s" % (
            r["row"], cell(r, "mt"), mfu(r, "mt"), mem(r, "mt"), cell(r, "eager"), mfu(r, "eager"), mem(r, "eager"),
            cell(r, "compile"), mfu(r, "compile"), mem(r, "compile"), ratio(r, "mt/eager"), ratio(r, "mt/compile")))
    for r in rows:
        for s in SIDES:
            if "why" in r[s]:
                print("  n/a: %s %s: %s" % (r["row"], s, r[s]["why"]))


if __name__ == "__main__":
    {"row": row, "table": table}[sys.argv[1]](sys.argv[2:])
