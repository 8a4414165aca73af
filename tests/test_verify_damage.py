"""`distgnn verify` finds a deleted, truncated or corrupted chunk in any array of a partition."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from conftest import partitioned_twin, run_cli


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("verify")
    return partitioned_twin(root, 2)[1]


def test_undamaged_folder_verifies(built: Path) -> None:
    proc = run_cli("verify", built)
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize("array,damage", [("part_1.zarr/feat", "delete"),
                                          ("part_0.zarr/comm/leaf_send", "truncate"),
                                          ("part_1.zarr/t_indices", "flip"),
                                          ("part_0.zarr/label", "truncate"),
                                          ("assignment.zarr", "delete")])
def test_damaged_chunk_is_found(built: Path, tmp_path: Path, array: str, damage: str) -> None:
    parts = tmp_path / "parts"
    shutil.copytree(built, parts)
    folder = parts / array
    if array == "assignment.zarr":  # any array of the assignment store
        folder = sorted(p for p in folder.rglob("zarr.json") if (p.parent / "c").exists())[0].parent
    chunk = sorted(p for p in (folder / "c").rglob("*") if p.is_file())[0]
    if damage == "delete":
        chunk.unlink()
    elif damage == "truncate":
        chunk.write_bytes(chunk.read_bytes()[:-7])
    else:
        data = bytearray(chunk.read_bytes())
        data[len(data) // 2] ^= 0x5A
        chunk.write_bytes(bytes(data))
    proc = run_cli("verify", parts)
    assert proc.returncode != 0
    lines = [l for l in proc.stderr.splitlines() + proc.stdout.splitlines() if folder.name in l]
    assert lines, (proc.stdout[-2000:], proc.stderr[-2000:])
