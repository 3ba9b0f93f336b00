#!/usr/bin/env bash
# serve-load.sh: mt-serve under load and under hostile clients, on serve.sh's tiny model, on 127.0.0.1.
# 1. /metrics after 64 requests sent one at a time and one of three prompts: Prometheus' own parser reads it, and its counters
#    equal what the answers say (requests, prompt and new tokens, one first-token time per choice, one
#    inter-token time per later token).
# 2. Load: 64 clients send 512 requests of mixed lengths (greedy and seeded, some streamed, 32 that
#    disconnect after their first event) to a server running 8 sequences with a queue of 8. Every answer
#    equals that request's answer when it ran alone; none is lost (each 429 carries Retry-After and is
#    retried); the queue never holds more than 8 (/metrics, polled throughout); each client gone is stopped
#    early; the server's memory after a second round of the same load is what it was after the first.
# 3. Hostile clients against a server with --connection-timeout 2 and --max-connections 16: garbage,
#    a huge header, slow-loris headers, a body that stops coming, a bad Content-Length, a bad chunk, a
#    client that half-closes after its request, connections opened and dropped, more connections than
#    allowed: each is answered or closed within its bound, and then the server answers as before.
. "$(dirname "$0")/../lib.sh"
PY=/usr/bin/python3
d=$T_TMP
export OMP_NUM_THREADS=2
command -v curl >/dev/null || { t_skip "mt-serve" "curl is not installed (make deps)"; exit 0; }
if ! SPY=$("$T_TOP/tests/oracle/venv-serve.sh" 2>"$d/venv.err"); then
    t_skip "openai and prometheus_client" "unavailable: $(head -c 300 "$d/venv.err")"; exit 0
fi
if why=$(t_serve_model "$d"); then t_pass "tiny GPT-2-vocabulary model trained"
else t_fail "tiny GPT-2-vocabulary model trained" "$why"; exit 0; fi
trap 'rc=$?; kill -9 $T_SERVE_PID 2>/dev/null; (exit $rc); t_cleanup' EXIT
rss() { sed -n 's/^VmRSS:[[:space:]]*\([0-9]*\) kB/\1/p' "/proc/$T_SERVE_PID/status"; }

# The client of sections 1 and 2: MODE ref writes each spec's lone answer; MODE long prints how many of
# the requests that disconnect run 20 tokens or more alone; MODE load runs the clients and checks their
# answers against the ref file.
cat >"$d/load.py" <<'PYEOF'
import http.client, json, sys, threading, time, urllib.parse
mode, url, path = sys.argv[1], sys.argv[2], sys.argv[3]
u = urllib.parse.urlparse(url)
SPECS, CLIENTS, EACH, QUEUE = 64, 64, 8, 8

def spec(i):
    body = {"prompt": "x = %d\n" % i * (1 + i % 6), "max_tokens": 4 + i * 7 % 21}
    if i % 2: body.update(temperature=1.0, top_k=50, seed=1000 + i)
    else: body.update(temperature=0)
    return body

def ask(body, stream, leave=False):
    """(status, headers, text, finish_reason, usage) of one request; leave: close after the first event."""
    body = dict(body, stream=stream)
    c = http.client.HTTPConnection(u.hostname, u.port, timeout=120)
    c.request("POST", "/v1/completions", json.dumps(body), {"Content-Type": "application/json"})
    r = c.getresponse()
    if r.status != 200:
        data = r.read()
        c.close()
        return r.status, r.headers, data, None, None
    if not stream:
        j = json.loads(r.read())
        c.close()
        ch = j["choices"][0]
        return 200, r.headers, ch["text"], ch["finish_reason"], j["usage"]
    text, finish = "", None
    while True:
        line = r.readline()
        assert line, "the stream ended without [DONE]"
        line = line.decode().rstrip("\n")
        if not line.startswith("data: "):
            continue
        if line == "data: [DONE]":
            break
        ev = json.loads(line[6:])
        text += ev["choices"][0]["text"]
        finish = ev["choices"][0]["finish_reason"] or finish
        if leave:
            c.sock.close()
            c.close()
            return 200, r.headers, None, None, None
    c.close()
    return 200, r.headers, text, finish, None

def leaving(c, r):
    """the request r of client c that disconnects after its first event, or None"""
    return {"prompt": "x", "max_tokens": 40, "temperature": 1.0, "seed": c} if (c + r) % 16 == 5 else None

if mode == "ref":
    ref = []
    for i in range(SPECS):
        s, _, text, finish, usage = ask(spec(i), False)
        assert s == 200, (i, s, text)
        ref.append({"text": text, "finish": finish, "usage": usage})
    json.dump(ref, open(path, "w"))
    sys.exit(0)
