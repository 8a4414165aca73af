"""Planetoid citation graphs (cora, citeseer, pubmed) from the ``ind.<name>.<ext>`` files used by
PyG and DGL.

Files: ``x``, ``tx``, ``allx`` (scipy sparse or dense features of the labelled training vertices,
the test vertices and all non-test vertices), ``y``, ``ty``, ``ally`` (matching one-hot labels),
``graph`` (dict: vertex -> list of neighbours), ``test.index`` (one vertex id per line; row i of
``tx``/``ty`` belongs to vertex ``test.index[i]``). Vertices ``0..len(allx)-1`` take ``allx``/``ally``.

Standard split: train = the first ``len(y)`` vertices (20 per class), val = the next 500, test =
``test.index``. Citeseer's test ids leave gaps (isolated vertices missing from ``tx``): like PyG we
keep them with zero features; they get label -1 and no mask. Edges are stored in both directions,
without duplicates and without self-loops (as PyG does; Cora: 10,556 directed edges).
"""
from __future__ import annotations

import importlib
import pickle
from pathlib import Path
from typing import Any

import numpy as np

from distgnn.data.download import download
from distgnn.data.source import GraphSource
from distgnn.errors import DistgnnError

URL = "https://github.com/kimiyoung/planetoid/raw/master/data/ind.{name}.{ext}"
EXTS = ("x", "y", "tx", "ty", "allx", "ally", "graph", "test.index")
NUM_VAL = 500

_NUMPY = {"_reconstruct", "scalar", "_frombuffer", "ndarray", "dtype"}
_SPARSE = {"csr_matrix", "csc_matrix", "coo_matrix", "lil_matrix", "dok_matrix", "csr_array",
           "csc_array", "coo_array", "lil_array", "dok_array"}
_BUILTINS = {"list", "dict", "set", "tuple", "int", "float", "object", "bytearray"}
_COPYREG = {"_reconstructor", "__newobj__"}
# Python 2 module names too: the files were pickled by Python 2 (the base class maps the names)
_SAFE = {"builtins": _BUILTINS, "__builtin__": _BUILTINS, "copyreg": _COPYREG,
         "copy_reg": _COPYREG, "collections": {"defaultdict", "OrderedDict"},
         "_codecs": {"encode"}}  # Python 3's protocol-2 pickles spell bytes as _codecs.encode


class _PlanetoidUnpickler(pickle.Unpickler):
    """Unpickles only what the Planetoid files hold (numpy arrays, scipy sparse matrices, dicts
    of lists), so a tampered download cannot run code."""

    def find_class(self, module: str, name: str) -> Any:
        top = module.split(".")[0]
        if top == "numpy" and name in _NUMPY:
            if name in ("ndarray", "dtype"):
                return getattr(np, name)
            core = "numpy._core" if hasattr(np, "_core") else "numpy.core"
            sub = "numeric" if name == "_frombuffer" else "multiarray"
            return getattr(importlib.import_module(f"{core}.{sub}"), name)
        if module.startswith("scipy.sparse") and name in _SPARSE:
            import scipy.sparse

            return getattr(scipy.sparse, name)
        if name in _SAFE.get(module, ()):
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"refers to {module}.{name}, which a Planetoid file never holds")


def _load_pickle(path: Path) -> Any:
    try:
        with open(path, "rb") as f:
            return _PlanetoidUnpickler(f, encoding="latin1").load()
    except FileNotFoundError as exc:
        raise DistgnnError(f"{path}: file not found") from exc
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, AttributeError,
            IndexError, KeyError, MemoryError) as exc:
        reason = "file truncated" if isinstance(exc, EOFError) else f"{type(exc).__name__}: {exc}"
        raise DistgnnError(f"{path}: not a readable Planetoid pickle ({reason})") from exc


def _dense(value: Any, path: Path, ndim: int = 2) -> np.ndarray:
    if hasattr(value, "toarray"):
        value = value.toarray()
    try:
        out = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise DistgnnError(f"{path}: expected a numeric matrix, got {type(value).__name__}") from exc
    if out.ndim != ndim:
        raise DistgnnError(f"{path}: expected a {ndim}-D matrix, got shape {list(out.shape)}")
    return out


def _class_ids(onehot: np.ndarray, path: str) -> np.ndarray:
    """One-hot rows [N, C] -> class ids int64 [N]; an all-zero row -> -1 (unlabelled)."""
    if ((onehot != 0) & (onehot != 1)).any() or (onehot.sum(axis=1) > 1).any():
        bad = int(np.flatnonzero(((onehot != 0) & (onehot != 1)).any(axis=1) |
                                 (onehot.sum(axis=1) > 1))[0])
        raise DistgnnError(f"{path}: label row of vertex {bad} is not one-hot "
                           f"({onehot.shape[1]} classes)")
    ids = onehot.argmax(axis=1).astype(np.int64)
    ids[onehot.sum(axis=1) == 0] = -1
    return ids


def _files(name: str, source: Path | None, download_dir: Path) -> tuple[dict[str, Path], str]:
    if source is None:
        paths = {}
        for ext in EXTS:
            url = URL.format(name=name, ext=ext)
            paths[ext] = download(url, download_dir / f"ind.{name}.{ext}", dataset=name,
                                  source_help=f"DIR (a folder with ind.{name}.x, .y, .tx, .ty, "
                                              f".allx, .ally, .graph, .test.index)")
        return paths, URL.format(name=name, ext="*")
    if not source.is_dir():
        raise DistgnnError(f"--source {source}: not a folder (expected ind.{name}.* files in it)")
    folder = source
    if not (folder / f"ind.{name}.x").exists() and (folder / "raw" / f"ind.{name}.x").exists():
        folder = folder / "raw"
    return {ext: folder / f"ind.{name}.{ext}" for ext in EXTS}, str(folder.resolve())


