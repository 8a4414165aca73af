"""How split vertices' rows move between ranks: the exchange of every aggregation.

Who imports whom (each module only from those listed after it; no cycles)::

    build ─┬─> root ─────┬─> attention_delayed ─┐
           │             ├─> warm ─> delayed_sum, collectives, local_sum
           │             ├─> present ─> delayed_sum, schedule, collectives, local_sum
           │             ├─> delayed_sum ───────┼─> schedule ─> mailbox, plans
           │             ├─> attention_exact ───┤
           └─> replicas ─┴──────────────────────┴─> collectives ─> plans
                          local_sum ─> norms ─> collectives
    protocol  (the Aggregation both modes implement, their shared base) ─> mailbox
    settled   (constant layers' kept aggregates; imports nothing of the package)

Only :mod:`distgnn.comm` touches MPI; this package calls its typed wrappers. The design, with the
rules each mode follows: docs/design.md#exchange-architecture.
"""
from distgnn.exchange.build import build_aggregation
from distgnn.exchange.protocol import Aggregation
from distgnn.exchange.replicas import ReplicaAggregation
from distgnn.exchange.root import RootAggregation

__all__ = ["Aggregation", "ReplicaAggregation", "RootAggregation", "build_aggregation"]