if mode == "long":
    # how long each leaving request runs when its client stays: those that run long must be cut short
    long = 0
    for c in range(CLIENTS):
        for r in range(EACH):
            if leaving(c, r):
                s, _, text, finish, usage = ask(leaving(c, r), False)
                long += usage["completion_tokens"] >= 20
    print(long)
    sys.exit(0)

ref = json.load(open(path))
errors, stats, lock = [], {"done": 0, "429": 0, "left": 0, "max_waiting": 0, "polls": 0}, threading.Lock()
running = True

def poll():
    while running:
        c = http.client.HTTPConnection(u.hostname, u.port, timeout=60)
        c.request("GET", "/metrics")
        for line in c.getresponse().read().decode().splitlines():
            if line.startswith("mt_serve_requests_waiting "):
                with lock:
                    stats["max_waiting"] = max(stats["max_waiting"], int(line.split()[1]))
                    stats["polls"] += 1
        c.close()
        time.sleep(0.02)

def client(c):
    for r in range(EACH):
        i = (c * EACH + r) % SPECS
        leave = leaving(c, r) is not None
        body = leaving(c, r) or spec(i)
        stream = leave or (c + r) % 3 == 0
        while True:
            try:
                s, h, text, finish, _ = ask(body, stream, leave)
            except Exception as e:
                with lock: errors.append("client %d request %d: %r" % (c, r, e))
                return
            if s != 429:
                break
            with lock: stats["429"] += 1
            if not h.get("Retry-After", "").isdigit():
                with lock: errors.append("a 429 without Retry-After: %s" % h)
            time.sleep(0.25)
        with lock:
            if s != 200:
                errors.append("client %d request %d: status %d %r" % (c, r, s, text))
            elif leave:
                stats["left"] += 1
            elif (text, finish) != (ref[i]["text"], ref[i]["finish"]):
                errors.append("spec %d%s: %r %s, alone %r %s" % (i, " streamed" if stream else "", text, finish,
                                                                 ref[i]["text"], ref[i]["finish"]))
            else:
                stats["done"] += 1

p = threading.Thread(target=poll)
p.start()
ts = [threading.Thread(target=client, args=(c,)) for c in range(CLIENTS)]
for t in ts: t.start()
for t in ts: t.join()
running = False
p.join()
print(json.dumps(stats))
assert not errors, "%d errors, the first: %s" % (len(errors), errors[:3])
assert stats["done"] + stats["left"] == CLIENTS * EACH == 512 and stats["left"] == 32, stats
assert stats["429"] > 0, ("the queue was never full", stats)
assert stats["polls"] > 10 and stats["max_waiting"] <= QUEUE, stats
PYEOF

# 1. /metrics of 64 lone requests
if t_serve_start "$d/serve.err" --load "$d/ck" --max-batch-size 8 --max-queue 8; then
    t_pass "mt-serve starts"
else t_fail "mt-serve starts" "$(tail -3 "$d/serve.err")"; exit 0; fi
url=$T_SERVE_URL
if $PY "$d/load.py" ref "$url" "$d/ref.json" >"$d/ref.out" 2>&1; then t_pass "64 requests one at a time"
else t_fail "64 requests one at a time" "$(tail -1 "$d/ref.out")"; exit 0; fi
# and one of three prompts of 1, 6 and 12 tokens (each choice's prompt counted)
curl -s -o "$d/multi.json" "$url/v1/completions" --data-binary '{"prompt": ["x", "x = 1\n", "x = 1\ny = 2\nz = 3\n"], "max_tokens": 3}'
curl -s -D "$d/metrics.h" -o "$d/metrics.txt" "$url/metrics"
grep -qi '^Content-Type: text/plain; version=0.0.4' "$d/metrics.h" && t_pass "/metrics: Prometheus' text format, version 0.0.4" \
    || t_fail "/metrics: its content type" "$(cat "$d/metrics.h")"
if "$SPY" - "$d/metrics.txt" "$d/ref.json" "$d/multi.json" >"$d/m.out" 2>&1 <<'PYEOF'
import json, sys
from prometheus_client.parser import text_string_to_metric_families
fam = {f.name: f for f in text_string_to_metric_families(open(sys.argv[1]).read())}
ref = json.load(open(sys.argv[2])) + [json.load(open(sys.argv[3]))]
def one(name, **labels):
    v = [s.value for f in fam.values() for s in f.samples if s.name == name and s.labels == labels]
    assert len(v) == 1, (name, labels, v)
    return v[0]
