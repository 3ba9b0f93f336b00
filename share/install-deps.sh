#!/bin/sh
# install-deps.sh: installs the Debian packages mt needs to build and test (run as root, or via sudo).
# Idempotent: prints nothing and touches nothing when every package is already installed.
#   share/install-deps.sh          what the build and `make check` need
#   share/install-deps.sh --check  installs nothing: lists the packages the build needs that are missing,
#                                  with the command that installs them, and exits 1 (plain `make`)
#   share/install-deps.sh slurm    what the Slurm tests need (a throw-away Slurm on 127.0.0.1:
#                                  slurmctld, slurmd, munge, the PMIx plugin's tools); asked for by
#                                  tests/pipeline/train-slurm.sh only
# Without a CUDA toolkit (no $CUDA_HOME/include/cuda_runtime_api.h, CUDA_HOME=/usr/local/cuda) the
# CUDA headers that the SIMT simulator is compiled against (it needs no driver, no library and no nvcc)
# come from NVIDIA's PyPI wheels, which Debian's main archive has no package for: the runtime, crt and
# cccl headers go into /usr/local/cuda-headers-13.0/include and /usr/local/cuda points at that. A
# toolkit installed later replaces the link.
set -eu

cuda_headers() {
    home=${CUDA_HOME:-/usr/local/cuda}
    [ -f "$home/include/cuda_runtime_api.h" ] && return 0
    [ -e "$home" ] && { echo "install-deps: $home has no include/cuda_runtime_api.h; the simulator tests will skip" >&2; return 0; }
    dest=/usr/local/cuda-headers-13.0
    tmp=$(mktemp -d)
    echo "install-deps: installing the CUDA headers for the simulator into $dest" >&2
    if python3 -m venv "$tmp/venv" >/dev/null 2>&1 &&
        timeout 600 "$tmp/venv/bin/pip" install -q --disable-pip-version-check --no-deps \
            nvidia-cuda-runtime==13.0.96 nvidia-cuda-crt==13.0.88 nvidia-cuda-cccl==13.0.85 >"$tmp/pip.log" 2>&1; then
        inc=$(echo "$tmp"/venv/lib/python3*/site-packages/nvidia/cu13/include)
        $SUDO mkdir -p "$dest"
        $SUDO cp -r "$inc" "$dest/include"
        $SUDO ln -sfn "$dest" "$home"
        echo "install-deps: CUDA headers in $dest (linked from $home)" >&2
    else
        echo "install-deps: could not install the CUDA headers from PyPI (offline?): $(tail -c 300 "$tmp/pip.log" 2>/dev/null)" >&2
    fi
    rm -rf "$tmp"
}

BUILD_PKGS=${MT_BUILD_PKGS:-"build-essential pkg-config zstd libzstd-dev libjansson-dev
      libopenblas-dev libdnnl-dev libopenmpi-dev openmpi-bin libpmix-dev libutf8proc-dev libmicrohttpd-dev"}   # (MT_BUILD_PKGS: for tests)
PKGS="$BUILD_PKGS python3 python3-venv python3-numpy python3-torch qemu-user curl"   # qemu-user: tests/pipeline/cpu-avx2.sh; curl: serve.sh
if [ "${1:-}" = --check ]; then
    missing=""
    for p in $BUILD_PKGS; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
    done
    [ -z "$missing" ] && exit 0
    echo "make: the build needs these Debian packages:$missing" >&2
    echo "make: install them with \`make deps\` (apt-get install, through sudo when not root), then run make again" >&2
    exit 1
fi
[ "${1:-}" = slurm ] && PKGS="slurm-wlm munge libpmix-bin"

SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
missing=""
for p in $PKGS; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
if [ -z "$missing" ]; then
    [ "${1:-}" = slurm ] || cuda_headers
    exit 0
fi

echo "install-deps: installing:$missing" >&2
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
# shellcheck disable=SC2086
$SUDO apt-get install -y -qq --no-install-recommends $missing >/dev/null
[ "${1:-}" = slurm ] || cuda_headers
echo "install-deps: done" >&2
