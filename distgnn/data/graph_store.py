"""The canonical graph store ``graph.zarr`` (zarr v3): CSR by destination plus vertex data.

Layout (all arrays chunked by rows, crc32c-checksummed, every chunk written):

===========  ===========================  ==============================================
array        dtype, shape                 meaning
===========  ===========================  ==============================================
indptr       int64 [N+1]                  row v of the CSR spans indices[indptr[v]:indptr[v+1]]
indices      int32 [E] (int64 if N>=2^31) in-neighbours u of each v (edge u -> v), sorted
feat         float32 [N, F]               vertex features
label        int64 [N] or float32 [N, C]  class id (-1 = unlabelled) or multi-label 0/1
train_mask   bool [N]                     (also val_mask, test_mask)
===========  ===========================  ==============================================

Attributes: name, num_nodes, num_edges, num_classes, feat_dim, multilabel, directed, source, scale,
seed, checksum (content hash of every array), format_version.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import zarr

from distgnn import _native, atomic
from distgnn.data.catalog import DEFAULT_CHUNK_BUDGET  # noqa: F401 (re-exported)
from distgnn.data.source import GraphSource
from distgnn.errors import DistgnnError
from distgnn.progress import progress
from distgnn.zarr_io import (AtomicGroup, ChecksummedWriter, combine_digests, create_array,
                             open_checked, read, rows_per_chunk)

FORMAT_VERSION = 1
MASKS = ("train_mask", "val_mask", "test_mask")
REQUIRED = ("indptr", "indices", "feat", "label", *MASKS)


def store_name(dataset: str, scale: float = 1.0, seed: int = 0, name: str | None = None,
               mean_degree: float | None = None, labelled_fraction: float | None = None,
               normalize_features: bool = False) -> str:
    """Folder name of a store: ``dataset[-x<scale>][-d<mean degree>][-l<labelled fraction>]
    [-rownorm][-seed<N>]`` unless ``name`` is given."""
    if name:
        return name
    out = dataset
    if scale != 1.0:
        out += f"-x{scale:g}"
    if mean_degree is not None:
        out += f"-d{mean_degree:g}"
    if labelled_fraction is not None:
        out += f"-l{labelled_fraction:g}"
    if normalize_features:
        out += "-rownorm"
    if seed != 0:
        out += f"-seed{seed}"
    return out


@dataclass
class GraphStore:
    """A graph store opened for reading. Arrays are zarr arrays (read lazily)."""

    path: Path
    group: zarr.Group

    @classmethod
    def open(cls, path: str | os.PathLike) -> "GraphStore":
        path = Path(path)
        group = open_checked(path, REQUIRED)
        if "checksum" not in group.attrs:
            raise DistgnnError(f"{path}: no checksum attribute (store incomplete or not a graph store)")
        return cls(path, group)

    @property
    def attrs(self) -> dict[str, Any]:
        return dict(self.group.attrs)

    @property
    def num_nodes(self) -> int:
        return int(self.group.attrs["num_nodes"])

    @property
    def num_edges(self) -> int:
        return int(self.group.attrs["num_edges"])

    def __getitem__(self, name: str) -> zarr.Array:
        return self.group[name]

    def read(self, name: str, selection: Any = slice(None)) -> np.ndarray:
        """Rows ``selection`` of array ``name``; a damaged chunk raises one clear line."""
        return read(self.group[name], selection, f"{self.path}/{name}")

    def csr(self) -> tuple[np.ndarray, np.ndarray]:
        """(indptr int64 [N+1], indices [E]) read fully into memory."""
        return self.read("indptr"), self.read("indices")


class _EdgeSpool:
    """Edges written to two flat files as they stream in, read back in blocks (no mmap, so the
    resident size stays one block)."""

    def __init__(self, folder: Path):
        self.src_path = folder / "src.bin"
        self.dst_path = folder / "dst.bin"
        self.src = open(self.src_path, "wb")
        self.dst = open(self.dst_path, "wb")
        self.count = 0

    def append(self, src: np.ndarray, dst: np.ndarray) -> None:
        src.astype(np.int64, copy=False).tofile(self.src)
        dst.astype(np.int64, copy=False).tofile(self.dst)
        self.count += len(src)

    def close(self) -> None:
        self.src.close()
        self.dst.close()

    def blocks(self, block: int):
        with open(self.src_path, "rb") as fs, open(self.dst_path, "rb") as fd:
            for _ in range(0, self.count, block):
                yield np.fromfile(fs, np.int64, block), np.fromfile(fd, np.int64, block)


def build_csr(source: GraphSource, work_dir: Path, budget: int = DEFAULT_CHUNK_BUDGET,
              threads: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Stream ``source.edges`` into a CSR by destination (indptr int64 [N+1], indices [E]).

    Pass 1 validates ids, counts in-degrees and spools edges to ``work_dir``; pass 2 scatters from
    the spool; finally every row is sorted, so the result is independent of the edge order.
    """
    n = source.num_nodes
    counts = np.zeros(n, dtype=np.int64)
    spool = _EdgeSpool(work_dir)
    edge_file = source.files.get("edges", "edges")
    seen = 0
    bar = progress(desc=f"{source.name}: edges", unit=" edges", unit_scale=True)
    try:
        for src, dst in source.edges():
            src = np.ascontiguousarray(src, dtype=np.int64)
            dst = np.ascontiguousarray(dst, dtype=np.int64)
            if src.shape != dst.shape or src.ndim != 1:
                raise DistgnnError(f"{edge_file}: source and destination id lists differ in length")
            for rows, cols in ((dst, src), (src, dst)) if source.add_reverse else ((dst, src),):
                pos = _native.csr_count_by_row(rows, counts)
                if pos >= 0:
                    raise DistgnnError(f"{edge_file}: edge {seen + pos} has vertex id {rows[pos]} "
                                       f"outside [0, {n})")
                bad = np.flatnonzero((cols < 0) | (cols >= n))
                if bad.size:
                    raise DistgnnError(f"{edge_file}: edge {seen + bad[0]} has vertex id "
                                       f"{cols[bad[0]]} outside [0, {n})")
            spool.append(src, dst)
            seen += len(src)
            bar.update(len(src))
    finally:
        spool.close()
        bar.close()
    num_edges = int(counts.sum())
    index_dtype = np.int32 if n < 2**31 else np.int64
    indptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(counts, out=indptr[1:])
    del counts
    indices = np.empty(num_edges, dtype=index_dtype)
    cursor = indptr[:-1].copy()
    block = max(1, budget // 16)
    for src, dst in progress(spool.blocks(block), desc=f"{source.name}: CSR",
                             total=-(-spool.count // block)):
        _native.csr_scatter(dst, src, cursor, indices, n)
        if source.add_reverse:
            _native.csr_scatter(src, dst, cursor, indices, n)
    del cursor
    _native.csr_sort_rows(indptr, indices, threads)
    return indptr, indices


def validate_vertex_data(source: GraphSource) -> None:
    """Check labels and masks against the vertex count and class count; raise one clear line."""
    n, label_file = source.num_nodes, source.files.get("labels", "labels")
    if n <= 0:
        raise DistgnnError(f"{source.files.get('features', source.name)}: the graph has no vertices")
    labels = source.labels
    if labels.shape[0] != n:
        raise DistgnnError(f"{label_file}: {labels.shape[0]} labels for {n} vertices")
    if source.multilabel:
        if labels.ndim != 2 or labels.shape[1] != source.num_classes:
            raise DistgnnError(f"{label_file}: expected multi-label shape [{n}, {source.num_classes}],"
                               f" got {list(labels.shape)}")
        finite = labels[~np.isnan(labels)] if np.issubdtype(labels.dtype, np.floating) else labels
        if finite.size and (finite.min() < 0 or finite.max() > 1):
            raise DistgnnError(f"{label_file}: multi-label values must be 0 or 1")
    else:
        if labels.ndim != 1:
            raise DistgnnError(f"{label_file}: expected one class id per vertex, got shape "
                               f"{list(labels.shape)}")
        low = -1 if source.allow_unlabelled else 0
        if labels.size:
            bad = np.flatnonzero((labels < low) | (labels >= source.num_classes))
            if bad.size:
                raise DistgnnError(f"{label_file}: label {labels[bad[0]]} of vertex {bad[0]} is outside "
                                   f"[{low}, {source.num_classes})")
    for mask_name in MASKS:
        mask = source.masks.get(mask_name)
        where = source.files.get(mask_name, mask_name)
        if mask is None:
            raise DistgnnError(f"{where}: missing")
        if mask.shape != (n,):
            raise DistgnnError(f"{where}: length {mask.shape[0] if mask.ndim else 0}, expected {n} "
                               f"(one entry per vertex)")
    if not source.masks["train_mask"].any():
        raise DistgnnError(f"{source.files.get('train_mask', 'train_mask')}: no training vertex")


def write_graph_store(source: GraphSource, path: str | os.PathLike, *, overwrite: bool = False,
                      budget: int = DEFAULT_CHUNK_BUDGET, threads: int = 0) -> Path:
    """Convert ``source`` into ``path`` (a ``graph.zarr``), streaming features in blocks of at most
    ``budget`` bytes. Written under a temporary name and renamed when complete."""
    validate_vertex_data(source)
    path = Path(path)
    with AtomicGroup(path, overwrite=overwrite) as store:
        with atomic.scratch_dir(path, "edges") as work:  # an orphan is removed by the next fetch
            indptr, indices = build_csr(source, work, budget, threads)
        n, f = source.num_nodes, source.feat_dim
        digests = {}
        for name, data in (("indptr", indptr), ("indices", indices)):
            writer = ChecksummedWriter(create_array(store.group, name, data.shape, data.dtype))
            step = writer.array.chunks[0]
            for start in range(0, max(len(data), 1), step):
                if len(data):
                    writer.write(data[start:start + step])
            digests[name] = writer.finish()
        num_edges = len(indices)
        del indptr, indices

        # One zarr chunk is at most a quarter of the budget: encoding holds a few copies of it.
        feat_chunk_rows = max(1, min(rows_per_chunk((f,), np.float32), budget // 4 // max(f * 4, 1)))
        feat_writer = ChecksummedWriter(create_array(store.group, "feat", (n, f), np.float32,
                                                     chunk_rows=feat_chunk_rows))
        feat_file = source.files.get("features", "features")
        rows_budget = max(1, budget // max(f * 4, 1))
        bar = progress(desc=f"{source.name}: features", total=n, unit=" rows", unit_scale=True)
        for block in source.features(rows_budget):
            block = np.asarray(block, dtype=np.float32)
            if block.ndim != 2 or block.shape[1] != f:
                raise DistgnnError(f"{feat_file}: expected {f} features per vertex, got shape "
                                   f"{list(block.shape)}")
            if not np.isfinite(block).all():
                bad = int(np.argwhere(~np.isfinite(block))[0][0]) + feat_writer.cursor
                raise DistgnnError(f"{feat_file}: NaN or Inf in the features of vertex {bad}")
            for start in range(0, block.shape[0], feat_chunk_rows):
                feat_writer.write(block[start:start + feat_chunk_rows])
            bar.update(block.shape[0])
        bar.close()
        if feat_writer.cursor != n:
            raise DistgnnError(f"{feat_file}: {feat_writer.cursor} feature rows for {n} vertices "
                               f"(file truncated?)")
        digests["feat"] = feat_writer.finish()

        labels = (source.labels.astype(np.float32) if source.multilabel
                  else source.labels.astype(np.int64))
        arrays = {"label": labels, **{k: source.masks[k].astype(bool) for k in MASKS}}
        for name, data in arrays.items():
            writer = ChecksummedWriter(create_array(store.group, name, data.shape, data.dtype))
            writer.write(data)
            digests[name] = writer.finish()

        attrs = {
            "format_version": FORMAT_VERSION,
            "name": source.name,
            "store": path.parent.name,
            "num_nodes": n,
            "num_edges": num_edges,
            "num_classes": source.num_classes,
            "feat_dim": f,
            "multilabel": source.multilabel,
            "directed": source.directed,
            "source": source.source,
            "scale": source.scale,
            "mean_degree": source.mean_degree,
            "labelled_fraction": source.labelled_fraction,
            "normalize_features": source.normalize_features,
            "seed": source.seed,
            "checksum": combine_digests(digests),
        }
        return store.commit(attrs)
