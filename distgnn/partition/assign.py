"""Stage 1: assign every edge of a graph store to a partition (native), choose roots, and write
``assignment.zarr`` with the quality figures in its attrs."""
from __future__ import annotations

import os
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Union

import numpy as np
import zarr

from distgnn import _native
from distgnn.data.graph_store import GraphStore
from distgnn.errors import DistgnnError
from distgnn.owned_folder import check_owned_folder
from distgnn.partition import layout
from distgnn.partition.quality import quality
from distgnn.partition.store_io import write_array
from distgnn.preflight import assign_needs, check
from distgnn.progress import is_quiet, progress
from distgnn.zarr_io import AtomicGroup, combine_digests, read, read_chunked


@dataclass
class Assignment:
    """An assignment in memory.

    Attributes:
        edge_part: uint8/uint16 [E], partition of each edge in store order.
        replicas: uint64 [N, ceil(P/64)] replica bitsets (isolated vertices included).
        root: int32 [N], partition of each vertex's root.
        edges, vertices, roots, train_roots: int64 [P] per-part counts.
        root_local_edges: edges held by the partition of their destination's root.
        split: int64 [P], per part its vertices with replicas on other parts too.
    """

    edge_part: np.ndarray
    replicas: np.ndarray
    root: np.ndarray
    edges: np.ndarray
    vertices: np.ndarray
    roots: np.ndarray
    train_roots: np.ndarray
    root_local_edges: int
    split: np.ndarray


def check_request(num_nodes: int, parts: int, method: str) -> None:
    """One-line errors for a bad --parts or --method."""
    if method not in layout.METHODS:
        raise DistgnnError(f"--method: unknown method '{method}' (expected one of "
                           f"{', '.join(layout.METHODS)})")
    if parts < 1:
        raise DistgnnError(f"--parts: expected at least 1, got {parts}")
    if parts > 65535:
        raise DistgnnError(f"--parts: at most 65535 partitions are supported, got {parts}")
    if parts > num_nodes:
        raise DistgnnError(f"--parts: {parts} partitions for a graph of {num_nodes} vertices "
                           f"(expected at most one partition per vertex)")


#: edges per native call of a streamed (store-order) assignment: one read of the graph's
#: sources and one step of the progress bar (64 MiB of int32 ids)
WINDOW_EDGES = 1 << 24

Sources = Union[np.ndarray, zarr.Array]
"""The graph's ``indices`` (the source of each edge): in memory, or a store's array streamed."""


