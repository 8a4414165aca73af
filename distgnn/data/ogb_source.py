"""OGB node-property datasets (ogbn-products, ogbn-proteins, ogbn-papers100M) from OGB's raw files.

The ``ogb`` package supplies metadata only (its ``nodeproppred/master.csv``: URL, archive folder,
class count, split name, csv or binary layout); reading is ours and streams:

* csv layout (products, proteins): ``raw/edge.csv.gz`` (src,dst per line), ``raw/node-feat.csv.gz``
  (F floats per line), ``raw/node-label.csv.gz`` (1 or T values per line), ``raw/num-node-list.csv.gz``,
  ``raw/num-edge-list.csv.gz``, proteins also ``raw/edge-feat.csv.gz`` (8 floats per edge);
* binary layout (papers100M): ``raw/data.npz`` (``edge_index`` [2, E], ``node_feat`` [N, F],
  ``num_nodes_list``, ``num_edges_list``) and ``raw/node-label.npz`` (``node_label`` [N, 1], NaN where
  unlabelled);
* ``split/<name>/{train,valid,test}.csv.gz``: vertex ids, one per line.

Shapes stored (docs/design.md#datasets): products and proteins list each undirected edge once, so the
reverse is added; papers100M is stored directed as given (``--undirected`` adds the reverse).
Proteins has no vertex features: ``feat`` is the mean of the 8-wide features of the vertex's stored
in-edges (with the reverse added: every edge incident to it; zeros for an isolated vertex), and
labels are float32 [N, 112] multi-label. papers100M labels are int64 with -1 where unlabelled.
"""
from __future__ import annotations

import importlib.util
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Iterator

import numpy as np
import pandas as pd

from distgnn.data import npy_stream
from distgnn.data.csv_stream import iter_csv, num_columns, read_csv
from distgnn.data.download import download, extract_zip, npz_errors
from distgnn.data.source import GraphSource
from distgnn.data.splits import index_mask
from distgnn.errors import DistgnnError

#: Edges per streamed block (two int64 ids each: 64 MiB).
EDGE_BLOCK = 1 << 22
SPLITS = (("train_mask", "train"), ("val_mask", "valid"), ("test_mask", "test"))


@dataclass(frozen=True)
class OgbMeta:
    """One column of ogb's ``nodeproppred/master.csv``."""

    name: str
    url: str
    folder: str             #: top folder inside the zip (``download_name``), e.g. "products"
    num_classes: int        #: classes of a single-label task; for multi-label: the task count
    multilabel: bool
    add_inverse_edge: bool  #: True when each undirected edge is listed once
    binary: bool            #: npz layout instead of csv.gz
    split: str              #: folder name under split/

    @property
    def marker(self) -> str:
        """The file whose presence marks an extracted dataset folder."""
        return "raw/data.npz" if self.binary else "raw/edge.csv.gz"


def ogb_meta(dataset: str) -> OgbMeta:
    """Metadata of ``dataset`` from the installed ``ogb`` package (found without importing it, so
    neither torch nor ogb's PyPI version check is loaded)."""
    spec = importlib.util.find_spec("ogb")
    if spec is None or not spec.submodule_search_locations:
        raise DistgnnError(f"{dataset}: the 'ogb' package is not installed (pip install ogb); "
                           f"it supplies the dataset metadata")
    master = Path(list(spec.submodule_search_locations)[0]) / "nodeproppred" / "master.csv"
    try:
        table = pd.read_csv(master, index_col=0, keep_default_na=False)
    except OSError as exc:
        raise DistgnnError(f"{master}: cannot read ogb's dataset table ({exc})") from exc
    if dataset not in table:
        raise DistgnnError(f"{dataset}: not in ogb's table {master} (has {', '.join(table.columns)})")
    col = table[dataset]
    tasks = int(col["num tasks"])
    return OgbMeta(
        name=dataset, url=col["url"], folder=col["download_name"],
        num_classes=tasks if tasks > 1 else int(col["num classes"]), multilabel=tasks > 1,
        add_inverse_edge=col["add_inverse_edge"] == "True", binary=col["binary"] == "True",
        split=col["split"])


def _source_help(meta: OgbMeta) -> str:
    return f"DIR (the extracted {meta.folder}/ folder with raw/ and split/, or {meta.folder}.zip)"


