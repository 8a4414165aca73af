"""The canonical graph store ``graph.zarr`` (zarr v3): CSR by destination plus vertex data.

Layout (all arrays chunked by rows, crc32c-checksummed, every chunk written):

===========  ===========================  ==============================================
array        dtype, shape                 meaning
===========  ===========================  ==============================================
indptr       int64 [N+1]                  row v of the CSR spans indices[indptr[v]:indptr[v+1]]
indices      int32 [E] (int64 if N>=2^31) in-neighbours u of each v (edge u -> v), sorted
feat         float32 [N, F] or float16    vertex features (float16: ``fetch --feature-dtype float16``)
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
from distgnn.data.catalog import (DEFAULT_CHUNK_BUDGET, DEFAULT_CSR_BUDGET,  # noqa: F401 (re-exported)
                                  FEATURE_DTYPES)
from distgnn.data.source import GraphSource
from distgnn.errors import DistgnnError
from distgnn.progress import is_quiet, progress
from distgnn.zarr_io import (AtomicGroup, ChecksummedWriter, combine_digests, create_array,
                             open_checked, read, rows_per_chunk, write_array)

FORMAT_VERSION = 1
MASKS = ("train_mask", "val_mask", "test_mask")
REQUIRED = ("indptr", "indices", "feat", "label", *MASKS)


def store_name(dataset: str, scale: float = 1.0, seed: int = 0, name: str | None = None,
               mean_degree: float | None = None, labelled_fraction: float | None = None,
               normalize_features: bool = False, feature_dtype: str = "float32") -> str:
    """Folder name of a store: ``dataset[-x<scale>][-d<mean degree>][-l<labelled fraction>]
    [-rownorm][-f16][-seed<N>]`` unless ``name`` is given (``-f16``: float16 features)."""
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
    if feature_dtype == "float16":
        out += "-f16"
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

    def features(self, selection: Any = slice(None)) -> np.ndarray:
        """Feature rows ``selection`` as float32 [rows, F], whatever the on-disk form
        (:data:`FEATURE_DTYPES`; float16 widens exactly)."""
        return self.read("feat", selection).astype(np.float32, copy=False)

    def csr(self) -> tuple[np.ndarray, np.ndarray]:
        """(indptr int64 [N+1], indices [E]) read fully into memory."""
        return self.read("indptr"), self.read("indices")


class _EdgeSpool:
    """Edges written to two flat files as they stream in, read back in blocks (no mmap, so the
    resident size stays one block); ids as ``dtype`` (int32 below 2^31 vertices: 8 bytes of disk
    per pair)."""

    def __init__(self, folder: Path, dtype: np.dtype = np.dtype(np.int64)):
        self.src_path = folder / "src.bin"
        self.dst_path = folder / "dst.bin"
        self.src = open(self.src_path, "wb")
        self.dst = open(self.dst_path, "wb")
        self.dtype = np.dtype(dtype)
        self.count = 0

    def append(self, src: np.ndarray, dst: np.ndarray) -> None:
        src.astype(self.dtype, copy=False).tofile(self.src)
        dst.astype(self.dtype, copy=False).tofile(self.dst)
        self.count += len(src)

    def close(self) -> None:
        self.src.close()
        self.dst.close()

    def blocks(self, block: int):
        with open(self.src_path, "rb") as fs, open(self.dst_path, "rb") as fd:
            for _ in range(0, self.count, block):
                yield np.fromfile(fs, self.dtype, block), np.fromfile(fd, self.dtype, block)


@dataclass
class SpooledCsr:
    """A CSR by destination whose offsets are known and whose edges wait in a spool on disk:
    :meth:`row_ranges` splits the rows so that each range's indices fit a budget, and
    :meth:`indices` builds one range's (sorted rows) from one pass over the spool."""

    indptr: np.ndarray      #: int64 [N+1]
    spool: _EdgeSpool
    add_reverse: bool       #: each spooled pair stands for both directions
    block: int              #: pairs read from the spool at a time
    threads: int = 0

    @property
    def num_nodes(self) -> int:
        return len(self.indptr) - 1

    @property
    def index_dtype(self) -> np.dtype:
        return np.dtype(np.int32 if self.num_nodes < 2**31 else np.int64)

    def row_ranges(self, max_edges: int) -> list[tuple[int, int]]:
        """[lo, hi) row ranges in order, each with at most ``max_edges`` edges (or one row)."""
        n, out, lo = self.num_nodes, [], 0
        while lo < n:
            hi = int(np.searchsorted(self.indptr, self.indptr[lo] + max(1, max_edges), "right")) - 1
            hi = min(n, max(hi, lo + 1))
            out.append((lo, hi))
            lo = hi
        return out or [(0, 0)]

    def indices(self, lo: int, hi: int) -> np.ndarray:
        """The sources of rows [lo, hi), each row ascending: indices[indptr[lo]:indptr[hi]]."""
        n, base = self.num_nodes, int(self.indptr[lo])
        out = np.empty(int(self.indptr[hi]) - base, dtype=self.index_dtype)
        cursor = self.indptr[lo:hi] - base
        whole = lo == 0 and hi == n
        for src, dst in self.spool.blocks(self.block):
            for rows, cols in ((dst, src), (src, dst)) if self.add_reverse else ((dst, src),):
                if not whole:
                    keep = (rows >= lo) & (rows < hi)
                    rows, cols = rows[keep] - rows.dtype.type(lo), cols[keep]
                _native.csr_scatter(rows, cols, cursor, out, n)
        del cursor
        _native.csr_sort_rows(self.indptr[lo:hi + 1] - base, out, self.threads)
        return out


