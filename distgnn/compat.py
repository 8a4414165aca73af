"""The one place that imports DGL (an optional baseline, never on the hot path).

DGL 1.1.3 is the newest DGL that imports beside current PyTorch. When the ``packaging`` module is
missing it falls back to ``setuptools.extern.packaging``, which setuptools >= 70 removed (torch
2.13 wants setuptools >= 77); we provide that alias before importing it.
"""
from __future__ import annotations

import importlib
import os
import sys
import types
from typing import Any

from distgnn.errors import DistgnnError


def _alias_setuptools_packaging() -> None:
    try:
        importlib.import_module("setuptools.extern.packaging")
        return
    except ImportError:
        pass
    import packaging
    import packaging.version

    extern = sys.modules.get("setuptools.extern")
    if extern is None:
        extern = types.ModuleType("setuptools.extern")
        extern.__path__ = []  # a package, so submodule imports resolve through sys.modules
        sys.modules["setuptools.extern"] = extern
    extern.packaging = packaging
    sys.modules["setuptools.extern.packaging"] = packaging
    sys.modules["setuptools.extern.packaging.version"] = packaging.version


def import_dgl() -> Any:
    """Import and return ``dgl`` (PyTorch backend), or raise a one-line error naming the extra."""
    os.environ.setdefault("DGLBACKEND", "pytorch")
    _alias_setuptools_packaging()
    try:
        return importlib.import_module("dgl")
    except ImportError as exc:
        raise DistgnnError(f"DGL is not installed ({exc}); install the baseline extra: "
                           f"pip install 'distgnn[baseline]'") from exc
