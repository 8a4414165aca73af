"""Reddit (GraphSAGE's post graph) from DGL's published files.

``reddit.zip`` (https://data.dgl.ai/dataset/reddit.zip) holds ``reddit_data.npz`` (``feature``
float [N, 602], ``label`` int [N], ``node_types`` [N]: 1 = train, 2 = val, 3 = test) and
``reddit_graph.npz`` (a scipy sparse matrix saved with ``save_npz``: ``format``, ``shape``, and
``row``/``col`` for COO or ``indptr``/``indices`` for CSR/CSC; entry (i, j) is the edge i -> j). The
graph already lists both directions, so it is stored as given.

Two readers give the same store: DGL's ``RedditDataset`` when DGL is installed (vertex order kept
as published: its reverse Cuthill-McKee relabelling is switched off, so the store does not depend on
whether DGL is present), and our own streamed reader of the same npz files otherwise. The ``reader``
argument (``auto``, ``dgl`` or ``own``) forces one.
"""
from __future__ import annotations

from pathlib import Path
from typing import Iterator
from unittest import mock

import numpy as np

from distgnn.data import npy_stream
from distgnn.data.download import download, extract_zip, npz_errors
from distgnn.data.source import GraphSource
from distgnn.errors import DistgnnError

URL = "https://data.dgl.ai/dataset/reddit.zip"
DATA, GRAPH = "reddit_data.npz", "reddit_graph.npz"
NUM_CLASSES = 41
READERS = ("auto", "dgl", "own")
EDGE_BLOCK = 1 << 22
SOURCE_HELP = f"DIR (a folder with {DATA} and {GRAPH}, or reddit.zip)"


def _find(folder: Path) -> Path | None:
    for candidate in (folder, folder / "reddit"):
        if (candidate / DATA).is_file() or (candidate / GRAPH).is_file():
            return candidate
    return None


def locate(source: Path | None, download_dir: Path) -> tuple[Path, str]:
    """The folder holding the two npz files and a description of where they came from."""
    unpacked = download_dir / "reddit"
    if source is None:
        if _find(unpacked) is None:
            archive = download(URL, download_dir / "reddit.zip", dataset="reddit",
                               source_help=SOURCE_HELP)
            extract_zip(archive, unpacked)
            archive.unlink()
        origin = URL
        folder = _find(unpacked)
    elif source.is_file():
        if _find(unpacked) is None:
            extract_zip(source, unpacked)
        origin, folder = str(source.resolve()), _find(unpacked)
    elif source.is_dir():
        folder = _find(source)
        if folder is None and (source / "reddit.zip").is_file():
            return locate(source / "reddit.zip", download_dir)
        origin = str(source.resolve())
    else:
        raise DistgnnError(f"--source {source}: no such file or folder")
    if folder is None:
        raise DistgnnError(f"{source or unpacked}: no {DATA} / {GRAPH} (reddit expects --source "
                           f"{SOURCE_HELP})")
    for name in (DATA, GRAPH):
        if not (folder / name).is_file():
            raise DistgnnError(f"{folder / name}: file not found (reddit needs {DATA} and {GRAPH})")
    return folder, origin


def read_reddit(dataset: str, *, source: Path | None = None, download_dir: Path,
                undirected: bool = False, seed: int = 0, reader: str | None = None) -> GraphSource:
    """A :class:`GraphSource` for Reddit; ``reader`` picks DGL's loader or ours (default
    ``auto``: DGL's when importable)."""
    choice = reader or "auto"
    if choice not in READERS:
        raise DistgnnError(f"reader '{choice}': expected one of {', '.join(READERS)}")
    folder, origin = locate(source, download_dir)
    if choice == "auto":
        from distgnn.compat import import_dgl

        try:
            import_dgl()
            choice = "dgl"
        except DistgnnError:
            choice = "own"
    graph = _read_dgl(folder) if choice == "dgl" else _read_own(folder)
    graph.name, graph.source, graph.seed = dataset, origin, seed
    return graph


def _labels(values: np.ndarray, label: str) -> np.ndarray:
    values = np.asarray(values).reshape(-1)
    if not np.issubdtype(values.dtype, np.integer):
        if not np.issubdtype(values.dtype, np.floating) or (values != np.round(values)).any():
            raise DistgnnError(f"{label}: expected integer class ids, got {values.dtype}")
    return values.astype(np.int64)


def _masks(node_types: np.ndarray, n: int, label: str) -> dict[str, np.ndarray]:
    node_types = np.asarray(node_types).reshape(-1)
    if node_types.shape != (n,):
        raise DistgnnError(f"{label}: {node_types.size} entries for {n} vertices")
    return {"train_mask": node_types == 1, "val_mask": node_types == 2, "test_mask": node_types == 3}


def _source(n: int, feat_dim: int, edges, features, labels: np.ndarray,
            masks: dict[str, np.ndarray], folder: Path, reader: str) -> GraphSource:
    data, graph = folder / DATA, folder / GRAPH
    return GraphSource(
        name="reddit", num_nodes=n, num_classes=NUM_CLASSES, feat_dim=feat_dim, edges=edges,
        features=features, labels=labels, masks=masks, source=str(folder), directed=False,
        add_reverse=False,
        files={"edges": f"{graph} ({reader} reader)", "features": f"{data}[feature]",
               "labels": f"{data}[label]", **{k: f"{data}[node_types]" for k in masks}})


