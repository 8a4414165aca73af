"""distgnn report: tables and plots from summary.json / metrics.jsonl files written here."""
from __future__ import annotations

import json
import os
import struct
import zlib
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from distgnn.cli import main
from distgnn.errors import DistgnnError
from distgnn.report import make_report
from distgnn.report.table import hosts_label
from distgnn.vocabulary import parse_algorithm, resolve_apply, steady_start

STORE = "synth-reddit-x0.01"


def write_run(root: Path, method: str, parts: int, algo: str, epochs: int = 8,
              rng: np.random.Generator | None = None) -> dict:
    """A run folder with realistic values and every key of docs/design.md#summary-keys; returns the summary."""
    rng = rng or np.random.default_rng(parts * 100 + len(algo))
    run = root / f"{method}-{parts}" / algo  # the report must not parse this path
    run.mkdir(parents=True)
    exchange = 0.0 if algo == "0c" or parts == 1 else (0.004 if algo == "cd-0" else 0.001)
    lines, best_val, test_at_best = [], -1.0, None
    for e in range(epochs):
        agg, dense, allr = 0.020 / parts, 0.030 / parts, 0.002 * (parts > 1)
        t = agg + dense + allr + exchange + 0.003 + rng.uniform(0, 0.002)
        val = 0.5 + 0.4 * (1 - np.exp(-e / 3)) - 0.02 * (algo == "0c")
        test = val - 0.01
        if val > best_val:
            best_val, test_at_best = val, test
        lines.append({"epoch": e, "loss": float(2.0 * np.exp(-e / 4)), "epoch_time_s": t,
                      "time_aggregate_s": agg, "time_exchange_wait_s": exchange,
                      "time_dense_s": dense, "time_allreduce_s": allr,
                      "bytes_forward": 0 if algo == "0c" else 40_000 * parts,
                      "bytes_backward": 40_000 * parts if algo == "cd-0" else 0,
                      "bytes_gradients": 180_000 * (parts > 1),
                      "peak_rss_bytes": 300_000_000 + 1_000_000 * e,
                      "train": val + 0.05, "val": val, "test": test})
    (run / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    skip = steady_start(parse_algorithm(algo), epochs)
    steady = lines[skip:]
    summary = {
        "store": STORE, "method": method, "num_parts": parts, "algo": algo, "epochs": epochs,
        "apply": resolve_apply("auto", parse_algorithm(algo)),
        "hyperparameters": {"layers": 2, "hidden": 16, "lr": 0.01, "dropout": 0.5},
        "seeds": {"model": 0, "partition": 0}, "versions": {"distgnn": "0.1.0", "torch": "2.13.0"},
        "git_commit": "0123abc", "slurm_job_id": None, "partition_dir": f"partitions/{STORE}/{method}-{parts}",
        "replication_factor": 1.0 + 0.3 * np.log2(parts) * (1.2 if method == "random" else 1.0),
        "mean_epoch_time_s": float(np.mean([x["epoch_time_s"] for x in steady])),
        "best_val": best_val, "test_at_best_val": test_at_best, "final_test": lines[-1]["test"],
        "bytes_forward": float(np.mean([x["bytes_forward"] for x in steady])),
        "bytes_backward": float(np.mean([x["bytes_backward"] for x in steady])),
        "bytes_gradients": float(np.mean([x["bytes_gradients"] for x in steady])),
        "peak_rss_bytes": max(x["peak_rss_bytes"] for x in lines),
        "hosts_by_rank": [f"node{k // 2 + 1:03d}" for k in range(parts)],  # two ranks a host
    }
    if method == "random" and parts == 4:  # runs under --precision auto
        summary["hyperparameters"]["precision"] = "bf16"
        summary["precision_reason"] = "auto chose bf16: every host's CPU multiplies bfloat16 natively (amx_bf16)"
    (run / "summary.json").write_text(json.dumps(summary))
    return summary


def steady_median(root: Path, method: str, parts: int, algo: str) -> dict[str, float]:
    """The median of each figure over a run's steady epochs, from its metrics.jsonl."""
    run = root / f"{method}-{parts}" / algo
    lines = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    steady = lines[steady_start(parse_algorithm(algo), len(lines)):]
    return {k: float(np.median([x[k] for x in steady])) for k in steady[0] if isinstance(steady[0][k], float)}


def png_size(path: Path) -> tuple[int, int]:
    """Width and height of a PNG, checking its signature and the CRC of every chunk."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    pos, chunks = 8, []
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos:pos + 4])
        kind, body = data[pos + 4:pos + 8], data[pos + 8:pos + 8 + length]
        (crc,) = struct.unpack(">I", data[pos + 8 + length:pos + 12 + length])
        assert zlib.crc32(kind + body) == crc, f"{path}: bad CRC in {kind!r}"
        chunks.append(kind)
        pos += 12 + length
    assert chunks[0] == b"IHDR" and chunks[-1] == b"IEND" and b"IDAT" in chunks
    return struct.unpack(">II", data[16:24])


@pytest.fixture
def runs(tmp_path: Path) -> tuple[Path, dict]:
    root = tmp_path / "runs" / "anything"
    summaries = {}
    for method in ("libra", "random"):
        for parts in (1, 2, 4):
            for algo in ("cd-0", "cd-2", "0c"):
                summaries[(method, parts, algo)] = write_run(root, method, parts, algo)
    return root, summaries


def test_report_tables_and_plots(runs, tmp_path):
    root, summaries = runs
    out = tmp_path / "reports" / STORE
    assert main(["report", "--runs", str(root), "--out", str(out), "--quiet"]) == 0
    table = pd.read_csv(out / "summary.csv")
    assert len(table) == len(summaries)
    for _, row in table.iterrows():
        s = summaries[(row.method, row.num_parts, row.algo)]
        assert row.store == STORE
        for key in ("replication_factor", "mean_epoch_time_s", "best_val", "test_at_best_val",
                    "bytes_forward", "bytes_backward", "bytes_gradients", "peak_rss_bytes"):
            assert row[key] == pytest.approx(s[key]), key
        # the epoch is the median of the steady epochs (a burst elsewhere moves a mean); the
        # speedup and the split are of medians too
        median = steady_median(root, row.method, row.num_parts, row.algo)
        assert row.median_epoch_time_s == pytest.approx(median["epoch_time_s"])
        base = steady_median(root, row.method, 1, row.algo)["epoch_time_s"]
        assert row.speedup_vs_p1 == pytest.approx(base / median["epoch_time_s"])
        parts = ["time_aggregate_s", "time_exchange_wait_s", "time_dense_s", "time_allreduce_s"]
        assert list(row[parts]) == pytest.approx([median[k] for k in parts])
        assert row.time_other_s == pytest.approx(max(0.0, median["epoch_time_s"] - sum(median[k] for k in parts)))
    md = (out / "summary.md").read_text()
    assert f"# {STORE}" in md and md.count("| libra |") == 9 and md.count("| random |") == 9
    # every row names its model (runs without one trained GraphSAGE) and apply mode in columns
    rows = [line for line in md.splitlines() if line.startswith("| libra |") or line.startswith("| random |")]
    assert all(line.split("|")[4].strip() == "sage" for line in rows), rows[0]
    assert all(line.split("|")[6].strip() in ("root", "replicas") for line in rows), rows[0]
    # and its precision (runs from before it: fp32), with auto's reason said once under the table
    assert [line.split("|")[5].strip() for line in rows].count("bf16") == 3
    assert all(line.split("|")[5].strip() == "fp32" for line in rows if not line.startswith("| random | 4 "))
    assert md.count("precision: auto chose bf16: every host's CPU multiplies bfloat16 natively (amx_bf16)") == 1
    # the machines of each run (two ranks a host): node001 alone at P <= 2, two hosts at P = 4
    assert {line.split("|")[-2].strip() for line in rows} == {"node001", "node001, node002"}, rows
    assert set(table.hosts) == {"node001", "node001, node002"}
    assert hosts_label([f"n{k}" for k in range(16)]) == "16 hosts (n0 ... n15)"
    assert hosts_label(None) == ""
    assert "the DistGNN paper's cd-r" in md
    assert "At P = 1 every algorithm is the same computation" in md
    # the P = 1 rows' spread, the machine's noise, measured from those rows
    for method in ("libra", "random"):
        ms = [1e3 * float(np.median([json.loads(l)["epoch_time_s"] for l in
                                     (root / f"{method}-1" / a / "metrics.jsonl").read_text().splitlines()
                                     [steady_start(parse_algorithm(a), 8):]])) for a in ("cd-0", "cd-2", "0c")]
        assert (f"At P = 1 ({method}, sage, fp32) the 3 algorithms' epochs read "
                f"{min(ms):.1f}-{max(ms):.1f} ms, {100 * (max(ms) / min(ms) - 1):.0f}% apart") in md
    for name in ("epoch_time.png", "test_vs_epoch.png", "test_vs_time.png", "replication.png"):
        width, height = png_size(out / name)
        assert width > 200 and height > 200, name
    assert not [p for p in out.iterdir() if p.name.startswith(".")], "temporary files left behind"
    umask = os.umask(0)
    os.umask(umask)
    modes = {p.name: p.stat().st_mode & 0o777 for p in out.iterdir()}
    assert set(modes.values()) == {0o666 & ~umask}, modes  # the umask decides


def test_report_reads_provenance_not_paths(tmp_path):
    root = tmp_path / "runs"
    s = write_run(root, "libra", 2, "cd-0")
    # Move the run to a misleading folder: the table must still say libra, P = 2, cd-0.
    (root / "libra-2" / "cd-0").rename(root / "hash-8")
    make_report(root, tmp_path / "out")
    row = pd.read_csv(tmp_path / "out" / "summary.csv").iloc[0]
    assert (row.method, row.num_parts, row.algo) == ("libra", 2, "cd-0")
    assert np.isnan(row.speedup_vs_p1)  # no P = 1 run to compare with
    assert row.mean_epoch_time_s == pytest.approx(s["mean_epoch_time_s"])


def test_report_refuses_incomplete_runs(tmp_path):
    root = tmp_path / "runs"
    write_run(root, "libra", 2, "cd-0")
    summary_path = root / "libra-2" / "cd-0" / "summary.json"
    summary = json.loads(summary_path.read_text())
    del summary["replication_factor"]
    summary_path.write_text(json.dumps(summary))
    with pytest.raises(DistgnnError, match="summary.json: missing keys replication_factor"):
        make_report(root, tmp_path / "out")
    assert not (tmp_path / "out").exists()
    (tmp_path / "empty").mkdir()
    with pytest.raises(DistgnnError, match="no summary.json"):
        make_report(tmp_path / "empty", tmp_path / "out")


def test_learning_curves_figure(tmp_path):
    """bench/algorithms' figure: a line per label over its runs (seeds); a label whose runs hold no
    eval epoch still gets its loss line."""
    from distgnn.report.plots import learning_curves, metric_name, _test_points

    root = tmp_path / "runs"
    for seed in range(3):
        write_run(root / str(seed), "libra", 2, "cd-0", rng=np.random.default_rng(seed))
    lines = [[json.loads(l) for l in (root / str(s) / "libra-2" / "cd-0" / "metrics.jsonl").read_text().splitlines()]
             for s in range(3)]
    assert _test_points(lines[0])[1] == [e["test"] for e in lines[0] if e.get("test") is not None]
    no_eval = [[{k: v for k, v in e.items() if k != "test"} for e in run] for run in lines]
    path = tmp_path / "figs" / "curves.png"
    learning_curves({"cd-0": lines, "0c": no_eval}, path, title="t", metric=metric_name(True))
    width, height = png_size(path)
    assert width > 800 and height > 300
    assert (metric_name(True), metric_name(False)) == ("ROC-AUC", "accuracy")


def test_a_run_without_evaluation_is_reported_as_such(tmp_path):
    """`eval_every: 0` (the CLI's and the config's "never evaluate"): the run has no accuracy,
    and the report says n/a where the accuracy would stand instead of failing on None."""
    root = tmp_path / "runs"
    write_run(root, "libra", 1, "cd-0")
    run = root / "libra-2" / "cd-0"
    write_run(root, "libra", 2, "cd-0")
    summary = json.loads((run / "summary.json").read_text())
    summary.update(best_val=None, test_at_best_val=None, final_test=None)
    (run / "summary.json").write_text(json.dumps(summary))
    metrics = [{k: v for k, v in json.loads(line).items() if k not in ("train", "val", "test")}
               for line in (run / "metrics.jsonl").read_text().splitlines()]
    (run / "metrics.jsonl").write_text("".join(json.dumps(m) + "\n" for m in metrics))
    make_report(root, tmp_path / "out")
    table = (tmp_path / "out" / "summary.md").read_text()
    row = next(line for line in table.splitlines() if line.startswith("| libra | 2 | cd-0"))
    assert [cell.strip() for cell in row.split("|")].count("n/a") == 2, row


def test_placement_counts_threads_against_each_hosts_cpus() -> None:
    from distgnn.train.telemetry import placement

    # mpiexec without binding: 4 ranks x 1 thread, each free on both CPUs of one host
    got = placement(["vm"] * 4, [[0, 1]] * 4, [1] * 4)
    assert got["oversubscribed"] and got["cpus_by_host"] == {"vm": 2} and got["threads_by_host"] == {"vm": 4}
    # srun binding each rank to its own core: 2 ranks x 1 thread on 2 CPUs
    assert not placement(["n1", "n1"], [[0], [1]], [1, 1])["oversubscribed"]
    # two hosts, one of them over: 2 threads on a 1-CPU host
    got = placement(["mh1", "mh2"], [[0, 1], [0]], [2, 2])
    assert got["oversubscribed"] and got["cpus_by_host"] == {"mh1": 2, "mh2": 1}


def test_oversubscribed_runs_are_marked_in_the_table(tmp_path):
    """A run whose host ran more threads than CPUs carries the mark beside its epoch time, with a
    line saying what it means; the others (and runs from before it was recorded) carry none."""
    root = tmp_path / "runs"
    for parts in (1, 2, 4):
        write_run(root, "libra", parts, "cd-0")
    run = root / "libra-4" / "cd-0"
    summary = json.loads((run / "summary.json").read_text())
    summary["placement"] = {"threads_by_rank": [1] * 4, "cpus_by_host": {"vm": 2},
                            "threads_by_host": {"vm": 4}, "oversubscribed": True}
    (run / "summary.json").write_text(json.dumps(summary))
    make_report(root, tmp_path / "out")
    table = (tmp_path / "out" / "summary.md").read_text().splitlines()
    rows = {int(line.split("|")[2]): line for line in table if line.startswith("| libra |")}
    assert "(oversubscribed)" in rows[4].split("|")[8] and "(oversubscribed)" not in rows[1] + rows[2]
    assert any(line.startswith("(oversubscribed): a host ran more threads than it has CPUs")
               for line in table)
    assert pd.read_csv(tmp_path / "out" / "summary.csv").set_index("num_parts").oversubscribed.to_dict() \
        == {1: False, 2: False, 4: True}


def test_a_ranks_cpus_are_its_threads_not_its_main_threads_pinned_core() -> None:
    """Under OMP_PROC_BIND=close OpenMP pins the main thread to one core: the CPUs recorded for
    a rank are the union over its threads, so a 2-thread rank on 2 cores is not taken for
    oversubscribed (the demo's P = 1 rows were)."""
    import os
    import subprocess
    import sys

    cores = sorted(os.sched_getaffinity(0))[:2]
    script = ("import json, os, torch\nfrom distgnn.train.telemetry import process_cpus\n"
              "x = torch.randn(1500, 1500); (x @ x).sum()\n"
              "print(json.dumps([sorted(os.sched_getaffinity(0)), process_cpus()]))")
    env = {**os.environ, "OMP_NUM_THREADS": str(len(cores)), "OMP_PROC_BIND": "close",
           "OMP_PLACES": "cores"}
    out = subprocess.run(["taskset", "-c", ",".join(map(str, cores)), sys.executable, "-c", script],
                         env=env, capture_output=True, text=True, check=True).stdout
    main_thread, union = json.loads(out)
    assert union == cores, (main_thread, union)
