"""How a command that runs as MPI ranks (``train``, ``predict``) reports failures: one line from
the rank that knows, and no rank left waiting."""
from __future__ import annotations

import os
import sys
import traceback
from typing import Any, Callable

from distgnn.errors import CollectiveError, DistgnnError


def launcher_rank() -> int:
    """This process's rank as the launcher (mpiexec, srun) tells it, read without starting MPI;
    0 when not launched as a rank."""
    for name in ("OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID"):
        if os.environ.get(name, "").isdigit():
            return int(os.environ[name])
    return 0


def refuse_before_mpi(command: str, check: Callable[[], Any]) -> int | None:
    """Run ``check`` (option validation) before MPI starts; on a bad option print one line from
    rank 0 only (every rank refuses alike) and return exit status 2, else None."""
    try:
        check()
    except DistgnnError as exc:
        if launcher_rank() == 0:
            print(f"distgnn {command}: error: {exc}", file=sys.stderr, flush=True)
        return 2
    return None


def run_on_ranks(command: str, comm: Any, body: Callable[[], Any]) -> tuple[int, Any]:
    """(exit status, result of ``body()``). A :class:`CollectiveError` (raised on every rank
    alike) is printed by rank 0; a :class:`DistgnnError` on one rank (its part is damaged) is
    printed by that rank, which then ends the job; any other exception is a bug or a fault: its
    traceback, one line naming the rank, and the job ended."""
    try:
        return 0, body()
    except CollectiveError as exc:
        if comm.rank == 0:
            print(f"distgnn {command}: error: {exc}", file=sys.stderr, flush=True)
        return 2, None
    except DistgnnError as exc:
        prefix = f"distgnn {command}: rank {comm.rank}: error: " if comm.size > 1 else f"distgnn {command}: error: "
        print(prefix + str(exc), file=sys.stderr, flush=True)
        if comm.size > 1:
            comm.abort(2)
        return 2, None
    except Exception as exc:  # noqa: BLE001 - reported, then every rank is ended
        traceback.print_exc()
        print(f"distgnn {command}: rank {comm.rank}: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
        if comm.size > 1:
            comm.abort(1)
        return 1, None
