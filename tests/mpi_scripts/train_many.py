"""Run under ``mpiexec -n P``: several ``distgnn train`` command lines, one after another, in one
launch. Each is the CLI's own ``main`` (its own communicator, trainer, run folder), so a test that
compares runs at one world size pays MPI start-up and the torch import once, not once per run.

    mpiexec -n P python train_many.py '[["train", PARTDIR, "--out", RUN, ...], ...]'

Stops at the first run that fails, with its exit status.
"""
from __future__ import annotations

import json
import sys

from distgnn.cli import main

if __name__ == "__main__":
    for argv in json.loads(sys.argv[1]):
        status = main(argv)
        if status:
            sys.exit(status)
