"""Synthetic twins: sizes, determinism, degree cap, and that the graph carries signal."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from distgnn.data.fetch import fetch
from distgnn.data.graph_store import GraphStore
from distgnn.data.synthetic import MAX_DEGREE_FRACTION, TWINS, twin_size
from distgnn.errors import DistgnnError


@pytest.mark.parametrize("dataset,scale", [("synth-reddit", 0.01), ("synth-products", 0.001),
                                           ("synth-proteins", 0.01), ("synth-papers100M", 1e-4)])
def test_twin_matches_its_target(tmp_path: Path, dataset: str, scale: float) -> None:
    spec = TWINS[dataset]
    store = GraphStore.open(fetch(dataset, root=tmp_path, scale=scale, threads=1))
    attrs = store.attrs
    n = int(round(spec.num_nodes * scale))
    target_edges = min(spec.num_edges * scale, n * n / MAX_DEGREE_FRACTION)
    assert attrs["num_nodes"] == n
    assert abs(attrs["num_edges"] - target_edges) <= 0.02 * target_edges
    assert attrs["num_edges"] / n <= n / MAX_DEGREE_FRACTION  # mean degree capped
    assert store["feat"].shape == (n, spec.feat_dim)
    assert attrs["num_classes"] == spec.num_classes
    assert attrs["multilabel"] == spec.multilabel and attrs["directed"] == spec.directed
    labels = store.read("label")
    indptr, indices = store.csr()
    if spec.multilabel:
        assert labels.shape == (n, spec.num_classes) and labels.dtype == np.float32
        assert set(np.unique(labels)) <= {0.0, 1.0}
    else:
        assert labels.max() < spec.num_classes
    if not spec.directed:
        # both directions stored: in-degree equals out-degree for every vertex
        np.testing.assert_array_equal(np.diff(indptr), np.bincount(indices, minlength=n))
    if dataset == "synth-papers100M":
        labelled = labels >= 0
        expected = sum(spec.split) / spec.num_nodes
        assert abs(labelled.mean() - expected) < 0.01
        masks = store.read("train_mask") | store.read("val_mask") | store.read("test_mask")
        np.testing.assert_array_equal(masks, labelled)
    degrees = np.diff(indptr)
    assert degrees.max() > 5 * degrees.mean()  # heavy-tailed


def test_mean_degree_cap_rule() -> None:
    spec = TWINS["synth-reddit"]
    n, m = twin_size(spec, 0.01)
    assert m == (n * n) // MAX_DEGREE_FRACTION - ((n * n) // MAX_DEGREE_FRACTION) % 2
    n, m = twin_size(spec, 1.0)
    assert (n, m) == (spec.num_nodes, spec.num_edges)


def test_mean_degree_option(tmp_path: Path) -> None:
    """--mean-degree D gives about D x N edges at any scale (store name and attrs say so), respects
    the N/50 cap, and is refused for real datasets, each with one clear line."""
    from conftest import run_cli

    spec = TWINS["synth-reddit"]
    n, m = twin_size(spec, 0.01, mean_degree=8)
    assert n == round(spec.num_nodes * 0.01) and m == round(8 * n) - round(8 * n) % 2
    with pytest.raises(DistgnnError, match="--mean-degree"):
        twin_size(spec, 0.01, mean_degree=n / MAX_DEGREE_FRACTION + 1)
    proc = run_cli("fetch", "synth-products", "--scale", "0.002", "--mean-degree", "6",
                   "--root", tmp_path, "--threads", "1", "--quiet")
    assert proc.returncode == 0, proc.stderr
    store = GraphStore.open(tmp_path / "synth-products-x0.002-d6" / "graph.zarr")
    assert store.attrs["mean_degree"] == 6
    assert abs(store.attrs["num_edges"] / store.attrs["num_nodes"] - 6) < 0.1
    proc = run_cli("fetch", "cora", "--mean-degree", "6", "--root", tmp_path, "--source", tmp_path)
    assert proc.returncode != 0 and "--mean-degree applies to synthetic twins only" in proc.stderr


@pytest.mark.slow
def test_labelled_fraction_option(tmp_path: Path) -> None:
    """--labelled-fraction F puts about F N vertices in train/val/test in the real proportions, labels
    exactly those (papers100M), names the store -l<F>, leaves the graph and features unchanged, and is
    refused out of (0, 1] and for real datasets."""
    from conftest import run_cli

    spec = TWINS["synth-papers100M"]
    plain = GraphStore.open(fetch("synth-papers100M", root=tmp_path, scale=2e-4, threads=1))
    proc = run_cli("fetch", "synth-papers100M", "--scale", "0.0002", "--labelled-fraction", "0.5",
                   "--root", tmp_path, "--threads", "1", "--quiet")
    assert proc.returncode == 0, proc.stderr
    store = GraphStore.open(tmp_path / "synth-papers100M-x0.0002-l0.5" / "graph.zarr")
    n = store.attrs["num_nodes"]
    assert store.attrs["labelled_fraction"] == 0.5 and plain.attrs["labelled_fraction"] is None
    masks = {k: store.read(f"{k}_mask") for k in ("train", "val", "test")}
    assert sum(int((masks["train"] & masks[k]).sum()) for k in ("val", "test")) == 0
    for k, real in zip(masks, spec.split):
        assert abs(masks[k].sum() - 0.5 * n * real / sum(spec.split)) <= 1, k
    labelled = store.read("label") >= 0
    np.testing.assert_array_equal(labelled, masks["train"] | masks["val"] | masks["test"])
    for key in ("feat", "indptr", "indices"):
        np.testing.assert_array_equal(store.read(key), plain.read(key))
    # every vertex labelled: the split covers the graph
    full = GraphStore.open(fetch("synth-papers100M", root=tmp_path, scale=2e-4, threads=1,
                                 labelled_fraction=1.0))
    assert (full.read("label") >= 0).all()
    assert sum(int(full.read(f"{k}_mask").sum()) for k in masks) == n
    for bad in ("0", "1.5"):
        proc = run_cli("fetch", "synth-papers100M", "--scale", "0.0002", "--labelled-fraction", bad,
                       "--root", tmp_path, "--quiet")
        assert proc.returncode != 0 and "--labelled-fraction must lie in (0, 1]" in proc.stderr
    proc = run_cli("fetch", "cora", "--labelled-fraction", "0.5", "--root", tmp_path, "--source", tmp_path)
    assert proc.returncode != 0 and "--labelled-fraction applies to synthetic twins only" in proc.stderr


def test_twin_is_deterministic_and_independent_of_budget(tmp_path: Path) -> None:
    a = fetch("synth-reddit", root=tmp_path / "a", scale=0.005, seed=4)
    b = fetch("synth-reddit", root=tmp_path / "b", scale=0.005, seed=4, budget=1 << 16)
    c = fetch("synth-reddit", root=tmp_path / "c", scale=0.005, seed=5)
    checksums = [GraphStore.open(p).attrs["checksum"] for p in (a, b, c)]
    assert checksums[0] == checksums[1] != checksums[2]
    assert a.parent.name == "synth-reddit-x0.005-seed4"


@pytest.mark.slow
def test_neighbour_mean_beats_own_features(tmp_path: Path) -> None:
    """Logistic regression on the one-hop neighbour mean beats it on the vertex's own features
    by at least 10 points on synth-reddit --scale 0.01: the graph carries the signal."""
    from sklearn.linear_model import LogisticRegression

    store = GraphStore.open(fetch("synth-reddit", root=tmp_path, scale=0.01))
    indptr, indices = store.csr()
    x, y = store.read("feat"), store.read("label")
    train, test = store.read("train_mask"), store.read("test_mask")
    degree = np.diff(indptr)
    rows = np.repeat(np.arange(len(degree)), degree)
    neighbour_mean = np.zeros_like(x)
    np.add.at(neighbour_mean, rows, x[indices])
    neighbour_mean /= np.maximum(degree, 1)[:, None]
    accuracy = {}
    for name, features in (("own", x), ("neighbours", neighbour_mean)):
        clf = LogisticRegression(max_iter=300).fit(features[train], y[train])
        accuracy[name] = clf.score(features[test], y[test])
    assert accuracy["neighbours"] >= accuracy["own"] + 0.10, accuracy


def test_catalog_lists_every_twin() -> None:
    from distgnn.data.catalog import TWIN_NAMES

    assert tuple(TWINS) == TWIN_NAMES
