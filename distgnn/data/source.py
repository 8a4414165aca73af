"""What every dataset reader hands to the store writer: a streamed description of one graph."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Iterator

import numpy as np

EdgeChunks = Callable[[], Iterator[tuple[np.ndarray, np.ndarray]]]
"""Called once; yields (src, dst) blocks of equal length, integer ids in [0, num_nodes)."""

RowChunks = Callable[[int], Iterator[np.ndarray]]
"""Called with a row budget; yields consecutive row blocks of at most that many rows, in order."""


@dataclass
class GraphSource:
    """A graph as a reader delivers it, streamed so that features never sit in memory at once.

    Edges are directed u -> v; ``add_reverse`` asks the writer to store v -> u as well (sources
    that list each undirected edge once). Labels are int64 [N] (-1 = unlabelled, only where
    ``allow_unlabelled``) or, for multi-label, float32 [N, num_classes] of 0/1.
    """

    name: str                    #: dataset name (e.g. "ogbn-products", "synth-reddit")
    num_nodes: int
    num_classes: int
    feat_dim: int
    edges: EdgeChunks
    features: RowChunks          #: float32 blocks of [rows, feat_dim]
    labels: np.ndarray
    masks: dict[str, np.ndarray]  #: train_mask / val_mask / test_mask, bool [N]
    source: str                  #: where the data came from (URL, folder or "synthetic")
    multilabel: bool = False
    directed: bool = False       #: True when the stored graph is directed as given
    add_reverse: bool = False
    allow_unlabelled: bool = False
    scale: float = 1.0
    seed: int = 0
    mean_degree: float | None = None  #: twins: the requested mean in-degree (None: scaled)
    labelled_fraction: float | None = None  #: twins: requested fraction of vertices in the split (None: real)
    normalize_features: bool = False  #: each feature row divided by its sum (fetch --normalize-features)
    files: dict[str, str] = field(default_factory=dict)  #: logical part -> file, for error messages
    num_pairs: int | None = None  #: edge pairs ``edges()`` yields, when known beforehand (progress, pre-checks)
