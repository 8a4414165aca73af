#!/usr/bin/env bash
# Set up (scripts/setup.sh) and run the whole test suite (the CI command).
#   bash scripts/test.sh            every test (starts a one-node Slurm for the Slurm tests)
#   bash scripts/test.sh --quick    the quick subset: no test marked slow, mpi, slurm or multihost (about 3 min)
# Further arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
quick=0
if [[ "${1:-}" == "--quick" ]]; then
  quick=1
  shift
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
# The Slurm tests (marker `slurm`) run on a one-node Slurm on this machine: installed if missing,
# started here and stopped on exit (the tests' own fixture starts it too when run alone).
# The multi-host tests (marker `multihost`) run on an emulated cluster of four hosts
# (cluster/multihost.sh: network namespaces on a fabric and a management bridge, a slurmd each),
# also stopped on exit.
trap 'bash cluster/multihost.sh stop; bash cluster/local-slurm.sh stop' EXIT
bash cluster/local-slurm.sh start
bash cluster/multihost.sh start --hosts 4
python -m pytest -q --durations=25 "$@"   # the 25 slowest tests listed at the end
