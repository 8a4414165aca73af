#!/usr/bin/env bash
# Set up (scripts/setup.sh) and run the whole test suite (the CI command).
#   bash scripts/test.sh            every test (as root: starts a one-node Slurm and four emulated hosts)
#   bash scripts/test.sh --quick    the quick subset: no test marked slow, mpi, slurm or multihost (about 4 min)
# Further arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
quick=0
if [[ "${1:-}" == "--quick" ]]; then
  quick=1
  shift
fi
root=0
if [[ "$(id -u)" == 0 ]]; then root=1; fi
if (( ! quick )); then
  if (( root )); then
    echo "== needs: root (it is) for the Slurm and multi-host tests: installs slurm and munge from apt, writes /etc/slurm and /etc/munge, makes network namespaces"
  else
    echo "== needs: root for the Slurm and multi-host tests (slurm and munge from apt, /etc/slurm, network namespaces); not root, so those are skipped and the rest runs"
  fi
fi
if (( quick )) && [[ -x .venv/bin/distgnn ]]; then
  echo "== quick: using the existing .venv (bash scripts/setup.sh refreshes it, e.g. after native/ changes)"
else
  bash scripts/setup.sh
fi
source .venv/bin/activate
export OUTDATED_IGNORE=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
if (( quick )); then
  exec python -m pytest -q -m "not slow and not slurm and not mpi and not multihost" "$@"
fi
if (( ! root )); then
  export DISTGNN_HOST_TESTS_SKIPPED="needs root (scripts/test.sh as root starts Slurm and the emulated hosts)"
  exec python -m pytest -q -rs --durations=25 "$@"
fi
# The Slurm tests (marker `slurm`) run on a one-node Slurm on this machine: installed if missing,
# started here and stopped on exit (the tests' own fixture starts it too when run alone).
# The multi-host tests (marker `multihost`) run on an emulated cluster of four hosts
# (cluster/multihost.sh: network namespaces on a fabric and a management bridge, a slurmd each),
# also stopped on exit.
trap 'bash cluster/multihost.sh stop; bash cluster/local-slurm.sh stop' EXIT
bash cluster/local-slurm.sh start
bash cluster/multihost.sh start --hosts 4
python -m pytest -q --durations=25 "$@"   # the 25 slowest tests listed at the end
