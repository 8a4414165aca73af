#!/usr/bin/env bash
# Set up (scripts/setup.sh) and run the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
source .venv/bin/activate
export OUTDATED_IGNORE=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# The Slurm tests (marker `slurm`) run on a one-node Slurm on this machine: installed if missing,
# started here and stopped on exit (the tests' own fixture starts it too when run alone).
bash cluster/local-slurm.sh start
trap 'bash cluster/local-slurm.sh stop' EXIT
python -m pytest -q "$@"