def _read_own(folder: Path) -> GraphSource:
    """Our reader: features and edges streamed from the npz members."""
    data, graph = folder / DATA, folder / GRAPH
    with npz_errors(str(data)):
        shape = npy_stream.shape_of(data, "feature")
        if len(shape) != 2:
            raise DistgnnError(f"{data}[feature]: shape {list(shape)}, expected [N, F]")
        n, feat_dim = shape
        labels = _labels(npy_stream.load(data, "label"), f"{data}[label]")
        masks = _masks(npy_stream.load(data, "node_types"), n, f"{data}[node_types]")
    with npz_errors(str(graph)):
        fmt = npy_stream.load(graph, "format").reshape(-1)[0]
        fmt = fmt.decode() if isinstance(fmt, bytes) else str(fmt)
        dims = tuple(int(d) for d in npy_stream.load(graph, "shape").reshape(-1))
    if dims != (n, n):
        raise DistgnnError(f"{graph}: matrix shape {list(dims)}, expected [{n}, {n}] "
                           f"({n} vertices in {DATA})")
    if fmt not in ("coo", "csr", "csc"):
        raise DistgnnError(f"{graph}: sparse format '{fmt}', expected coo, csr or csc")

    def edges() -> Iterator[tuple[np.ndarray, np.ndarray]]:
        with npz_errors(str(graph)):
            if fmt == "coo":
                rows = npy_stream.iter_rows(graph, EDGE_BLOCK, member="row")
                cols = npy_stream.iter_rows(graph, EDGE_BLOCK, member="col")
                if npy_stream.shape_of(graph, "row") != npy_stream.shape_of(graph, "col"):
                    raise DistgnnError(f"{graph}: 'row' and 'col' differ in length")
                yield from zip(rows, cols)
                return
            indptr = npy_stream.load(graph, "indptr").astype(np.int64)
            if indptr.shape != (n + 1,):
                raise DistgnnError(f"{graph}[indptr]: length {indptr.size}, expected {n + 1}")
            start = 0
            for block in npy_stream.iter_rows(graph, EDGE_BLOCK, member="indices"):
                positions = np.arange(start, start + len(block))
                outer = np.searchsorted(indptr, positions, side="right") - 1
                start += len(block)
                yield (outer, block) if fmt == "csr" else (block, outer)
            if start != indptr[-1]:
                raise DistgnnError(f"{graph}[indices]: {start} entries, indptr says {indptr[-1]}")

    def features(rows: int) -> Iterator[np.ndarray]:
        with npz_errors(f"{data}[feature]"):
            yield from npy_stream.iter_rows(data, rows, member="feature", dtype=np.float32)

    return _source(n, feat_dim, edges, features, labels, masks, folder, "own")


def _read_dgl(folder: Path) -> GraphSource:
    """DGL's ``RedditDataset`` on our files: never downloads, caches nothing, keeps vertex order."""
    from distgnn.compat import import_dgl

    import_dgl()
    from dgl.data import reddit as dgl_reddit  # only after import_dgl() set up the import

    cls = dgl_reddit.RedditDataset

    def refuse_download(self) -> None:
        raise DistgnnError(f"{folder}: DGL wanted to download Reddit; {DATA} and {GRAPH} expected")

    patches = (mock.patch.object(cls, "raw_path", property(lambda self: str(folder))),
               mock.patch.object(cls, "download", refuse_download),
               mock.patch.object(cls, "save", lambda self: None),
               mock.patch.object(dgl_reddit, "reorder_graph", lambda g, **_: g))
    for patch in patches:
        patch.start()
    try:
        dataset = cls(raw_dir=str(folder), force_reload=True, verbose=False)
        g = dataset[0]
    except DistgnnError:
        raise
    except Exception as exc:  # DGL and scipy raise many types for bad files
        raise DistgnnError(f"{folder}: DGL's Reddit loader failed ({type(exc).__name__}: {exc})") from exc
    finally:
        for patch in reversed(patches):
            patch.stop()
    src, dst = (t.numpy() for t in g.edges())
    feat = g.ndata["feat"].numpy()
    labels = _labels(g.ndata["label"].numpy(), f"{folder / DATA}[label]")
    masks = {k: g.ndata[k].numpy().astype(bool) for k in ("train_mask", "val_mask", "test_mask")}
    n = g.num_nodes()

    def edges() -> Iterator[tuple[np.ndarray, np.ndarray]]:
        for start in range(0, len(src), EDGE_BLOCK):
            yield src[start:start + EDGE_BLOCK], dst[start:start + EDGE_BLOCK]

    def features(rows: int) -> Iterator[np.ndarray]:
        for start in range(0, n, rows):
            yield feat[start:start + rows]

    return _source(n, feat.shape[1], edges, features, labels, masks, folder, "dgl")
