"""The models ``distgnn train --model`` builds, and the contract a user's own model follows
(:mod:`distgnn.models.base`): a model is handed its aggregation and dropout and knows nothing
about graphs, partitions or MPI.

Importing this package loads no torch: the registry (:mod:`distgnn.models.registry`) and
:func:`build_model` are torch-free, and the torch modules (``GraphSAGE``, ``GCN``, ...) are
imported from their files at first use."""
from __future__ import annotations

import importlib
from typing import Any

from distgnn.models.registry import (BUILT_IN, DEFAULT_MODEL, ModelOption, ModelSpec, build_model,
                                     register, unregister)
from distgnn.vocabulary import AGGREGATORS, NORMS

#: the torch names this package offers, by the module that defines them (imported at first use)
_TORCH_NAMES = {"AggregateFn": "base", "DropoutFn": "base", "LayerStack": "base",
                "linear_first": "base", "GAT": "gat", "GATLayer": "gat", "GCN": "gcn",
                "GCNLayer": "gcn", "GIN": "gin", "GINLayer": "gin", "GraphSAGE": "sage",
                "SAGELayer": "sage"}

__all__ = ["AGGREGATORS", "BUILT_IN", "DEFAULT_MODEL", "NORMS", "ModelOption", "ModelSpec", "build_model", "register",
           "unregister", *sorted(_TORCH_NAMES)]


def __getattr__(name: str) -> Any:
    if name in _TORCH_NAMES:
        return getattr(importlib.import_module(f"distgnn.models.{_TORCH_NAMES[name]}"), name)
    raise AttributeError(f"module 'distgnn.models' has no attribute {name!r}")
