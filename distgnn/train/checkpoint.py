"""Periodic checkpoints of a distributed run, in ``<RUNDIR>/checkpoints/epoch_<E>/``.

Each rank writes ``rank_<k>.pt`` (its exchange state: step counters, R, payloads received for
later steps; RNG); rank 0 also writes ``model.pt`` (model and optimizer). After a barrier rank 0
writes ``manifest.json`` last: only a folder with a manifest counts. The two newest are kept.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import torch

from distgnn import atomic
from distgnn.errors import DistgnnError

KEEP = 2


def checkpoint_dir(run_dir: Path, epoch: int) -> Path:
    return run_dir / "checkpoints" / f"epoch_{epoch:06d}"


def atomic_torch_save(obj: Any, path: Path) -> None:
    """``torch.save(obj, path)`` under a temporary name, fsynced and renamed
    (:func:`distgnn.atomic.write_file`)."""
    atomic.write_file(path, lambda tmp: torch.save(obj, tmp))


def atomic_write_text(text: str, path: Path) -> None:
    """``path.write_text(text)`` under a temporary name, fsynced and renamed."""
    atomic.write_file(path, lambda tmp: tmp.write_text(text))


def complete_checkpoints(run_dir: Path) -> list[tuple[int, Path]]:
    """(epoch, folder) of every checkpoint that has a manifest, oldest first."""
    root = run_dir / "checkpoints"
    if not root.exists():
        return []
    found = []
    for folder in root.iterdir():
        if folder.name.startswith("epoch_") and (folder / "manifest.json").exists():
            found.append((int(folder.name.split("_")[1]), folder))
    return sorted(found)


def prune(run_dir: Path) -> None:
    """Keep the newest :data:`KEEP` complete checkpoints; remove older ones and incomplete ones
    older than the newest complete one."""
    complete = complete_checkpoints(run_dir)
    if not complete:
        return
    keep = {folder for _, folder in complete[-KEEP:]}
    newest = complete[-1][0]
    for folder in (run_dir / "checkpoints").iterdir():
        if folder in keep or not folder.name.startswith("epoch_"):
            continue
        if int(folder.name.split("_")[1]) <= newest:
            shutil.rmtree(folder, ignore_errors=True)


def write_manifest(folder: Path, epoch: int, hyperparameters: dict[str, Any], num_parts: int) -> None:
    atomic_write_text(json.dumps({"epoch": epoch, "num_parts": num_parts,
                                  "hyperparameters": hyperparameters}, indent=1),
                      folder / "manifest.json")


def newest_checkpoint(run_dir: Path, hyperparameters: dict[str, Any]) -> tuple[int, Path] | None:
    """The newest complete checkpoint, refusing one made with other hyperparameters."""
    complete = complete_checkpoints(run_dir)
    if not complete:
        return None
    epoch, folder = complete[-1]
    manifest = json.loads((folder / "manifest.json").read_text())
    from distgnn.train.config import LATER_HYPERPARAMETERS

    saved = dict(manifest["hyperparameters"])
    for key, value in LATER_HYPERPARAMETERS.items():  # a checkpoint older than the key meant this
        if key in hyperparameters:
            saved.setdefault(key, value)
    differ = sorted(k for k in set(saved) | set(hyperparameters) if saved.get(k) != hyperparameters.get(k))
    if differ:
        key = differ[0]
        raise DistgnnError(f"--resume: checkpoint {folder} was made with {key}={saved.get(key)!r}, "
                           f"not {hyperparameters.get(key)!r}; rerun with the same settings or a new --out")
    return epoch, folder