def locate(meta: OgbMeta, source: Path | None, download_dir: Path) -> tuple[Path, str]:
    """The extracted dataset folder (holding raw/ and split/) and a description of its origin.

    ``source`` may be that folder, a folder above it, or the zip; without ``source`` the zip is
    downloaded into ``download_dir`` and unpacked there.
    """
    unpacked = download_dir / meta.folder
    if source is None:
        if not (unpacked / meta.marker).is_file():
            archive = download(meta.url, download_dir / meta.url.rsplit("/", 1)[-1],
                               dataset=meta.name, source_help=_source_help(meta))
            _unpack(archive, unpacked, meta)
            archive.unlink()
        return unpacked, meta.url
    if source.is_file():
        if not (unpacked / meta.marker).is_file():
            _unpack(source, unpacked, meta)
        return unpacked, str(source.resolve())
    if not source.is_dir():
        raise DistgnnError(f"--source {source}: no such file or folder")
    candidates = [source, source / meta.folder, source / meta.name.replace("-", "_")]
    for folder in candidates:
        if (folder / "raw").is_dir():
            return folder, str(folder.resolve())
    archive = source / f"{meta.folder}.zip"
    if archive.is_file():
        return locate(meta, archive, download_dir)
    raise DistgnnError(f"--source {source}: no {meta.name} files (expected {meta.marker} in it or in "
                       f"{meta.folder}/, or {meta.folder}.zip)")


def _unpack(archive: Path, dest: Path, meta: OgbMeta) -> None:
    """Unzip ``archive`` and move its dataset folder to ``dest``."""
    staging = extract_zip(archive, dest.with_name(f".{dest.name}.staging"))
    try:
        inner = staging / meta.folder
        if not (inner / "raw").is_dir():
            subdirs = [p for p in staging.iterdir() if (p / "raw").is_dir()]
            if (staging / "raw").is_dir():
                inner = staging
            elif len(subdirs) == 1:
                inner = subdirs[0]
            else:
                raise DistgnnError(f"{archive}: no {meta.folder}/raw/ folder inside")
        if dest.exists():
            shutil.rmtree(dest)
        os.replace(inner, dest)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def read_ogb(dataset: str, *, source: Path | None = None, download_dir: Path,
             undirected: bool = False, seed: int = 0) -> GraphSource:
    """A streamed :class:`GraphSource` for an OGB node-property dataset (see module docstring)."""
    meta = ogb_meta(dataset)
    folder, origin = locate(meta, source, download_dir)
    reader = _BinaryLayout(folder) if meta.binary else _CsvLayout(folder, meta)
    labels, multilabel_labels = reader.labels(meta)
    n = reader.num_nodes
    if len(labels) != n:
        raise DistgnnError(f"{reader.label_file}: {len(labels)} label rows for {n} vertices "
                           f"(num-node-list)")
    masks, files = {}, {}
    for key, part in SPLITS:
        path = folder / "split" / meta.split / f"{part}.csv.gz"
        ids = read_csv(path, np.int64, width=1).ravel()
        masks[key] = index_mask(n, ids, str(path))
        files[key] = str(path)
        if not multilabel_labels and ids.size and (labels[ids] < 0).any():
            bad = ids[labels[ids] < 0][0]
            raise DistgnnError(f"{path}: vertex {bad} has no label in {reader.label_file}")
    add_reverse = meta.add_inverse_edge or undirected
    return GraphSource(
        name=dataset, num_nodes=n, num_classes=meta.num_classes, feat_dim=reader.feat_dim,
        edges=reader.edges, features=reader.features, labels=labels, masks=masks, source=origin,
        multilabel=meta.multilabel, directed=not add_reverse, add_reverse=add_reverse,
        allow_unlabelled=not meta.multilabel and bool((labels < 0).any()), seed=seed,
        num_pairs=reader.num_edges,
        files={"edges": reader.edge_file, "features": reader.feat_file,
               "labels": reader.label_file, **files})


def _count(path: Path) -> int:
    """The single count in a num-node-list / num-edge-list csv.gz."""
    values = read_csv(path, np.int64, width=1).ravel()
    if values.size != 1:
        raise DistgnnError(f"{path}: expected one count (a single graph), found {values.size}")
    return int(values[0])


