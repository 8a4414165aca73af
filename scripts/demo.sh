#!/usr/bin/env bash
# Set up (scripts/setup.sh) and run the main job on a small built-in default: a synthetic twin of
# Reddit at 1% scale, executed locally.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
source .venv/bin/activate
export OUTDATED_IGNORE=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
distgnn fetch synth-reddit --scale 0.01
distgnn inspect data/synth-reddit-x0.01/graph.zarr
