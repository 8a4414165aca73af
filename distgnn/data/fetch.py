"""``distgnn fetch``: acquire a dataset (download, local files or a synthetic twin) and convert it
into ``<root>/<store>/graph.zarr``."""
from __future__ import annotations

from pathlib import Path
from typing import Callable, Iterator

import numpy as np

from distgnn.data.catalog import DATASETS, OGB_DATASETS, PLANETOID_DATASETS
from distgnn.data.graph_store import DEFAULT_CHUNK_BUDGET, store_name, write_graph_store
from distgnn.data.source import GraphSource, RowChunks
from distgnn.data.synthetic import TWINS, make_twin
from distgnn.errors import DistgnnError


def _reader(dataset: str) -> Callable[..., GraphSource]:
    """The function that turns ``dataset`` into a GraphSource (readers imported lazily)."""
    if dataset in OGB_DATASETS:
        from distgnn.data.ogb_source import read_ogb
        return read_ogb
    if dataset == "reddit":
        from distgnn.data.reddit import read_reddit
        return read_reddit
    if dataset in PLANETOID_DATASETS:
        from distgnn.data.planetoid import read_planetoid
        return read_planetoid
    raise AssertionError(dataset)


def open_source(dataset: str, *, source: str | Path | None = None, download_dir: Path,
                scale: float = 1.0, seed: int = 0, undirected: bool = False,
                mean_degree: float | None = None, labelled_fraction: float | None = None) -> GraphSource:
    """Resolve ``dataset`` into a streamed :class:`GraphSource`."""
    if dataset not in DATASETS:
        raise DistgnnError(f"unknown dataset '{dataset}' (choose from {', '.join(DATASETS)})")
    if dataset in TWINS:
        if source is not None:
            raise DistgnnError(f"--source does not apply to the synthetic twin {dataset}")
        return make_twin(dataset, scale=scale, seed=seed, mean_degree=mean_degree,
                         labelled_fraction=labelled_fraction)
    if scale != 1.0:
        raise DistgnnError(f"--scale applies to synthetic twins only, not to {dataset}")
    if mean_degree is not None:
        raise DistgnnError(f"--mean-degree applies to synthetic twins only, not to {dataset}")
    if labelled_fraction is not None:
        raise DistgnnError(f"--labelled-fraction applies to synthetic twins only, not to {dataset}")
    if dataset == "npy":
        if source is None:
            raise DistgnnError("npy needs --source DIR (a folder with src.npy, dst.npy, feat.npy, label.npy)")
        from distgnn.data.npy_folder import read_npy_folder
        return read_npy_folder(source, undirected=undirected, seed=seed)
    return _reader(dataset)(dataset, source=Path(source) if source else None,
                            download_dir=download_dir, undirected=undirected, seed=seed)


def store_path(root: str | Path, dataset: str, scale: float = 1.0, seed: int = 0,
               name: str | None = None, mean_degree: float | None = None,
               labelled_fraction: float | None = None, normalize_features: bool = False) -> Path:
    """Where ``fetch`` writes: ``<root>/<store>/graph.zarr``."""
    return Path(root) / store_name(dataset, scale, seed, name, mean_degree, labelled_fraction,
                                   normalize_features) / "graph.zarr"


def row_normalized(features: RowChunks) -> RowChunks:
    """The feature blocks with each row divided by its sum (rows summing to 0 kept): the
    preprocessing of the GCN and GAT papers' citation graphs (their bag-of-words rows sum to 1)."""
    def blocks(budget: int) -> Iterator[np.ndarray]:
        for block in features(budget):
            total = block.sum(axis=1, keepdims=True, dtype=np.float64)
            total[total == 0] = 1.0
            yield (block / total).astype(np.float32)
    return blocks


def fetch(dataset: str, *, root: str | Path = "data", source: str | Path | None = None,
          name: str | None = None, scale: float = 1.0, seed: int = 0, undirected: bool = False,
          force: bool = False, budget: int = DEFAULT_CHUNK_BUDGET, threads: int = 0,
          mean_degree: float | None = None, labelled_fraction: float | None = None,
          normalize_features: bool = False) -> Path:
    """Write ``<root>/<store>/graph.zarr`` and return its path; an existing complete store is kept
    unless ``force``. ``normalize_features``: store each feature row divided by its sum
    (:func:`row_normalized`)."""
    target = store_path(root, dataset, scale, seed, name, mean_degree, labelled_fraction,
                        normalize_features)
    if target.exists() and not force:
        return target
    graph = open_source(dataset, source=source, download_dir=target.parent / "raw",
                        scale=scale, seed=seed, undirected=undirected, mean_degree=mean_degree,
                        labelled_fraction=labelled_fraction)
    # sources already stored in both directions (directed=False) must not get a second copy
    if undirected and dataset not in ("npy",) and graph.directed:
        graph.add_reverse = True
        graph.directed = False
    if normalize_features:
        graph.features = row_normalized(graph.features)
        graph.normalize_features = True
    return write_graph_store(graph, target, overwrite=force, budget=budget, threads=threads)
