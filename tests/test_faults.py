"""Faults during training: a killed rank ends the job promptly; resume reaches the same losses."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from conftest import partitioned_twin, sigint_at_default

pytestmark = pytest.mark.mpi
EPOCHS = 40


def rank_pids(mpiexec_pid: int) -> dict[int, int]:
    """MPI rank -> pid of the processes mpiexec started (read from their environment)."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes().split(b"\0")
            status = (entry / "status").read_text()
        except OSError:
            continue
        ppid = int(next(l for l in status.splitlines() if l.startswith("PPid:")).split()[1])
        if ppid != mpiexec_pid:
            continue
        for item in environ:
            if item.startswith(b"OMPI_COMM_WORLD_RANK="):
                found[int(item.split(b"=")[1])] = int(entry.name)
    return found


def losses(run: Path) -> np.ndarray:
    return np.array([json.loads(l)["loss"] for l in (run / "metrics.jsonl").read_text().splitlines()])


def test_sigkill_of_one_rank_ends_the_job_and_resume_recovers(tmp_path: Path) -> None:
    _, parts = partitioned_twin(tmp_path, 2, scale=0.003)
    common = ["--algo", "cd-2", "--epochs", str(EPOCHS), "--checkpoint-every", "4",
              "--eval-every", "0", "--threads", "1", "--hidden", "16", "--quiet"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    mpi = ["mpiexec", "--oversubscribe", "-n", "2", sys.executable, "-m", "distgnn", "train", str(parts)]

    whole = tmp_path / "whole"
    done = subprocess.run(mpi + ["--out", str(whole), *common], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]

    run = tmp_path / "killed"
    proc = subprocess.Popen(mpi + ["--out", str(run), *common], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    metrics = run / "metrics.jsonl"
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and proc.poll() is None:
        if metrics.exists() and len(metrics.read_text().splitlines()) >= 9:
            break
        time.sleep(0.05)
    assert proc.poll() is None, "training ended before the kill"
    pids = rank_pids(proc.pid)
    assert set(pids) == {0, 1}, pids
    os.kill(pids[1], signal.SIGKILL)
    killed_at = time.monotonic()
    _, stderr = proc.communicate(timeout=60)  # the whole job ends within 60 s
    assert time.monotonic() - killed_at < 60
    assert proc.returncode != 0
    assert "rank 1" in stderr and "signal 9" in stderr, stderr[-2000:]
    assert not (run / "summary.json").exists()

    resumed = subprocess.run(mpi + ["--out", str(run), *common, "--resume"], env=env,
                             capture_output=True, text=True)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    epochs = [json.loads(l)["epoch"] for l in metrics.read_text().splitlines()]
    assert epochs == list(range(1, EPOCHS + 1))
    np.testing.assert_allclose(losses(run), losses(whole), rtol=1e-6)


def test_ctrl_c_of_mpiexec_names_the_newest_checkpoint(tmp_path: Path) -> None:
    """Ctrl-C of ``mpiexec -n 2 distgnn train`` (mpiexec passes it on as SIGTERM): one line from
    rank 0 saying the run was interrupted, where the newest checkpoint is and how to resume;
    nothing else from distgnn. mpiexec's own exit status is 1 whatever the ranks return."""
    _, parts = partitioned_twin(tmp_path, 2, scale=0.003)
    run = tmp_path / "run"
    proc = subprocess.Popen(
        ["mpiexec", "--oversubscribe", "-n", "2", sys.executable, "-m", "distgnn", "train",
         str(parts), "--epochs", "100000", "--checkpoint-every", "2", "--eval-every", "0",
         "--threads", "1", "--hidden", "16", "--quiet", "--out", str(run)],
        env={**os.environ, "OMP_NUM_THREADS": "1"}, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True, preexec_fn=sigint_at_default)
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and proc.poll() is None \
            and not list(run.glob("checkpoints/*/manifest.json")):
        time.sleep(0.05)
    assert proc.poll() is None, "training ended before the interrupt"
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=60)
    ours = [line for line in stderr.splitlines() if line.startswith("distgnn")]
    assert len(ours) == 1, stderr[-2000:]
    assert ours[0].startswith("distgnn train: interrupted; the newest checkpoint is ")
    assert "checkpoints/epoch_" in ours[0] and "--resume" in ours[0]
    assert "Traceback" not in stderr and proc.returncode != 0
