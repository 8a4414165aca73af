"""--stage DIR: a rank's part copied to node-local storage, checked, loaded, removed
(docs/design.md#staging); bad scratch folders are one line naming the host and the folder."""
from __future__ import annotations

import json
import os
import shutil
import socket
from pathlib import Path

import numpy as np
import pytest
import zarr

from conftest import partitioned_twin, run_cli
from distgnn.errors import DistgnnError
from distgnn.partition.part_loader import load_partition
from distgnn.train.staging import PREFIX, stage_part, unstage
from test_reliability import mounted_tmpfs


@pytest.fixture(scope="module")
def parts(tmp_path_factory) -> Path:
    return partitioned_twin(tmp_path_factory.mktemp("staging"), 2)[1]


def test_a_staged_part_loads_as_the_shared_one_and_goes_away(parts: Path, tmp_path: Path) -> None:
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    dead = scratch / f"{PREFIX}999999999"      # a killed run's folder on this node
    live = scratch / f"{PREFIX}{os.getppid()}"  # a running process's
    dead.mkdir()
    live.mkdir()
    folder = stage_part(parts, 1, scratch)
    assert folder.parent == scratch and [p.name for p in folder.iterdir()] == ["part_1.zarr"]
    assert not dead.exists() and live.exists()
    staged, shared = load_partition(folder, 1), load_partition(parts, 1)
    assert staged.attrs == shared.attrs
    assert np.array_equal(staged.feat.numpy(), shared.feat.numpy())
    assert np.array_equal(staged.indices.numpy(), shared.indices.numpy())
    unstage(folder)
    assert sorted(p.name for p in scratch.iterdir()) == [live.name]


def test_missing_scratch_names_the_host_and_the_folder(parts: Path, tmp_path: Path) -> None:
    with pytest.raises(DistgnnError) as exc:
        stage_part(parts, 0, tmp_path / "nowhere")
    assert f"--stage {tmp_path / 'nowhere'} on host {socket.gethostname()}: no such folder" in str(exc.value)
    assert not (tmp_path / "nowhere").exists()


@pytest.fixture
def tiny_scratch(tmp_path: Path):
    mount = mounted_tmpfs(tmp_path / "small", "size=64k")
    try:
        yield next(mount)
    finally:
        next(mount, None)  # unmounts


def test_full_scratch_is_refused_before_copying(parts: Path, tiny_scratch: Path) -> None:
    with pytest.raises(DistgnnError, match=r"part 0 needs [\d.,]+ MiB, [\d.,]+ MiB free"):
        stage_part(parts, 0, tiny_scratch)
    assert list(tiny_scratch.iterdir()) == []


def test_a_copy_that_fails_its_check_is_removed(parts: Path, tmp_path: Path, monkeypatch) -> None:
    def damaging_copy(source, target):
        shutil.copytree(source, target)
        chunk = next(p for p in sorted((Path(target) / "feat").rglob("*"))
                     if p.is_file() and p.name != "zarr.json")
        data = bytearray(chunk.read_bytes())
        data[len(data) // 2] ^= 0xFF
        chunk.write_bytes(bytes(data))

    monkeypatch.setattr("distgnn.train.staging.copy_part", damaging_copy)
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    with pytest.raises(DistgnnError, match="staging part 0 failed"):
        stage_part(parts, 0, scratch)
    assert list(scratch.iterdir()) == []


@pytest.mark.slow
def test_train_with_stage_gives_the_same_run(parts: Path, tmp_path: Path) -> None:
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    one = partitioned_twin(tmp_path, 1)[1]
    common = ["--epochs", "3", "--layers", "2", "--hidden", "8", "--threads", "1", "--quiet"]
    plain = run_cli("train", one, "--out", tmp_path / "plain", *common)
    staged = run_cli("train", one, "--out", tmp_path / "staged", "--stage", scratch, *common)
    assert plain.returncode == 0 and staged.returncode == 0, staged.stderr[-2000:]
    losses = [[json.loads(l)["loss"] for l in (tmp_path / run / "metrics.jsonl").read_text().splitlines()]
              for run in ("plain", "staged")]
    assert losses[0] == losses[1]
    summary = json.loads((tmp_path / "staged" / "summary.json").read_text())
    assert summary["partition_dir"] == str(one.resolve())  # the shared folder, not the staged one
    assert list(scratch.iterdir()) == []
    missing = run_cli("train", one, "--out", tmp_path / "missing", "--stage", tmp_path / "nowhere",
                      *common)
    assert missing.returncode == 2 and "Traceback" not in missing.stderr
    lines = missing.stderr.strip().splitlines()
    assert len(lines) == 1 and f"{tmp_path / 'nowhere'} on host" in lines[0], missing.stderr
