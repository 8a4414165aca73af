"""The one place that chooses and builds a run's aggregation, from its exchange spec."""
from __future__ import annotations

from distgnn.comm import Communicator
from distgnn.exchange.protocol import Aggregation
from distgnn.exchange.replicas import ReplicaAggregation
from distgnn.exchange.root import RootAggregation
from distgnn.exchange.spec import ExchangeSpec
from distgnn.partition.part_loader import PartitionData
from distgnn.timers import Timers


def build_aggregation(part: PartitionData, exchange: ExchangeSpec, norm: str, comm: Communicator,
                      eval_comm: Communicator, timers: Timers, threads: int = 0,
                      aggregates_first: bool = False, recompute: bool = False) -> Aggregation:
    """The aggregation of ``exchange.apply`` (``root`` or ``replicas``) for the run ``exchange``
    describes (collective: plans and schedules are agreed between ranks).

    ``norm``: the model's aggregate normalisation. ``aggregates_first``: layer 0 aggregates its
    input before any map, so under ``root`` it reads the stored features, which every replica has
    (nothing is broadcast); with the input cache on, a layer 0 whose input is constant in
    training keeps its own aggregate once it settles (docs/design.md#degrees): under ``root`` for
    cd-r, under ``replicas`` for 0c and cd-r (:meth:`Algorithm.keeps_own_input_aggregate`).
    ``recompute``: the leaves recompute layer 1's source rows (the spec says so and the model is
    a built-in layer stack).
    """
    if exchange.at_root:
        stored = frozenset({0}) if aggregates_first else frozenset()
        return RootAggregation(part, norm, comm, eval_comm, timers, threads, stored, exchange,
                               stored if exchange.input_cache else frozenset(), recompute)
    constant = frozenset({0}) if exchange.input_cache and exchange.algorithm.keeps_own_input_aggregate(
        comm.size, aggregates_first) else frozenset()
    return ReplicaAggregation(part, exchange.algorithm, norm, comm, eval_comm, timers, threads,
                              constant)
