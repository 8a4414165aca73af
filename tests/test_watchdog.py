"""The hang watchdog: a silent rank ends the job within a bounded time, naming it; live ranks of a
long epoch are never ended (docs/design.md#watchdog)."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import partitioned_twin
from distgnn.train.watchdog import HEARTBEATS, Watchdog, read_heartbeat


def test_silent_rank_is_named_and_live_ranks_are_left_alone(tmp_path: Path, capfd) -> None:
    """Three in-process 'ranks': 0 and 1 beat, 2 stops after its first beat; rank 0 reports 2."""
    exits: dict[int, int] = {}
    dogs = [Watchdog(tmp_path, k, 3, timeout=2.0, phase=lambda k=k: f"epoch 1: step of {k}",
                     exit=lambda code, k=k: exits.setdefault(k, code)) for k in range(3)]
    dogs[0].interval = dogs[1].interval = dogs[2].interval = 0.2
    for dog in dogs:
        dog.start()
    dogs[2]._beat = lambda: None  # rank 2 falls silent after its first heartbeat (still running)
    started = time.monotonic()
    while len(exits) < 2 and time.monotonic() - started < 10:
        time.sleep(0.05)
    assert exits == {0: 3, 1: 3}, exits
    assert 2.0 <= time.monotonic() - started < 4.0
    dogs[2].stop()
    err = capfd.readouterr().err
    lines = [l for l in err.splitlines() if l.startswith("distgnn train:")]
    assert len(lines) == 1, err
    assert "rank 0: error" in lines[0] and "rank 2 (epoch 1: step of 2)" in lines[0]
    assert "rank 0 was in epoch 1: step of 0" in lines[0]
    beat = read_heartbeat(tmp_path / HEARTBEATS / "rank_1")
    assert beat is not None and beat[1] == os.getpid() and beat[2] == "epoch 1: step of 1"


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


@pytest.mark.mpi
@pytest.mark.slow
def test_sigstop_of_one_of_two_ranks_ends_the_mpiexec_job(tmp_path: Path) -> None:
    parts = partitioned_twin(tmp_path, 2, scale=0.003)[1]
    run = tmp_path / "run"
    command = ["mpiexec", "--oversubscribe", "-n", "2", sys.executable, "-m", "distgnn", "train",
               str(parts), "--epochs", "100000", "--hidden", "16", "--threads", "1", "--eval-every",
               "0", "--checkpoint-every", "0", "--hang-timeout", "20", "--out", str(run), "--quiet"]
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
        os.kill(beat[1], signal.SIGSTOP)
        stopped = time.monotonic()
        _, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert time.monotonic() - stopped < 60, "the job did not end within 60 s"
    assert proc.returncode != 0
    ours = [l for l in stderr.splitlines() if l.startswith("distgnn train:")]
    assert len(ours) == 1 and "rank 1 (epoch" in ours[0] and "--hang-timeout" in ours[0], stderr[-3000:]
