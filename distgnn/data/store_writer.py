"""The graph store writer: a :class:`GraphSource` converted into ``graph.zarr``
(:func:`write_graph_store`; the layout: :mod:`distgnn.data.graph_store`), its vertex data checked
first, its CSR built out of core (:mod:`distgnn.data.csr_builder`), under a temporary name renamed
when complete."""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from distgnn import atomic
from distgnn.data.catalog import DEFAULT_CHUNK_BUDGET, DEFAULT_CSR_BUDGET, FEATURE_DTYPES
from distgnn.data.csr_builder import build_csr
from distgnn.data.graph_store import FORMAT_VERSION, MASKS
from distgnn.data.source import GraphSource
from distgnn.errors import DistgnnError
from distgnn.progress import is_quiet, progress
from distgnn.zarr_io import (AtomicGroup, ChecksummedWriter, combine_digests, create_array,
                             rows_per_chunk, write_array)


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
    built at once (:class:`~distgnn.data.csr_builder.SpooledCsr`). Written under a temporary name
    and renamed when complete."""
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
