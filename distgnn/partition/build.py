"""Stage 2: build ``part_<k>.zarr`` for one partition from ``assignment.zarr`` and the graph store
(layout in :mod:`distgnn.partition`). Parts are independent, so the DAG builds them in parallel.

Features (and multi-label rows) are gathered one source chunk at a time and written in whole
chunks, so peak memory is the structure arrays plus two chunks, whatever the feature width.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from distgnn import _native
from distgnn.data.graph_store import GraphStore
from distgnn.errors import DistgnnError
from distgnn.partition import layout
from distgnn.partition.store_io import ChunkAlignedWriter, gather_rows, read_csr, read_whole, write_array
from distgnn.progress import progress
from distgnn.zarr_io import AtomicGroup, combine_digests, create_array, open_checked


@dataclass
class BuildInputs:
    """What every part's build reads: the graph and the assignment, in memory (structure only)."""

    folder: Path
    attrs: dict[str, Any]
    store: GraphStore
    indptr: np.ndarray
    indices: np.ndarray
    edge_part: np.ndarray
    replicas: np.ndarray
    root: np.ndarray
    masks: dict[str, np.ndarray]


def open_assignment(folder: Path) -> tuple[Any, dict[str, Any]]:
    """Open ``<folder>/assignment.zarr``; one-line error when it is missing or incomplete."""
    path = Path(folder) / layout.ASSIGNMENT
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


def load_inputs(folder: str | os.PathLike, graph: str | os.PathLike | None = None) -> BuildInputs:
    folder = Path(folder)
    group, attrs = open_assignment(folder)
    store = open_graph_for(attrs, graph)
    indptr, indices = read_csr(store)
    return BuildInputs(folder, attrs, store, indptr, indices, read_whole(group["edge_part"]),
                       read_whole(group["replicas"]), read_whole(group["root"]),
                       {m: store[m][:] for m in layout.MASKS})


def local_csr(inp: BuildInputs, k: int, l2g: np.ndarray,
              threads: int) -> tuple[np.ndarray, np.ndarray]:
    """Part k's CSR by destination in local ids (indptr int64 [n_k+1], indices int32 [m_k])."""
    n, n_k = len(inp.indptr) - 1, len(l2g)
    if n_k >= 2**31:
        raise DistgnnError(f"partition {k}: {n_k} vertices exceed int32 local ids")
    counts = np.empty(n_k, dtype=np.int64)
    _native.partition_row_counts(inp.indptr, inp.edge_part, k, l2g, counts, threads)
    indptr = np.zeros(n_k + 1, dtype=np.int64)
    np.cumsum(counts, out=indptr[1:])
    del counts
    g2l = np.full(n, -1, dtype=np.int32)
    g2l[l2g] = np.arange(n_k, dtype=np.int32)
    indices = np.empty(int(indptr[-1]), dtype=np.int32)
    bad = _native.partition_fill(inp.indptr, inp.indices, inp.edge_part, k, l2g, g2l, indptr,
                                 indices, threads)
    if bad >= 0:
        raise DistgnnError(f"{inp.folder / layout.ASSIGNMENT}: edge {bad} is on partition {k} but "
                           f"its source has no replica there (assignment damaged)")
    return indptr, indices


