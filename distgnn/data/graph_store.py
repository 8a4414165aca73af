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

This module reads a store (:class:`GraphStore`); :mod:`distgnn.data.store_writer` writes one, its
CSR built out of core by :mod:`distgnn.data.csr_builder`.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import zarr

from distgnn.errors import DistgnnError
from distgnn.zarr_io import open_checked, read

FORMAT_VERSION = 1
MASKS = ("train_mask", "val_mask", "test_mask")
REQUIRED = ("indptr", "indices", "feat", "label", *MASKS)


def store_name(dataset: str, scale: float = 1.0, seed: int = 0, name: str | None = None,
               mean_degree: float | None = None, labelled_fraction: float | None = None,
               normalize_features: bool = False, feature_dtype: str = "float32",
               source: str | os.PathLike | None = None) -> str:
    """Folder name of a store: ``dataset[-x<scale>][-d<mean degree>][-l<labelled fraction>]
    [-rownorm][-f16][-seed<N>]`` unless ``name`` is given (``-f16``: float16 features); for an
    ``npy`` folder, ``dataset`` is the ``source`` folder's own name."""
    if name:
        return name
    out = dataset
    if dataset == "npy" and source:
        out = Path(source).resolve().name or dataset
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
        (:data:`~distgnn.data.catalog.FEATURE_DTYPES`; float16 widens exactly)."""
        return self.read("feat", selection).astype(np.float32, copy=False)

    def csr(self) -> tuple[np.ndarray, np.ndarray]:
        """(indptr int64 [N+1], indices [E]) read fully into memory."""
        return self.read("indptr"), self.read("indices")