def build_csr(source: GraphSource, work_dir: Path, budget: int = DEFAULT_CHUNK_BUDGET,
              threads: int = 0) -> SpooledCsr:
    """Stream ``source.edges`` into a CSR by destination whose indices are built later, range by
    range (:class:`SpooledCsr`): this pass validates ids, counts in-degrees and spools the edges
    to ``work_dir``; the result is independent of the edge order and of the ranges.
    """
    n = source.num_nodes
    counts = np.zeros(n, dtype=np.int64)
    index_dtype = np.dtype(np.int32 if n < 2**31 else np.int64)
    spool = _EdgeSpool(work_dir, index_dtype)  # ids were checked against n before they are spooled
    edge_file = source.files.get("edges", "edges")
    seen = 0
    bar = progress(desc=f"{source.name}: edges", total=source.num_pairs, unit=" edges",
                   unit_scale=True)
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
    indptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(counts, out=indptr[1:])
    return SpooledCsr(indptr, spool, source.add_reverse, max(1, budget // 16), threads)


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


def check_feature_dtype(feature_dtype: str) -> np.dtype:
    """The numpy dtype of an on-disk feature form (:data:`FEATURE_DTYPES`); one line otherwise."""
    if feature_dtype not in FEATURE_DTYPES:
        raise DistgnnError(f"--feature-dtype: expected one of {', '.join(FEATURE_DTYPES)}, "
                           f"got '{feature_dtype}'")
    return np.dtype(feature_dtype)


def _stored_features(block: np.ndarray, dtype: np.dtype, first_row: int, feat_file: str) -> np.ndarray:
    """``block`` (float32) in the on-disk form; a value float16 cannot hold is one clear line."""
    if dtype == np.float32:
        return block
    with np.errstate(over="ignore"):
        out = block.astype(dtype)
    if not np.isfinite(out).all():
        row, col = (int(i) for i in np.argwhere(~np.isfinite(out))[0])
        limit = float(np.finfo(dtype).max)
        raise DistgnnError(f"{feat_file}: feature {col} of vertex {first_row + row} is "
                           f"{block[row, col]:g}, outside {dtype}'s range (+-{limit:g}); "
                           f"fetch with --feature-dtype float32")
    return out


def write_graph_store(source: GraphSource, path: str | os.PathLike, *, overwrite: bool = False,
                      budget: int = DEFAULT_CHUNK_BUDGET, threads: int = 0,
                      feature_dtype: str = "float32", csr_budget: int = DEFAULT_CSR_BUDGET) -> Path:
    """Convert ``source`` into ``path`` (a ``graph.zarr``), streaming features in blocks of at most
    ``budget`` bytes, stored as ``feature_dtype`` (:data:`FEATURE_DTYPES`: float16 rounds to
    nearest, and refuses values beyond +-65504); at most ``csr_budget`` bytes of CSR indices are
    built at once (:class:`SpooledCsr`). Written under a temporary name and renamed when
    complete."""
    stored = check_feature_dtype(feature_dtype)
    validate_vertex_data(source)
    path = Path(path)
    with AtomicGroup(path, overwrite=overwrite) as store:
        n, f = source.num_nodes, source.feat_dim
        digests = {}
        with atomic.scratch_dir(path, "edges") as work:  # an orphan is removed by the next fetch
            csr = build_csr(source, work, budget, threads)
            indptr = csr.indptr
            num_edges = int(indptr[-1])
            digests["indptr"] = write_array(store.group, "indptr", indptr)
            writer = ChecksummedWriter(create_array(store.group, "indices", (num_edges,),
                                                   csr.index_dtype))
            ranges = csr.row_ranges(csr_budget // csr.index_dtype.itemsize)
            for lo, hi in progress(ranges, desc=f"{source.name}: CSR rows",
                                   disable=is_quiet() or len(ranges) < 2):
                writer.write(csr.indices(lo, hi))
            digests["indices"] = writer.finish()
            del indptr, csr

        # One zarr chunk is at most a quarter of the budget: encoding holds a few copies of it.
        feat_chunk_rows = max(1, min(rows_per_chunk((f,), stored),
                                     budget // 4 // max(f * stored.itemsize, 1)))
        feat_writer = ChecksummedWriter(create_array(store.group, "feat", (n, f), stored,
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
            block = _stored_features(block, stored, feat_writer.cursor, feat_file)
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
