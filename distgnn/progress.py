"""Progress bars for long work (tqdm), silenced globally by ``--quiet``."""
from __future__ import annotations

from typing import Any, Iterable

from tqdm.auto import tqdm

_quiet = False


def set_quiet(quiet: bool) -> None:
    """Silence (or restore) every progress bar in this process."""
    global _quiet
    _quiet = quiet


def is_quiet() -> bool:
    return _quiet


def progress(iterable: Iterable | None = None, **kwargs: Any) -> tqdm:
    """A tqdm bar that honours ``--quiet``; keyword arguments go to tqdm (desc, total, unit...)."""
    kwargs.setdefault("disable", _quiet)
    kwargs.setdefault("dynamic_ncols", True)
    kwargs.setdefault("leave", False)
    return tqdm(iterable, **kwargs)
