"""Errors that one rank finds during set-up or at the end of a run: the ranks agree on them.

A set-up step that one rank can fail alone (its part is damaged, rank 0 cannot create the run
folder) runs as :func:`agreed`: every rank runs its share, then all exchange one small message
(an error flag and its text), and when any rank failed (a :class:`DistgnnError`, or an
operating system's error while reading or writing: no space, read-only, a name too long) every rank raises the same
:class:`CollectiveError` naming the lowest failing rank and its host. Rank 0 prints that one line
and every rank leaves through MPI's normal finalisation with exit status 2, never ``MPI_Abort``.
An agreement is a collective: a step runs between two of them, never around another collective
that a failing rank would skip. Errors inside an epoch, where ranks may be blocked in an
exchange, keep the watchdog's and the abort's path (docs/design.md#errors-across-ranks).
"""
from __future__ import annotations

import socket
from typing import Callable, TypeVar

from distgnn.comm import Communicator
from distgnn.errors import CollectiveError, DistgnnError, os_error_line

T = TypeVar("T")


def agreed(comm: Communicator, step: Callable[[], T]) -> T:
    """Run this rank's ``step``, then agree with every rank on whether all succeeded: when any
    raised a :class:`DistgnnError` or an :class:`OSError`, every rank raises ``rank K (host): <its message>`` for the
    lowest failing K. A :class:`CollectiveError` (raised by every rank alike) passes as it is."""
    failure: str | None = None
    result = None
    try:
        result = step()
    except CollectiveError:
        raise
    except DistgnnError as exc:
        failure = str(exc)
    except OSError as exc:
        failure = os_error_line(exc)
    if comm.size == 1:
        if failure is not None:
            raise DistgnnError(failure)
        return result
    mine = None if failure is None else (socket.gethostname(), failure)
    gathered = comm.gather(mine)
    verdict = None
    if comm.rank == 0:
        failed = [(k, got) for k, got in enumerate(gathered) if got is not None]
        if failed and len(failed) == comm.size and len({m for _, (_, m) in failed}) == 1:
            verdict = failed[0][1][1]     # every rank alike: the message alone
        elif failed:
            k, (host, message) = failed[0]
            verdict = f"rank {k} ({host}): {message}"
    verdict = comm.bcast(verdict)
    if verdict is not None:
        raise CollectiveError(verdict)
    return result
