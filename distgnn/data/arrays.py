"""A graph held in memory as a graph store: numpy arrays, a scipy sparse matrix, a DGLGraph or a
PyTorch Geometric ``Data`` (docs/design.md#own-graphs).

Every entry point takes the same parts and writes ``<root>/<name>/graph.zarr`` through the same
writer as ``distgnn fetch`` (so the store is the one the npy folder of the same arrays gives):

- edges: ``src -> dst`` as two integer arrays [E] (scipy: the nonzero (i, j) of an [N, N] matrix is
  an edge i -> j, as ``dgl.from_scipy`` reads it; DGL: ``g.edges()``; PyG: ``edge_index[0] ->
  edge_index[1]``, its ``source_to_target`` flow); ``undirected=True`` stores both directions;
- features: float [N, F];
- labels: integer class ids [N] (-1 = unlabelled) or 0/1 [N, C] for multi-label;
- masks: ``train_mask``, ``val_mask``, ``test_mask`` bool [N], all three or none (none: the
  labelled vertices split 60/20/20 at random, seeded by ``seed``).

An existing store at the target is refused unless ``force`` (it may hold another graph).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

import numpy as np

from distgnn.data.source import GraphSource
from distgnn.data.splits import random_split
from distgnn.data.store_writer import write_graph_store
from distgnn.errors import DistgnnError
from distgnn.owned_folder import check_owned_folder

MASKS = ("train_mask", "val_mask", "test_mask")
#: edges handed to the writer at once
EDGE_BLOCK = 1 << 22


def labels_and_masks(labels: np.ndarray, masks: Mapping[str, np.ndarray] | None, num_nodes: int,
                     seed: int, where: str) -> tuple[np.ndarray, bool, int, dict[str, np.ndarray]]:
    """(labels as stored: int64 [N] or float32 [N, C], multi-label?, classes, bool masks): the
    checks and defaults every source of a user's own graph shares. ``where`` names the labels in
    an error (a file, an argument)."""
    labels = np.asarray(labels)
    multilabel = labels.ndim == 2
    if multilabel:
        num_classes = labels.shape[1]
        labels = labels.astype(np.float32)
    else:
        if not np.issubdtype(labels.dtype, np.integer):
            raise DistgnnError(f"{where}: expected integer class ids, got {labels.dtype}")
        labels = labels.astype(np.int64)
        num_classes = int(labels.max()) + 1 if labels.size else 0
    if masks:
        missing = [k for k in MASKS if k not in masks]
        if missing:
            raise DistgnnError(f"masks: give all of {', '.join(MASKS)} or none (missing "
                               f"{', '.join(missing)})")
        masks = {k: np.asarray(masks[k]).astype(bool) for k in MASKS}
    else:
        masks = random_split(num_nodes, (0.6, 0.2, 0.2), seed, None if multilabel else labels >= 0)
    return labels, multilabel, num_classes, masks


def arrays_source(src: Any, dst: Any, feat: Any, label: Any,
                  masks: Mapping[str, Any] | None = None, *, undirected: bool = False,
                  seed: int = 0, name: str = "arrays", source: str = "arrays in memory") -> GraphSource:
    """A :class:`GraphSource` over in-memory arrays (module docstring); ``name`` and ``source``
    are what the store records as its dataset and origin."""
    src, dst = (np.asarray(a) for a in (src, dst))
    feat = np.asarray(feat)
    if src.ndim != 1 or src.shape != dst.shape:
        raise DistgnnError(f"edges: src and dst must be two 1-D arrays of equal length, got shapes "
                           f"{list(src.shape)} and {list(dst.shape)}")
    if not (np.issubdtype(src.dtype, np.integer) and np.issubdtype(dst.dtype, np.integer)):
        raise DistgnnError(f"edges: expected integer vertex ids, got {src.dtype} and {dst.dtype}")
    if feat.ndim != 2:
        raise DistgnnError(f"features: expected shape [N, F], got {list(feat.shape)}")
    num_nodes, feat_dim = feat.shape
    labels, multilabel, num_classes, masks = labels_and_masks(label, masks, num_nodes, seed, "labels")

    def edges():
        for start in range(0, len(src), EDGE_BLOCK):
            yield src[start:start + EDGE_BLOCK], dst[start:start + EDGE_BLOCK]

    def features(rows: int):
        for start in range(0, num_nodes, rows):
            yield np.ascontiguousarray(feat[start:start + rows], dtype=np.float32)

    return GraphSource(
        name=name, num_nodes=num_nodes, num_classes=num_classes, feat_dim=feat_dim, edges=edges,
        features=features, labels=labels, masks=masks, source=source, multilabel=multilabel,
        directed=not undirected, add_reverse=undirected, allow_unlabelled=True, seed=seed,
        num_pairs=int(len(src)), files={"edges": "src/dst", "features": "features", "labels": "labels"})


def _write(graph: GraphSource, root: str | Path, name: str, force: bool) -> Path:
    # <root>/<name> holding a run, a partition or other files is never written into
    check_owned_folder(Path(root) / name, "a dataset folder", option="name")
    target = Path(root) / name / "graph.zarr"
    if target.exists() and not force:
        raise DistgnnError(f"{target} exists (it may hold another graph): give another name, or "
                           f"force=True to replace it")
    return write_graph_store(graph, target, overwrite=force)


def write_arrays(root: str | Path, name: str, src: Any, dst: Any, feat: Any, label: Any,
                 masks: Mapping[str, Any] | None = None, *, undirected: bool = False,
                 seed: int = 0, force: bool = False) -> Path:
    """Write the graph of ``src -> dst`` edges, features, labels (and masks) as
    ``<root>/<name>/graph.zarr``; returns that path."""
    return _write(arrays_source(src, dst, feat, label, masks, undirected=undirected, seed=seed,
                                name="arrays", source=f"numpy arrays ({name})"), root, name, force)


def write_scipy(root: str | Path, name: str, adjacency: Any, feat: Any, label: Any,
                masks: Mapping[str, Any] | None = None, *, undirected: bool = False,
                seed: int = 0, force: bool = False) -> Path:
    """The same from a scipy sparse [N, N] matrix whose nonzero (i, j) is an edge i -> j."""
    coo = adjacency.tocoo()
    if coo.shape[0] != coo.shape[1]:
        raise DistgnnError(f"adjacency: expected a square [N, N] matrix, got {list(coo.shape)}")
    return _write(arrays_source(coo.row, coo.col, feat, label, masks, undirected=undirected,
                                seed=seed, name="scipy", source=f"scipy sparse matrix ({name})"),
                  root, name, force)


def _numpy(value: Any) -> np.ndarray:
    """A torch tensor (DGL's, PyG's) or array as numpy."""
    return value.detach().cpu().numpy() if hasattr(value, "detach") else np.asarray(value)


def write_dgl(root: str | Path, name: str, graph: Any, *, feat: str = "feat", label: str = "label",
              undirected: bool = False, seed: int = 0, force: bool = False) -> Path:
    """The same from a DGLGraph: its edges, ``ndata[feat]``, ``ndata[label]`` and, where present,
    ``ndata["train_mask"]`` etc."""
    src, dst = graph.edges()
    data = graph.ndata
    masks = {k: _numpy(data[k]) for k in MASKS if k in data} or None
    return _write(arrays_source(_numpy(src), _numpy(dst), _numpy(data[feat]), _numpy(data[label]),
                                masks, undirected=undirected, seed=seed, name="dgl",
                                source=f"DGLGraph ({name})"), root, name, force)


def write_pyg(root: str | Path, name: str, data: Any, *, undirected: bool = False, seed: int = 0,
              force: bool = False) -> Path:
    """The same from a PyTorch Geometric ``Data``: ``edge_index``, ``x``, ``y`` and, where present,
    ``train_mask`` etc."""
    edge_index = _numpy(data.edge_index)
    masks = {k: _numpy(getattr(data, k)) for k in MASKS if getattr(data, k, None) is not None} or None
    return _write(arrays_source(edge_index[0], edge_index[1], _numpy(data.x), _numpy(data.y), masks,
                                undirected=undirected, seed=seed, name="pyg",
                                source=f"PyG Data ({name})"), root, name, force)
