"""Graph stores with float16 features (`distgnn fetch --feature-dtype float16`,
docs/design.md#feature-dtype): written rounded, refused beyond float16's range, copied into the
parts, and read back as float32 by every reader (store reader, verify, the trainer's part load,
predict), so training on them equals training on a float32 store of the rounded values."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
import zarr

from conftest import mpiexec, run_cli, write_npy_graph
from distgnn.data.fetch import fetch
from distgnn.data.graph_store import GraphStore, store_name
from distgnn.partition.part_loader import load_partition


def test_store_name_marks_float16() -> None:
    assert store_name("synth-reddit", 0.01, feature_dtype="float16") == "synth-reddit-x0.01-f16"
    assert store_name("synth-reddit", 0.01, 3, feature_dtype="float16") == "synth-reddit-x0.01-f16-seed3"
    assert store_name("synth-reddit", 0.01, feature_dtype="float32") == "synth-reddit-x0.01"


def test_twin_in_float16_is_the_float32_twin_rounded(tmp_path: Path) -> None:
    wide = GraphStore.open(fetch("synth-reddit", root=tmp_path, scale=0.004, threads=1))
    half = GraphStore.open(fetch("synth-reddit", root=tmp_path, scale=0.004, threads=1,
                                 feature_dtype="float16"))
    assert half.path.parent.name == "synth-reddit-x0.004-f16"
    assert half["feat"].dtype == np.float16 and wide["feat"].dtype == np.float32
    expect = wide.read("feat").astype(np.float16)
    np.testing.assert_array_equal(half.read("feat"), expect)
    got = half.features(slice(5, 40))
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, expect[5:40].astype(np.float32))
    for name in ("indptr", "indices", "label", "train_mask"):
        np.testing.assert_array_equal(half.read(name), wide.read(name))
    assert run_cli("verify", half.path).returncode == 0


def test_a_value_beyond_float16_is_one_line_and_no_store(tmp_path: Path) -> None:
    folder = tmp_path / "npy"
    arrays = write_npy_graph(folder)
    arrays["feat"][17, 3] = 7.0e4
    np.save(folder / "feat.npy", arrays["feat"])
    proc = run_cli("fetch", "npy", "--source", folder, "--root", tmp_path / "data", "--name", "g",
                   "--feature-dtype", "float16", "--quiet")
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr
    assert "feat.npy" in lines[0] and "vertex 17" in lines[0] and "--feature-dtype float32" in lines[0]
    assert not (tmp_path / "data" / "g" / "graph.zarr").exists()
    assert run_cli("fetch", "npy", "--source", folder, "--feature-dtype", "bfloat16").returncode == 2


@pytest.mark.mpi
def test_training_on_float16_equals_training_on_its_rounded_values(tmp_path: Path) -> None:
    """The float16 store and a float32 store holding the float16-rounded features give the same
    parts (but for the feature dtype), the same float32 rows after loading (plain and on 2 MB
    pages), the same losses bit for bit and the same predictions."""
    half_src, wide_src = tmp_path / "half", tmp_path / "wide"
    arrays = write_npy_graph(half_src, num_nodes=300, num_edges=3000, feat_dim=24)
    write_npy_graph(wide_src, num_nodes=300, num_edges=3000, feat_dim=24)
    np.save(wide_src / "feat.npy", arrays["feat"].astype(np.float16).astype(np.float32))
    runs = {}
    for kind, src, dtype in (("half", half_src, "float16"), ("wide", wide_src, "float32")):
        graph = fetch("npy", root=tmp_path / "data", source=src, name=kind, feature_dtype=dtype)
        parts = tmp_path / f"parts-{kind}"
        proc = run_cli("partition", graph, "--parts", 2, "--out", parts, "--threads", 1, "--quiet")
        assert proc.returncode == 0, proc.stderr
        run = tmp_path / f"run-{kind}"
        proc = mpiexec(2, "train", parts, "--epochs", 4, "--hidden", 8, "--threads", 1,
                       "--out", run, "--quiet")
        assert proc.returncode == 0, proc.stderr[-3000:]
        proc = mpiexec(2, "predict", run, "--threads", 1, "--quiet")
        assert proc.returncode == 0, proc.stderr[-3000:]
        runs[kind] = parts, run
    (half_parts, half_run), (wide_parts, wide_run) = runs["half"], runs["wide"]
    assert run_cli("verify", half_parts).returncode == 0
    for k in range(2):
        assert zarr.open_group(str(half_parts / f"part_{k}.zarr"), mode="r")["feat"].dtype == np.float16
        wide = load_partition(wide_parts, k).feat
        for huge in (False, True):
            half = load_partition(half_parts, k, huge_pages=huge).feat
            assert half.dtype == torch.float32
            assert torch.equal(half, wide)
    losses = {kind: [json.loads(line)["loss"] for line in (run / "metrics.jsonl").read_text().splitlines()]
              for kind, (_, run) in runs.items()}
    assert len(losses["half"]) == 4 and losses["half"] == losses["wide"]
    np.testing.assert_array_equal(zarr.open_group(str(half_run / "predictions.zarr"), mode="r")["logits"][:],
                                  zarr.open_group(str(wide_run / "predictions.zarr"), mode="r")["logits"][:])
