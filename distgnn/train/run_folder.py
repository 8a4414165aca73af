"""What a run may write into, and one run at a time in it (docs/design.md#run-folder).

``distgnn train`` writes only into a folder that is new, empty, or a run's own (it holds a run's
entries and nothing that marks another kind, :mod:`distgnn.owned_folder`); a graph store, a
partition folder, a Zarr store, a plain file or a folder of other files is refused in one line
before anything is written or removed. While a run uses its folder, rank 0 holds an exclusive lock on
``RUN/.lock`` (``flock``: the kernel releases it when the process ends, so a run that died keeps
nothing locked); a second run given the same folder is refused in one line naming the holder.
``--resume`` never shortens a run: asking for fewer epochs than the folder has trained is refused.
"""
from __future__ import annotations

import fcntl
import json
import os
import socket
from pathlib import Path
from typing import IO

from distgnn.errors import DistgnnError
from distgnn.owned_folder import check_owned_folder

#: the lock file rank 0 holds while a run uses the folder
LOCK = ".lock"


def check_run_folder(path: Path) -> None:
    """Refuse, in one line naming ``--out``, a ``path`` a run must not write into (module
    docstring); a missing or empty folder, or a run's own, passes."""
    check_owned_folder(path, "a run folder")


def trained_epochs(path: Path) -> int:
    """The epochs a run folder has trained: its ``summary.json``'s, or the last epoch of its
    ``metrics.jsonl`` (0 for neither)."""
    summary = path / "summary.json"
    if summary.is_file():
        try:
            return int(json.loads(summary.read_text())["epochs"])
        except (ValueError, KeyError, TypeError):
            pass
    metrics = path / "metrics.jsonl"
    last = 0
    if metrics.is_file():
        for line in metrics.read_text().splitlines():
            try:
                last = max(last, int(json.loads(line)["epoch"]))
            except (ValueError, KeyError, TypeError):
                continue
    return last


def check_resume_length(path: Path, epochs: int) -> None:
    """``--resume --epochs epochs`` must not cut what ``path`` has trained (one line)."""
    done = trained_epochs(path)
    if epochs < done:
        raise DistgnnError(f"--resume --epochs {epochs}: {path} has trained {done} epochs; "
                           f"continuing would cut them (give --epochs {done} or more, or a new "
                           f"--out for a shorter run)")


class RunLock:
    """Rank 0's exclusive lock on ``RUN/.lock`` for as long as the run lasts."""

    def __init__(self, path: Path):
        self.path = Path(path) / LOCK
        self._file: IO[str] | None = None

    def acquire(self) -> "RunLock":
        """Take the lock, or refuse in one line naming the run that holds it."""
        handle = open(self.path, "a+")
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            handle.seek(0)
            holder = handle.read().strip() or "another process"
            handle.close()
            raise DistgnnError(f"--out {self.path.parent}: in use by another run ({holder}); "
                               f"wait for it to end or give another --out") from None
        handle.seek(0)
        handle.truncate()
        handle.write(f"pid {os.getpid()} on {socket.gethostname()}\n")
        handle.flush()
        self._file = handle
        return self

    def release(self) -> None:
        if self._file is not None:
            self._file.close()   # closing releases the flock
            self._file = None
