"""Readers of a partition folder's stores that every later stage shares (the part writer, verify,
describe, the memory estimate): the assignment and the graph store it was made from."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from distgnn.data.graph_store import GraphStore
from distgnn.errors import DistgnnError
from distgnn.options import existing_path
from distgnn.partition import layout
from distgnn.zarr_io import open_checked


def open_assignment(folder: Path) -> tuple[Any, dict[str, Any]]:
    """Open ``<folder>/assignment.zarr``; one-line error when it or ``folder`` is missing or it is
    incomplete."""
    path = existing_path(folder) / layout.ASSIGNMENT
    if not path.exists():
        raise DistgnnError(f"{path}: no assignment (run `distgnn partition assign` first)")
    group = open_checked(path, ("edge_part", "replicas", "root"))
    attrs = dict(group.attrs)
    if "checksum" not in attrs:
        raise DistgnnError(f"{path}: incomplete assignment (no checksum attribute)")
    return group, attrs


def open_graph_for(attrs: dict[str, Any], graph: str | os.PathLike | None = None) -> GraphStore:
    """The graph store an assignment was made from (its recorded path unless ``graph`` is given),
    refusing one whose checksum differs."""
    path = Path(graph) if graph is not None else Path(attrs["graph"])
    store = GraphStore.open(path)
    if store.attrs["checksum"] != attrs["graph_checksum"]:
        raise DistgnnError(f"{path}: checksum {store.attrs['checksum']} differs from the one the "
                           f"assignment was made from ({attrs['graph_checksum']})")
    return store
