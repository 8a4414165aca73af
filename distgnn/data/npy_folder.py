"""Any graph as a folder of .npy files.

Files: ``src.npy`` and ``dst.npy`` (integer [E], edge src -> dst), ``feat.npy`` (float [N, F]),
``label.npy`` (int [N], -1 = unlabelled; or 0/1 [N, C] for multi-label) and optionally
``train_mask.npy``, ``val_mask.npy``, ``test_mask.npy`` (bool [N]). Without masks, the labelled
vertices are split 60/20/20 at random (seeded by ``--seed``). ``--undirected`` stores both
directions of every edge.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from distgnn.data import npy_stream
from distgnn.data.arrays import EDGE_BLOCK, MASKS, labels_and_masks
from distgnn.data.source import GraphSource
from distgnn.errors import DistgnnError


def read_npy_folder(folder: str | Path, *, undirected: bool = False, seed: int = 0,
                    name: str = "npy") -> GraphSource:
    folder = Path(folder)
    if not folder.is_dir():
        raise DistgnnError(f"{folder}: not a folder (npy expects --source DIR with src.npy, dst.npy, "
                           f"feat.npy, label.npy)")
    files = {k: folder / f"{k}.npy" for k in ("src", "dst", "feat", "label")}
    for path in files.values():
        if not path.exists():
            raise DistgnnError(f"{path}: file not found (npy expects src.npy, dst.npy, feat.npy, label.npy)")
    feat_shape = npy_stream.shape_of(files["feat"])
    if len(feat_shape) != 2:
        raise DistgnnError(f"{files['feat']}: expected shape [N, F], got {list(feat_shape)}")
    num_nodes, feat_dim = feat_shape
    src_shape, dst_shape = npy_stream.shape_of(files["src"]), npy_stream.shape_of(files["dst"])
    if src_shape != dst_shape or len(src_shape) != 1:
        raise DistgnnError(f"{files['dst']}: shape {list(dst_shape)} does not match src.npy's "
                           f"{list(src_shape)} (expected two 1-D arrays of equal length)")

    mask_files = {k: folder / f"{k}.npy" for k in MASKS}
    present = [p.exists() for p in mask_files.values()]
    if any(present) and not all(present):
        lacking = next(p for p, there in zip(mask_files.values(), present) if not there)
        raise DistgnnError(f"{lacking}: file not found (masks: give train_mask.npy, val_mask.npy "
                           f"and test_mask.npy, or none)")
    given = {k: npy_stream.load(p) for k, p in mask_files.items() if p.exists()}
    labels, multilabel, num_classes, masks = labels_and_masks(
        npy_stream.load(files["label"]), given or None, num_nodes, seed, str(files["label"]))

    def edges():
        for src, dst in zip(npy_stream.iter_rows(files["src"], EDGE_BLOCK),
                            npy_stream.iter_rows(files["dst"], EDGE_BLOCK)):
            yield src, dst

    def features(rows: int):
        yield from npy_stream.iter_rows(files["feat"], rows, dtype=np.float32)

    return GraphSource(
        name=name, num_nodes=num_nodes, num_classes=num_classes, feat_dim=feat_dim,
        edges=edges, features=features, labels=labels, masks=masks, source=str(folder.resolve()),
        multilabel=multilabel, directed=not undirected, add_reverse=undirected,
        allow_unlabelled=True, seed=seed, num_pairs=int(src_shape[0]),
        files={"edges": f"{files['src']} / dst.npy", "features": str(files["feat"]),
               "labels": str(files["label"]), **{k: str(v) for k, v in mask_files.items()}},
    )
