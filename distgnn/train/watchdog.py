"""A watchdog on the ranks' liveness and progress: a rank that stops answering (a frozen node, a
stopped process) or a job in which no rank makes progress (a cut link) ends within a bounded
time, with one line naming the ranks, their hosts and what they were waiting for
(docs/design.md#watchdog, docs/design.md#progress).

Every rank runs one thread that, every ``interval`` seconds, rewrites its heartbeat file
``<run_dir>/.heartbeats/rank_<k>`` (:class:`Heartbeat`: a counter, its pid and host, what it is
doing, and the MPI call it waits in with the ranks it waits for and for how long that wait has
made no progress, from :data:`distgnn.row_exchange.WAITS`). Rank 0 reads every other file; every
other rank reads rank 0's alone, so an interval costs P writes and 2 (P - 1) reads however large P
is.
Files are compared on the reader's own clock, so clocks of different nodes never meet.

Rank 0 ends the job when

- a rank's file has not changed for ``timeout`` seconds (*silent*: frozen, stopped, or its host
  gone), or
- every rank, rank 0 included, reports a wait that has made no progress for ``timeout`` seconds
  (*stalled*: a cut link, or collectives that do not match). A rank that computes is never
  stalled, and a slow link that still delivers a piece of an exchange every ``timeout`` seconds
  is progress, so neither a long epoch nor a straggler is ever ended.

It prints one line, writes it into its own heartbeat as the verdict, and exits with status 3
after two intervals; every other rank that reads the verdict exits too (status 3), so a rank
whose host is cut off from the others ends itself although no srun can reach it. If rank 0 itself
falls silent, rank 1 reports it and every rank exits. mpiexec and srun (``--kill-on-bad-exit``)
end the rest. Checkpoints already written stay. No MPI call is made from the thread.
"""
from __future__ import annotations

import json
import os
import socket
import sys
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

from distgnn.row_exchange import WAITS, WaitState

HEARTBEATS = ".heartbeats"
#: exit status of a process ended by the watchdog
EXIT_SILENT_RANK = 3
#: ranks and groups a line names before it says "and N more"
NAMED = 6


def heartbeat_interval(timeout: float) -> float:
    """Seconds between heartbeats: a quarter of the timeout, between 0.5 and 5."""
    return max(0.5, min(5.0, timeout / 4))


@dataclass(frozen=True)
class Heartbeat:
    """One rank's heartbeat file (one JSON object)."""

    counter: int                     #: rises with every beat
    pid: int
    host: str
    doing: str                       #: what the rank is doing, e.g. ``epoch 3: exchange_wait``
    call: str | None = None          #: the MPI call it waits in, None outside MPI
    waiting_for: list[int] | None = None  #: ranks it waits for; None: every rank (a collective)
    stalled_s: float = 0.0           #: seconds its wait has made no progress (0 outside a wait)
    verdict: str | None = None       #: rank 0's line that ends the job, once it has decided

    def dumps(self) -> str:
        return json.dumps(asdict(self)) + "\n"

    @classmethod
    def loads(cls, text: str) -> "Heartbeat":
        return cls(**json.loads(text))


def read_heartbeat(path: Path) -> Heartbeat | None:
    """The heartbeat in ``path``, or None when it is missing, being replaced or unreadable."""
    try:
        return Heartbeat.loads(path.read_text())
    except (OSError, ValueError, TypeError):
        return None


class HeartbeatFolder:
    """The heartbeat files of one run: ``<run_dir>/.heartbeats/rank_<k>`` (tests replace it to
    count operations or serve stale reads)."""

    def __init__(self, run_dir: Path):
        self.path = Path(run_dir) / HEARTBEATS

    def make(self) -> None:
        self.path.mkdir(parents=True, exist_ok=True)

    def write(self, rank: int, beat: Heartbeat) -> None:
        """Replace rank ``rank``'s file (temporary name, then rename: readers never see half)."""
        path = self.path / f"rank_{rank}"
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_text(beat.dumps())
        os.replace(tmp, path)

    def read(self, rank: int) -> Heartbeat | None:
        return read_heartbeat(self.path / f"rank_{rank}")

    def remove(self, rank: int) -> None:
        """Remove rank ``rank``'s file (the last rank out removes the folder)."""
        (self.path / f"rank_{rank}").unlink(missing_ok=True)
        try:
            self.path.rmdir()
        except OSError:
            pass  # other ranks' files are still there


def _ranks(ranks: list[int], hosts: dict[int, str]) -> str:
    """``rank 2 (mh3)`` or ``ranks 0 (mh1), 1 (mh2)``, the first :data:`NAMED` of them."""
    named = ", ".join(f"{k} ({hosts.get(k, '?')})" for k in ranks[:NAMED])
    more = f" and {len(ranks) - NAMED} more" if len(ranks) > NAMED else ""
    return f"rank{'s' * (len(ranks) > 1)} {named}{more}"


