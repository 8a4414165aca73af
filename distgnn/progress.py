"""Progress bars for long work (tqdm), silenced globally by ``--quiet``.

On a terminal: a live bar. Otherwise (a Slurm or Snakemake log file): from 30 s into the work, at
most one plain line every 30 s per bar, no carriage returns, so a log reads as lines."""
from __future__ import annotations

import sys
import time
from typing import Any, Iterable

from tqdm.auto import tqdm

_quiet = False


def set_quiet(quiet: bool) -> None:
    """Silence (or restore) every progress bar in this process."""
    global _quiet
    _quiet = quiet


def is_quiet() -> bool:
    return _quiet


class _LogLines:
    """A file for tqdm that turns its carriage-return redraws into whole lines on stderr, from
    ``quiet_s`` after the bar started (work that ends sooner leaves no line)."""

    def __init__(self, quiet_s: float = 30.0):
        self.start = time.monotonic()
        self.quiet_s = quiet_s

    def write(self, text: str) -> None:
        line = text.replace("\r", "").strip()
        if line and time.monotonic() - self.start >= self.quiet_s:
            sys.stderr.write(line + "\n")

    def flush(self) -> None:
        sys.stderr.flush()


def progress(iterable: Iterable | None = None, **kwargs: Any) -> tqdm:
    """A tqdm bar that honours ``--quiet``; keyword arguments go to tqdm (desc, total, unit...)."""
    kwargs.setdefault("disable", _quiet)
    kwargs.setdefault("leave", False)
    if sys.stderr.isatty():
        kwargs.setdefault("dynamic_ncols", True)
    else:
        kwargs.setdefault("file", _LogLines())
        kwargs.setdefault("mininterval", 30.0)
        kwargs.setdefault("ncols", 100)
        kwargs.setdefault("ascii", True)
    return tqdm(iterable, **kwargs)
