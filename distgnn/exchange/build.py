"""The one place that chooses and builds a run's aggregation."""
from __future__ import annotations

from distgnn.comm import Communicator
from distgnn.exchange.protocol import Aggregation
from distgnn.exchange.replicas import ReplicaAggregation
from distgnn.exchange.root import RootAggregation
from distgnn.train.partition_data import PartitionData
from distgnn.train.timers import Timers
from distgnn.vocabulary import Algorithm


def build_aggregation(part: PartitionData, algorithm: Algorithm, apply: str, norm: str,
                      comm: Communicator, eval_comm: Communicator, timers: Timers, threads: int,
                      aggregates_first: bool, input_cache: bool, delayed_gradients: bool,
                      fresh_copies: bool, warm: bool = False,
                      present: bool = False, recompute: bool = False,
                      recompute_budget: float | None = None) -> Aggregation:
    """The aggregation of ``apply`` (``root`` or ``replicas``) for ``algorithm``.

    ``aggregates_first``: layer 0 aggregates its input before any map, so under ``root`` it
    reads the stored features, which every replica has (nothing is broadcast). With
    ``input_cache`` on, a layer 0 whose input is constant in training keeps its own aggregate
    once it settles (docs/design.md#degrees): under ``root`` for cd-r, under ``replicas`` for 0c
    and cd-r (:meth:`Algorithm.keeps_own_input_aggregate`). ``warm`` (cd-r under ``root``,
    ``--cdr-rule warm``): each summed layer's first r steps run cd-0's exchange; ``present``
    (``--cdr-rule present``): early aggregates scaled to the rows present; ``recompute``
    (``--cdr-rule recompute``): the leaves compute layer 1's source rows themselves (at most
    ``recompute_budget`` times the roots of rows, ``--recompute-budget``).
    """
    if apply == "root":
        stored = frozenset({0}) if aggregates_first else frozenset()
        return RootAggregation(part, norm, comm, eval_comm, timers, threads, stored,
                               algorithm.delay, stored if input_cache else frozenset(),
                               delayed_gradients, fresh_copies, warm, present, recompute,
                               recompute_budget)
    constant = frozenset({0}) if input_cache and algorithm.keeps_own_input_aggregate(
        comm.size, aggregates_first) else frozenset()
    return ReplicaAggregation(part, algorithm, norm, comm, eval_comm, timers, threads, constant)