def read_planetoid(dataset: str, *, source: Path | None = None, download_dir: Path,
                   undirected: bool = False, seed: int = 0) -> GraphSource:
    """A :class:`GraphSource` for cora, citeseer or pubmed (small: held in memory)."""
    name = dataset.lower()
    paths, origin = _files(name, source, download_dir)
    for path in paths.values():
        if not path.is_file():
            raise DistgnnError(f"{path}: file not found (Planetoid needs ind.{name}."
                               f"{{{','.join(EXTS)}}})")
    x = _dense(_load_pickle(paths["x"]), paths["x"])
    y = _dense(_load_pickle(paths["y"]), paths["y"])
    tx = _dense(_load_pickle(paths["tx"]), paths["tx"])
    ty = _dense(_load_pickle(paths["ty"]), paths["ty"])
    allx = _dense(_load_pickle(paths["allx"]), paths["allx"])
    ally = _dense(_load_pickle(paths["ally"]), paths["ally"])
    graph = _load_pickle(paths["graph"])
    test_index = _read_index(paths["test.index"])

    for a, b, pa, pb in ((x, y, "x", "y"), (tx, ty, "tx", "ty"), (allx, ally, "allx", "ally")):
        if len(a) != len(b):
            raise DistgnnError(f"{paths[pb]}: {len(b)} label rows but ind.{name}.{pa} has {len(a)}")
    width, classes = allx.shape[1], ally.shape[1]
    for mat, ext, want, what in ((x, "x", width, "features"), (tx, "tx", width, "features"),
                                 (y, "y", classes, "classes"), (ty, "ty", classes, "classes")):
        if mat.shape[1] != want:
            raise DistgnnError(f"{paths[ext]}: {mat.shape[1]} {what}, but ind.{name}.all{ext[-1]} "
                               f"has {want}")
    if len(test_index) != len(tx):
        raise DistgnnError(f"{paths['test.index']}: {len(test_index)} ids for {len(tx)} rows of "
                           f"ind.{name}.tx")
    n_all = len(allx)
    if len(test_index):
        if test_index.min() < n_all:
            raise DistgnnError(f"{paths['test.index']}: test vertex {test_index.min()} falls among "
                               f"the {n_all} vertices of ind.{name}.allx")
        if len(np.unique(test_index)) != len(test_index):
            raise DistgnnError(f"{paths['test.index']}: repeated vertex ids")
    n = int(test_index.max()) + 1 if len(test_index) else n_all

    feat = np.zeros((n, width), dtype=np.float32)
    feat[:n_all] = allx
    feat[test_index] = tx
    onehot = np.zeros((n, classes), dtype=np.float64)
    onehot[:n_all] = ally
    onehot[test_index] = ty
    labels = _class_ids(onehot, f"{paths['ally']} / ind.{name}.ty")
    del x, tx, allx, onehot

    masks = {}
    for key, ids in (("train_mask", np.arange(len(y))),
                     ("val_mask", np.arange(len(y), min(len(y) + NUM_VAL, n))),
                     ("test_mask", test_index)):
        mask = np.zeros(n, dtype=bool)
        mask[ids] = True
        masks[key] = mask & (labels >= 0)
    src, dst = _symmetric_edges(graph, n, paths["graph"])

    def edges():
        yield src, dst

    def features(rows: int):
        for start in range(0, n, rows):
            yield feat[start:start + rows]

    return GraphSource(
        name=dataset, num_nodes=n, num_classes=classes, feat_dim=width, edges=edges,
        features=features, labels=labels, masks=masks, source=origin, directed=False,
        add_reverse=False, allow_unlabelled=True, seed=seed,
        files={"edges": str(paths["graph"]), "features": f"{paths['allx']} / ind.{name}.tx",
               "labels": f"{paths['ally']} / ind.{name}.ty", "train_mask": str(paths["y"]),
               "val_mask": str(paths["ally"]), "test_mask": str(paths["test.index"])})


def _read_index(path: Path) -> np.ndarray:
    try:
        text = path.read_text()
        return np.array([int(line) for line in text.split()], dtype=np.int64)
    except (OSError, ValueError, UnicodeDecodeError) as exc:
        raise DistgnnError(f"{path}: expected one vertex id per line ({exc})") from exc


def _symmetric_edges(graph: Any, n: int, path: Path) -> tuple[np.ndarray, np.ndarray]:
    """Both directions of every listed edge, each once, self-loops dropped: (src, dst) int64."""
    if not isinstance(graph, dict):
        raise DistgnnError(f"{path}: expected a dict of neighbour lists, got {type(graph).__name__}")
    try:
        src = np.fromiter((int(u) for u, vs in graph.items() for _ in vs), dtype=np.int64)
        dst = np.fromiter((int(v) for vs in graph.values() for v in vs), dtype=np.int64)
    except (TypeError, ValueError) as exc:
        raise DistgnnError(f"{path}: expected integer vertex ids ({exc})") from exc
    ends = np.concatenate([src, dst])
    if ends.size and (ends.min() < 0 or ends.max() >= n):
        bad = ends[(ends < 0) | (ends >= n)][0]
        raise DistgnnError(f"{path}: vertex id {bad} outside [0, {n}) (the feature files have {n} "
                           f"vertices)")
    both_src, both_dst = np.concatenate([src, dst]), np.concatenate([dst, src])
    keep = both_src != both_dst
    keys = np.unique(both_src[keep] * n + both_dst[keep])
    return keys // n, keys % n
