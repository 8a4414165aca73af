"""bench.cdr_sweep: the cells it runs (each family's recipe and draw), resuming a stopped sweep, and
the gap's distribution from the cells' figures (bench.algorithms' --json runs in
tests/test_bench_algorithms.py)."""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from bench import cdr_sweep


def cell(metric: str, **algos: tuple[list[float], float]) -> dict:
    return {"metric": metric, "replication_factor": 1.5,
            "algos": {a.replace("_", "-"): {"test": t, "bytes_per_epoch": b, "epoch_s": 0.1}
                      for a, (t, b) in algos.items()}}


def test_the_gap_its_worst_and_the_cells_below_0c_from_hand_made_cells() -> None:
    cells = {"a": cell("accuracy", cd_0=([0.80, 0.82], 100.0), cd_5=([0.79, 0.80], 20.0), **{"0c": ([0.70], 0.0)}),
             "b": cell("roc_auc", cd_0=([0.90], 100.0), cd_5=([0.85], 30.0), **{"0c": ([0.86], 0.0)})}
    rows, stats = cdr_sweep.summarize(cells, "cd-0", "cd-5", "0c")
    # a: 79.5 - 81.0 = -1.5, above 0c's 70; b: 85 - 90 = -5, below 0c's 86
    assert stats["cells"] == 2 and stats["below_floor"] == 1
    assert stats["mean_gap"] == pytest.approx(-3.25) and stats["worst_gap"] == pytest.approx(-5.0)
    assert stats["mean_bytes_fraction"] == pytest.approx(0.25)
    assert rows[0] == "| a | accuracy | 81.00 | 79.50 | 70.00 | -1.50 | no | 0.200 |"
    assert rows[1].endswith("| -5.00 | yes | 0.300 |") and "| roc_auc |" in rows[1]


def test_each_cell_runs_once_with_its_familys_recipe_and_draw(tmp_path: Path, monkeypatch, capsys) -> None:
    commands = []

    def fake_run(command, **kwargs):
        commands.append(command)
        out = Path(command[command.index("--json") + 1])
        out.write_text(json.dumps(cell("accuracy", cd_0=([0.8], 10.0), cd_5=([0.79], 2.0),
                                       **{"0c": ([0.7], 0.0)})))
        return subprocess.CompletedProcess(command, 0, "", "")

    monkeypatch.setattr(cdr_sweep.subprocess, "run", fake_run)
    argv = ["--work", str(tmp_path), "--families", "synth-papers100M", "--draws", "0", "1",
            "--models", "sage", "gat", "--parts", "4", "--seeds", "0", "1"]
    assert cdr_sweep.main(argv) == 0
    assert len(commands) == 4
    first = commands[0]
    recipe = cdr_sweep.FAMILIES["synth-papers100M"]
    assert first[first.index("--scale") + 1] == str(recipe.scale)
    assert first[first.index("--graph-seed") + 1] == "0" and commands[2][commands[2].index("--graph-seed") + 1] == "1"
    assert first[first.index("--work") + 1] == str(tmp_path / "synth-papers100M-d0")
    assert first[first.index("--method") + 1] == "random" and first[first.index("--seeds") + 1:][:2] == ["0", "1"]
    gat = commands[1]   # the model's options come after the family's: GAT's width and rate win
    assert gat[len(gat) - 1 - gat[::-1].index("--hidden") + 1] == "32"
    out = capsys.readouterr().out
    assert "4 cells: gap mean -1.00, worst -1.00 points; below 0c in 0; steady bytes 0.200" in out
    # a second sweep finds every cell's figures and runs nothing
    assert cdr_sweep.main(argv) == 0 and len(commands) == 4
    assert sorted(p.name for p in (tmp_path / "cells").iterdir()) == sorted(
        f"synth-papers100M-d{d}-{m}-P4.json" for d in (0, 1) for m in ("sage", "gat"))


