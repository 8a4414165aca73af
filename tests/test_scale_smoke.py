"""The smoke version of bench/full_size.py: a 1% synth-reddit through fetch, partition and train,
with every run's measured peak memory checked against the launcher's estimate, whose fixed part
(imports and runtime) is measured on the machine the test runs on."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from bench.full_size import MEMORY_TOLERANCE  # noqa: E402


@pytest.mark.timeout(300)
@pytest.mark.slow
def test_full_size_smoke(tmp_path: Path) -> None:
    out = tmp_path / "out.json"
    md = tmp_path / "out.md"
    cmd = [sys.executable, "-m", "bench.full_size", "--scale", "0.01", "--max-epochs", "2",
           "--methods", "libra", "--train-parts", "1", "2", "--products-scales",
           "--work", str(tmp_path / "work"), "--json", str(out), "--markdown", str(md)]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    result = json.loads(out.read_text())
    # the fixed part of every estimate below was measured here: the runtime is fitted to a run on
    # this machine (its estimate equals its measured peak, to the byte's rounding)
    calibration = result["calibration"]
    assert abs(calibration["estimate"]["total"] - calibration["peak_rss_bytes"]) <= 1, calibration
    assert calibration["estimate"]["runtime"] == result["runtime_bytes"]
    assert calibration["estimate"]["baseline"] == result["baseline_bytes"]
    # one partition per P, with a replication factor that grows with P
    rf = {p["P"]: p["replication_factor"] for p in result["partitions"]}
    assert rf[1] == pytest.approx(1.0) and 1.0 < rf[2] < rf[4] <= 4.0
    runs = {(r["algo"], r["P"]): r for r in result["runs"]}
    assert set(runs) == {("cd-0", 1), ("cd-0", 2), ("cd-5", 2), ("0c", 2)}
    for run in runs.values():
        assert "skipped" not in run
        # the estimate's fixed part is this machine's: imports and runtime as measured here
        assert all(e["baseline"] == result["baseline_bytes"] and e["runtime"] == result["runtime_bytes"]
                   for e in run["estimates"]), run["estimates"]
        # the estimate the launcher uses holds within the tolerance either way
        ratio = run["peak_rss_bytes"] / run["estimate_bytes"]
        assert 1 / MEMORY_TOLERANCE <= ratio <= MEMORY_TOLERANCE, run
    # traffic by kind: cd-0 exchanges both ways; cd-5 (at the root, with its delayed gradients)
    # both ways too, but 1/r of the rows; 0c gradients only
    assert runs["cd-0", 1]["bytes_forward"] == 0
    assert runs["cd-0", 2]["bytes_forward"] > 0 and runs["cd-0", 2]["bytes_backward"] > 0
    assert 0 < runs["cd-5", 2]["bytes_forward"] < runs["cd-0", 2]["bytes_forward"]
    assert 0 < runs["cd-5", 2]["bytes_backward"] < runs["cd-0", 2]["bytes_backward"]
    assert runs["0c", 2]["bytes_forward"] == 0 and runs["0c", 2]["bytes_gradients"] > 0
    # memory-scaling table covers P = 1, 2, 4, and the printed tables name every stage
    assert sorted(m["P"] for m in result["memory_scaling"]) == [1, 2, 4]
    text = md.read_text()
    assert "measured/estimate" in text and "train synth-reddit-x0.01 cd-5 P=2" in text


@pytest.mark.timeout(300)
def test_papers_scale_smoke(tmp_path: Path) -> None:
    """bench/papers_scale.py at a tiny scale: every stage recorded with its peak and wall time,
    built parts measured, extrapolated and removed, and the measured RF put into a copy of the
    calibration's papers law (used at the measured P)."""
    results, calibration = tmp_path / "r.jsonl", tmp_path / "cal.json"
    calibration.write_text((ROOT / "docs" / "scale-calibration.json").read_text())
    cmd = [sys.executable, "-m", "bench.papers_scale", "--work", str(tmp_path / "w"), "--scale", "0.002",
           "--parts", "2", "4", "--build-parts", "4", "--results", str(results), "--calibration",
           str(calibration), "--stages", "fetch", "verify", "assign", "build", "estimate", "calibrate"]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    records = {r["stage"]: r for r in map(json.loads, results.read_text().splitlines())}
    for stage in ("fetch", "verify", "assign libra store P=2", "assign libra store P=4",
                  "assign hdrf store P=4", "assign hdrf shuffle P=4"):
        assert records[stage]["rc"] == 0 and records[stage]["wall_s"] > 0, records[stage]
        assert records[stage]["peak_bytes"] > 0
    assert 1.0 < records["assign libra store P=2"]["rf"] < records["assign libra store P=4"]["rf"]
    built = [r for s, r in records.items() if s.startswith("build libra P=4 part")]
    assert len(built) >= 2 and all(r["part_bytes"] > 0 for r in built)
    assert records["extrapolate libra P=4"]["all_parts_bytes"] > sum(r["part_bytes"] for r in built)
    law = json.loads(calibration.read_text())["papers_replication"]
    assert law["measured"] == {"2": records["assign libra store P=2"]["rf"],
                               "4": records["assign libra store P=4"]["rf"]}
    assert "synth-papers100M --scale 0.002" in law["measured_on"]
    assert "papers_replication_extrapolated" in json.loads(calibration.read_text())
    assert not list((tmp_path / "w" / "parts" / "libra-store-4").glob("part_*.zarr"))  # removed after
