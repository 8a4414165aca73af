"""Long stages (fetch, partition assign, partition build) at papers100M size: refused before any
work, in one line, when their memory or disk would not fit (docs/design.md#preflight); and an
interrupted stage leaves nothing that looks complete."""
from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import partitioned_twin, run_cli, sigint_at_default
from distgnn import preflight
from distgnn.cli import main
from distgnn.data.fetch import fetch
from distgnn.errors import DistgnnError
from distgnn.preflight import GiB, StageNeeds, assign_needs, check


def needs(memory: int, disk: int, where: Path) -> StageNeeds:
    return StageNeeds("stage x", memory, disk, where, "what holds memory", "what fills disk")


def test_check_names_what_is_short_and_by_how_much(tmp_path: Path) -> None:
    line = check(needs(2 * GiB, 3 * GiB, tmp_path), (4 * GiB, "a test budget"), 5 * GiB)
    assert line == ("stage x: needs about 2.0 GiB of memory (4.0 GiB available) and 3.0 GiB of "
                    "disk (5.0 GiB free)")
    with pytest.raises(DistgnnError) as memory:
        check(needs(5 * GiB, 1, tmp_path), (4 * GiB, "a test budget"), 5 * GiB)
    assert ("needs about 5.0 GiB of memory (what holds memory), 4.0 GiB available (a test budget)"
            in str(memory.value)) and "--no-preflight" in str(memory.value)
    with pytest.raises(DistgnnError) as disk:
        check(needs(1, 6 * GiB, tmp_path), (4 * GiB, "a test budget"), 5 * GiB)
    assert f"6.0 GiB of disk under {tmp_path} (what fills disk), 5.0 GiB free" in str(disk.value)
    # an unknown memory budget checks the disk alone
    assert check(needs(10**15, 1, tmp_path), (0, ""), 5 * GiB)


def test_hdrf_shuffled_stops_fitting_at_papers_size_and_the_stream_does_not() -> None:
    """At papers100M size (111M vertices, 1.6B edges, P = 128) the shuffled stream needs more
    than this kind of machine's 22 GiB; the streamed store order about 6 GiB."""
    n, e = 111_059_956, 1_615_685_872
    shuffled = assign_needs("a", Path("."), n, e, 128, True, False, 1 << 24).memory
    streamed = assign_needs("a", Path("."), n, e, 128, False, False, 1 << 24).memory
    assert shuffled > 22 * GiB and streamed < 8 * GiB
    assert shuffled - streamed >= 11 * e  # every source, the permutation and the destinations


def test_a_fetch_that_cannot_fit_is_one_line_before_any_work(tmp_path: Path) -> None:
    start = time.perf_counter()
    proc = run_cli("fetch", "synth-papers100M", "--scale", 100, "--root", tmp_path / "data")
    assert proc.returncode == 2, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr
    assert "fetch synth-papers100M: needs about" in proc.stderr and "GiB available" in proc.stderr
    assert time.perf_counter() - start < 60  # refused from the sizes, before a vertex is drawn
    assert not (tmp_path / "data").exists()


def test_assign_and_build_refuse_what_does_not_fit(tmp_path: Path, monkeypatch, capsys) -> None:
    graph, _ = partitioned_twin(tmp_path, 2)
    out = tmp_path / "p4"
    capsys.readouterr()
    monkeypatch.setattr("distgnn.host_memory.memory_budget", lambda: (1 << 20, "a test budget"))
    assert main(["partition", "assign", str(graph), "--parts", "4", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "partition assign libra P=4: needs about" in err[0]
    assert "1.0 MiB available (a test budget)" in err[0]
    assert not (out / "assignment.zarr").exists()
    assert main(["partition", "assign", str(graph), "--parts", "4", "--out", str(out),
                 "--no-preflight", "--quiet"]) == 0
    capsys.readouterr()
    monkeypatch.setattr("distgnn.host_memory.memory_budget", lambda: (1 << 40, "plenty"))
    monkeypatch.setattr(preflight, "free_disk_bytes", lambda path: 1000)
    assert main(["partition", "build", str(out), "--part", "0"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"needs about" in err[0] and f"of disk under {out}" in err[0]
    assert not (out / "part_0.zarr").exists()
    assert main(["partition", "build", str(out), "--part", "0", "--no-preflight", "--quiet"]) == 0
    assert (out / "part_0.zarr").is_dir()


def hidden(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.startswith(".")) if folder.exists() else []


@pytest.mark.parametrize("stage", ["fetch", "assign"])
def test_ctrl_c_mid_stage_leaves_nothing_that_looks_complete(tmp_path: Path, stage: str) -> None:
    """SIGINT while the stage writes: 'interrupted', exit 130, no store and no temporaries."""
    if stage == "fetch":
        out = tmp_path / "data" / "synth-papers100M-x0.02"
        cmd = ["fetch", "synth-papers100M", "--scale", "0.02", "--root", tmp_path / "data",
               "--threads", "1", "--quiet"]
        final = out / "graph.zarr"
    else:
        graph = fetch("synth-papers100M", root=tmp_path / "data", scale=0.005, threads=1)
        out = tmp_path / "hdrf"
        cmd = ["partition", "assign", graph, "--parts", "128", "--method", "hdrf", "--out", out,
               "--threads", "1", "--quiet"]
        final = out / "assignment.zarr"
    proc = subprocess.Popen([sys.executable, "-m", "distgnn", *map(str, cmd)], text=True,
                            stderr=subprocess.PIPE, preexec_fn=sigint_at_default)
    deadline = time.monotonic() + 60
    while stage == "fetch" and not hidden(out) and time.monotonic() < deadline:
        time.sleep(0.05)  # its temporary store and edge spool exist
    time.sleep(2.5)  # fetch: drawing edges; assign: streaming them (after the imports)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert err.strip().splitlines()[-1].endswith("interrupted")
    assert not final.exists()
    assert hidden(out) == []


def test_partition_of_a_store_folder_points_at_its_graph_zarr(tmp_path: Path) -> None:
    graph = fetch("synth-reddit", root=tmp_path / "data", scale=0.002, threads=1)
    proc = run_cli("partition", graph.parent, "--parts", 2, "--out", tmp_path / "p")
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1
    assert f"{graph.parent}: not a zarr store" in proc.stderr and "holds graph.zarr" in proc.stderr