prompt = sum(r["usage"]["prompt_tokens"] for r in ref)
new = sum(r["usage"]["completion_tokens"] for r in ref)
assert fam["mt_serve_requests"].type == "counter" and fam["mt_serve_time_to_first_token_seconds"].type == "histogram"
assert one("mt_serve_requests_total", path="/v1/completions", status="200") == 65
assert one("mt_serve_prompt_tokens_total") == prompt, (one("mt_serve_prompt_tokens_total"), prompt)
assert one("mt_serve_generation_tokens_total") == new, (one("mt_serve_generation_tokens_total"), new)
assert one("mt_serve_time_to_first_token_seconds_count") == 67
assert one("mt_serve_inter_token_latency_seconds_count") == new - 67
assert one("mt_serve_request_duration_seconds_count") == 65
assert one("mt_serve_requests_waiting") == 0 and one("mt_serve_sequences_running") == 0
b = [(float(s.labels["le"]), s.value) for s in fam["mt_serve_time_to_first_token_seconds"].samples if s.name.endswith("_bucket")]
assert b == sorted(b) and b[-1] == (float("inf"), 67), b
assert 0 < one("mt_serve_time_to_first_token_seconds_sum") < 67 * 60
PYEOF
then t_pass "/metrics: parsed by prometheus_client; requests, tokens and latency counts equal the answers'"
else t_fail "/metrics counts" "$(tail -1 "$d/m.out")"; fi

# 2. load, twice; memory after each
$PY "$d/load.py" long "$url" "" >"$d/long.out" 2>&1 || t_fail "the leaving requests alone" "$(tail -1 "$d/long.out")"
r0=$(rss)
for round in 1 2; do
    if $PY "$d/load.py" load "$url" "$d/ref.json" >"$d/load$round.out" 2>&1; then
        t_pass "load round $round: 64 clients, 512 requests, each its lone answer; 429s retried; queue <= 8 ($(tail -1 "$d/load$round.out"))"
    else t_fail "load round $round" "$(tail -1 "$d/load$round.out" | head -c 800)"; fi
    eval "r$round=\$(rss)"
done
# Each client gone whose request runs 20 tokens or more when its client stays (long.out: how many of the
# 32 do) is stopped well before (at most 4 tokens after its first, measured; bound 20). Those that end by
# themselves sooner (an end of document drawn) may finish before the server writes to them again.
n=$(grep -c 'the client has gone: stopped after' "$d/serve.err")
long=$(tail -1 "$d/long.out")
worst=$(sed -n 's/.*the client has gone: stopped after \([0-9]*\) new tokens/\1/p' "$d/serve.err" | sort -n | tail -1)
[ "$n" -ge $((2 * long)) ] && [ "$long" -ge 16 ] && [ "${worst:-99}" -lt 20 ] \
    && t_pass "the $n clients gone were stopped early, at most $worst tokens ($((2 * long)) of 64 run 20 or more alone)" \
    || t_fail "the clients gone are stopped early" "$n stopped, at most $worst tokens; $((2 * long)) of 64 run 20 or more alone"
# The first round grows the heap to its working size (thread arenas, the tokenizer's caches); the second,
# the same load, must not grow it further. Measured here: +1.5 MB (a leak of 512 requests would show);
# bound 4 MB.
[ $((r2 - r1)) -lt 4096 ] && t_pass "memory flat: RSS ${r0} kB before, ${r1} kB after round 1, ${r2} kB after round 2" \
    || t_fail "memory flat after the load" "RSS ${r0} kB before, ${r1} kB after round 1, ${r2} kB after round 2"
kill -TERM $T_SERVE_PID
wait $T_SERVE_PID && t_pass "after the load, SIGTERM: exit 0" || t_fail "SIGTERM after the load" "$(tail -3 "$d/serve.err")"

# the new flags' bad values: one line naming the flag, exit 1, before anything is loaded
for bad in "--connection-timeout 0" "--max-connections x"; do
    # shellcheck disable=SC2086
    timeout 60 mt-serve --load "$d/ck" $bad --port 0 >"$d/flag.out" 2>"$d/flag.err"   # (a server that starts is stopped)
    rc=$?
    [ $rc = 1 ] && [ "$(wc -l <"$d/flag.err")" = 1 ] && grep -q -- "^mt-serve: ${bad% *}: " "$d/flag.err" \
        && t_pass "$bad: refused in one line ($(cat "$d/flag.err"))" || t_fail "$bad refused in one line" "exit $rc: $(cat "$d/flag.err")"
