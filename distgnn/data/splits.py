"""Train/val/test masks for sources that ship none."""
from __future__ import annotations

import numpy as np


def random_split(num_nodes: int, fractions: tuple[float, float, float], seed: int,
                 eligible: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """Seeded random split of the ``eligible`` vertices (all by default) by ``fractions``
    (train, val, test); returns bool masks [N]."""
    rng = np.random.default_rng(np.random.SeedSequence([seed, 0x5B117]))
    candidates = np.arange(num_nodes) if eligible is None else np.flatnonzero(eligible)
    order = rng.permutation(candidates)
    bounds = np.round(np.cumsum(fractions) * len(order)).astype(np.int64)
    masks = {}
    start = 0
    for name, end in zip(("train_mask", "val_mask", "test_mask"), bounds):
        mask = np.zeros(num_nodes, dtype=bool)
        mask[order[start:end]] = True
        masks[name] = mask
        start = end
    return masks


def index_mask(num_nodes: int, ids: np.ndarray, label: str) -> np.ndarray:
    """A bool mask [N] that is true at ``ids``; raises for ids outside [0, N)."""
    from distgnn.errors import DistgnnError

    ids = np.asarray(ids, dtype=np.int64).ravel()
    if ids.size and (ids.min() < 0 or ids.max() >= num_nodes):
        raise DistgnnError(f"{label}: vertex id outside [0, {num_nodes})")
    mask = np.zeros(num_nodes, dtype=bool)
    mask[ids] = True
    return mask
