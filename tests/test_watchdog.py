"""The hang watchdog: a silent rank, or a job in which every rank waits inside MPI without
progress, ends the job within a bounded time, naming ranks, hosts and what they waited for; live
ranks of a long epoch, a straggler, and stale reads of a network filesystem are never ended; an
interval costs O(P) file operations (docs/design.md#watchdog, docs/design.md#progress)."""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import partitioned_twin
from distgnn.train.watchdog import (HEARTBEATS, Heartbeat, HeartbeatFolder, StartupGuard, Watchdog,
                                    read_heartbeat)


def test_silent_rank_is_named_and_live_ranks_are_left_alone(tmp_path: Path, capfd) -> None:
    """Three in-process 'ranks' with their threads: rank 2 freezes after its first beat; rank 0
    reports it and exits, rank 1 reads the verdict and exits."""
    exits: dict[int, int] = {}
    dogs = [Watchdog(tmp_path, k, 3, timeout=2.0, phase=lambda k=k: f"epoch 1: step of {k}",
                     exit=lambda code, k=k: exits.setdefault(k, code), host=f"h{k}")
            for k in range(3)]
    for dog in dogs:
        dog.interval = 0.2
        dog.start()
    dogs[2].tick = lambda: None  # rank 2's thread freezes (its process still runs)
    started = time.monotonic()
    while len(exits) < 2 and time.monotonic() - started < 10:
        time.sleep(0.05)
    assert exits == {0: 3, 1: 3}, exits
    assert 2.0 <= time.monotonic() - started < 4.0
    dogs[2].stop()
    err = capfd.readouterr().err
    lines = [l for l in err.splitlines() if l.startswith("distgnn train:")]
    assert len(lines) == 1, err
    assert "rank 0: error: silent for more than 2 s" in lines[0]
    assert "rank 2 on h2 (epoch 1: step of 2)" in lines[0]
    assert "rank 0 on h0 was in epoch 1: step of 0" in lines[0]
    beat = read_heartbeat(tmp_path / HEARTBEATS / "rank_1")
    assert beat is not None and beat.pid == os.getpid() and beat.doing == "epoch 1: step of 1"
    assert beat.host == "h1" and beat.call is None and beat.stalled_s == 0


def test_beating_ranks_are_never_ended(tmp_path: Path) -> None:
    exits: list[int] = []
    dogs = [Watchdog(tmp_path, k, 2, timeout=1.0, phase=lambda: "epoch 1: aggregate",
                     exit=exits.append) for k in range(2)]
    for dog in dogs:
        dog.interval = 0.1
        dog.start()
    time.sleep(2.5)  # 2.5 timeouts of a long 'epoch' in which both ranks stay alive
    for dog in dogs:
        dog.stop()
    assert exits == []
    assert not (tmp_path / HEARTBEATS).exists(), "a finished run leaves no heartbeat files"


# -- ranks driven tick by tick on a simulated clock ----------------------------------------------
class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


class Waits:
    """A rank's MPI wait as the watchdog sees it: (call, peers, stalled seconds); ``stall_from``
    makes the wait's last progress a time on the clock."""

    def __init__(self, clock: Clock) -> None:
        self.clock, self.call, self.peers, self.since = clock, None, None, 0.0

    def set(self, call: str | None, peers: tuple | None = None) -> None:
        self.call, self.peers, self.since = call, peers, self.clock.t

    def now(self) -> tuple:
        return self.call, self.peers, (self.clock.t - self.since) if self.call else 0.0


class MemoryFolder(HeartbeatFolder):
    """Heartbeats in memory, every write kept with its time; reads serve the content as it was
    ``lag`` seconds ago (a network filesystem's stale cache); operations counted."""

    def __init__(self, clock: Clock, lag: float = 0.0) -> None:
        self.clock, self.lag = clock, lag
        self.history: dict[int, list[tuple[float, Heartbeat]]] = {}
        self.reads = self.writes = 0

    def make(self) -> None:
        pass

    def write(self, rank: int, beat: Heartbeat) -> None:
        self.writes += 1
        self.history.setdefault(rank, []).append((self.clock.t, beat))

    def read(self, rank: int) -> Heartbeat | None:
        self.reads += 1
        seen = [b for t, b in self.history.get(rank, []) if t <= self.clock.t - self.lag]
        return seen[-1] if seen else None

    def remove(self, rank: int) -> None:
        self.history.pop(rank, None)


