#!/usr/bin/env bash
# Set up (scripts/setup.sh) and run the main job on the small built-in default: the Snakemake DAG
# of config/config.yaml (a synthetic twin of Reddit at 1% scale; Libra into 1, 2 and 4 parts; cd-0,
# cd-5 and 0c; report), executed locally on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
source .venv/bin/activate
export OUTDATED_IGNORE=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
snakemake --profile cluster/local "$@"
echo "== report: reports/*/summary.md and reports/*/*.png"
cat reports/*/summary.md
