"""megatron_grid.py: Megatron-LM's parallel groups (megatron/core/parallel_state.py) for a world of ranks,
as mt's comm/grid.h names them, written from the spec of its RankGenerator:

- a generator has an order of axes, fastest first, each with a size; the sizes multiply to the world;
  a rank's coordinates are its digits in that mixed radix (the first axis the least significant);
- the groups of a token such as "dp-cp" are the sets of ranks whose coordinates differ only on the named
  axes; groups are listed by the number the other axes' coordinates make in the same mixed radix, each
  group's members by the number the named axes' coordinates make;
- the dense generator has order tp-cp-ep-dp-pp with ep 1 (dp = world / (tp cp pp)); the expert generator
  has order tp-ep-dp-pp with tp = the expert tensor size etp (default tp), cp 1 and dp = world / (etp ep
  pp); initialize_model_parallel refuses a world that etp x ep x pp does not divide.

Groups: TP tp, CP cp, DP dp, PP pp, MP tp-pp, DPCP dp-cp (dense); EP ep, EDP dp, ETP tp (expert).
Usage: megatron_grid.py WORLD TP CP PP EP ETP: one line per kind, "KIND: a,b c,d ...", or "refused".
"""
import sys


def groups(order, sizes, token):
    axes = order.split("-")
    named = set(token.split("-"))
    stride, s = {}, 1
    for a in axes:
        stride[a] = s
        s *= sizes[a]
    inside = [a for a in axes if a in named]
    outside = [a for a in axes if a not in named]

    def digits(n, names):
        out = {}
        for a in names:
            out[a] = n % sizes[a]
            n //= sizes[a]
        return out

    def count(names):
        n = 1
        for a in names:
            n *= sizes[a]
        return n

    result = []
    for g in range(count(outside)):
        base = sum(d * stride[a] for a, d in digits(g, outside).items())
        result.append([base + sum(d * stride[a] for a, d in digits(i, inside).items()) for i in range(count(inside))])
    return result


def grid(world, tp, cp, pp, ep, etp):
    etp = etp or tp
    if world % (tp * cp * pp) or world % (etp * ep * pp):
        return None
    dense = {"tp": tp, "cp": cp, "ep": 1, "dp": world // (tp * cp * pp), "pp": pp}
    expert = {"tp": etp, "ep": ep, "dp": world // (etp * ep * pp), "pp": pp}
    d, x = "tp-cp-ep-dp-pp", "tp-ep-dp-pp"
    return [("TP", groups(d, dense, "tp")), ("CP", groups(d, dense, "cp")), ("DP", groups(d, dense, "dp")),
            ("PP", groups(d, dense, "pp")), ("MP", groups(d, dense, "tp-pp")), ("DPCP", groups(d, dense, "dp-cp")),
            ("EP", groups(x, expert, "ep")), ("EDP", groups(x, expert, "dp")), ("ETP", groups(x, expert, "tp"))]


def text(world, tp, cp, pp, ep, etp):
    g = grid(world, tp, cp, pp, ep, etp)
    if g is None:
        return "refused\n"
    return "".join("%s: %s\n" % (k, " ".join(",".join(map(str, m)) for m in v)) for k, v in g)


if __name__ == "__main__":
    sys.stdout.write(text(*map(int, sys.argv[1:7])))
