"""What a command may write into (docs/design.md#run-folder): a folder that is new, empty, or of
the command's own kind; anything else (a file, a store or folder of another kind, a folder of
other files) is refused in one line naming ``--out``, before anything is written or removed.

A folder's kind is read from the entries that mark it (:data:`KIND_MARKERS`); names starting with
a dot (a lock, heartbeats, temporaries) mark nothing.
"""
from __future__ import annotations

import fnmatch
from pathlib import Path

from distgnn.errors import DistgnnError

#: kind -> the entries (glob patterns) any one of which marks a folder as that kind; the first
#: kind found is the one named in a refusal
KIND_MARKERS: dict[str, tuple[str, ...]] = {
    "a Zarr store": ("zarr.json", ".zgroup"),
    "a partition folder": ("assignment.zarr", "part_*.zarr"),
    "a dataset folder": ("graph.zarr",),
    "a run folder": ("metrics.jsonl", "summary.json", "model.pt", "checkpoints"),
}
#: kind -> (who writes it, what its files are called in a refusal)
WRITERS = {"a run folder": ("a run", "a distgnn run"),
           "a partition folder": ("a partition", "distgnn partitions"),
           "a dataset folder": ("a graph store", "a distgnn dataset")}


def kinds_of(names: set[str]) -> list[str]:
    """The kinds the entries ``names`` of a folder mark, in :data:`KIND_MARKERS` order."""
    return [kind for kind, patterns in KIND_MARKERS.items()
            if any(fnmatch.filter(names, pattern) for pattern in patterns)]


def check_owned_folder(path: Path, kind: str, option: str = "--out") -> None:
    """Refuse, in one line naming ``option``, a ``path`` that a writer of ``kind`` (a key of
    :data:`WRITERS`) must not write into; a missing or empty folder, or one of ``kind``, passes."""
    writer, files = WRITERS[kind]
    if path.exists() and not path.is_dir():
        raise DistgnnError(f"{option} {path}: exists and is not a folder ({writer} writes into a "
                           f"folder of its own; give a new path)")
    if not path.exists():
        return
    names = {entry.name for entry in path.iterdir()}
    found = kinds_of(names)
    foreign = [other for other in found if other != kind]
    if foreign:
        raise DistgnnError(f"{option} {path}: is {foreign[0]}, not {kind}; nothing was written "
                           f"(give a new folder)")
    visible = sorted(name for name in names if not name.startswith("."))
    if visible and kind not in found:
        shown = ", ".join(visible[:3]) + (", ..." if len(visible) > 3 else "")
        raise DistgnnError(f"{option} {path}: holds files that are not {files} ({shown}); "
                           f"nothing was written (give a new or empty folder)")
