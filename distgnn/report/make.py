"""Write a report folder: summary.csv, summary.md and the PNG figures, each atomically."""
from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Callable

from distgnn.report import plots
from distgnn.report.load import load_runs
from distgnn.report.table import markdown, summary_table

#: Files of every report, in the order they are written.
REPORT_FILES = ("summary.csv", "summary.md", "epoch_time.png", "test_vs_epoch.png",
                "test_vs_time.png", "replication.png")


def current_umask() -> int:
    """The process's umask (reading it means setting it, so it is set back at once)."""
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_atomic(path: Path, write: Callable[[Path], None]) -> None:
    """Call ``write(tmp)`` on a temporary file beside ``path``, then rename it to ``path``."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=path.suffix)
    os.close(fd)
    os.chmod(tmp, 0o666 & ~current_umask())  # mkstemp makes 0600; a report is for the group too
    try:
        write(Path(tmp))
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


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
        write_atomic(out / name, writers[name])
        paths.append(out / name)
    return paths
