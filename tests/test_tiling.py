"""Source tiling chosen by measurement (distgnn/kernels/tiling.py): which tile counts are tried, that the
trial calls are real calls with correct results, that the fastest is kept, and the refusals."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

from distgnn.kernels import ops, tiling
import ops_reference as ref
from distgnn.errors import DistgnnError

MIB = 1 << 20


@pytest.fixture(autouse=True)
def _auto_mode():
    before = tiling.mode()
    tiling.set_mode("auto")
    yield
    tiling.set_mode(before)


def sorted_graph(n_dst: int, n_src: int, degree: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A CSR whose rows ascend (as every part's rows do): ``degree`` distinct random sources a row."""
    gen = torch.Generator().manual_seed(seed)
    rows = [torch.randperm(n_src, generator=gen)[:degree].sort().values for _ in range(n_dst)]
    indptr = torch.arange(0, (n_dst + 1) * degree, degree, dtype=torch.int64)
    return indptr, torch.cat(rows).to(torch.int32)


def test_candidates_follow_table_size_and_degree() -> None:
    # a table that fits the cache: untiled only
    assert tiling.candidates(1000, 1000, 100_000, 1024) == (1,)
    # R24 at F = 256 float32 (233k x 1 KB = 228 MiB, mean degree 103): 4 and 8 tiles
    assert tiling.candidates(232_965, 232_965, 24_000_000, 1024) == (1, 4, 8)
    # the same rows in bfloat16 (114 MiB): 2 and 4
    assert tiling.candidates(232_965, 232_965, 24_000_000, 512) == (1, 2, 4)
    # P26 (2.4 GB table, mean degree 10.6): every tile count would rewrite the output too often
    assert tiling.candidates(2_449_029, 2_449_029, 26_000_000, 1024) == (1,)
    # a degree that allows 4 tiles but not 8
    assert tiling.candidates(232_965, 232_965, 232_965 * 40, 1024) == (1, 4)
    assert tiling.candidates(0, 10, 0, 1024) == (1,)


def test_choice_interleaves_candidates_and_keeps_the_fastest() -> None:
    choice = tiling.TileChoice((1, 4, 8))
    seen = []
    fake = {1: [0.9, 0.7], 4: [0.5, 0.6], 8: [0.55, 0.8]}  # 4's best trial is the fastest
    for _ in range(tiling.ROUNDS * 3):
        t = choice.next()
        seen.append(t)
        choice.record(t, fake[t][seen.count(t) - 1])
    assert seen == [1, 4, 8] * tiling.ROUNDS
    assert choice.chosen == 4 and choice.next() == 4
    assert choice.report() == {"tiles": 4, "trial_ms": {"1": 700.0, "4": 500.0, "8": 550.0}}
    choice.record(1, 0.001)  # later calls are not timed
    assert choice.chosen == 4
    assert tiling.TileChoice((1,)).chosen == 1  # nothing to measure
    close = tiling.TileChoice((1, 4))  # a win inside the margin keeps the untiled kernel
    for t, s in ((1, 1.0), (4, 1.0 - tiling.MARGIN / 2), (1, 1.0), (4, 1.0)):
        close.record(t, s)
    assert close.chosen == 1


def test_modes_and_refusals() -> None:
    assert tiling.parse_mode("AUTO", "x") == "auto"
    assert tiling.parse_mode("off", "x") == tiling.parse_mode("1", "x") == tiling.parse_mode("0", "x") == "off"
    assert tiling.parse_mode(" 6 ", "x") == 6
    for bad in ("-2", "two", "4.5", ""):
        with pytest.raises(DistgnnError, match="x: expected auto, off or a tile count"):
            tiling.parse_mode(bad, "x")
    tiling.set_mode(5)
    assert tiling.fixed(True) == 5 and tiling.fixed(False) == 1
    tiling.set_mode("off")
    assert tiling.fixed(True) == 1
    tiling.set_mode("auto")
    assert tiling.fixed(True) is None


def test_bad_environment_value_is_one_line_from_the_cli() -> None:
    env = {**os.environ, tiling.MODE_ENV: "lots"}
    proc = subprocess.run([sys.executable, "-m", "distgnn", "train", "/nonexistent", "--quiet"],
                          env=env, capture_output=True, text=True)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and tiling.MODE_ENV in proc.stderr
    env[tiling.MODE_ENV] = "3"
    proc = subprocess.run([sys.executable, "-c", "from distgnn.kernels import ops, tiling; print(tiling.mode())"],
                          env=env, capture_output=True, text=True)
    assert proc.stdout.strip() == "3"


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_trial_calls_are_exact_and_the_choice_is_kept(monkeypatch, dtype: torch.dtype) -> None:
    """With the size threshold lowered, a small sorted graph is measured: forward and backward
    each try every candidate ROUNDS times, every call's result matches the reference, later calls
    use the chosen count, and tiling_report lists both directions."""
    monkeypatch.setattr(tiling, "MIN_TABLE_BYTES", 32 * 1024)
    monkeypatch.setattr(tiling, "TILE_BYTES", (16 * 1024, 8 * 1024))
    indptr, indices = sorted_graph(400, 400, 100, seed=1)  # square: both directions are measured
    F = 48
    row_bytes = F * (2 if dtype == torch.bfloat16 else 4)
    options = tiling.candidates(400, 400, indices.numel(), row_bytes)
    assert len(options) == 3, options
    used = []
    real = ops.spmm

    def spy(*args, **kwargs):
        used.append(kwargs.get("tiles"))
        return real(*args, **kwargs)

    monkeypatch.setattr(ops, "spmm", spy)
    x = torch.randn(400, F).to(dtype).requires_grad_(True)
    x64 = x.detach().double().requires_grad_(True)
    y64 = ref.aggregate(indptr, indices, x64, "mean")
    grad = torch.randn(400, F)
    (g64,) = torch.autograd.grad(y64, x64, grad.double())
    tol = dict(rtol=1e-5, atol=1e-5) if dtype == torch.float32 else dict(rtol=1e-2, atol=1e-2)
    calls = tiling.ROUNDS * len(options) + 2
    for _ in range(calls):
        y = ops.aggregate(indptr, indices, x, "mean")
        (gx,) = torch.autograd.grad(y, x, grad)
        torch.testing.assert_close(y.double(), y64, **tol)
        torch.testing.assert_close(gx.double(), g64, **tol)
    forward, backward = used[0::2], used[1::2]
    for seq in (forward, backward):
        assert seq[:tiling.ROUNDS * len(options)] == list(options) * tiling.ROUNDS
        assert seq[-1] == seq[-2] and seq[-1] in options
    report = [r for r in ops.tiling_report() if r["edges"] == indices.numel() and r["width"] == F
              and r["dtype"] == str(dtype).replace("torch.", "")]
    assert len(report) == 2  # the graph and its transpose
    assert all(r["tiles"] in options and set(r["trial_ms"]) == {str(t) for t in options} for r in report)


