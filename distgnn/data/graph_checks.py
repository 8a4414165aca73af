"""``distgnn verify GRAPH.zarr``: every chunk of a graph store read back (crc32c) and its
invariants checked (docs/design.md#stores)."""
from __future__ import annotations

import os

import numpy as np

from distgnn.data.graph_store import MASKS, GraphStore
from distgnn.errors import DistgnnError
from distgnn.zarr_io import read_chunked, verify_array


def verify_graph_store(path: str | os.PathLike) -> str:
    """Check the store at ``path``; returns a one-line summary, raises :class:`DistgnnError`
    naming the array (and chunk) of the first violation."""
    store = GraphStore.open(path)
    label = str(store.path)
    # every chunk read once: the arrays checked below are read whole, the rest only verified
    read = {name: read_chunked(store[name], f"{label}/{name}") for name in ("indptr", "indices", *MASKS)}
    for name in sorted(set(store.group.array_keys()) - set(read)):
        verify_array(store[name], f"{label}/{name}")
    n, e = store.num_nodes, store.num_edges
    indptr, indices = read["indptr"], read["indices"]
    if indptr.shape != (n + 1,) or indptr[0] != 0 or indptr[-1] != e:
        raise DistgnnError(f"{label}/indptr: expected {n + 1} offsets from 0 to num_edges = {e}, "
                           f"got {indptr.shape[0]} from {indptr[0]} to {indptr[-1]}")
    if np.any(np.diff(indptr) < 0):
        raise DistgnnError(f"{label}/indptr: offsets decrease at row {int(np.argmax(np.diff(indptr) < 0))}")
    if indices.shape != (e,) or (e and (indices.min() < 0 or indices.max() >= n)):
        raise DistgnnError(f"{label}/indices: expected {e} vertex ids in [0, {n})")
    for name in ("feat", "label", *MASKS):
        if store[name].shape[0] != n:
            raise DistgnnError(f"{label}/{name}: {store[name].shape[0]} rows, expected num_nodes = {n}")
    overlap = (read["train_mask"].astype(np.int8) + read["val_mask"] + read["test_mask"]) > 1
    if overlap.any():
        raise DistgnnError(f"{label}: vertex {int(np.argmax(overlap))} is in more than one of "
                           f"{', '.join(MASKS)}")
    return (f"{label}: ok ({n:,} vertices, {e:,} edges; every chunk of "
            f"{len(list(store.group.array_keys()))} arrays read back)")