done

# 3. hostile clients
if ! t_serve_start "$d/serve3.err" --load "$d/ck" --connection-timeout 2 --max-connections 16; then
    t_fail "mt-serve with --connection-timeout 2" "$(tail -3 "$d/serve3.err")"; exit 0
fi
url=$T_SERVE_URL
if $PY - "$url" "$d/ref.json" >"$d/hostile.out" 2>&1 <<'PYEOF'
import json, socket, sys, time, urllib.parse
u = urllib.parse.urlparse(sys.argv[1])
ref = json.load(open(sys.argv[2]))
TIMEOUT, MARGIN = 2, 8   # --connection-timeout, and the time the server may take beyond it on a busy machine

def conn():
    s = socket.create_connection((u.hostname, u.port), timeout=TIMEOUT + MARGIN)
    return s

def outcome(s):
    """what the server does: ("answered", status) or ("closed", b"") within the socket's timeout"""
    data = b""
    try:
        while True:
            b = s.recv(65536)
            if not b:
                break
            data += b
            if b"\r\n\r\n" in data and b"Content-Length" not in data.split(b"\r\n\r\n")[0] and b"chunked" not in data:
                break
    except ConnectionResetError:
        pass
    s.close()
    if data.startswith(b"HTTP/1.1 "):
        return "answered", int(data[9:12])
    assert not data, data[:200]
    return "closed", None

def case(name, send, want_status=None, half_close=False):
    t0 = time.time()
    s = conn()
    try:
        s.sendall(send)
    except (BrokenPipeError, ConnectionResetError):
        pass
    if half_close:
        s.shutdown(socket.SHUT_WR)
    how, status = outcome(s)
    took = time.time() - t0
    assert took < TIMEOUT + MARGIN, (name, took)
    if want_status is not None:
        assert how == "answered" and status in want_status, (name, how, status)
    print("%s: %s %s in %.1f s" % (name, how, status or "", took))
    return how, status

body = json.dumps({"prompt": "x = 0\n", "max_tokens": 4, "temperature": 0}).encode()
req = b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body)
case("garbage", b"\x00\x01HELLO\xff\r\n\r\n")
case("a huge header", b"GET /health HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 300000 + b"\r\n\r\n")
how, _ = case("slow-loris headers", b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-")
assert how == "closed", how
case("a body that stops coming", req + body[:10])
case("a bad Content-Length", b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n", {400})
case("a bad chunk", b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", {400})
case("half-closed after its request", req + body, {200}, half_close=True)
for i in range(100):
    s = conn()
    s.close()
print("100 connections opened and dropped")
# their threads end as the machine gets to them: until then they hold places of --max-connections
t0 = time.time()
while True:
    try:
        s = conn()
        s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        if s.recv(100).startswith(b"HTTP/1.1 200"):
            break
    except (ConnectionResetError, BrokenPipeError):
        pass
    finally:
        s.close()
    assert time.time() - t0 < 30, "no connection served within 30 s after the drops"
    time.sleep(0.2)
print("served again %.1f s after the drops" % (time.time() - t0))
time.sleep(1)
idle = [conn() for _ in range(24)]
time.sleep(0.5)
served = 0
for s in idle:
    s.settimeout(0.5)
    try:
        s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        if s.recv(100).startswith(b"HTTP/1.1 200"):
            served += 1
    except (socket.timeout, ConnectionResetError, BrokenPipeError):
        pass
    s.close()
assert 1 <= served <= 16, ("24 connections at once with --max-connections 16: served", served)
print("24 connections at once: %d served" % served)
PYEOF
then t_pass "hostile clients: each answered or closed within its bound ($(grep -c . "$d/hostile.out") cases)"
else t_fail "hostile clients" "$(tail -1 "$d/hostile.out" | head -c 600)"; fi
s=$(curl -s -o "$d/after.json" -w '%{http_code}' "$url/v1/completions" --data-binary '{"prompt": "x = 0\n", "max_tokens": 4, "temperature": 0}')
[ "$s" = 200 ] && $PY -c 'import json, sys
r, ref = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
assert r["choices"][0]["text"] == ref[0]["text"]' "$d/after.json" "$d/ref.json" \
    && t_pass "after the hostile clients the server answers as before" || t_fail "the server after the hostile clients" "status $s"
kill -TERM $T_SERVE_PID
wait $T_SERVE_PID && t_pass "after the hostile clients, SIGTERM: exit 0" || t_fail "SIGTERM after the hostile clients" "$(tail -3 "$d/serve3.err")"
