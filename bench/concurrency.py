"""How much slower one rank computes while every rank of the job computes at once on this machine
(shared caches and memory bandwidth), for the aggregation kernel and for dense work.

    mpiexec -n P python -m bench.concurrency OUT.json [--repeats 5]

The microbenchmark (:mod:`distgnn.scaling.microbench`) measures this with two ranks; this runs its
same measurement (:func:`distgnn.scaling.microbench.concurrency`) with all P ranks, so a check at P
ranks on one machine can be predicted with the slowdown of P ranks. Rank 0 writes
``{"ranks": P, "concurrency_agg": s, "concurrency_dense": s}``.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.concurrency")
    p.add_argument("out")
    p.add_argument("--repeats", type=int, default=5)
    args = p.parse_args(argv)
    import torch

    from distgnn.comm import Communicator
    from distgnn.scaling.microbench import concurrency

    torch.set_num_threads(1)
    comm = Communicator()
    result = {"ranks": comm.size, **concurrency(comm, args.repeats)}
    if comm.rank == 0:
        Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
