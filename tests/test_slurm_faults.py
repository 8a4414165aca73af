"""Faults of real training jobs on the local one-node Slurm: a killed rank, a preemption."""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import partitioned_twin

pytestmark = pytest.mark.slurm


@pytest.fixture(scope="module")
def parts(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("slurmfaults")
    return partitioned_twin(root, 2, scale=0.003)[1]


def start_launch(parts: Path, run: Path, cwd: Path, *extra: str) -> subprocess.Popen:
    command = [sys.executable, "-m", "distgnn", "launch", str(parts), "--executor", "slurm",
               "--algo", "cd-0", "--hidden", "16", "--eval-every", "0", "--out", str(run), *extra]
    return subprocess.Popen(command, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})


def wait_for(predicate, proc: subprocess.Popen, seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return
        if proc.poll() is not None:
            raise AssertionError(f"launch ended before {what}: {proc.stderr.read()[-3000:]}")
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def epochs_written(run: Path) -> int:
    path = run / "metrics.jsonl"
    return len(path.read_text().splitlines()) if path.exists() else 0


def slurm_rank_pid(job_id: str, rank: int) -> int | None:
    """The pid of the Python process of task ``rank`` of ``job_id`` (read from /proc)."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            env = dict(item.split(b"=", 1) for item in (entry / "environ").read_bytes().split(b"\0") if b"=" in item)
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if (env.get(b"SLURM_JOB_ID") == job_id.encode() and env.get(b"SLURM_PROCID") == str(rank).encode()
                and b"python" in cmdline and b"submitit" in cmdline):
            return int(entry.name)
    return None


def job_id_of(cwd: Path) -> str:
    return next(p.name for p in (cwd / "logs" / "submitit").iterdir() if p.name.isdigit())


def test_sigkill_of_a_rank_under_srun_ends_the_job(local_slurm, parts: Path, tmp_path: Path) -> None:
    run = tmp_path / "run"
    proc = start_launch(parts, run, tmp_path, "--epochs", "400", "--checkpoint-every", "5")
    wait_for(lambda: epochs_written(run) >= 6, proc, 240, "six epochs")
    job_id = job_id_of(tmp_path)
    pid = slurm_rank_pid(job_id, 1)
    assert pid is not None, "rank 1 not found"
    os.kill(pid, signal.SIGKILL)
    killed = time.monotonic()
    _, stderr = proc.communicate(timeout=90)
    assert time.monotonic() - killed < 60, "the job did not end within 60 s"
    assert proc.returncode != 0
    assert "task 1" in stderr or "rank 1" in stderr, stderr[-3000:]
    assert not (run / "summary.json").exists()
    squeue = subprocess.run(["squeue", "-h", "-j", job_id], capture_output=True, text=True).stdout
    assert squeue.strip() == "", "the job is still listed"
    assert list(run.glob("checkpoints/*/manifest.json")), "complete checkpoints are kept"


def test_preemption_requeues_and_resumes(local_slurm, parts: Path, tmp_path: Path) -> None:
    run, epochs = tmp_path / "run", 40
    proc = start_launch(parts, run, tmp_path, "--epochs", str(epochs), "--checkpoint-every", "4")
    wait_for(lambda: list(run.glob("checkpoints/*/manifest.json")) and epochs_written(run) >= 6,
             proc, 240, "a checkpoint")
    job_id = job_id_of(tmp_path)
    subprocess.run(["scancel", "--signal=USR2", job_id], check=True)
    for _ in range(600):  # Slurm holds a requeued job for a while: let it start at once
        show = subprocess.run(["scontrol", "show", "job", job_id], capture_output=True, text=True).stdout
        if "Restarts=1" in show and "JobState=PENDING" in show:
            break
        if proc.poll() is not None:
            break
        time.sleep(0.1)
    subprocess.run(["scontrol", "update", f"JobId={job_id}", "StartTime=now"], capture_output=True)
    _, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 0, stderr[-3000:]
    records = [json.loads(l) for l in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["epoch"] for r in records] == list(range(1, epochs + 1))  # every epoch once
    summary = json.loads((run / "summary.json").read_text())
    assert summary["slurm_job_id"] == job_id
    show = subprocess.run(["scontrol", "show", "job", job_id], capture_output=True, text=True).stdout
    assert "Restarts=1" in show or show == ""  # finished jobs may already be purged


def test_sigstop_of_a_rank_under_srun_ends_the_job_naming_it(local_slurm, parts: Path, tmp_path: Path) -> None:
    """A frozen rank (SIGSTOP) under srun: the watchdog of the live rank ends the job within 60 s
    with one line naming rank 1 (docs/design.md#watchdog)."""
    from distgnn.train.watchdog import HEARTBEATS, read_heartbeat

    run = tmp_path / "run"
    proc = start_launch(parts, run, tmp_path, "--epochs", "100000", "--checkpoint-every", "0",
                        "--hang-timeout", "10")
    wait_for(lambda: epochs_written(run) >= 3 and (run / HEARTBEATS / "rank_1").exists(), proc, 240,
             "three epochs")
    beat = read_heartbeat(run / HEARTBEATS / "rank_1")
    assert beat is not None
    os.kill(beat.pid, signal.SIGSTOP)
    stopped = time.monotonic()
    try:
        _, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
        try:
            os.kill(beat.pid, signal.SIGKILL)  # if Slurm did not reap it
        except ProcessLookupError:
            pass
    assert time.monotonic() - stopped < 60, "the job did not end within 60 s"
    assert proc.returncode != 0
    logs = "".join(p.read_text(errors="replace") for p in (tmp_path / "logs" / "submitit").rglob("*.err"))
    lines = [l for l in (stderr + logs).splitlines() if "--hang-timeout" in l and re.search(r"rank 1 on \S+ \(epoch", l)]
    assert lines, (stderr[-2000:], logs[-2000:])
