"""The run folder must be one folder for every rank (docs/design.md#shared-run-folder).

Heartbeats, checkpoints, ``metrics.jsonl`` and ``model.pt`` assume that what one rank writes in
the run folder every other rank sees. On a cluster a folder on node-local storage (``/tmp``,
``/scratch``) has the same path on every host but other contents; a run there would go on until
the watchdog took the other hosts' missing heartbeats for silent ranks. So at start rank 0 writes
a probe file there and every rank looks for it; the ranks that do not see it are named, with their
hosts, in one line.
"""
from __future__ import annotations

import math
import os
import secrets
import socket
import time
from pathlib import Path

from distgnn.comm import Communicator
from distgnn.errors import CollectiveError

#: seconds a rank keeps looking for the probe (a network filesystem may cache a missing name)
PROBE_WAIT_S = 10.0
#: environment variable that sets those seconds instead (a filesystem known to be quicker or slower)
PROBE_WAIT_ENV = "DISTGNN_SHARED_PROBE_S"


def probe_wait_s() -> float:
    """Seconds to look for the probe: ``DISTGNN_SHARED_PROBE_S`` if set, else PROBE_WAIT_S."""
    text = os.environ.get(PROBE_WAIT_ENV, "").strip()
    if not text:
        return PROBE_WAIT_S
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not value >= 0:  # NaN too
        raise CollectiveError(f"{PROBE_WAIT_ENV}={text!r}: expected seconds >= 0")
    return value


def sees(path: Path, wait_s: float) -> bool:
    """Whether ``path`` exists, listing its folder again (which refreshes a network
    filesystem's cached view) for up to ``wait_s`` seconds."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            if path.name in os.listdir(path.parent):
                return True
        except OSError:
            pass  # the folder itself is missing here
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.5)


def startup_grace_s() -> float:
    """How long start-up may make ranks wait in MPI beyond ``--hang-timeout`` (the probe's own
    wait, which :func:`check_shared_folder` refuses when its variable is bad)."""
    try:
        return probe_wait_s()
    except CollectiveError:
        return PROBE_WAIT_S


def check_shared_folder(folder: Path, comm: Communicator, option: str = "--out",
                        wait_s: float | None = None) -> None:
    """Raise :class:`CollectiveError` (on every rank) naming the ranks and hosts that do not see
    what rank 0 writes in ``folder`` (which rank 0 has created), each looking for up to
    ``wait_s`` seconds (default :func:`probe_wait_s`). Collective."""
    if comm.size == 1:
        return
    wait_s = probe_wait_s() if wait_s is None else wait_s
    token = comm.bcast(secrets.token_hex(8) if comm.rank == 0 else None)
    probe = folder / f".shared-probe-{token}"
    if comm.rank == 0:
        probe.write_text(socket.gethostname())
    comm.barrier()
    seen = comm.gather((socket.gethostname(), comm.rank == 0 or sees(probe, wait_s)))
    verdict = None
    if comm.rank == 0:
        probe.unlink(missing_ok=True)
        blind = [f"rank {k} ({host})" for k, (host, ok) in enumerate(seen) if not ok]
        if blind:
            verdict = (f"{option} {folder}: not one folder for every rank: {', '.join(blind)} "
                       f"cannot see what rank 0 ({seen[0][0]}) writes there (node-local "
                       f"storage?); use a folder every host mounts")
    verdict = comm.bcast(verdict)
    if verdict is not None:
        raise CollectiveError(verdict)