def test_unsorted_rows_and_small_tables_are_not_measured(monkeypatch) -> None:
    monkeypatch.setattr(tiling, "MIN_TABLE_BYTES", 64 * 1024)
    monkeypatch.setattr(tiling, "TILE_BYTES", (32 * 1024,))
    indptr, indices = sorted_graph(300, 400, 60, seed=2)
    shuffled = indices.view(300, 60).flip(1).reshape(-1).contiguous()  # rows descend
    used = []
    real = ops.spmm
    monkeypatch.setattr(ops, "spmm", lambda *a, **k: used.append(k.get("tiles")) or real(*a, **k))
    x = torch.randn(400, 48)
    y = ops.aggregate(indptr, shuffled, x)
    torch.testing.assert_close(y, ref.aggregate(indptr, shuffled, x, "sum"), rtol=1e-5, atol=1e-5)
    ops.aggregate(indptr, indices, x[:, :4])  # 400 x 16 bytes: under the threshold
    assert used == [1, 1]
    tiling.set_mode(3)  # a fixed count applies to sorted rows only
    ops.aggregate(indptr, indices, x)
    ops.aggregate(indptr, shuffled, x)
    assert used[2:] == [3, 1]


def test_train_measures_tiles_and_reports_them(tmp_path) -> None:
    """`distgnn train` with the thresholds lowered (so a tiny part is measured) trains to the
    losses of a run that never tiles, and summary.json lists each choice with its trial times."""
    import json

    from conftest import run_cli
    from distgnn.data.fetch import fetch

    graph = fetch("synth-reddit", root=tmp_path / "data", scale=0.02, threads=1)
    parts = tmp_path / "parts"
    assert run_cli("partition", graph, "--parts", "1", "--out", parts, "--quiet").returncode == 0
    args = ["train", str(parts), "--epochs", "8", "--hidden", "16", "--eval-every", "0",
            "--threads", "1", "--quiet"]
    lowered = ("from distgnn.kernels import tiling; tiling.MIN_TABLE_BYTES = 16 << 10; "
               "tiling.TILE_BYTES = (64 << 10, 32 << 10); tiling.EDGES_PER_OUTPUT_PASS = 1; "
               "from distgnn.cli import main; import sys; sys.exit(main(sys.argv[1:]))")
    proc = subprocess.run([sys.executable, "-c", lowered, *args, "--out", str(tmp_path / "auto")],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    proc = run_cli(*args, "--out", tmp_path / "off", env={tiling.MODE_ENV: "off"})
    assert proc.returncode == 0, proc.stderr
    runs = {}
    for name in ("auto", "off"):
        folder = tmp_path / name
        runs[name] = ([json.loads(l)["loss"] for l in (folder / "metrics.jsonl").read_text().splitlines()],
                      json.loads((folder / "summary.json").read_text())["source_tiling"])
    torch.testing.assert_close(torch.tensor(runs["auto"][0]), torch.tensor(runs["off"][0]), rtol=1e-5, atol=0)
    auto, off = runs["auto"][1], runs["off"][1]
    assert auto["mode"] == "auto" and off == {"mode": "off", "choices_by_rank": [[]]}
    choices = auto["choices_by_rank"][0]
    assert choices and all(c["tiles"] is not None and str(c["tiles"]) in c["trial_ms"] for c in choices)
    assert any(c["tiles"] > 1 for c in choices) or all(c["trial_ms"]["1"] <= min(c["trial_ms"].values())
                                                      for c in choices)


def test_wide_float32_rows_give_the_same_bits_whatever_the_tiles() -> None:
    """F = 256 float32 rows fill whole column blocks with one accumulator set on every instruction
    set, so each row's sum runs in edge order under any tile count (hub pieces included): the
    trials cannot change a result (docs/design.md#source-tiling)."""
    indptr, indices = sorted_graph(500, 3000, 120, seed=3)
    x = torch.randn(3000, 256)
    try:
        for isa in ops.supported_isas():
            ops.set_isa(isa)
            untiled = ops.spmm(indptr, indices, x, None, None, 2, True, tiles=1, chunk_edges=50)
            for tiles in (3, 7):
                tiled = ops.spmm(indptr, indices, x, None, None, 2, True, tiles=tiles, chunk_edges=50)
                assert torch.equal(untiled, tiled), (isa, tiles)
    finally:
        ops.set_isa("host")
