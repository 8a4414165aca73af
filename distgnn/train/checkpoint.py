"""Periodic checkpoints of a distributed run, in ``<RUNDIR>/checkpoints/epoch_<E>/``.

Each rank writes ``rank_<k>.pt`` (its exchange state: step counters, R, payloads received for
later steps; RNG); rank 0 also writes ``model.pt`` (model and optimizer). Once every rank has
written, rank 0 writes ``manifest.json`` last: only a folder with a manifest counts. The two newest
are kept. The manifest names the checkpoint format, the hyperparameters and the partition (P, the
assignment's checksum, the vertex order); resuming refuses any difference in one line, and passes
over a damaged checkpoint to the one before it. A write that fails on any rank is one agreed line,
the complete checkpoints kept (docs/design.md#checkpoints, docs/design.md#write-faults).
"""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

import torch

from distgnn import atomic
from distgnn.errors import CollectiveError, DistgnnError
from distgnn.train.agreement import agreed

if TYPE_CHECKING:
    from distgnn.train.context import RankContext

KEEP = 2
#: the checkpoint layout: 2 = the exchange's state by layer with its mailbox (distgnn/exchange)
FORMAT = 2


def checkpoint_dir(run_dir: Path, epoch: int) -> Path:
    return run_dir / "checkpoints" / f"epoch_{epoch:06d}"


def atomic_torch_save(obj: Any, path: Path) -> None:
    """``torch.save(obj, path)`` under a temporary name, fsynced and renamed
    (:func:`distgnn.atomic.write_file`). The bytes go through a Python file, so a full disk or a
    read-only one is an :class:`OSError` naming ``path`` (torch's own writer says only
    "unexpected pos")."""
    def write(tmp: Path) -> None:
        try:
            with open(tmp, "wb") as f:
                torch.save(obj, f)
        except (OSError, RuntimeError) as exc:
            cause: BaseException | None = exc   # torch's zip writer turns the OSError into a
            while cause is not None and not isinstance(cause, OSError):   # RuntimeError on close
                cause = cause.__context__
            if cause is None:
                raise
            raise OSError(cause.errno, cause.strerror, str(path)) from exc
    atomic.write_file(path, write)


def atomic_write_text(text: str, path: Path) -> None:
    """``path.write_text(text)`` under a temporary name, fsynced and renamed."""
    atomic.write_file(path, lambda tmp: tmp.write_text(text))


def complete_checkpoints(run_dir: Path) -> list[tuple[int, Path]]:
    """(epoch, folder) of every checkpoint that has a manifest, oldest first."""
    root = run_dir / "checkpoints"
    if not os.path.isdir(root):   # False, not an error, for a name too long to look up
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


