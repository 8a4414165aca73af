"""Run under ``mpiexec -n P``: several ``distgnn train`` command lines, one after another, in one
launch. Each is the CLI's own ``main`` (its own communicator, trainer, run folder), so a test that
compares runs at one world size pays MPI start-up and the torch import once, not once per run.

    mpiexec -n P python train_many.py '[["train", PARTDIR, "--out", RUN, ...], ...]'

Stops at the first run that fails, with its exit status. The rules retired from ``--cdr-rule``
(bench/retired_rules.py) are registered, so their runs are tested too.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
import bench.retired_rules  # noqa: E402,F401  (the rules retired from --cdr-rule, still tested)
from distgnn.cli import main  # noqa: E402

if __name__ == "__main__":
    for argv in json.loads(sys.argv[1]):
        status = main(argv)
        if status:
            sys.exit(status)