def test_a_failed_cell_is_one_line_and_leaves_no_figures(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(cdr_sweep.subprocess, "run", lambda command, **kw: subprocess.CompletedProcess(
        command, 1, "", "Traceback ...\nRuntimeError: out of memory\n"))
    with pytest.raises(SystemExit, match=r"cell synth-reddit-d0-sage-P4 failed \(exit 1\): RuntimeError: out of memory"):
        cdr_sweep.main(["--work", str(tmp_path), "--families", "synth-reddit", "--draws", "0",
                        "--models", "sage", "--parts", "4"])
    assert not list((tmp_path / "cells").glob("*.json"))


def test_gat_runs_integer_widths_at_bf16_and_a_cell_missing_an_algorithm_runs_again(
        tmp_path: Path, monkeypatch, capsys) -> None:
    commands = []

    def fake_run(command, **kwargs):
        commands.append(command)
        algos = command[command.index("--algos") + 1:command.index("--algos") + 4]
        out = Path(command[command.index("--json") + 1])
        figures = {"cd-0": ([0.8], 10.0), "0c": ([0.7], 0.0)}
        figures.update({a: ([0.78], 1.0) for a in algos if a.startswith("cd-1")})
        out.write_text(json.dumps({"metric": "accuracy", "algos": {
            a: {"test": t, "bytes_per_epoch": b} for a, (t, b) in figures.items()}}))
        return subprocess.CompletedProcess(command, 0, "", "")

    monkeypatch.setattr(cdr_sweep.subprocess, "run", fake_run)
    argv = ["--work", str(tmp_path), "--families", "synth-reddit", "--draws", "0", "--models",
            "sage", "gat", "--parts", "4", "--algos", "cd-0", "cd-1+msg=int4", "0c"]
    assert cdr_sweep.main(argv) == 0
    ran = [c[c.index("--algos") + 1:c.index("--algos") + 4] for c in commands]
    assert ran == [["cd-0", "cd-1+msg=int4", "0c"], ["cd-0", "cd-1+msg=bf16", "0c"]]
    out = capsys.readouterr().out
    assert "2 cells: gap mean -2.00, worst -2.00 points; below 0c in 0; steady bytes 0.100" in out
    assert "| synth-reddit-d0-gat-P4 | accuracy | 80.00 | 78.00 | 70.00 | -2.00 | no | 0.100 |" in out
    # another width asked of the same cells: GraphSAGE's runs it alone and keeps the others'
    # figures; GAT's bf16 run stands for it
    assert cdr_sweep.main(argv[:-3] + ["cd-0", "cd-1+msg=int2", "0c"]) == 0 and len(commands) == 3
    assert commands[2][commands[2].index("--algos") + 1:][:2] == ["cd-1+msg=int2", "--model"]
    kept = json.loads((tmp_path / "cells" / "synth-reddit-d0-sage-P4.json").read_text())
    assert set(kept["algos"]) == {"cd-0", "cd-1+msg=int4", "cd-1+msg=int2", "0c"}
    # a row shows the algorithms asked for, in their order, not every one its cell holds
    assert "| synth-reddit-d0-sage-P4 | accuracy | 80.00 | 78.00 | 70.00 | -2.00 |" in capsys.readouterr().out
    # and asked again, nothing runs; other seeds run every algorithm again
    assert cdr_sweep.main(argv[:-3] + ["cd-0", "cd-1+msg=int2", "0c"]) == 0 and len(commands) == 3
    assert cdr_sweep.main(argv + ["--seeds", "5"]) == 0 and len(commands) == 5
    assert commands[3][commands[3].index("--algos") + 1:][:3] == ["cd-0", "cd-1+msg=int4", "0c"]


def test_two_integer_widths_run_gat_once_and_its_row_keeps_a_column_each(tmp_path: Path, monkeypatch,
                                                                          capsys) -> None:
    commands = []

    def fake_run(command, **kwargs):
        commands.append(command)
        out = Path(command[command.index("--json") + 1])
        out.write_text(json.dumps({"metric": "accuracy", "algos": {
            a: {"test": [t], "bytes_per_epoch": b}
            for a, t, b in (("cd-0", 0.8, 10.0), ("cd-1+msg=bf16", 0.79, 5.0), ("0c", 0.7, 0.0))}}))
        return subprocess.CompletedProcess(command, 0, "", "")

    monkeypatch.setattr(cdr_sweep.subprocess, "run", fake_run)
    assert cdr_sweep.main(["--work", str(tmp_path), "--families", "synth-reddit", "--draws", "0",
                           "--models", "gat", "--parts", "4", "--algos", "cd-0", "cd-1+msg=int4",
                           "cd-1+msg=int2", "0c"]) == 0
    [command] = commands
    assert command[command.index("--algos") + 1:][:4] == ["cd-0", "cd-1+msg=bf16", "0c", "--model"]
    row = "| synth-reddit-d0-gat-P4 | accuracy | 80.00 | 79.00 | 79.00 | 70.00 | -1.00 | no | 0.500 |"
    assert capsys.readouterr().out.count(row) == 2   # the tables of int4 and of int2