def ranks(size: int, timeout: float = 10.0, lag: float = 0.0):
    """``size`` watchdogs on one simulated clock and folder: (clock, folder, waits, dogs, exits)."""
    clock = Clock()
    folder = MemoryFolder(clock, lag)
    waits = [Waits(clock) for _ in range(size)]
    exits: dict[int, int] = {}
    dogs = [Watchdog(Path("."), k, size, timeout, phase=lambda k=k: f"epoch 2: part of {k}",
                     exit=lambda code, k=k: exits.setdefault(k, code), waits=waits[k],
                     folder=folder, host=f"mh{k + 1}", clock=clock) for k in range(size)]
    for dog in dogs:
        dog.beat()
    return clock, folder, waits, dogs, exits


def run_for(seconds: float, clock: Clock, dogs: list[Watchdog], frozen=()) -> None:
    """Tick every dog but the ``frozen`` ones once per interval for ``seconds``."""
    end = clock.t + seconds
    while clock.t < end:
        clock.t += dogs[0].interval
        for dog in dogs:
            if dog.rank not in frozen:
                dog.tick()


def test_every_rank_stalled_in_mpi_ends_the_job_naming_hosts_and_peers(capfd) -> None:
    """A cut link between mh2 and the others (P = 3): ranks 0 and 2 wait for rank 1 in an
    exchange, rank 1 waits for them; none progresses. Rank 0 names each group; everyone exits."""
    clock, _, waits, dogs, exits = ranks(3)
    run_for(5, clock, dogs)
    waits[0].set("exchange_rows(forward, broadcast)", (1,))
    run_for(4, clock, dogs)
    waits[2].set("exchange_rows(forward, broadcast)", (1,))
    waits[1].set("exchange_rows(forward, broadcast)", (0, 2))
    run_for(9, clock, dogs)
    assert exits == {}, "ended before every rank had stalled for the timeout"
    run_for(2 + 4 * dogs[0].interval, clock, dogs)
    assert exits == {0: 3, 1: 3, 2: 3}
    lines = [l for l in capfd.readouterr().err.splitlines() if l.startswith("distgnn train:")]
    assert len(lines) == 1, lines
    assert ("no rank has made progress for more than 10 s (--hang-timeout), every one waiting "
            "inside MPI: ranks 0 (mh1), 2 (mh3) wait for rank 1 (mh2) in exchange_rows(forward, "
            "broadcast) (epoch 2: part of 0); rank 1 (mh2) waits for ranks 0 (mh1), 2 (mh3) in "
            "exchange_rows(forward, broadcast) (epoch 2: part of 1)") in lines[0], lines[0]



def test_the_startup_guard_ends_a_stalled_start_rank_0_first_and_never_a_computing_one(capfd) -> None:
    """Before the heartbeats exist (timeout 10 s, grace 5 s): a rank outside MPI, or in a wait
    that progresses, is never ended; a wait stalled for 15 s ends rank 0 with one line, rank 1
    only after twice that (it speaks when rank 0 could not), rank 2 silently with it."""
    clock = Clock()
    waits = [Waits(clock) for _ in range(3)]
    exits: dict[int, int] = {}
    guards = [StartupGuard(k, 10.0, grace=5.0, exit=lambda code, k=k: exits.setdefault(k, code),
                           waits=waits[k], host=f"mh{k + 1}") for k in range(3)]

    def run(seconds: float) -> None:
        end = clock.t + seconds
        while clock.t < end:
            clock.t += guards[0].interval
            for guard in guards:
                guard.tick(clock.t)

    run(100)                                   # reading, computing: outside MPI
    for _ in range(10):                        # a wait that makes progress every 10 s
        for w in waits:
            w.set("gather")
        run(10)
    assert exits == {} and capfd.readouterr().err == ""
    run(5 + 3 * guards[0].interval)            # now stalled past 15 s: rank 0 only
    assert exits == {0: 3}
    run(15)
    assert exits == {0: 3, 1: 3, 2: 3}
    lines = capfd.readouterr().err.splitlines()
    assert [line.split(":")[0:2] for line in lines] == [["distgnn train", " rank 0"],
                                                        ["distgnn train", " rank 1"]], lines
    assert lines[0].startswith("distgnn train: rank 0: error: starting, rank 0 on mh1 waited ")
    assert "inside MPI (gather) for every rank with no progress (--hang-timeout 10)" in lines[0]
    assert "rank 0 has not ended the job" in lines[1]
    stopped = StartupGuard(0, 10.0, exit=lambda code: exits.setdefault(9, code), waits=waits[0])
    stopped.stop()
    stopped.tick(clock.t + 100)
    assert 9 not in exits, "a guard stopped once the watchdog runs never ends the process"