def stalled_line(beats: dict[int, Heartbeat], timeout: float) -> str:
    """The line for a job whose every rank is stalled: the ranks grouped by what they wait for."""
    hosts = {k: b.host for k, b in beats.items()}
    groups: dict[tuple, list[int]] = {}
    for k in sorted(beats):
        b = beats[k]
        key = (b.call, None if b.waiting_for is None else tuple(b.waiting_for))
        groups.setdefault(key, []).append(k)
    parts = []
    for (call, waiting_for), ranks in list(groups.items())[:NAMED]:
        target = "every rank" if waiting_for is None else _ranks(list(waiting_for), hosts)
        parts.append(f"{_ranks(ranks, hosts)} wait{'s' * (len(ranks) == 1)} for {target} in "
                     f"{call} ({beats[ranks[0]].doing})")
    if len(groups) > NAMED:
        parts.append(f"and {len(groups) - NAMED} more groups")
    return (f"no rank has made progress for more than {timeout:g} s (--hang-timeout), every one "
            f"waiting inside MPI: {'; '.join(parts)}; a link between these hosts is down, or the "
            f"ranks started different collectives")


class Watchdog:
    """One rank's heartbeat thread (see the module docstring). ``phase()`` says what the rank's
    main thread is doing; ``exit`` ends the process (``os._exit`` unless a test passes another);
    ``waits`` is the process's MPI wait state; ``folder`` and ``clock`` are for tests."""

    def __init__(self, run_dir: Path, rank: int, size: int, timeout: float,
                 phase: Callable[[], str], exit: Callable[[int], None] = os._exit,
                 waits: WaitState = WAITS, folder: HeartbeatFolder | None = None,
                 host: str | None = None, clock: Callable[[], float] = time.monotonic):
        self.folder = folder or HeartbeatFolder(run_dir)
        self.rank, self.size, self.timeout = rank, size, float(timeout)
        self.interval = heartbeat_interval(self.timeout)
        self.phase, self._exit, self.waits, self.clock = phase, exit, waits, clock
        self.host = host or socket.gethostname()
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._loop, name="distgnn-watchdog", daemon=True)
        self.counter = 0
        self.verdict: str | None = None
        self._writing = threading.Lock()
        start = clock()
        #: rank -> (its last heartbeat read, when it last changed on our clock)
        self.seen: dict[int, Heartbeat] = {}
        self.changed = {k: start for k in self.watched()}
        #: when this rank decided to end (rank 0 lingers two intervals for the others to read it)
        self.ending_at: float | None = None

    def watched(self) -> list[int]:
        """The ranks whose files this rank reads: rank 0 every other, the others rank 0."""
        return [k for k in range(1, self.size)] if self.rank == 0 else [0]

    def start(self) -> "Watchdog":
        self.folder.make()
        self._beat()
        self.thread.start()
        return self

    def stop(self) -> None:
        """End the thread and remove this rank's file (the last rank out removes the folder)."""
        self.stopped.set()
        if self.thread.is_alive():
            self.thread.join(timeout=2 * self.interval)
        self.folder.remove(self.rank)

    def beat(self) -> None:
        """Beat now, outside the interval (the main thread, when its phase changes: a rank that
        loaded its part and froze before the next beat is reported in training, not loading)."""
        try:
            self._beat()
        except OSError:
            pass  # as in the loop: the others will time out on us

    def heartbeat(self) -> Heartbeat:
        """This rank's heartbeat now."""
        call, peers, stalled = self.waits.now()
        return Heartbeat(self.counter, os.getpid(), self.host, self.phase(), call,
                         None if peers is None else list(peers), round(stalled, 3), self.verdict)

    def _beat(self) -> None:
        with self._writing:
            self.counter += 1
            self.folder.write(self.rank, self.heartbeat())

    def exit(self, status: int) -> None:
        """End the process (a test's stand-in returns: the thread then stops ticking)."""
        self.stopped.set()
        self._exit(status)

    def _loop(self) -> None:
        while not self.stopped.wait(self.interval):
            self.tick()

    def tick(self) -> None:
        """One interval: beat, read the watched files, and end the process if it must."""
        if self.stopped.is_set():
            return
        try:
            self._beat()
        except OSError:
            pass  # a full or vanished folder: the others will time out on us, as they should
        now = self.clock()
        if self.ending_at is not None:
            if now - self.ending_at >= 2 * self.interval:
                self.exit(EXIT_SILENT_RANK)
            return
        for k in self.watched():
            beat = self.folder.read(k)
            if beat is not None and (k not in self.seen or beat.counter != self.seen[k].counter):
                self.seen[k], self.changed[k] = beat, now
        if self.stopped.is_set():
            return
        if self.rank != 0:
            self._follow(now)
            return
        line = self._judge(now)
        if line is not None:
            self._end(line, now)

    def _judge(self, now: float) -> str | None:
        """Rank 0: the line that ends the job, or None while it may go on."""
        silent = sorted(k for k, t in self.changed.items() if now - t > self.timeout)
        if silent:
            return self._silent_line(silent)
        mine = self.heartbeat()
        beats = {0: mine, **self.seen}
        if len(beats) == self.size and all(b.call is not None and b.stalled_s >= self.timeout
                                           for b in beats.values()):
            return stalled_line(beats, self.timeout)
        return None

    def _silent_line(self, silent: list[int]) -> str:
        names = "; ".join(
            f"rank {k} on {self.seen[k].host} ({self.seen[k].doing})" if k in self.seen
            else f"rank {k} (no heartbeat at all)" for k in silent)
        call, peers, _ = self.waits.now()
        where = self.phase() + (f", waiting in {call}" if call else "")
        return (f"silent for more than {self.timeout:g} s (--hang-timeout): {names}; rank "
                f"{self.rank} on {self.host} was in {where}")

    def _follow(self, now: float) -> None:
        """A rank other than 0: end when rank 0 has decided, or when rank 0 falls silent."""
        zero = self.seen.get(0)
        if zero is not None and zero.verdict:
            self.exit(EXIT_SILENT_RANK)
            return
        if now - self.changed[0] > self.timeout:
            if self.rank == 1:
                self._end(self._silent_line([0]), now)
            else:
                self.ending_at = now  # rank 1 reports; exit after two intervals

    def _end(self, line: str, now: float) -> None:
        print(f"distgnn train: rank {self.rank}: error: {line}; ending the job (checkpoints are "
              "kept)", file=sys.stderr, flush=True)
        self.verdict = line
        try:
            self._beat()  # the others read the verdict and end themselves
        except OSError:
            pass
        self.ending_at = now