def source_windows(indices: Sources, window_edges: int | None = None,
                   label: str = "indices") -> Iterator[tuple[int, np.ndarray]]:
    """(first edge id, sources of the window) of consecutive windows of about ``window_edges``
    (default :data:`WINDOW_EDGES`) over ``indices``; a zarr array is read in whole chunks (a
    damaged chunk named through ``label``)."""
    m = int(indices.shape[0])
    step = window_edges or WINDOW_EDGES
    if not isinstance(indices, np.ndarray):
        chunk = int(indices.chunks[0])
        step = max(1, step // chunk) * chunk
    for lo in range(0, m, step):
        if isinstance(indices, np.ndarray):
            window = indices[lo:lo + step]
        else:
            window = read(indices, slice(lo, lo + step), label)
        if window.dtype not in (np.int32, np.int64):
            window = window.astype(np.int64)
        yield lo, np.ascontiguousarray(window)


def compute_assignment(indptr: np.ndarray, indices: Sources, parts: int, method: str,
                       seed: int = 0, train_mask: np.ndarray | None = None,
                       threads: int = 0, hdrf_lambda: float = layout.HDRF_LAMBDA,
                       order: str | None = None, root_rule: str = "balance",
                       label: str = "indices", window_edges: int | None = None) -> Assignment:
    """Assign the edges of a CSR by destination (indptr int64 [N+1]; indices int32/int64 [E], in
    memory or a store's zarr array).

    ``order`` is the edge stream of libra and hdrf (``store`` or ``shuffle``; default
    :func:`layout.default_order`). In ``store`` order (and for random and hash) the sources are
    streamed in windows of ``window_edges`` (default :data:`WINDOW_EDGES`), read twice
    (out-degrees, then placement), so the edges cost only ``edge_part`` (1 byte each up to 255
    parts); ``shuffle`` visits edges at random and holds every source plus 4 + 4 bytes per edge
    more (docs/design.md#preflight).
    ``root_rule`` (:data:`layout.ROOT_RULES`): ``balance`` may put a root on any replica;
    ``in-edges`` only on a replica holding the most of the vertex's in-edges (8 bytes per vertex
    more memory), so the root's own partial is the largest share of its aggregate.
    """
    order = order or layout.default_order(method)
    if order not in layout.ORDERS:
        raise DistgnnError(f"--order: expected one of {', '.join(layout.ORDERS)}, got '{order}'")
    if root_rule not in layout.ROOT_RULES:
        raise DistgnnError(f"--roots: expected one of {', '.join(layout.ROOT_RULES)}, got '{root_rule}'")
    n = len(indptr) - 1
    check_request(n, parts, method)
    indptr = np.ascontiguousarray(indptr, dtype=np.int64)
    m = int(indptr[-1])
    shuffled = order == "shuffle" and method in layout.STREAMED
    if shuffled and not isinstance(indices, np.ndarray):
        indices = read_chunked(indices, label)  # the shuffled stream visits every edge at random
    degree = np.diff(indptr)
    # out-degrees natively: np.bincount would first copy int32 ids to int64 (8 bytes per edge)
    for _, window in source_windows(indices, window_edges, label):
        _native.csr_count_by_row(window, degree)
    edge_part = np.empty(m, dtype=layout.part_dtype(parts))
    bits = np.zeros(n * layout.words(parts), dtype=np.uint64)
    edges = np.zeros(parts, dtype=np.int64)
    windows = ([(0, np.ascontiguousarray(indices))] if shuffled
               else source_windows(indices, window_edges, label))
    bar = progress(desc=f"assign {method} P={parts}", total=m, unit=" edges", unit_scale=True)
    for lo, window in windows:
        _native.partition_assign(indptr, window, lo, parts, method, order, seed & (2**64 - 1),
                                 degree, edge_part, bits, edges, float(hdrf_lambda), int(threads))
        bar.update(len(window))
    bar.close()
    del degree, windows
    train = (np.zeros(n, dtype=bool) if train_mask is None
             else np.ascontiguousarray(train_mask, dtype=bool))
    root = np.empty(n, dtype=np.int32)
    roots = np.zeros(parts, dtype=np.int64)
    train_roots = np.zeros(parts, dtype=np.int64)
    prefer = np.zeros(n * layout.words(parts) if root_rule == "in-edges" else 0, dtype=np.uint64)
    if root_rule == "in-edges":
        _native.partition_most_in_edges(indptr, edge_part, parts, prefer, int(threads))
    _native.partition_roots(bits, parts, train, seed & (2**64 - 1), root, roots, train_roots, prefer)
    del prefer
    replicas = bits.reshape(n, layout.words(parts))
    vertices, split = layout.part_vertex_counts(replicas, parts)
    return Assignment(edge_part, replicas, root, edges, vertices, roots, train_roots,
                      root_local_edges(indptr, edge_part, root), split)


def root_local_edges(indptr: np.ndarray, edge_part: np.ndarray, root: np.ndarray,
                     window_edges: int | None = None) -> int:
    """Number of edges (u, v) on the partition of v's root: the part of the aggregates that roots
    compute themselves (the rest reaches them from leaves). Rows in ranges of about
    ``window_edges`` edges (default :data:`WINDOW_EDGES`): bounded memory."""
    window_edges = window_edges or WINDOW_EDGES
    n, total, start = len(indptr) - 1, 0, 0
    while start < n:
        stop = int(np.searchsorted(indptr, indptr[start] + window_edges, "right")) - 1
        stop = min(n, max(stop, start + 1))
        counts = np.diff(indptr[start:stop + 1])
        parts = edge_part[indptr[start]:indptr[stop]]
        total += int(np.count_nonzero(parts == np.repeat(root[start:stop], counts)))
        start = stop
    return total


def assign_graph(graph: str | os.PathLike, parts: int, method: str = "libra", seed: int = 0,
                 out: str | os.PathLike | None = None, threads: int = 0,
                 overwrite: bool = False, order: str | None = None,
                 root_rule: str = "balance", preflight: bool = True) -> tuple[Path, dict[str, Any]]:
    """Assign ``graph`` (a graph.zarr) into ``parts`` partitions; write ``<out>/assignment.zarr``
    (and remove any ``part_<K>.zarr`` with K >= ``parts`` an earlier assignment left there).
    ``root_rule``: see :func:`compute_assignment`. ``preflight``: first refuse, in one line, an
    assignment whose memory or disk would not fit here (:func:`distgnn.preflight.assign_needs`).

    Returns (the partition folder, the assignment's attrs).
    """
    graph = Path(graph)
    if method not in layout.METHODS:
        check_request(1, 1, method)
    store = GraphStore.open(graph)
    check_request(store.num_nodes, parts, method)
    out = Path(out) if out is not None else layout.default_out(graph, method, parts)
    check_owned_folder(out, "a partition folder")
    if (out / layout.ASSIGNMENT).exists() and not overwrite:  # fail before the work, not after
        raise DistgnnError(f"{out / layout.ASSIGNMENT} already exists (use --force to replace it)")
    order = order or layout.default_order(method)
    if preflight:
        line = check(assign_needs(
            f"partition assign {method} P={parts}", out, store.num_nodes, store.num_edges, parts,
            order == "shuffle" and method in layout.STREAMED, root_rule == "in-edges",
            WINDOW_EDGES))
        if not is_quiet():
            print(line, file=sys.stderr)
    start = time.perf_counter()
    indptr = read_chunked(store["indptr"], f"{graph}/indptr")
    train = store["train_mask"][:]
    read_s = time.perf_counter() - start
    start = time.perf_counter()
    result = compute_assignment(indptr, store["indices"], parts, method, seed, train, threads,
                                order=order, root_rule=root_rule, label=f"{graph}/indices")
    assign_s = time.perf_counter() - start
    del indptr
    n = store.num_nodes
    with AtomicGroup(out / layout.ASSIGNMENT, overwrite=overwrite) as target:
        digests = {
            "edge_part": write_array(target.group, "edge_part", result.edge_part),
            "replicas": write_array(target.group, "replicas", result.replicas),
            "root": write_array(target.group, "root", result.root),
        }
        attrs: dict[str, Any] = {
            "format_version": layout.FORMAT_VERSION,
            "P": parts, "method": method, "seed": seed, "order": order if method in layout.STREAMED else "none",
            "hdrf_lambda": layout.HDRF_LAMBDA if method == "hdrf" else None,
            "root_rule": root_rule,
            "graph": str(graph.resolve()), "store": store.attrs.get("store", graph.parent.name),
            "graph_checksum": store.attrs["checksum"],
            "num_nodes": n, "num_edges": store.num_edges,
            "num_train": int(train.sum()),
            "part_edges": result.edges.tolist(), "part_vertices": result.vertices.tolist(),
            "part_roots": result.roots.tolist(), "part_train_roots": result.train_roots.tolist(),
            "part_split": result.split.tolist(),
            **quality(n, result.edges, result.vertices, result.roots, result.train_roots,
                      result.root_local_edges),
        }
        attrs["checksum"] = combine_digests(digests)
        target.commit(attrs)
    for stray in layout.stray_parts(out, parts):  # an earlier partitioning's: part of nothing now
        shutil.rmtree(stray)
    # timings are printed, not stored, so the same inputs give byte-identical stores
    return out, {**attrs, "assign_seconds": assign_s, "read_seconds": read_s}