def _class_ids(values: np.ndarray, label: str, offset: int = 0) -> np.ndarray:
    """Float or integer class ids [N] -> int64, NaN -> -1; refuses fractional values
    (``offset``: id of the first vertex, for the message)."""
    if np.issubdtype(values.dtype, np.integer):
        return values.astype(np.int64)
    missing = np.isnan(values)
    whole = np.where(missing, 0, values)
    if (whole != np.round(whole)).any():
        bad = int(np.flatnonzero(whole != np.round(whole))[0])
        raise DistgnnError(f"{label}: label {values[bad]} of vertex {offset + bad} is not a "
                           f"class id")
    out = whole.astype(np.int64)
    out[missing] = -1
    return out


class _CsvLayout:
    """OGB's csv.gz layout (products, proteins)."""

    def __init__(self, folder: Path, meta: OgbMeta):
        raw = folder / "raw"
        self.meta = meta
        self.num_nodes = _count(raw / "num-node-list.csv.gz")
        self.num_edges = _count(raw / "num-edge-list.csv.gz")
        self.edge_file = str(raw / "edge.csv.gz")
        self.label_file = str(raw / "node-label.csv.gz")
        if not (raw / "edge.csv.gz").is_file():
            raise DistgnnError(f"{self.edge_file}: file not found")
        node_feat, edge_feat = raw / "node-feat.csv.gz", raw / "edge-feat.csv.gz"
        self._sums: np.ndarray | None = None    # proteins: per-vertex sums of edge features
        self._degree: np.ndarray | None = None  # and the number of edges summed
        if node_feat.is_file():
            self.feat_file = str(node_feat)
            self.edge_feat_file = None
        elif edge_feat.is_file():
            # proteins: vertex features are the mean of incident edge features
            self.feat_file = f"{edge_feat} (mean over incident edges)"
            self.edge_feat_file = edge_feat
        else:
            raise DistgnnError(f"{node_feat}: file not found (nor edge-feat.csv.gz)")
        self.feat_dim = num_columns(self.edge_feat_file or node_feat)
        if self.feat_dim == 0:
            raise DistgnnError(f"{self.edge_feat_file or node_feat}: empty file")

    def labels(self, meta: OgbMeta) -> tuple[np.ndarray, bool]:
        if meta.multilabel:
            values = read_csv(self.label_file, np.float32, width=meta.num_classes)
            return values, True
        return _class_ids(read_csv(self.label_file, np.float64, width=1).ravel(), self.label_file), False

    def _edge_blocks(self) -> Iterator[np.ndarray]:
        seen = 0
        for block in iter_csv(self.edge_file, EDGE_BLOCK, np.int64, width=2):
            seen += len(block)
            yield block
        if seen != self.num_edges:
            raise DistgnnError(f"{self.edge_file}: {seen} edges, but num-edge-list.csv.gz says "
                               f"{self.num_edges} (file truncated?)")

    def edges(self) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        if self.edge_feat_file is None:
            for block in self._edge_blocks():
                yield block[:, 0], block[:, 1]
            return
        # One pass serves both the CSR and the edge-feature means.
        sums = np.zeros((self.num_nodes, self.feat_dim), dtype=np.float64)
        degree = np.zeros(self.num_nodes, dtype=np.int64)
        for block in self._accumulate(sums, degree):
            yield block[:, 0], block[:, 1]
        self._sums, self._degree = sums, degree

    def _accumulate(self, sums: np.ndarray, degree: np.ndarray) -> Iterator[np.ndarray]:
        """Stream edges with their features, adding each edge's features to both endpoints."""
        n = self.num_nodes
        feats = iter_csv(self.edge_feat_file, EDGE_BLOCK, np.float32, width=self.feat_dim)
        for block in self._edge_blocks():
            ef = next(feats, None)
            if ef is None or len(ef) != len(block):
                raise DistgnnError(f"{self.edge_feat_file}: fewer rows than {self.edge_file} has edges")
            ends = block.T.ravel()  # src ids then dst ids
            if ends.size and (ends.min() < 0 or ends.max() >= n):
                raise DistgnnError(f"{self.edge_file}: vertex id outside [0, {n})")
            yield block
            ends = ends if self.meta.add_inverse_edge else block[:, 1]
            weights = np.concatenate([ef, ef]) if self.meta.add_inverse_edge else ef
            degree += np.bincount(ends, minlength=n)
            for k in range(self.feat_dim):
                sums[:, k] += np.bincount(ends, weights=weights[:, k], minlength=n)
        if next(feats, None) is not None:
            raise DistgnnError(f"{self.edge_feat_file}: more rows than {self.edge_file} has edges")

    def features(self, rows: int) -> Iterator[np.ndarray]:
        if self.edge_feat_file is None:
            yield from iter_csv(self.feat_file, rows, np.float32, width=self.feat_dim)
            return
        if self._sums is None:
            sums = np.zeros((self.num_nodes, self.feat_dim), dtype=np.float64)
            degree = np.zeros(self.num_nodes, dtype=np.int64)
            for _ in self._accumulate(sums, degree):
                pass
            self._sums, self._degree = sums, degree
        for start in range(0, self.num_nodes, rows):
            degree = np.maximum(self._degree[start:start + rows], 1)[:, None]
            yield (self._sums[start:start + rows] / degree).astype(np.float32)