def test_a_straggler_or_a_computing_rank_is_never_ended() -> None:
    """Rank 1 computes for 60 s while rank 0 waits for it; then rank 1 waits on a slow link whose
    pieces arrive every 5 s (timeout 10 s) while rank 0 waits without progress: nothing ends."""
    clock, _, waits, dogs, exits = ranks(2)
    waits[0].set("allreduce_sum_(gradients)", None)
    run_for(60, clock, dogs)
    waits[1].set("exchange_rows(backward, reduce)", (0,))
    for _ in range(16):
        run_for(5, clock, dogs)
        waits[1].set("exchange_rows(backward, reduce)", (0,))  # a piece arrived
    assert exits == {}
    waits[1].set("exchange_rows(backward, reduce)", (0,))
    run_for(12 + 3 * dogs[0].interval, clock, dogs)  # the link now moves nothing
    assert exits == {0: 3, 1: 3}


def test_a_heartbeat_interval_costs_o_p_file_operations_at_p_128() -> None:
    clock, folder, _, dogs, _ = ranks(128, timeout=600)
    run_for(3 * dogs[0].interval, clock, dogs)
    folder.reads = folder.writes = 0
    run_for(dogs[0].interval, clock, dogs)
    # rank 0 reads the 127 others, each of them reads rank 0; every rank writes its own file
    assert (folder.reads, folder.writes) == (2 * 127, 128)


def test_stale_reads_raise_no_false_alarm_and_a_frozen_rank_is_still_found(capfd) -> None:
    """Reads that serve each file as it was 60 s ago (an attribute cache on NFS) at P = 128 and a
    timeout of 120 s: nothing ends over 10 timeouts; a rank frozen afterwards is named within
    timeout + lag + an interval, and rank 0 exits two intervals later."""
    clock, _, _, dogs, exits = ranks(128, timeout=120, lag=60)
    run_for(1200, clock, dogs)
    assert exits == {}
    frozen_at = clock.t
    while not exits and clock.t - frozen_at < 400:
        run_for(dogs[0].interval, clock, dogs, frozen=(77,))
    assert exits.get(0) == 3 and clock.t - frozen_at <= 120 + 60 + 3 * dogs[0].interval
    line = capfd.readouterr().err
    assert "silent for more than 120 s (--hang-timeout): rank 77 on mh78 (epoch 2: part of 77)" in line


def test_rank_1_reports_a_silent_rank_0(capfd) -> None:
    clock, _, _, dogs, exits = ranks(3)
    run_for(5, clock, dogs)
    run_for(11 + 3 * dogs[0].interval, clock, dogs, frozen=(0,))
    assert exits == {1: 3, 2: 3}
    lines = [l for l in capfd.readouterr().err.splitlines() if l.startswith("distgnn train:")]
    assert len(lines) == 1 and lines[0].startswith("distgnn train: rank 1: error: silent") \
        and "rank 0 on mh1 (epoch 2: part of 0)" in lines[0], lines


@pytest.mark.mpi
@pytest.mark.slow
def test_sigstop_of_one_of_two_ranks_ends_the_mpiexec_job(tmp_path: Path) -> None:
    parts = partitioned_twin(tmp_path, 2, scale=0.003)[1]
    run = tmp_path / "run"
    command = ["mpiexec", "--oversubscribe", "-n", "2", sys.executable, "-m", "distgnn", "train",
               str(parts), "--epochs", "100000", "--hidden", "16", "--threads", "1", "--eval-every",
               "0", "--checkpoint-every", "0", "--hang-timeout", "10", "--out", str(run), "--quiet"]
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "OMP_NUM_THREADS": "1"})
    try:
        deadline = time.monotonic() + 180
        while not (run / "metrics.jsonl").exists() or len((run / "metrics.jsonl").read_text().splitlines()) < 3:
            assert proc.poll() is None, proc.stderr.read()[-3000:]
            assert time.monotonic() < deadline, "training did not start"
            time.sleep(0.2)
        beat = read_heartbeat(run / HEARTBEATS / "rank_1")
        assert beat is not None
        os.kill(beat.pid, signal.SIGSTOP)
        stopped = time.monotonic()
        _, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert time.monotonic() - stopped < 60, "the job did not end within 60 s"
    assert proc.returncode != 0
    ours = [l for l in stderr.splitlines() if l.startswith("distgnn train:")]
    assert len(ours) == 1 and f"rank 1 on {socket.gethostname()} (epoch" in ours[0] \
        and "--hang-timeout" in ours[0], stderr[-3000:]
