"""A rank's part staged on node-local storage before loading (``--stage DIR``,
docs/design.md#staging).

On a cluster the partition folder is on a shared filesystem; P ranks reading their parts from it at
once contend for it. With ``--stage DIR`` each rank copies its own ``part_<k>.zarr`` into
``DIR/distgnn-<pid>/`` (under a temporary name), reads every chunk of the copy back through its
checksum, renames it complete, loads it, and removes the folder once the part is in memory. The
run's partition folder (``summary.json``, checkpoints, ``predict``) stays the shared one.
Folders of a process that is gone (a killed run on this node) are removed before staging.
"""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import zarr

from distgnn import atomic
from distgnn.errors import DistgnnError
from distgnn.partition import layout
from distgnn.zarr_io import store_bytes, verify_checksums

#: staged folders are DIR/<PREFIX><pid>
PREFIX = "distgnn-"


def remove_orphans(stage_dir: Path) -> None:
    """Remove the staged folders of processes that are gone on this host (scratch is node-local,
    so every process that could own one is visible here)."""
    for folder in stage_dir.glob(f"{PREFIX}*"):
        pid = folder.name[len(PREFIX):]
        if pid.isdigit() and not atomic.process_alive(int(pid)):
            shutil.rmtree(folder, ignore_errors=True)


def copy_part(source: Path, target: Path) -> None:
    """Copy a part store (a folder of chunk files)."""
    shutil.copytree(source, target)


def stage_part(partition_dir: str | Path, k: int, stage_dir: str | Path) -> Path:
    """Copy ``partition_dir/part_<k>.zarr`` to node-local ``stage_dir`` and check every chunk of
    the copy; returns the staged partition folder (it holds that one part). One-line errors name
    the host and the folder: missing, not writable, too small, or a copy that fails its check."""
    where = f"--stage {stage_dir} on host {atomic.host()}"
    stage_dir = Path(stage_dir)
    source = Path(partition_dir) / layout.part_name(k)
    if not source.exists():
        raise DistgnnError(f"{source}: missing part (partition folder incomplete)")
    if not stage_dir.is_dir():
        raise DistgnnError(f"{where}: no such folder (expected node-local storage on every host)")
    remove_orphans(stage_dir)
    need, free = store_bytes(source), shutil.disk_usage(stage_dir).free
    if need > free:
        raise DistgnnError(f"{where}: part {k} needs {need / 2**20:,.1f} MiB, "
                           f"{free / 2**20:,.1f} MiB free")
    folder = stage_dir / f"{PREFIX}{os.getpid()}"
    target = folder / layout.part_name(k)
    try:
        folder.mkdir(exist_ok=True)
        temporary = atomic.temp_path(target)
        copy_part(source, temporary)
        verify_checksums(zarr.open_group(str(temporary), mode="r"), str(temporary),
                         progress_desc=f"check staged part {k}")
        temporary.rename(target)
    except (OSError, DistgnnError) as exc:
        shutil.rmtree(folder, ignore_errors=True)
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise DistgnnError(f"{where}: staging part {k} failed: {reason}") from None
    return folder


def unstage(folder: Path) -> None:
    """Remove a folder :func:`stage_part` made."""
    shutil.rmtree(folder, ignore_errors=True)
