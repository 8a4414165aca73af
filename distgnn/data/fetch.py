"""``distgnn fetch``: acquire a dataset (download, local files or a synthetic twin) and convert it
into ``<root>/<store>/graph.zarr``."""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Callable, Iterator

import numpy as np

from distgnn.data.catalog import (DATASETS, DEFAULT_CHUNK_BUDGET, DEFAULT_CSR_BUDGET, OGB_DATASETS,
                                  PLANETOID_DATASETS)
from distgnn.data.graph_store import store_name
from distgnn.data.source import GraphSource, RowChunks
from distgnn.data.store_writer import check_feature_dtype, write_graph_store
from distgnn.data.synthetic import TWINS, make_twin, twin_size
from distgnn.errors import DistgnnError
from distgnn.preflight import check, fetch_needs
from distgnn.progress import is_quiet


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
               labelled_fraction: float | None = None, normalize_features: bool = False,
               feature_dtype: str = "float32", source: str | Path | None = None) -> Path:
    """Where ``fetch`` writes: ``<root>/<store>/graph.zarr``."""
    return Path(root) / store_name(dataset, scale, seed, name, mean_degree, labelled_fraction,
                                   normalize_features, feature_dtype, source) / "graph.zarr"


def check_existing_store(target: Path, dataset: str, source: str | Path | None = None,
                         scale: float = 1.0, seed: int = 0) -> None:
    """Refuse, in one line, to keep an existing store at ``target`` that holds another graph than
    the one asked for (another dataset, another npy folder, another scale or seed: a ``--name``
    given twice, or two npy folders of one name), so that the first graph is never silently
    trained again; a store of unknown attributes (damaged) is left to ``verify``."""
    import zarr

    try:
        attrs = dict(zarr.open_group(str(target), mode="r").attrs)
    except Exception:  # noqa: BLE001 - not readable as a store: verify and the readers say why
        return
    held = {"dataset": attrs.get("name"), "scale": attrs.get("scale"), "seed": attrs.get("seed")}
    asked = {"dataset": dataset, "scale": scale, "seed": seed}
    if dataset == "npy" and source is not None:
        held["source"], asked["source"] = attrs.get("source"), str(Path(source).resolve())
    differ = [k for k in asked if held[k] is not None and held[k] != asked[k]]
    if differ:
        what = ", ".join(f"{k} {held[k]}" for k in differ)
        raise DistgnnError(f"{target} exists and holds another graph ({what}; asked for "
                           f"{', '.join(f'{k} {asked[k]}' for k in differ)}): give --name for a "
                           f"store of its own, or --force to replace it")


def row_normalized(features: RowChunks) -> RowChunks:
    """The feature blocks with each row divided by its sum (rows summing to 0 kept): the
    preprocessing of the GCN and GAT papers' citation graphs (their bag-of-words rows sum to 1)."""
    def blocks(budget: int) -> Iterator[np.ndarray]:
        for block in features(budget):
            total = block.sum(axis=1, keepdims=True, dtype=np.float64)
            total[total == 0] = 1.0
            yield (block / total).astype(np.float32)
    return blocks


def _check_fits(dataset: str, target: Path, num_nodes: int, pairs: int, add_reverse: bool,
                feat_dim: int, feature_dtype: str, budget: int, csr_budget: int) -> None:
    """The conversion's preflight (:func:`distgnn.preflight.fetch_needs`): one line and exit 2
    when it would not fit, else its summary on stderr."""
    line = check(fetch_needs(f"fetch {dataset}", target.parent, num_nodes, pairs, add_reverse,
                             feat_dim, np.dtype(feature_dtype).itemsize, budget, csr_budget))
    if not is_quiet():
        print(line, file=sys.stderr)


def fetch(dataset: str, *, root: str | Path = "data", source: str | Path | None = None,
          name: str | None = None, scale: float = 1.0, seed: int = 0, undirected: bool = False,
          force: bool = False, budget: int = DEFAULT_CHUNK_BUDGET, threads: int = 0,
          mean_degree: float | None = None, labelled_fraction: float | None = None,
          normalize_features: bool = False, feature_dtype: str = "float32",
          csr_budget: int = DEFAULT_CSR_BUDGET, preflight: bool = True) -> Path:
    """Write ``<root>/<store>/graph.zarr`` and return its path; an existing complete store of the
    same graph is kept unless ``force`` (one of another graph is refused:
    :func:`check_existing_store`). ``normalize_features``: store each feature row divided by its sum
    (:func:`row_normalized`); ``feature_dtype``: the features' on-disk form
    (:data:`distgnn.data.catalog.FEATURE_DTYPES`); ``csr_budget``: bytes of CSR indices built
    at once (:class:`distgnn.data.csr_builder.SpooledCsr`); ``preflight``: refuse, before any work,
    a conversion whose memory or disk would not fit (:mod:`distgnn.preflight`; sources that know
    their edge count beforehand: twins and npy folders)."""
    check_feature_dtype(feature_dtype)
    target = store_path(root, dataset, scale, seed, name, mean_degree, labelled_fraction,
                        normalize_features, feature_dtype, source)
    if target.exists() and not force:
        check_existing_store(target, dataset, source, scale, seed)
        return target
    if preflight and dataset in TWINS:  # before the twin's per-vertex model is drawn
        spec = TWINS[dataset]
        n, m = twin_size(spec, scale, mean_degree)
        _check_fits(dataset, target, n, m if spec.directed else m // 2, not spec.directed or undirected,
                    spec.feat_dim, feature_dtype, budget, csr_budget)
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
    if preflight and dataset not in TWINS and graph.num_pairs is not None:
        _check_fits(dataset, target, graph.num_nodes, graph.num_pairs, graph.add_reverse,
                    graph.feat_dim, feature_dtype, budget, csr_budget)
    return write_graph_store(graph, target, overwrite=force, budget=budget, threads=threads,
                             feature_dtype=feature_dtype, csr_budget=csr_budget)