def readable_manifest(folder: Path) -> dict[str, Any] | None:
    """A checkpoint's manifest, or None when it cannot be read or parsed (damaged)."""
    try:
        manifest = json.loads((folder / "manifest.json").read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None
    return manifest if isinstance(manifest, dict) and "hyperparameters" in manifest else None


def check_manifest(folder: Path, manifest: dict[str, Any], hyperparameters: dict[str, Any],
                   partition: dict[str, Any] | None = None) -> None:
    """Refuse a checkpoint made with other hyperparameters, by another checkpoint format, or
    (when ``partition`` is given) on another partition."""
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


def resumable_checkpoints(run_dir: Path, hyperparameters: dict[str, Any],
                          partition: dict[str, Any] | None = None,
                          note: Callable[[str], None] = lambda text: None) -> list[tuple[int, Path]]:
    """(epoch, folder) of the complete checkpoints a resume may use, newest first: a damaged
    manifest is named (``note``) and passed over; one made with other settings is refused
    (:func:`check_manifest`)."""
    found = []
    for epoch, folder in reversed(complete_checkpoints(run_dir)):
        manifest = readable_manifest(folder)
        if manifest is None:
            note(f"--resume: checkpoint {folder}: manifest.json is damaged; passing over it")
            continue
        check_manifest(folder, manifest, hyperparameters, partition)
        found.append((epoch, folder))
    return found


def newest_checkpoint(run_dir: Path, hyperparameters: dict[str, Any],
                      partition: dict[str, Any] | None = None) -> tuple[int, Path] | None:
    """The newest complete checkpoint whose manifest reads, refused as in :func:`check_manifest`."""
    found = resumable_checkpoints(run_dir, hyperparameters, partition)
    return found[0] if found else None


class DamagedCheckpoint(Exception):
    """A checkpoint file that is missing or cannot be read; its text names the file."""


def read_state(path: Path, keys: tuple[str, ...]) -> dict[str, Any]:
    """A checkpoint file's contents, which must hold ``keys``; :class:`DamagedCheckpoint` when
    it is missing, truncated or holds something else."""
    try:
        state = torch.load(path, weights_only=False)
    except FileNotFoundError:
        raise DamagedCheckpoint(f"{path} is missing") from None
    except Exception as exc:  # noqa: BLE001 - torch's readers raise many kinds for a bad file
        reason = str(exc).split(". ")[0].strip()[:160] or type(exc).__name__
        raise DamagedCheckpoint(f"{path} cannot be read ({reason})") from None
    if not isinstance(state, dict) or not set(keys) <= set(state):
        raise DamagedCheckpoint(f"{path} does not hold {', '.join(keys)}")
    return state


def save(ctx: "RankContext", optimizer: Any, run_dir: Path, epoch: int) -> None:
    """Write the checkpoint after ``epoch`` epochs (collective): every rank its exchange state
    (messages in flight completed first) and RNG, rank 0 the model and optimizer, then, once every
    rank has written, the manifest, and prune. A write that fails on any rank (no space, a
    read-only disk) is one agreed line: the incomplete folder is removed and the complete
    checkpoints before it are kept."""
    comm = ctx.comm
    folder = checkpoint_dir(run_dir, epoch)

    def make() -> None:
        if comm.rank == 0:
            folder.mkdir(parents=True, exist_ok=True)

    def write() -> None:
        atomic_torch_save({"exchange": exchange_state, "rng": torch.get_rng_state()},
                          folder / f"rank_{comm.rank}.pt")
        if comm.rank == 0:
            atomic_torch_save({"model": ctx.model.state_dict(), "optimizer": optimizer.state_dict()},
                              folder / "model.pt")

    def commit() -> None:
        if comm.rank == 0:
            write_manifest(folder, epoch, ctx.config.hyperparameters(), comm.size,
                           partition_identity(ctx.part.attrs))
            prune(run_dir)

    try:
        agreed(comm, make)
        with ctx.timers("exchange_wait"):
            exchange_state = ctx.aggregation.state_dict()
        agreed(comm, write)
        agreed(comm, commit)
    except CollectiveError as exc:
        if comm.rank == 0 and not (folder / "manifest.json").exists():
            shutil.rmtree(folder, ignore_errors=True)
        kept = complete_checkpoints(run_dir)
        after = (f"the checkpoint after epoch {kept[-1][0]} is kept: make room, then rerun with "
                 f"--resume" if kept else "no earlier checkpoint exists")
        raise CollectiveError(f"checkpoint after epoch {epoch} not written: {exc}; {after}") from None


def resume(ctx: "RankContext", optimizer: Any, run_dir: Path, note: Callable[[str], None]) -> int:
    """Load the newest complete checkpoint that every rank can read (collective) and return the
    epochs it holds (0 when there is none: a requeued job's first start). A damaged file (missing,
    truncated) is named and the checkpoint before it tried; when none can be read the resume is
    refused in one line. Only then, once every rank has its state, is ``metrics.jsonl`` cut to
    those epochs, so a requeue before the first checkpoint does not write its epochs twice."""
    comm = ctx.comm
    candidates = agreed(comm, lambda: resumable_checkpoints(
        run_dir, ctx.config.hyperparameters(), partition_identity(ctx.part.attrs), note)
        if comm.rank == 0 else None)
    candidates = comm.bcast(candidates)
    epoch, damage = 0, None
    for epoch, folder in candidates:
        try:
            state = read_state(folder / "model.pt", ("model", "optimizer"))
            mine = read_state(folder / f"rank_{comm.rank}.pt", ("exchange", "rng"))
            damage = None
        except DamagedCheckpoint as exc:
            damage = str(exc)
        damaged = [d for d in comm.allgather(damage) if d is not None]
        if not damaged:
            note(f"--resume: continuing after epoch {epoch} from {folder}")
            ctx.model.load_state_dict(state["model"])
            optimizer.load_state_dict(state["optimizer"])
            ctx.aggregation.load_state_dict(mine["exchange"])
            torch.set_rng_state(mine["rng"])
            break
        damage = damaged[0]
        note(f"--resume: checkpoint after epoch {epoch} is damaged: {damage}; trying the one before")
    else:
        if damage is not None:
            raise CollectiveError(f"--resume: no checkpoint under {run_dir / 'checkpoints'} can be "
                                  f"read (the oldest: {damage}); start again without --resume")
        note(f"--resume: no checkpoint under {run_dir / 'checkpoints'}; starting at epoch 1")
        epoch = 0
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
