#!/usr/bin/env bash
# grid-ref.sh: comm/grid.c's parallel groups against tests/oracle/megatron_grid.py, an independent
# transcription of Megatron-LM's RankGenerator (dense order tp-cp-ep-dp-pp, expert order tp-ep-dp-pp with
# the expert tensor size): for many (world, tp, cp, pp, ep, etp), expert tensor sizes other than tp among
# them, the same groups of every kind in the same order (test_comm --grid, all the sets in one run), or both
# refusing the sizes.
. "$(dirname "$0")/../lib.sh"
py=/usr/bin/python3
bin=$T_TOP/${MT_BUILD:-build}/tests/test_comm
[ -x "$bin" ] || { t_fail "test_comm binary" "$bin not built"; exit 0; }
if $py - "$bin" "$T_TOP/tests/oracle" >"$T_TMP/out" 2>&1 <<'PYEOF'
import subprocess, sys
sys.path.insert(0, sys.argv[2])
from megatron_grid import text
combos = [(w, tp, cp, pp, ep, etp) for w in list(range(1, 17)) + [24, 32] for tp in range(1, 5) for cp in (1, 2)
          for pp in (1, 2) for ep in range(1, 5) for etp in range(0, 5)]
combos += [(64, 8, 1, 2, 8, 1), (64, 4, 2, 2, 4, 2), (48, 4, 1, 3, 8, 1), (32, 2, 2, 2, 8, 1)]
out = subprocess.run([sys.argv[1], "--grid"], input="".join("%d %d %d %d %d %d\n" % c for c in combos),
                     capture_output=True, text=True, check=True).stdout
blocks = out.split(".\n")
if len(blocks) != len(combos) + 1 or blocks[-1]:
    sys.exit("test_comm --grid printed %d sets for %d" % (len(blocks) - 1, len(combos)))
n = refused = 0
for c, mine in zip(combos, blocks):
    ref = text(*c)
    if mine != ref:
        sys.exit("world %d tp %d cp %d pp %d ep %d etp %d: mt gives\n%sMegatron's\n%s" % (c + (mine, ref)))
    n += 1
    refused += ref == "refused\n"
print("%d size sets equal, %d of them refused by both" % (n, refused))
PYEOF
then t_pass "every group is Megatron's ($(cat "$T_TMP/out"))"
else t_fail "the grid against Megatron's" "$(tail -20 "$T_TMP/out")"; fi
t_cleanup