def comm_plan(inp: BuildInputs, k: int, l2g: np.ndarray,
              is_root: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(leaf_send, leaf_send_offsets, root_recv, root_recv_offsets) of part k (local ids, int64)."""
    P = inp.attrs["P"]
    owner = inp.root[l2g]
    leaves = np.flatnonzero(~is_root)
    leaf_send = leaves[np.argsort(owner[leaves], kind="stable")]  # by owner, then global id
    send_off = np.zeros(P + 1, dtype=np.int64)
    np.cumsum(np.bincount(owner[leaves], minlength=P), out=send_off[1:])
    roots = np.flatnonzero(is_root)
    root_bits = inp.replicas[l2g[roots]]
    groups = []
    for j in range(P):
        if j == k:
            groups.append(np.empty(0, dtype=np.int64))
            continue
        has = (root_bits[:, j // 64] >> np.uint64(j % 64)) & np.uint64(1)
        groups.append(roots[has.astype(bool)])
    recv_off = np.zeros(P + 1, dtype=np.int64)
    np.cumsum([len(g) for g in groups], out=recv_off[1:])
    return (leaf_send.astype(np.int64), send_off, np.concatenate(groups).astype(np.int64), recv_off)


def build_from(inp: BuildInputs, k: int, threads: int = 0, overwrite: bool = True) -> Path:
    """Write ``part_<k>.zarr`` under a temporary name and rename it when complete."""
    P = inp.attrs["P"]
    if not 0 <= k < P:
        raise DistgnnError(f"--part: expected 0 <= K < {P}, got {k}")
    l2g = layout.members(inp.replicas, k)
    indptr, indices = local_csr(inp, k, l2g, threads)
    n_k, m_k = len(l2g), len(indices)
    t_indptr = np.empty(n_k + 1, dtype=np.int64)
    t_indices = np.empty(m_k, dtype=np.int32)
    _native.csr_transpose(indptr, indices, n_k, t_indptr, t_indices)
    is_root = inp.root[l2g] == k
    in_degree = (inp.indptr[l2g + 1] - inp.indptr[l2g]).astype(np.int64)
    leaf_send, send_off, root_recv, recv_off = comm_plan(inp, k, l2g, is_root)
    attrs_in = inp.attrs
    graph_attrs = inp.store.attrs
    path = inp.folder / layout.part_name(k)
    with AtomicGroup(path, overwrite=overwrite) as target:
        g = target.group
        digests = {}
        for name, data in (("local_to_global", l2g), ("indptr", indptr), ("indices", indices),
                           ("t_indptr", t_indptr), ("t_indices", t_indices),
                           ("in_degree_global", in_degree), ("is_root", is_root)):
            digests[name] = write_array(g, name, data)
        del indices, t_indices
        comm = g.create_group("comm")
        for name, data in (("leaf_send", leaf_send), ("leaf_send_offsets", send_off),
                           ("root_recv", root_recv), ("root_recv_offsets", recv_off)):
            digests[f"comm/{name}"] = write_array(comm, name, data)
        for name in ("feat", "label"):
            src = inp.store[name]
            writer = ChunkAlignedWriter(create_array(g, name, (n_k, *src.shape[1:]), src.dtype))
            gather_rows(src, l2g, writer)
            digests[name] = writer.finish()
        counts = {}
        for name in layout.MASKS:
            mask = inp.masks[name][l2g] & is_root
            counts[name.replace("_mask", "")] = int(mask.sum())
            digests[name] = write_array(g, name, mask)
        attrs = {
            "format_version": layout.FORMAT_VERSION,
            "k": k, "P": P, "method": attrs_in["method"], "seed": attrs_in["seed"],
            "store": attrs_in["store"], "graph": attrs_in["graph"],
            "graph_checksum": attrs_in["graph_checksum"],
            "assignment_checksum": attrs_in["checksum"],
            "num_nodes": attrs_in["num_nodes"], "num_edges": attrs_in["num_edges"],
            "n_k": n_k, "m_k": m_k,
            "num_roots": int(is_root.sum()), "num_leaves": int(n_k - is_root.sum()),
            "num_split": int(np.count_nonzero(layout.replica_counts(inp.replicas[l2g]) > 1)),
            "num_train": counts["train"], "num_val": counts["val"], "num_test": counts["test"],
            "feat_dim": graph_attrs["feat_dim"], "num_classes": graph_attrs["num_classes"],
            "multilabel": graph_attrs["multilabel"],
        }
        attrs["checksum"] = combine_digests(digests)
        return target.commit(attrs)


def build_part(folder: str | os.PathLike, k: int, threads: int = 0,
               graph: str | os.PathLike | None = None) -> Path:
    """Build one part (the DAG's `build` stage)."""
    inp = load_inputs(folder, graph)
    return build_from(inp, k, threads)


def build_all(folder: str | os.PathLike, threads: int = 0) -> list[Path]:
    """Build every part, reading the graph and the assignment once."""
    inp = load_inputs(folder)
    return [build_from(inp, k, threads) for k in progress(range(inp.attrs["P"]), desc="build parts")]
