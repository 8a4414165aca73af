"""The smoke version of bench/scaling.py: tiny twins through the replication laws, the MPI
microbenchmark, the P = 1 fit, the held-out P = 2 runs and the 128-socket predictions; the
calibration it writes drives `distgnn scaling-model predict`."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.timeout(420)
@pytest.mark.slow
@pytest.mark.mpi
def test_scaling_bench_smoke(tmp_path: Path, capsys) -> None:
    cal, md, png = tmp_path / "cal.json", tmp_path / "model.md", tmp_path / "speedup.png"
    cmd = [sys.executable, "-m", "bench.scaling", "--scale", "0.005", "--papers-scale", "0.0002",
           "--epochs", "2", "--work", str(tmp_path / "work"), "--calibration", str(cal),
           "--markdown", str(md), "--plot", str(png), "--microbench-repeats", "3"]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    # exit 1 is a failed validation (timings of a tiny graph on a shared machine), said so in one
    # line; anything else is a broken bench
    assert proc.returncode in (0, 1), proc.stdout[-2000:] + proc.stderr[-2000:]
    last = proc.stdout.strip().splitlines()[-1]
    assert last.startswith("validation passed" if proc.returncode == 0 else "FAILED (validation")
    d = json.loads(cal.read_text())
    checked = [(v["algo"], v["apply"]) for v in d["validation"]]
    assert checked == [("cd-0", "root"), ("cd-5", "root"), ("cd-5 --cdr-rule delayed", "root"),
                       ("cd-5 --fresh-copies --cdr-rule delayed", "root"), ("0c", "replicas")]
    assert all(v["measured_s"] > 0 and v["predicted_s"] > 0 for v in d["validation"])
    # the leaves' fractions with local in- and out-edges (the compact tables' rows) are measured
    for key in ("replication", "papers_replication"):
        assert 0 < d[key]["leaf_in_fraction"] <= 1 and 0 < d[key]["leaf_out_fraction"] <= 1
    # and can be added to a calibration made without them, keeping the rest
    old = {k: v for k, v in d.items()}
    old["papers_replication"] = {k: v for k, v in d["papers_replication"].items()
                                 if not k.startswith("leaf_")}
    earlier = tmp_path / "earlier.json"
    earlier.write_text(json.dumps(old))
    proc = subprocess.run([sys.executable, "-m", "bench.scaling", "--scale", "0.005",
                           "--papers-scale", "0.0002", "--work", str(tmp_path / "work"),
                           "--leaf-fractions-into", str(earlier)],
                          cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads(earlier.read_text()) == d
    # the row cost comes from the papers twin (mean degree 14.5), and is a cost, not a gain
    assert d["costs"]["agg_row_per_edge"] >= 0 and d["costs"]["dense_s_per_vertex_unit"] > 0
    text = md.read_text()
    assert "| cd-5 --fresh-copies --cdr-rule delayed | root | 2 |" in text
    assert "synth-papers100M" in text and "vs DGL, like for like" in text
    assert "Gap to 97x against DGL like for like, term by term" in text
    assert png.stat().st_size > 10_000
    # the calibration drives the CLI: at 128 sockets on the papers shape, cd-5 at the root beats
    # cd-5 on the replicas, whose dense work is repeated on RF(128) replicas
    from distgnn.cli import main

    speedup = {}
    for apply in ("root", "replicas"):
        assert main(["scaling-model", "predict", "--calibration", str(cal), "--graph", "ogbn-papers100M",
                     "--algos", "cd-5", "--parts", "1", "128", "--apply", apply, "--json"]) == 0
        rows = json.loads(capsys.readouterr().out)
        speedup[apply] = next(r["speedup"] for r in rows if r["P"] == 128)
    assert speedup["root"] > speedup["replicas"]


def test_redraw_predicts_what_the_cli_predicts_from_the_same_calibration(tmp_path: Path) -> None:
    """`bench.scaling --redraw CAL` (step 5 alone, nothing measured) and `distgnn scaling-model
    predict` give the same 128-socket speedups for the papers100M shape."""
    cal = ROOT / "docs" / "scale-calibration.json"
    md, png = tmp_path / "model.md", tmp_path / "speedup.png"
    proc = subprocess.run([sys.executable, "-m", "bench.scaling", "--redraw", str(cal),
                           "--markdown", str(md), "--plot", str(png), "--microbench-repeats", "3"],
                          cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert png.stat().st_size > 0 and md.read_text().startswith("`python -m bench.scaling --redraw")
    said = next(l for l in proc.stdout.splitlines() if l.startswith("compute x1: speedup at 128"))
    cli = subprocess.run([sys.executable, "-m", "distgnn", "scaling-model", "predict", "--calibration",
                          str(cal), "--graph", "ogbn-papers100M", "--algos", "cd-0", "cd-5", "--parts",
                          "128", "--json"], cwd=ROOT, capture_output=True, text=True)
    assert cli.returncode == 0, cli.stderr[-2000:]
    for row in json.loads(cli.stdout):
        assert f"{row['algo']} (root) {row['speedup']:.1f}x" in said, (row, said)
