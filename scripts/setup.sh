#!/usr/bin/env bash
# Set up everything distgnn needs on a Debian/Ubuntu machine: MPI from apt, then a virtual
# environment (.venv) with torch (CPU) and distgnn (native module built) plus its extras.
# Idempotent: rerunning it only installs what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi
if ! command -v mpiexec >/dev/null || ! dpkg -s libopenmpi-dev >/dev/null 2>&1; then
  echo "== apt: Open MPI"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq openmpi-bin libopenmpi-dev >/dev/null
fi

PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  echo "== venv: .venv"
  "$PYTHON" -m venv .venv
fi
PIP=".venv/bin/python -m pip"
$PIP install -q --upgrade pip
# The CPU wheel of torch 2.13.0 is on these machines' disk; any other torch request would
# download a multi-GB CUDA build, so torch is pinned and installed first.
if ! .venv/bin/python -c "import torch" 2>/dev/null; then
  echo "== pip: torch==2.13.0 (CPU)"
  $PIP install -q torch==2.13.0
fi
echo "== pip: distgnn[${DISTGNN_EXTRAS:-test,baseline}] (builds the native module)"
$PIP install -q -e ".[${DISTGNN_EXTRAS:-test,baseline}]"
.venv/bin/python -c "import distgnn._native as n; assert n.openmp_enabled(), 'native module built without OpenMP'"
echo "== ready: source .venv/bin/activate"
