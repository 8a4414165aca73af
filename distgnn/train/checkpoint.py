"""Periodic checkpoints of a distributed run, in ``<RUNDIR>/checkpoints/epoch_<E>/``.

Each rank writes ``rank_<k>.pt`` (its exchange state: step counters, R, payloads received for
later steps; RNG); rank 0 also writes ``model.pt`` (model and optimizer). After a barrier rank 0
writes ``manifest.json`` last: only a folder with a manifest counts. The two newest are kept. The
manifest names the checkpoint format, the hyperparameters and the partition (P, the assignment's
checksum, the vertex order); resuming refuses any difference in one line
(docs/design.md#checkpoints).
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

import torch

from distgnn import atomic
from distgnn.errors import DistgnnError

if TYPE_CHECKING:
    from distgnn.train.context import RankContext

KEEP = 2
#: the checkpoint layout: 2 = the exchange's state by layer with its mailbox (distgnn/exchange)
FORMAT = 2


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


def write_manifest(folder: Path, epoch: int, hyperparameters: dict[str, Any], num_parts: int,
                   partition: dict[str, Any] | None = None) -> None:
    """The manifest, written last: ``partition`` (:func:`partition_identity`) ties the per-row
    state to the partition it numbers."""
    atomic_write_text(json.dumps({"format": FORMAT, "epoch": epoch, "num_parts": num_parts,
                                  "partition": partition, "hyperparameters": hyperparameters},
                                 indent=1),
                      folder / "manifest.json")


def partition_identity(attrs: dict[str, Any]) -> dict[str, Any]:
    """What a checkpoint's per-row state depends on, from a part's attributes: P, the
    assignment's checksum and each part's vertex order."""
    return {"P": attrs.get("P"), "assignment_checksum": attrs.get("assignment_checksum"),
            "vertex_order": attrs.get("vertex_order")}


def newest_checkpoint(run_dir: Path, hyperparameters: dict[str, Any],
                      partition: dict[str, Any] | None = None) -> tuple[int, Path] | None:
    """The newest complete checkpoint, refusing one made with other hyperparameters, by another
    checkpoint format, or (when ``partition`` is given) on another partition."""
    complete = complete_checkpoints(run_dir)
    if not complete:
        return None
    epoch, folder = complete[-1]
    manifest = json.loads((folder / "manifest.json").read_text())
    if manifest.get("format", 1) != FORMAT:
        raise DistgnnError(f"--resume: checkpoint {folder} was written in checkpoint format "
                           f"{manifest.get('format', 1)}, this distgnn reads {FORMAT}; resume it "
                           f"with the distgnn that wrote it, or start again without --resume")
    if partition is not None and manifest.get("partition") != partition:
        saved = manifest.get("partition") or {}
        key = next(k for k in partition if saved.get(k) != partition[k])
        raise DistgnnError(f"--resume: checkpoint {folder} was made on a partition with "
                           f"{key}={saved.get(key)!r}, this one has {partition[key]!r} (its per-row "
                           f"state would land on other rows); resume on the same partition folder "
                           f"or start again without --resume")
    from distgnn.train.config import LATER_HYPERPARAMETERS

    saved = dict(manifest["hyperparameters"])
    for key, value in LATER_HYPERPARAMETERS.items():  # a checkpoint older than the key meant this
        if key in hyperparameters and key not in saved:
            saved[key] = value(saved) if callable(value) else value
    differ = sorted(k for k in set(saved) | set(hyperparameters) if saved.get(k) != hyperparameters.get(k))
    if differ:
        key = differ[0]
        raise DistgnnError(f"--resume: checkpoint {folder} was made with {key}={saved.get(key)!r}, "
                           f"not {hyperparameters.get(key)!r}; rerun with the same settings or a new --out")
    return epoch, folder


def save(ctx: "RankContext", optimizer: Any, run_dir: Path, epoch: int) -> None:
    """Write the checkpoint after ``epoch`` epochs (collective): every rank its exchange state
    (messages in flight completed first) and RNG, rank 0 the model and optimizer, then after a
    barrier the manifest, and prune."""
    comm = ctx.comm
    folder = checkpoint_dir(run_dir, epoch)
    if comm.rank == 0:
        folder.mkdir(parents=True, exist_ok=True)
    comm.barrier()
    with ctx.timers("exchange_wait"):
        exchange_state = ctx.aggregation.state_dict()
    atomic_torch_save({"exchange": exchange_state, "rng": torch.get_rng_state()},
                      folder / f"rank_{comm.rank}.pt")
    if comm.rank == 0:
        atomic_torch_save({"model": ctx.model.state_dict(), "optimizer": optimizer.state_dict()},
                          folder / "model.pt")
    comm.barrier()
    if comm.rank == 0:
        write_manifest(folder, epoch, ctx.config.hyperparameters(), comm.size,
                       partition_identity(ctx.part.attrs))
        prune(run_dir)
    comm.barrier()


def resume(ctx: "RankContext", optimizer: Any, run_dir: Path, note: Callable[[str], None]) -> int:
    """Load the newest complete checkpoint (collective) and return the epochs it holds (0 when
    there is none: a requeued job's first start). ``metrics.jsonl`` is cut to those epochs, so a
    requeue before the first checkpoint does not write its epochs twice."""
    from distgnn.errors import CollectiveError

    comm = ctx.comm
    found: Any = None
    if comm.rank == 0:
        try:
            found = newest_checkpoint(run_dir, ctx.config.hyperparameters(),
                                      partition_identity(ctx.part.attrs))
        except DistgnnError as exc:
            found = exc
    found = comm.bcast(found)
    if isinstance(found, DistgnnError):
        raise CollectiveError(str(found))
    epoch = 0
    if found is None:
        note(f"--resume: no checkpoint under {run_dir / 'checkpoints'}; starting at epoch 1")
    else:
        epoch, folder = found
        note(f"--resume: continuing after epoch {epoch} from {folder}")
        state = torch.load(folder / "model.pt", weights_only=False)
        ctx.model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        mine = torch.load(folder / f"rank_{comm.rank}.pt", weights_only=False)
        ctx.aggregation.load_state_dict(mine["exchange"])
        torch.set_rng_state(mine["rng"])
    if comm.rank == 0:
        truncate_metrics(run_dir / "metrics.jsonl", epoch)
    return epoch


def truncate_metrics(path: Path, epoch: int) -> None:
    """Keep the records of epochs 1..``epoch`` of a ``metrics.jsonl`` (none when 0)."""
    if not path.exists():
        return
    kept = [line for line in path.read_text().splitlines()
            if line.strip() and json.loads(line)["epoch"] <= epoch]
    atomic_write_text("".join(line + "\n" for line in kept), path)
