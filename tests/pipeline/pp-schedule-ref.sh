#!/usr/bin/env bash
# pp-schedule-ref.sh: the pipeline schedules of train/pp_schedule.c against tests/oracle/megatron_pp_schedule.py,
# an independent transcription of Megatron-LM's schedules.py (1F1B without interleaving, the interleaved
# schedule with every forward first when the micro-batches equal the stages, one stage without
# pipelining): for every stage of many (stages, micro-batches, chunks) the same events in the same order,
# forwards, backwards and each exchange with the (micro-batch, chunk) of every transfer.
. "$(dirname "$0")/../lib.sh"
py=/usr/bin/python3
bin=$T_TOP/${MT_BUILD:-build}/tests/test_pp_schedule
[ -x "$bin" ] || { t_fail "schedule binary" "$bin not built"; exit 0; }
if $py - "$bin" "$T_TOP/tests/oracle" >"$T_TMP/out" 2>&1 <<'PYEOF'
import subprocess, sys
sys.path.insert(0, sys.argv[2])
from megatron_pp_schedule import schedule
layouts = [(P, M, 1) for P in range(1, 9) for M in range(1, 13)]
layouts += [(P, M, V) for P in range(2, 7) for V in range(2, 5) for M in range(P, 5 * P + 1, P)]
layouts += [(16, 32, 2), (8, 64, 3), (4, 4, 8)]
n = 0
for P, M, V in layouts:
    for s in range(P):
        mine = subprocess.run([sys.argv[1], "--print", str(P), str(s), str(M), str(V)], capture_output=True,
                              text=True, check=True).stdout.split("\n")[:-1]
        ref = schedule(P, s, M, V)
        if mine != ref:
            i = next(i for i in range(min(len(mine), len(ref)) + 1) if i >= len(mine) or i >= len(ref) or mine[i] != ref[i])
            sys.exit("P %d stage %d M %d V %d: event %d is %r, Megatron's %r"
                     % (P, s, M, V, i, mine[i] if i < len(mine) else None, ref[i] if i < len(ref) else None))
        n += 1
print("%d (layout, stage) lists equal" % n)
PYEOF
then t_pass "every stage's events are Megatron's ($(cat "$T_TMP/out"))"
else t_fail "the schedules against Megatron's" "$(tail -2 "$T_TMP/out")"; fi
t_cleanup
