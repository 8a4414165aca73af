"""Command-line options several commands share, and their checks (pure Python: no torch)."""
from __future__ import annotations

import argparse
import os
from pathlib import Path

from distgnn.errors import DistgnnError


def add_threads_option(p: argparse.ArgumentParser, what: str, default: int | None = 0,
                       default_help: str = "all") -> None:
    """``--threads T``: ``what`` (e.g. "threads per rank"); 0 means all cores (OpenMP's and
    torch's default), a negative count is refused by :func:`check_threads`."""
    p.add_argument("--threads", type=int, default=default, metavar="T",
                   help=f"{what} (0: all cores; default: {default_help})")


def add_fresh_copies_options(p: argparse.ArgumentParser, on_help: str, off_help: str) -> None:
    """``--fresh-copies`` / ``--no-fresh-copies`` into ``fresh_copies``: True, False, or None when
    neither is given (the run's default: on for attention under cd-<r> at the root,
    docs/design.md#fresh-copies)."""
    copies = p.add_mutually_exclusive_group()
    copies.add_argument("--fresh-copies", dest="fresh_copies", action="store_true", default=None,
                        help=on_help)
    copies.add_argument("--no-fresh-copies", dest="fresh_copies", action="store_false",
                        default=None, help=off_help)


def check_threads(threads: int | None) -> None:
    """Refuse a negative ``--threads`` in one line (None: not given, the command's default)."""
    if threads is not None and threads < 0:
        raise DistgnnError(f"--threads must be >= 0 (0: all cores), got {threads}")


def existing_path(path: str | os.PathLike) -> Path:
    """``path`` when it exists; else one line saying it does not (before any message about
    what the path should have held)."""
    path = Path(path)
    if not path.exists():
        raise DistgnnError(f"{path}: no such file or folder")
    return path
