"""`distgnn predict`: every vertex's logits in global id order, equal for any number of ranks,
and consistent with the run's own evaluation."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import zarr

from conftest import mpiexec, run_cli
from distgnn.data.fetch import fetch
from test_train_mpi import train_many

pytestmark = pytest.mark.mpi


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> tuple[Path, Path, dict[int, Path]]:
    """(graph store, a cd-5 run trained at P = 2, {P: partition folder} for P = 1, 2, 4)."""
    root = tmp_path_factory.mktemp("predict")
    graph = fetch("synth-reddit", root=root / "data", scale=0.005, threads=1)
    parts = {}
    for P in (1, 2, 4):
        parts[P] = root / f"libra-{P}"
        proc = run_cli("partition", graph, "--parts", P, "--out", parts[P], "--threads", "1", "--quiet")
        assert proc.returncode == 0, proc.stderr
    run = root / "run"
    # this run and each model's run of test_predict_rebuilds_each_model, in one launch
    train_many(parts[2], 2, {run: ("--algo", "cd-5", "--epochs", "6", "--layers", "3"),
                             **{root / f"run-{model}": ("--model", model, "--epochs", "4", *extra)
                                for model, extra in MODEL_RUNS.items()}})
    return graph, run, parts


#: the models test_predict_rebuilds_each_model predicts with, and their training options
MODEL_RUNS = {"gcn": (), "gin": (), "gat": ("--heads", "2", "--layers", "3")}


def predict(P: int, run: Path, out: Path, *extra) -> zarr.Group:
    args = ("predict", run, "--out", out, "--threads", "1", "--quiet", *extra)
    proc = mpiexec(P, *args) if P > 1 else run_cli(*args)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return zarr.open_group(str(out), mode="r")


def test_predictions_equal_for_any_rank_count_and_match_the_final_evaluation(trained, tmp_path) -> None:
    graph, run, parts = trained
    g = zarr.open_group(str(graph), mode="r")
    n, classes = g.attrs["num_nodes"], g.attrs["num_classes"]
    at2 = predict(2, run, tmp_path / "p2.zarr", "--layer", "1")
    logits = at2["logits"][:]
    assert logits.shape == (n, classes) and logits.dtype == np.float32
    assert at2["embeddings"].shape == (n, 16) and float(at2["embeddings"][:].min()) >= 0.0  # after ReLU
    assert at2.attrs["algo"] == "cd-5" and at2.attrs["layer"] == 1
    # the run's own last evaluation (exact aggregation) from the predictions: the same number
    summary = json.loads((run / "summary.json").read_text())
    test = g["test_mask"][:]
    recomputed = float((logits[test].argmax(1) == g["label"][:][test]).mean())
    assert recomputed == pytest.approx(summary["final_test"], abs=1e-12)
    # the same model on 1 and 4 ranks (other parts, other local orders): the same rows
    for P in (1, 4):
        other = predict(P, run, tmp_path / f"p{P}.zarr", "--partdir", parts[P], "--layer", "1")
        np.testing.assert_allclose(other["logits"][:], logits, rtol=1e-5, atol=1e-5 * np.abs(logits).max())
        np.testing.assert_allclose(other["embeddings"][:], at2["embeddings"][:], rtol=1e-5, atol=1e-5)
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")], "temporary store left behind"


def test_bad_layer_and_missing_run_are_one_line(trained, tmp_path) -> None:
    _, run, _ = trained
    proc = mpiexec(2, "predict", run, "--layer", "2", "--out", tmp_path / "x.zarr")
    lines = [l for l in proc.stderr.splitlines() if l.startswith("distgnn predict")]
    assert proc.returncode == 2 and len(lines) == 1 and "--layer" in lines[0], proc.stderr
    assert not (tmp_path / "x.zarr").exists()
    proc = run_cli("predict", tmp_path / "nothing")
    assert proc.returncode == 2 and "no summary.json" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.parametrize("model", ["gcn", "gin", "gat"])
def test_predict_rebuilds_each_model(trained, tmp_path, model: str) -> None:
    """A GCN, GIN or GAT run's predictions at P = 2 reproduce its final test accuracy, and equal
    P = 1's; GAT's embeddings are its heads concatenated after the ELU."""
    graph, first, parts = trained
    run = first.parent / f"run-{model}"   # trained by the fixture
    g = zarr.open_group(str(graph), mode="r")
    logits = predict(2, run, tmp_path / "p2.zarr")["logits"][:]
    test = g["test_mask"][:]
    summary = json.loads((run / "summary.json").read_text())
    assert summary["model"] == model
    assert float((logits[test].argmax(1) == g["label"][:][test]).mean()) == pytest.approx(
        summary["final_test"], abs=1e-12)
    one = predict(1, run, tmp_path / "p1.zarr", "--partdir", parts[1])["logits"][:]
    np.testing.assert_allclose(one, logits, rtol=1e-5, atol=1e-5 * np.abs(logits).max())
    if model == "gat":
        embeddings = predict(2, run, tmp_path / "e.zarr", "--layer", "1")["embeddings"][:]
        assert embeddings.shape == (len(logits), 32) and float(embeddings.min()) >= -1.0  # ELU