class StartupGuard:
    """The watchdog's stand-in while a run starts (docs/design.md#progress). The heartbeats live
    in the run folder, which start-up's first collectives check and create, so a link cut before
    then would leave every rank waiting in MPI for ever (Open MPI's TCP connect warns "may now
    hang" and does). Each rank runs this thread until :class:`Watchdog` starts: when its main
    thread has waited inside one MPI call for ``timeout + grace`` seconds with no progress (grace:
    what a start-up step may legitimately make the others wait, such as the shared-folder probe),
    rank 0 prints one line and exits 3 two intervals later; rank 1 does the same after twice that
    wait (had rank 0 frozen or been cut off, it would never print), the other ranks exit 3 silently
    then. A rank of a job ending this way is usually killed by mpiexec or srun first. ``exit``,
    ``waits`` and ``host`` are for tests."""

    def __init__(self, rank: int, timeout: float, grace: float = 0.0,
                 exit: Callable[[int], None] = os._exit, waits: WaitState = WAITS,
                 host: str | None = None):
        self.rank, self.timeout, self.limit = rank, float(timeout), float(timeout) + float(grace)
        self.interval = heartbeat_interval(self.limit)
        self._exit, self.waits = exit, waits
        self.host = host or socket.gethostname()
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._loop, name="distgnn-startup-guard", daemon=True)
        self.ending_at: float | None = None

    def start(self) -> "StartupGuard":
        self.thread.start()
        return self

    def stop(self) -> None:
        self.stopped.set()

    def _loop(self) -> None:
        while not self.stopped.wait(self.interval):
            self.tick(time.monotonic())

    def patience(self) -> float:
        """Seconds of a stalled wait after which this rank acts: ``limit`` for rank 0, twice
        that for the others (rank 0 speaks first)."""
        return self.limit if self.rank == 0 else 2 * self.limit

    def tick(self, now: float) -> None:
        """One interval: end the process when its wait has stalled past :meth:`patience`."""
        if self.stopped.is_set():
            return
        if self.ending_at is not None:
            if now - self.ending_at >= 2 * self.interval:
                self.stopped.set()
                self._exit(EXIT_SILENT_RANK)
            return
        call, _, stalled = self.waits.now()
        if call is None or stalled < self.patience():
            return
        if self.rank <= 1:
            who = "" if self.rank == 0 else ", and rank 0 has not ended the job"
            print(f"distgnn train: rank {self.rank}: error: starting, rank {self.rank} on "
                  f"{self.host} waited {stalled:.0f} s inside MPI ({call}) for every rank with no "
                  f"progress{who} (--hang-timeout {self.timeout:g}): a link between "
                  f"the hosts is down, or a rank is frozen or never started; ending the job "
                  f"(checkpoints are kept)", file=sys.stderr, flush=True)
        self.ending_at = now
