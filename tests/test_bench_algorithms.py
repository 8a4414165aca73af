"""The smoke version of bench/algorithms.py: a tiny twin, 2 ranks, 6 epochs, the table and the
learning-curve figure."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.timeout(300)
@pytest.mark.slow
def test_algorithms_smoke(tmp_path: Path) -> None:
    plot = tmp_path / "curves.png"
    cmd = [sys.executable, "-m", "bench.algorithms", "--scale", "0.002", "--parts", "2", "--epochs", "6",
           "--seeds", "0", "--algos", "cd-0", "cd-2", "cd-2+fresh", "0c", "--work", str(tmp_path / "work"),
           "--plot", str(plot), "--no-check", "--json", str(tmp_path / "figures.json")]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    rows = {line.split("|")[1].strip(): line for line in proc.stdout.splitlines()
            if line.startswith("| ") and not line.startswith("| algo")}
    assert set(rows) == {"cd-0", "cd-2", "cd-2+fresh", "0c"}
    # 0c exchanges no aggregates; cd-0 moves the same bytes forward and backward
    header = next(line for line in proc.stdout.splitlines() if line.startswith("| algo"))
    names = [c.strip() for c in header.split("|")[1:-1]]
    fwd, bwd = names.index("fwd MB/epoch"), names.index("bwd MB/epoch")
    cells = {algo: [c.strip() for c in line.split("|")[1:-1]] for algo, line in rows.items()}
    assert float(cells["0c"][fwd]) == 0.0 and float(cells["0c"][bwd]) == 0.0
    # the same figures for bench.cdr_sweep: each seed's test figure, steady bytes (fwd + bwd)
    import json

    figures = json.loads((tmp_path / "figures.json").read_text())
    assert set(figures["algos"]) == set(rows) and figures["metric"] == "accuracy"
    acc = names.index("test accuracy at best val (%)")
    for algo, row in cells.items():
        got = figures["algos"][algo]
        assert len(got["test"]) == 1 and f"{100 * got['test'][0]:.2f}" == row[acc].split()[0], algo
        assert got["bytes_per_epoch"] / 1e6 == pytest.approx(float(row[fwd]) + float(row[bwd]), abs=0.011)
    assert float(cells["cd-0"][fwd]) == float(cells["cd-0"][bwd]) > 0
    # fresh copies: the broadcast moves every epoch, the partials 1/r of them (cd-0 sends less
    # here: its layer-0 aggregate is cached, cd-r's is not)
    assert float(cells["cd-2"][fwd]) < float(cells["cd-2+fresh"][fwd])
    assert cells["cd-0"][names.index("apply")] == "root" and cells["0c"][names.index("apply")] == "replicas"
    assert "0c loses" in proc.stdout
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and plot.stat().st_size > 10_000
    # a kept run is reused only with the settings asked for: other epochs train it again; runs are
    # kept per partition, so P = 2 and P = 4 runs of one algorithm never stand in for each other
    run = tmp_path / "work" / "runs" / "libra-2" / "cd-0-seed0"
    assert len((run / "metrics.jsonl").read_text().splitlines()) == 6
    again = cmd[:cmd.index("--epochs") + 1] + ["4"] + cmd[cmd.index("--epochs") + 2:cmd.index("--algos") + 1] \
        + ["cd-0"] + cmd[cmd.index("--work"):]
    proc = subprocess.run(again, cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert len((run / "metrics.jsonl").read_text().splitlines()) == 4
