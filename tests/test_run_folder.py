"""Outputs that refuse to overwrite what they are not (docs/design.md#run-folder): ``train --out``
only into a new, empty or run folder, one run at a time in it, ``--resume`` never shortening a
run, ``predict --out`` replacing only a predictions store. Every refusal is one line, exit 2, and
what was there is byte-identical afterwards (hashed)."""
from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import run_cli
from distgnn.errors import DistgnnError
from distgnn.train.run_folder import (LOCK, RunLock, check_resume_length, check_run_folder,
                                      trained_epochs)


def digest(path: Path) -> str:
    """sha256 over every file under ``path`` (names and bytes), or of the file itself; a run
    folder's lock file (which names its last holder) aside."""
    h = hashlib.sha256()
    files = [path] if path.is_file() else sorted(p for p in path.rglob("*")
                                                 if p.is_file() and p.name != LOCK)
    for f in files:
        h.update(str(f.relative_to(path.parent)).encode())
        h.update(f.read_bytes())
    return h.hexdigest()


def refused(proc: subprocess.CompletedProcess, *words: str) -> None:
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr and all(w in lines[0] for w in words), lines


def test_what_a_run_may_write_into(tmp_path: Path) -> None:
    check_run_folder(tmp_path / "new")                    # missing: made by the run
    (tmp_path / "empty").mkdir()
    check_run_folder(tmp_path / "empty")
    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    (run / "predictions.zarr").mkdir()
    check_run_folder(run)                                 # a run's own (markers present)
    (tmp_path / "file").write_text("x")
    store = tmp_path / "store"
    store.mkdir()
    (store / "zarr.json").write_text("{}")
    parts = tmp_path / "parts"
    (parts / "part_0.zarr").mkdir(parents=True)
    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.txt").write_text("mine")
    for path, words in ((tmp_path / "file", "is not a folder"), (store, "is a Zarr store"),
                        (parts, "is a partition folder"), (other, "not a distgnn run (notes.txt)")):
        with pytest.raises(DistgnnError, match="--out .*" + words.replace("(", r"\(").replace(")", r"\)")):
            check_run_folder(path)


def test_resume_never_shortens(tmp_path: Path) -> None:
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps({"epoch": e, "loss": 1.0}) + "\n"
                                                    for e in range(1, 6)))
    assert trained_epochs(tmp_path) == 5
    (tmp_path / "summary.json").write_text(json.dumps({"epochs": 6}))
    assert trained_epochs(tmp_path) == 6
    check_resume_length(tmp_path, 6)
    check_resume_length(tmp_path, 10)
    with pytest.raises(DistgnnError, match="has trained 6 epochs; continuing would cut them"):
        check_resume_length(tmp_path, 3)


def test_one_run_holds_the_folder_and_a_dead_one_holds_nothing(tmp_path: Path) -> None:
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; from pathlib import Path; "
         "from distgnn.train.run_folder import RunLock; lock = RunLock(Path(sys.argv[1])).acquire(); "
         "print('locked', flush=True); time.sleep(60)", str(tmp_path)],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        with pytest.raises(DistgnnError, match=f"in use by another run \\(pid {holder.pid} on "):
            RunLock(tmp_path).acquire()
    finally:
        holder.kill()
        holder.wait()
    RunLock(tmp_path).acquire().release()   # the dead holder kept nothing
    assert (tmp_path / LOCK).exists()


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> tuple[Path, Path, Path]:
    """(graph store, one-part folder, a finished 6-epoch run with checkpoints at 2 and 4)."""
    from distgnn.data.fetch import fetch

    root = tmp_path_factory.mktemp("owned")
    graph = fetch("synth-reddit", root=root / "data", scale=0.005, threads=1)
    parts = root / "parts"
    assert run_cli("partition", graph, "--parts", "1", "--out", parts, "--quiet").returncode == 0
    run = root / "run"
    proc = run_cli("train", parts, "--epochs", "6", "--checkpoint-every", "2", "--hidden", "16",
                   "--threads", "1", "--quiet", "--out", run)
    assert proc.returncode == 0, proc.stderr
    return graph, parts, run


def test_train_refuses_a_store_a_partition_folder_and_a_shorter_resume(trained, tmp_path) -> None:
    graph, parts, run = trained
    before = {p: digest(p) for p in (graph, parts, run)}
    common = ("--epochs", "2", "--hidden", "16", "--threads", "1", "--quiet")
    refused(run_cli("train", parts, *common, "--out", graph), f"--out {graph}", "Zarr store")
    refused(run_cli("train", parts, *common, "--out", parts), f"--out {parts}", "partition folder")
    refused(run_cli("train", parts, "--resume", "--epochs", "3", "--hidden", "16", "--threads", "1",
                    "--quiet", "--out", run), "--resume --epochs 3", "has trained 6 epochs")
    assert {p: digest(p) for p in before} == before


def test_a_second_run_on_a_folder_in_use_is_refused(trained) -> None:
    _, parts, run = trained
    before = digest(run)
    lock = RunLock(run).acquire()   # as a running run's rank 0 holds it
    try:
        proc = run_cli("train", parts, "--epochs", "2", "--hidden", "16", "--threads", "1",
                       "--quiet", "--out", run)
    finally:
        lock.release()
    refused(proc, f"--out {run}", "in use by another run (pid")
    assert digest(run) == before


def test_predict_replaces_only_a_predictions_store(trained, tmp_path: Path) -> None:
    graph, parts, run = trained
    plain = tmp_path / "notes.txt"
    plain.write_text("mine")
    before = {p: digest(p) for p in (graph, parts, plain)}
    for target in (graph, parts, plain):
        refused(run_cli("predict", run, "--out", target), f"--out {target}", "nothing was written")
    assert {p: digest(p) for p in before} == before
    out = tmp_path / "pred.zarr"
    for _ in range(2):   # a predictions store is its own kind: written, then replaced
        proc = run_cli("predict", run, "--out", out)
        assert proc.returncode == 0, proc.stderr
    assert json.loads((out / "zarr.json").read_text())["attributes"]["kind"] == "predictions"