class _BinaryLayout:
    """OGB's binary layout (papers100M): raw/data.npz and raw/node-label.npz."""

    def __init__(self, folder: Path):
        raw = folder / "raw"
        self.data = raw / "data.npz"
        self.label_npz = raw / "node-label.npz"
        self.edge_file = f"{self.data}[edge_index]"
        self.feat_file = f"{self.data}[node_feat]"
        self.label_file = f"{self.label_npz}[node_label]"
        nodes = npy_stream.load(self.data, "num_nodes_list").ravel()
        edges = npy_stream.load(self.data, "num_edges_list").ravel()
        if nodes.size != 1 or edges.size != 1:
            raise DistgnnError(f"{self.data}: expected a single graph, found {nodes.size}")
        self.num_nodes, self.num_edges = int(nodes[0]), int(edges[0])
        shape = npy_stream.shape_of(self.data, "edge_index")
        if shape != (2, self.num_edges):
            raise DistgnnError(f"{self.edge_file}: shape {list(shape)}, expected [2, {self.num_edges}]")
        feat_shape = npy_stream.shape_of(self.data, "node_feat")
        if len(feat_shape) != 2 or feat_shape[0] != self.num_nodes:
            raise DistgnnError(f"{self.feat_file}: shape {list(feat_shape)}, expected "
                               f"[{self.num_nodes}, F]")
        self.feat_dim = feat_shape[1]

    def labels(self, meta: OgbMeta) -> tuple[np.ndarray, bool]:
        if meta.multilabel:
            return npy_stream.load(self.label_npz, "node_label").astype(np.float32), True
        shape = npy_stream.shape_of(self.label_npz, "node_label")
        if shape not in ((self.num_nodes,), (self.num_nodes, 1)):
            raise DistgnnError(f"{self.label_file}: shape {list(shape)}, expected [{self.num_nodes}, 1]")
        out = np.empty(self.num_nodes, dtype=np.int64)
        start = 0
        with npz_errors(self.label_file):
            for block in npy_stream.iter_rows(self.label_npz, 1 << 22, member="node_label"):
                block = block.reshape(-1)
                out[start:start + len(block)] = _class_ids(block, self.label_file, start)
                start += len(block)
        return out, False

    def edges(self) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        with npz_errors(self.edge_file):
            yield from self._edges()

    def _edges(self) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        e = self.num_edges
        with npy_stream.open_npy(self.data, "edge_index") as (stream, header, label):
            size = header.dtype.itemsize
            if header.fortran_order:
                # column-major [2, E]: (src, dst) pairs interleaved
                for start in range(0, e, EDGE_BLOCK):
                    count = min(EDGE_BLOCK, e - start)
                    pairs = _read(stream, 2 * count, header.dtype, label).reshape(count, 2)
                    yield pairs[:, 0], pairs[:, 1]
                return
            # row-major [2, E]: all sources, then all destinations: read both rows side by side
            with npy_stream.open_npy(self.data, "edge_index") as (dst_stream, _, _):
                dst_stream.seek(e * size, os.SEEK_CUR)
                for start in range(0, e, EDGE_BLOCK):
                    count = min(EDGE_BLOCK, e - start)
                    yield (_read(stream, count, header.dtype, label),
                           _read(dst_stream, count, header.dtype, label))

    def features(self, rows: int) -> Iterator[np.ndarray]:
        with npz_errors(self.feat_file):
            yield from npy_stream.iter_rows(self.data, rows, member="node_feat", dtype=np.float32)


def _read(stream: BinaryIO, count: int, dtype: np.dtype, label: str) -> np.ndarray:
    raw = stream.read(count * dtype.itemsize)
    if len(raw) != count * dtype.itemsize:
        raise DistgnnError(f"{label}: file truncated")
    return np.frombuffer(raw, dtype=dtype)
