"""How split vertices' rows move between ranks: the exchange of every aggregation.

Who imports whom (each module only from those listed after it; no cycles)::

    factory ─┬─> root ─────┬─> attention_delayed ─┐
             │             ├─> recompute          │
             │             ├─> delayed_sum ───────┼─> schedule ─> mailbox, plans
             │             ├─> attention_exact ───┤
             └─> replicas ─┴──────────────────────┴─> collectives ─> plans
                            local_sum ─> norms ─> collectives
    spec      (the run's resolved exchange: ExchangeSpec; pure Python) ─> rules
    rules     (the delayed-update rules at the root and their registry; pure Python at import)
    protocol  (the Aggregation both modes implement, their shared base) ─> mailbox
    settled   (constant layers' kept aggregates; imports nothing of the package)

Only :mod:`distgnn.comm` touches MPI; this package calls its typed wrappers. Importing the
package loads no torch (the CLI reads :mod:`~distgnn.exchange.rules` and
:mod:`~distgnn.exchange.spec` while it parses); its members below load on first use. The design,
with the rules each mode follows: docs/design.md#exchange-architecture.
"""
from __future__ import annotations

import importlib
from typing import Any

#: the package's public members and the module each one lives in
_MEMBERS = {"Aggregation": "protocol", "ReplicaAggregation": "replicas",
            "RootAggregation": "root", "build_aggregation": "factory"}

__all__ = sorted(_MEMBERS)


def __getattr__(name: str) -> Any:
    if name in _MEMBERS:
        return getattr(importlib.import_module(f"distgnn.exchange.{_MEMBERS[name]}"), name)
    raise AttributeError(f"module 'distgnn.exchange' has no attribute {name!r}")
