"""Faults while a run reads or writes its folder (docs/design.md#checkpoints): a damaged newest
checkpoint is named and the one before it resumes exactly; a full disk at a checkpoint, a
read-only checkpoints folder and an ``--out`` name too long are one line from rank 0, exit 2, no
traceback and no MPI_ABORT, with every complete checkpoint kept. Two ranks under mpiexec; the
full disk and the read-only folder are a small tmpfs and a read-only bind mount in a private
mount namespace (``unshare -m``: root)."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import mpiexec, partitioned_twin
from test_run_folder import digest

pytestmark = pytest.mark.mpi

TRAIN = ("--epochs", "6", "--hidden", "16", "--threads", "1", "--quiet")


def losses(run: Path) -> list[float]:
    return [json.loads(line)["loss"] for line in (run / "metrics.jsonl").read_text().splitlines()]


def one_line(proc: subprocess.CompletedProcess, *words: str) -> str:
    """The run's one error line (mpiexec's own banner about a non-zero exit aside)."""
    ours = [line for line in proc.stderr.splitlines() if line.startswith("distgnn train")]
    assert proc.returncode == 2 and len(ours) == 1, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr and "MPI_ABORT" not in proc.stderr, proc.stderr[-3000:]
    assert all(w in ours[0] for w in words), ours
    return ours[0]


@pytest.fixture(scope="module")
def finished(tmp_path_factory) -> tuple[Path, Path]:
    """(a 2-part folder, a finished 6-epoch run with checkpoints after epochs 2 and 4)."""
    root = tmp_path_factory.mktemp("faults")
    _, parts = partitioned_twin(root, 2, scale=0.005)
    run = root / "run"
    proc = mpiexec(2, "train", parts, *TRAIN, "--checkpoint-every", "2", "--out", run)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return parts, run


def test_a_damaged_newest_checkpoint_is_named_and_the_one_before_resumes_exactly(finished, tmp_path) -> None:
    parts, unbroken = finished
    run = tmp_path / "run"
    shutil.copytree(unbroken, run)
    damaged = run / "checkpoints" / "epoch_000004" / "rank_1.pt"
    os.truncate(damaged, 100)
    proc = mpiexec(2, "train", parts, *TRAIN[:-1], "--checkpoint-every", "2", "--resume", "--out", run)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"checkpoint after epoch 4 is damaged: {damaged} cannot be read" in proc.stderr
    assert "continuing after epoch 2" in proc.stderr
    assert losses(run) == losses(unbroken)

    # nothing readable: refused before anything is cut
    for folder in (run / "checkpoints").iterdir():
        os.truncate(folder / "model.pt", 10)
    before = digest(run)
    one_line(mpiexec(2, "train", parts, *TRAIN, "--checkpoint-every", "2", "--resume", "--out", run),
             "--resume: no checkpoint under", "can be read", "start again without --resume")
    assert digest(run) == before


def test_an_out_name_too_long_is_one_line(finished, tmp_path) -> None:
    parts, unbroken = finished
    before = {p: digest(p) for p in (parts, unbroken)}
    long = tmp_path / ("x" * 300)
    one_line(mpiexec(2, "train", parts, *TRAIN, "--out", long), f"--out {long}", "File name too long")
    assert {p: digest(p) for p in before} == before


def private_mounts(script: str, cwd: Path) -> subprocess.CompletedProcess:
    """``script`` (bash) in a private mount namespace, with this test's Python first on PATH."""
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("needs root and unshare for a private tmpfs and bind mount")
    env = {**os.environ, "OMP_NUM_THREADS": "1",
           "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    return subprocess.run(["unshare", "-m", "bash", "-euc", script], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=600)


def test_a_full_disk_at_a_checkpoint_keeps_the_complete_ones_and_resumes_exactly(finished, tmp_path) -> None:
    parts, unbroken = finished
    train = (f"mpiexec --oversubscribe -n 2 {sys.executable} -m distgnn train {parts} "
             f"{' '.join(TRAIN)} --checkpoint-every 1 --out disk/run")
    # a 2 MiB tmpfs with ~700 KB free: two checkpoints of this run (~280 KB each) fit, a third not
    proc = private_mounts(f"""
        mkdir disk && mount -t tmpfs -o size=2m tmpfs disk
        dd if=/dev/zero of=disk/filler bs=4096 count=337 status=none
        set +e; {train} 2> full.err; echo $? > full.rc; set -e
        cp -r disk/run first
        rm disk/filler
        {train} --resume
        cp -r disk/run resumed
        """, tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    full = subprocess.CompletedProcess([], int((tmp_path / "full.rc").read_text()), "",
                                       (tmp_path / "full.err").read_text())
    one_line(full, "checkpoint after epoch 3 not written", "No space left on device",
             "disk/run/checkpoints/epoch_000003/", "the checkpoint after epoch 2 is kept",
             "rerun with --resume")
    assert sorted(p.name for p in (tmp_path / "first" / "checkpoints").iterdir()) == \
        ["epoch_000001", "epoch_000002"]   # the incomplete third removed, no temporaries left
    assert losses(tmp_path / "resumed") == losses(unbroken)


def test_a_read_only_checkpoints_folder_is_refused_before_training(finished, tmp_path) -> None:
    parts, unbroken = finished
    run = tmp_path / "run"
    shutil.copytree(unbroken, run)
    before = digest(run)
    proc = private_mounts(f"""
        mount --bind {run}/checkpoints {run}/checkpoints
        mount -o remount,ro,bind {run}/checkpoints
        mpiexec --oversubscribe -n 2 {sys.executable} -m distgnn train {parts} {' '.join(TRAIN)} \\
            --checkpoint-every 2 --resume --out {run}
        """, tmp_path)
    one_line(proc, f"--out {run}/checkpoints: not writable", "nothing was written")
    assert digest(run) == before
