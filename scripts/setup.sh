#!/usr/bin/env bash
# Set up distgnn on a Debian or Ubuntu machine with Python 3.10-3.12: the system packages it
# builds with (apt), a virtual environment .venv, torch's CPU-only build, then distgnn with its
# native module and extras. Idempotent: a rerun installs only what is missing.
#
# Environment (all optional):
#   PYTHON                the interpreter for .venv (default python3)
#   DISTGNN_TORCH         the torch requirement (default torch==2.13.0+cpu on x86_64, torch==2.13.0
#                         elsewhere: PyPI's non-x86 wheels are CPU-only)
#   DISTGNN_TORCH_INDEX   where CPU wheels come from (default https://download.pytorch.org/whl/cpu;
#                         a wheel in pip's find-links, e.g. PIP_FIND_LINKS=DIR, is taken first)
#   DISTGNN_EXTRAS        distgnn's extras (default test,baseline)
# A step that cannot be done ends the script with one line naming it; its output is in the log.
set -euo pipefail
cd "$(dirname "$0")/.."

LOG=${DISTGNN_SETUP_LOG:-${TMPDIR:-/tmp}/distgnn-setup-$(id -un).log}   # per user: another's is not ours to write
: >"$LOG"
fail() { echo "setup: $*" >&2; exit 1; }
# step WHAT CMD...: run CMD with its output in the log; on failure one line with the log's last line.
step() {
  local what=$1
  shift
  echo "== $what"
  if ! "$@" >>"$LOG" 2>&1; then
    fail "$what failed ($(tail -n 1 "$LOG" | cut -c1-200)); the whole output is in $LOG"
  fi
}

PYTHON=${PYTHON:-python3}
need=()   # Debian package names of what is missing
py_ok() { command -v "$PYTHON" >/dev/null && "$PYTHON" -c "$1" >/dev/null 2>&1; }
command -v "$PYTHON" >/dev/null || need+=(python3)
py_ok "import venv, ensurepip" || need+=(python3-venv)
py_ok "import os, sysconfig; assert os.path.exists(os.path.join(sysconfig.get_paths()['include'], 'Python.h'))" \
  || need+=(python3-dev)
command -v g++ >/dev/null || need+=(g++)
command -v make >/dev/null || need+=(make)
command -v mpiexec >/dev/null || need+=(openmpi-bin)
command -v mpicc >/dev/null || need+=(libopenmpi-dev)
[ -e /etc/ssl/certs/ca-certificates.crt ] || need+=(ca-certificates)

if ((${#need[@]})); then
  command -v apt-get >/dev/null \
    || fail "missing ${need[*]} and no apt-get here: install them with your package manager and rerun"
  SUDO=()
  if [ "$(id -u)" != 0 ]; then
    sudo -n true 2>/dev/null \
      || fail "missing ${need[*]}: run 'sudo apt-get install ${need[*]}' (or this script as root) and rerun"
    SUDO=(sudo -n)
  fi
  step "apt: ${need[*]}" "${SUDO[@]}" apt-get update -q
  step "apt: installing" env DEBIAN_FRONTEND=noninteractive "${SUDO[@]}" apt-get install -y -q --no-install-recommends "${need[@]}"
fi

version=$("$PYTHON" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
case "$version" in
  3.10 | 3.11 | 3.12) ;;
  *) fail "$PYTHON is Python $version; distgnn needs 3.10, 3.11 or 3.12: rerun with PYTHON=/path/to/python3.11" ;;
esac

if [ ! -x .venv/bin/python ]; then
  step "venv: .venv (Python $version)" "$PYTHON" -m venv .venv
fi
PIP=(.venv/bin/python -m pip)
step "pip: upgrading pip" "${PIP[@]}" install -q --upgrade pip

# torch first and by an exact CPU requirement: any looser request lets pip (or distgnn's own
# dependency on torch) pull a multi-GB CUDA build.
if ! .venv/bin/python -c "import torch" 2>/dev/null; then
  if [ "$(uname -m)" = x86_64 ]; then default_torch="torch==2.13.0+cpu"; else default_torch="torch==2.13.0"; fi
  torch_req=${DISTGNN_TORCH:-$default_torch}
  index=${DISTGNN_TORCH_INDEX:-https://download.pytorch.org/whl/cpu}
  # --extra-index-url keeps PyPI for torch's own dependencies; an unreachable index is skipped
  # when a local wheel (pip's find-links) satisfies the requirement.
  step "pip: $torch_req (CPU build; DISTGNN_TORCH_INDEX=$index)" \
    "${PIP[@]}" install -q --retries 1 --timeout 30 --extra-index-url "$index" "$torch_req"
fi
extras=${DISTGNN_EXTRAS:-test,baseline}
step "pip: distgnn[$extras] (builds the native module)" "${PIP[@]}" install -q -e ".[$extras]"
step "check: native module built with OpenMP" .venv/bin/python -c \
  "import distgnn._native as n; assert n.openmp_enabled(), 'native module built without OpenMP'"
echo "== ready: source .venv/bin/activate"
