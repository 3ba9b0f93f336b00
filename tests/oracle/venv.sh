#!/usr/bin/env bash
# venv.sh: prints the path of a Python that has tiktoken and tokenizers (the independent BPE oracles),
# creating build/venv from PyPI on first use. Exits 2 with a message on stderr when PyPI cannot be
# reached, so callers can skip instead of fail. Uses Debian's python3 with its numpy visible.
set -u
top=$(cd "$(dirname "$0")/../.." && pwd)
venv=$top/build/venv
py=$venv/bin/python
if [ -x "$py" ] && "$py" -c 'import tiktoken, tokenizers' 2>/dev/null; then echo "$py"; exit 0; fi
base=/usr/bin/python3
[ -x "$base" ] || base=$(command -v python3) || { echo "no python3 found" >&2; exit 2; }
if ! "$base" -m venv --system-site-packages "$venv" >/dev/null 2>&1; then
    echo "cannot create a venv with $base (is python3-venv installed? make deps)" >&2; exit 2
fi
if ! timeout 300 "$py" -m pip install -q --disable-pip-version-check tiktoken tokenizers >"$venv/pip.log" 2>&1; then
    echo "cannot install tiktoken/tokenizers from PyPI (offline?): see $venv/pip.log" >&2; exit 2
fi
echo "$py"
