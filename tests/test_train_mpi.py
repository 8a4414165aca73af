"""The MPI trainer: cd-0 equals single-process training for any P; traffic; resume; failures."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from conftest import mpiexec, run_cli
from distgnn.data.fetch import fetch

pytestmark = pytest.mark.mpi
EPOCHS = 20


@pytest.fixture(scope="module")
def graph(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("data")
    return fetch("synth-reddit", root=root, scale=0.002, seed=1, threads=1)


@pytest.fixture(scope="module")
def partitions(graph: Path, tmp_path_factory) -> dict[int, Path]:
    out = {}
    root = tmp_path_factory.mktemp("parts")
    for parts in (1, 2, 3, 4):
        folder = root / f"libra-{parts}"
        proc = run_cli("partition", graph, "--parts", parts, "--method", "libra", "--out", folder,
                       "--threads", "1", "--quiet")
        assert proc.returncode == 0, proc.stderr
        out[parts] = folder
    return out


def train(partdir: Path, parts: int, out: Path, *extra: str, env: dict | None = None,
          check: bool = True):
    args = ["train", partdir, "--out", out, "--threads", "1", "--hidden", "16", "--quiet", *extra]
    proc = mpiexec(parts, *args, env=env)
    if check:
        assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


def losses(run_dir: Path) -> np.ndarray:
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    return np.array([json.loads(line)["loss"] for line in lines])


def records(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.parametrize("aggregator", ["mean", "gcn"])
def test_cd0_equals_single_process(partitions, tmp_path: Path, aggregator: str) -> None:
    common = ["--algo", "cd-0", "--epochs", str(EPOCHS), "--dropout", "0.5",
              "--aggregator", aggregator, "--eval-every", "5", "--layers", "2"]
    runs = {}
    for parts in (1, 2, 3, 4):
        runs[parts] = tmp_path / f"p{parts}"
        train(partitions[parts], parts, runs[parts], *common)
    reference = losses(runs[1])
    assert len(reference) == EPOCHS and reference[-1] < reference[0]
    ref_model = torch.load(runs[1] / "model.pt", weights_only=False)["model"]
    largest = max(float(t.abs().max()) for t in ref_model.values())
    for parts in (2, 3, 4):
        np.testing.assert_allclose(losses(runs[parts]), reference, rtol=1e-5,
                                   err_msg=f"P={parts} {aggregator}")
        model = torch.load(runs[parts] / "model.pt", weights_only=False)["model"]
        for name, value in model.items():
            assert float((value - ref_model[name]).abs().max()) <= 1e-4 * largest, (parts, name)
        summary = json.loads((runs[parts] / "summary.json").read_text())
        assert summary["num_parts"] == parts and summary["algo"] == "cd-0"
        for key in ("store", "method", "num_parts", "algo", "epochs", "hyperparameters", "seeds",
                    "versions", "git_commit", "slurm_job_id", "partition_dir", "replication_factor",
                    "mean_epoch_time_s", "best_val", "test_at_best_val", "final_test",
                    "bytes_forward", "bytes_backward", "bytes_gradients", "peak_rss_bytes"):
            assert key in summary, key
        assert summary["bytes_forward"] > 0 and summary["bytes_backward"] > 0
        # exact evaluation: the metric equals the single-process one
        ref_eval = [r for r in records(runs[1]) if "val" in r]
        got_eval = [r for r in records(runs[parts]) if "val" in r]
        assert [r["val"] for r in got_eval] == pytest.approx([r["val"] for r in ref_eval], abs=1e-9)


def test_delayed_traffic_and_0c(partitions, tmp_path: Path) -> None:
    """Steady-state forward bytes of cd-r are 1/r of cd-0's; cd-r has no backward exchange; 0c
    exchanges no aggregates (only gradients)."""
    parts, epochs = 3, 14
    bytes_forward = {}
    for algo in ("cd-0", "cd-2", "cd-3", "cd-3-orig", "0c"):
        run = tmp_path / algo
        # every layer aggregates every epoch (no cached layer-0 aggregate), as in DistGNN
        train(partitions[parts], parts, run, "--algo", algo, "--epochs", str(epochs), "--eval-every", "0",
              "--no-input-cache")
        recs = records(run)
        steady = recs[6:]  # past 2r epochs for r <= 3
        bytes_forward[algo] = np.mean([r["bytes_forward"] for r in steady])
        if algo != "cd-0":
            assert all(r["bytes_backward"] == 0 for r in recs), algo
        assert all(r["bytes_gradients"] > 0 for r in recs)
    assert bytes_forward["0c"] == 0
    for algo, r in (("cd-2", 2), ("cd-3", 3), ("cd-3-orig", 3)):
        # split vertices fall into r bins of slightly different sizes
        assert bytes_forward[algo] == pytest.approx(bytes_forward["cd-0"] / r, rel=0.25), algo


def test_input_cache_skips_layer0_exchange_and_keeps_0c_and_cdr_training(partitions, tmp_path: Path) -> None:
    """With layer 0's input aggregate computed once (the default), cd-0 trains exactly as before but
    exchanges only layer 1 (both layers are 16 wide here: half the bytes); 0c and cd-r train as
    without the cache (it serves their exact evaluation only)."""
    parts, epochs = 3, 8
    for algo in ("cd-0", "0c", "cd-2"):
        runs = {}
        for flag in ([], ["--no-input-cache"]):
            runs[bool(flag)] = tmp_path / f"{algo}{''.join(flag)}"
            train(partitions[parts], parts, runs[bool(flag)], "--algo", algo, "--epochs", str(epochs),
                  "--eval-every", "4", *flag)
        cached, every_epoch = records(runs[False]), records(runs[True])
        np.testing.assert_allclose(losses(runs[False]), losses(runs[True]), rtol=1e-5, err_msg=algo)
        for a, b in zip(cached, every_epoch):
            if "val" in a:
                assert a["val"] == pytest.approx(b["val"], abs=0.01), algo
        forward = [np.mean([r["bytes_forward"] for r in recs[4:]]) for recs in (cached, every_epoch)]
        if algo == "cd-0":
            assert forward[0] == pytest.approx(forward[1] / 2, rel=1e-9)
        else:
            assert forward[0] == forward[1], algo


@pytest.fixture(scope="module")
def narrow_input_parts(tmp_path_factory) -> Path:
    """Three Libra parts of a twin whose 8 input features are narrower than hidden 16, so layer 0
    aggregates the constant features before its linear map."""
    root = tmp_path_factory.mktemp("narrow")
    store = fetch("synth-proteins", root=root, scale=0.005, mean_degree=8, seed=1, threads=1)
    folder = root / "libra-3"
    proc = run_cli("partition", store, "--parts", 3, "--method", "libra", "--out", folder,
                   "--threads", "1", "--quiet")
    assert proc.returncode == 0, proc.stderr
    return folder


def test_0c_and_cdr_keep_their_settled_layer0_aggregate(narrow_input_parts, tmp_path: Path) -> None:
    """With the input cache on, 0c (at once) and cd-2 (from step 3r = 6) keep their own layer-0
    aggregate of the constant input and train bit for bit as when recomputing it every epoch; cd-2
    sends no layer-0 rows from step 2r = 4 on (forward bytes: layer 1's 16 columns of 8 + 16).
    cd-2-orig's layer-0 aggregate alternates, so it is unchanged."""
    parts, epochs = 3, 10
    for algo in ("0c", "cd-2", "cd-2-orig"):
        runs = {flag: tmp_path / f"{algo}{flag}" for flag in ("", "--no-input-cache")}
        for flag, run in runs.items():
            train(narrow_input_parts, parts, run, "--algo", algo, "--epochs", str(epochs),
                  "--eval-every", "5", *([flag] if flag else []))
        kept, every = records(runs[""]), records(runs["--no-input-cache"])
        np.testing.assert_array_equal(losses(runs[""]), losses(runs["--no-input-cache"]), err_msg=algo)
        forward = [[r["bytes_forward"] for r in recs[4:]] for recs in (kept, every)]
        if algo == "cd-2":
            assert all(f > 0 for f in forward[0])
            assert forward[0] == pytest.approx([f * 16 / 24 for f in forward[1]], rel=1e-12)
        else:
            assert forward[0] == forward[1], algo


@pytest.mark.parametrize("algo, narrow", [("cd-0", False), ("cd-3", False), ("cd-3", True)])
def test_resume_after_a_failed_rank_continues_exactly(partitions, request, tmp_path: Path, algo: str,
                                                      narrow: bool) -> None:
    """Resuming at epoch 10 gives the uninterrupted losses; ``narrow``: layer 0 aggregates the
    constant input first, so cd-3 has kept its settled layer-0 aggregate since step 9."""
    parts, folder = (3, request.getfixturevalue("narrow_input_parts")) if narrow else (2, partitions[2])
    common = ["--algo", algo, "--epochs", str(EPOCHS), "--checkpoint-every", "5", "--eval-every", "0"]
    whole = tmp_path / "whole"
    train(folder, parts, whole, *common)
    broken = tmp_path / "broken"
    proc = train(folder, parts, broken, *common, check=False,
                 env={"DISTGNN_TEST_FAIL_RANK": "1", "DISTGNN_TEST_FAIL_EPOCH": "12"})
    assert proc.returncode != 0
    assert "rank 1" in proc.stderr and "injected failure" in proc.stderr
    assert not (broken / "summary.json").exists()
    manifests = sorted(p.parent.name for p in (broken / "checkpoints").glob("*/manifest.json"))
    assert manifests == ["epoch_000005", "epoch_000010"]
    train(folder, parts, broken, *common, "--resume")
    epochs = [r["epoch"] for r in records(broken)]
    assert epochs == list(range(1, EPOCHS + 1))  # every epoch exactly once
    np.testing.assert_allclose(losses(broken)[10:], losses(whole)[10:], rtol=1e-6)


def test_resume_refuses_other_hyperparameters(partitions, tmp_path: Path) -> None:
    run = tmp_path / "run"
    train(partitions[2], 2, run, "--algo", "cd-0", "--epochs", "4", "--checkpoint-every", "2")
    proc = train(partitions[2], 2, run, "--algo", "cd-0", "--epochs", "6", "--lr", "0.5",
                 "--resume", check=False)
    assert proc.returncode != 0
    lines = [l for l in proc.stderr.splitlines() if "error" in l]
    assert len(lines) == 1 and "lr" in lines[0], proc.stderr


def test_rank_count_must_equal_parts(partitions, tmp_path: Path) -> None:
    proc = train(partitions[3], 2, tmp_path / "run", "--epochs", "1", check=False)
    assert proc.returncode != 0
    # ours is one line; mpiexec adds its own trailer about the non-zero exit
    lines = [l for l in proc.stderr.splitlines() if l.startswith("distgnn")]
    assert len(lines) == 1 and "3 parts but 2 ranks" in lines[0], proc.stderr


def test_bad_algorithm_names(partitions, tmp_path: Path) -> None:
    for name in ("cd-x", "cd--1", "cd-0-orig", "1c"):
        proc = run_cli("train", partitions[1], "--algo", name, "--out", tmp_path / "r")
        assert proc.returncode == 2 and "unknown algorithm" in proc.stderr, name
