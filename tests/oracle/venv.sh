#!/usr/bin/env bash
# venv.sh: prints the path of a Python that has tiktoken and tokenizers (the independent BPE oracles),
# bpe-openai (for the cl100k_base and o200k_base ranks its wheel ships) and
# tensorboard (its EventAccumulator reads mt's event files), creating build/venv from PyPI on first use
# (make deps does it). Exits 2 with a message on stderr when PyPI cannot be
# reached, so callers can skip instead of fail. Uses Debian's python3 with its numpy visible.
set -u
top=$(cd "$(dirname "$0")/../.." && pwd)
venv=$top/build/venv
py=$venv/bin/python
ok() { "$py" -c 'import tiktoken, tokenizers, tensorboard, bpe_openai' 2>/dev/null; }
if [ -x "$py" ] && ok; then echo "$py"; exit 0; fi
base=/usr/bin/python3
[ -x "$base" ] || base=$(command -v python3) || { echo "no python3 found" >&2; exit 2; }
if ! "$base" -m venv --system-site-packages "$venv" >/dev/null 2>&1; then
    echo "cannot create a venv with $base (is python3-venv installed? make deps)" >&2; exit 2
fi
if ! timeout 600 "$py" -m pip install -q --disable-pip-version-check tiktoken tokenizers tensorboard bpe-openai >"$venv/pip.log" 2>&1 || ! ok; then
    echo "cannot install tiktoken/tokenizers/tensorboard/bpe-openai from PyPI (offline?): see $venv/pip.log" >&2; exit 2
fi
echo "$py"
