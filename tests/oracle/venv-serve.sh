#!/usr/bin/env bash
# venv-serve.sh: prints the path of a Python that has the clients mt-serve is checked with: the `openai`
# package (OpenAI's own client, which speaks the API mt-serve implements) and `prometheus_client` (whose
# parser reads /metrics as Prometheus does), creating build/venv-serve from PyPI on first use (make deps
# does it). Exits 2 with a message on stderr when PyPI cannot be reached.
set -u
top=$(cd "$(dirname "$0")/../.." && pwd)
venv=$top/build/venv-serve
py=$venv/bin/python
ok() { "$py" -c 'import openai, prometheus_client' 2>/dev/null; }
if [ -x "$py" ] && ok; then echo "$py"; exit 0; fi
base=/usr/bin/python3
[ -x "$base" ] || base=$(command -v python3) || { echo "no python3 found" >&2; exit 2; }
if ! "$base" -m venv "$venv" >/dev/null 2>&1; then
    echo "cannot create a venv with $base (is python3-venv installed? make deps)" >&2; exit 2
fi
if ! timeout 600 "$py" -m pip install -q --disable-pip-version-check openai prometheus_client >"$venv/pip.log" 2>&1 || ! ok; then
    echo "cannot install openai/prometheus_client from PyPI (offline?): see $venv/pip.log" >&2; exit 2
fi
echo "$py"
