"""Stage 2: build ``part_<k>.zarr`` for one partition from ``assignment.zarr`` and the graph store
(layout in :mod:`distgnn.partition`). Parts are independent, so the DAG builds them in parallel.

Features (and multi-label rows) are gathered one source chunk at a time and written in whole
chunks, in the background while the next chunk is gathered, so peak memory is the structure
arrays plus a few chunks, whatever the feature width.
"""
from __future__ import annotations

import contextlib
import os
import sys
from concurrent.futures import Executor, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from distgnn import _native, preflight
from distgnn.data.graph_store import GraphStore
from distgnn.errors import DistgnnError
from distgnn.options import existing_path
from distgnn.partition import layout
from distgnn.partition.readers import open_assignment, open_graph_for
from distgnn.partition.store_io import (RowWriter, ScatteredRows, SharedChunks, create_row_array,
                                        gather_rows_multi, read_csr, write_array)
from distgnn.partition.vertex_order import DEFAULT_VERTEX_ORDER, block_permutation, check_order
from distgnn.progress import is_quiet, progress
from distgnn.zarr_io import AtomicGroup, combine_digests, open_checked, read_chunked


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


def load_inputs(folder: str | os.PathLike, graph: str | os.PathLike | None = None) -> BuildInputs:
    folder = Path(folder)
    group, attrs = open_assignment(folder)
    store = open_graph_for(attrs, graph)
    indptr, indices = read_csr(store)
    return BuildInputs(folder, attrs, store, indptr, indices, read_chunked(group["edge_part"]),
                       read_chunked(group["replicas"]), read_chunked(group["root"]),
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
    leaf_send = leaves[np.lexsort((l2g[leaves], owner[leaves]))]  # by owner, then global id
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
        group = roots[has.astype(bool)]
        groups.append(group[np.argsort(l2g[group], kind="stable")])
    recv_off = np.zeros(P + 1, dtype=np.int64)
    np.cumsum([len(g) for g in groups], out=recv_off[1:])
    return (leaf_send.astype(np.int64), send_off, np.concatenate(groups).astype(np.int64), recv_off)


def local_order(inp: BuildInputs, k: int) -> tuple[np.ndarray, int]:
    """(local_to_global int64 [n_k], n_roots): part k's roots first, then its leaves, each block
    in ascending global id (layout version 2 with vertex order ``none``, see
    :mod:`distgnn.partition`)."""
    members = layout.members(inp.replicas, k)
    is_root = inp.root[members] == k
    return np.concatenate([members[is_root], members[~is_root]]), int(is_root.sum())


def ordered_structure(inp: BuildInputs, k: int, order: str,
                      threads: int) -> tuple[np.ndarray, int, np.ndarray, np.ndarray]:
    """(local_to_global, n_roots, indptr, indices) of part k in vertex order ``order``
    (:mod:`distgnn.partition.vertex_order`); rows list their sources in ascending global id
    (the order of the graph's own rows) in every order."""
    l2g, n_roots = local_order(inp, k)
    indptr, indices = local_csr(inp, k, l2g, threads)
    if order == "none":
        return l2g, n_roots, indptr, indices
    l2g = l2g[block_permutation(indptr, indices, n_roots, order)]
    del indptr, indices
    indptr, indices = local_csr(inp, k, l2g, threads)
    return l2g, n_roots, indptr, indices


#: a block streams straight into one row writer per run of ascending global ids when it has at
#: most this many runs (each writer holds up to two chunks); beyond, through a scratch file
MAX_STREAMED_RUNS = 64


def ascending_runs(gids: np.ndarray) -> list[tuple[int, int]]:
    """[lo, hi) of each maximal run of ascending values of ``gids`` (one empty run when empty)."""
    cuts = np.flatnonzero(np.diff(gids) < 0) + 1
    edges = [0, *cuts.tolist(), len(gids)]
    return list(zip(edges[:-1], edges[1:]))


class PartWriter:
    """Writes ``part_<k>.zarr`` in two steps: the constructor computes and writes the structure,
    the communication plan and the masks (under a temporary name); the row data (``feat``,
    ``label``) is then streamed by the caller into the writers of :meth:`row_targets`: one per run
    of ascending global ids in each block (roots, then leaves), each fed its rows in ascending
    global id (``none``: one run per block; ``dbg``: one per degree group), or, for a block with
    more than :data:`MAX_STREAMED_RUNS` runs, one :class:`ScatteredRows` for the block;
    :meth:`commit` writes the attrs and renames. :meth:`abort` removes the temporary folder (also done when the
    object is used as a context manager and an exception escapes)."""

    ROW_ARRAYS = ("feat", "label")

    def __init__(self, inp: BuildInputs, k: int, threads: int = 0, overwrite: bool = True,
                 executor: Executor | None = None, order: str = DEFAULT_VERTEX_ORDER):
        P = inp.attrs["P"]
        if not 0 <= k < P:
            raise DistgnnError(f"--part: expected 0 <= K < {P}, got {k}")
        self.inp, self.k, self.order = inp, k, check_order(order)
        l2g, self.n_roots, indptr, indices = ordered_structure(inp, k, order, threads)
        self.l2g = l2g
        n_k, m_k = len(l2g), len(indices)
        t_indptr = np.empty(n_k + 1, dtype=np.int64)
        t_indices = np.empty(m_k, dtype=np.int32)
        _native.csr_transpose(indptr, indices, n_k, t_indptr, t_indices)
        is_root = inp.root[l2g] == k
        in_degree = (inp.indptr[l2g + 1] - inp.indptr[l2g]).astype(np.int64)
        leaf_send, send_off, root_recv, recv_off = comm_plan(inp, k, l2g, is_root)
        self.rows: dict[str, list[tuple[np.ndarray, Any]]] = {}
        self.shared: dict[str, SharedChunks] = {}
        self.target = AtomicGroup(inp.folder / layout.part_name(k), overwrite=overwrite)
        try:
            g = self.target.group
            self.digests: dict[str, str] = {}
            for name, data in (("local_to_global", l2g), ("indptr", indptr), ("indices", indices),
                               ("t_indptr", t_indptr), ("t_indices", t_indices),
                               ("in_degree_global", in_degree), ("is_root", is_root)):
                self.digests[name] = write_array(g, name, data)
            comm = g.create_group("comm")
            for name, data in (("leaf_send", leaf_send), ("leaf_send_offsets", send_off),
                               ("root_recv", root_recv), ("root_recv_offsets", recv_off)):
                self.digests[f"comm/{name}"] = write_array(comm, name, data)
            self.counts = {}
            for name in layout.MASKS:
                mask = inp.masks[name][l2g] & is_root
                self.counts[name.replace("_mask", "")] = int(mask.sum())
                self.digests[name] = write_array(g, name, mask)
            for name in self.ROW_ARRAYS:
                array = create_row_array(g, name, (n_k, *inp.store[name].shape[1:]),
                                         inp.store[name].dtype)
                self.rows[name] = targets = []
                self.shared[name] = shared = SharedChunks(array, executor)
                for lo, hi in ((0, self.n_roots), (self.n_roots, n_k)):
                    block = l2g[lo:hi]
                    runs = ascending_runs(block)
                    if len(runs) <= MAX_STREAMED_RUNS:
                        targets += [(block[a:b], RowWriter(array, executor, lo + a, lo + b, shared))
                                    for a, b in runs]
                    else:
                        scattered = ScatteredRows(RowWriter(array, executor, lo, hi, shared),
                                                  block, self.target.path)
                        targets.append((scattered.gids, scattered))
        except BaseException:
            self.abort()
            raise
        self.attrs = {
            "format_version": layout.FORMAT_VERSION,
            "layout_version": layout.LAYOUT_VERSION, "n_roots": self.n_roots,
            "vertex_order": order,
            "k": k, "P": P, "method": inp.attrs["method"], "seed": inp.attrs["seed"],
            "store": inp.attrs["store"], "graph": inp.attrs["graph"],
            "graph_checksum": inp.attrs["graph_checksum"],
            "assignment_checksum": inp.attrs["checksum"],
            "num_nodes": inp.attrs["num_nodes"], "num_edges": inp.attrs["num_edges"],
            "n_k": n_k, "m_k": m_k,
            "num_roots": int(is_root.sum()), "num_leaves": int(n_k - is_root.sum()),
            "num_split": int(np.count_nonzero(layout.split_mask(inp.replicas[l2g]))),
            "num_train": self.counts["train"], "num_val": self.counts["val"],
            "num_test": self.counts["test"],
            "feat_dim": inp.store.attrs["feat_dim"], "num_classes": inp.store.attrs["num_classes"],
            "multilabel": inp.store.attrs["multilabel"],
        }

    def row_targets(self, name: str) -> list[tuple[np.ndarray, Any]]:
        """(global ids ascending, writer) for each run of row array ``name``, in local id order."""
        return self.rows[name]

    def commit(self) -> Path:
        for name, targets in self.rows.items():
            self.digests[name] = "+".join(writer.finish() for _, writer in targets)
            self.shared[name].finish()  # the chunks two writers shared, written once full
        return self.target.commit({**self.attrs, "checksum": combine_digests(self.digests)})

    def abort(self) -> None:
        for writer in (w for targets in self.rows.values() for _, w in targets):
            writer.drain()  # no background write may land after the folder is removed
            if isinstance(writer, ScatteredRows):
                writer.close()
        for shared in self.shared.values():
            shared.drain()
        self.target.__exit__(None, None, None)

    def __enter__(self) -> "PartWriter":
        return self

    def __exit__(self, *exc_info) -> None:
        if not self.target.committed:
            self.abort()


def check_build_fits(folder: str | os.PathLike, parts: list[int] | None = None,
                     graph: str | os.PathLike | None = None) -> str:
    """Before any input is read: refuse in one line a build of ``parts`` (default: every part)
    whose memory or disk would not fit here (:func:`distgnn.preflight.build_needs`, from the
    assignment's per-part counts); return the summary line."""
    folder = Path(folder)
    _, attrs = open_assignment(folder)
    store = open_graph_for(attrs, graph)
    ks = list(range(attrs["P"])) if parts is None else parts
    label = store["label"]
    needs = preflight.build_needs(
        f"partition build {folder} ({len(ks)} of {attrs['P']} parts)", folder, attrs["num_nodes"],
        attrs["num_edges"], attrs["P"], [attrs["part_vertices"][k] for k in ks],
        [attrs["part_edges"][k] for k in ks], int(store.attrs["feat_dim"]), store["feat"].dtype.itemsize,
        label.dtype.itemsize * int(np.prod(label.shape[1:], dtype=np.int64)))
    return preflight.check(needs)


def _say(line: str) -> None:
    if not is_quiet():
        print(line, file=sys.stderr)


def build_from(inp: BuildInputs, k: int, threads: int = 0, overwrite: bool = True,
               order: str = DEFAULT_VERTEX_ORDER) -> Path:
    """Write ``part_<k>.zarr`` under a temporary name and rename it when complete."""
    # One background writer: a chunk is written while the next is gathered.
    with ThreadPoolExecutor(max_workers=1) as executor, \
            PartWriter(inp, k, threads, overwrite, executor, order) as part:
        for name in PartWriter.ROW_ARRAYS:
            # both blocks (roots, leaves) from one pass over the source chunks
            gather_rows_multi(inp.store[name], part.row_targets(name), desc=f"build {name}")
        return part.commit()


def build_part(folder: str | os.PathLike, k: int, threads: int = 0,
               graph: str | os.PathLike | None = None, order: str = DEFAULT_VERTEX_ORDER,
               preflight: bool = True) -> Path:
    """Build one part (the DAG's `build` stage) in vertex order ``order``; ``preflight``: first
    refuse a build that would not fit (:func:`check_build_fits`)."""
    check_order(order)
    if preflight:
        _, attrs = open_assignment(Path(folder))
        if not 0 <= k < attrs["P"]:
            raise DistgnnError(f"--part: expected 0 <= K < {attrs['P']}, got {k}")
        _say(check_build_fits(folder, [k], graph))
    inp = load_inputs(folder, graph)
    return build_from(inp, k, threads, order=order)


def build_all(folder: str | os.PathLike, threads: int = 0,
              order: str = DEFAULT_VERTEX_ORDER, preflight: bool = True) -> list[Path]:
    """Build every part, reading the graph and the assignment once, and the row data (features)
    once as well: each source chunk is read one time and its rows sent to every part's writer
    (memory: two chunks per part, whatever the width); ``preflight``: see :func:`build_part`."""
    check_order(order)
    if preflight:
        _say(check_build_fits(folder))
    inp = load_inputs(folder)
    workers = max(1, threads if threads > 0 else (os.cpu_count() or 1))
    with contextlib.ExitStack() as stack:
        # Chunk writes run in the background (one in flight per row writer), overlapping the
        # gathers; exiting the stack waits for them before any output is committed or removed.
        executor = stack.enter_context(ThreadPoolExecutor(max_workers=workers))
        # The parts' structure (CSR, transpose, plan, masks) is built side by side; every part
        # that was made joins the stack (so it is removed if another one failed).
        futures = [executor.submit(PartWriter, inp, k, 1, executor=executor, order=order)
                   for k in range(inp.attrs["P"])]
        parts, error = [], None
        for future in progress(futures, desc="build structure"):
            try:
                parts.append(stack.enter_context(future.result()))
            except BaseException as exc:  # noqa: BLE001 - re-raised once every part is settled
                error = error or exc
        if error is not None:
            raise error
        for name in PartWriter.ROW_ARRAYS:
            gather_rows_multi(inp.store[name], [t for p in parts for t in p.row_targets(name)],
                              desc=f"build {name}")
        return [p.commit() for p in parts]
