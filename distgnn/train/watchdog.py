"""A watchdog on the ranks' liveness: a rank that stops answering (a frozen node, a stopped
process) ends the whole job within a bounded time, with one line naming it.

Every rank runs one thread that, every ``interval`` seconds, rewrites its heartbeat file
``<run_dir>/.heartbeats/rank_<k>`` (a counter, its pid and what the rank is doing now, e.g.
``epoch 3: exchange_wait``) and reads the other ranks' files. A rank whose file has not changed
for ``timeout`` seconds, by the reader's own clock (so clocks of different nodes never meet), is
silent. The lowest-numbered rank that still beats prints one line naming the silent ranks, what
they were doing and where it was waiting itself, and every rank that sees the silence ends its
process (exit status 3); mpiexec and srun (``--kill-on-bad-exit``) then end the rest. Checkpoints
already written stay. This watches liveness, not epoch length: a long epoch whose ranks are all
alive is never ended (docs/design.md#watchdog). The files sit in the run folder because it is
shared by all ranks of a job (a cluster's network filesystem); no MPI call is made from the thread.
"""
from __future__ import annotations

import os
import sys
import threading
import time
from pathlib import Path
from typing import Callable

HEARTBEATS = ".heartbeats"
#: exit status of a process ended by the watchdog
EXIT_SILENT_RANK = 3


def heartbeat_interval(timeout: float) -> float:
    """Seconds between heartbeats: a quarter of the timeout, between 0.5 and 5."""
    return max(0.5, min(5.0, timeout / 4))


def read_heartbeat(path: Path) -> tuple[int, int, str] | None:
    """(counter, pid, phase) of a heartbeat file, or None when it is missing or being replaced."""
    try:
        counter, pid, phase = path.read_text().split(" ", 2)
        return int(counter), int(pid), phase.strip()
    except (OSError, ValueError):
        return None


class Watchdog:
    """One rank's heartbeat thread (see the module docstring). ``phase()`` says what the rank's
    main thread is doing; ``exit`` ends the process (``os._exit`` unless a test passes another)."""

    def __init__(self, run_dir: Path, rank: int, size: int, timeout: float,
                 phase: Callable[[], str], exit: Callable[[int], None] = os._exit):
        self.folder = Path(run_dir) / HEARTBEATS
        self.rank, self.size, self.timeout = rank, size, float(timeout)
        self.interval = heartbeat_interval(self.timeout)
        self.phase = phase
        self.exit = exit
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._loop, name="distgnn-watchdog", daemon=True)
        self.counter = 0
        self._writing = threading.Lock()

    def start(self) -> "Watchdog":
        self.folder.mkdir(parents=True, exist_ok=True)
        self._beat()
        self.thread.start()
        return self

    def stop(self) -> None:
        """End the thread and remove this rank's file (the last rank out removes the folder)."""
        self.stopped.set()
        if self.thread.is_alive():
            self.thread.join(timeout=2 * self.interval)
        (self.folder / f"rank_{self.rank}").unlink(missing_ok=True)
        try:
            self.folder.rmdir()
        except OSError:
            pass  # other ranks' files are still there: the last one out removes it

    def beat(self) -> None:
        """Beat now, outside the interval (the main thread, when its phase changes: a rank that
        loaded its part and froze before the next beat is reported in training, not loading)."""
        try:
            self._beat()
        except OSError:
            pass  # as in the loop: the others will time out on us

    def _beat(self) -> None:
        with self._writing:
            self.counter += 1
            path = self.folder / f"rank_{self.rank}"
            tmp = path.with_name(f".{path.name}.tmp")
            tmp.write_text(f"{self.counter} {os.getpid()} {self.phase()}\n")
            os.replace(tmp, path)

    def _loop(self) -> None:
        start = time.monotonic()
        seen: dict[int, tuple[int, int, str]] = {}  # rank -> its last heartbeat read
        changed = {k: start for k in range(self.size) if k != self.rank}
        while not self.stopped.wait(self.interval):
            try:
                self._beat()
            except OSError:
                pass  # a full or vanished folder: the others will time out on us, as they should
            now = time.monotonic()
            for k in changed:
                beat = read_heartbeat(self.folder / f"rank_{k}")
                if beat is not None and (k not in seen or beat[0] != seen[k][0]):
                    seen[k], changed[k] = beat, now
            silent = sorted(k for k, t in changed.items() if now - t > self.timeout)
            if silent and not self.stopped.is_set():
                self._end(silent, seen)
                return

    def _end(self, silent: list[int], seen: dict[int, tuple[int, int, str]]) -> None:
        reporter = min(k for k in range(self.size) if k not in silent)
        if self.rank == reporter:
            names = "; ".join(f"rank {k} ({seen[k][2] if k in seen else 'no heartbeat at all'})"
                              for k in silent)
            print(f"distgnn train: rank {self.rank}: error: silent for more than "
                  f"{self.timeout:g} s (--hang-timeout): {names}; rank {self.rank} was in "
                  f"{self.phase()}; ending the job (checkpoints are kept)", file=sys.stderr, flush=True)
        else:
            time.sleep(2 * self.interval)  # let the reporter's line out first
        self.exit(EXIT_SILENT_RANK)
