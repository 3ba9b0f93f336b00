#!/usr/bin/env bash
# serve-sim.sh: mt-serve on the sim backend (the CUDA kernels under the SIMT simulator, MT_DEVICE=sim) gives
# the cpu backend's answers on serve.sh's tiny model: four greedy requests sent at once (the batch runs
# the CUDA paged attention over several sequences, prompts read in chunks) get the same text, and each
# token's log-probability within 1e-4 (the measured gap sim - cpu is about 1e-6; a wrong key row in the
# paged attention moves them by 1e-2 and more); a seeded request gets the same text too.
. "$(dirname "$0")/../lib.sh"
PY=/usr/bin/python3
d=$T_TMP
command -v curl >/dev/null || { t_skip "mt-serve" "curl is not installed (make deps)"; exit 0; }
curl() { command curl --max-time 300 "$@"; }
t_sim_setup 2
if why=$(t_serve_model "$d"); then t_pass "tiny GPT-2-vocabulary model trained"
else t_fail "tiny GPT-2-vocabulary model trained" "$why"; exit 0; fi
trap 'rc=$?; kill -9 $T_SERVE_PID 2>/dev/null; (exit $rc); t_cleanup' EXIT
prompts=("def f3(x" "import os" "x = 1\ny = " "def f10(x, y=3):\n    return")
for dev in cpu sim; do
    if ! MT_DEVICE=$dev t_serve_start "$d/$dev.err" --load "$d/ck" --max-batch-size 4 --max-prefill-tokens 5; then
        t_fail "mt-serve on $dev starts" "$(tail -3 "$d/$dev.err")"; exit 0
    fi
    pids=()
    for k in 0 1 2 3; do
        p=$($PY -c 'import json, sys; print(json.dumps(sys.argv[1].replace("\\n", "\n")))' "${prompts[$k]}")
        curl -s -o "$d/$dev$k.json" "$T_SERVE_URL/v1/completions" \
            --data-binary '{"prompt": '"$p"', "max_tokens": 12, "temperature": 0, "logprobs": 0}' &
        pids+=($!)
    done
    wait "${pids[@]}"
    curl -s -o "$d/${dev}s.json" "$T_SERVE_URL/v1/completions" --data-binary '{"prompt": "def f3(x", "max_tokens": 12,
        "temperature": 1.2, "top_k": 40, "seed": 5}'
    kill -TERM $T_SERVE_PID
    wait $T_SERVE_PID || t_fail "mt-serve on $dev exits 0" "$(tail -3 "$d/$dev.err")"
done
if $PY - "$d" >"$d/cmp.out" 2>&1 <<'PYEOF'
import json, sys
d = sys.argv[1]
worst = 0
for k in range(4):
    a, b = (json.load(open("%s/%s%d.json" % (d, dev, k)))["choices"][0] for dev in ("cpu", "sim"))
    assert a["text"] == b["text"], (k, a["text"], b["text"])
    la, lb = a["logprobs"]["token_logprobs"], b["logprobs"]["token_logprobs"]
    assert len(la) == len(lb) == 12, (len(la), len(lb))
    worst = max([worst] + [abs(x - y) for x, y in zip(la, lb)])
assert worst < 1e-4, worst
a, b = (json.load(open("%s/%ss.json" % (d, dev)))["choices"][0]["text"] for dev in ("cpu", "sim"))
assert a == b, (a, b)
print("worst %.1e" % worst)
PYEOF
then t_pass "MT_DEVICE=sim: the cpu backend's greedy and seeded answers, 4 at once ($(tail -1 "$d/cmp.out"))"
else t_fail "MT_DEVICE=sim gives the cpu backend's answers" "$(tail -1 "$d/cmp.out" | head -c 600)"; fi
