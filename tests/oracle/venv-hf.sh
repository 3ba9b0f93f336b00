#!/usr/bin/env bash
# venv-hf.sh: prints the path of a Python that has Hugging Face transformers (< 4.45, which runs over
# Debian's torch) and jinja2 (chat templates), creating build/venv-hf from PyPI on first use with Debian's
# python3 and its packages (torch, numpy) visible. Exits 2 with a message on stderr when PyPI cannot be
# reached, so callers can skip instead of fail.
set -u
top=$(cd "$(dirname "$0")/../.." && pwd)
venv=$top/build/venv-hf
py=$venv/bin/python
ok() { "$py" -c 'import transformers, torch, tokenizers, jinja2' 2>/dev/null; }
if [ -x "$py" ] && ok; then echo "$py"; exit 0; fi
base=/usr/bin/python3
[ -x "$base" ] || { echo "no /usr/bin/python3 (Debian's python3, make deps)" >&2; exit 2; }
"$base" -c 'import torch' 2>/dev/null || { echo "Debian's python3-torch is not installed (make deps)" >&2; exit 2; }
if ! "$base" -m venv --system-site-packages "$venv" >/dev/null 2>&1; then
    echo "cannot create a venv with $base (is python3-venv installed? make deps)" >&2; exit 2
fi
if ! timeout 600 "$py" -m pip install -q --disable-pip-version-check 'transformers<4.45' jinja2 >"$venv/pip.log" 2>&1 || ! ok; then
    echo "cannot install transformers<4.45 and jinja2 from PyPI (offline?): see $venv/pip.log" >&2; exit 2
fi
echo "$py"
