"""Run under ``mpiexec -n 2``: three row exchanges (reduce, broadcast, reduce), then a sum. With
argv[1] == ``skip`` rank 1 skips the second exchange, as a model that branches on its data would:
without DISTGNN_CHECK_COLLECTIVES=1 the job hangs or fails deep in MPI; with it every rank stops at
collective #2 and rank 0 prints one line (exit 2, distgnn.commands.ranks.run_on_ranks). With
``same``: exit 0."""
from __future__ import annotations

import sys

import numpy as np
import torch

from distgnn.comm import Communicator
from distgnn.commands.ranks import run_on_ranks
from distgnn.row_exchange import RowPlan


def main() -> int:
    comm = Communicator()
    skip = sys.argv[1] == "skip"
    one_each = RowPlan(torch.arange(comm.size), np.arange(comm.size + 1))

    def body() -> int:
        for step, direction in enumerate(("reduce", "broadcast", "reduce")):
            if skip and comm.rank == 1 and step == 1:
                continue
            comm.exchange_rows(torch.ones(comm.size, 4), one_each, one_each, "forward", direction)
        return comm.sum(1)

    status, _ = run_on_ranks("skip_exchange", comm, body)
    return status


if __name__ == "__main__":
    sys.exit(main())
