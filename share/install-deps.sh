#!/bin/sh
# install-deps.sh: installs the Debian packages mt needs to build and test (run as root, or via sudo).
# Idempotent: prints nothing and touches nothing when every package is already installed.
#   share/install-deps.sh          what the build and `make check` need
#   share/install-deps.sh slurm    what the Slurm tests need (a throw-away Slurm on 127.0.0.1:
#                                  slurmctld, slurmd, munge, the PMIx plugin's tools); asked for by
#                                  tests/pipeline/train-slurm.sh only
set -eu

PKGS="build-essential pkg-config zstd libzstd-dev libjansson-dev
      libopenblas-dev libdnnl-dev libopenmpi-dev openmpi-bin libpmix-dev
      python3 python3-venv python3-numpy python3-torch"
[ "${1:-}" = slurm ] && PKGS="slurm-wlm munge libpmix-bin"

missing=""
for p in $PKGS; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
[ -z "$missing" ] && exit 0

SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
echo "install-deps: installing:$missing" >&2
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
# shellcheck disable=SC2086
$SUDO apt-get install -y -qq --no-install-recommends $missing >/dev/null
echo "install-deps: done" >&2
