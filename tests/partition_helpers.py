"""Tiny graph stores of many shapes for the partition tests.

Built as a :class:`GraphSource` in memory and written by ``write_graph_store`` (the npy reader
would do the same, but its header parser uses a private numpy function this numpy lacks)."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from distgnn.data.store_writer import write_graph_store
from distgnn.data.source import GraphSource
from distgnn.data.splits import random_split


def random_edges(shape: str, n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """(src, dst) of a graph of ``shape``; vertices n-5..n-1 are always isolated."""
    live = n - 5
    if shape == "uniform":
        m = 6 * live
        src, dst = rng.integers(0, live, m), rng.integers(0, live, m)
    elif shape == "powerlaw":
        w = (1.0 - rng.random(live)) ** (-1 / 1.3)
        p = w / w.sum()
        m = 8 * live
        src, dst = rng.choice(live, m, p=p), rng.choice(live, m, p=p)
    elif shape == "star":  # one hub, plus self-loops and duplicate edges
        leaves = np.arange(1, live)
        src = np.concatenate([leaves, np.zeros(live - 1, int), [3, 3, 4, 4]])
        dst = np.concatenate([np.zeros(live - 1, int), leaves, [3, 3, 4, 2]])
    elif shape == "sparse":  # a few edges, most vertices isolated
        src, dst = rng.integers(0, live, 7), rng.integers(0, live, 7)
    else:
        raise ValueError(shape)
    return src.astype(np.int64), dst.astype(np.int64)


def make_store(folder: Path, shape: str, n: int = 60, feat_dim: int = 5, seed: int = 0,
               multilabel: bool = False) -> Path:
    """Write a graph store for ``shape`` under ``folder``; returns the graph.zarr path."""
    rng = np.random.default_rng(seed)
    src, dst = random_edges(shape, n, rng)
    feat = rng.standard_normal((n, feat_dim)).astype(np.float32)
    if multilabel:
        label = (rng.random((n, 3)) < 0.5).astype(np.float32)
        num_classes = 3
    else:
        label = rng.integers(0, 4, n)
        label[:2] = [0, 3]
        label[rng.random(n) < 0.1] = -1
        num_classes = 4
    masks = random_split(n, (0.6, 0.2, 0.2), seed, None if multilabel else label >= 0)
    source = GraphSource(
        name=f"t-{shape}", num_nodes=n, num_classes=num_classes, feat_dim=feat_dim,
        edges=lambda: iter([(src, dst)]),
        features=lambda rows: (feat[i:i + rows] for i in range(0, n, rows)),
        labels=label, masks=masks, source="test", multilabel=multilabel, directed=True,
        allow_unlabelled=True, seed=seed)
    return write_graph_store(source, folder / f"t-{shape}" / "graph.zarr", threads=1)
