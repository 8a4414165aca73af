"""The number of partitions (= MPI ranks) of a partition folder, from its assignment's attrs."""
from __future__ import annotations

from pathlib import Path

from distgnn.errors import DistgnnError


def num_parts(partdir: str | Path) -> int:
    """P of ``partdir``: attr ``P`` (or ``num_parts``) of ``partdir/assignment.zarr`` (docs/design.md#stores)."""
    import zarr

    path = Path(partdir) / "assignment.zarr"
    try:
        attrs = dict(zarr.open_group(str(path), mode="r").attrs)
    except Exception as exc:  # missing folder, not a zarr group, unreadable metadata
        raise DistgnnError(f"{path}: not a readable partition assignment ({exc.__class__.__name__}); "
                           f"run `distgnn partition assign` first") from exc
    value = attrs.get("P", attrs.get("num_parts"))
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise DistgnnError(f"{path}: attrs have no positive integer 'P' (or 'num_parts'), got {value!r}")
    return value
