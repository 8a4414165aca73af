"""Write a report folder: summary.csv, summary.md and the PNG figures, each atomically."""
from __future__ import annotations

from pathlib import Path
from typing import Callable

from distgnn import atomic
from distgnn.report import plots
from distgnn.report.load import load_runs
from distgnn.report.table import markdown, summary_table

#: Files of every report, in the order they are written.
REPORT_FILES = ("summary.csv", "summary.md", "epoch_time.png", "test_vs_epoch.png",
                "test_vs_time.png", "replication.png")


def make_report(runs_dir: str | Path, out_dir: str | Path) -> list[Path]:
    """Read every run under ``runs_dir`` and write REPORT_FILES into ``out_dir``; return their paths."""
    runs = load_runs(runs_dir)
    table = summary_table(runs)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    writers: dict[str, Callable[[Path], None]] = {
        "summary.csv": lambda p: table.to_csv(p, index=False),
        "summary.md": lambda p: p.write_text(markdown(table)),
        "epoch_time.png": lambda p: plots.epoch_time(table, p),
        "test_vs_epoch.png": lambda p: plots.test_curves(runs, p, against="epoch"),
        "test_vs_time.png": lambda p: plots.test_curves(runs, p, against="time"),
        "replication.png": lambda p: plots.replication(table, p),
    }
    paths = []
    for name in REPORT_FILES:
        atomic.write_file(out / name, writers[name])
        paths.append(out / name)
    return paths
